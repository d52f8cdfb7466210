#!/usr/bin/env bash
# Run e2fsprogs' own e2fsck regression suite (the tests/f_* cases) against
# fsck.jbdfs with e2fsprogs' protocol, and print a markdown table.
#
#   scripts/e2fsprogs-tests.sh [OPTIONS]
#
#   --suite DIR       an unpacked e2fsprogs tests/ directory (default: the
#                     tarball below, unpacked once into the cache directory
#                     and reused: ${JBDFS_E2FSPROGS_DIR:-/tmp/jbdfs-e2fsprogs})
#   --fsck PATH       the checker to run (default target/release/fsck-jbdfs,
#                     built with cargo build --release when missing)
#   --e2fsck          run the host's e2fsck instead, through the same
#                     protocol (the reference column)
#   --only A,B,...    run only these cases (f_foo,f_bar)
#   --jobs N          cases run at once (default 2)
#   --logs DIR        where each case's outputs go (default: logs-jbdfs or
#                     logs-e2fsck in the cache directory)
#   --min-pass PCT    exit 1 when fewer than PCT% of the ext2/ext3 cases
#                     pass (default 0: just report)
#   --strict          also exit 1 when an "other" case is not refused cleanly
#   --known-failures A,B,...  exit 1 when an ext2/ext3 case outside this
#                     list fails (CI's guard against regressions); a
#                     listed case that passes is reported, to be taken off
#
# The suite is $JBDFS_E2FSPROGS_TARBALL, default
# ../shared/e2fsprogs/e2fsprogs-tests-a9f482e5.tar.gz beside the checkout, else
# /work/shared/e2fsprogs/ (see its README.md).
#
# Each f_* case is run as e2fsprogs' tests/run_e2fsck does: the image.gz is
# unpacked to a temporary file (TMPFILE), PREP_CMD runs, then the checker
# runs with FSCK_OPT (default -yf) and, unless ONE_PASS_ONLY, again with
# SECOND_FSCK_OPT (default -yf). e2fsprogs also passes `-N test_filesys` (a
# name for messages); fsck.jbdfs has no -N, so it is left out, for e2fsck too.
# Cases whose script only sets FSCK_OPT, SECOND_FSCK_OPT, ONE_PASS_ONLY,
# IMAGE, PREP_CMD, AFTER_CMD, PASS_ZERO or DESCRIPTION before
# `. $cmd_dir/run_e2fsck` (inside the `if test "$HTREE"x = yx` wrapper and
# the "no debugfs" guard, with HTREE=y as e2fsprogs' test_one sets it) are
# run too; expect.0 (PASS_ZERO) is not compared, so AFTER_CMD is not run.
# Scripts that build their image with mke2fs/debugfs, call the checker
# themselves, or pass options fsck.jbdfs lacks (-E, -j; fsck.jbdfs
# takes -n -p -a -y -f -v -b -D) are "skipped (custom script)", with the reason.
#
# Classes, from the image's features after PREP_CMD (`dumpe2fs -h`; when the
# primary superblock does not open, its raw feature words if its magic is
# right, else the first backup that dumpe2fs opens):
#   ext2/ext3  only features jbdfs supports, read from SUPP_COMPAT,
#              SUPP_INCOMPAT and SUPP_RO_COMPAT in src/format/superblock.rs
#              (an image with no readable superblock counts here too).
#              PASS: the exit status of each run is the one at the end of
#              expect.1 / expect.2 ("Exit status is N"), and `e2fsck -fn`
#              right after the first run exits 0. That last check is waived
#              when expect.1's status has bit 4 (e2fsck itself leaves errors
#              uncorrected) or bit 8 (e2fsck itself could not check it): the
#              image is then not clean after e2fsck either.
#   other      any other feature (extents, flex_bg, 64bit, ...). fsck.jbdfs
#              must refuse: exit 8, the output naming an unsupported
#              feature, the image byte-identical (sha256) afterwards. Where
#              e2fsck -yf (on a copy) removes an unsupported feature, that
#              feature is itself the damage: the note says "e2fsck clears X".
#              With --e2fsck these cases get the ext2/ext3 protocol instead.
#   skipped    custom scripts, missing image.gz or expect files.
# Every checker run is guarded by `timeout 60`; a timeout is a failure
# ("hung"). Exit status 101 (a Rust panic) is marked "panic".
#
# Prints the table, the failures with the first telling line of their logs,
# then `ext2/ext3 cases: P/N passed (E e2fsck-clean after first run), other:
# R/M refused cleanly, skipped: S`.
# Needs e2fsprogs (e2fsck, dumpe2fs; debugfs for PREP_CMD), gzip, sha256sum
# and timeout: when one is missing it skips (exit 0), or fails with CI set.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cache="${JBDFS_E2FSPROGS_DIR:-/tmp/jbdfs-e2fsprogs}"
tarball="${JBDFS_E2FSPROGS_TARBALL:-$(shared_file e2fsprogs/e2fsprogs-tests-a9f482e5.tar.gz)}"
suite=""
fsck=""
use_e2fsck=0
only=""
jobs=2
logs=""
min_pass=0
strict=0
known_failures=""
timeout_s=60

