#!/usr/bin/env bash
# Large directories: does the cost of creating or looking up one entry grow
# with the directory's size? Runs the same workload on jbdfs and on Linux ext3
# (loop mount) in one run and prints a table for each.
#
#   scripts/bench-bigdir.sh [--entries N] [--batch B]
#
# Lookups stat random existing names; jbdfs tells the kernel to cache entries
# for 1 s, so almost all of them reach the daemon.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh" # shellcheck source=scripts/lib.sh
cd "$JBDFS_ROOT"

entries=100000
batch=10000
while [ $# -gt 0 ]; do
    case "$1" in
        --entries) entries="$2"; shift ;;
        --batch) batch="$2"; shift ;;
        *) die "unknown argument: $1" ;;
    esac
    shift
done
is_root || die "needs root (FUSE and loop mounts)"

work="$(mktemp -d /dev/shm/jbdfs-bigdir.XXXXXX)"
mnt="$work/mnt"
mkdir -p "$mnt"
cleanup() {
    umount "$mnt" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

cargo build --release --workspace -q

section "jbdfs ($(nproc) cores, image in /dev/shm), $entries entries in one directory"
target/release/mkfs-jbdfs -q -F "$work/jbdfs.img" 2G
target/release/jbdfs "$work/jbdfs.img" "$mnt"
python3 scripts/bench-bigdir.py "$mnt" "$entries" "$batch"
scripts/umount.fuse.jbdfs "$mnt"
e2fsck -fn "$work/jbdfs.img" >/dev/null && info "e2fsck -fn: clean"

section "Linux ext3 (loop mount), same workload"
mke2fs -q -F -t ext3 "$work/ext3.img" 2G
mount -o loop -t ext3 "$work/ext3.img" "$mnt"
python3 scripts/bench-bigdir.py "$mnt" "$entries" "$batch"
umount "$mnt"
