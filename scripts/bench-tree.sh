#!/usr/bin/env bash
# Source tree, compilebench-like (BENCHMARKS.md section 4): the phases of
# scripts/bench-tree.py on jbdfs and on Linux ext3 (loop), in one run, on a
# ramdisk image and a disk image. Prints seconds per phase with the ratio
# jbdfs/ext3, and checks every image with e2fsck -fn.
#
#   scripts/bench-tree.sh [--quick] [--devices "ram disk"] [--files N]
#       [--repeat R] [--data MODE] [--opts JBDFS_OPTS] [--floor]
#       [--transport dev_fuse|io_uring|both] [--charts DIR] [--out FILE]
#
# --floor adds the FUSE floor (daemon/examples/fuse_floor.rs: fuser 0.18 answering
# every request from memory, keeping no data) beside ext3.
# --transport: jbdfs (and the floor) on /dev/fuse, on FUSE over io_uring
# (-o io_uring; enable_uring is turned on for the run and put back), or
# both, run in turn within each repeat (jbdfs/dev_fuse, jbdfs/io_uring
# columns); default both when enable_uring can be turned on, else dev_fuse.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=scripts/bench-lib.sh
. "$JBDFS_ROOT/scripts/bench-lib.sh"
# shellcheck source=scripts/lib-mount.sh
. "$JBDFS_ROOT/scripts/lib-mount.sh"

devices="ram disk"
files=3000
repeat=1
data=ordered
opts=""
refs=ext3
charts=""
out=""
transport=""
bench_cmdline "$@"
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) files=500 devices=ram ;;
        --devices) devices="$2"; shift ;;
        --files) files="$2"; shift ;;
        --repeat) repeat="$2"; shift ;;
        --data) data="$2"; shift ;;
        --opts) opts="$2"; shift ;;
        --charts) charts="$2"; shift ;;
        --out) out="$2"; shift ;;
        --floor) refs="ext3 floor" ;;
        --transport) transport="$2"; shift ;;
        -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
        *) die "unknown argument: $1" ;;
    esac
    shift
done
need_root "FUSE and loop mounts"
bench_traps bench_cleanup
[ -n "$transport" ] || transport="$(bench_transport_default)"
bench_transport_setup "$transport"
build_jbdfs
[ "$refs" != ext3 ] && bench_build_floor

results="${out:-$(mktemp /tmp/jbdfs-tree.XXXXXX.tsv)}"
: >"$results"
log="$(mktemp /tmp/jbdfs-tree.XXXXXX.log)"
info "raw results: $results; mount and fsck log: $log"
bench_header "source tree, compilebench-like (bench-tree.sh)"

bench_workload "$refs" "$data" "$opts" "$results" "$log" "$repeat" "$devices" \
    "$BENCH_PYTHON" "$JBDFS_ROOT/scripts/bench-tree.py" run --files "$files" --drop-caches

report=("$JBDFS_ROOT/scripts/bench-tree.py" report "$results")
[ -n "$charts" ] && report+=(--charts "$charts")
"$BENCH_PYTHON" "${report[@]}"
bench_fsck_summary "${BENCH_FSCK_FAILED[@]}"
