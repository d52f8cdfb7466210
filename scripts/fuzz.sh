#!/usr/bin/env bash
# Run every fuzz target in fuzz/ for a bounded time and report executions.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# SECONDS per target (default 60). Targets (default all): format_parsers,
# journal_recovery, mount_walk, fsck_image, nbd_client (see fuzz/README.md).
#
# The machine has a stable toolchain only. cargo-fuzz drives libFuzzer
# through libfuzzer-sys, which needs no nightly feature once no sanitizer is
# asked for: targets are built with `cargo fuzz build --sanitizer none`
# (SanitizerCoverage instrumentation and libFuzzer itself still work; only
# ASan is gone, which safe Rust does not need). cargo-fuzz 0.13 then passes
# only stable flags (-Cpasses=sancov-module, -Cllvm-args=...); it adds -Z
# flags only for sanitizers, build-std and --careful, none of which is used.
# cargo-fuzz is installed into $JBDFS_TOOLS_DIR (default ~/.cache/jbdfs-tools)
# with `cargo install` if missing; libFuzzer needs a C++ compiler (deps.sh).
#
# Each target starts from its seeds (fuzz/seeds/TARGET, in the repo) and a
# working corpus (fuzz/corpus/TARGET, not in the repo). A crash or a hang
# (an input running past 20 s) fails the run and names the input libFuzzer
# saved under fuzz/artifacts/TARGET/; fix the bug, then copy the input into
# fuzz/regressions/TARGET/ so that tests/robust_fuzz.rs keeps running it.
# Prints `fuzz: TARGET: N executions in S s` per target.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=scripts/lib-mount.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib-mount.sh"

case "${1:-}" in
    -h | --help) sed -n '2,25s/^# \{0,1\}//p' "$0"; exit 0 ;;
esac
seconds="${1:-60}"
[ $# -gt 0 ] && shift
case "$seconds" in
    '' | *[!0-9]*) die "SECONDS must be a number (got '$seconds'; see --help)" ;;
esac
targets=("$@")
[ "${#targets[@]}" -gt 0 ] || targets=(format_parsers journal_recovery mount_walk fsck_image nbd_client)

cargo_fuzz="$(tool_install cargo-fuzz '^0.13')"
PATH="$(dirname "$cargo_fuzz"):$PATH"
export PATH
fuzz_dir="$JBDFS_ROOT/fuzz"
target_dir="${JBDFS_FUZZ_TARGET_DIR:-$fuzz_dir/target}"
cd "$fuzz_dir"

section "building the fuzz targets (cargo fuzz build --sanitizer none)"
cargo fuzz build --sanitizer none --target-dir "$target_dir" >&2 \
    || die "cargo fuzz build failed"

failed=0
for t in "${targets[@]}"; do
    section "fuzz $t for ${seconds}s"
    mkdir -p "corpus/$t" "artifacts/$t"
    log="$(mktemp)"
    status=0
    cargo fuzz run --sanitizer none --target-dir "$target_dir" "$t" "corpus/$t" "seeds/$t" -- \
        -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 \
        -print_final_stats=1 >"$log" 2>&1 || status=$?
    runs="$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1 \2/p' "$log" | tail -n 1)"
    if [ "$status" -ne 0 ] || [ -z "$runs" ]; then
        tail -n 60 "$log" >&2
        warn "$t failed (exit $status); the input is in fuzz/artifacts/$t/"
        failed=1
    else
        read -r execs secs <<<"$runs"
        printf 'fuzz: %s: %s executions in %s s\n' "$t" "$execs" "$secs"
    fi
    rm -f "$log"
done
[ "$failed" -eq 0 ] || die "a fuzz target crashed or hung"
