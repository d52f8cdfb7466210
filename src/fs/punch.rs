//! Hole punching: fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE) on a
//! block-mapped file, as Linux's ext4 does for one (ext4_punch_hole with
//! ext4_ind_remove_space): the partial blocks at either end are zeroed as
//! ordinary writes, the whole blocks in between are freed, and pointer
//! blocks left empty are freed with them.
//!
//! Crash safety comes from the same pieces as truncate: a block's pointer
//! is cleared in the handle that clears its bitmap bit, each handle writes
//! the inode (`i_block`, `i_blocks`) before it ends, and a freed block is
//! not allocated again until the transaction that freed it has committed
//! (journal/revoke.rs), so in data=ordered and data=journal no new owner's
//! data can land on it while a crash could still bring the old pointer
//! back. A crash part way leaves the range partly punched: each step is
//! consistent on its own, as ext4's restarted handles are.

use super::inode::InodeState;
use super::now;
use super::{Filesystem, FsError, Result};
use crate::format::InodeNo;
use crate::journal::Handle;

/// Credits beyond the bitmaps and descriptors for freeing one range: the
/// pointer blocks cut at either edge (three levels, two edges), the
/// inode, the superblock and slack.
const FREE_RANGE_FIXED_CREDITS: u32 = 12;

impl Filesystem {
    /// Punches a hole over `len` bytes at `offset`: afterwards the range
    /// reads as zeros and its whole blocks are free; the size stays. A
    /// range at or past the end of the file changes nothing.
    pub fn punch_hole(&self, ino: InodeNo, offset: u64, len: u64) -> Result<()> {
        let (inode, end) = self.fallocate_target(ino, offset, len)?;
        let mut st = inode.state.write();
        if !st.disk.is_reg() {
            return Err(FsError::Invalid("fallocate of a non-regular file"));
        }
        super::flags::may_punch(&st.disk)?;
        // ext3 keeps no blocks past the last one i_size reaches.
        let bs = self.block_size as u64;
        let end = end.min(st.disk.i_size.div_ceil(bs) * bs);
        if offset >= end {
            return Ok(());
        }
        let mut h = self.journal.start(self.punch_credits(offset, end))?;
        if super::flags::is_sync(&st.disk) {
            h.set_sync();
        }
        let t = now();
        st.disk.i_mtime = t;
        st.disk.i_ctime = t;
        let res = self.punch_locked(&mut h, ino, &mut st, offset, end);
        self.write_inode_and_stop(h, ino, &st.disk, res)
    }

    /// The punch itself, under the inode's lock: zero the partial blocks at
    /// the edges, then free the whole blocks `first..last`.
    fn punch_locked(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        st: &mut InodeState,
        offset: u64,
        end: u64,
    ) -> Result<()> {
        let bs = self.block_size as u64;
        let (first, last) = (offset.div_ceil(bs), end / bs);
        if first > last {
            // Inside one block.
            return self.zero_mapped(h, ino, st, offset, end);
        }
        self.zero_mapped(h, ino, st, offset, first * bs)?;
        self.zero_mapped(h, ino, st, last * bs, end)?;
        self.free_range(h, ino, st, first, last)
    }

    /// Zeroes bytes `from..to` of one block, if the block is mapped (a hole
    /// reads as zeros already, and must not be allocated), through the
    /// ordinary write path: queued data in data=ordered and writeback,
    /// logged in data=journal, as ext4_zero_partial_blocks writes through
    /// the page cache.
    fn zero_mapped(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        st: &mut InodeState,
        from: u64,
        to: u64,
    ) -> Result<()> {
        if from >= to {
            return Ok(());
        }
        let bs = self.block_size as u64;
        if self
            .map_blocks(ino, st, (from / bs) as u32, 1)?
            .physical
            .is_none()
        {
            return Ok(());
        }
        h.ensure_credits(self.write_credits(bs as usize))?;
        let zeros = vec![0u8; (to - from) as usize];
        let done = self.write_runs(h, ino, st, from, &zeros, true);
        // Under one block: never a direct write to do after the handle.
        debug_assert!(done.direct.is_empty());
        if let Some(e) = done.err {
            return Err(e);
        }
        if done.bytes < zeros.len() {
            return Err(FsError::Invalid("punch: a partial block left unzeroed"));
        }
        Ok(())
    }

    /// Frees logical blocks `first..last`, in as many handles as the log
    /// needs; each handle's share ends with the inode written, so a restart
    /// commits a consistent, partly punched file.
    fn free_range(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        st: &mut InodeState,
        first: u64,
        last: u64,
    ) -> Result<()> {
        let chunk = self.free_range_chunk(last - first);
        let chunked = chunk < last - first;
        let mut at = first;
        while at < last {
            let to = last.min(at.saturating_add(chunk));
            if chunked {
                // A long sparse range costs map calls, not empty handles.
                let m = self.map_blocks(ino, st, at as u32, (to - at) as u32)?;
                if m.physical.is_none() {
                    at += m.count as u64;
                    continue;
                }
            }
            h.ensure_credits(self.free_range_credits(to - at))?;
            self.free_range_in_handle(h, ino, st, at, to)?;
            self.write_inode(h, ino, &st.disk)?;
            at = to;
        }
        Ok(())
    }

    /// Credits to start a punch with: both edges' writes and the freeing,
    /// so that a punch the log can hold in one transaction is one (no
    /// restart splits it: a crash shows it wholly or not at all).
    fn punch_credits(&self, offset: u64, end: u64) -> u32 {
        let bs = self.block_size as u64;
        let whole = (end / bs).saturating_sub(offset.div_ceil(bs));
        let edges = 2 * self.write_credits(bs as usize);
        let want = edges.saturating_add(self.free_range_credits(whole));
        want.min(self.journal.max_transaction_credits())
    }

    /// Credits to free `n` logical blocks: a bitmap and a descriptor for
    /// each group their data and pointer blocks may lie in, and the fixed
    /// part.
    fn free_range_credits(&self, n: u64) -> u32 {
        let per_pointer_block = (self.block_size / 4) as u64;
        let blocks = n + n / (per_pointer_block - 1) + 3;
        let groups = blocks.min(self.groups as u64) as u32;
        2 * groups + FREE_RANGE_FIXED_CREDITS
    }

    /// Logical blocks one handle frees: all of them when every group's
    /// bitmap and descriptor fit a transaction (they bound the buffers any
    /// range touches), else as many as surely fit.
    fn free_range_chunk(&self, n: u64) -> u64 {
        let max = self.journal.max_transaction_credits();
        if self.free_range_credits(n) <= max {
            return n.max(1);
        }
        let groups = max.saturating_sub(FREE_RANGE_FIXED_CREDITS) / 2;
        // Half for the pointer blocks and the run's edges.
        (groups as u64 / 2).saturating_sub(3).max(1)
    }
}
