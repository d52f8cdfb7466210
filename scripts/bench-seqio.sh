#!/usr/bin/env bash
# Sequential I/O benchmarks, BENCHMARKS.md sections 2 and 3, on a ramdisk
# image (/dev/shm) and a disk image (JBDFS_DISK_DIR, default /var/tmp) in
# one run, each against the raw backing store, Linux ext3 and XFS (loop
# mounts of images of the same size) on the same backing:
#
#   2. bulk write with fsync: files of 7, 13, 75 and 95 MiB and one of
#      512 MiB, each `dd bs=1M conv=fsync`, in data=ordered, writeback and
#      journal (XFS and raw have no data modes: one figure for all); MB/s
#      over all the files of a mode.
#   3. sequential read, cold cache: a 1 GiB file read with `dd bs=4k` after
#      unmounting and remounting and `echo 3 > /proc/sys/vm/drop_caches`,
#      with multiblock mapping and with -o max_map=1.
#
# Each round measures every filesystem in turn (reads: raw, jbdfs on each
# transport with multiblock and max_map=1, ext3, XFS; writes: raw, XFS, then
# for each data mode jbdfs on each transport and ext3; with nbd, each jbdfs
# run on the ramdisk's file is followed by the same run over NBD); the tables
# give the median of the rounds (3; 1 with --quick), with ratios.
#
#   scripts/bench-seqio.sh [--quick] [--only "ramdisk disk nbd"] [--rounds R]
#       [--transport dev_fuse|io_uring|both] [--out FILE]
#   scripts/bench-seqio.sh --layout [--quick]
#
# --transport: jbdfs on /dev/fuse, on FUSE over io_uring (-o io_uring;
# enable_uring is turned on for the run and put back), or both (rows
# jbdfs/dev_fuse and jbdfs/io_uring); default both when enable_uring can be
# turned on, else dev_fuse. --out keeps the raw results (TSV: fs, backing,
# read|write, mode, round, MB/s; fs is raw, ext3, xfs or jbdfs/TRANSPORT;
# backing is ramdisk, disk or nbd).
#
# --layout: the layout check instead (always on /dev/fuse). A 4 GiB file
# written sequentially with dd, then 2 writers of 2 GiB and 4 writers of
# 1 GiB at once, on a sparse disk image; each file's fragments counted from
# debugfs (see scripts/bench-seqio.py) and, on a Linux loop mount, with
# filefrag. Linux ext3 writing the same files is the reference. --quick:
# 1 GiB in all.
#
# --quick: 256 MiB read file, 7+13+64 MiB writes, one round. Prints
# Markdown tables of MB/s and ratios, and the daemon's peak memory (VmHWM)
# against cache_size. Needs root (FUSE, loop mounts, drop_caches), and
# mkfs.xfs (scripts/deps.sh installs xfsprogs).
#
# --only LIST: the backings measured, among ramdisk, disk and nbd (default
# "ramdisk disk"). nbd adds jbdfs rows to the ramdisk's pass: the same
# ramdisk image served by nbdkit's file plugin on a Unix socket and mounted
# through jbdfs's NBD client (bench_nbd_serve in scripts/bench-lib.sh),
# measured in the same rounds as jbdfs on the local file (backing "nbd" in
# the TSV and tables, with its ratio to jbdfs on the local file; raw, ext3
# and XFS are measured on the local file only). nbd implies ramdisk and
# needs nbdkit.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=scripts/bench-lib.sh
. "$JBDFS_ROOT/scripts/bench-lib.sh"
cd "$JBDFS_ROOT"

quick=0
layout=0
only=""
rounds=""
transport=""
out=""
bench_cmdline "$@"
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=1 ;;
        --only) only="$2"; shift ;;
        --layout) layout=1 ;;
        --rounds) rounds="$2"; shift ;;
        --transport) transport="$2"; shift ;;
        --out) out="$2"; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
        *) die "unknown argument: $1" ;;
    esac
    shift
done
need_root "bench-seqio.sh"
have_loop || die "loop devices are needed for the Linux ext3 and XFS references"
[ "$layout" = 1 ] || command -v mkfs.xfs >/dev/null \
    || die "mkfs.xfs is missing (scripts/deps.sh installs xfsprogs)"
