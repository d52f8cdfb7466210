#!/usr/bin/env bash
# fsck speed: fsck-jbdfs -fn against e2fsck -fn on the same image, side by side.
# A thin wrapper: the benchmark is scripts/bench/fsck.py (`bench-fsck.sh --help`).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)" cmdline="$(printf '%q ' "$0" "$@")"
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" BENCH_PROG="${0##*/}" BENCH_CMDLINE="$cmdline" \
    exec "${BENCH_PYTHON:-/usr/bin/python3}" -m bench fsck "$@"
