// A fuzz target, like a test: a panic is how it reports a finding.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! Fuzz target: mounting a mutated image (sparse image format) in memory and walking it with writes.
//! The body is shared with the regression tests (tests/robust_fuzz.rs).
#![no_main]

#[path = "../../tests/robust_common/harness.rs"]
mod harness;
#[path = "../../tests/robust_common/walk.rs"]
mod walk;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::mount_walk(data);
});
