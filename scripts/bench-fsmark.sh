#!/usr/bin/env bash
# Small files with fsync (BENCHMARKS.md section 1): fs_mark on jbdfs beside ext3, fuse2fs, the FUSE floor.
# A thin wrapper: the benchmark is scripts/bench/fsmark.py (`bench-fsmark.sh --help`).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)" cmdline="$(printf '%q ' "$0" "$@")"
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" BENCH_PROG="${0##*/}" BENCH_CMDLINE="$cmdline" \
    exec "${BENCH_PYTHON:-/usr/bin/python3}" -m bench fsmark "$@"
