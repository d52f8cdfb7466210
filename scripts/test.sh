#!/usr/bin/env bash
# THE test command for jbdfs. `.ci/run` runs exactly this, and so should you:
#
#   scripts/test.sh
#
# Steps, each announced with a header; the first failure stops the run with a
# non-zero exit status:
#   1. scripts/deps.sh        system packages and Rust components
#   2. cargo fmt --check      formatting
#   3. cargo clippy           lints, warnings are errors
#   4. cargo test --release   every test in the workspace (release: making
#                             multi-GiB images and the FUSE tests are slow in debug)
#   5. scripts/fuzz.sh 20     each fuzz target for 20 seconds
#   6. crash-campaign --quick crash states of in-process workloads (docs/CRASH.md)
#   7. fsx.sh --stress --quick two fsx at once in each data mode and block
#                             size, beside CPU hogs (races hide on a quiet machine)
# Works from any directory.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$JBDFS_ROOT"

step() {
    section "$*"
    "$@" || {
        status=$?
        printf '\ntest.sh: FAILED (exit %d): %s\n' "$status" "$*" >&2
        exit "$status"
    }
}

step scripts/deps.sh
step cargo fmt --all -- --check
step cargo clippy --workspace --all-targets -- -D warnings
step cargo test --workspace --release
step scripts/fuzz.sh 20  # each fuzz target for 20 s (fuzz/README.md)
step scripts/crash-campaign --quick
step scripts/fsx.sh --stress --quick

section "all steps passed"
