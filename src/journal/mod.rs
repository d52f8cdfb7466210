//! The journal: every metadata change in jbdfs goes through a [`Handle`],
//! in the shape of Linux's jbd (`journal_start`, `journal_get_write_access`,
//! `journal_dirty_metadata`, `journal_stop`), and is logged in the ext3
//! journal (inode 8) in JBD format before it reaches its home block.
//!
//! One file per phase, as in fs/jbd2: `journal.rs` (the [`Journal`] itself:
//! enabling the log, the commit thread, waiting for commits, abort,
//! unmount), `transaction.rs` (the running transaction and its handles),
//! `commit.rs`, `checkpoint.rs`, `revoke.rs` (recording frees, writing
//! revoke blocks, and recovery's revoke table), `recovery.rs` with
//! `jmap.rs` (replay at mount), `batch.rs` (bdelay), `stats.rs`, and
//! `parallel.rs` (large log and home writes on two threads).
//!
//! # Lock order
//!
//! The journal's place among the filesystem's locks is rule 3 of the
//! crate's lock order (src/lib.rs): after inode locks, before the
//! superblock, group and buffer cache locks. Inside the journal:
//! 1. `Journal::commit_lock`: one committer or checkpointer at a time,
//!    held across log and home I/O. Under it the committer takes `state`
//!    (briefly, again and again), buffer guards, the data queue (the flush
//!    hook) and the device. Under `state` it is only ever try-locked (a
//!    sync waiter committing on its own thread), never waited for.
//! 2. `Journal::state` (jbd2's j_state_lock): held briefly, never across
//!    I/O; `wake`, `drained` and `commit_wake` wait on it. Under it only
//!    buffer cache locks are taken: read guards of committed buffers
//!    (commit's frozen copies, a joining handle's copy of a committing
//!    buffer, checkpoint) and a shard lock to unpin.
//! 3. `Journal::pending_free`: a leaf, never held with `state`.
//! 4. `Journal::config` (barrier, commit interval, batching): a leaf, held
//!    only to copy the values, under any of the above.
//!
//! Fields marked [atomic] or set once (`OnceLock`) need no lock; each field
//! of [`Journal`] and of the structures under `state` says which applies.

pub mod batch;
pub mod checkpoint;
pub mod commit;
pub mod jmap;
// Named as jbd2 names the file; the module is the journal object itself.
#[allow(clippy::module_inception)]
mod journal;
mod parallel;
pub mod recovery;
pub mod revoke;
pub mod stats;
pub mod transaction;

use std::fmt;
use std::ops::Add;
use std::time::Duration;

pub use batch::{set_caller, Batching, DEFAULT_MAX_BATCH_TIME_US, DEFAULT_MIN_BATCH_TIME_US};
pub use journal::{CommitCallback, CommitStart, Journal};
pub use transaction::{Handle, Modify, WriteAccess};

/// File data the commit must account for before it flushes the device ahead
/// of a commit block: in data=ordered it writes the data out first (jbd's
/// ordered-data flush); in every mode it learns that a flush is coming.
pub trait CommitFlushHook: Send + Sync {
    fn before_commit_flush(&self);
}

/// ext3's periodic commit interval (JBD_DEFAULT_MAX_COMMIT_AGE).
pub const DEFAULT_COMMIT_INTERVAL: Duration = Duration::from_secs(5);

/// How the log is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalConfig {
    pub barrier: bool,
    pub commit_interval: Duration,
    pub batching: Batching,
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig {
            barrier: true,
            commit_interval: DEFAULT_COMMIT_INTERVAL,
            batching: Batching::default(),
        }
    }
}

/// A transaction id (jbd2's tid_t). Ids wrap around at 2^32, so two are
/// compared by the sign of their difference, as jbd2's tid_gt and tid_geq
/// do; there is deliberately no `Ord`, which would order them wrongly
/// across the wrap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tid(pub u32);

impl Tid {
    /// tid_gt: `self` comes after `other`.
    pub fn gt(self, other: Tid) -> bool {
        (self.0.wrapping_sub(other.0) as i32) > 0
    }

    /// tid_geq: `self` is `other` or comes after it.
    pub fn geq(self, other: Tid) -> bool {
        (self.0.wrapping_sub(other.0) as i32) >= 0
    }

    /// The later of the two.
    pub fn later(self, other: Tid) -> Tid {
        if other.gt(self) {
            other
        } else {
            self
        }
    }

    /// The transaction after this one.
    pub fn next(self) -> Tid {
        Tid(self.0.wrapping_add(1))
    }

    /// The transaction before this one.
    pub fn prev(self) -> Tid {
        Tid(self.0.wrapping_sub(1))
    }
}

impl fmt::Display for Tid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A block number inside the journal, counted from its superblock (block
/// 0), as jbd2 numbers the log. The journal inode's map turns it into a
/// disk block ([`crate::format::BlockNo`], where home blocks are numbered
/// too); keeping the two apart is the point of this type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JournalBlock(pub u32);

impl JournalBlock {
    /// The position in the journal's block map.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// `n` blocks further into the journal (no wrapping: the log wraps at
/// `s_maxlen`, which only its owner knows).
impl Add<u32> for JournalBlock {
    type Output = JournalBlock;

    fn add(self, n: u32) -> JournalBlock {
        JournalBlock(self.0 + n)
    }
}

impl fmt::Display for JournalBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A mounted 32 MiB memory image for the journal's unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use std::sync::Arc;

    use crate::device::MemoryDevice;
    use crate::format::BlockNo;
    use crate::fs::{Filesystem, MountConfig};

    /// Two blocks near the image's end, where no metadata lives: a test
    /// may journal any bytes in them.
    pub(crate) const A: BlockNo = BlockNo(32_000);
    pub(crate) const B: BlockNo = BlockNo(32_001);

    pub(crate) fn mounted() -> (Arc<MemoryDevice>, Arc<Filesystem>) {
        crate::testing::memory_fs(32 << 20, &MountConfig::default())
    }
}

#[cfg(test)]
mod tests {
    use super::Tid;

    #[test]
    fn tids_compare_across_wraparound() {
        assert!(Tid(0).gt(Tid(u32::MAX)));
        assert!(Tid(5).geq(Tid(5)));
        assert!(!Tid(5).gt(Tid(5)));
        assert!(!Tid(u32::MAX).geq(Tid(1)));
        assert_eq!(Tid(u32::MAX).later(Tid(2)), Tid(2));
        assert_eq!(Tid(u32::MAX).next(), Tid(0));
        assert_eq!(Tid(0).prev(), Tid(u32::MAX));
    }
}
