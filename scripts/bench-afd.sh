#!/usr/bin/env bash
# Many small files, afdbench-like (BENCHMARKS.md section 5): jbdfs beside Linux ext3 and fuse2fs.
# A thin wrapper: the benchmark is scripts/bench/afd.py (`bench-afd.sh --help`).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)" cmdline="$(printf '%q ' "$0" "$@")"
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" BENCH_PROG="${0##*/}" BENCH_CMDLINE="$cmdline" \
    exec "${BENCH_PYTHON:-/usr/bin/python3}" -m bench afd "$@"