while [ $# -gt 0 ]; do
    case "$1" in
        --suite) suite="$2"; shift ;;
        --fsck) fsck="$2"; shift ;;
        --e2fsck) use_e2fsck=1 ;;
        --only) only="$2"; shift ;;
        --jobs) jobs="$2"; shift ;;
        --logs) logs="$2"; shift ;;
        --min-pass) min_pass="$2"; shift ;;
        --strict) strict=1 ;;
        --known-failures) known_failures="$2"; shift ;;
        -h | --help) awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
    shift
done
case "$jobs" in '' | *[!0-9]* | 0) die "--jobs wants a positive number, not '$jobs'" ;; esac
case "$min_pass" in '' | *[!0-9]*) die "--min-pass wants a percentage (0-100), not '$min_pass'" ;; esac

missing=()
for tool in e2fsck dumpe2fs gzip gunzip sha256sum timeout od; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
[ ${#missing[@]} -eq 0 ] || skip_or_fail "missing tools: ${missing[*]} (apt-get install e2fsprogs gzip coreutils)"
have_debugfs=0
command -v debugfs >/dev/null 2>&1 && have_debugfs=1

export LC_ALL=C TZ=GMT0 E2FSCK_CONFIG=/dev/null BLKID_FILE=/dev/null \
    E2FSPROGS_SKIP_PROGRESS=yes EXT2FS_NO_MTAB_OK=yes E2FSPROGS_LIBMAGIC_SUPPRESS=yes
unset LANG LANGUAGE FSCK_OPT SECOND_FSCK_OPT ONE_PASS_ONLY IMAGE PREP_CMD AFTER_CMD PASS_ZERO

# ---- the suite -------------------------------------------------------------
if [ -z "$suite" ]; then
    suite="$cache/e2fsprogs-tests/tests"
    [ -f "$suite/run_e2fsck" ] || unpack_once "$tarball" e2fsprogs-tests "$cache/e2fsprogs-tests" tests/run_e2fsck
fi
suite="$(cd "$suite" && pwd -P)" || die "no suite directory: $suite"
[ -f "$suite/run_e2fsck" ] || die "$suite is not e2fsprogs' tests/ directory (no run_e2fsck)"

# ---- the checker -----------------------------------------------------------
if [ "$use_e2fsck" -eq 1 ]; then
    checker="$(command -v e2fsck)"
    mode=e2fsck
else
    mode=jbdfs
    if [ -z "$fsck" ]; then
        fsck="$JBDFS_ROOT/target/release/fsck-jbdfs"
        if [ ! -x "$fsck" ]; then
            pkg="$(sed -n 's/^name = "\(.*\)"/\1/p' "$JBDFS_ROOT/fsck/Cargo.toml" | head -1)"
            info "building $pkg (cargo build --release -p $pkg)"
            (cd "$JBDFS_ROOT" && cargo build --release -p "$pkg") || die "cargo build --release -p $pkg failed"
        fi
    fi
    [ -x "$fsck" ] || die "no checker at $fsck"
    checker="$(cd "$(dirname "$fsck")" && pwd -P)/$(basename "$fsck")"
fi
[ -n "$logs" ] || logs="$cache/logs-$mode"
mkdir -p "$logs"
logs="$(cd "$logs" && pwd -P)"

# ---- the features jbdfs supports, from src/format/superblock.rs -------------
sbrs="$JBDFS_ROOT/src/format/superblock.rs"
[ -f "$sbrs" ] || die "cannot find $sbrs"
declare -A FVAL=() SUPP=() NAMEOF=() SUPPORTED=()
while read -r cname val; do
    FVAL[$cname]=$((val))
done < <(sed -n 's/^ *pub const \(\(RO_\)\{0,1\}\(IN\)\{0,1\}COMPAT_[A-Z0-9_]*\): u32 = \(0x[0-9a-fA-F]*\);.*/\1 \4/p' "$sbrs")
for kind in COMPAT INCOMPAT RO_COMPAT; do
    expr="$(tr '\n' ' ' <"$sbrs" | grep -o "pub const SUPP_$kind: u32 = [^;]*;" | sed 's/.*= //; s/;//; s/|/ /g')"
    [ -n "$expr" ] || die "no SUPP_$kind in $sbrs"
    mask=0
    for cname in $expr; do
        [ -n "${FVAL[$cname]:-}" ] || die "SUPP_$kind names $cname, which $sbrs does not define"
        mask=$((mask | FVAL[$cname]))
    done
    SUPP[$kind]=$mask
done
while read -r kind cname fname; do
    case "$kind" in Compat) k=COMPAT ;; Incompat) k=INCOMPAT ;; RoCompat) k=RO_COMPAT ;; *) continue ;; esac
    [ -n "${FVAL[$cname]:-}" ] || continue
    NAMEOF[$k:${FVAL[$cname]}]=$fname
    if ((FVAL[$cname] & SUPP[$k])); then SUPPORTED[$fname]=1; fi
