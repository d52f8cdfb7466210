#!/usr/bin/env bash
# Everyday workloads on a real tree (issue 41): untar, cold read, find -ls, du -s, cp -a, rm -rf
# and git, on jbdfs (mount -t fuse.jbdfs, both transports) beside Linux ext3, fuse2fs and the
# FUSE floor, with the FUSE requests per file counted by the kernel's tracepoint.
# A thin wrapper: the benchmark is scripts/bench/everyday.py (`bench-everyday.sh --help`).
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)" cmdline="$(printf '%q ' "$0" "$@")"
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" BENCH_PROG="${0##*/}" BENCH_CMDLINE="$cmdline" \
    exec "${BENCH_PYTHON:-/usr/bin/python3}" -m bench everyday "$@"
