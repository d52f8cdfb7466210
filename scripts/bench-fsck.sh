#!/usr/bin/env bash
# fsck speed: fsck-jbdfs -fn against e2fsck -fn on the same image, side by
# side, on a 2 GiB ext3 image full of small files.
#
#   scripts/bench-fsck.sh [IMAGE]
#
# The image (default $JBDFS_WORKDIR/bench-fsck.img, kept for reuse) is made
# with mke2fs -t ext3 and filled through a Linux loop mount with fs_mark
# (4 threads, no fsync, FILES files of SIZE bytes spread over subdirectories),
# or with a shell loop when fs_mark is missing. Both checkers then run
# RUNS times each, alternately, after one warm-up run each (the image is in
# the page cache for all timed runs). Prints each run's wall time, the
# medians and the ratio e2fsck / fsck-jbdfs (above 1: fsck-jbdfs is faster).
# Needs root (loop mount). Environment: FILES (default 120000), SIZE (4096),
# RUNS (5), FSCK (the fsck-jbdfs binary), JBDFS_WORKDIR.
set -eu
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

FSCK="${FSCK:-$JBDFS_ROOT/target/release/fsck-jbdfs}"
FILES="${FILES:-120000}"
SIZE="${SIZE:-4096}"
RUNS="${RUNS:-5}"
WORK="${JBDFS_WORKDIR:-${TMPDIR:-/tmp}}"
IMG="${1:-$WORK/bench-fsck.img}"
export LC_ALL=C

[ -x "$FSCK" ] || die "no fsck binary at $FSCK (cargo build --release -p fsck-jbdfs)"

fill() {
    local mnt
    mnt="$(mktemp -d)"
    mount -o loop -t ext3 "$IMG" "$mnt" || die "loop mount failed (root and loop devices needed)"
    if command -v fs_mark >/dev/null 2>&1; then
        local per=$((FILES / 4)) t
        for t in 0 1 2 3; do mkdir -p "$mnt/t$t"; done
        fs_mark -d "$mnt/t0" -d "$mnt/t1" -d "$mnt/t2" -d "$mnt/t3" \
            -n "$per" -s "$SIZE" -S 0 -D 64 -N 256 -k -L 1 >/dev/null
    else
        local i
        for i in $(seq 1 "$FILES"); do
            [ $((i % 1000)) = 1 ] && mkdir -p "$mnt/d$((i / 1000))"
            head -c "$SIZE" /dev/zero >"$mnt/d$((i / 1000))/f$i"
        done
    fi
    umount "$mnt"
    rmdir "$mnt"
}

if [ ! -s "$IMG" ]; then
    section "making $IMG: 2 GiB ext3, $FILES files of $SIZE bytes"
    rm -f "$IMG"
    truncate -s 2G "$IMG"
    mke2fs -q -F -t ext3 "$IMG"
    fill
fi
e2fsck -fn "$IMG" >/dev/null 2>&1 || die "$IMG is not clean for e2fsck -fn"
"$FSCK" -fn "$IMG" | tail -1

seconds() { # seconds CMD...: wall time of one run
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null 2>&1 || true
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

section "warm-up"
seconds e2fsck -fn "$IMG" >/dev/null
seconds "$FSCK" -fn "$IMG" >/dev/null
section "timed runs (seconds)"
ours=() theirs=()
for r in $(seq 1 "$RUNS"); do
    e=$(seconds e2fsck -fn "$IMG")
    f=$(seconds "$FSCK" -fn "$IMG")
    printf 'run %d: e2fsck -fn %.3f   fsck-jbdfs -fn %.3f\n' "$r" "$e" "$f"
    theirs+=("$e") ours+=("$f")
done
me=$(printf '%s\n' "${theirs[@]}" | median)
mf=$(printf '%s\n' "${ours[@]}" | median)
printf '\nmedian: e2fsck -fn %.3f s, fsck-jbdfs -fn %.3f s, ratio e2fsck/fsck-jbdfs %.2f\n' \
    "$me" "$mf" "$(echo "$me / $mf" | bc -l)"