done < <(sed -n 's/^ *(Kind::\([A-Za-z]*\), \([A-Z0-9_]*\), "\([^"]*\)"),.*/\1 \2 \3/p' "$sbrs")
[ ${#SUPPORTED[@]} -gt 0 ] || die "found no feature names (Kind::..., \"name\") in $sbrs"
supported_list="$(printf '%s\n' "${!SUPPORTED[@]}" | sort | tr '\n' ' ')"

# ---- per-case helpers ------------------------------------------------------

# parse_script FILE: check that a case's script is the plain run_e2fsck
# flow. Prints the assignments to evaluate (one a line), "#debugfs" when
# the script wants debugfs, or "CUSTOM<TAB>why" when it does more.
parse_script() {
    awk '
    function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
    function bad(x) { if (reason == "") reason = x }
    { l = trim($0) }
    l == "" || l ~ /^#/ { next }
    skip > 0 { if (l ~ /^if /) skip++; else if (l == "fi") skip--; next }
    l ~ /^if ! test -x \$DEBUGFS_EXE; then$/ { skip = 1; print "#debugfs"; next }
    l ~ /^if test "\$HTREE"x = x ; then$/ { skip = 1; next }
    l ~ /^if test "\$HTREE"x = yx ; then$/ { htree = 1; next }
    htree && l == "else" { htree = 0; skip = 1; next }
    htree && l == "fi" { htree = 0; next }
    l ~ /^(FSCK_OPT|SECOND_FSCK_OPT|ONE_PASS_ONLY|IMAGE|PREP_CMD|AFTER_CMD|PASS_ZERO|DESCRIPTION)=/ {
        if (ran) bad(l); else print l; next
    }
    l == ". $cmd_dir/run_e2fsck" { if (ran) bad(l); ran = 1; next }
    ran && l ~ /^(rm -f|unset) / { next }
    { bad(l) }
    END {
        if (reason != "") print "CUSTOM\t" reason
        else if (!ran) print "CUSTOM\tdoes not run run_e2fsck"
    }' "$1"
}

# features IMG: print "SOURCE name name ...", the image's features.
features() {
    local img="$1" out sb words magic k w bit names=""
    out="$(dumpe2fs -h "$img" 2>/dev/null | sed -n 's/^Filesystem features: *//p')" || true
    if [ -n "$out" ]; then
        [ "$out" = "(none)" ] && out=""
        echo "primary $out"
        return
    fi
    magic="$(od -A n -t u2 -j 1080 -N 2 "$img" 2>/dev/null | tr -d ' ')"
    if [ "$magic" = 61267 ]; then
        read -r -a words < <(od -A n -t u4 -j 1116 -N 12 "$img")
        for k in 0 1 2; do
            w=${words[$k]}
            for bit in $(seq 0 31); do
                if ((w >> bit & 1)); then
                    case $k in
                        0) names+=" ${NAMEOF[COMPAT:$((1 << bit))]:-FEATURE_C$bit}" ;;
                        1) names+=" ${NAMEOF[INCOMPAT:$((1 << bit))]:-FEATURE_I$bit}" ;;
                        2) names+=" ${NAMEOF[RO_COMPAT:$((1 << bit))]:-FEATURE_R$bit}" ;;
                    esac
                fi
            done
        done
        echo "raw-primary$names"
        return
    fi
    for sb in 8193:1024 16384:2048 32768:4096; do
        out="$(dumpe2fs -h -o "superblock=${sb%:*}" -o "blocksize=${sb#*:}" "$img" 2>/dev/null |
            sed -n 's/^Filesystem features: *//p')" || true
        if [ -n "$out" ]; then
            [ "$out" = "(none)" ] && out=""
            echo "backup@${sb%:*} $out"
            return
        fi
    done
    echo "unreadable"
}

