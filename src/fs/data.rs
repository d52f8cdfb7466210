//! File data on its way home: the queue that makes data=ordered and
//! data=writeback different, as they are in ext3.
//!
//! A short write copies whole blocks into the queue and returns. Queued
//! blocks are written in batches, one at a time, as runs of adjacent blocks
//! (one device request per run), by whoever needs them first: an fsync, a
//! commit in data=ordered, a writer throttled by a full queue, and
//! otherwise the writer thread (past half the limit, or every
//! WRITER_PERIOD). A long whole-block stretch is not queued but claimed
//! (`begin_direct`) and written straight from the caller's buffer; a claim
//! counts as queued data for every waiter until its write ends.
//!
//! In data=ordered the commit waits for the whole queue before the flush
//! ahead of its commit block (jbd's ordered data flush), so a block's
//! contents are on the device before any metadata that points at it. In
//! data=writeback the commit does not wait, and data reaches the device
//! whenever it is written.
//!
//! fsync puts the file's own blocks ahead of everything else and waits for
//! those. In data=ordered its commit then waits for all the rest, as ext3's
//! does (one file's fsync pays for every file's dirty data); in
//! data=writeback it does not, which is the difference people measure.
//!
//! Reads look at the queue before the device, so a caller never sees a
//! block older than its last write. A freed block is taken out of the queue
//! (or waited for, if its write is under way) before it can be reused, so a
//! late data write can never land on the block's next owner.

use std::collections::BTreeMap;
use std::io::{self, IoSlice};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::device::BlockDevice;

/// How long queued data may wait for the writer thread when no fsync,
/// commit or full queue asks for it sooner.
const WRITER_PERIOD: Duration = Duration::from_millis(200);

/// One queued block: its newest contents, the inode they belong to, and
/// the sequence number of the oldest write to it not yet on the device.
#[derive(Clone)]
struct Queued {
    ino: u32,
    seq: u64,
    data: Arc<[u8]>,
}

/// Queued blocks by disk block number.
type Blocks = BTreeMap<u32, Queued>;

/// Whether commits wait for queued data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataOrder {
    /// data=ordered: the commit block follows the data it covers.
    Ordered,
    /// data=writeback: only metadata is ordered.
    Writeback,
}

struct QueueState {
    /// Waiting for the writer.
    pending: Blocks,
    /// Blocks an fsync waits for: the writer takes these first. Any copy of
    /// the same block in `pending` is newer.
    urgent: Blocks,
    /// The batches being written now, no two holding the same block;
    /// older than both maps.
    inflight: Vec<Arc<Blocks>>,
    /// The sequence number of the next write call.
    next_seq: u64,
    /// Batches finished.
    done: u64,
    /// Writes going straight from a caller's buffer to the device.
    direct: Vec<Direct>,
    /// The first write error not yet reported by fsync.
    error: Option<io::ErrorKind>,
    shutdown: bool,
}

/// A write of disk blocks `start..end` claimed with
/// [`DataQueue::begin_direct`] and not yet finished.
struct Direct {
    /// Which claim this is.
    id: u64,
    /// The oldest write it stands for: a claim supersedes queued copies of
    /// its blocks, and whoever waited for those now waits for it.
    seq: u64,
    ino: u32,
    start: u32,
    end: u32,
}

impl QueueState {
    /// Whether a write numbered `upto` or earlier (of inode `ino`, if
    /// given) has not reached the device.
    fn unwritten(&self, upto: u64, ino: Option<u32>) -> bool {
        let queued = self
            .inflight
            .iter()
            .map(|b| &**b)
            .chain([&self.urgent, &self.pending])
            .flat_map(|m| m.values())
            .any(|q| q.seq <= upto && ino.is_none_or(|i| q.ino == i));
        queued
            || self
                .direct
                .iter()
                .any(|d| d.seq <= upto && ino.is_none_or(|i| d.ino == i))
    }

    /// Whether a direct write covers any of blocks `start..end`.
    fn direct_overlaps(&self, start: u32, end: u32) -> bool {
        self.direct.iter().any(|d| d.start < end && start < d.end)
    }

    /// Whether a batch in flight holds any of blocks `start..end`.
    fn inflight_overlaps(&self, start: u32, end: u32) -> bool {
        self.inflight
            .iter()
            .any(|batch| batch.range(start..end).next().is_some())
    }

