#!/usr/bin/env bash
# Many small files, afdbench-like (BENCHMARKS.md section 5): the phases of
# scripts/bench-afd.py (create, link, rename, delete; several processes) on
# jbdfs, Linux ext3 (loop) and fuse2fs, in one run, on a ramdisk image and a
# disk image. Prints files/s per phase with ratios, and checks every image
# with e2fsck -fn.
#
#   scripts/bench-afd.sh [--quick] [--devices "ram disk"] [--files N] [--procs P]
#       [--repeat R] [--data MODE] [--opts JBDFS_OPTS] [--charts DIR] [--out FILE]
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=scripts/bench-lib.sh
. "$JBDFS_ROOT/scripts/bench-lib.sh"
# shellcheck source=scripts/lib-mount.sh
. "$JBDFS_ROOT/scripts/lib-mount.sh"

devices="ram disk"
files=5000
procs=4
repeat=1
data=ordered
opts=""
charts=""
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) files=500 devices=ram ;;
        --procs) procs="$2"; shift ;;
        --devices) devices="$2"; shift ;;
        --files) files="$2"; shift ;;
        --repeat) repeat="$2"; shift ;;
        --data) data="$2"; shift ;;
        --opts) opts="$2"; shift ;;
        --charts) charts="$2"; shift ;;
        --out) out="$2"; shift ;;
        -h | --help) sed -n '2,10p' "$0"; exit 0 ;;
        *) die "unknown argument: $1" ;;
    esac
    shift
done
need_root "FUSE and loop mounts"
trap mnt_cleanup EXIT
build_jbdfs

results="${out:-$(mktemp /tmp/jbdfs-afd.XXXXXX.tsv)}"
: >"$results"
log="$(mktemp /tmp/jbdfs-afd.XXXXXX.log)"
info "raw results: $results; mount and fsck log: $log"

bench_workload "ext3 fuse2fs" "$data" "$opts" "$results" "$log" "$repeat" "$devices" \
    "$BENCH_PYTHON" "$JBDFS_ROOT/scripts/bench-afd.py" run --files "$files" --procs "$procs"

report=("$JBDFS_ROOT/scripts/bench-afd.py" report "$results")
[ -n "$charts" ] && report+=(--charts "$charts")
"$BENCH_PYTHON" "${report[@]}"
bench_fsck_summary "${BENCH_FSCK_FAILED[@]}"
