//! Transactions and handles (Linux: fs/jbd2/transaction.c).
//!
//! There is one running transaction that handles join, and at most one
//! committing. A handle announces each metadata buffer with
//! [`Handle::get_write_access`] before changing it: the buffer then joins
//! the running transaction and is pinned, so the cache neither writes it
//! home nor evicts it; only checkpoint writes it home, from the copy that
//! committed. When commit starts it waits for the transaction's handles to
//! stop and takes a frozen copy of every buffer while no handle runs, so the
//! next transaction may change those buffers at once. Once committed, a
//! buffer no transaction has touched since waits for checkpoint without a
//! copy (its bytes are the committed ones); a handle that joins it later
//! copies it first, as jbd freezes a buffer that its checkpoint still needs.

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
    /// Every block freed in this transaction (a superset of `revokes`):
    /// none may be allocated again until it commits.
    pub freed: Vec<u32>,
    pub updates: u32,
    pub handles: u32,
    /// jbd's t_outstanding_credits: credits reserved by open handles plus
    /// buffers already used; bounded by the log's transaction limit.
    pub outstanding: u32,
    pub started: Instant,
}

impl Transaction {
    pub fn new(tid: u32) -> Self {
        Transaction {
            tid,
            buffers: Vec::new(),
            members: HashSet::new(),
            revokes: Vec::new(),
            freed: Vec::new(),
            updates: 0,
            handles: 0,
            outstanding: 0,
            started: Instant::now(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.buffers.is_empty() && self.revokes.is_empty() && self.freed.is_empty()
    }
}

/// A committed buffer not yet written home, and the copy that committed if
/// a later transaction has joined the buffer (else the buffer's own bytes
/// are the committed ones).
pub(super) struct Checkpointed {
    pub buf: Arc<Buffer>,
    pub copy: Option<Box<[u8]>>,
}

pub(super) struct JState {
    pub running: Transaction,
    /// Commit is draining the running transaction: new handles wait.
    pub locked: bool,
    /// Blocks of the committing transaction.
    pub committing: HashSet<u32>,
    pub commit_request: u32,
    /// A data=journal writer wants the commit thread to checkpoint.
    pub checkpoint_request: bool,
    pub committed: u32,
    /// The next free journal block, and whether the log holds nothing.
    pub head: u32,
    pub log_empty: bool,
    pub checkpoint: HashMap<u32, Checkpointed>,
    /// Blocks a checkpoint has taken off `checkpoint` and is writing home:
    /// until those writes land, the log's copy is still the newest on the
    /// device's way, and a data write to the block must go through the log
    /// too (else the checkpoint's older copy could land over it).
    pub checkpointing: HashSet<u32>,
    /// How many `checkpoint` entries hold a copy (memory beyond the cache).
    pub kept_copies: usize,
    pub shutdown: bool,
    pub error: Option<String>,
    /// Callers waiting for a transaction to commit without a thread of
    /// their own ([`Journal::force_commit_then`]), by transaction id.
    pub commit_callbacks: Vec<(u32, CommitCallback)>,
}

/// What to run once a transaction has committed (or cannot): an fsync's
/// reply, sent from whichever thread finished the commit.
pub type CommitCallback = Box<dyn FnOnce(io::Result<()>) + Send>;

impl JState {
    /// Files a committed buffer for checkpoint, returning the entry it
    /// replaces; keeps `kept_copies` in step.
    pub fn file_checkpoint(&mut self, block: u32, c: Checkpointed) -> Option<Checkpointed> {
        self.kept_copies += usize::from(c.copy.is_some());
        let old = self.checkpoint.insert(block, c);
        self.kept_copies -= old.as_ref().map_or(0, |o| usize::from(o.copy.is_some()));
        old
    }

    /// Whether the log holds, or is about to hold, a copy of `block`, or a
    /// checkpoint is writing one home.
    pub fn holds_copy(&self, block: u32) -> bool {
        self.running.members.contains(&block)
            || self.committing.contains(&block)
            || self.checkpoint.contains_key(&block)
            || self.checkpointing.contains(&block)
    }

    /// Takes `block` off the checkpoint list.
    pub fn unfile_checkpoint(&mut self, block: u32) -> Option<Checkpointed> {
        let old = self.checkpoint.remove(&block);
        self.kept_copies -= old.as_ref().map_or(0, |o| usize::from(o.copy.is_some()));
        old
    }
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
    /// The fastest recent commit (batch.rs): what the device costs.
    pub floor_commit_micros: AtomicU64,
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
    /// Commit waits here for the running transaction's handles to stop;
    /// only the last one to stop wakes it, so a handle stopping wakes no
    /// fsync waiter (they sleep on `wake`).
    pub(super) drained: Condvar,
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
    /// The file data writer, told before each flush ahead of a commit block.
    pub(super) flush_hook: OnceLock<Arc<dyn super::CommitFlushHook>>,
    /// The journal was aborted (jbd's JBD_ABORT): nothing more commits and
    /// new handles get EROFS. Atomic so that an I/O error path holding
    /// cache locks can abort without taking the state lock.
    pub(super) aborted: std::sync::atomic::AtomicBool,
    /// Bytes of frozen copies data=journal allows (0: an eighth of the cache).
    pub(super) copy_budget: std::sync::atomic::AtomicUsize,
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
                commit_request: 0,
                checkpoint_request: false,
                committed: 0,
                head: 0,
                log_empty: true,
                checkpoint: HashMap::new(),
                checkpointing: HashSet::new(),
                kept_copies: 0,
                shutdown: false,
                error: None,
                commit_callbacks: Vec::new(),
            }),
            wake: Condvar::new(),
            drained: Condvar::new(),
            commit_wake: Condvar::new(),
            commit_lock: Mutex::new(()),
            pending_free: Mutex::new(HashSet::new()),
            counters: Counters::default(),
            handles: AtomicU64::new(0),
            batching: OnceLock::new(),
            last_sync_writer: std::sync::atomic::AtomicU32::new(0),
            sync_waiters: AtomicU64::new(0),
            flush_hook: OnceLock::new(),
            aborted: std::sync::atomic::AtomicBool::new(false),
            copy_budget: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Aborts the journal (jbd's journal_abort): the running transaction
    /// never commits, waiters for it get EIO and new handles EROFS.
    pub fn abort_new_handles(&self) {
        self.aborted.store(true, Ordering::Release);
        self.wake.notify_all();
        self.commit_wake.notify_all();
        self.run_commit_callbacks();
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

    /// The most credits one transaction may hold: a quarter of the log, as
    /// jbd's j_max_transaction_buffers, so a commit always finds room.
    pub fn max_transaction_credits(&self) -> u32 {
        self.log.get().map_or(u32::MAX, |l| l.maxlen / 4)
    }

    /// Starts a handle that may add up to `credits` buffers to the running
    /// transaction. It waits while the transaction cannot reserve them.
    pub fn start(&self, credits: u32) -> io::Result<Handle<'_>> {
        self.handles.fetch_add(1, Ordering::Relaxed);
        let mut st = self.state.lock();
        let tid = self.reserve(&mut st, credits)?;
        st.running.updates += 1;
        st.running.handles += 1;
        Ok(Handle {
            journal: self,
            tid,
            credits,
            sync: false,
            stopped: false,
        })
    }

    /// Reserves `credits` in the running transaction, waiting for a commit
    /// while it is too full (jbd's start_this_handle).
    fn reserve(
        &self,
        st: &mut parking_lot::MutexGuard<'_, JState>,
        credits: u32,
    ) -> io::Result<u32> {
        let max = self.max_transaction_credits();
        if credits > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a handle of {credits} credits is larger than a transaction may be ({max})"
                ),
            ));
        }
        loop {
            if self.is_aborted() || st.error.is_some() {
                return Err(Self::read_only_error());
            }
            if st.locked {
                self.wake.wait(st);
                continue;
            }
            if !self.logging() || st.running.outstanding + credits <= max {
                break;
            }
            st.commit_request = st.commit_request.max(st.running.tid);
            self.commit_wake.notify_one();
            self.wake.wait_for(st, Duration::from_millis(50));
        }
        st.running.outstanding += credits;
        Ok(st.running.tid)
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

    /// [`Journal::force_commit`] without waiting: `done` runs once every
    /// change so far is durable (or cannot be), on the thread that finishes
    /// the commit, or on this one if that is already so. The caller's
    /// thread does the batching wait and, when no commit is under way, the
    /// commit itself, exactly as a waiting fsync would; it only does not
    /// sleep until the commit ends. Through FUSE that frees the worker and
    /// saves waking it just to send the reply.
    pub fn force_commit_then(&self, done: CommitCallback) {
        if !self.logging() {
            return done(self.cache.sync_all());
        }
        if self.is_aborted() {
            return done(Err(io::Error::from_raw_os_error(libc::EIO)));
        }
        match self.start(1) {
            Ok(mut h) => {
                h.set_sync();
                h.stop_then(done);
            }
            Err(e) => done(Err(e)),
        }
    }

    /// How waiting for transaction `tid` ends, if it has ended: committed,
    /// or never will be (journal aborted).
    fn commit_outcome(&self, st: &JState, tid: u32) -> Option<io::Result<()>> {
        if let Some(e) = &st.error {
            return Some(Err(io::Error::other(format!("journal aborted: {e}"))));
        }
        if st.committed >= tid {
            return Some(Ok(()));
        }
        self.is_aborted()
            .then(|| Err(io::Error::from_raw_os_error(libc::EIO)))
    }

    /// Runs `done` once transaction `tid` has committed: now, if it has.
    fn when_committed(&self, tid: u32, done: CommitCallback) {
        let mut st = self.state.lock();
        match self.commit_outcome(&st, tid) {
            Some(res) => {
                drop(st);
                done(res);
            }
            None => st.commit_callbacks.push((tid, done)),
        }
    }

    /// Runs the callbacks whose transactions have committed (or never
    /// will), outside the state lock; called wherever commit waiters are
    /// woken.
    pub(super) fn run_commit_callbacks(&self) {
        let ready: Vec<(CommitCallback, io::Result<()>)> = {
            let mut st = self.state.lock();
            if st.commit_callbacks.is_empty() {
                return;
            }
            let waiting = std::mem::take(&mut st.commit_callbacks);
            let mut ready = Vec::new();
            for (tid, done) in waiting {
                match self.commit_outcome(&st, tid) {
                    Some(res) => ready.push((done, res)),
                    None => st.commit_callbacks.push((tid, done)),
                }
            }
            ready
        };
        for (done, res) in ready {
            done(res);
        }
    }

    /// Waits until transaction `tid` has committed.
    pub(super) fn wait_for_commit(&self, tid: u32) -> io::Result<()> {
        let mut st = self.state.lock();
        while st.committed < tid && st.error.is_none() && !self.is_aborted() {
            // No commit under way (or the commit thread has exited at
            // unmount): commit here. Any error shows in `st.error`.
            if let Some(one) = self.commit_lock.try_lock() {
                drop(st);
                let _ = self.commit_locked(one);
                st = self.state.lock();
                continue;
            }
            self.wake.wait_for(&mut st, Duration::from_millis(100));
        }
        self.commit_outcome(&st, tid)
            .unwrap_or_else(|| Err(io::Error::from_raw_os_error(libc::EIO)))
    }

    /// A synchronous handle's transaction is to commit now: on this thread
    /// when no commit is under way, else by whoever holds the commit lock
    /// (the waiter tries again when it finishes) or the commit thread. jbd
    /// always hands the commit to kjournald; here that costs two thread
    /// switches per fsync, which on fast storage is most of an fsync.
    fn commit_now_or_hand_off(&self) {
        match self.commit_lock.try_lock() {
            Some(one) => {
                let _ = self.commit_locked(one);
            }
            None => {
                self.commit_wake.notify_one();
            }
        }
    }

    /// Records that `block` was freed: its logged copies must never be
    /// replayed or checkpointed over its next owner.
    pub fn revoke(&self, block: u32) {
        if !self.logging() {
            return;
        }
        let mut st = self.state.lock();
        // Only a block with a copy in the log (or on its way there) needs a
        // revoke record; a data block that never was logged needs none, as
        // in ext3, and a big truncate then costs no log space for its data.
        let logged = st.holds_copy(block);
        if st.running.members.remove(&block) {
            if let Some(i) = st.running.buffers.iter().position(|b| b.block().0 == block) {
                let b = st.running.buffers.swap_remove(i);
                self.cache.unpin(&b);
            }
        }
        // A committed copy waiting for checkpoint (or one committing now)
        // stays until this transaction commits, as jbd's forget list keeps
        // it: until then a crash recovers the state before the free, which
        // needs that copy home if checkpoint empties the log meanwhile.
        // finish_commit drops it, before the block can be allocated again.
        if logged {
            st.running.revokes.push(block);
        }
        st.running.freed.push(block);
        drop(st);
        self.pending_free.lock().insert(block);
    }

    /// Whether the log holds, or is about to hold, a copy of `block`: it is
    /// in the running or the committing transaction, waits for checkpoint,
    /// or is being written home by one. Its newest contents are then in the
    /// buffer cache.
    pub fn holds_copy(&self, block: u32) -> bool {
        if !self.logging() {
            return false;
        }
        self.state.lock().holds_copy(block)
    }

    /// Whether `block` was freed by a transaction that has not committed,
    /// and so must not be allocated yet.
    pub fn is_pending_free(&self, block: u32) -> bool {
        self.logging() && self.pending_free.lock().contains(&block)
    }

    pub fn handles_started(&self) -> u64 {
        self.handles.load(Ordering::Relaxed)
    }

    /// Adds `buf` to the running transaction on behalf of a handle with
    /// `credits` left; a buffer new to the transaction costs one credit.
    fn join(&self, buf: &Arc<Buffer>, credits: &mut u32) -> io::Result<()> {
        let block = buf.block().0;
        if self.state.lock().running.members.contains(&block) {
            return Ok(());
        }
        if *credits == 0 {
            tracing::error!(block, "a journal handle ran out of credits");
            return Err(io::Error::other(format!(
                "journal handle has no credits left for block {block}"
            )));
        }
        // Pin outside the state lock: pin may wait for a cache write.
        buf.pin();
        let mut st = self.state.lock();
        if st.running.members.insert(block) {
            st.running.buffers.push(buf.clone());
            *credits -= 1;
            let unfrozen = st.checkpoint.get(&block).is_some_and(|c| c.copy.is_none());
            drop(st);
            if unfrozen {
                self.freeze_checkpointed(buf);
            }
        } else {
            drop(st);
            self.cache.unpin(buf);
        }
        Ok(())
    }

    /// `buf` waits for checkpoint with no copy and has just joined the
    /// running transaction, which will change it: keep its committed bytes
    /// for checkpoint first (jbd's frozen data). The copy is taken outside
    /// the state lock; that is safe because the caller changes the buffer
    /// only after this returns, and a checkpoint that takes the entry
    /// meanwhile reads the same, still committed, bytes.
    fn freeze_checkpointed(&self, buf: &Arc<Buffer>) {
        let copy = self.cache.block_copy(&buf.read());
        let mut st = self.state.lock();
        if let Some(c) = st.checkpoint.get_mut(&buf.block().0) {
            if c.copy.is_none() {
                c.copy = Some(copy);
                st.kept_copies += 1;
                return;
            }
        }
        drop(st);
        self.cache.recycle(copy);
    }

    /// Lets go of a buffer that left the checkpoint list: its pin, and its
    /// copy back to the cache's pool.
    pub(super) fn release_checkpointed(&self, c: Checkpointed) {
        self.cache.unpin(&c.buf);
        if let Some(copy) = c.copy {
            self.cache.recycle(copy);
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
            self.journal.join(buf, &mut self.credits)?;
        }
        Ok(())
    }

    /// Records `buf` as changed metadata of this handle's transaction.
    pub fn dirty_metadata(&mut self, buf: &Arc<Buffer>) -> io::Result<()> {
        if self.journal.logging() {
            // A caller that skipped get_write_access still gets it right.
            self.journal.join(buf, &mut self.credits)?;
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

    /// Credits left: buffers this handle may still add to the transaction.
    pub fn credits(&self) -> u32 {
        self.credits
    }

    /// Asks for `more` credits in the same transaction (jbd's
    /// journal_extend); false when the transaction has no room for them.
    pub fn extend(&mut self, more: u32) -> bool {
        let j = self.journal;
        if !j.logging() {
            self.credits += more;
            return true;
        }
        let mut st = j.state.lock();
        if st.running.tid != self.tid || st.running.outstanding + more > j.max_transaction_credits()
        {
            return false;
        }
        st.running.outstanding += more;
        self.credits += more;
        true
    }

    /// Makes sure `need` credits are left, by extending or else by ending
    /// this handle and starting another, perhaps in the next transaction
    /// (jbd's journal_restart). The caller must be at a point where its
    /// changes so far are consistent on their own.
    pub fn ensure_credits(&mut self, need: u32) -> io::Result<()> {
        if self.credits >= need || self.extend(need - self.credits) {
            return Ok(());
        }
        let j = self.journal;
        self.release();
        let mut st = j.state.lock();
        let tid = match j.reserve(&mut st, need) {
            Ok(tid) => tid,
            Err(e) => {
                // The handle is gone; Drop must not release it again.
                self.stopped = true;
                return Err(e);
            }
        };
        st.running.updates += 1;
        self.tid = tid;
        self.credits = need;
        Ok(())
    }

    /// Ends the handle; a sync handle waits for its transaction to commit.
    pub fn stop(self) -> io::Result<()> {
        let j = self.journal;
        match self.stop_sync_part() {
            None => Ok(()),
            Some(None) => j.cache.sync_all(),
            Some(Some(tid)) => {
                j.commit_now_or_hand_off();
                j.sync_waiters.fetch_add(1, Ordering::Relaxed);
                let res = j.wait_for_commit(tid);
                j.sync_waiters.fetch_sub(1, Ordering::Relaxed);
                res
            }
        }
    }

    /// Ends a sync handle without waiting: `done` runs once its transaction
    /// has committed (see [`Journal::force_commit_then`]).
    pub fn stop_then(self, done: CommitCallback) {
        let j = self.journal;
        match self.stop_sync_part() {
            None => done(Ok(())),
            Some(None) => done(j.cache.sync_all()),
            Some(Some(tid)) => {
                // Registered before the commit is started, so that whoever
                // finishes it runs `done`.
                j.when_committed(tid, done);
                j.commit_now_or_hand_off();
            }
        }
    }

    /// The shared front of `stop`: the batching wait, the release, and for
    /// a sync handle the commit request. None for a plain handle; for a
    /// sync one, the transaction to wait for (None without a log).
    fn stop_sync_part(mut self) -> Option<Option<u32>> {
        self.stopped = true;
        let j = self.journal;
        if self.sync && j.logging() {
            // Still open: the transaction cannot commit while we wait.
            j.batch_wait();
        }
        self.release();
        if !self.sync {
            return None;
        }
        if !j.logging() {
            return Some(None);
        }
        let mut st = j.state.lock();
        // An empty transaction has nothing to commit: wait for the
        // one before it, which may hold this caller's changes.
        let tid = if st.running.tid == self.tid && st.running.is_empty() {
            self.tid.saturating_sub(1)
        } else {
            self.tid
        };
        st.commit_request = st.commit_request.max(tid);
        Some(Some(tid))
    }

    fn release(&mut self) {
        let j = self.journal;
        let mut st = j.state.lock();
        st.running.updates = st.running.updates.saturating_sub(1);
        // Unused credits go back (the transaction keeps the used ones).
        if st.running.tid == self.tid {
            st.running.outstanding = st.running.outstanding.saturating_sub(self.credits);
        }
        self.credits = 0;
        let big = j
            .log
            .get()
            .is_some_and(|l| st.running.buffers.len() as u32 > l.maxlen / 4);
        if big {
            st.commit_request = st.commit_request.max(st.running.tid);
        }
        let last_out = st.locked && st.running.updates == 0;
        drop(st);
        if last_out {
            j.drained.notify_one();
        }
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
