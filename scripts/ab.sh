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
# --quick: bdelay 0, 1 and auto; data=ordered and journal; ramdisk and
# sata; 1 and 4 threads; small runs (about a minute: a CI smoke test).
# The full A/B takes about an hour (see docs/PERFORMANCE.md).
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
        -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
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
exec "$JBDFS_ROOT/scripts/bench-fsmark.sh" "$@" "${args[@]}"
