#!/usr/bin/env bash
# Sequential I/O benchmarks, BENCHMARKS.md sections 2 and 3, on a ramdisk
# image (/dev/shm) and a disk image (JBDFS_DISK_DIR, default /var/tmp) in
# one run, each against the raw backing store and Linux ext3 (loop mount)
# on the same backing:
#
#   2. bulk write with fsync: files of 7, 13, 75 and 95 MiB and one of
#      512 MiB, each `dd bs=1M conv=fsync`, in data=ordered, writeback and
#      journal; MB/s over all the files of a mode.
#   3. sequential read, cold cache: a 1 GiB file read with `dd bs=4k` after
#      unmounting and remounting and `echo 3 > /proc/sys/vm/drop_caches`,
#      with multiblock mapping and with -o max_map=1.
#
#   scripts/bench-seqio.sh [--quick] [--only ramdisk|disk]
#   scripts/bench-seqio.sh --layout [--quick]
#
# --layout: the layout check instead. A 4 GiB file written sequentially
# with dd, then 2 writers of 2 GiB and 4 writers of 1 GiB at once, on a
# sparse disk image; each file's fragments counted from debugfs (see
# scripts/bench-seqio.py) and, on a Linux loop mount, with filefrag. Linux
# ext3 writing the same files is the reference. --quick: 1 GiB in all.
#
# --quick: 256 MiB read file, 7+13+64 MiB writes. Prints Markdown tables of
# MB/s and ratios, and the daemon's peak memory (VmHWM) against cache_size.
# Needs root (FUSE, loop mounts, drop_caches).
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$JBDFS_ROOT"

quick=0
layout=0
only=""
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=1 ;;
        --only) only="$2"; shift ;;
        --layout) layout=1 ;;
        *) die "unknown argument: $1" ;;
    esac
    shift
done
need_root "bench-seqio.sh"
have_loop || die "loop devices are needed for the Linux ext3 reference"

rounds=3
if [ "$quick" = 1 ]; then
    rounds=1
    read_mib=256
    write_sizes=(7 13 64)
else
    read_mib=1024
    write_sizes=(7 13 75 95 512)
fi
cache_size="${JBDFS_CACHE_SIZE:-64M}"
image_size=3G
bin="${CARGO_TARGET_DIR:-$JBDFS_ROOT/target}/release"
if [ "${JBDFS_NO_BUILD:-0}" != 1 ]; then
    cargo build --quiet --release --workspace
fi

work_dirs=()
mnt=""
daemon_pid=""
cleanup() {
    if [ -n "$mnt" ] && mountpoint -q "$mnt"; then umount "$mnt" || umount -l "$mnt" || true; fi
    if [ -n "$daemon_pid" ]; then wait "$daemon_pid" 2>/dev/null || true; fi
    for d in "${work_dirs[@]}"; do rm -rf "$d"; done
}
trap cleanup EXIT

drop_caches() {
    sync
    echo 3 >/proc/sys/vm/drop_caches
}

# dd_mbs ARGS...: runs dd and prints its rate in MB/s (10^6 bytes/s).
dd_mbs() {
    LC_ALL=C dd "$@" 2>&1 | awk '/bytes.*copied/ { printf "%.1f\n", $1 / $(NF-3) / 1e6 }'
}

peak_kib=0
# jbdfs_up IMAGE OPTS: serves IMAGE on $mnt in the foreground (so that its
# memory can be read), waiting until the mount is live.
jbdfs_up() {
    "$bin/jbdfs" -f "$1" "$mnt" -o "cache_size=$cache_size,$2" 2>>"$work/jbdfs.log" &
    daemon_pid=$!
    local i
    for i in $(seq 100); do
        mountpoint -q "$mnt" && return 0
        sleep 0.1
    done
    die "jbdfs did not mount $1"
}

jbdfs_down() {
    local hwm
    hwm="$(awk '/VmHWM/ { print $2 }' "/proc/$daemon_pid/status")"
    [ "$hwm" -gt "$peak_kib" ] && peak_kib="$hwm"
    umount "$mnt"
    wait "$daemon_pid"
    daemon_pid=""
}

ext3_up() {
    mount -t ext3 -o "loop,$2" "$1" "$mnt"
}

new_jbdfs_image() {
    rm -f "$1"
    "$bin/mkfs-jbdfs" -q -F -b 4096 "$1" "$image_size" >/dev/null
}

new_ext3_image() {
    rm -f "$1"
    truncate -s "$image_size" "$1"
    mke2fs -q -F -t ext3 -b 4096 "$1" >/dev/null
}