nbd=0
for b in ${only:-ramdisk disk}; do
    case "$b" in
        ramdisk | disk) ;;
        nbd) nbd=1 ;;
        *) die "--only takes ramdisk, disk or nbd, not $b" ;;
    esac
done
if [ "$nbd" = 1 ]; then
    [ "$layout" = 1 ] && die "--layout runs on a local disk image only: drop nbd from --only"
    command -v nbdkit >/dev/null || die "the nbd backing needs nbdkit (scripts/deps.sh installs it)"
    case " $only " in
        *" ramdisk "*) ;;
        *) only="ramdisk $only"; info "nbd is measured beside jbdfs on the local ramdisk image: --only \"$only\"" ;;
    esac
fi

if [ "$quick" = 1 ]; then
    rounds="${rounds:-1}"
    read_mib=256
    write_sizes=(7 13 64)
else
    rounds="${rounds:-3}"
    read_mib=1024
    write_sizes=(7 13 75 95 512)
fi
cache_size="${JBDFS_CACHE_SIZE:-64M}"
image_size=3G
# JBDFS_BIN_DIR (bench-lib.sh: JBDFS_BIN_DIR, else CARGO_TARGET_DIR's or
# target/release) is the build measured: scripts/ab-builds.sh sets it.
bin="$JBDFS_BIN_DIR"

work_dirs=()
mnt=""
daemon_pid=""
served=""   # the image nbdkit is serving for the mount up, if any
cleanup() {
    local i
    # A daemon interrupted while starting: let it mount (or fail) first, so
    # that it is unmounted rather than waited for forever.
    if [ -n "$daemon_pid" ] && [ -n "$mnt" ] && ! mountpoint -q "$mnt"; then
        for i in $(seq 50); do
            mountpoint -q "$mnt" && break
            kill -0 "$daemon_pid" 2>/dev/null || break
            sleep 0.1
        done
    fi
    if [ -n "$mnt" ] && mountpoint -q "$mnt"; then
        warn "cleanup: unmounting $mnt"
        umount "$mnt" 2>/dev/null || umount -l "$mnt" || true
    fi
    if [ -n "$daemon_pid" ]; then
        for i in $(seq 100); do
            kill -0 "$daemon_pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$daemon_pid" 2>/dev/null; then
            warn "cleanup: jbdfs daemon $daemon_pid still running; sending SIGTERM"
            kill "$daemon_pid" 2>/dev/null || true
            sleep 1
            [ -n "$mnt" ] && mountpoint -q "$mnt" && { umount "$mnt" 2>/dev/null || umount -l "$mnt" || true; }
        fi
        wait "$daemon_pid" 2>/dev/null || true
    fi
    bench_nbd_stop_all
    bench_loop_detach "${work_dirs[@]}"
    for d in "${work_dirs[@]}"; do rm -rf "$d"; done
    bench_transport_restore
}
bench_traps cleanup

if [ "$layout" = 1 ]; then
    BENCH_TRANSPORTS=dev_fuse
else
    [ -n "$transport" ] || transport="$(bench_transport_default)"
    bench_transport_setup "$transport"
fi
if [ "${JBDFS_NO_BUILD:-0}" != 1 ]; then
    cargo build --quiet --release --workspace
fi
[ -x "$bin/jbdfs" ] || die "$bin/jbdfs not found (build it, or set JBDFS_BIN_DIR)"

drop_caches() {
    sync
    echo 3 >/proc/sys/vm/drop_caches
}

# dd_mbs ARGS...: runs dd and prints its rate in MB/s (10^6 bytes/s).
dd_mbs() {
    LC_ALL=C dd "$@" 2>&1 | awk '/bytes.*copied/ { printf "%.1f\n", $1 / $(NF-3) / 1e6 }'
}

