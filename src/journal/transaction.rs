//! Transactions and handles (Linux: fs/jbd2/transaction.c).
//!
//! There is one running transaction that handles join, and at most one
//! committing. A handle changes a metadata buffer only through
//! [`Handle::modify`] (or [`Handle::get_write_access`], then
//! [`WriteAccess::write`]), which does jbd's three steps (get_write_access,
//! the change, dirty_metadata) so that none can be skipped: the bytes come
//! only with the write access, and the guard records the change when it
//! drops. The buffer joins
//! the running transaction and is pinned, so the cache neither writes it
//! home nor evicts it; only checkpoint writes it home, from the copy that
//! committed. When commit starts it waits for the transaction's handles to
//! stop and opens the next transaction at once; it then takes a frozen copy
//! of every buffer to log, unless a handle of the next transaction, about to
//! change one, has taken that copy first (as jbd2 does). Once committed, a
//! buffer no transaction has touched since waits for checkpoint without a
//! copy (its bytes are the committed ones); a handle that joins it later
//! copies it first, as jbd freezes a buffer that its checkpoint still needs.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::journal::{CommitCallback, CommitStart, JState, Journal};
use super::Tid;
use crate::cache::{Buffer, BufferWriteGuard};
use crate::util::inthash::IntSet;

/// A transaction's buffers and bookkeeping (jbd2's transaction_t). While
/// it runs it sits in `JState::running` and every field is under
/// `Journal::state`; once commit has drained it, it belongs to the
/// committer alone.
pub(super) struct Transaction {
    /// [immutable]
    pub tid: Tid,
    /// Unique in the process and never reused, unlike `tid`, which wraps:
    /// what a buffer's `joined` marker names. [immutable]
    pub serial: u64,
    /// The buffers joined, in joining order. [state]
    pub buffers: Vec<Arc<Buffer>>,
    /// The home blocks of `buffers`. [state]
    pub members: IntSet<u32>,
    /// Blocks freed in this transaction: revoked in the log, and not
    /// reallocated until it commits. [state]
    pub revokes: Vec<u32>,
    /// Every block freed in this transaction (a superset of `revokes`):
    /// none may be allocated again until it commits. [state]
    pub freed: Vec<u32>,
    /// Handles open in it now (jbd's t_updates). [state]
    pub updates: u32,
    /// Handles ever started in it (t_handle_count). [state]
    pub handles: u32,
    /// jbd's t_outstanding_credits: credits reserved by open handles plus
    /// buffers already used; bounded by the log's transaction limit.
    /// [state]
    pub outstanding: u32,
    /// [immutable]
    pub started: Instant,
}

