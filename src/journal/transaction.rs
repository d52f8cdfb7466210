//! Transactions and handles (Linux: fs/jbd2/transaction.c).
//!
//! A handle reserves `credits` buffers of the running transaction. Callers
//! announce a buffer with [`Handle::get_write_access`] before changing it and
//! hand it back with [`Handle::dirty_metadata`] afterwards.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::cache::{Buffer, BufferCache};

/// The journal of one mounted filesystem.
pub struct Journal {
    cache: Arc<BufferCache>,
    /// Handles started, for statistics.
    handles: AtomicU64,
}

impl Journal {
    pub fn new(cache: Arc<BufferCache>) -> Self {
        Journal {
            cache,
            handles: AtomicU64::new(0),
        }
    }

    /// Starts a handle that may dirty up to `credits` metadata buffers.
    pub fn start(&self, credits: u32) -> io::Result<Handle<'_>> {
        self.handles.fetch_add(1, Ordering::Relaxed);
        Ok(Handle {
            journal: self,
            credits,
            used: 0,
            sync: false,
        })
    }

    /// Makes every change so far durable.
    pub fn force_commit(&self) -> io::Result<()> {
        self.cache.sync_all()
    }

    pub fn handles_started(&self) -> u64 {
        self.handles.load(Ordering::Relaxed)
    }
}

/// One atomic filesystem operation's share of a transaction.
pub struct Handle<'a> {
    journal: &'a Journal,
    credits: u32,
    used: u32,
    sync: bool,
}

impl Handle<'_> {
    /// Announces that `buf` is about to change.
    pub fn get_write_access(&mut self, _buf: &Arc<Buffer>) -> io::Result<()> {
        Ok(())
    }

    /// Records `buf` as changed metadata of this handle's transaction.
    pub fn dirty_metadata(&mut self, buf: &Arc<Buffer>) -> io::Result<()> {
        self.used += 1;
        if self.used > self.credits {
            tracing::trace!(
                credits = self.credits,
                used = self.used,
                "handle dirtied more buffers than its credits"
            );
        }
        buf.mark_dirty();
        Ok(())
    }

    /// Makes the handle synchronous: `stop` returns once it is durable
    /// (fsync, O_SYNC, dirsync).
    pub fn set_sync(&mut self) {
        self.sync = true;
    }

    pub fn is_sync(&self) -> bool {
        self.sync
    }

    /// Ends the handle.
    pub fn stop(self) -> io::Result<()> {
        if self.sync {
            self.journal.force_commit()?;
        }
        Ok(())
    }
}
