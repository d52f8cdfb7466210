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
# the page cache for all timed runs). Prints each run's wall and CPU time
# (user + system: steadier when other work shares the cores), the medians
# and the ratios e2fsck / fsck-jbdfs (above 1: fsck-jbdfs is faster).
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
            -n "$per" -s "$SIZE" -S 0 -D 64 -N 256 -k -L 1 -l "$mnt.fs_mark.log" >/dev/null
        rm -f "$mnt.fs_mark.log"
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

seconds() { # seconds CMD...: "wall cpu" of one run (cpu = user + system)
    local TIMEFORMAT='%R %U %S' t
    t=$( { time "$@" >/dev/null 2>&1; } 2>&1 ) || true
    echo "$t" | awk '{ printf "%.3f %.3f\n", $1, $2 + $3 }'
}
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

section "warm-up"
seconds e2fsck -fn "$IMG" >/dev/null
seconds "$FSCK" -fn "$IMG" >/dev/null
section "timed runs (seconds: wall, cpu = user + system)"
ew=() ec=() fw=() fc=()
for r in $(seq 1 "$RUNS"); do
    read -r a b < <(seconds e2fsck -fn "$IMG")
    read -r c d < <(seconds "$FSCK" -fn "$IMG")
    printf 'run %d: e2fsck -fn %s wall %s cpu   fsck-jbdfs -fn %s wall %s cpu\n' "$r" "$a" "$b" "$c" "$d"
    ew+=("$a") ec+=("$b") fw+=("$c") fc+=("$d")
done
m() { printf '%s\n' "$@" | median; }
mew=$(m "${ew[@]}") mec=$(m "${ec[@]}") mfw=$(m "${fw[@]}") mfc=$(m "${fc[@]}")
printf '\nmedian wall: e2fsck -fn %s s, fsck-jbdfs -fn %s s, ratio e2fsck/fsck-jbdfs %.2f\n' \
    "$mew" "$mfw" "$(echo "$mew / $mfw" | bc -l)"
printf 'median cpu:  e2fsck -fn %s s, fsck-jbdfs -fn %s s, ratio e2fsck/fsck-jbdfs %.2f\n' \
    "$mec" "$mfc" "$(echo "$mec / $mfc" | bc -l)"