impl Transaction {
    pub(super) fn new(tid: Tid) -> Self {
        static SERIALS: AtomicU64 = AtomicU64::new(1);
        Transaction {
            tid,
            serial: SERIALS.fetch_add(1, Ordering::Relaxed),
            // Room for what a transaction of a few fsync'd creates joins
            // (bitmaps, descriptor, inode table and directory blocks), so
            // that joining does not grow them step by step.
            buffers: Vec::with_capacity(TYPICAL_BUFFERS),
            members: IntSet::with_capacity_and_hasher(TYPICAL_BUFFERS, Default::default()),
            revokes: Vec::new(),
            freed: Vec::new(),
            updates: 0,
            handles: 0,
            outstanding: 0,
            started: Instant::now(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.buffers.is_empty() && self.revokes.is_empty() && self.freed.is_empty()
    }
}

/// See [`Transaction::new`].
const TYPICAL_BUFFERS: usize = 16;

impl Journal {
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
            serial: st.running.serial,
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
    ) -> io::Result<Tid> {
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
            let frozen = self.read_only.load(Ordering::Acquire);
            if frozen || self.is_aborted() || st.error.is_some() {
                return Err(Self::read_only_error());
            }
            if st.locked {
                let since = Instant::now();
                self.wake.wait(st);
                super::journal::add_micros(&self.counters.start_wait_micros, since.elapsed());
                continue;
            }
            if !self.logging() || st.running.outstanding + credits <= max {
                break;
            }
            st.commit_request = st.commit_request.later(st.running.tid);
            self.commit_wake.notify_one();
            self.wake.wait_for(st, Duration::from_millis(50));
        }
        st.running.outstanding += credits;
        Ok(st.running.tid)
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

    pub fn handles_started(&self) -> u64 {
        self.handles.load(Ordering::Relaxed)
    }

    /// Adds `buf` to the running transaction on behalf of a handle with
    /// `credits` left; a buffer new to the transaction costs one credit.
    /// `serial` is the handle's transaction, the running one: a buffer
    /// whose marker names it has joined already, and the state lock is
    /// not needed to know that.
    fn join(&self, buf: &Arc<Buffer>, credits: &mut u32, serial: u64) -> io::Result<()> {
        if buf.joined_serial() == serial {
            return Ok(());
        }
        let block = buf.block().0;
        {
            let st = self.state.lock();
            if st.running.members.contains(&block) {
                buf.set_joined_serial(st.running.serial);
                return Ok(());
            }
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
        if !st.running.members.insert(block) {
            buf.set_joined_serial(st.running.serial);
            drop(st);
            self.cache.unpin(buf);
            return Ok(());
        }
        st.running.buffers.push(buf.clone());
        buf.set_joined_serial(st.running.serial);
        *credits -= 1;
        // Both copies are taken before the lock is let go: another handle
        // that touches the buffer meanwhile finds it a member only after
        // them, instead of changing the bytes under a copy.
        self.freeze_committing(&mut st, buf);
        self.freeze_checkpointed(&mut st, buf);
        Ok(())
    }

    /// `buf` has just joined the running transaction, which will change
    /// it. If it belongs to the committing transaction too, and commit has
    /// not copied it yet (see `Journal::freeze`), the copy that commit will
    /// log is taken here, before the change (jbd's frozen data). Under the
    /// state lock, so that commit does not copy it meanwhile.
    fn freeze_committing(&self, st: &mut JState, buf: &Arc<Buffer>) {
        let block = buf.block().0;
        if st.committing.contains(&block)
            && !st.frozen.contains(&block)
            && !st.frozen_early.contains_key(&block)
        {
            let copy = self.cache.block_copy(&buf.read());
            st.frozen_early.insert(block, copy);
        }
    }

    /// `buf` has just joined the running transaction, which will change
    /// it. If it waits for checkpoint with no copy (its bytes are the
    /// committed ones), keep those bytes for checkpoint first (jbd's frozen
    /// data for a buffer on a checkpoint list).
    fn freeze_checkpointed(&self, st: &mut JState, buf: &Arc<Buffer>) {
        let Some(c) = st.checkpoint.get_mut(&buf.block().0) else {
            return;
        };
        if c.copy.is_none() {
            c.copy = Some(self.cache.block_copy(&buf.read()));
            st.kept_copies += 1;
        }
    }
}

/// Write access to one metadata buffer ([`Handle::get_write_access`]):
/// the buffer belongs to the handle's transaction.
pub struct WriteAccess<'b> {
    buf: &'b Arc<Buffer>,
    mark_dirty: bool,
}

impl<'b> WriteAccess<'b> {
    /// The buffer's bytes, locked for writing; the change is recorded
    /// when the guard drops (jbd's dirty_metadata).
    pub fn write(&self) -> Modify<'b> {
        Modify {
            data: self.buf.write(),
            buf: self.buf,
            mark_dirty: self.mark_dirty,
        }
    }
}

/// A change to one metadata buffer in progress ([`Handle::modify`]): the
/// buffer's bytes, locked for writing. A journaled buffer already belongs
/// to the transaction, so the change is logged with it; an unjournaled
/// one is marked dirty when the guard drops.
pub struct Modify<'b> {
    data: BufferWriteGuard<'b>,
    buf: &'b Arc<Buffer>,
    mark_dirty: bool,
}

impl std::ops::Deref for Modify<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.data
    }
}

impl std::ops::DerefMut for Modify<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }
}

impl Drop for Modify<'_> {
    fn drop(&mut self) {
        if self.mark_dirty {
            self.buf.mark_dirty();
        }
    }
}

/// One atomic filesystem operation's share of a transaction.
pub struct Handle<'a> {
    journal: &'a Journal,
    tid: Tid,
    /// Its transaction's `serial`.
    serial: u64,
    credits: u32,
    sync: bool,
    stopped: bool,
}

