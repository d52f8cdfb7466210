//! The journal: every metadata change in jbdfs goes through a [`Handle`],
//! in the shape of Linux's jbd (`journal_start`, `journal_get_write_access`,
//! `journal_dirty_metadata`, `journal_stop`).
//!
//! This is the seam the filesystem layer is written against. The JBD
//! implementation (transactions, commit thread, checkpoint, revoke and
//! recovery, one file per phase as in fs/jbd2) plugs in behind it; until
//! then, a handle marks its buffers dirty in the buffer cache and a
//! synchronous handle writes them home and flushes the device on stop.

pub mod jmap;
pub mod recovery;
pub mod revoke;
pub mod transaction;

pub use transaction::{Handle, Journal};