    /// Puts `q` at `block` in `map`, keeping the older unwritten sequence
    /// number; returns whether the block is new to the map.
    fn insert(map: &mut Blocks, block: u32, mut q: Queued) -> bool {
        match map.get(&block) {
            Some(old) => {
                q.seq = q.seq.min(old.seq);
                map.insert(block, q);
                false
            }
            None => {
                map.insert(block, q);
                true
            }
        }
    }
}

/// The file data queue of one mounted filesystem.
pub struct DataQueue {
    dev: Arc<dyn BlockDevice>,
    block_size: usize,
    mode: DataOrder,
    /// Bytes queued or in flight before writers are made to wait.
    limit: usize,
    state: Mutex<QueueState>,
    /// The writer waits here for work.
    work: Condvar,
    /// Drains, cancels and throttled writers wait here for a batch to end.
    finished: Condvar,
    /// Bytes held, queued and in flight; zero lets reads skip the lock.
    held: AtomicUsize,
    /// Direct writes under way; with `held` zero too, cancel skips the lock.
    directs: AtomicUsize,
    /// Batches finished before the last flush of the device began.
    flushed: AtomicU64,
    /// `QueueState::error` holds an error: set with it, under the lock,
    /// so that fsync's check costs no lock when there is none (each fsync
    /// asks, and on io_uring a queue thread that waits for this lock
    /// leaves its CPU idle).
    failed: AtomicBool,
}

impl DataQueue {
    /// A queue over `dev` with its writer thread.
    pub fn start(
        dev: Arc<dyn BlockDevice>,
        block_size: usize,
        mode: DataOrder,
        limit: usize,
    ) -> io::Result<Arc<DataQueue>> {
        let q = Arc::new(DataQueue {
            dev,
            block_size,
            mode,
            limit: limit.max(block_size),
            state: Mutex::new(QueueState {
                pending: BTreeMap::new(),
                urgent: BTreeMap::new(),
                inflight: Vec::new(),
                direct: Vec::new(),
                next_seq: 1,
                done: 0,
                error: None,
                shutdown: false,
            }),
            work: Condvar::new(),
            finished: Condvar::new(),
            held: AtomicUsize::new(0),
            directs: AtomicUsize::new(0),
            flushed: AtomicU64::new(0),
            failed: AtomicBool::new(false),
        });
        let weak = Arc::downgrade(&q);
        std::thread::Builder::new()
            .name("jbdfs-data".into())
            .spawn(move || run_writer(weak))?;
        Ok(q)
    }

    pub fn mode(&self) -> DataOrder {
        self.mode
    }

    /// Waits while the queue holds more than its limit; called before a
    /// write opens its journal handle, so a full queue never holds up a
    /// commit.
    pub fn throttle(&self) {
        if self.held.load(Ordering::Acquire) <= self.limit {
            return;
        }
        let mut st = self.state.lock();
        while self.held.load(Ordering::Acquire) > self.limit && !st.shutdown {
            self.write_or_wait(&mut st, None);
        }
    }

    /// Queues whole blocks of inode `ino` starting at disk block `first`.
    pub fn write(&self, ino: u32, first: u32, data: &[u8]) {
        debug_assert_eq!(data.len() % self.block_size, 0);
        let mut st = self.state.lock();
        let seq = st.next_seq;
        st.next_seq += 1;
        for (i, chunk) in data.chunks(self.block_size).enumerate() {
            let block = Queued {
                ino,
                seq,
                data: Arc::from(chunk),
            };
            if QueueState::insert(&mut st.pending, first + i as u32, block) {
                self.held.fetch_add(self.block_size, Ordering::AcqRel);
            }
        }
        drop(st);
        // The writer is woken only past half the limit; below it, queued
        // data waits for an fsync or commit to write it on its own thread,
        // or for the writer's next round, so small writes cost no thread
        // switch and adjacent ones coalesce.
        if self.held.load(Ordering::Acquire) > self.limit / 2 {
            self.work.notify_one();
        }
    }

