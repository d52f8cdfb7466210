#!/usr/bin/env bash
# jbdfs's main job, end to end, in one command:
#
#   scripts/demo.sh [--keep]
#
# Today it shows that mkfs.jbdfs makes a valid ext3 image and that the jbdfs
# daemon serves it:
#   1. installs what it needs (scripts/deps.sh) and builds release binaries;
#   2. makes a 256 MiB image under /dev/shm (or $TMPDIR) with mkfs-jbdfs;
#   3. checks it with e2fsprogs: `e2fsck -fn` must exit 0, `dumpe2fs -h` shows it;
#   4. as root with loop devices: mounts it with Linux's own ext3, writes a
#      file, unmounts, reads the file back with debugfs and runs e2fsck -fn again;
#   5. as root with /dev/fuse: mounts it through FUSE with the jbdfs daemon,
#      copies this repository's src/ tree in, unmounts, runs e2fsck -fn and
#      fsck.jbdfs, then checks with a Linux loop mount that the tree is the same.
# The image is removed at the end unless --keep is given.
#
# Still to come (the journal and benchmark issues): an fs_mark workload and the
# bdelay A/B table (bdelay=0|yield|N on ramdisk and the slow-device model).
#
# JBDFS_DEMO_MKFS, if set, replaces the mkfs command (split on spaces, then
# called as `CMD IMAGE 256M`); e.g. JBDFS_DEMO_MKFS="mke2fs -q -t ext3 -F"
# exercises the rest of the script against e2fsprogs' own mkfs.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$JBDFS_ROOT"

keep=0
for arg in "$@"; do
    case "$arg" in
        --keep) keep=1 ;;
        -h | --help) sed -n '2,22s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) die "unknown argument: $arg (usage: scripts/demo.sh [--keep])" ;;
    esac
done

if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    workdir=/dev/shm
else
    workdir="${TMPDIR:-/tmp}"
fi
image="$(mktemp "$workdir/jbdfs-demo.XXXXXX.img")"
mnt=""
mounted=0

cleanup() {
    if [ "$mounted" -eq 1 ]; then
        umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
    fi
    if [ -n "$mnt" ]; then
        rmdir "$mnt" 2>/dev/null || true
    fi
    if [ "$keep" -eq 1 ]; then
        info "kept the image: $image"
    else
        rm -f -- "$image"
    fi
}
trap cleanup EXIT

section "1. dependencies"
scripts/deps.sh

section "2. build (cargo build --release --workspace)"
cargo build --release --workspace

if [ -n "${JBDFS_DEMO_MKFS:-}" ]; then
    read -r -a mkfs <<<"$JBDFS_DEMO_MKFS"
else
    mkfs=(target/release/mkfs-jbdfs -F)
fi
section "3. make a 256 MiB image: ${mkfs[*]} $image 256M"
"${mkfs[@]}" "$image" 256M
size="$(stat -c %s "$image")"
[ "$size" -gt 0 ] || die "${mkfs[0]} left $image empty: is mkfs implemented yet?"
info "image size: $size bytes"

section "4. e2fsck -fn (must find nothing to fix)"
e2fsck -fn "$image"

section "5. dumpe2fs -h"
dumpe2fs -h "$image"

section "6. mount with Linux's ext3 (loop), write a file, unmount"
if ! is_root; then
    info "skipped: needs root"
elif ! have_loop; then
    info "skipped: no usable loop device (/dev/loop-control, losetup -f)"
else
    mnt="$(mktemp -d "${TMPDIR:-/tmp}/jbdfs-demo-mnt.XXXXXX")"
    mount -o loop -t ext3 "$image" "$mnt"
    mounted=1
    message="written by Linux ext3 on a jbdfs image, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    printf '%s\n' "$message" >"$mnt/hello.txt"
    mkdir "$mnt/dir"
    cp "$mnt/hello.txt" "$mnt/dir/copy.txt"
    sync
    ls -la "$mnt" "$mnt/dir"
    umount "$mnt"
    mounted=0

    section "7. read the file back with debugfs, then e2fsck -fn again"
    got="$(debugfs -R 'cat /hello.txt' "$image" 2>/dev/null)"
    [ "$got" = "$message" ] || die "debugfs read back '$got', expected '$message'"
    info "debugfs read back: $got"
    e2fsck -fn "$image"
fi

section "8. mount through FUSE with the jbdfs daemon, copy src/ in, unmount"
if ! is_root || [ ! -e /dev/fuse ]; then
    info "skipped: needs root and /dev/fuse"
else
    mnt="${mnt:-$(mktemp -d "${TMPDIR:-/tmp}/jbdfs-demo-mnt.XXXXXX")}"
    target/release/jbdfs "$image" "$mnt"
    mounted=1
    cp -r src "$mnt/src"
    df -h "$mnt"
    # Waits for the daemon to write the image back (see the script).
    scripts/umount.fuse.jbdfs "$mnt"
    mounted=0

    section "9. e2fsck -fn, fsck.jbdfs -fn, and the tree as Linux sees it"
    e2fsck -fn "$image"
    target/release/fsck-jbdfs -fn "$image"
    if have_loop; then
        mount -o loop,ro -t ext3 "$image" "$mnt"
        mounted=1
        diff -r src "$mnt/src"
        info "Linux's ext3 reads the same src/ tree that jbdfs wrote"
        umount "$mnt"
        mounted=0
    fi
fi

section "demo finished"
