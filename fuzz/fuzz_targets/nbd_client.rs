// A fuzz target, like a test: a panic is how it reports a finding.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! Fuzz target: the NBD client's handshake and reply parsing over arbitrary
//! server bytes, and NBD URIs. The body is shared with the regression tests
//! (tests/robust_fuzz.rs).
#![no_main]

#[path = "../../tests/robust_common/harness.rs"]
mod harness;
#[path = "../../tests/robust_common/walk.rs"]
mod walk;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::nbd_client(data);
});