    /// Reads `dst.len()` bytes at disk byte `offset`, newest queued
    /// contents first.
    pub fn read(&self, dst: &mut [u8], offset: u64) -> io::Result<()> {
        if self.held.load(Ordering::Acquire) == 0 || dst.is_empty() {
            return self.dev.read_at(dst, offset);
        }
        // Copy what is queued before reading the device: a block that is
        // not queued now has already reached the device.
        let queued = self.queued_in(offset, dst.len());
        self.dev.read_at(dst, offset)?;
        let bs = self.block_size as u64;
        for (block, q) in queued {
            let start = block as u64 * bs;
            let lo = start.max(offset);
            let hi = (start + bs).min(offset + dst.len() as u64);
            dst[(lo - offset) as usize..(hi - offset) as usize]
                .copy_from_slice(&q.data[(lo - start) as usize..(hi - start) as usize]);
        }
        Ok(())
    }

    fn queued_in(&self, offset: u64, len: usize) -> Blocks {
        let bs = self.block_size as u64;
        let first = (offset / bs) as u32;
        let last = ((offset + len as u64 - 1) / bs) as u32;
        let st = self.state.lock();
        let mut out = Blocks::new();
        // Oldest first, so newer copies replace older ones (batches in
        // flight hold different blocks, so their order does not matter).
        let inflight = st.inflight.iter().map(|b| &**b);
        for map in inflight.chain([&st.urgent, &st.pending]) {
            out.extend(map.range(first..=last).map(|(b, q)| (*b, q.clone())));
        }
        out
    }

    /// Forgets queued data for freed blocks, waiting for any write of them
    /// already under way, so the blocks can be given to a new owner.
    pub fn cancel(&self, start: u32, count: u32) {
        if self.held.load(Ordering::Acquire) == 0 && self.directs.load(Ordering::Acquire) == 0 {
            return;
        }
        let end = start.saturating_add(count);
        let mut st = self.state.lock();
        self.forget_queued(&mut st, start, end);
        while st.inflight_overlaps(start, end) || st.direct_overlaps(start, end) {
            self.finished.wait(&mut st);
        }
    }

    /// Drops the queued (not in flight) copies of blocks `start..end`;
    /// returns the oldest sequence number among them.
    fn forget_queued(&self, st: &mut QueueState, start: u32, end: u32) -> Option<u64> {
        let mut oldest = None;
        for map in [&mut st.pending, &mut st.urgent] {
            let doomed: Vec<u32> = map.range(start..end).map(|(b, _)| *b).collect();
            for b in doomed {
                if let Some(q) = map.remove(&b) {
                    oldest = Some(oldest.map_or(q.seq, |o: u64| o.min(q.seq)));
                    self.held.fetch_sub(self.block_size, Ordering::AcqRel);
                }
            }
        }
        oldest
    }

