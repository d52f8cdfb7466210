//! Transactions and handles (Linux: fs/jbd2/transaction.c).
//!
//! There is one running transaction that handles join, and at most one
//! committing. A handle announces each metadata buffer with
//! [`Handle::get_write_access`] before changing it: the buffer then joins
//! the running transaction and is pinned, so the cache neither writes it
//! home nor evicts it; only checkpoint writes it home, from the copy that
//! committed. When commit starts it waits for the transaction's handles to
//! stop and takes a frozen copy of every buffer while no handle runs, so the
//! next transaction may change those buffers at once.

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::cache::{Buffer, BufferCache};
use crate::device::BlockDevice;

/// Where the log lives and how to write it.
pub(super) struct LogArea {
    /// Disk block of each journal block (index = journal block number).
    pub map: Vec<u32>,
    pub first: u32,
    pub maxlen: u32,
    pub uuid: [u8; 16],
    pub block_size: usize,
    pub barrier: bool,
    pub commit_interval: Duration,
}

/// A transaction's buffers and bookkeeping.
pub(super) struct Transaction {
    pub tid: u32,
    pub buffers: Vec<Arc<Buffer>>,
    pub members: HashSet<u32>,
    /// Blocks freed in this transaction: revoked in the log, and not
    /// reallocated until it commits.
    pub revokes: Vec<u32>,
    /// Blocks freed in this transaction with no copy in the log: no revoke
    /// record, but not reallocated until it commits either.
    pub unlogged_frees: Vec<u32>,
    pub updates: u32,
    pub handles: u32,
    pub started: Instant,
}

