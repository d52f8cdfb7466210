# shellcheck shell=bash
# Helpers shared by the benchmark scripts (bench-fsmark.sh, bench-tree.sh,
# bench-afd.sh, ab.sh). Source it after lib.sh and before lib-mount.sh
# (it tells lib-mount.sh where cargo put the binaries):
#
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#   . "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh"
#   . "$(dirname "${BASH_SOURCE[0]}")/lib-mount.sh"
#
# Backing stores: "ram" and the emulated devices ("array", "sata") put the
# image in /dev/shm; "disk" puts it in $BENCH_DISK_DIR (default /var/tmp,
# on the machine's disk). Only ram and disk have Linux ext3 and fuse2fs
# references: the kernel cannot run on jbdfs's latency model.
#
# Environment:
#   BENCH_DISK_DIR   directory on the disk for "disk" images (default /var/tmp)
#   BENCH_IMAGE_SIZE image size (default 2G; sparse)

# The binaries are where cargo puts them, honouring CARGO_TARGET_DIR.
JBDFS_BIN_DIR="${JBDFS_BIN_DIR:-${CARGO_TARGET_DIR:-$JBDFS_ROOT/target}/release}"
BENCH_DISK_DIR="${BENCH_DISK_DIR:-/var/tmp}"
BENCH_IMAGE_SIZE="${BENCH_IMAGE_SIZE:-2G}"
# The Python with matplotlib: Debian's, not a pyenv shim in front of it.
BENCH_PYTHON="${BENCH_PYTHON:-$(command -v /usr/bin/python3 || command -v python3)}"

# bench_workdir DEVICE: where the image for DEVICE goes.
bench_workdir() {
    case "$1" in
        disk) printf '%s\n' "$BENCH_DISK_DIR" ;;
        ram | array | sata) printf '%s\n' /dev/shm ;;
        *) die "unknown device $1 (expected ram, disk, array or sata)" ;;
    esac
}

# bench_devsim_opt DEVICE: the jbdfs mount option that emulates DEVICE
# (nothing for the real backing stores).
bench_devsim_opt() {
    case "$1" in
        array | sata) printf 'devsim=%s\n' "$1" ;;
        *) printf '\n' ;;
    esac
}

# bench_image VAR DEVICE MKFS: a fresh ext3 image for DEVICE, made by MKFS
# (mkfs-jbdfs or mke2fs), removed at cleanup.
bench_image() {
    local _saved="$JBDFS_WORKDIR"
    JBDFS_WORKDIR="$(bench_workdir "$2")"
    new_image "$1" 4096 "$BENCH_IMAGE_SIZE" "$3"
    JBDFS_WORKDIR="$_saved"
}

# bench_build_floor: build the FUSE floor (daemon/examples/fuse_floor.rs) unless
# JBDFS_NO_BUILD=1, and make sure it is there, for scripts given --floor.
bench_build_floor() {
    if [ "${JBDFS_NO_BUILD:-0}" != 1 ]; then
        (cd "$JBDFS_ROOT" && cargo build --quiet --release -p jbdfs-daemon --example fuse_floor) >&2 \
            || die "building daemon/examples/fuse_floor.rs failed"
    fi
    [ -x "$JBDFS_BIN_DIR/examples/fuse_floor" ] || die "$JBDFS_BIN_DIR/examples/fuse_floor not found"
}

# bench_mount FS DEVICE IMAGE DIR LOG DATA [JBDFS_OPTS]: mount IMAGE on DIR
# with jbdfs, Linux ext3 (loop) or fuse2fs, in data mode DATA; or mount the
# FUSE floor (daemon/examples/fuse_floor.rs: no storage at all) on DIR.
bench_mount() {
    local fs="$1" dev="$2" img="$3" dir="$4" log="$5" data="$6" extra="${7:-}" opts
    case "$fs" in
        jbdfs)
            opts="data=$data"
            [ -n "$(bench_devsim_opt "$dev")" ] && opts="$opts,$(bench_devsim_opt "$dev")"
            [ -n "$extra" ] && opts="$opts,$extra"
            mount_jbdfs "$img" "$dir" "$log" "$opts"
            ;;
        ext3)
            have_loop || die "no usable loop device for the Linux ext3 reference"
            mount -t ext3 -o "loop,data=$data" "$img" "$dir" || die "mount -o loop $img failed"
            _MNT_KIND["$dir"]=loop
            ;;
        floor)
            # No storage: the image is made and checked only so that every
            # filesystem runs the same steps.
            "$JBDFS_BIN_DIR/examples/fuse_floor" "$dir" >>"$log" 2>&1 &
            _MNT_KIND["$dir"]=floor
            _MNT_PID["$dir"]=$!
            for _ in $(seq 1 100); do
                mountpoint -q "$dir" && break
                sleep 0.1
            done
            mountpoint -q "$dir" || die "fuse_floor did not mount on $dir (log: $log)"
            ;;
        fuse2fs)
            # fuse2fs daemonizes; it does not write its journal.
            fuse2fs "$img" "$dir" >>"$log" 2>&1 || die "fuse2fs $img failed (log: $log)"
            _MNT_KIND["$dir"]=fuse2fs
            ;;
        *) die "unknown filesystem $fs" ;;
    esac
}