    /// Claims whole blocks `first..first + count` of inode `ino` for a
    /// write straight from the caller's buffer, which saves a large write
    /// the copy into the queue and the hand-off to the writer. Older
    /// queued copies of the blocks are dropped (the new data supersedes
    /// them) and one already in flight is waited for (it must not land
    /// after the new data). From here until the write finishes, drains
    /// (and so, in data=ordered, commits) wait for it, exactly as for
    /// queued data: claim inside the journal handle that maps the blocks,
    /// write after stopping it, before starting another.
    pub fn begin_direct(&self, ino: u32, first: u32, count: u32) -> DirectWrite<'_> {
        let end = first.saturating_add(count);
        let mut st = self.state.lock();
        while st.inflight_overlaps(first, end) {
            self.finished.wait(&mut st);
        }
        let id = st.next_seq;
        st.next_seq += 1;
        // A drain that was waiting for a dropped copy must now wait for
        // the claim, or it could return before either version landed.
        let seq = self
            .forget_queued(&mut st, first, end)
            .map_or(id, |o| o.min(id));
        st.direct.push(Direct {
            id,
            seq,
            ino,
            start: first,
            end,
        });
        self.directs.fetch_add(1, Ordering::AcqRel);
        DirectWrite {
            queue: self,
            id,
            first,
            done: false,
        }
    }

    /// Ends direct write `id`, recording its error for fsync.
    fn end_direct(&self, id: u64, res: &io::Result<()>) {
        let mut st = self.state.lock();
        st.direct.retain(|d| d.id != id);
        self.directs.fetch_sub(1, Ordering::AcqRel);
        st.done += 1;
        if let Err(e) = res {
            tracing::error!("file data write failed: {e}");
            st.error.get_or_insert(e.kind());
            self.failed.store(true, Ordering::Release);
        }
        drop(st);
        self.finished.notify_all();
    }

    /// Waits until everything queued before the call is on the device
    /// (not yet flushed); returns the count of finished batches then, for
    /// [`DataQueue::flushed_through`].
    pub fn drain(&self) -> u64 {
        let mut st = self.state.lock();
        let upto = st.next_seq - 1;
        self.wait_written(&mut st, upto, None)
    }

    /// Waits until inode `ino`'s queued blocks are on the device, moving
    /// them ahead of the rest; returns the count of finished batches then.
    pub fn drain_inode(&self, ino: u32) -> u64 {
        let mut guard = self.state.lock();
        let st = &mut *guard;
        let mine: Vec<u32> = st
            .pending
            .iter()
            .filter(|(_, q)| q.ino == ino)
            .map(|(b, _)| *b)
            .collect();
        for b in mine {
            if let Some(q) = st.pending.remove(&b) {
                if !QueueState::insert(&mut st.urgent, b, q) {
                    // The older urgent copy is superseded before it is written.
                    self.held.fetch_sub(self.block_size, Ordering::AcqRel);
                }
            }
        }
        let upto = guard.next_seq - 1;
        self.wait_written(&mut guard, upto, Some(ino))
    }

    /// Waits until no write numbered `upto` or earlier (of `ino`, if
    /// given) is unwritten. When no batch is in flight the caller writes
    /// the next one itself rather than waking the writer thread and
    /// sleeping: on fast storage the two thread switches would cost more
    /// than the write (the same reasoning as commits on the fsync caller's
    /// thread, journal/commit.rs).
    fn wait_written(
        &self,
        st: &mut parking_lot::MutexGuard<'_, QueueState>,
        upto: u64,
        ino: Option<u32>,
    ) -> u64 {
        while st.unwritten(upto, ino) && !st.shutdown {
            self.write_or_wait(st, ino);
        }
        st.done
    }

    /// Writes the next batch on this thread, or, with one already in
    /// flight, waits for a batch to end.
    fn write_or_wait(&self, st: &mut MutexGuard<'_, QueueState>, ino: Option<u32>) {
        match self.take_ready(st, ino) {
            Some(batch) => {
                let res = MutexGuard::unlocked(st, || self.write_runs(&batch));
                self.finish_batch(st, &batch, res);
            }
            None => {
                self.finished.wait_for(st, Duration::from_millis(100));
            }
        }
    }

    /// The first write error since the last call, for fsync to report.
    pub fn take_error(&self) -> Option<io::Error> {
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        let mut st = self.state.lock();
        self.failed.store(false, Ordering::Release);
        st.error.take().map(io::Error::from)
    }

    /// Whether a device flush began after `done` batches had finished
    /// (a value [`DataQueue::drain`] returned).
    pub fn flushed_through(&self, done: u64) -> bool {
        self.flushed.load(Ordering::Acquire) >= done
    }

    /// Writes out everything and stops the writer (unmount).
    pub fn shutdown(&self) {
        self.drain();
        self.state.lock().shutdown = true;
        self.work.notify_all();
        self.finished.notify_all();
    }

    /// Takes the next batch: the urgent blocks if any, else all pending.
    /// A caller waiting for one inode (an fsync) takes only that inode's
    /// urgent blocks, and may do so while other batches are in flight,
    /// leaving out any block one of them holds: its newer copy waits, so it
    /// can never land before the older one. So an fsync on one queue
    /// thread writes its file while another's write is under way, instead
    /// of sleeping (and leaving its CPU idle) until that one ends. Other
    /// callers (commits, the writer, throttled writers) take a batch only
    /// when none is in flight, as before.
    fn take_ready(&self, st: &mut QueueState, ino: Option<u32>) -> Option<Arc<Blocks>> {
        let QueueState {
            urgent,
            pending,
            inflight,
            ..
        } = st;
        if ino.is_none() && !inflight.is_empty() {
            return None;
        }
        let source = if urgent.is_empty() { pending } else { urgent };
        let batch = if ino.is_none() {
            std::mem::take(source)
        } else {
            let takeable: Vec<u32> = source
                .iter()
                .filter(|(b, q)| Some(q.ino) == ino && !inflight.iter().any(|f| f.contains_key(b)))
                .map(|(b, _)| *b)
                .collect();
            takeable
                .into_iter()
                .filter_map(|b| source.remove(&b).map(|q| (b, q)))
                .collect()
        };
        if batch.is_empty() {
            return None;
        }
        let batch = Arc::new(batch);
        inflight.push(batch.clone());
        Some(batch)
    }

    /// Ends the batch in flight: its blocks are on the device (or failed).
    fn finish_batch(&self, st: &mut QueueState, batch: &Arc<Blocks>, res: io::Result<()>) {
        st.inflight.retain(|b| !Arc::ptr_eq(b, batch));
        st.done += 1;
        self.held
            .fetch_sub(batch.len() * self.block_size, Ordering::AcqRel);
        if let Err(e) = res {
            tracing::error!("file data write failed: {e}");
            st.error.get_or_insert(e.kind());
            self.failed.store(true, Ordering::Release);
        }
        self.finished.notify_all();
    }

    /// The writer thread's turn: one batch when there is one, else a wait
    /// for work; false once shut down.
    fn write_batch(&self) -> bool {
        let mut st = self.state.lock();
        let Some(batch) = self.take_ready(&mut st, None) else {
            if st.shutdown {
                return false;
            }
            // A round every WRITER_PERIOD writes what nobody waited for,
            // and lets the thread notice a dropped queue.
            self.work.wait_for(&mut st, WRITER_PERIOD);
            return true;
        };
        let res = MutexGuard::unlocked(&mut st, || self.write_runs(&batch));
        self.finish_batch(&mut st, &batch, res);
        true
    }

    /// Writes a batch as runs of adjacent blocks, one request per run.
    fn write_runs(&self, batch: &Blocks) -> io::Result<()> {
        let bs = self.block_size as u64;
        let mut first_err = None;
        let mut run: Vec<IoSlice<'_>> = Vec::new();
        let mut run_start = 0u32;
        let mut iter = batch.iter().peekable();
        while let Some((&block, q)) = iter.next() {
            if run.is_empty() {
                run_start = block;
            }
            run.push(IoSlice::new(&q.data));
            let continues = iter
                .peek()
                .is_some_and(|(&next, _)| next == block.wrapping_add(1));
            if !continues {
                if let Err(e) = self.dev.write_vectored_at(&run, run_start as u64 * bs) {
                    first_err.get_or_insert(e);
                }
                run.clear();
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

/// A claimed direct write ([`DataQueue::begin_direct`]). Dropping it
/// unwritten releases the claim, so an error path cannot leave drains
/// waiting for ever.
pub struct DirectWrite<'q> {
    queue: &'q DataQueue,
    id: u64,
    first: u32,
    done: bool,
}

impl DirectWrite<'_> {
    /// Writes `data`, whole blocks from the claimed first block.
    pub fn write(mut self, data: &[u8]) -> io::Result<()> {
        let q = self.queue;
        let res = q
            .dev
            .write_at(data, self.first as u64 * q.block_size as u64);
        self.done = true;
        q.end_direct(self.id, &res);
        res
    }
}

impl Drop for DirectWrite<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.queue.end_direct(self.id, &Ok(()));
        }
    }
}