peak_kib=0
# jbdfs_up IMAGE OPTS [TRANSPORT] [VIA]: serves IMAGE on $mnt in the
# foreground (so that its memory can be read) on TRANSPORT (dev_fuse, the
# default, or io_uring), waiting until the mount is live. VIA nbd: IMAGE
# through nbdkit and jbdfs's NBD client (jbdfs_down stops nbdkit).
jbdfs_up() {
    local opts="cache_size=$cache_size" tr="${3:-dev_fuse}" src="$1" from i
    [ -n "$2" ] && opts="$opts,$2"
    opts="$opts,$(bench_transport_opts "$tr")"
    if [ "${4:-}" = nbd ]; then
        bench_nbd_serve src nbd "$1" "$work/nbdkit.log"
        served="$1"
    fi
    from="$(bench_file_size "$work/jbdfs.log")"
    "$bin/jbdfs" -f "$src" "$mnt" -o "$opts" >>"$work/jbdfs.log" 2>&1 &
    daemon_pid=$!
    for i in $(seq 100); do
        mountpoint -q "$mnt" && break
        kill -0 "$daemon_pid" 2>/dev/null || break
        sleep 0.1
    done
    if ! mountpoint -q "$mnt"; then
        tail -n 20 "$work/jbdfs.log" >&2
        die "jbdfs did not mount $src with -o $opts"
    fi
    [ "$tr" = io_uring ] && bench_check_uring "jbdfs/io_uring ($src)" "$daemon_pid" "$work/jbdfs.log" "$from"
    return 0
}

jbdfs_down() {
    local hwm
    hwm="$(awk '/VmHWM/ { print $2 }' "/proc/$daemon_pid/status")"
    [ "$hwm" -gt "$peak_kib" ] && peak_kib="$hwm"
    umount "$mnt"
    wait "$daemon_pid"
    daemon_pid=""
    if [ -n "$served" ]; then
        bench_nbd_stop "$served"
        served=""
    fi
}

ext3_up() {
    mount -t ext3 -o "loop,$2" "$1" "$mnt"
}