# bench_umount FS DIR IMAGE LOG: unmount, wait for a FUSE daemon to let go
# of the image, and e2fsck -fn it. Returns e2fsck's status.
bench_umount() {
    local fs="$1" dir="$2" img="$3" log="$4"
    case "$fs" in
        jbdfs) umount_jbdfs "$dir" || warn "unmounting jbdfs from $dir failed" ;;
        ext3) umount_ext3 "$dir" ;;
        floor)
            fusermount3 -u "$dir" || umount "$dir" || warn "unmounting fuse_floor from $dir failed"
            wait "${_MNT_PID[$dir]}" 2>/dev/null || true
            unset "_MNT_KIND[$dir]" "_MNT_PID[$dir]"
            ;;
        fuse2fs)
            umount "$dir" || warn "unmounting fuse2fs from $dir failed"
            unset "_MNT_KIND[$dir]"
            # fuse2fs writes the image back after the unmount returns.
            for _ in $(seq 1 100); do
                fuser -s "$img" 2>/dev/null || break
                sleep 0.1
            done
            ;;
    esac
    check_image "$img" "$log"
}

# bench_fs_list DEVICE "REFS": the filesystems to run on DEVICE: jbdfs, and
# the references in REFS (ext3, fuse2fs) where they can run (ram, disk).
bench_fs_list() {
    case "$1" in
        ram | disk) printf 'jbdfs %s\n' "$2" ;;
        *) printf 'jbdfs\n' ;;
    esac
}

# bench_workload "REFS" DATA OPTS RESULTS LOG REPEAT "DEVICES" CMD...: for
# each device, repeat and filesystem (jbdfs, and the references in REFS
# where they run): a fresh image, mounted in data mode DATA (jbdfs
# also with OPTS), `CMD... MOUNTPOINT`, whose TSV lines are appended to
# RESULTS prefixed with the filesystem and device, then unmount and
# e2fsck -fn. Runs that fail e2fsck are listed in BENCH_FSCK_FAILED.
BENCH_FSCK_FAILED=()
bench_workload() {
    local refs="$1" data="$2" opts="$3" results="$4" log="$5" repeat="$6" devices="$7"
    shift 7
    local dev fs how r img="" mnt=""
    for dev in $devices; do
        for r in $(seq 1 "$repeat"); do
            for fs in $(bench_fs_list "$dev" "$refs"); do
                how=mke2fs
                [ "$fs" = jbdfs ] && how=mkfs-jbdfs
                bench_image img "$dev" "$how"
                new_mountpoint mnt jbdfs-bench
                bench_mount "$fs" "$dev" "$img" "$mnt" "$log" "$data" "$opts"
                info "$fs on $dev, run $r: $(basename "$1") ${*:2}"
                "$@" "$mnt" | sed "s/^/$fs\t$dev\t/" | tee -a "$results" >&2
                bench_umount "$fs" "$mnt" "$img" "$log" || BENCH_FSCK_FAILED+=("$fs on $dev, run $r")
                rm -f "$img"
            done
        done
    done
}

# bench_fsck_summary [FAILED...]: after a run, say whether every image was
# clean for e2fsck -fn; return 1 if any was not.
bench_fsck_summary() {
    if [ $# -eq 0 ]; then
        printf '\ne2fsck -fn after every run: clean\n'
        return 0
    fi
    printf '\ne2fsck -fn found errors after %d run(s):\n' $#
    printf -- '- %s\n' "$@"
    return 1
}

# bench_drop_caches: write back and drop the kernel's caches.
bench_drop_caches() {
    sync
    echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
}
