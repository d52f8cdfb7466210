#!/usr/bin/env bash
# Source tree, compilebench-like (BENCHMARKS.md section 4): jbdfs beside Linux ext3 (and the FUSE floor).
# A thin wrapper: the benchmark is scripts/bench/tree.py (`bench-tree.sh --help`).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)" cmdline="$(printf '%q ' "$0" "$@")"
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" BENCH_PROG="${0##*/}" BENCH_CMDLINE="$cmdline" \
    exec "${BENCH_PYTHON:-/usr/bin/python3}" -m bench tree "$@"
