#!/usr/bin/env bash
# Small files with fsync (BENCHMARKS.md section 1): fs_mark, 4 KiB files,
# fsync before close, one directory per thread, on jbdfs for every bdelay
# value and on Linux ext3 (loop) and fuse2fs in the same run, on a ramdisk
# image, a disk image and the emulated array and sata devices (and, on
# request, the ram image served over NBD: devices nbd and nbd-delay, see
# scripts/bench-lib.sh).
#
#   scripts/bench-fsmark.sh [--quick] [--devices "ram disk array sata"]
#       [--bdelay "0 yield 1 2 3 4 jbd2 auto"] [--threads "1 2 4 8 10 16 20"]
#       [--data "ordered"] [--repeat R] [--seconds S] [--no-refs] [--floor]
#       [--transport dev_fuse|io_uring|both] [--charts DIR] [--out FILE]
#
# Prints Markdown tables: files/s in the layout of DESIGN.md's bdelay table,
# bdelay=auto against the best fixed setting, and jbdfs against ext3 and
# fuse2fs with ratios. Each run creates about S seconds' worth of files (2;
# 0.5 with --quick), sized from the setting's previous rate. --charts DIR
# writes fsmark-DEVICE[-DATA].png there (files/s against threads, one line
# per bdelay value). --out keeps the raw results (TSV). Every image is checked with e2fsck -fn after its run.
# --floor adds the FUSE floor on ram and disk (daemon/examples/fuse_floor.rs: fuser
# 0.18 answering every request from memory), what FUSE's round trips cost.
# --transport: jbdfs (and the floor) on /dev/fuse, on FUSE over io_uring
# (-o io_uring; enable_uring is turned on for the run and put back), or
# both side by side (jbdfs/dev_fuse, jbdfs/io_uring columns); default both
# when enable_uring can be turned on, else dev_fuse. Raw TSV lines: fs
# (jbdfs/TRANSPORT, floor/TRANSPORT, ext3, fuse2fs), device, data, bdelay,
# threads, files/s.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=scripts/bench-lib.sh
. "$JBDFS_ROOT/scripts/bench-lib.sh"
# shellcheck source=scripts/lib-mount.sh
. "$JBDFS_ROOT/scripts/lib-mount.sh"

devices="ram disk array sata"
bdelays="0 yield 1 2 3 4 jbd2 auto"
threads="1 2 4 8 10 16 20"
datas="ordered"
repeat=1
refs="ext3 fuse2fs"
floor=0
charts=""
out=""
seconds=2
transport=""
bench_cmdline "$@"
while [ $# -gt 0 ]; do
    case "$1" in
        # Later options override what --quick chooses.
        --quick) devices="ram sata" bdelays="0 1 auto" threads="1 4" seconds=0.5 ;;
        --seconds) seconds="$2"; shift ;;
        --devices) devices="$2"; shift ;;
        --bdelay) bdelays="$2"; shift ;;
        --threads) threads="$2"; shift ;;
        --data) datas="$2"; shift ;;
        --repeat) repeat="$2"; shift ;;
        --no-refs) refs="" ;;
        --floor) floor=1 ;;
        --charts) charts="$2"; shift ;;
        --out) out="$2"; shift ;;
        --transport) transport="$2"; shift ;;
        -h | --help) sed -n '2,25p' "$0"; exit 0 ;;
        *) die "unknown argument: $1" ;;
    esac
    shift
done
need_root "fs_mark on FUSE and loop mounts"
command -v fs_mark >/dev/null || die "fs_mark is missing (scripts/deps.sh installs fsmark)"
bench_traps bench_cleanup
[ -n "$transport" ] || transport="$(bench_transport_default)"
bench_transport_setup "$transport"
build_jbdfs
if [ "$floor" = 1 ]; then
    refs="$refs floor"
    bench_build_floor
fi

results="${out:-$(mktemp /tmp/jbdfs-fsmark.XXXXXX.tsv)}"
: >"$results"
: >"$results.stats"
log="$(mktemp /tmp/jbdfs-fsmark.XXXXXX.log)"
info "raw results: $results; mount and fsck log: $log"
bench_header "fs_mark: 4 KiB files, fsync before close (bench-fsmark.sh)"

# files_per_thread DEVICE THREADS [LAST_RATE]: files for one run. With the
# rate the same setting reached last time, enough for about $seconds s, up
# to a guess for the device; without, the guess. At least a few per thread.
files_per_thread() {
    local total min
    case "$1" in
        ram | nbd) total=2000 min=40 ;;
        nbd-delay) total=600 min=20 ;;
        disk) total=1200 min=30 ;;
        array) total=600 min=20 ;;
        sata) total=120 min=6 ;;
    esac
    # Never more than the guess: a setting that collapses when threads are
    # added would otherwise run for minutes.
    [ -n "${3:-}" ] && total="$(awk -v r="$3" -v s="$seconds" -v g="$total" \
        'BEGIN { n = r * s; printf "%d", n < g ? n : g }')"
    local n=$((total / $2))
    [ "$n" -lt "$min" ] && n=$min
    printf '%s\n' "$n"
}

