#!/usr/bin/env bash
# Run fsx (the File System eXerciser, crates.io `fsx` 0.3) inside jbdfs mounts.
#
#   scripts/fsx.sh [OPTIONS]
#
#   -N OPS            operations per run (default 100000)
#   --seeds "S..."    seeds, one run each (default "1 2 3")
#   --block-sizes "B..."  image block sizes (default "4096 1024")
#   --modes "M..."    data modes, one mount each (default "ordered")
#   --config C        fsx configuration: project (the file below: 8 MiB
#                     files, mmap-heavy weights), default (fsx's own: no
#                     -f; short files, truncate and mmap mixed in), or both
#                     (default project)
#   --flen BYTES      the project configuration's maximum file size
#                     (default 8388608: the double indirect blocks at 4 KiB)
#   --jobs J          fsx processes at once, each on its own file in the
#                     same mount (default 1)
#   --hog N           CPU-burning processes beside them for the whole run
#                     (default 0): races hide on a quiet machine
#   --stress          several fsx at once under load: --jobs 2, --hog as
#                     many as there are CPUs, both configurations, all
#                     three data modes, 1 KiB and 4 KiB blocks
#   --quick           with --stress: seeds "11 13", 20000 operations, fsx's
#                     default configuration only (what CI runs)
#   --transport T     how the kernel reaches the daemon: dev_fuse (the
#                     default; -o noio_uring) or io_uring (-o io_uring;
#                     needs the kernel's enable_uring on). Each mount's
#                     stats file must show that it was served so.
#   --mount-opts OPTS extra jbdfs -o options (default none)
#   --logs DIR        where logs go (default a new directory in $JBDFS_WORKDIR)
#   --keep            keep the images
#
# For each block size, data mode and configuration: makes a 1 GiB image
# with mkfs-jbdfs, mounts it, runs the seeds --jobs at a time (each fsx on
# its own file), unmounts with scripts/umount.fuse.jbdfs and checks the
# image with `e2fsck -fn`. fsx does pread/pwrite, mmap reads and writes,
# msync(MS_INVALIDATE), ftruncate, fsync, fdatasync, posix_fallocate,
# punch_hole (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE), sendfile,
# posix_fadvise, copy_file_range and close/reopen, checking every read
# against its own copy of the file. A failing run leaves fsx's
# log (with its LOG DUMP of the last operations) and the .fsxgood/.fsxbad
# files in the logs directory.
#
# Prints `fsx: N runs, F failed` and exits non-zero if any run, unmount or
# e2fsck failed, the daemon panicked, or a mount was not served over the
# --transport asked for. Needs root and /dev/fuse. See
# docs/PJDFSTEST.md.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=scripts/lib-mount.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib-mount.sh"

ops=100000
seeds="1 2 3"
block_sizes="4096 1024"
modes="ordered"
configs="project"
flen=8388608
jobs=1
hogs=0
stress=0
quick=0
transport=dev_fuse
transport_opt=""
mount_opts=""
logs=""
while [ $# -gt 0 ]; do
    case "$1" in
        -N) ops="$2"; shift ;;
        --seeds) seeds="$2"; shift ;;
        --block-sizes) block_sizes="$2"; shift ;;
        --modes) modes="$2"; shift ;;
        --config)
            case "$2" in
                project | default) configs="$2" ;;
                both) configs="default project" ;;
                *) die "--config takes project, default or both" ;;
            esac
            shift ;;
        --flen) flen="$2"; shift ;;
        --jobs) jobs="$2"; shift ;;
        --hog) hogs="$2"; shift ;;
        --stress) stress=1 ;;
        --quick) quick=1 ;;
        --transport) transport="$2"; shift ;;
        --mount-opts) mount_opts="$2"; shift ;;
        --logs) logs="$2"; shift ;;
        --keep) MNT_KEEP=1 ;;
        -h | --help) awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
    shift
done
if [ "$stress" = 1 ]; then
    # The matrix is the point of --stress; -N and --seeds still choose
    # the length and the seeds, unless --quick picks CI's.
    jobs=2
    hogs="$(nproc)"
    modes="ordered writeback journal"
    block_sizes="1024 4096"
    configs="default project"
    if [ "$quick" = 1 ]; then
        seeds="11 13"
        ops=20000
        configs="default"
    fi
fi

need_root "fsx.sh (it mounts jbdfs)"
[ -e /dev/fuse ] || die "/dev/fuse is missing"
transport_opt="$(transport_option "$transport")"