# write_files DIR: the bulk-write workload; prints MB/s over all files.
write_files() {
    local total=0 secs=0 n out
    for n in "${write_sizes[@]}"; do
        out="$(LC_ALL=C dd if=/dev/zero of="$1/w$n" bs=1M count="$n" conv=fsync 2>&1)"
        secs="$(awk -v s="$secs" '/bytes.*copied/ { print s + $(NF-3) }' <<<"$out")"
        total=$((total + n * 1048576))
    done
    awk -v b="$total" -v s="$secs" 'BEGIN { printf "%.1f\n", b / s / 1e6 }'
}

median() {
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'
}

declare -A R=()

bench_backing() {
    local name="$1" dir="$2"
    work="$(mktemp -d "$dir/jbdfs-seqio.XXXXXX")"
    work_dirs+=("$work")
    mnt="$work/mnt"
    mkdir -p "$mnt"
    local jimg="$work/jbdfs.img" eimg="$work/ext3.img" raw="$work/raw.bin" mode

    section "$name: sequential read of $read_mib MiB ($dir), median of $rounds rounds"
    dd if=/dev/zero of="$raw" bs=1M count="$read_mib" conv=fsync status=none
    new_jbdfs_image "$jimg"
    jbdfs_up "$jimg" ""
    dd if=/dev/zero of="$mnt/big" bs=1M count="$read_mib" conv=fsync status=none
    jbdfs_down
    new_ext3_image "$eimg"
    ext3_up "$eimg" "data=ordered"
    dd if=/dev/zero of="$mnt/big" bs=1M count="$read_mib" conv=fsync status=none
    umount "$mnt"
    local round kind
    declare -A got=()
    for round in $(seq "$rounds"); do
        for kind in raw multi single ext3; do
            case "$kind" in
                raw)
                    drop_caches
                    got[$kind]+=" $(dd_mbs if="$raw" of=/dev/null bs=4k)" ;;
                multi | single)
                    local opt=""
                    [ "$kind" = single ] && opt="max_map=1"
                    jbdfs_up "$jimg" "$opt"
                    drop_caches
                    got[$kind]+=" $(dd_mbs if="$mnt/big" of=/dev/null bs=4k)"
                    jbdfs_down ;;
                ext3)
                    ext3_up "$eimg" "data=ordered"
                    drop_caches
                    got[$kind]+=" $(dd_mbs if="$mnt/big" of=/dev/null bs=4k)"
                    umount "$mnt" ;;
            esac
        done
    done
    for kind in raw multi single ext3; do
        R[$name.read.$kind]="$(median ${got[$kind]})"
        info "read $kind MB/s:${got[$kind]}"
    done
    e2fsck -fn "$jimg" >/dev/null 2>&1 || die "e2fsck -fn found problems in the jbdfs image"
    rm -f "$jimg" "$eimg" "$raw"
    info "read MB/s: multiblock ${R[$name.read.multi]}, max_map=1 ${R[$name.read.single]}, raw ${R[$name.read.raw]}, ext3 ${R[$name.read.ext3]}"

    section "$name: bulk write with fsync (${write_sizes[*]} MiB)"
    mkdir -p "$work/raw"
    R[$name.write.raw]="$(write_files "$work/raw")"
    rm -rf "$work/raw"
    for mode in ordered writeback journal; do
        new_jbdfs_image "$jimg"
        jbdfs_up "$jimg" "data=$mode"
        R[$name.write.$mode]="$(write_files "$mnt")"
        jbdfs_down
        e2fsck -fn "$jimg" >/dev/null 2>&1 || die "e2fsck -fn found problems after data=$mode writes"
        rm -f "$jimg"
        new_ext3_image "$eimg"
        ext3_up "$eimg" "data=$mode"
        R[$name.write.ext3-$mode]="$(write_files "$mnt")"
        umount "$mnt"
        rm -f "$eimg"
        info "write data=$mode MB/s: jbdfs ${R[$name.write.$mode]}, ext3 ${R[$name.write.ext3-$mode]}, raw ${R[$name.write.raw]}"
    done
    rm -rf "$work"
}

# layout_files DIR TOTAL_MIB WRITERS: WRITERS files written at once, each
# TOTAL_MIB / WRITERS MiB, with dd bs=1M conv=fsync.
layout_files() {
    local dir="$1" each=$(($2 / $3)) i pids=()
    for i in $(seq "$3"); do
        dd if=/dev/zero of="$dir/w$3-$i" bs=1M count="$each" conv=fsync status=none &
        pids+=($!)
    done
    wait "${pids[@]}"
}