# unsupported NAME...: the names jbdfs does not support.
unsupported() {
    local f out=""
    for f in "$@"; do
        [ -n "${SUPPORTED[$f]:-}" ] || out+=" $f"
    done
    echo "${out# }"
}

# exit_of FILE: N from the last "Exit status is N" line.
exit_of() {
    local f="$1"
    if [ -f "$f" ]; then
        sed -n 's/^Exit status is \([0-9]*\)$/\1/p' "$f" | tail -1
    elif [ -f "$f.gz" ]; then
        gunzip <"$f.gz" | sed -n 's/^Exit status is \([0-9]*\)$/\1/p' | tail -1
    fi
}

# run_checker LOG OPTS IMG: the checker under timeout; prints its status
# ("hung" when it timed out).
run_checker() {
    local log="$1" opts="$2" img="$3" st
    # shellcheck disable=SC2086 # OPTS is a word list, as in run_e2fsck
    timeout -k 5 "$timeout_s" "$checker" $opts "$img" >"$log" 2>&1 </dev/null
    st=$?
    case $st in 124 | 137) echo hung ;; *) echo "$st" ;; esac
}

# first_line LOG: the first line of a log that says something (not a pass
# banner, a version line or a summary), or "(nothing reported)".
first_line() {
    local line
    line="$(grep -v -E '^(Pass [0-9A-Z]+[:.]|e2fsck [0-9]|fsck-jbdfs [0-9]|[^ ]*: [0-9]+/[0-9]+ files|$|\*+ *FILE SYSTEM WAS MODIFIED|Exit status is)' "$1" 2>/dev/null |
        head -1 | cut -c1-140)"
    echo "${line:-(nothing reported)}"
}

# expect_line FILE: first_line of an expect file (which may be gzipped).
expect_line() {
    if [ -f "$1" ]; then
        first_line "$1"
    else
        gunzip <"$1.gz" >"$work/expect" 2>/dev/null
        first_line "$work/expect"
    fi
}

# record FIELDS...: the case's result line (tab-separated): name class
# expected got oracle result note.
record() {
    local IFS=$'\t'
    printf '%s\n' "$*" >"$results/$name.res"
}

# detail TEXT: one more line about a failure, printed after the table.
detail() {
    printf '%s\n' "$*" >>"$results/$name.detail"
}