hog_pids=()
stop_hogs() {
    [ "${#hog_pids[@]}" -gt 0 ] && kill "${hog_pids[@]}" 2>/dev/null || true
    hog_pids=()
}
cleanup() {
    stop_hogs
    [ -n "${map_limit_was:-}" ] && restore_map_limit
    mnt_cleanup
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

section "tools"
fsx="$(tool_install fsx '^0.3')"
build_jbdfs
[ -n "$logs" ] || logs="$(mktemp -d "$JBDFS_WORKDIR/jbdfs-fsx-logs.XXXXXX")"
mkdir -p "$logs"
info "logs in $logs"

cat >"$logs/project.toml" <<EOF
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
punch_hole = 1
sendfile = 1
posix_fadvise = 1
copy_file_range = 1
EOF

# fsx 0.3.2 never unmaps its map reads (domapread), so a run of N
# operations can hold about N/5 mappings in the project configuration and
# fail with ENOMEM at vm.max_map_count (65530 by default) after ~300,000
# operations. Raise the limit for the run, and put it back afterwards.
map_limit="$(cat /proc/sys/vm/max_map_count)"
map_limit_was=""
if [ "$ops" -gt "$map_limit" ]; then
    map_limit_was="$map_limit"
    map_limit=$((ops * jobs + 65536))
    echo "$map_limit" >/proc/sys/vm/max_map_count
    info "vm.max_map_count raised to $map_limit for fsx's leaked map reads"
fi
# Put back only what this run changed, and only if nobody changed it since.
restore_map_limit() {
    [ "$(cat /proc/sys/vm/max_map_count)" = "$map_limit" ] \
        && echo "$map_limit_was" >/proc/sys/vm/max_map_count
    return 0
}

for ((i = 0; i < hogs; i++)); do
    (while :; do :; done) &
    hog_pids+=("$!")
done
[ "$hogs" -gt 0 ] && info "$hogs CPU hogs running"

runs=0
failed=0
problems=()

# run_one NAME SEED CONFIG MNT: one fsx run on its own file; its status in
# $logs/NAME.rc.
run_one() {
    local name="$1" seed="$2" config="$3" mnt="$4" args=() rc=0
    [ "$config" = project ] && args=(-f "$logs/project.toml")
    "$fsx" "${args[@]}" -N "$ops" -S "$seed" -P "$logs" "$mnt/fsx-$name" \
        >"$logs/fsx-$name.log" 2>&1 || rc=$?
    echo "$rc" >"$logs/$name.rc"
}

# run_seeds GROUP CONFIG MNT: every seed, --jobs at a time; counts failures.
run_seeds() {
    local group="$1" config="$2" mnt="$3" batch=() pids=() seed name start i
    set -- $seeds
    while [ $# -gt 0 ]; do
        batch=()
        pids=()
        for ((i = 0; i < jobs && $# > 0; i++)); do
            batch+=("$1")
            shift
        done
        start=$SECONDS
        for seed in "${batch[@]}"; do
            run_one "$group-s$seed" "$seed" "$config" "$mnt" &
            pids+=("$!")
        done
        wait "${pids[@]}" || true
        for seed in "${batch[@]}"; do
            name="$group-s$seed"
            runs=$((runs + 1))
            if [ "$(cat "$logs/$name.rc")" -eq 0 ]; then
                info "$name: A-OK ($((SECONDS - start)) s)"
            else
                failed=$((failed + 1))
                warn "$name: fsx failed; last lines of $logs/fsx-$name.log:"
                tail -n 30 "$logs/fsx-$name.log" >&2
                problems+=("$name: fsx status $(cat "$logs/$name.rc")")
            fi
        done
    done
}

img=""
mnt=""
for bs in $block_sizes; do
    for mode in $modes; do
        for config in $configs; do
            group="b$bs-$mode-$config"
            section "fsx: $group, seeds $seeds, $ops operations, $jobs at a time, over $transport"
            new_image img "$bs" 1G
            new_mountpoint mnt jbdfs-fsx-mnt
            stats="$logs/stats-$group"
            opts="data=$mode,stats=$stats${transport_opt:+,$transport_opt}${mount_opts:+,$mount_opts}"
            mount_jbdfs "$img" "$mnt" "$logs/jbdfs-$group.log" "$opts"
            run_seeds "$group" "$config" "$mnt"
            if ! umount_jbdfs "$mnt"; then
                failed=$((failed + 1))
                problems+=("$group: unmount failed")
            fi
            if ! check_transport "$stats" "$transport"; then
                failed=$((failed + 1))
                problems+=("$group: not served over $transport (see $stats)")
            fi
            if ! check_image "$img" "$logs/e2fsck-$group.log"; then
                failed=$((failed + 1))
                problems+=("$group: e2fsck -fn failed (see $logs/e2fsck-$group.log)")
            fi
            if grep -q 'panicked' "$logs/jbdfs-$group.log"; then
                failed=$((failed + 1))
                grep -A3 'panicked' "$logs/jbdfs-$group.log" >&2
                problems+=("$group: jbdfs panicked (see $logs/jbdfs-$group.log)")
            fi
            [ "$MNT_KEEP" = 1 ] || rm -f "$img"
        done
    done
done
stop_hogs

section "summary"
for p in "${problems[@]}"; do info "$p"; done
info "logs in $logs"
echo "fsx: $runs runs, $failed failed"
[ "$failed" -eq 0 ]