# layout_report IMAGE FS WRITERS: one table row per file.
layout_report() {
    local img="$1" fs="$2" n="$3" i bpg first counts ff
    bpg="$(dumpe2fs -h "$img" 2>/dev/null | awk -F: '/^Blocks per group/ { print $2 + 0 }')"
    first="$(dumpe2fs -h "$img" 2>/dev/null | awk -F: '/^First block/ { print $2 + 0 }')"
    mount -o loop,ro -t ext3 "$img" "$mnt"
    for i in $(seq "$n"); do
        counts="$(debugfs -R "stat /w$n-$i" "$img" 2>/dev/null | python3 scripts/bench-seqio.py "$bpg" "$first")"
        ff="$(filefrag "$mnt/w$n-$i" | awk '{ print $2 }')"
        echo "| $fs | $n | w$n-$i | $(awk '{ print $2 " | " $4 " | " $6 }' <<<"$counts") | $ff |"
    done
    umount "$mnt"
}

layout_check() {
    local total=4096 dir="${JBDFS_DISK_DIR:-/var/tmp}" n rows=""
    [ "$quick" = 1 ] && total=1024
    work="$(mktemp -d "$dir/jbdfs-layout.XXXXXX")"
    work_dirs+=("$work")
    mnt="$work/mnt"
    mkdir -p "$mnt"
    local img="$work/fs.img"
    for n in 1 2 4; do
        section "layout: $n writer(s), $total MiB in all"
        rm -f "$img"
        "$bin/mkfs-jbdfs" -q -F -b 4096 "$img" 16G >/dev/null
        jbdfs_up "$img" ""
        layout_files "$mnt" "$total" "$n"
        jbdfs_down
        e2fsck -fn "$img" >/dev/null 2>&1 || die "e2fsck -fn found problems after $n writers"
        rows+="$(layout_report "$img" jbdfs "$n")"$'\n'
        rm -f "$img"
        truncate -s 16G "$img"
        mke2fs -q -F -t ext3 -b 4096 "$img" >/dev/null
        mount -t ext3 -o loop "$img" "$mnt"
        layout_files "$mnt" "$total" "$n"
        umount "$mnt"
        rows+="$(layout_report "$img" "Linux ext3" "$n")"$'\n'
        rm -f "$img"
    done
    section "layout results ($(date -u +%F), image on $dir, 4 KiB blocks, $total MiB per run)"
    echo
    echo "| fs | writers | file | extents | fragments | beyond group metadata | filefrag extents |"
    echo "|---|---|---|---|---|---|---|"
    printf '%s' "$rows"
    echo
    echo "extents: contiguous data runs; fragments: runs joined across the file's own in-line pointer blocks; beyond: fragments not at a block group's metadata."
}

if [ "$layout" = 1 ]; then
    layout_check
    exit 0
fi

backings=()
[ "$only" != disk ] && backings+=("ramdisk:/dev/shm")
[ "$only" != ramdisk ] && backings+=("disk:${JBDFS_DISK_DIR:-/var/tmp}")
for b in "${backings[@]}"; do
    bench_backing "${b%%:*}" "${b#*:}"
done

section "results ($(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(date -u +%F))"
echo
echo "Sequential read, $read_mib MiB, dd bs=4k, cold cache (MB/s):"
echo
echo "| backing | jbdfs multiblock | jbdfs max_map=1 | raw | Linux ext3 | multi/single | multi/raw | multi/ext3 |"
echo "|---|---|---|---|---|---|---|---|"
for b in "${backings[@]}"; do
    n="${b%%:*}"
    echo "| $n | ${R[$n.read.multi]} | ${R[$n.read.single]} | ${R[$n.read.raw]} | ${R[$n.read.ext3]} | $(ratio "${R[$n.read.multi]}" "${R[$n.read.single]}") | $(ratio "${R[$n.read.multi]}" "${R[$n.read.raw]}") | $(ratio "${R[$n.read.multi]}" "${R[$n.read.ext3]}") |"
done
echo
echo "Bulk write with fsync, ${write_sizes[*]} MiB files, dd bs=1M conv=fsync (MB/s):"
echo
echo "| backing | mode | jbdfs | Linux ext3 | raw | jbdfs/raw | jbdfs/ext3 |"
echo "|---|---|---|---|---|---|---|"
for b in "${backings[@]}"; do
    n="${b%%:*}"
    for mode in ordered writeback journal; do
        echo "| $n | $mode | ${R[$n.write.$mode]} | ${R[$n.write.ext3-$mode]} | ${R[$n.write.raw]} | $(ratio "${R[$n.write.$mode]}" "${R[$n.write.raw]}") | $(ratio "${R[$n.write.$mode]}" "${R[$n.write.ext3-$mode]}") |"
    done
done
echo
echo "jbdfs daemon peak memory (VmHWM over every run): $((peak_kib / 1024)) MiB, with cache_size=$cache_size"