# run_case NAME: run one case, leaving its result in $results/NAME.res.
run_case() {
    name="$1"
    # The names run_e2fsck's scripts use (test_name, cmd_dir, DEBUGFS, ...)
    # are set for them, and read back by eval.
    # shellcheck disable=SC2034
    local test_dir="$suite/$name" test_name="$1" cmd_dir="$suite"
    # shellcheck disable=SC2034
    local FSCK_OPT="" SECOND_FSCK_OPT="" ONE_PASS_ONLY="" IMAGE="" PREP_CMD="" AFTER_CMD="" PASS_ZERO="" DESCRIPTION=""
    # shellcheck disable=SC2034
    local DEBUGFS=debugfs DUMPE2FS=dumpe2fs TUNE2FS=tune2fs DEBUGFS_EXE TMPFILE work parsed kind scripted=0
    # shellcheck disable=SC2034
    DEBUGFS_EXE="$(command -v debugfs || echo /nonexistent)"
    if [ -f "$test_dir/script" ]; then
        scripted=1
        parsed="$(parse_script "$test_dir/script")"
        if grep -q '^CUSTOM' <<<"$parsed"; then
            local why
            if ! grep -q 'run_e2fsck' "$test_dir/script"; then
                why="own protocol, not run_e2fsck"
            elif grep -q 'MKE2FS' "$test_dir/script"; then
                why="builds its image with mke2fs/debugfs"
            else
                why="extra steps"
            fi
            record "$name" skipped - - - "skipped (custom script)" \
                "$why: $(sed -n 's/^CUSTOM\t//p' <<<"$parsed" | cut -c1-60)"
            return
        fi
        if grep -q '^#debugfs' <<<"$parsed" && [ "$have_debugfs" -eq 0 ]; then
            record "$name" skipped - - - "skipped (no debugfs)" ""
            return
        fi
        eval "$(grep -v '^#' <<<"$parsed")"
    fi
    : "${IMAGE:=$test_dir/image.gz}" "${FSCK_OPT:=-yf}" "${SECOND_FSCK_OPT:=-yf}"
    local label
    label="$([ $scripted -eq 1 ] && echo "scripted" || echo "default")"
    local bad_opts
    # shellcheck disable=SC2086 # word lists, as run_e2fsck uses them
    bad_opts="$(printf '%s\n' $FSCK_OPT $SECOND_FSCK_OPT | grep -v -E '^-[npayfvD]*(b[0-9]+)?$' | sort -u | tr '\n' ' ')"
    if [ -n "$bad_opts" ]; then
        record "$name" skipped - - - "skipped (custom script)" "e2fsck options fsck.jbdfs lacks: ${bad_opts% }"
        return
    fi
    case "$IMAGE" in *.gz) ;; *) record "$name" skipped - - - "skipped (custom script)" "image is not .gz: ${IMAGE##*/}"; return ;; esac
    [ -f "$IMAGE" ] || { record "$name" skipped - - - "skipped (no image.gz)" ""; return; }
    local exp1 exp2=""
    exp1="$(exit_of "$test_dir/expect.1")"
    [ -n "$exp1" ] || { record "$name" skipped - - - "skipped (no expect.1)" ""; return; }
    if [ "$ONE_PASS_ONLY" != true ]; then
        exp2="$(exit_of "$test_dir/expect.2")"
        [ -n "$exp2" ] || { record "$name" skipped - - - "skipped (no expect.2)" ""; return; }
    fi

    work="$(mktemp -d "$tmproot/$name.XXXXXX")"
    TMPFILE="$work/image"
    cd "$work" || return
    rm -f "$logs/$name".*
    if ! gunzip <"$IMAGE" >"$TMPFILE" 2>"$logs/$name.prep.log"; then
        record "$name" skipped - - - "skipped (image does not unpack)" ""
        return
    fi
    if [ -n "$PREP_CMD" ]; then
        eval "$PREP_CMD" >>"$logs/$name.prep.log" 2>&1
    fi
    [ -s "$logs/$name.prep.log" ] || rm -f "$logs/$name.prep.log"

    local feats src unsup
    feats="$(features "$TMPFILE")"
    src="${feats%% *}"
    # shellcheck disable=SC2086
    unsup="$(unsupported ${feats#"$src"})"
    local expected="$exp1/${exp2:--}"

    local note="" cleared=""
    if [ -n "$unsup" ]; then
        kind=other
        note="$unsup"
        [ "$src" = primary ] || note+=" ($src)"
        # Is an unsupported feature the damage? e2fsck on a copy says.
        cp "$TMPFILE" "$work/ref"
        # shellcheck disable=SC2086
        timeout -k 5 "$timeout_s" e2fsck $FSCK_OPT "$work/ref" >"$logs/$name.ref.log" 2>&1 </dev/null
        local after f
        after=" $(features "$work/ref" | cut -d' ' -f2-) "
        for f in $unsup; do
            case "$after" in *" $f "*) ;; *) cleared+=" $f" ;; esac
        done
        rm -f "$work/ref"
        [ -z "$cleared" ] || note+="; e2fsck clears:$cleared"
    else
        kind=ext
        [ "$src" = primary ] || note="superblock: $src"
    fi
    [ $scripted -eq 0 ] || note="${note:+$note; }scripted"

    if [ "$kind" = other ] && [ "$mode" = jbdfs ]; then
        local sum0 sum1 st why=""
        sum0="$(sha256sum <"$TMPFILE")"
        st="$(run_checker "$logs/$name.1.log" "$FSCK_OPT" "$TMPFILE")"
        sum1="$(sha256sum <"$TMPFILE")"
        [ "$st" = 8 ] || why="exit $st"
        # shellcheck disable=SC2046,SC2086
        grep -q -i -F $(printf -- '-e %s ' $unsup) "$logs/$name.1.log" || why="${why:+$why, }no feature named"
        [ "$sum0" = "$sum1" ] || why="${why:+$why, }image changed"
        if [ -z "$why" ]; then
            record "$name" other "refuse (8)" "$st" - refused "$note"
        else
            record "$name" other "refuse (8)" "$st" - "NOT REFUSED CLEANLY" "$note"
            detail "$name (other: $unsup): $why; log: $(first_line "$logs/$name.1.log")"
        fi
        rm -rf "$work"
        return
    fi

    local s1 s2=- o ok=1 why="" class_label
    class_label="$([ "$kind" = ext ] && echo "ext2/ext3" || echo other)"
    s1="$(run_checker "$logs/$name.1.log" "$FSCK_OPT" "$TMPFILE")"
    timeout -k 5 "$timeout_s" e2fsck -fn "$TMPFILE" >"$logs/$name.oracle.log" 2>&1 </dev/null
    o=$?
    if [ "$ONE_PASS_ONLY" != true ]; then
        s2="$(run_checker "$logs/$name.2.log" "$SECOND_FSCK_OPT" "$TMPFILE")"
    fi
    local got="$s1/$s2" oracle
    if [ "$s1" != "$exp1" ]; then
        ok=0
        why="run 1 exit $s1, expected $exp1: $(first_line "$logs/$name.1.log")"
        [ "$s1" = 0 ] && why+=" (e2fsck: $(expect_line "$test_dir/expect.1"))"
    fi
    if [ "$ONE_PASS_ONLY" != true ] && [ "$s2" != "$exp2" ]; then
        ok=0
        why="${why:+$why | }run 2 exit $s2, expected $exp2: $(first_line "$logs/$name.2.log")"
        [ "$s2" = 0 ] && why+=" (e2fsck: $(expect_line "$test_dir/expect.2"))"
    fi
    if [ "$o" -eq 0 ]; then
        oracle=yes
    else
        oracle="no ($o)"
        if (((exp1 & 12) == 0)); then
            ok=0
            why="${why:+$why | }e2fsck -fn after run 1 exits $o: $(first_line "$logs/$name.oracle.log")"
        else
            oracle="no ($o, waived)"
        fi
    fi
    case "$s1 $s2" in *hung*) note="${note:+$note; }hung" ;; esac
    case "$s1 $s2" in *101*) note="${note:+$note; }panic" ;; esac
    if [ $ok -eq 1 ]; then
        record "$name" "$class_label" "$expected" "$got" "$oracle" pass "$note"
    else
        record "$name" "$class_label" "$expected" "$got" "$oracle" FAIL "$note"
        detail "$name ($label): $why"
    fi
    rm -rf "$work"
}

