#!/usr/bin/env bash
# Source tree, compilebench-like (BENCHMARKS.md section 4): jbdfs beside Linux ext3 (and the FUSE floor).
# A thin wrapper: the benchmark is scripts/bench/tree.py (`bench-tree.sh --help`).
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)${PYTHONPATH:+:$PYTHONPATH}" \
    BENCH_PROG="${0##*/}" BENCH_CMDLINE="$(printf '%q ' "$0" "$@")"
exec "${BENCH_PYTHON:-/usr/bin/python3}" -m bench tree "$@"
