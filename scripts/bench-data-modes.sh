#!/usr/bin/env bash
# The data-mode A/B: fsync latency beside a bulk writer (the classic cost of
# ext3's data=ordered), jbdfs against Linux ext3 on a loop device, in one run.
#
#   scripts/bench-data-modes.sh [--dir DIR] [--runs N]
#
#   --dir DIR   where the images go (default /dev/shm: a ramdisk)
#   --runs N    runs per configuration; the table shows the median (default 3)
#
# For each of Linux ext3 and jbdfs, in data=ordered, writeback and journal: a new 2 GiB image, mount, run
# scripts/bench-fsync-vs-bulk.py, unmount, e2fsck -fn. Prints a Markdown
# table of fsyncs/s with jbdfs's ratio to Linux ext3 in the same mode.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
JBDFS_ROOT="$(repo_root)"
. "$JBDFS_ROOT/scripts/lib-mount.sh"
trap mnt_cleanup EXIT

dir=/dev/shm
runs=3
while [ $# -gt 0 ]; do
    case "$1" in
        --dir) dir="$2"; shift 2 ;;
        --runs) runs="$2"; shift 2 ;;
        -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done
need_root
build_jbdfs
JBDFS_WORKDIR="$dir"
log="$(mktemp "${TMPDIR:-/tmp}/bench-data-modes.XXXXXX.log")"
workload="$JBDFS_ROOT/scripts/bench-fsync-vs-bulk.py"

# one_run FS MODE: prints "fsyncs/s median_ms p90_ms" for one fresh image.
one_run() {
    local fs="$1" mode="$2" img mnt out
    new_image img 4096 2G mkfs-jbdfs
    new_mountpoint mnt bench-mnt
    if [ "$fs" = ext3 ]; then
        mount -t ext3 -o "loop,data=$mode" "$img" "$mnt"
        _MNT_KIND["$mnt"]=loop
    else
        mount_jbdfs "$img" "$mnt" "$log" "data=$mode"
    fi
    out="$(python3 "$workload" "$mnt")"
    if [ "$fs" = ext3 ]; then umount_ext3 "$mnt"; else umount_jbdfs "$mnt"; fi
    check_image "$img" "$log" || die "e2fsck found problems after $fs data=$mode"
    rm -f "$img"
    # "fsyncs/s 924  median 0.1 ms  p90 0.9 ms"
    awk '{print $2, $4, $7}' <<<"$out"
}

# median_of FS MODE: the run with the median fsyncs/s.
median_of() {
    local i
    for i in $(seq 1 "$runs"); do one_run "$1" "$2"; done | sort -n | sed -n "$(( (runs + 1) / 2 ))p"
}

declare -A result
for mode in ordered writeback journal; do
    info "Linux ext3 data=$mode"
    result["ext3 $mode"]="$(median_of ext3 "$mode")"
done
for mode in ordered writeback journal; do
    info "jbdfs data=$mode"
    result["jbdfs $mode"]="$(median_of jbdfs "$mode")"
done

echo
echo "fsync'd 4 KiB creates beside a bulk writer, images in $dir, median of $runs runs"
echo
echo "| data= | ext3 fsyncs/s | ext3 median / p90 ms | jbdfs fsyncs/s | jbdfs median / p90 ms | jbdfs / ext3 |"
echo "|---|---:|---:|---:|---:|---:|"
for mode in ordered writeback journal; do
    read -r jf jm jp <<<"${result["jbdfs $mode"]}"
    if [ -n "${result["ext3 $mode"]:-}" ]; then
        read -r ef em ep <<<"${result["ext3 $mode"]}"
        ratio="$(awk -v a="$jf" -v b="$ef" 'BEGIN { printf "%.2f", a / b }')"
        echo "| $mode | $ef | $em / $ep | $jf | $jm / $jp | $ratio |"
    else
        echo "| $mode | (not run) | | $jf | $jm / $jp | |"
    fi
done
