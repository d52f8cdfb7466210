#!/usr/bin/env bash
# Before and after in one run: the same fs_mark and sequential-I/O workloads
# on two or more builds of jbdfs, interleaved round by round so that the
# machine's load changes touch every build alike; medians per build and
# ratios against the first.
#
#   scripts/ab-builds.sh [--rounds R] [--threads "1 4 16"] [--no-seqio]
#       LABEL=BINDIR LABEL=BINDIR...
#
# BINDIR holds a build's jbdfs and mkfs-jbdfs (for example
# `git worktree add --detach /tmp/old REV && cargo build --release
# --workspace` there, then /tmp/old/target/release). Each round runs, for
# each build in an order rotated by one each round:
#   - scripts/bench-fsmark.sh --devices "ram disk" --bdelay auto (files/s);
#   - scripts/bench-seqio.sh --quick: cold 4 KiB reads, multiblock and
#     max_map=1, and dd bs=1M conv=fsync writes in each data mode (MB/s).
# Every image is checked with e2fsck -fn by those scripts. R defaults to 3.
# Prints one Markdown table: the median (min-max) of each figure for each
# build, and each later build's median over the first's with its bootstrap
# interval and verdict (scripts/bench/stats.py).
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rounds=3
threads="1 4 16"
seqio=1
builds=()
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds="$2"; shift ;;
        --threads) threads="$2"; shift ;;
        --no-seqio) seqio=0 ;;
        -h | --help) sed -n '2,19p' "$0"; exit 0 ;;
        *=*) builds+=("$1") ;;
        *) die "unknown argument: $1 (builds are LABEL=BINDIR)" ;;
    esac
    shift
done
[ "${#builds[@]}" -ge 2 ] || die "give at least two builds as LABEL=BINDIR"
for b in "${builds[@]}"; do
    [ -x "${b#*=}/jbdfs" ] || die "${b#*=}/jbdfs not found (build ${b%%=*} first)"
done
need_root "FUSE and loop mounts"

work="$(mktemp -d /tmp/jbdfs-ab.XXXXXX)"
info "results and logs in $work"
results="$work/results.tsv"
: >"$results"

# seqio_rows LABEL ROUND TSV: the jbdfs figures of bench-seqio's --out
# (fs, backing, read|write, mode, round, MB/s).
seqio_rows() {
    awk -F'\t' -v l="$1" -v r="$2" '$1 ~ /^jbdfs/ {
            what = ($3 == "read") ? "read " $2 " " $4 : "write " $2 " data=" $4
            print l "\t" r "\t" what ", MB/s\t" $6
        }' "$3"
}

# one_build LABEL BINDIR ROUND
one_build() {
    local label="$1" bin="$2" round="$3" tsv="$work/fsmark-$1-$3.tsv"
    info "round $round: $label"
    JBDFS_NO_BUILD=1 JBDFS_BIN_DIR="$bin" "$JBDFS_ROOT/scripts/bench-fsmark.sh" \
        --devices "ram disk" --bdelay auto --threads "$threads" --no-refs --transport dev_fuse \
        --out "$tsv" >"$work/fsmark-$label-$round.log" 2>&1 \
        || die "bench-fsmark failed for $label (see $work/fsmark-$label-$round.log)"
    awk -F'\t' -v l="$label" -v r="$round" \
        '{ print l "\t" r "\tfs_mark " $2 ", " $5 " threads, files/s\t" $6 }' "$tsv" >>"$results"
    [ "$seqio" = 1 ] || return 0
    JBDFS_NO_BUILD=1 JBDFS_BIN_DIR="$bin" "$JBDFS_ROOT/scripts/bench-seqio.sh" --quick \
        --transport dev_fuse --out "$work/seqio-$label-$round.tsv" \
        >"$work/seqio-$label-$round.md" 2>"$work/seqio-$label-$round.log" \
        || die "bench-seqio failed for $label (see $work/seqio-$label-$round.log)"
    seqio_rows "$label" "$round" "$work/seqio-$label-$round.tsv" >>"$results"
}

n="${#builds[@]}"
for round in $(seq 1 "$rounds"); do
    for k in $(seq 0 $((n - 1))); do
        b="${builds[$(((k + round - 1) % n))]}"
        one_build "${b%%=*}" "${b#*=}" "$round"
    done
done

labels=()
for b in "${builds[@]}"; do labels+=("${b%%=*}"); done
section "before and after ($(date -u +%F), $rounds rounds, medians (min-max), verdicts)"
PYTHONPATH="$JBDFS_ROOT/scripts" python3 - "$results" "${labels[@]}" <<'EOF'
import sys

from bench.report import judged, spread, table
from bench.stats import METHOD

path, labels = sys.argv[1], sys.argv[2:]
runs = {}
for line in open(path):
    label, _round, figure, value = line.rstrip("\n").split("\t")
    runs.setdefault(figure, {}).setdefault(label, []).append(float(value))
print(f"method: every figure the median (min–max) of the rounds; {METHOD}\n")
rows = []
for figure, by_label in runs.items():
    got = [by_label.get(l) for l in labels]
    rows.append([figure] + [spread(g) for g in got] + [judged(g, got[0]) for g in got[1:]])
table(["figure"] + labels + [f"{l}/{labels[0]}" for l in labels[1:]], rows)
EOF
