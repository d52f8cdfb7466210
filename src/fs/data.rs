//! File data on its way home: the queue that makes data=ordered and
//! data=writeback different, as they are in ext3.
//!
//! A write copies whole blocks into the queue and returns; one writer thread
//! takes everything queued as a batch and writes it in runs of adjacent
//! blocks, one device request per run. In data=ordered the commit waits for
//! the queue before the flush ahead of its commit block (jbd's ordered data
//! flush), so a block's contents are on the device before any metadata that
//! points at it. In data=writeback the commit does not wait, and data reaches
//! the device whenever the writer gets to it; fsync waits for it either way.
//!
//! Reads look at the queue before the device, so a caller never sees a
//! block older than its last write. A freed block is taken out of the queue
//! (or waited for, if its write is under way) before it can be reused, so a
//! late data write can never land on the block's next owner.

use std::collections::BTreeMap;
use std::io::{self, IoSlice};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::device::BlockDevice;

/// Queued blocks by disk block number: each block's newest contents.
type Blocks = BTreeMap<u32, Arc<[u8]>>;

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
    /// The batch the writer is writing now.
    inflight: Option<Arc<Blocks>>,
    /// Batches taken by the writer, and batches finished.
    taken: u64,
    done: u64,
    /// The first write error not yet reported by fsync.
    error: Option<io::ErrorKind>,
    shutdown: bool,
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
    /// Bytes held, pending and in flight; zero lets reads skip the lock.
    held: AtomicUsize,
    /// Batches finished before the last flush of the device began.
    flushed: AtomicU64,
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
                inflight: None,
                taken: 0,
                done: 0,
                error: None,
                shutdown: false,
            }),
            work: Condvar::new(),
            finished: Condvar::new(),
            held: AtomicUsize::new(0),
            flushed: AtomicU64::new(0),
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
            self.work.notify_one();
            self.finished.wait_for(&mut st, Duration::from_millis(100));
        }
    }

    /// Queues whole blocks starting at disk block `first`.
    pub fn write(&self, first: u32, data: &[u8]) {
        debug_assert_eq!(data.len() % self.block_size, 0);
        let mut st = self.state.lock();
        for (i, chunk) in data.chunks(self.block_size).enumerate() {
            let block: Arc<[u8]> = Arc::from(chunk);
            if st.pending.insert(first + i as u32, block).is_none() {
                self.held.fetch_add(self.block_size, Ordering::AcqRel);
            }
        }
        drop(st);
        self.work.notify_one();
    }

    /// Reads `dst.len()` bytes at disk byte `offset`, newest queued
    /// contents first.
    pub fn read(&self, dst: &mut [u8], offset: u64) -> io::Result<()> {
        if self.held.load(Ordering::Acquire) == 0 {
            return self.dev.read_at(dst, offset);
        }
        // Copy what is queued before reading the device: a block that is
        // not queued now has already reached the device.
        let queued = self.queued_in(offset, dst.len());
        self.dev.read_at(dst, offset)?;
        let bs = self.block_size as u64;
        for (block, data) in queued {
            let start = block as u64 * bs;
            let lo = start.max(offset);
            let hi = (start + bs).min(offset + dst.len() as u64);
            dst[(lo - offset) as usize..(hi - offset) as usize]
                .copy_from_slice(&data[(lo - start) as usize..(hi - start) as usize]);
        }
        Ok(())
    }

    fn queued_in(&self, offset: u64, len: usize) -> Vec<(u32, Arc<[u8]>)> {
        let bs = self.block_size as u64;
        let first = (offset / bs) as u32;
        let last = ((offset + len as u64 - 1) / bs) as u32;
        let st = self.state.lock();
        let mut out: BTreeMap<u32, Arc<[u8]>> = BTreeMap::new();
        if let Some(batch) = &st.inflight {
            out.extend(batch.range(first..=last).map(|(b, d)| (*b, d.clone())));
        }
        // Pending copies are newer than the batch in flight.
        out.extend(st.pending.range(first..=last).map(|(b, d)| (*b, d.clone())));
        out.into_iter().collect()
    }

    /// Forgets queued data for freed blocks, waiting for any write of them
    /// already under way, so the blocks can be given to a new owner.
    pub fn cancel(&self, start: u32, count: u32) {
        if self.held.load(Ordering::Acquire) == 0 {
            return;
        }
        let end = start.saturating_add(count);
        let mut st = self.state.lock();
        let doomed: Vec<u32> = st.pending.range(start..end).map(|(b, _)| *b).collect();
        for b in doomed {
            st.pending.remove(&b);
            self.held.fetch_sub(self.block_size, Ordering::AcqRel);
        }
        while st
            .inflight
            .as_ref()
            .is_some_and(|batch| batch.range(start..end).next().is_some())
        {
            self.finished.wait(&mut st);
        }
    }

    /// Waits until everything queued before the call is on the device
    /// (not yet flushed); returns the batch count that covers it.
    pub fn drain(&self) -> u64 {
        let mut st = self.state.lock();
        let need = if !st.pending.is_empty() {
            st.taken + 1
        } else {
            st.taken
        };
        self.work.notify_one();
        while st.done < need && !st.shutdown {
            self.finished.wait(&mut st);
        }
        need
    }

    /// The first write error since the last call, for fsync to report.
    pub fn take_error(&self) -> Option<io::Error> {
        self.state.lock().error.take().map(io::Error::from)
    }

    /// Whether the batches up to `need` were covered by a device flush.
    pub fn flushed_through(&self, need: u64) -> bool {
        self.flushed.load(Ordering::Acquire) >= need
    }

    /// Writes out everything and stops the writer (unmount).
    pub fn shutdown(&self) {
        self.drain();
        self.state.lock().shutdown = true;
        self.work.notify_all();
        self.finished.notify_all();
    }

    /// One batch: take everything pending and write it run by run.
    fn write_batch(&self) -> bool {
        let batch = {
            let mut st = self.state.lock();
            while st.pending.is_empty() {
                if st.shutdown {
                    return false;
                }
                if self
                    .work
                    .wait_for(&mut st, Duration::from_millis(200))
                    .timed_out()
                {
                    return true;
                }
            }
            let batch = Arc::new(std::mem::take(&mut st.pending));
            st.inflight = Some(batch.clone());
            st.taken += 1;
            batch
        };
        let res = self.write_runs(&batch);
        let mut st = self.state.lock();
        st.inflight = None;
        st.done += 1;
        self.held
            .fetch_sub(batch.len() * self.block_size, Ordering::AcqRel);
        if let Err(e) = res {
            tracing::error!("file data write failed: {e}");
            st.error.get_or_insert(e.kind());
        }
        drop(st);
        self.finished.notify_all();
        true
    }

    /// Writes a batch as runs of adjacent blocks, one request per run.
    fn write_runs(&self, batch: &Blocks) -> io::Result<()> {
        let bs = self.block_size as u64;
        let mut first_err = None;
        let mut run: Vec<IoSlice<'_>> = Vec::new();
        let mut run_start = 0u32;
        let mut iter = batch.iter().peekable();
        while let Some((&block, data)) = iter.next() {
            if run.is_empty() {
                run_start = block;
            }
            run.push(IoSlice::new(data));
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
