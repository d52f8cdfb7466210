//! Inode allocation (Linux: fs/ext3/ialloc.c): new directories spread
//! across groups, other inodes stay near their parent, as ext3's
//! find_group_dir and find_group_other do.

use std::sync::atomic::Ordering;

use super::balloc::{clear_bit, find_zero, set_bit, test_bit};
use super::{Filesystem, FsError, Result};
use crate::format::{GroupNo, InodeNo};
use crate::journal::Handle;

impl Filesystem {
    /// Allocates an inode for a child of `parent`.
    pub(crate) fn alloc_inode(
        &self,
        h: &mut Handle<'_>,
        parent: InodeNo,
        is_dir: bool,
    ) -> Result<InodeNo> {
        if self.is_read_only() {
            return Err(FsError::ReadOnly);
        }
        let parent_group = self.sb.lock().inode_group(parent.0).0;
        let order: Box<dyn Iterator<Item = GroupNo>> = if is_dir {
            Box::new(self.dir_group_order()?.into_iter())
        } else {
            Box::new(file_group_order(parent_group, self.groups))
        };
        for g in order {
            if let Some(ino) = self.alloc_inode_in_group(h, g, is_dir)? {
                return Ok(ino);
            }
        }
        Err(FsError::NoSpace)
    }

    /// Groups for a new directory: those with at least the average number
    /// of free inodes, most free blocks first; then all the rest.
    fn dir_group_order(&self) -> Result<Vec<GroupNo>> {
        let mut stats = Vec::with_capacity(self.groups as usize);
        for g in 0..self.groups {
            let d = self.group_desc(GroupNo(g))?;
            stats.push((
                GroupNo(g),
                d.bg_free_inodes_count,
                d.bg_free_blocks_count,
                d.bg_used_dirs_count,
            ));
        }
        let avg = self.free_inodes.load(Ordering::Relaxed).max(0) as u64 / self.groups as u64;
        let (mut good, rest): (Vec<_>, Vec<_>) =
            stats.into_iter().partition(|s| s.1 as u64 >= avg.max(1));
        good.sort_by_key(|s| (s.3, std::cmp::Reverse(s.2)));
        Ok(good.into_iter().chain(rest).map(|s| s.0).collect())
    }

    fn alloc_inode_in_group(
        &self,
        h: &mut Handle<'_>,
        g: GroupNo,
        is_dir: bool,
    ) -> Result<Option<InodeNo>> {
        let _lock = self.group_locks[g.0 as usize].lock();
        let desc = self.group_desc(g)?;
        if desc.bg_free_inodes_count == 0 {
            return Ok(None);
        }
        let (ipg, first_ino) = {
            let sb = self.sb.lock();
            (sb.s_inodes_per_group, sb.first_ino())
        };
        let buf = self.cache.get(desc.inode_bitmap())?;
        // Reserved inodes are never handed out, even if their bits are clear.
        let from = if g.0 == 0 {
            first_ino.saturating_sub(1)
        } else {
            0
        };
        let Some(bit) = find_zero(&buf.read(), from, ipg) else {
            return Ok(None);
        };
        set_bit(&mut h.modify(&buf)?, bit);
        self.update_group_desc(h, g, |d| {
            d.bg_free_inodes_count = d.bg_free_inodes_count.saturating_sub(1);
            if is_dir {
                d.bg_used_dirs_count = d.bg_used_dirs_count.saturating_add(1);
            }
        })?;
        self.free_inodes.fetch_sub(1, Ordering::Relaxed);
        Ok(Some(InodeNo(g.0 * ipg + bit + 1)))
    }

    /// Returns inode `ino` to its group.
    pub(crate) fn free_inode(&self, h: &mut Handle<'_>, ino: InodeNo, is_dir: bool) -> Result<()> {
        let (g, bit) = self.sb.lock().inode_group(ino.0);
        let _lock = self.group_locks[g.0 as usize].lock();
        let desc = self.group_desc(g)?;
        let buf = self.cache.get(desc.inode_bitmap())?;
        let was_set = {
            let mut map = h.modify(&buf)?;
            let was = test_bit(&map, bit);
            clear_bit(&mut map, bit);
            was
        };
        if !was_set {
            tracing::error!(inode = ino.0, "freeing an inode that is already free");
            return Ok(());
        }
        self.update_group_desc(h, g, |d| {
            d.bg_free_inodes_count = d.bg_free_inodes_count.saturating_add(1);
            if is_dir {
                d.bg_used_dirs_count = d.bg_used_dirs_count.saturating_sub(1);
            }
        })?;
        self.free_inodes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Groups for a file: the parent's, then a quadratic probe (the parent's
/// plus 1, 3, 7 and so on), then all of them from the parent's on. Lazy:
/// nearly every create stops at the parent's group, and a large
/// filesystem has thousands of groups.
fn file_group_order(parent: GroupNo, groups: u32) -> impl Iterator<Item = GroupNo> {
    let n = groups as u64;
    let at = move |off: u64| GroupNo(((parent.0 as u64 + off) % n) as u32);
    let probe = (0..32)
        .map(|k| 1u64 << k)
        .take_while(move |&step| step < n)
        .map(move |step| at(2 * step - 1));
    std::iter::once(parent).chain(probe).chain((1..n).map(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_looks_in_its_parents_group_then_probes_then_tries_all() {
        let order: Vec<u32> = file_group_order(GroupNo(5), 16).map(|g| g.0).collect();
        let mut want = vec![5, 6, 8, 12, 4];
        want.extend((1..16).map(|i| (5 + i) % 16));
        assert_eq!(order, want);
        let one: Vec<u32> = file_group_order(GroupNo(0), 1).map(|g| g.0).collect();
        assert_eq!(one, vec![0]);
    }
}
