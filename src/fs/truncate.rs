//! Freeing a file's blocks (Linux: ext3_truncate, and ext4_ind_remove_space
//! for hole punching): free every block of a logical range, pruning pointer
//! blocks that become empty. Truncation is the range that runs to the end.

use super::bmap::EXT3_NDIR_BLOCKS;
use super::inode::InodeState;
use super::{Filesystem, Result};
use crate::format::indirect;
use crate::format::{BlockNo, Corruption, InodeNo, Location};
use crate::journal::Handle;

/// Blocks to free, gathered into runs so each run is one bitmap update.
#[derive(Default)]
struct FreeList {
    runs: Vec<(u32, u32)>,
    total: u64,
}

impl FreeList {
    fn push(&mut self, b: u32) {
        self.total += 1;
        match self.runs.last_mut() {
            Some((s, n)) if *s + *n == b => *n += 1,
            _ => self.runs.push((b, 1)),
        }
    }
}

impl Filesystem {
    /// Frees the blocks of `st` from logical block `start` on, and updates
    /// `i_block` and `i_blocks`; the caller writes the inode.
    pub(crate) fn free_blocks_from(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        st: &mut InodeState,
        start: u64,
    ) -> Result<()> {
        h.ensure_credits(self.truncate_credits(st))?;
        self.free_blocks_from_in_handle(h, ino, st, start)
    }

    /// [`Self::free_blocks_from`] without making sure of credits, which may
    /// end the handle and start another: for undoing an operation that
    /// failed part way, whose blocks were all allocated in this handle (it
    /// holds their bitmaps and descriptors already).
    pub(crate) fn free_blocks_from_in_handle(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        st: &mut InodeState,
        start: u64,
    ) -> Result<()> {
        self.free_range_in_handle(h, ino, st, start, u64::MAX)
    }

    /// Frees the blocks of logical blocks `start..end`, and the pointer
    /// blocks left empty; updates `i_block` and `i_blocks`, and the caller
    /// writes the inode. Each pointer is cleared in the same handle as its
    /// block's bitmap bit, so no transaction frees a block still named on
    /// disk. The caller makes sure of the credits (`truncate_credits`
    /// here, `free_range_credits` in punch.rs).
    pub(crate) fn free_range_in_handle(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        st: &mut InodeState,
        start: u64,
        end: u64,
    ) -> Result<()> {
        let mut list = FreeList::default();
        for i in 0..EXT3_NDIR_BLOCKS {
            let inside = (start..end).contains(&(i as u64));
            if inside && st.disk.i_block[i] != 0 {
                list.push(st.disk.i_block[i]);
                st.disk.i_block[i] = 0;
            }
        }
        let p = (self.block_size / 4) as u64;
        let mut base = EXT3_NDIR_BLOCKS as u64;
        for (slot, depth) in [(12usize, 1u32), (13, 2), (14, 3)] {
            let span = p.pow(depth);
            let root = st.disk.i_block[slot];
            if root != 0 && start < base + span && end > base {
                let range = (start.saturating_sub(base), end - base);
                if self.free_tree(h, ino, root, depth, range, &mut list)? {
                    st.disk.i_block[slot] = 0;
                }
            }
            base += span;
        }
        for &(s, n) in &list.runs {
            self.free_blocks(h, BlockNo(s), n)?;
        }
        let sectors = (self.block_size / 512) as u64;
        st.disk.i_blocks = st.disk.i_blocks.saturating_sub(list.total * sectors);
        st.last_alloc = None;
        Ok(())
    }

    /// Credits to free all of a file's blocks: a bitmap and a descriptor
    /// for each group they may lie in, the pointer blocks on the cut, the
    /// inode and the superblock.
    fn truncate_credits(&self, st: &InodeState) -> u32 {
        let blocks = st.disk.i_blocks / (self.block_size as u64 / 512);
        let groups = blocks.min(self.groups as u64) as u32;
        let want = 2 * groups + 10;
        want.min(self.journal.max_transaction_credits())
    }

    /// Frees what lies in `first..end` (relative to the subtree) under
    /// the pointer block `block` of `depth`; returns whether the block
    /// itself became empty and was freed.
    fn free_tree(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        block: u32,
        depth: u32,
        (first, end): (u64, u64),
        list: &mut FreeList,
    ) -> Result<bool> {
        let b = match self.check_block_ptr(ino, block) {
            Ok(b) => b,
            // A corrupt pointer is dropped rather than followed.
            Err(_) => return Ok(true),
        };
        let buf = self.cache.get(b)?;
        let p = (self.block_size / 4) as u64;
        let child_span = p.pow(depth - 1);
        let ptrs: Vec<u32> = indirect::ptrs(&buf.read()).map(|p| p.0).collect();
        let mut cleared = vec![false; ptrs.len()];
        for (i, &ptr) in ptrs.iter().enumerate() {
            let child_base = i as u64 * child_span;
            if ptr == 0 || child_base + child_span <= first || child_base >= end {
                continue;
            }
            let gone = if depth == 1 {
                list.push(ptr);
                true
            } else {
                self.free_tree(
                    h,
                    ino,
                    ptr,
                    depth - 1,
                    (first.saturating_sub(child_base), end - child_base),
                    list,
                )?
            };
            cleared[i] = gone;
        }
        let keep = ptrs
            .iter()
            .enumerate()
            .any(|(i, &ptr)| ptr != 0 && !cleared[i]);
        if !keep {
            list.push(block);
            return Ok(true);
        }
        if cleared.iter().any(|&c| c) {
            let mut data = h.modify(&buf)?;
            for (i, _) in cleared.iter().enumerate().filter(|(_, &c)| c) {
                indirect::set_ptr(&mut data, i as u32, BlockNo(0))
                    .map_err(|e| Corruption::new(Location::Block(b), e))?;
            }
        }
        Ok(false)
    }
}
