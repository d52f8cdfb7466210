//! The journal object and its life (Linux: fs/jbd2/journal.c and the
//! `journal_t` of include/linux/jbd2.h): creation, enabling the log at
//! mount, the commit thread, waiting for a commit, abort and unmount.
//!
//! The per-phase work lives beside it: handles in transaction.rs, commit,
//! checkpoint, revoke and recovery each in their own file. Every field
//! below says what guards it, in brackets, as jbd2.h does; the order in
//! which those locks nest is in mod.rs.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::batch::Batching;
use super::checkpoint::Checkpointed;
use super::transaction::Transaction;
use super::{CommitFlushHook, JournalBlock, JournalConfig, Tid};
use crate::cache::BufferCache;
use crate::device::BlockDevice;
use crate::format::jbd::{self, JournalSuperblock};
use crate::util::inthash::{IntMap, IntSet};

/// Where the log lives and how to write it. [immutable after enable]
pub(super) struct LogArea {
    /// Disk block of each journal block (index = journal block number).
    pub map: Vec<u32>,
    /// The log's first block (s_first).
    pub first: JournalBlock,
    /// The journal's length in blocks (s_maxlen): the log ends before it.
    pub maxlen: u32,
    pub uuid: [u8; 16],
    pub block_size: usize,
}

impl LogArea {
    /// The disk block holding journal block `j`.
    pub(super) fn disk_block(&self, j: JournalBlock) -> u32 {
        self.map[j.index()]
    }
}

/// What `Journal::state` guards (jbd2's j_state_lock and j_list_lock in
/// one). Fields that only the committer changes (the holder of
/// `Journal::commit_lock`) say so: it may read them between lock holds
/// and find them unchanged.
pub(super) struct JState {
    /// The transaction handles join. [state]
    pub running: Transaction,
    /// Commit is draining the running transaction: new handles wait.
    /// [state; set and cleared by the committer]
    pub locked: bool,
    /// Blocks of the committing transaction. [state; committer changes]
    pub committing: IntSet<u32>,
    /// Blocks of `committing` whose frozen copy the committer has taken.
    /// [state; committer changes]
    pub frozen: IntSet<u32>,
    /// Frozen copies of committing blocks that a handle of the running
    /// transaction took before it first changed them (jbd's b_frozen_data
    /// made in do_get_write_access), for the committer to log.
    /// [state; a joining handle adds, the committer takes]
    pub frozen_early: IntMap<u32, Box<[u8]>>,
    /// The newest transaction someone wants committed now. [state]
    pub commit_request: Tid,
    /// A data=journal writer wants the commit thread to checkpoint. [state]
    pub checkpoint_request: bool,
    /// The newest committed transaction. [state; committer changes]
    pub committed: Tid,
    /// The next free journal block, and whether the log holds nothing.
    /// [state; committer changes, or enable before the commit thread]
    pub head: JournalBlock,
    pub log_empty: bool,
    /// Committed buffers not yet written home. [state; the committer files
    /// and unfiles entries, a joining handle adds a copy to one]
    pub checkpoint: IntMap<u32, Checkpointed>,
    /// Blocks a checkpoint has taken off `checkpoint` and is writing home,
    /// until it has let go of them: meanwhile the log's copy is still the
    /// newest on its way to the device, and a data write to the block must
    /// go through the log too (else the checkpoint's older copy could land
    /// over it). [state; the checkpointer fills and empties it]
    pub checkpointing: IntSet<u32>,
    /// How many `checkpoint` entries hold a copy (memory beyond the cache).
    /// [state]
    pub kept_copies: usize,
    /// The commit thread is to exit (unmount). [state]
    pub shutdown: bool,
    /// Why the journal aborted, if a commit failed. [state]
    pub error: Option<String>,
    /// Callers waiting for a transaction to commit without a thread of
    /// their own ([`Journal::force_commit_then`]), by transaction id.
    /// [state; run outside it]
    pub commit_callbacks: Vec<(Tid, CommitCallback)>,
}

impl JState {
    /// Someone wants a transaction committed that has not been yet.
    pub(super) fn commit_requested(&self) -> bool {
        self.commit_request.gt(self.committed)
    }

    /// Transaction `tid` has committed (or had nothing to commit). The
    /// request moves up with it: a request left 2^31 ids behind would read
    /// as newer, tids comparing by wrapping difference.
    pub(super) fn set_committed(&mut self, tid: Tid) {
        self.committed = self.committed.later(tid);
        self.commit_request = self.commit_request.later(self.committed);
    }
}

