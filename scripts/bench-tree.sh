#!/usr/bin/env bash
# Source tree, compilebench-like (BENCHMARKS.md section 4): the phases of
# scripts/bench-tree.py on jbdfs and on Linux ext3 (loop), in one run, on a
# ramdisk image and a disk image. Prints seconds per phase with the ratio
# jbdfs/ext3, and checks every image with e2fsck -fn.
#
#   scripts/bench-tree.sh [--quick] [--devices "ram disk"] [--files N]
#       [--repeat R] [--data MODE] [--opts JBDFS_OPTS] [--charts DIR] [--out FILE]
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=scripts/bench-lib.sh
. "$JBDFS_ROOT/scripts/bench-lib.sh"
# shellcheck source=scripts/lib-mount.sh
. "$JBDFS_ROOT/scripts/lib-mount.sh"

devices="ram disk"
files=3000
repeat=1
data=ordered
opts=""
charts=""
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) files=500 devices=ram ;;
        --devices) devices="$2"; shift ;;
        --files) files="$2"; shift ;;
        --repeat) repeat="$2"; shift ;;
        --data) data="$2"; shift ;;
        --opts) opts="$2"; shift ;;
        --charts) charts="$2"; shift ;;
        --out) out="$2"; shift ;;
        -h | --help) sed -n '2,9p' "$0"; exit 0 ;;
        *) die "unknown argument: $1" ;;
    esac
    shift
done
need_root "FUSE and loop mounts"
trap mnt_cleanup EXIT
build_jbdfs

results="${out:-$(mktemp /tmp/jbdfs-tree.XXXXXX.tsv)}"
: >"$results"
log="$(mktemp /tmp/jbdfs-tree.XXXXXX.log)"
info "raw results: $results; mount and fsck log: $log"

fsck_failed=()
for dev in $devices; do
    for r in $(seq 1 "$repeat"); do
        for fs in jbdfs ext3; do
            how=mke2fs
            [ "$fs" = jbdfs ] && how=mkfs-jbdfs
            bench_image img "$dev" "$how"
            new_mountpoint mnt jbdfs-tree
            bench_mount "$fs" "$dev" "$img" "$mnt" "$log" "$data" "$opts"
            info "$fs on $dev (run $r): $files files"
            "$BENCH_PYTHON" "$JBDFS_ROOT/scripts/bench-tree.py" run "$mnt" --files "$files" --drop-caches \
                | sed "s/^/$fs\t$dev\t/" | tee -a "$results" >&2
            bench_umount "$fs" "$mnt" "$img" "$log" || fsck_failed+=("$fs on $dev, run $r")
            rm -f "$img"
        done
    done
done

report=("$JBDFS_ROOT/scripts/bench-tree.py" report "$results")
[ -n "$charts" ] && report+=(--charts "$charts")
"$BENCH_PYTHON" "${report[@]}"
bench_fsck_summary "${fsck_failed[@]}"
