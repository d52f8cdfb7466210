//! Writeback: dirty, unpinned buffers go to their home blocks, adjacent
//! blocks coalesced into one vectored write.
//!
//! Each buffer's bytes are copied out under its read lock and written from
//! the copy, so no data lock is held across the write; the buffer's writeback
//! lock is held instead, which keeps two writebacks of one buffer from
//! landing out of order. The dirty bit is cleared only if the buffer's state
//! word is unchanged since the copy, so a modification that raced with the
//! write leaves it dirty.

use std::io::{self, IoSlice};
use std::sync::Arc;

use parking_lot::MutexGuard;

use super::{Buffer, BufferCache};
use crate::format::BlockNo;

/// Most blocks in one vectored write (well under IOV_MAX, and it bounds the
/// memory held in copies).
const MAX_WRITE_BLOCKS: usize = 256;

/// How patient a writeback is with busy buffers.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Wait {
    /// Eviction: skip any buffer whose writeback or data lock is taken, so a
    /// lookup never blocks on buffers it did not ask for.
    Never,
    /// Sync: wait for data locks (holding only that buffer's claim); buffers
    /// already being written by someone else are retried afterwards.
    Data,
    /// The retry: wait for the other writeback to finish too.
    All,
}

/// A buffer whose writeback lock we hold, with the copy we will write.
struct Claimed<'a> {
    buf: &'a Buffer,
    _claim: MutexGuard<'a, ()>,
    seen: u64,
    copy: Box<[u8]>,
}

enum Snap {
    Copied {
        seen: u64,
        copy: Box<[u8]>,
    },
    /// Nothing to write: clean, pinned or never read in.
    Skip,
    /// The data lock is taken and we were not to wait for it.
    Busy,
}

/// Remembers the first error of several independent writes.
#[derive(Default)]
struct FirstError(Option<io::Error>);

impl FirstError {
    fn note(&mut self, r: io::Result<()>) {
        if let (None, Err(e)) = (&self.0, r) {
            self.0 = Some(e);
        }
    }

    fn into_result(self) -> io::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

impl BufferCache {
    /// Writes home those of `blocks` that are cached, dirty and unpinned.
    /// Do not call while holding a buffer guard. Every run is attempted; the
    /// first error is returned and its buffers stay dirty.
    pub fn write_dirty(&self, blocks: &[BlockNo]) -> io::Result<()> {
        let bufs = blocks
            .iter()
            .filter_map(|&b| self.shard(b).lock().peek(b).cloned())
            .collect();
        self.write_buffers(bufs, Wait::Data)
    }

    /// Writes home every dirty, unpinned buffer, then flushes the device.
    /// Do not call while holding a buffer guard. On a write error the
    /// buffers stay dirty and the device is not flushed.
    pub fn sync_all(&self) -> io::Result<()> {
        let bufs = self.collect_dirty();
        self.write_buffers(bufs, Wait::Data)?;
        self.dev.flush()
    }

    fn collect_dirty(&self) -> Vec<Arc<Buffer>> {
        let mut out = Vec::new();
        for s in self.shards.iter() {
            let s = s.0.lock();
            out.extend(
                s.buffers()
                    .filter(|b| b.is_dirty() && !b.is_pinned())
                    .cloned(),
            );
        }
        out
    }

    pub(super) fn write_buffers(&self, mut bufs: Vec<Arc<Buffer>>, wait: Wait) -> io::Result<()> {
        bufs.retain(|b| b.is_dirty() && !b.is_pinned());
        bufs.sort_unstable_by_key(|b| b.block());
        bufs.dedup_by_key(|b| b.block());
        let mut errs = FirstError::default();
        let mut busy = Vec::new();
        let adjacent =
            |a: &Arc<Buffer>, b: &Arc<Buffer>| a.block().0.checked_add(1) == Some(b.block().0);
        for run in bufs.chunk_by(adjacent) {
            for chunk in run.chunks(MAX_WRITE_BLOCKS) {
                errs.note(self.write_run(chunk, wait, &mut busy));
            }
        }
        if wait != Wait::Never {
            for b in &busy {
                errs.note(self.write_run(std::slice::from_ref(b), Wait::All, &mut Vec::new()));
            }
        }
        errs.into_result()
    }

    /// Writes the dirty buffers of `run` (consecutive blocks), as few writes
    /// as the buffers' states allow; buffers whose writeback is in flight
    /// elsewhere go to `busy` unless `wait` is `Never`.
    fn write_run(
        &self,
        run: &[Arc<Buffer>],
        wait: Wait,
        busy: &mut Vec<Arc<Buffer>>,
    ) -> io::Result<()> {
        let mut errs = FirstError::default();
        let mut batch = Vec::new();
        for b in run {
            let Some(claim) = b.claim_writeback(wait == Wait::All) else {
                if wait != Wait::Never {
                    busy.push(Arc::clone(b));
                }
                errs.note(self.write_batch(&mut batch));
                continue;
            };
            // Wait for a data lock only while holding no other claim.
            let mut snap = snapshot(b, wait != Wait::Never && batch.is_empty());
            if matches!(snap, Snap::Busy) && wait != Wait::Never {
                errs.note(self.write_batch(&mut batch));
                snap = snapshot(b, true);
            }
            match snap {
                Snap::Copied { seen, copy } => batch.push(Claimed {
                    buf: b,
                    _claim: claim,
                    seen,
                    copy,
                }),
                Snap::Skip | Snap::Busy => errs.note(self.write_batch(&mut batch)),
            }
        }
        errs.note(self.write_batch(&mut batch));
        errs.into_result()
    }

    /// One vectored write of a batch of consecutive claimed buffers; empties
    /// the batch, releasing the claims.
    fn write_batch(&self, batch: &mut Vec<Claimed<'_>>) -> io::Result<()> {
        let Some(first) = batch.first() else {
            return Ok(());
        };
        let offset = self.offset(first.buf.block());
        let r = {
            let slices: Vec<IoSlice<'_>> = batch.iter().map(|c| IoSlice::new(&c.copy)).collect();
            self.writes
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.dev.write_vectored_at(&slices, offset)
        };
        if r.is_ok() {
            for c in batch.iter() {
                c.buf.clear_dirty_if(c.seen);
            }
        }
        batch.clear();
        r
    }
}

/// Copies a buffer's bytes if it needs writing. The pin check happens under
/// the data lock and the writeback lock: `pin` takes the latter, so a pin
/// either came first (we skip) or waits for this write to finish.
fn snapshot(buf: &Buffer, wait: bool) -> Snap {
    let Some(data) = buf.read_now(wait) else {
        return Snap::Busy;
    };
    let seen = buf.dirty_state();
    if !Buffer::is_dirty_state(seen) || buf.is_pinned() || !buf.is_uptodate() {
        return Snap::Skip;
    }
    Snap::Copied {
        seen,
        copy: data.clone(),
    }
}