/// What to run once a transaction has committed (or cannot): an fsync's
/// reply, sent from whichever thread finished the commit.
pub type CommitCallback = Box<dyn FnOnce(io::Result<()>) + Send>;

/// When a synchronous caller that does not wait starts its commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitStart {
    /// At once, on the caller's thread, unless a commit is under way.
    Now,
    /// When the caller next runs [`Journal::commit_if_requested`]. A
    /// server that takes requests in batches (an io_uring queue) defers
    /// every fsync of a batch to the batch's end, so they share one commit
    /// instead of each committing the few changes since the last.
    Deferred,
}

/// Counters shaped like /proc/fs/jbd2/*/info. [atomic, each on its own]
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
    /// From the commit locking the transaction to new handles being let
    /// in again (jbd2's rs_locked): the wait for its last handle to stop.
    pub locked_micros: AtomicU64,
    /// Handles' time waiting to start while a commit held the journal
    /// locked, summed over handles.
    pub start_wait_micros: AtomicU64,
    /// The data=ordered flush before the commit block (jbd2's rs_flushing).
    pub flushing_micros: AtomicU64,
}

/// Adds `d` to a microsecond counter of [`Counters`].
pub(super) fn add_micros(counter: &AtomicU64, d: Duration) {
    counter.fetch_add(d.as_micros() as u64, Ordering::Relaxed);
}