# run_fsmark DIR THREADS N: one fs_mark run; prints files/s.
run_fsmark() {
    local base="$1" t="$2" n="$3" args=() i
    for i in $(seq 1 "$t"); do args+=(-d "$base/t$i"); done
    mkdir -p "$base"
    # fs_mark keeps a log, fs_log.txt in the current directory unless told.
    fs_mark "${args[@]}" -s 4096 -n "$n" -S 1 -L 1 -l "$log.fs_mark" 2>&1 \
        | awk '$1 ~ /^[0-9]+$/ && NF >= 5 { rate = $4 } END { if (rate == "") exit 1; print rate }'
}

# one_device DATA DEVICE: every setting on DEVICE mounted side by side (one
# jbdfs per bdelay value, and the references), then for each thread count
# and repeat one fs_mark run on each in turn, so that the machine's load
# changes affect every setting alike; then unmount and e2fsck -fn each.
one_device() {
    local data="$1" dev="$2" fs b how extra img="" mnt="" i t n rate run=0
    local labels=() images=() mounts=() last=()
    # jbdfs and the floor once per transport: jbdfs/dev_fuse, jbdfs/io_uring...
    for fs in $(bench_fs_list "$dev" "$refs"); do
        # fuse2fs has no data modes: it writes no journal at all.
        [ "$fs" = fuse2fs ] && [ "$data" != ordered ] && continue
        for b in $([ "$(bench_fs_base "$fs")" = jbdfs ] && echo "$bdelays" || echo -); do
            how=mke2fs
            [ "$(bench_fs_base "$fs")" = jbdfs ] && how=mkfs-jbdfs
            bench_image img "$dev" "$how"
            extra=""
            [ "$(bench_fs_base "$fs")" = jbdfs ] && extra="bdelay=$b,stats=$img.stats"
            new_mountpoint mnt jbdfs-fsmark
            bench_mount "$fs" "$dev" "$img" "$mnt" "$log" "$data" "$extra"
            labels+=("$fs $b") images+=("$img") mounts+=("$mnt")
        done
    done
    for t in $threads; do
        for _ in $(seq 1 "$repeat"); do
            run=$((run + 1))
            for i in "${!labels[@]}"; do
                read -r fs b <<<"${labels[$i]}"
                n="$(files_per_thread "$dev" "$t" "${last[$i]:-}")"
                rate="$(run_fsmark "${mounts[$i]}/run$run" "$t" "$n")" || die "fs_mark failed on $fs ($dev)"
                rm -rf "${mounts[$i]}/run$run"
                last[i]="$rate"
                printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$fs" "$dev" "$data" "$b" "$t" "$rate" >>"$results"
                info "$fs $dev data=$data bdelay=$b threads=$t: $rate files/s"
            done
        done
    done
    for i in "${!labels[@]}"; do
        read -r fs b <<<"${labels[$i]}"
        if ! bench_umount "$fs" "${mounts[$i]}" "${images[$i]}" "$log"; then
            fsck_failed+=("$fs on $dev, data=$data, bdelay=$b")
            cp "${images[$i]}" "${images[$i]}.failed" && info "kept the image that failed e2fsck: ${images[$i]}.failed"
        fi
        # The transport the mount was served over, from the same file.
        if [ "$(bench_fs_base "$fs")" = jbdfs ] \
            && ! bench_stats_transport "${images[$i]}.stats" "$(bench_fs_transport "$fs")"; then
            transport_failed+=("$fs on $dev, data=$data, bdelay=$b")
        fi
        # The journal's own account of the whole mount, written at unmount:
        # how many handles shared a commit and how long they waited to batch.
        [ -f "${images[$i]}.stats" ] && awk -v dev="$dev" -v data="$data" -v b="$b" \
            -v tr="$(bench_fs_transport "$fs")" '
            /handles per transaction/ { h = $1 }
            /waiting to batch per transaction/ { w = $1 + 0 }
            /transactions \(/ { n = $1 }
            END { printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", dev, data, b, n, h, w, tr }' \
            "${images[$i]}.stats" >>"$results.stats"
        rm -f "${images[$i]}.stats"
        rm -f "${images[$i]}"
    done
}

fsck_failed=()
transport_failed=()
for data in $datas; do
    for dev in $devices; do
        one_device "$data" "$dev"
    done
done

report=("$JBDFS_ROOT/scripts/bench-fsmark.py" "$results")
[ -n "$charts" ] && report+=(--charts "$charts")
"$BENCH_PYTHON" "${report[@]}"
if [ "${#transport_failed[@]}" -gt 0 ]; then
    printf '\nNot served over the transport they are labelled with (their figures above are wrong):\n'
    printf -- '- %s\n' "${transport_failed[@]}"
fi
bench_fsck_summary "${fsck_failed[@]}" && [ "${#transport_failed[@]}" -eq 0 ]
