//! The journal: every metadata change in jbdfs goes through a [`Handle`],
//! in the shape of Linux's jbd (`journal_start`, `journal_get_write_access`,
//! `journal_dirty_metadata`, `journal_stop`), and is logged in the ext3
//! journal (inode 8) in JBD format before it reaches its home block.
//!
//! One file per phase, as in fs/jbd2: `transaction.rs` (handles and the
//! running transaction), `commit.rs`, `checkpoint.rs`, `recovery.rs` with
//! `revoke.rs` and `jmap.rs` (replay at mount), `batch.rs` (bdelay),
//! `stats.rs`, `parallel.rs` (large log and home writes on two threads),
//! and `enable` here, which starts logging at mount.

pub mod batch;
pub mod checkpoint;
pub mod commit;
pub mod jmap;
mod parallel;
pub mod recovery;
pub mod revoke;
pub mod stats;
pub mod transaction;

use std::io;
use std::sync::Arc;
use std::time::Duration;

pub use batch::{set_caller, Batching};
pub use transaction::{CommitCallback, Handle, Journal};

use crate::format::jbd::JournalSuperblock;
use transaction::LogArea;

/// File data the commit must account for before it flushes the device ahead
/// of a commit block: in data=ordered it writes the data out first (jbd's
/// ordered-data flush); in every mode it learns that a flush is coming.
pub trait CommitFlushHook: Send + Sync {
    fn before_commit_flush(&self);
}

/// How the log is written.
#[derive(Clone, Copy, Debug)]
pub struct JournalConfig {
    pub barrier: bool,
    pub commit_interval: Duration,
    pub batching: Batching,
}

impl Default for JournalConfig {
    fn default() -> Self {
        JournalConfig {
            barrier: true,
            commit_interval: Duration::from_secs(5),
            batching: Batching::default(),
        }
    }
}

impl Journal {
    /// Starts logging into the journal whose blocks are `map` (disk block of
    /// each journal block) and whose superblock is `jsb`; the log must be
    /// empty (recovered).
    pub fn enable(
        self: &Arc<Self>,
        map: Vec<u32>,
        jsb: &JournalSuperblock,
        cfg: JournalConfig,
    ) -> io::Result<()> {
        if jsb.s_start != 0 {
            return Err(io::Error::other("the journal needs recovery"));
        }
        if (jsb.s_maxlen as usize) > map.len() || jsb.s_first == 0 || jsb.s_first >= jsb.s_maxlen {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "journal superblock does not fit its inode",
            ));
        }
        let log = LogArea {
            map,
            first: jsb.s_first,
            maxlen: jsb.s_maxlen,
            uuid: jsb.s_uuid,
            block_size: jsb.s_blocksize as usize,
            barrier: cfg.barrier,
            commit_interval: cfg.commit_interval,
        };
        {
            let mut st = self.state.lock();
            st.head = log.first;
            st.log_empty = true;
            st.running = transaction::Transaction::new(jsb.s_sequence.max(1));
            st.committed = jsb.s_sequence.saturating_sub(1);
        }
        let interval = log.commit_interval;
        let _ = self.batching.set(cfg.batching);
        self.log
            .set(log)
            .map_err(|_| io::Error::other("journal already enabled"))?;
        Journal::spawn_commit_thread(self, interval)
    }

    /// Registers the file data writer (once, at mount).
    pub fn set_commit_flush_hook(&self, hook: Arc<dyn CommitFlushHook>) {
        let _ = self.flush_hook.set(hook);
    }

    /// Commits, checkpoints and stops the commit thread: the log is empty
    /// afterwards (`s_start == 0`).
    pub fn shutdown(&self) -> io::Result<()> {
        if !self.logging() {
            return self.cache.sync_all();
        }
        self.commit_running()?;
        self.checkpoint_all()?;
        self.state.lock().shutdown = true;
        self.commit_wake.notify_all();
        Ok(())
    }
}