/// The journal of one mounted filesystem.
pub struct Journal {
    /// [immutable after new]
    pub(super) cache: Arc<BufferCache>,
    /// [immutable after new]
    pub(super) dev: Arc<dyn BlockDevice>,
    /// Unset until the log is enabled at mount. [set once, by enable]
    pub(super) log: OnceLock<LogArea>,
    /// The journal's state lock (jbd2's j_state_lock).
    pub(super) state: Mutex<JState>,
    /// Handles wait here for a drain to end or a commit to complete.
    /// [waits on state]
    pub(super) wake: Condvar,
    /// Commit waits here for the running transaction's handles to stop;
    /// only the last one to stop wakes it, so a handle stopping wakes no
    /// fsync waiter (they sleep on `wake`). [waits on state]
    pub(super) drained: Condvar,
    /// The commit thread waits here for work. [waits on state]
    pub(super) commit_wake: Condvar,
    /// Serialises commits and checkpoints (the log is written by one at a
    /// time); held across log and home I/O.
    pub(super) commit_lock: Mutex<()>,
    /// Blocks freed by transactions not yet committed. [its own lock, a
    /// leaf: never held with `state`]
    pub(super) pending_free: Mutex<IntSet<u32>>,
    pub(super) counters: Counters,
    /// Handles started, ever. [atomic]
    pub(super) handles: AtomicU64,
    /// Barriers, the commit interval and the batching policy: set by
    /// enable, changed by a remount. [its own lock, a leaf]
    pub(super) config: Mutex<JournalConfig>,
    /// jbd's j_last_sync_writer. [atomic]
    pub(super) last_sync_writer: AtomicU32,
    /// Synchronous handles waiting for a commit right now. [atomic]
    pub(super) sync_waiters: AtomicU64,
    /// The file data writer, told before each flush ahead of a commit
    /// block. [set once, at mount]
    pub(super) flush_hook: OnceLock<Arc<dyn CommitFlushHook>>,
    /// The journal was aborted (jbd's JBD_ABORT): nothing more commits and
    /// new handles get EROFS. Atomic so that an I/O error path holding
    /// cache locks can abort without taking the state lock. [atomic]
    pub(super) aborted: AtomicBool,
    /// Remounted read-only: new handles get EROFS until it is cleared; the
    /// log was committed and checkpointed when it was set. [atomic]
    pub(super) read_only: AtomicBool,
    /// Bytes of frozen copies data=journal allows (0: an eighth of the
    /// cache). [atomic]
    pub(super) copy_budget: AtomicUsize,
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
                running: Transaction::new(Tid(1)),
                locked: false,
                committing: IntSet::default(),
                frozen: IntSet::default(),
                frozen_early: IntMap::default(),
                commit_request: Tid(0),
                checkpoint_request: false,
                committed: Tid(0),
                head: JournalBlock(0),
                log_empty: true,
                checkpoint: IntMap::default(),
                checkpointing: IntSet::default(),
                kept_copies: 0,
                shutdown: false,
                error: None,
                commit_callbacks: Vec::new(),
            }),
            wake: Condvar::new(),
            drained: Condvar::new(),
            commit_wake: Condvar::new(),
            commit_lock: Mutex::new(()),
            pending_free: Mutex::new(IntSet::default()),
            counters: Counters::default(),
            handles: AtomicU64::new(0),
            config: Mutex::new(JournalConfig {
                batching: Batching::Off,
                ..JournalConfig::default()
            }),
            last_sync_writer: AtomicU32::new(0),
            sync_waiters: AtomicU64::new(0),
            flush_hook: OnceLock::new(),
            aborted: AtomicBool::new(false),
            read_only: AtomicBool::new(false),
            copy_budget: AtomicUsize::new(0),
        }
    }

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
            first: JournalBlock(jsb.s_first),
            maxlen: jsb.s_maxlen,
            uuid: jsb.s_uuid,
            block_size: jsb.s_blocksize as usize,
        };
        {
            let mut st = self.state.lock();
            st.head = log.first;
            st.log_empty = true;
            st.running = Transaction::new(Tid(jsb.s_sequence.max(1)));
            st.committed = Tid(jsb.s_sequence.saturating_sub(1));
            // As jbd2's journal_reset: nothing requested. Tids compare by
            // wrapping difference, so a request of 0 could read as newer.
            st.commit_request = st.committed;
        }
        *self.config.lock() = cfg;
        self.log
            .set(log)
            .map_err(|_| io::Error::other("journal already enabled"))?;
        Journal::spawn_commit_thread(self)
    }

    /// A remount's new barrier, commit interval and batching: from the
    /// next commit (and the commit thread's next wait) on.
    pub fn retune(&self, cfg: JournalConfig) {
        *self.config.lock() = cfg;
        self.commit_wake.notify_all();
    }

    /// The barrier, commit interval and batching in force.
    pub fn config(&self) -> JournalConfig {
        *self.config.lock()
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

    /// For a remount read-only: refuses new handles, then commits what
    /// runs and checkpoints everything, so that the log is empty and every
    /// block is home (ext3_remount's journal flush).
    pub fn freeze_read_only(&self) -> io::Result<()> {
        self.read_only.store(true, Ordering::Release);
        if !self.logging() {
            return self.cache.sync_all();
        }
        let done = self.commit_running().and_then(|()| self.checkpoint_all());
        if done.is_err() {
            self.read_only.store(false, Ordering::Release);
        }
        done
    }

    /// Back to read-write after [`Journal::freeze_read_only`].
    pub fn thaw(&self) {
        self.read_only.store(false, Ordering::Release);
        self.wake.notify_all();
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

    pub(super) fn read_only_error() -> io::Error {
        io::Error::from_raw_os_error(libc::EROFS)
    }

    pub(super) fn batching(&self) -> Batching {
        if !self.logging() {
            return Batching::Off;
        }
        self.config.lock().batching
    }

    pub(super) fn logging(&self) -> bool {
        self.log.get().is_some()
    }

    /// Whether [`Journal::enable`] has run: a read-only mount does not
    /// load the journal until it is remounted read-write.
    pub fn is_logging(&self) -> bool {
        self.logging()
    }

    /// The most credits one transaction may hold: a quarter of the log, as
    /// jbd's j_max_transaction_buffers, so a commit always finds room.
    pub fn max_transaction_credits(&self) -> u32 {
        self.log.get().map_or(u32::MAX, |l| l.maxlen / 4)
    }

    /// A failed log write leaves the journal unusable: every later handle
    /// fails, as jbd aborts the journal.
    pub(super) fn abort(&self, e: &io::Error) {
        tracing::error!("journal commit failed, aborting the journal: {e}");
        self.state.lock().error = Some(e.to_string());
        self.abort_new_handles();
    }

    /// Rewrites the journal superblock with the log's start and sequence
    /// (`start == 0`: the log is empty).
    pub(super) fn write_journal_superblock(
        &self,
        log: &LogArea,
        start: JournalBlock,
        sequence: Tid,
    ) -> io::Result<()> {
        let bs = log.block_size;
        let at = log.disk_block(JournalBlock(0)) as u64 * bs as u64;
        let mut buf = vec![0u8; jbd::JOURNAL_SUPERBLOCK_LEN];
        self.dev.read_at(&mut buf, at)?;
        let mut jsb = JournalSuperblock::parse(&buf)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        jsb.s_start = start.0;
        jsb.s_sequence = sequence.0;
        jsb.s_feature_incompat |= jbd::JBD2_FEATURE_INCOMPAT_REVOKE;
        self.dev.write_at(&jsb.to_bytes(), at)
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
    ///
    /// With [`CommitStart::Deferred`] the commit is only requested: the
    /// caller promises to run [`Journal::commit_if_requested`] once it has
    /// nothing else at hand.
    pub fn force_commit_then(&self, start: CommitStart, done: CommitCallback) {
        if !self.logging() {
            return done(self.cache.sync_all());
        }
        if self.is_aborted() {
            return done(Err(io::Error::from_raw_os_error(libc::EIO)));
        }
        match self.start(1) {
            Ok(mut h) => {
                h.set_sync();
                h.stop_then(start, done);
            }
            Err(e) => done(Err(e)),
        }
    }

    /// Starts the commit that deferred synchronous callers asked for, on
    /// this thread unless one is under way (see
    /// [`Journal::commit_now_or_hand_off`]); nothing if none is owed.
    pub fn commit_if_requested(&self) {
        if self.state.lock().commit_requested() {
            self.commit_now_or_hand_off();
        }
    }

    /// How waiting for transaction `tid` ends, if it has ended: committed,
    /// or never will be (journal aborted).
    fn commit_outcome(&self, st: &JState, tid: Tid) -> Option<io::Result<()>> {
        if let Some(e) = &st.error {
            return Some(Err(io::Error::other(format!("journal aborted: {e}"))));
        }
        if st.committed.geq(tid) {
            return Some(Ok(()));
        }
        self.is_aborted()
            .then(|| Err(io::Error::from_raw_os_error(libc::EIO)))
    }

    /// Runs `done` once transaction `tid` has committed: now, if it has.
    pub(super) fn when_committed(&self, tid: Tid, done: CommitCallback) {
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
    pub(super) fn wait_for_commit(&self, tid: Tid) -> io::Result<()> {
        let mut st = self.state.lock();
        while !st.committed.geq(tid) && st.error.is_none() && !self.is_aborted() {
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
    pub(super) fn commit_now_or_hand_off(&self) {
        match self.commit_lock.try_lock() {
            Some(one) => {
                let _ = self.commit_locked(one);
            }
            None => {
                self.commit_wake.notify_one();
            }
        }
    }

    /// The commit thread: commits on request and every commit interval, and
    /// checkpoints when a data=journal writer asks it to (make_room_for_pins).
    fn run_commit_thread(journal: Weak<Journal>) {
        loop {
            let Some(j) = journal.upgrade() else { return };
            let interval = j.config().commit_interval;
            let (due, checkpoint) = {
                let mut st = j.state.lock();
                let idle = !st.commit_requested() && !st.checkpoint_request;
                if idle && !st.shutdown {
                    j.commit_wake
                        .wait_for(&mut st, interval.min(Duration::from_millis(500)));
                }
                if st.shutdown {
                    return;
                }
                let requested = st.commit_requested();
                let old = st.running.started.elapsed() >= interval && !st.running.is_empty();
                (requested || old, std::mem::take(&mut st.checkpoint_request))
            };
            if due {
                let _ = j.commit_if_due(interval);
            }
            if checkpoint {
                let _ = j.checkpoint_all();
            }
            drop(j);
        }
    }

    /// The commit thread's commit: only if it is still due once the commit
    /// lock is held, since a synchronous handle may have committed on its
    /// own thread meanwhile (committing early would cut a batch short).
    fn commit_if_due(&self, interval: Duration) -> io::Result<()> {
        let one = self.commit_lock.lock();
        let due = {
            let st = self.state.lock();
            st.commit_requested()
                || (st.running.started.elapsed() >= interval && !st.running.is_empty())
        };
        if due {
            self.commit_locked(one)
        } else {
            Ok(())
        }
    }

    /// Starts the commit thread for `journal`.
    pub(super) fn spawn_commit_thread(journal: &Arc<Journal>) -> io::Result<()> {
        let weak = Arc::downgrade(journal);
        std::thread::Builder::new()
            .name("jbdfs-commit".into())
            .spawn(move || Journal::run_commit_thread(weak))?;
        Ok(())
    }
}
