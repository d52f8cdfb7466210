//! Fuzz target: journal recovery over a random journal, then a mount and walk.
//! The body is shared with the regression tests (tests/robust_fuzz.rs).
#![no_main]

#[path = "../../tests/robust_common/walk.rs"]
mod walk;
#[path = "../../tests/robust_common/harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    harness::journal_recovery(data);
});
