#!/usr/bin/env bash
# The commit-batching A/B in one command: fs_mark (4 KiB files, fsync before
# close) on jbdfs for every bdelay value, every data mode, every device
# (ramdisk image, disk image, emulated array and sata) and every thread
# count, with Linux ext3 and fuse2fs alongside on the real backing stores.
# Each run: make an image, mount, run the workload, unmount, e2fsck -fn.
# Prints the tables (DESIGN.md's layout, auto against the best fixed
# setting, jbdfs against the references) and writes the charts.
#
#   scripts/ab.sh [--quick] [--transport dev_fuse|io_uring] [--charts DIR]
#       [--out FILE] [bench-fsmark.sh options]
#
# --transport: the FUSE transport of every jbdfs mount, /dev/fuse (the
# default) or FUSE over io_uring (-o io_uring; only where enable_uring reads
# Y, which this run does not change: otherwise /dev/fuse, with a note);
# passed to bench-fsmark.sh, which could also take "both" (twice the time).
#
# Every figure is the median (min-max) of interleaved rounds (5; 3 with
# --quick), every ratio has a verdict (faster, slower or no clear
# difference: a bootstrap interval of the ratio of medians), and the
# machine's load before and during the run is printed, with a warning when
# other work used the CPUs (then the figures are unreliable).
#
# --quick: bdelay 0, 1 and auto; data=ordered and journal; ramdisk and
# sata; 1 and 4 threads; 3 rounds of about 0.5 s of files each (under 2
# minutes on a quiet 2-CPU machine). It answers the two questions of the
# seeds: does bdelay=1 collapse on ram at 2+ threads, and does batching
# help on sata. It leaves out bdelay yield, 2-4 and jbd2, data=writeback,
# the disk image and the array, thread counts 2 and 8-20, and runs long
# enough for steady rates. The full A/B takes about an hour (see
# docs/PERFORMANCE.md).
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cmdline="$(printf '%q ' "$0" "$@")"
args=()
quick=0
charts=""
transport=dev_fuse
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=1 ;;
        --charts) charts="$2"; shift ;;
        --transport) transport="$2"; shift ;;
        -h | --help) sed -n '2,33p' "$0"; exit 0 ;;
        *) args+=("$1") ;;
    esac
    shift
done

if [ "$quick" = 1 ]; then
    set -- --quick --data "ordered journal"
else
    set -- --devices "ram disk array sata" --bdelay "0 yield 1 2 3 4 jbd2 auto" \
        --threads "1 2 4 8 10 16 20" --data "ordered writeback journal"
fi
case "$transport" in
    dev_fuse | io_uring | both) ;;
    *) die "unknown transport '$transport' (expected dev_fuse or io_uring)" ;;
esac
set -- "$@" --transport "$transport"
[ -n "$charts" ] && set -- "$@" --charts "$charts"
"$JBDFS_ROOT/scripts/deps.sh"
section "bdelay A/B: fs_mark on jbdfs over $transport$([ "$quick" = 1 ] && echo ' (quick)')"
printf 'command: %s\n' "${cmdline% }"
printf 'transport: %s\n' "$transport"
if [ "$quick" = 1 ]; then
    printf '%s\n' "quick: 3 rounds; bdelay 0, 1, auto; data=ordered and journal; ram and sata; 1 and 4 threads." \
        "quick leaves out: bdelay yield, 2-4, jbd2; data=writeback; the disk image and the array;" \
        "  2 and 8-20 threads; long runs (each run about 0.5 s of files). scripts/ab.sh without --quick has them all."
fi
start=$SECONDS
status=0
"$JBDFS_ROOT/scripts/bench-fsmark.sh" "$@" "${args[@]}" || status=$?
printf '\nwall time: %d s (bench-fsmark.sh; with deps.sh and the build: %d s)\n' \
    $((SECONDS - start)) "$SECONDS"
exit "$status"
