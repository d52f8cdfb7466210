#!/usr/bin/env bash
# The data-mode A/B: fsync latency beside a bulk writer, jbdfs beside Linux ext3, in each data mode.
# A thin wrapper: the benchmark is scripts/bench/datamodes.py (`bench-data-modes.sh --help`).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)" cmdline="$(printf '%q ' "$0" "$@")"
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" BENCH_PROG="${0##*/}" BENCH_CMDLINE="$cmdline" \
    exec "${BENCH_PYTHON:-/usr/bin/python3}" -m bench data-modes "$@"
