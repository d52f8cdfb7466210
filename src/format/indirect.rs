//! placeholder; being written.