xfs_up() {
    mount -t xfs -o loop "$1" "$mnt"
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

new_xfs_image() {
    rm -f "$1"
    truncate -s "$image_size" "$1"
    mkfs.xfs -f -q "$1" >/dev/null
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

# record FS BACKING TEST MODE ROUND MBS: one result line.
record() {
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$results"
    info "$2 $3 $1${4:+ $4} round $5: $6 MB/s"
}

# via_backing NAME VIA: the backing recorded for jbdfs on NAME's image
# reached through VIA: NAME for the local file, nbd over NBD.
via_backing() {
    if [ "$2" = nbd ]; then printf 'nbd\n'; else printf '%s\n' "$1"; fi
}

bench_backing() {
    local name="$1" dir="$2"
    work="$(mktemp -d "$dir/jbdfs-seqio.XXXXXX")"
    work_dirs+=("$work")
    mnt="$work/mnt"
    mkdir -p "$mnt"
    local jimg="$work/jbdfs.img" eimg="$work/ext3.img" ximg="$work/xfs.img" raw="$work/raw.bin"
    local mode tr via first="${BENCH_TRANSPORTS%% *}" vias=(local) over=""
    # jbdfs over NBD: the ramdisk's image, in the same rounds.
    if [ "$name" = ramdisk ] && [ "$nbd" = 1 ]; then
        vias+=(nbd)
        over="; jbdfs also over NBD, through nbdkit"
    fi

    section "$name: sequential read of $read_mib MiB ($dir$over), median of $rounds rounds"
    dd if=/dev/zero of="$raw" bs=1M count="$read_mib" conv=fsync status=none
    new_jbdfs_image "$jimg"
    jbdfs_up "$jimg" "" "$first"
    dd if=/dev/zero of="$mnt/big" bs=1M count="$read_mib" conv=fsync status=none
    jbdfs_down
    new_ext3_image "$eimg"
    ext3_up "$eimg" "data=ordered"
    dd if=/dev/zero of="$mnt/big" bs=1M count="$read_mib" conv=fsync status=none
    umount "$mnt"
    new_xfs_image "$ximg"
    xfs_up "$ximg"
    dd if=/dev/zero of="$mnt/big" bs=1M count="$read_mib" conv=fsync status=none
    umount "$mnt"
    local round kind kinds=(raw)
    for tr in $BENCH_TRANSPORTS; do
        for via in "${vias[@]}"; do kinds+=("jbdfs/$tr:multi:$via" "jbdfs/$tr:single:$via"); done
    done
    kinds+=(ext3 xfs)
    for round in $(seq "$rounds"); do
        for kind in "${kinds[@]}"; do
            case "$kind" in
                raw)
                    drop_caches
                    record raw "$name" read - "$round" "$(dd_mbs if="$raw" of=/dev/null bs=4k)" ;;
                jbdfs/*)
                    local opt="" map
                    IFS=: read -r tr map via <<<"${kind#jbdfs/}"
                    [ "$map" = single ] && opt="max_map=1"
                    jbdfs_up "$jimg" "$opt" "$tr" "$via"
                    drop_caches
                    record "jbdfs/$tr" "$(via_backing "$name" "$via")" read "$map" "$round" \
                        "$(dd_mbs if="$mnt/big" of=/dev/null bs=4k)"
                    jbdfs_down ;;
                ext3 | xfs)
                    if [ "$kind" = ext3 ]; then ext3_up "$eimg" "data=ordered"; else xfs_up "$ximg"; fi
                    drop_caches
                    record "$kind" "$name" read - "$round" "$(dd_mbs if="$mnt/big" of=/dev/null bs=4k)"
                    umount "$mnt" ;;
            esac
        done
    done
    e2fsck -fn "$jimg" >/dev/null 2>&1 || die "e2fsck -fn found problems in the jbdfs image"
    rm -f "$jimg" "$eimg" "$ximg" "$raw"

    section "$name: bulk write with fsync (${write_sizes[*]} MiB), median of $rounds rounds"
    for round in $(seq "$rounds"); do
        mkdir -p "$work/raw"
        record raw "$name" write - "$round" "$(write_files "$work/raw")"
        rm -rf "$work/raw"
        new_xfs_image "$ximg"
        xfs_up "$ximg"
        record xfs "$name" write - "$round" "$(write_files "$mnt")"
        umount "$mnt"
        rm -f "$ximg"
        for mode in ordered writeback journal; do
            for tr in $BENCH_TRANSPORTS; do
                for via in "${vias[@]}"; do
                    new_jbdfs_image "$jimg"
                    jbdfs_up "$jimg" "data=$mode" "$tr" "$via"
                    record "jbdfs/$tr" "$(via_backing "$name" "$via")" write "$mode" "$round" \
                        "$(write_files "$mnt")"
                    jbdfs_down
                    e2fsck -fn "$jimg" >/dev/null 2>&1 \
                        || die "e2fsck -fn found problems after data=$mode writes on jbdfs/$tr ($via)"
                    rm -f "$jimg"
                done
            done
            new_ext3_image "$eimg"
            ext3_up "$eimg" "data=$mode"
            record ext3 "$name" write "$mode" "$round" "$(write_files "$mnt")"
            umount "$mnt"
            rm -f "$eimg"
        done
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

results="${out:-$(mktemp /tmp/jbdfs-seqio.XXXXXX.tsv)}"
: >"$results"
info "raw results: $results"
bench_header "sequential I/O: bulk write with fsync, cold sequential read (bench-seqio.sh)"

backings=()
case " ${only:-ramdisk disk} " in *" ramdisk "*) backings+=("ramdisk:/dev/shm") ;; esac
case " ${only:-ramdisk disk} " in *" disk "*) backings+=("disk:${JBDFS_DISK_DIR:-/var/tmp}") ;; esac
for b in "${backings[@]}"; do
    bench_backing "${b%%:*}" "${b#*:}"
done

section "results ($(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(date -u +%F))"
"$BENCH_PYTHON" "$JBDFS_ROOT/scripts/bench-seqio.py" report "$results" \
    --read-mib "$read_mib" --write-sizes "${write_sizes[*]}" --rounds "$rounds"
echo
echo "jbdfs daemon peak memory (VmHWM over every run): $((peak_kib / 1024)) MiB, with cache_size=$cache_size"
