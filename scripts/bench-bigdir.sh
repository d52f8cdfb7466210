#!/usr/bin/env bash
# Large directories: does a create or lookup cost grow with the directory's size? jbdfs beside Linux ext3.
# A thin wrapper: the benchmark is scripts/bench/bigdir.py (`bench-bigdir.sh --help`).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)" cmdline="$(printf '%q ' "$0" "$@")"
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" BENCH_PROG="${0##*/}" BENCH_CMDLINE="$cmdline" \
    exec "${BENCH_PYTHON:-/usr/bin/python3}" -m bench bigdir "$@"