impl crate::journal::CommitFlushHook for DataQueue {
    /// In data=ordered the data goes to the device before the flush that
    /// precedes the commit block; in both modes what is already written is
    /// covered by that flush.
    fn before_commit_flush(&self) {
        let done = match self.mode {
            DataOrder::Ordered => self.drain(),
            DataOrder::Writeback => self.state.lock().done,
        };
        self.flushed.fetch_max(done, Ordering::AcqRel);
    }
}

/// The writer thread: runs until the queue is shut down or dropped.
fn run_writer(queue: Weak<DataQueue>) {
    while let Some(q) = queue.upgrade() {
        if !q.write_batch() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemoryDevice;

    const BS: usize = 1024;

    /// A memory device that holds back writes at `held_block` until opened.
    struct Gate {
        inner: MemoryDevice,
        held_block: u64,
        open: Mutex<bool>,
        opened: Condvar,
    }

    impl BlockDevice for Gate {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            self.inner.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            let end = offset + buf.len() as u64;
            if (offset..end).contains(&self.held_block.saturating_mul(BS as u64)) {
                let mut open = self.open.lock();
                while !*open {
                    self.opened.wait(&mut open);
                }
            }
            self.inner.write_at(buf, offset)
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
        fn size(&self) -> u64 {
            self.inner.size()
        }
    }

    fn gate(held_block: u64) -> Arc<Gate> {
        Arc::new(Gate {
            inner: MemoryDevice::new(1 << 20).unwrap(),
            held_block,
            open: Mutex::new(false),
            opened: Condvar::new(),
        })
    }

    fn open(g: &Gate) {
        *g.open.lock() = true;
        g.opened.notify_all();
    }

    #[test]
    fn reads_see_queued_blocks_before_they_reach_the_device() {
        let dev = gate(10);
        let q = DataQueue::start(dev.clone(), BS, DataOrder::Writeback, 1 << 20).unwrap();
        q.write(1, 10, &[7u8; BS]);
        let mut buf = [0u8; 100];
        q.read(&mut buf, 10 * BS as u64 + 50).unwrap();
        assert_eq!(buf, [7u8; 100]);
        let mut raw = [0u8; 1];
        dev.inner.read_at(&mut raw, 10 * BS as u64).unwrap();
        assert_eq!(raw, [0], "held back at the device");
        open(&dev);
        q.drain();
        dev.inner.read_at(&mut raw, 10 * BS as u64).unwrap();
        assert_eq!(raw, [7]);
    }

    #[test]
    fn a_cancelled_block_never_reaches_the_device() {
        let dev = gate(40);
        let q = DataQueue::start(dev.clone(), BS, DataOrder::Ordered, 1 << 20).unwrap();
        q.write(1, 40, &[4u8; BS]);
        q.work.notify_one(); // the writer takes it and blocks on it
        std::thread::sleep(Duration::from_millis(50));
        q.write(1, 5, &[9u8; BS]); // pending behind it
        q.cancel(5, 1);
        open(&dev);
        q.drain();
        let mut raw = [0u8; 1];
        dev.inner.read_at(&mut raw, 5 * BS as u64).unwrap();
        assert_eq!(raw, [0], "the freed block kept its old contents");
        assert_eq!(q.held.load(Ordering::Acquire), 0);
    }

    #[test]
    fn drain_inode_does_not_wait_for_other_files() {
        let dev = gate(20);
        let q = DataQueue::start(dev.clone(), BS, DataOrder::Writeback, 1 << 20).unwrap();
        q.write(1, 20, &[1u8; BS]); // held at the device
        q.work.notify_one();
        std::thread::sleep(Duration::from_millis(50)); // let the writer block on it
        q.write(2, 30, &[2u8; BS]);
        let waiter = {
            let q = q.clone();
            std::thread::spawn(move || q.drain_inode(2))
        };
        // Inode 2's block sits behind the held batch; the waiter returns only
        // once that batch is let go, and its own block is then written first
        // as an urgent batch rather than after everything pending.
        std::thread::sleep(Duration::from_millis(50));
        open(&dev);
        waiter.join().unwrap();
        let mut raw = [0u8; 1];
        dev.inner.read_at(&mut raw, 30 * BS as u64).unwrap();
        assert_eq!(raw, [2]);
    }

    #[test]
    fn drain_covers_every_write_before_it() {
        let dev = gate(u64::MAX);
        let q = DataQueue::start(dev.clone(), BS, DataOrder::Ordered, 1 << 20).unwrap();
        for b in 0..64u32 {
            q.write(b % 3, 100 + b * 2, &[b as u8; BS]);
        }
        q.drain();
        for b in 0..64u32 {
            let mut raw = [0u8; 1];
            dev.inner
                .read_at(&mut raw, (100 + b as u64 * 2) * BS as u64)
                .unwrap();
            assert_eq!(raw, [b as u8]);
        }
        assert_eq!(q.held.load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_direct_write_supersedes_queued_copies() {
        let dev = gate(u64::MAX);
        let q = DataQueue::start(dev.clone(), BS, DataOrder::Ordered, 1 << 20).unwrap();
        q.write(1, 5, &[1u8; 2 * BS]);
        q.begin_direct(1, 5, 2).write(&[2u8; 2 * BS]).unwrap();
        q.drain();
        let mut buf = [0u8; 2 * BS];
        q.read(&mut buf, 5 * BS as u64).unwrap();
        assert_eq!(buf, [2u8; 2 * BS], "the older queued copy never lands");
        assert_eq!(q.held.load(Ordering::Acquire), 0);
    }

    #[test]
    fn drains_and_cancels_wait_for_a_claimed_direct_write() {
        let dev = gate(u64::MAX);
        let q = DataQueue::start(dev.clone(), BS, DataOrder::Ordered, 1 << 20).unwrap();
        let claim = q.begin_direct(3, 50, 1);
        let landed = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let drainer = s.spawn(|| {
                q.drain_inode(3);
                assert!(
                    landed.load(Ordering::Acquire),
                    "drain returned before the write"
                );
            });
            let canceller = s.spawn(|| {
                q.cancel(50, 1);
                assert!(
                    landed.load(Ordering::Acquire),
                    "cancel returned before the write"
                );
            });
            std::thread::sleep(Duration::from_millis(50));
            landed.store(true, Ordering::Release);
            claim.write(&[6u8; BS]).unwrap();
            drainer.join().unwrap();
            canceller.join().unwrap();
        });
        let mut raw = [0u8; 1];
        dev.inner.read_at(&mut raw, 50 * BS as u64).unwrap();
        assert_eq!(raw, [6]);
    }

    #[test]
    fn a_dropped_claim_releases_waiters() {
        let dev = gate(u64::MAX);
        let q = DataQueue::start(dev, BS, DataOrder::Ordered, 1 << 20).unwrap();
        drop(q.begin_direct(1, 9, 1));
        q.drain(); // would wait for ever if the claim were still held
        assert!(q.state.lock().direct.is_empty());
    }

    /// A queue whose writer has taken block 40 (inode 1) and is held on
    /// it at the device until the gate opens.
    fn held_on_block_40() -> (Arc<Gate>, Arc<DataQueue>) {
        let dev = gate(40);
        let q = DataQueue::start(dev.clone(), BS, DataOrder::Ordered, 1 << 20).unwrap();
        q.write(1, 40, &[4u8; BS]);
        q.work.notify_one();
        std::thread::sleep(Duration::from_millis(50));
        (dev, q)
    }

    #[test]
    fn a_drain_waits_for_the_claim_that_superseded_its_queued_copy() {
        let (dev, q) = held_on_block_40();
        q.write(2, 5, &[1u8; BS]); // queued behind the held batch
        let drained = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let drainer = s.spawn(|| {
                q.drain();
                drained.store(true, Ordering::Release);
            });
            std::thread::sleep(Duration::from_millis(50));
            let claim = q.begin_direct(2, 5, 1); // drops the queued copy
            open(&dev);
            std::thread::sleep(Duration::from_millis(100));
            assert!(
                !drained.load(Ordering::Acquire),
                "the drain returned with neither version of block 5 written"
            );
            claim.write(&[2u8; BS]).unwrap();
            drainer.join().unwrap();
        });
        let mut raw = [0u8; 1];
        dev.inner.read_at(&mut raw, 5 * BS as u64).unwrap();
        assert_eq!(raw, [2]);
    }

    /// An fsync's drain of its own inode writes while another batch is in
    /// flight, instead of waiting for it; a newer copy of a block in flight
    /// still waits for the older one.
    #[test]
    fn an_inode_drain_writes_beside_a_batch_in_flight_but_not_over_it() {
        let (dev, q) = held_on_block_40();
        q.write(2, 5, &[1u8; BS]);
        q.drain_inode(2); // returns with block 40 still held
        let mut raw = [0u8; 1];
        dev.inner.read_at(&mut raw, 5 * BS as u64).unwrap();
        assert_eq!(raw, [1], "inode 2's block written beside the held batch");
        q.write(1, 40, &[9u8; BS]); // a newer copy of the block in flight
        let drained = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                q.drain_inode(1);
                drained.store(true, Ordering::Release);
            });
            std::thread::sleep(Duration::from_millis(100));
            assert!(
                !drained.load(Ordering::Acquire),
                "the newer copy jumped the older"
            );
            open(&dev);
        });
        dev.inner.read_at(&mut raw, 40 * BS as u64).unwrap();
        assert_eq!(raw, [9], "the newer copy landed last");
    }
}
