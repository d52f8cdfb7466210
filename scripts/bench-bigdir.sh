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
inodes=$((entries + 65536))
target/release/mkfs-jbdfs -q -F -N "$inodes" "$work/jbdfs.img" 4G
target/release/jbdfs "$work/jbdfs.img" "$mnt"
python3 scripts/bench-bigdir.py "$mnt" "$entries" "$batch"
pid="$(pgrep -nf "jbdfs $work/jbdfs.img" || true)"
[ -n "$pid" ] && info "jbdfs daemon peak memory: $(awk '/VmHWM/ {print $2, $3}' "/proc/$pid/status")"
scripts/umount.fuse.jbdfs "$mnt"
e2fsck -fn "$work/jbdfs.img" >/dev/null && info "e2fsck -fn: clean"
debugfs -R "stat /big" "$work/jbdfs.img" 2>/dev/null | grep -q "Flags: 0x1000" &&
    info "/big is htree-indexed"

section "Linux ext3 (loop mount) looking up in the directory jbdfs built"
mount -o loop -t ext3 "$work/jbdfs.img" "$mnt"
python3 - "$mnt/big" "$entries" <<'PY'
import os, random, sys, time
d, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(7)
probes = [rng.randrange(n) for _ in range(20000)]
t0 = time.perf_counter()
for i in probes:
    os.stat(os.path.join(d, f"entry-{i:07d}"))
print(f"stat of random names: {(time.perf_counter() - t0) / len(probes) * 1e6:.1f} µs/op")
PY
umount "$mnt"

section "Linux ext3 (loop mount), same workload"
mke2fs -q -F -t ext3 -N "$inodes" "$work/ext3.img" 4G
mount -o loop -t ext3 "$work/ext3.img" "$mnt"
python3 scripts/bench-bigdir.py "$mnt" "$entries" "$batch"
umount "$mnt"
