//! Block allocation (Linux: fs/ext3/balloc.c): find free blocks near a goal
//! in the block bitmaps, keep descriptors and counters in step, and honour
//! the blocks reserved for root.

use std::sync::atomic::Ordering;

use super::{Filesystem, FsError, Result};
use crate::format::{BlockNo, GroupNo};
use crate::journal::Handle;

/// The first clear bit in `map` at or after `from` and before `limit`.
pub(crate) fn find_zero(map: &[u8], from: u32, limit: u32) -> Option<u32> {
    let mut i = from;
    while i < limit {
        let byte = map[(i / 8) as usize];
        if byte == 0xFF && i % 8 == 0 {
            i += 8;
            continue;
        }
        if byte & (1 << (i % 8)) == 0 {
            return Some(i);
        }
        i += 1;
    }
    None
}

pub(crate) fn test_bit(map: &[u8], i: u32) -> bool {
    map[(i / 8) as usize] & (1 << (i % 8)) != 0
}

pub(crate) fn set_bit(map: &mut [u8], i: u32) {
    map[(i / 8) as usize] |= 1 << (i % 8);
}

pub(crate) fn clear_bit(map: &mut [u8], i: u32) {
    map[(i / 8) as usize] &= !(1 << (i % 8));
}

impl Filesystem {
    /// Whether the caller may take `n` more blocks: ordinary users stop
    /// at the reserved blocks.
    fn may_allocate(&self, n: u32, privileged: bool) -> bool {
        let free = self.free_blocks.load(Ordering::Relaxed);
        let reserved = if privileged {
            0
        } else {
            self.sb.lock().s_r_blocks_count as i64
        };
        free - (n as i64) >= reserved
    }

    /// Allocates a run of up to `count` contiguous blocks, starting as close
    /// after `goal` as possible. Returns the first block and the run length.
    pub(crate) fn alloc_blocks(
        &self,
        h: &mut Handle<'_>,
        goal: BlockNo,
        count: u32,
        privileged: bool,
    ) -> Result<(BlockNo, u32)> {
        if self.read_only {
            return Err(FsError::ReadOnly);
        }
        if !self.may_allocate(1, privileged) {
            return Err(FsError::NoSpace);
        }
        let (first_group, offset) = self.goal_position(goal);
        for i in 0..self.groups {
            let g = GroupNo((first_group + i) % self.groups);
            let from = if i == 0 { offset } else { 0 };
            if let Some(run) = self.alloc_in_group(h, g, from, count.max(1))? {
                return Ok(run);
            }
        }
        // The goal's group may have room before the goal.
        if offset > 0 {
            if let Some(run) = self.alloc_in_group(h, GroupNo(first_group), 0, count.max(1))? {
                return Ok(run);
            }
        }
        Err(FsError::NoSpace)
    }

    fn goal_position(&self, goal: BlockNo) -> (u32, u32) {
        let sb = self.sb.lock();
        let b = goal.0.clamp(sb.s_first_data_block, sb.s_blocks_count - 1);
        let (g, off) = sb.block_group(BlockNo(b));
        (g.0.min(self.groups - 1), off)
    }

    fn alloc_in_group(
        &self,
        h: &mut Handle<'_>,
        g: GroupNo,
        from: u32,
        count: u32,
    ) -> Result<Option<(BlockNo, u32)>> {
        let _lock = self.group_locks[g.0 as usize].lock();
        let desc = self.group_desc(g)?;
        if desc.bg_free_blocks_count == 0 {
            return Ok(None);
        }
        let (first, len) = {
            let sb = self.sb.lock();
            (sb.group_first_block(g).0, sb.blocks_in_group(g))
        };
        let buf = self.cache.get(desc.block_bitmap())?;
        let Some(start) = self.find_allocatable(&buf.read(), first, from, len) else {
            return Ok(None);
        };
        h.get_write_access(&buf)?;
        let n = {
            let mut map = buf.write();
            let mut n = 0;
            while n < count
                && start + n < len
                && !test_bit(&map, start + n)
                && !self.journal.is_pending_free(first + start + n)
            {
                set_bit(&mut map, start + n);
                n += 1;
            }
            n
        };
        h.dirty_metadata(&buf)?;
        self.update_group_desc(h, g, |d| {
            d.bg_free_blocks_count = d.bg_free_blocks_count.saturating_sub(n as u16)
        })?;
        self.free_blocks.fetch_sub(n as i64, Ordering::Relaxed);
        Ok(Some((BlockNo(first + start), n)))
    }

    /// The first clear bit at or after `from` whose block was not freed by
    /// a transaction still uncommitted: reusing such a block for data
    /// could overwrite metadata that a crash would still need.
    fn find_allocatable(&self, map: &[u8], first: u32, mut from: u32, len: u32) -> Option<u32> {
        loop {
            let bit = find_zero(map, from, len)?;
            if !self.journal.is_pending_free(first + bit) {
                return Some(bit);
            }
            from = bit + 1;
        }
    }

    /// Frees `count` blocks from `start`, which may span groups.
    pub(crate) fn free_blocks(&self, h: &mut Handle<'_>, start: BlockNo, count: u32) -> Result<()> {
        // No queued data write may land on the blocks' next owner.
        self.data.cancel(start.0, count);
        self.logged_tails.remove(start.0, count);
        let mut b = start.0;
        let end = start.0.saturating_add(count);
        while b < end {
            let (g, off, group_len) = {
                let sb = self.sb.lock();
                if b < sb.s_first_data_block || b >= sb.s_blocks_count {
                    tracing::error!(block = b, "freeing a block outside the filesystem");
                    return Err(FsError::Invalid("block out of range"));
                }
                let (g, off) = sb.block_group(BlockNo(b));
                (g, off, sb.blocks_in_group(g))
            };
            let n = (end - b).min(group_len - off);
            self.free_in_group(h, g, off, n)?;
            b += n;
        }
        Ok(())
    }

    fn free_in_group(&self, h: &mut Handle<'_>, g: GroupNo, off: u32, n: u32) -> Result<()> {
        let _lock = self.group_locks[g.0 as usize].lock();
        let desc = self.group_desc(g)?;
        let first = self.sb.lock().group_first_block(g).0;
        let buf = self.cache.get(desc.block_bitmap())?;
        h.get_write_access(&buf)?;
        let mut freed = 0u32;
        {
            let mut map = buf.write();
            for i in off..off + n {
                if test_bit(&map, i) {
                    clear_bit(&mut map, i);
                    freed += 1;
                } else {
                    tracing::error!(
                        block = first + i,
                        group = g.0,
                        "freeing a block that is already free"
                    );
                }
            }
        }
        h.dirty_metadata(&buf)?;
        for i in off..off + n {
            // Neither a logged copy nor a stale cached copy of a freed
            // block may ever be written over its next owner.
            self.journal.revoke(first + i);
            self.cache.forget(BlockNo(first + i));
        }
        self.update_group_desc(h, g, |d| {
            d.bg_free_blocks_count = d.bg_free_blocks_count.saturating_add(freed as u16)
        })?;
        self.free_blocks.fetch_add(freed as i64, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_search() {
        let mut map = vec![0xFFu8; 4];
        map[2] = 0b1110_1111;
        assert_eq!(find_zero(&map, 0, 32), Some(20));
        assert_eq!(find_zero(&map, 21, 32), None);
        assert_eq!(find_zero(&map, 0, 20), None);
        clear_bit(&mut map, 3);
        assert!(!test_bit(&map, 3));
        set_bit(&mut map, 3);
        assert!(test_bit(&map, 3));
    }
}
