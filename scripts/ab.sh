#!/usr/bin/env bash
# The commit-batching A/B in one command: fs_mark (4 KiB files, fsync before
# close) on jbdfs for every bdelay value, every data mode, every device
# (ramdisk image, disk image, emulated array and sata) and every thread
# count, with Linux ext3 and fuse2fs alongside on the real backing stores.
# Each run: make an image, mount, run the workload, unmount, e2fsck -fn.
# Prints the tables (DESIGN.md's layout, auto against the best fixed
# setting, jbdfs against the references) and writes the charts.
#
#   scripts/ab.sh [--quick] [--charts DIR] [--out FILE] [bench-fsmark.sh options]
#
# --quick: bdelay 0, 1 and auto; data=ordered and journal; ramdisk and
# sata; 1 and 4 threads; small runs (about a minute: a CI smoke test).
# The full A/B takes about an hour (see docs/PERFORMANCE.md).
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

args=()
quick=0
charts=""
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=1 ;;
        --charts) charts="$2"; shift ;;
        -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
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
[ -n "$charts" ] && set -- "$@" --charts "$charts"
"$JBDFS_ROOT/scripts/deps.sh"
section "bdelay A/B: fs_mark on jbdfs$([ "$quick" = 1 ] && echo ' (quick)')"
exec "$JBDFS_ROOT/scripts/bench-fsmark.sh" "$@" "${args[@]}"
