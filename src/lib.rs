//! jbdfs: a userspace journaling filesystem that keeps the ext3 on-disk format.
//!
//! Layers, bottom up (see docs/ARCHITECTURE.md):
//! - [`format`]: pure bytes <-> structs for ext3 and JBD, no I/O;
//! - [`device`]: the `BlockDevice` trait and its implementations;
//! - [`mkfs`], [`fsck`]: the library code behind the two thin binaries.
//!
//! # Lock order
//!
//! Locks are always taken in this order, never the reverse (later layers add to
//! this list as they arrive):
//! 1. device-internal locks (memory device contents) — leaf locks, never held
//!    while calling out of the device.

pub mod cache;
pub mod daemon;
pub mod device;
pub mod format;
pub mod fs;
pub mod fsck;
pub mod fuse;
pub mod journal;
pub mod mkfs;
pub mod options;
pub mod util;
