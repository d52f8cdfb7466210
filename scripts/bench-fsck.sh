#!/usr/bin/env bash
# fsck speed: fsck-jbdfs -fn against e2fsck -fn on the same image, side by side.
# A thin wrapper: the benchmark is scripts/bench/fsck.py (`bench-fsck.sh --help`).
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)${PYTHONPATH:+:$PYTHONPATH}" \
    BENCH_PROG="${0##*/}" BENCH_CMDLINE="$(printf '%q ' "$0" "$@")"
exec "${BENCH_PYTHON:-/usr/bin/python3}" -m bench fsck "$@"
