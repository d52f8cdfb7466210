#!/usr/bin/env bash
# Sequential I/O (BENCHMARKS.md sections 2 and 3): bulk write with fsync, cold sequential read; --layout.
# A thin wrapper: the benchmark is scripts/bench/seqio.py (`bench-seqio.sh --help`).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)" cmdline="$(printf '%q ' "$0" "$@")"
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" BENCH_PROG="${0##*/}" BENCH_CMDLINE="$cmdline" \
    exec "${BENCH_PYTHON:-/usr/bin/python3}" -m bench seqio "$@"