impl Handle<'_> {
    /// Opens `buf` for a change in this handle's transaction and locks its
    /// bytes for writing: [`Handle::get_write_access`] and
    /// [`WriteAccess::write`] in one.
    pub fn modify<'b>(&mut self, buf: &'b Arc<Buffer>) -> io::Result<Modify<'b>> {
        Ok(self.get_write_access(buf)?.write())
    }

    /// Announces that `buf` is about to change (jbd's get_write_access):
    /// it joins the transaction, which is charged a credit. The bytes are
    /// only reachable through the returned token, for a caller that must
    /// take another lock between the two (the lock order puts
    /// `Filesystem::orphans` and `Filesystem::sb` after the journal and
    /// before buffer data).
    pub fn get_write_access<'b>(&mut self, buf: &'b Arc<Buffer>) -> io::Result<WriteAccess<'b>> {
        let logging = self.journal.logging();
        if logging {
            self.journal.join(buf, &mut self.credits, self.serial)?;
        }
        Ok(WriteAccess {
            buf,
            mark_dirty: !logging,
        })
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
        self.serial = st.running.serial;
        self.credits = need;
        Ok(())
    }

    /// Ends the handle; a sync handle waits for its transaction to commit.
    pub fn stop(self) -> io::Result<()> {
        let j = self.journal;
        match self.stop_sync_part(true) {
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
    pub fn stop_then(self, start: CommitStart, done: CommitCallback) {
        let j = self.journal;
        match self.stop_sync_part(start == CommitStart::Now) {
            None => done(Ok(())),
            Some(None) => done(j.cache.sync_all()),
            Some(Some(tid)) => {
                // Registered before the commit is started, so that whoever
                // finishes it runs `done`.
                j.when_committed(tid, done);
                if start == CommitStart::Now {
                    j.commit_now_or_hand_off();
                }
            }
        }
    }

    /// The shared front of `stop`: the batching wait (unless the caller
    /// deferred its commit, whose batching is then the caller's: see
    /// [`Journal::gather_budget`]), the release, and for a sync handle the
    /// commit request. None for a plain handle; for a sync one, the
    /// transaction to wait for (None without a log).
    fn stop_sync_part(mut self, batch_here: bool) -> Option<Option<Tid>> {
        self.stopped = true;
        let j = self.journal;
        if self.sync && batch_here && j.logging() {
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
            self.tid.prev()
        } else {
            self.tid
        };
        st.commit_request = st.commit_request.later(tid);
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
            st.commit_request = st.commit_request.later(st.running.tid);
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

#[cfg(test)]
mod tests {
    use std::sync::Barrier;

    use crate::journal::testing::{mounted, A};
    use crate::testing::on_device;

    /// A buffer costs its handle a credit once per transaction: touching it
    /// again is free, and a handle of a later transaction pays afresh.
    #[test]
    fn a_buffer_costs_a_credit_once_per_transaction() {
        let (_mem, fs) = mounted();
        let j = fs.journal();
        let buf = j.cache.get(A).unwrap();
        let mut h = j.start(1).unwrap();
        let tid = h.tid;
        h.modify(&buf).unwrap().fill(1);
        assert_eq!(h.credits(), 0);
        h.modify(&buf).unwrap().fill(2);
        h.stop().unwrap();
        j.force_commit().unwrap();

        let mut h = j.start(0).unwrap();
        assert_ne!(h.tid, tid);
        let err = h
            .modify(&buf)
            .err()
            .expect("a new transaction charges a credit");
        assert!(err.to_string().contains("no credits left"), "{err}");
        h.stop().unwrap();
        fs.unmount().unwrap();
    }

    /// A revoke takes the buffer out of the running transaction, marker and
    /// all: touching it again joins it again, at the cost of a credit.
    #[test]
    fn a_revoked_buffer_joins_again() {
        let (_mem, fs) = mounted();
        let j = fs.journal();
        let buf = j.cache.get(A).unwrap();
        let mut h = j.start(2).unwrap();
        h.modify(&buf).unwrap().fill(1);
        assert_eq!(h.credits(), 1);
        j.revoke(A.0);
        assert!(!j.state.lock().running.members.contains(&A.0));
        h.modify(&buf).unwrap().fill(2);
        assert_eq!(h.credits(), 0, "joining again costs a credit");
        assert!(j.state.lock().running.members.contains(&A.0));
        h.stop().unwrap();
        fs.unmount().unwrap();
    }

    /// Checkpoint writes a committed buffer home from its committed bytes even
    /// while two handles of the running transaction race to join and change
    /// it: the first to join copies those bytes before either can change them.
    #[test]
    fn a_checkpoint_copy_is_taken_before_any_handle_changes_the_buffer() {
        let (mem, fs) = mounted();
        let j = fs.journal();
        let buf = j.cache.get(A).unwrap();
        for round in 0..3000u32 {
            let committed = (round % 200) as u8;
            let mut h = j.start(1).unwrap();
            h.modify(&buf).unwrap().fill(committed);
            h.stop().unwrap();
            // Committed, and not in the new running transaction: it waits
            // for checkpoint with no copy of its own.
            j.force_commit().unwrap();
            let start = Barrier::new(2);
            std::thread::scope(|s| {
                for k in 0..2u8 {
                    let (j, buf, start) = (j, &buf, &start);
                    s.spawn(move || {
                        start.wait();
                        let mut h = j.start(1).unwrap();
                        h.modify(buf).unwrap().fill(0xf0 + k);
                        h.stop().unwrap();
                    });
                }
            });
            j.checkpoint_all().unwrap();
            assert_eq!(on_device(&mem, A), vec![committed; 1024], "round {round}");
        }
        fs.unmount().unwrap();
    }
}
