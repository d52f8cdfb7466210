#!/usr/bin/env bash
# Run fsx (the File System eXerciser, crates.io `fsx` 0.3) inside a jbdfs mount.
#
#   scripts/fsx.sh [OPTIONS]
#
#   -N OPS            operations per run (default 100000)
#   --seeds "S..."    seeds, one run each (default "1 2 3")
#   --block-sizes "B..."  image block sizes (default "4096 1024")
#   --flen BYTES      maximum file size (default 8388608: reaches the double
#                     indirect blocks with 4 KiB blocks)
#   --mount-opts OPTS extra jbdfs -o options (default none)
#   --logs DIR        where logs go (default a new directory in $JBDFS_WORKDIR)
#   --keep            keep the images
#
# For each block size: makes a 512 MiB image with mkfs-jbdfs; for each seed:
# mounts it with jbdfs, runs `fsx -N OPS -S SEED` on a file in it, unmounts
# with scripts/umount.fuse.jbdfs and checks the image with `e2fsck -fn`.
# The image is kept across the seeds of one block size, so each run also
# finds the earlier runs' files after a remount. fsx does pread/pwrite,
# mmap reads and writes, msync(MS_INVALIDATE), ftruncate, fsync, fdatasync,
# posix_fallocate (fallocate mode 0), sendfile, posix_fadvise,
# copy_file_range and close/reopen; punch_hole is off (ext3 cannot punch
# holes, nor can jbdfs). A failing run leaves fsx's log (with its LOG DUMP of
# the last operations) and the .fsxgood/.fsxbad files in the logs directory.
#
# Prints `fsx: N runs, F failed` and exits non-zero if any run, unmount or
# e2fsck failed. Needs root and /dev/fuse. See docs/PJDFSTEST.md.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=scripts/lib-mount.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib-mount.sh"

ops=100000
seeds="1 2 3"
block_sizes="4096 1024"
flen=8388608
mount_opts=""
logs=""
while [ $# -gt 0 ]; do
    case "$1" in
        -N) ops="$2"; shift ;;
        --seeds) seeds="$2"; shift ;;
        --block-sizes) block_sizes="$2"; shift ;;
        --flen) flen="$2"; shift ;;
        --mount-opts) mount_opts="$2"; shift ;;
        --logs) logs="$2"; shift ;;
        --keep) MNT_KEEP=1 ;;
        -h | --help) sed -n '2,30s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
    shift
done

need_root "fsx.sh (it mounts jbdfs)"
[ -e /dev/fuse ] || die "/dev/fuse is missing"
trap mnt_cleanup EXIT
trap 'exit 130' INT TERM HUP

section "tools"
fsx="$(tool_install fsx '^0.3')"
build_jbdfs
[ -n "$logs" ] || logs="$(mktemp -d "$JBDFS_WORKDIR/jbdfs-fsx-logs.XXXXXX")"
mkdir -p "$logs"
info "logs in $logs"

config="$logs/fsx.toml"
cat >"$config" <<EOF
# fsx configuration for jbdfs (scripts/fsx.sh)
flen = $flen

[opsize]
max = 65536
min = 0
align = 1

[weights]
close_open = 1
read = 10
write = 10
mapread = 10
mapwrite = 10
invalidate = 1
truncate = 2
fsync = 1
fdatasync = 1
posix_fallocate = 1
punch_hole = 0        # ext3 cannot punch holes (FALLOC_FL_PUNCH_HOLE)
sendfile = 1
posix_fadvise = 1
copy_file_range = 1
EOF

img=""
mnt=""
runs=0
failed=0
problems=()
for bs in $block_sizes; do
    section "fsx on a ${bs}-byte-block image"
    new_image img "$bs" 512M
    new_mountpoint mnt jbdfs-fsx-mnt
    for seed in $seeds; do
        runs=$((runs + 1))
        name="b$bs-s$seed"
        mount_jbdfs "$img" "$mnt" "$logs/jbdfs-$name.log" "$mount_opts"
        info "fsx -N $ops -S $seed ($name)"
        start=$SECONDS
        rc=0
        "$fsx" -f "$config" -N "$ops" -S "$seed" -P "$logs" "$mnt/fsx-$name" \
            >"$logs/fsx-$name.log" 2>&1 || rc=$?
        ok=1
        if [ "$rc" -eq 0 ]; then
            info "$name: passed in $((SECONDS - start)) s"
        else
            ok=0
            warn "$name: fsx exited with status $rc; last lines of $logs/fsx-$name.log:"
            tail -n 40 "$logs/fsx-$name.log" >&2
            problems+=("$name: fsx status $rc")
        fi
        if ! umount_jbdfs "$mnt"; then
            ok=0
            problems+=("$name: unmount failed")
        fi
        if ! check_image "$img" "$logs/e2fsck-$name.log"; then
            ok=0
            problems+=("$name: e2fsck -fn failed (see $logs/e2fsck-$name.log)")
        fi
        if grep -q 'panicked' "$logs/jbdfs-$name.log"; then
            ok=0
            grep -A3 'panicked' "$logs/jbdfs-$name.log" >&2
            problems+=("$name: jbdfs panicked (see $logs/jbdfs-$name.log)")
        fi
        [ "$ok" -eq 1 ] || failed=$((failed + 1))
    done
done

section "summary"
for p in "${problems[@]}"; do info "$p"; done
info "logs in $logs"
echo "fsx: $runs runs, $failed failed"
[ "$failed" -eq 0 ]
