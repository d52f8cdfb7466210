#!/usr/bin/env bash
# THE test command for jbdfs. `.ci/run` runs exactly this, and so should you:
#
#   scripts/test.sh
#
# Steps, each announced with a header; the first failure stops the run with a
# non-zero exit status:
#   1. scripts/deps.sh        system packages and Rust components
#   2. cargo fmt --check      formatting
#      the benchmarks' statistics  python3 -m unittest bench.test_stats: the
#                             verdicts on synthetic samples (under a second)
#   3. cargo clippy           lints, warnings are errors
#   4. cargo test --release   every test in the workspace (release: making
#                             multi-GiB images and the FUSE tests are slow in
#                             debug), the FUSE tests over /dev/fuse; with
#                             JBDFS_REQUIRE_ORACLES=1, as every cargo test
#                             step here: a test whose root, /dev/fuse, loop
#                             devices or tools are missing fails instead of
#                             skipping (the test kit's require!, testkit/)
#   5. the io_uring pass      with the kernel's enable_uring turned on (and put
#                             back afterwards, also on failure): the FUSE test
#                             binaries again over FUSE-over-io_uring
#                             (JBDFS_TEST_TRANSPORT=io_uring cargo test -p
#                             jbdfs-daemon --tests), pjdfstest.sh and
#                             fsx.sh --stress --quick with --transport io_uring.
#                             Where enable_uring cannot be written it is not
#                             run, and says so; with CI set that is a failure.
#   6. scripts/fuzz.sh 20     each fuzz target for 20 seconds
#   7. crash-campaign --quick crash states of in-process workloads (docs/CRASH.md),
#                             then again with each state's journal inode zeroed
#                             and fsck -fy as the only recovery (--damage
#                             journal-inode: the s_jnl_blocks backup)
#      e2fsprogs-tests.sh     e2fsprogs' own f_* fsck cases against fsck.jbdfs
#                             (a floor on the pass rate; every image with
#                             features jbdfs lacks refused cleanly)
#      fstests.sh --quick-sample  100 fstests generic/ tests on Linux
#                             ext3 (loop) and on jbdfs over /dev/fuse and
#                             io_uring (it turns enable_uring on and puts it
#                             back itself), e2fsck -fn of both images after
#                             each test; fails where jbdfs fails a test ext3
#                             passes, unless --known-failures names it with
#                             its reason (docs/FSTESTS.md)
#   8. fsx.sh --stress --quick two fsx at once in each data mode and block
#                             size, beside CPU hogs (races hide on a quiet
#                             machine), over /dev/fuse
# Each step's time is printed after it, and all of them at the end.
# Works from any directory.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$JBDFS_ROOT"

timings=()
step() {
    local start=$SECONDS status
    section "$*"
    "$@" || {
        status=$?
        printf '\ntest.sh: FAILED (exit %d, after %d s): %s\n' "$status" $((SECONDS - start)) "$*" >&2
        exit "$status"
    }
    timings+=("$(printf '%5d s  %s' $((SECONDS - start)) "$*")")
    printf '\ntest.sh: %d s: %s\n' $((SECONDS - start)) "$*"
}

# FUSE over io_uring is off unless root turns the fuse module's switch on.
# The io_uring pass turns it on and puts back what it found, on any exit.
ENABLE_URING=/sys/module/fuse/parameters/enable_uring
uring_was=""
uring_restore() {
    [ -n "$uring_was" ] || return 0
    if echo "$uring_was" >"$ENABLE_URING"; then
        printf 'test.sh: %s put back to %s\n' "$ENABLE_URING" "$uring_was"
    else
        printf 'test.sh: cannot put %s back to %s\n' "$ENABLE_URING" "$uring_was" >&2
        return 1
    fi
    uring_was=""
}
trap uring_restore EXIT
trap 'exit 130' INT TERM HUP

# uring_on: turn enable_uring on for the io_uring pass. False, saying why,
# where it cannot be (with CI set, the run fails instead).
uring_on() {
    local why=""
    if [ ! -e "$ENABLE_URING" ]; then
        why="this kernel has no FUSE over io_uring ($ENABLE_URING is missing; Linux 6.14+ with CONFIG_FUSE_IO_URING)"
    elif [ ! -w "$ENABLE_URING" ]; then
        why="$ENABLE_URING is not writable here (not root, or /sys is read-only)"
    fi
    if [ -z "$why" ]; then
        uring_was="$(cat "$ENABLE_URING")"
        if echo 1 >"$ENABLE_URING" && [ "$(cat "$ENABLE_URING")" = Y ]; then
            printf 'test.sh: %s was %s, now Y for the io_uring pass\n' "$ENABLE_URING" "$uring_was"
            return 0
        fi
        why="writing 1 to $ENABLE_URING did not turn it on"
    fi
    printf '\ntest.sh: the io_uring pass was NOT run: %s\n' "$why" >&2
    if [ -n "${CI:-}" ]; then
        printf 'test.sh: FAILED: CI is set, and CI must test the io_uring transport\n' >&2
        exit 1
    fi
    return 1
}

step scripts/deps.sh
step cargo fmt --all -- --check
step env PYTHONPATH="$JBDFS_ROOT/scripts" python3 -m unittest -q bench.test_stats
step cargo clippy --workspace --all-targets -- -D warnings
step env JBDFS_REQUIRE_ORACLES=1 JBDFS_TEST_TRANSPORT=dev_fuse cargo test --workspace --release
section "the io_uring pass"
if uring_on; then
    step env JBDFS_REQUIRE_ORACLES=1 JBDFS_TEST_TRANSPORT=io_uring cargo test --release -p jbdfs-daemon --tests
    step scripts/pjdfstest.sh --transport io_uring
    step scripts/fsx.sh --stress --quick --transport io_uring
    step uring_restore
fi
step scripts/fuzz.sh 20  # each fuzz target for 20 s (fuzz/README.md)
step scripts/crash-campaign --quick
step scripts/crash-campaign --quick --damage journal-inode
step scripts/e2fsprogs-tests.sh --min-pass 95 --strict \
    --known-failures f_extents
step scripts/fstests.sh --quick-sample --transport both --timeout 300 \
    --known-failures 'generic/277=a regular file ctime after chattr: under FUSE writeback cache the kernel keeps regular files c/mtime itself and never takes them from the daemon' \
    --known-failures 'generic/424=statx attributes (immutable, append, nodump) not reported over FUSE (issue 21)' \
    --known-failures 'generic/050=write-protected device: fstests expects mount(8) own read-only retry messages, which a FUSE mount does not give (docs/FSTESTS.md)'
step scripts/fsx.sh --stress --quick --transport dev_fuse

section "all steps passed"
printf '%s\n' "${timings[@]}"