impl Transaction {
    pub fn new(tid: u32) -> Self {
        Transaction {
            tid,
            buffers: Vec::new(),
            members: HashSet::new(),
            revokes: Vec::new(),
            unlogged_frees: Vec::new(),
            updates: 0,
            handles: 0,
            started: Instant::now(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.buffers.is_empty() && self.revokes.is_empty() && self.unlogged_frees.is_empty()
    }
}

/// A committed buffer not yet written home: the copy that committed.
pub(super) struct Checkpointed {
    pub buf: Arc<Buffer>,
    pub copy: Vec<u8>,
}

pub(super) struct JState {
    pub running: Transaction,
    /// Commit is draining the running transaction: new handles wait.
    pub locked: bool,
    /// Blocks of the committing transaction, and those of them revoked
    /// while it committed (their copies must not be checkpointed).
    pub committing: HashSet<u32>,
    pub revoked_while_committing: HashSet<u32>,
    pub commit_request: u32,
    pub committed: u32,
    /// The next free journal block, and whether the log holds nothing.
    pub head: u32,
    pub log_empty: bool,
    pub checkpoint: HashMap<u32, Checkpointed>,
    pub shutdown: bool,
    pub error: Option<String>,
}

/// Counters shaped like /proc/fs/jbd2/*/info.
#[derive(Default)]
pub(super) struct Counters {
    pub transactions: AtomicU64,
    pub handles: AtomicU64,
    pub blocks: AtomicU64,
    pub logged_blocks: AtomicU64,
    pub commit_micros: AtomicU64,
    /// jbd2's running average of commit time, `(t + 3 * avg) / 4`.
    pub avg_commit_micros: AtomicU64,
    pub batch_wait_micros: AtomicU64,
    pub run_micros: AtomicU64,
}

/// The journal of one mounted filesystem.
pub struct Journal {
    pub(super) cache: Arc<BufferCache>,
    pub(super) dev: Arc<dyn BlockDevice>,
    pub(super) log: OnceLock<LogArea>,
    pub(super) state: Mutex<JState>,
    /// Handles wait here for a drain to end or a commit to complete.
    pub(super) wake: Condvar,
    /// The commit thread waits here for work.
    pub(super) commit_wake: Condvar,
    /// Serialises commits and checkpoints (the log is written by one at a time).
    pub(super) commit_lock: Mutex<()>,
    /// Blocks freed by transactions not yet committed.
    pub(super) pending_free: Mutex<HashSet<u32>>,
    pub(super) counters: Counters,
    handles: AtomicU64,
    /// The batching policy, set once at mount.
    pub(super) batching: OnceLock<super::batch::Batching>,
    /// jbd's j_last_sync_writer.
    pub(super) last_sync_writer: std::sync::atomic::AtomicU32,
    /// Synchronous handles waiting for a commit right now.
    pub(super) sync_waiters: AtomicU64,
    /// The journal was aborted (jbd's JBD_ABORT): nothing more commits and
    /// new handles get EROFS. Atomic so that an I/O error path holding
    /// cache locks can abort without taking the state lock.
    pub(super) aborted: std::sync::atomic::AtomicBool,
}

impl Journal {
    /// A journal that logs nothing until [`Journal::enable`]: changes are
    /// written home through the cache (read-only mounts, ext2 images).
    pub fn new(cache: Arc<BufferCache>) -> Self {
        Journal {
            dev: cache.device().clone(),
            cache,
            log: OnceLock::new(),
            state: Mutex::new(JState {
                running: Transaction::new(1),
                locked: false,
                committing: HashSet::new(),
                revoked_while_committing: HashSet::new(),
                commit_request: 0,
                committed: 0,
                head: 0,
                log_empty: true,
                checkpoint: HashMap::new(),
                shutdown: false,
                error: None,
            }),
            wake: Condvar::new(),
            commit_wake: Condvar::new(),
            commit_lock: Mutex::new(()),
            pending_free: Mutex::new(HashSet::new()),
            counters: Counters::default(),
            handles: AtomicU64::new(0),
            batching: OnceLock::new(),
            last_sync_writer: std::sync::atomic::AtomicU32::new(0),
            sync_waiters: AtomicU64::new(0),
            aborted: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Aborts the journal (jbd's journal_abort): the running transaction
    /// never commits, waiters for it get EIO and new handles EROFS.
    pub fn abort_new_handles(&self) {
        self.aborted.store(true, Ordering::Release);
        self.wake.notify_all();
        self.commit_wake.notify_all();
    }

    pub fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::Acquire)
    }

    fn read_only_error() -> io::Error {
        io::Error::from_raw_os_error(libc::EROFS)
    }

    pub(super) fn batching(&self) -> super::batch::Batching {
        self.batching
            .get()
            .copied()
            .unwrap_or(super::batch::Batching::Off)
    }

    pub(super) fn logging(&self) -> bool {
        self.log.get().is_some()
    }

    /// Starts a handle that may dirty up to `credits` metadata buffers.
    pub fn start(&self, credits: u32) -> io::Result<Handle<'_>> {
        self.handles.fetch_add(1, Ordering::Relaxed);
        let mut st = self.state.lock();
        loop {
            if self.is_aborted() || st.error.is_some() {
                return Err(Self::read_only_error());
            }
            if st.locked {
                self.wake.wait(&mut st);
                continue;
            }
            // A transaction past a quarter of the log takes no new handles
            // until it has committed (jbd's "transaction too big").
            let full = self
                .log
                .get()
                .is_some_and(|l| st.running.buffers.len() as u32 >= l.maxlen / 4);
            if !full || st.error.is_some() {
                break;
            }
            st.commit_request = st.commit_request.max(st.running.tid);
            self.commit_wake.notify_one();
            self.wake.wait_for(&mut st, Duration::from_millis(50));
        }
        st.running.updates += 1;
        st.running.handles += 1;
        Ok(Handle {
            journal: self,
            tid: st.running.tid,
            credits,
            sync: false,
            stopped: false,
        })
    }

    /// Makes every change so far durable: commits the running transaction
    /// and waits for it (or, without a log, writes everything home).
    pub fn force_commit(&self) -> io::Result<()> {
        if !self.logging() {
            return self.cache.sync_all();
        }
        if self.is_aborted() {
            // What was not committed before the abort never will be.
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        // As jbd's journal_force_commit: a synchronous handle, so that
        // concurrent fsyncs batch exactly as synchronous writes do.
        let mut h = self.start(1)?;
        h.set_sync();
        h.stop()
    }

    /// Waits until transaction `tid` has committed.
    pub(super) fn wait_for_commit(&self, tid: u32) -> io::Result<()> {
        let mut st = self.state.lock();
        while st.committed < tid && st.error.is_none() && !self.is_aborted() {
            // The commit thread may have exited (unmount); commit inline.
            if st.shutdown {
                drop(st);
                self.commit_running()?;
                st = self.state.lock();
                continue;
            }
            self.wake.wait_for(&mut st, Duration::from_millis(100));
        }
        match &st.error {
            Some(e) => Err(io::Error::other(format!("journal aborted: {e}"))),
            None if st.committed < tid => Err(io::Error::from_raw_os_error(libc::EIO)),
            None => Ok(()),
        }
    }

    /// Records that `block` was freed: its logged copies must never be
    /// replayed or checkpointed over its next owner.
    pub fn revoke(&self, block: u32) {
        if !self.logging() {
            return;
        }
        let mut st = self.state.lock();
        let mut in_log = false;
        if st.running.members.remove(&block) {
            in_log = true;
            if let Some(i) = st.running.buffers.iter().position(|b| b.block().0 == block) {
                let b = st.running.buffers.swap_remove(i);
                b.unpin();
            }
        }
        if let Some(c) = st.checkpoint.remove(&block) {
            in_log = true;
            c.buf.unpin();
        }
        if st.committing.contains(&block) {
            in_log = true;
            st.revoked_while_committing.insert(block);
        }
        // Every copy in the live log is in the checkpoint list (or the
        // committing or running transaction) until checkpoint empties the
        // log, so a block in none of them has nothing to cancel: no record,
        // which keeps the revoke records of one transaction within what
        // the log holds however much it frees.
        if in_log {
            st.running.revokes.push(block);
        } else {
            st.running.unlogged_frees.push(block);
        }
        drop(st);
        self.pending_free.lock().insert(block);
    }

    /// Whether `block` was freed by a transaction that has not committed,
    /// and so must not be allocated yet.
    pub fn is_pending_free(&self, block: u32) -> bool {
        self.logging() && self.pending_free.lock().contains(&block)
    }

    pub fn handles_started(&self) -> u64 {
        self.handles.load(Ordering::Relaxed)
    }

    fn join(&self, buf: &Arc<Buffer>) {
        let block = buf.block().0;
        if self.state.lock().running.members.contains(&block) {
            return;
        }
        // Pin outside the state lock: pin may wait for a cache write.
        buf.pin();
        let mut st = self.state.lock();
        if st.running.members.insert(block) {
            st.running.buffers.push(buf.clone());
        } else {
            drop(st);
            buf.unpin();
        }
    }
}

/// One atomic filesystem operation's share of a transaction.
pub struct Handle<'a> {
    journal: &'a Journal,
    tid: u32,
    credits: u32,
    sync: bool,
    stopped: bool,
}

impl Handle<'_> {
    /// Announces that `buf` is about to change: it joins the transaction.
    pub fn get_write_access(&mut self, buf: &Arc<Buffer>) -> io::Result<()> {
        if self.journal.logging() {
            self.journal.join(buf);
        }
        Ok(())
    }

    /// Records `buf` as changed metadata of this handle's transaction.
    pub fn dirty_metadata(&mut self, buf: &Arc<Buffer>) -> io::Result<()> {
        if self.journal.logging() {
            // A caller that skipped get_write_access still gets it right.
            self.journal.join(buf);
        } else {
            buf.mark_dirty();
        }
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

    pub fn credits(&self) -> u32 {
        self.credits
    }

    /// Ends the handle; a sync handle waits for its transaction to commit.
    pub fn stop(mut self) -> io::Result<()> {
        self.stopped = true;
        let j = self.journal;
        if self.sync && j.logging() {
            // Still open: the transaction cannot commit while we wait.
            j.batch_wait();
        }
        self.release();
        if !self.sync {
            return Ok(());
        }
        if !j.logging() {
            return j.cache.sync_all();
        }
        let tid = {
            let mut st = j.state.lock();
            // An empty transaction has nothing to commit: wait for the
            // one before it, which may hold this caller's changes.
            let tid = if st.running.tid == self.tid && st.running.is_empty() {
                self.tid.saturating_sub(1)
            } else {
                self.tid
            };
            st.commit_request = st.commit_request.max(tid);
            tid
        };
        j.commit_wake.notify_one();
        j.sync_waiters.fetch_add(1, Ordering::Relaxed);
        let res = j.wait_for_commit(tid);
        j.sync_waiters.fetch_sub(1, Ordering::Relaxed);
        res
    }

    fn release(&self) {
        let j = self.journal;
        let mut st = j.state.lock();
        st.running.updates = st.running.updates.saturating_sub(1);
        let big = j
            .log
            .get()
            .is_some_and(|l| st.running.buffers.len() as u32 > l.maxlen / 4);
        if big {
            st.commit_request = st.commit_request.max(st.running.tid);
        }
        drop(st);
        j.wake.notify_all();
        if big {
            j.commit_wake.notify_one();
        }
    }
}

impl Drop for Handle<'_> {
    fn drop(&mut self) {
        if !self.stopped {
            self.release();
        }
    }
}