# ---- run -------------------------------------------------------------------
cases=()
if [ -n "$only" ]; then
    IFS=, read -r -a cases <<<"$only"
    for c in "${cases[@]}"; do
        [ -d "$suite/$c" ] || die "no case $c in $suite"
    done
else
    for d in "$suite"/f_*/; do
        d="${d%/}"
        cases+=("${d##*/}")
    done
fi
[ ${#cases[@]} -gt 0 ] || die "no f_* cases in $suite"

tmproot="$(mktemp -d "${TMPDIR:-/tmp}/jbdfs-e2fsprogs-run.XXXXXX")"
results="$tmproot/results"
mkdir -p "$results"
trap 'rm -rf "$tmproot"' EXIT
trap 'exit 130' INT TERM HUP

start=$SECONDS
info "suite: $suite"
info "checker: $checker ($mode), ${#cases[@]} cases, $jobs at a time"
info "ext2/ext3 = only these features: $supported_list(from $sbrs)"
info "logs: $logs"
running=0
for c in "${cases[@]}"; do
    (set +e +o pipefail; run_case "$c") &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
wait || true
elapsed=$((SECONDS - start))

# ---- report ----------------------------------------------------------------
section "e2fsprogs f_* cases: $([ "$mode" = jbdfs ] && echo "fsck.jbdfs ($checker)" || echo "e2fsck ($checker, reference)")"
echo
echo "| case | class | expected exits | got exits | e2fsck -fn clean after run 1 | result | note |"
echo "|---|---|---|---|---|---|---|"
for c in "${cases[@]}"; do
    if [ -f "$results/$c.res" ]; then
        IFS=$'\t' read -r n cl ex got orc res note <"$results/$c.res"
    else
        n="$c" cl="?" ex=- got=- orc=- res="FAIL (no result: the case's run crashed)" note=""
        printf '%s\t?\n' "$c" >"$results/$c.res"
    fi
    printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$n" "$cl" "$ex" "$got" "$orc" "$res" "${note//|/\\|}"
done

cat "$results"/*.res >"$tmproot/all.tsv"
count() { awk -F'\t' "$1" "$tmproot/all.tsv" | wc -l; }
# shellcheck disable=SC2016 # awk programs
{
    n_ext="$(count '$2 == "ext2/ext3"')"
    p_ext="$(count '$2 == "ext2/ext3" && $6 == "pass"')"
    e_ext="$(count '$2 == "ext2/ext3" && $5 ~ /^yes/')"
    n_def="$(count '$2 == "ext2/ext3" && $7 !~ /scripted/')"
    p_def="$(count '$2 == "ext2/ext3" && $7 !~ /scripted/ && $6 == "pass"')"
    n_other="$(count '$2 == "other"')"
    if [ "$mode" = jbdfs ]; then
        r_other="$(count '$2 == "other" && $6 == "refused"')"
    else
        r_other="$(count '$2 == "other" && $6 == "pass"')"
    fi
    n_skip="$(count '$2 == "skipped"')"
    n_crash="$(count '$2 == "?"')"
}

if ls "$results"/*.detail >/dev/null 2>&1; then
    echo
    echo "Failures (logs in $logs):"
    for c in "${cases[@]}"; do
        [ -f "$results/$c.detail" ] && sed 's/^/- /' "$results/$c.detail"
    done
fi

echo
echo "ext2/ext3 default-flow (no script): $p_def/$n_def passed; scripted: $((p_ext - p_def))/$((n_ext - n_def)) passed"
if [ "$mode" = jbdfs ]; then
    echo "ext2/ext3 cases: $p_ext/$n_ext passed ($e_ext e2fsck-clean after first run), other: $r_other/$n_other refused cleanly, skipped: $n_skip"
else
    echo "ext2/ext3 cases: $p_ext/$n_ext passed ($e_ext e2fsck-clean after first run), other: $r_other/$n_other passed the same protocol (e2fsck does not refuse), skipped: $n_skip"
fi
echo "time: ${elapsed} s ($mode, $jobs jobs)"

status=0
if [ "$n_crash" -gt 0 ]; then
    echo "e2fsprogs-tests: FAIL: $n_crash case(s) left no result"
    status=1
fi
if [ "$n_ext" -gt 0 ] && [ $((p_ext * 100)) -lt $((min_pass * n_ext)) ]; then
    echo "e2fsprogs-tests: FAIL: ext2/ext3 pass rate $((p_ext * 100 / n_ext))% is below --min-pass $min_pass%"
    status=1
fi
if [ "$mode" = jbdfs ] && [ "$r_other" -lt "$n_other" ]; then
    if [ "$strict" -eq 1 ]; then
        echo "e2fsprogs-tests: FAIL (--strict): $((n_other - r_other)) other case(s) not refused cleanly"
        status=1
    else
        echo "e2fsprogs-tests: note: $((n_other - r_other)) other case(s) not refused cleanly (a failure only with --strict)"
    fi
fi
if [ -n "$known_failures" ]; then
    # shellcheck disable=SC2016 # awk program
    while IFS= read -r c; do
        case ",$known_failures," in
            *",$c,"*) ;;
            *) echo "e2fsprogs-tests: FAIL: $c failed and is not a known failure"; status=1 ;;
        esac
    done < <(awk -F'\t' '$2 == "ext2/ext3" && $6 != "pass" { print $1 }' "$tmproot/all.tsv")
    for c in ${known_failures//,/ }; do
        # shellcheck disable=SC2016 # awk program
        if awk -F'\t' -v c="$c" '$1 == c && $6 == "pass"' "$tmproot/all.tsv" | grep -q .; then
            echo "e2fsprogs-tests: note: $c passes now; take it off --known-failures"
        fi
    done
fi
[ "$status" -ne 0 ] || echo "e2fsprogs-tests: OK (--min-pass $min_pass%$([ "$strict" -eq 1 ] && echo ", --strict"))"
exit "$status"
