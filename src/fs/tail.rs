//! The zeroed tail of a shrinking truncate, in data=ordered and writeback.
//!
//! ext3 (block_truncate_page) zeroes the bytes past the new size in the last
//! block so that they read as zeros if the file grows again, and writes them
//! as ordinary data. A crash after those zeros reach the device but before
//! the truncate commits then leaves the old size over zeroed bytes: data that
//! was fsync'd is lost, in a state that is neither before nor after the
//! truncate (the crash campaign's CRASH-1). jbdfs logs that one block in the
//! truncate's transaction instead, so the zeros and the new size become
//! durable together.
//!
//! While the log holds a copy of such a block, its newest contents are in
//! the buffer cache, not on the device: reads take it from there, and writes
//! to it are logged too (otherwise checkpoint or replay would put the older
//! logged copy over them). Once checkpoint has written it home the block is
//! ordinary file data again; the first write after that drops the cached
//! copy and goes through the data queue.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use super::{Filesystem, Result};
use crate::format::BlockNo;
use crate::journal::Handle;

/// File data blocks logged as truncate tails, not yet known to be home.
#[derive(Default)]
pub struct LoggedTails {
    blocks: Mutex<HashSet<u32>>,
    /// The set's size, so the data path skips the lock when it is empty.
    count: AtomicUsize,
}

impl LoggedTails {
    fn any(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    /// The first block of `first..first + n` in the set, if any.
    fn first_in(&self, first: u32, n: u32) -> Option<u32> {
        if !self.any() {
            return None;
        }
        let set = self.blocks.lock();
        (first..first.saturating_add(n)).find(|b| set.contains(b))
    }

    fn insert(&self, block: u32) {
        if self.blocks.lock().insert(block) {
            self.count.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Forgets blocks `start..start + count` (freed, or home again).
    pub fn remove(&self, start: u32, count: u32) {
        if !self.any() {
            return;
        }
        let mut set = self.blocks.lock();
        for b in start..start.saturating_add(count) {
            if set.remove(&b) {
                self.count.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

impl Filesystem {
    /// Zeroes block `block` from byte `from` on, logged in `h`'s transaction.
    pub(crate) fn zero_tail_logged(
        &self,
        h: &mut Handle<'_>,
        block: BlockNo,
        from: usize,
    ) -> Result<()> {
        let buf = self.logged_data_buffer(block)?;
        h.modify(&buf)?[from..].fill(0);
        self.logged_tails.insert(block.0);
        Ok(())
    }

    /// The cache buffer that is to carry a data block into the log, holding
    /// the block's newest contents.
    fn logged_data_buffer(&self, block: BlockNo) -> Result<std::sync::Arc<crate::cache::Buffer>> {
        if self.journal.holds_copy(block.0) {
            return Ok(self.cache.get(block)?);
        }
        // Not in the log: the newest contents are on the device or in the
        // data queue, and any cached copy is stale.
        let bs = self.block_size as usize;
        let mut bytes = vec![0u8; bs];
        self.data.read(&mut bytes, block.0 as u64 * bs as u64)?;
        self.data.cancel(block.0, 1);
        self.cache.forget(block);
        let buf = self.cache.get_new(block)?;
        buf.write().copy_from_slice(&bytes);
        Ok(buf)
    }

    /// Whether reads of these blocks must look in the cache first.
    pub(crate) fn has_logged_tails(&self) -> bool {
        self.logged_tails.any()
    }

    /// Of a run of `n` blocks at `first`, how many from its start are plain
    /// data: `n` when none is a logged tail, else the index of the first one
    /// (0: the run starts with a block whose writes must be logged). A tail
    /// whose copy has left the log is plain data again.
    pub(crate) fn plain_data_prefix(&self, first: u32, n: u32) -> u32 {
        while let Some(b) = self.logged_tails.first_in(first, n) {
            if self.journal.holds_copy(b) {
                return b - first;
            }
            self.logged_tails.remove(b, 1);
            self.cache.forget(BlockNo(b));
        }
        n
    }
}
