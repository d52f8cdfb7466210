//! The orphan list (Linux: ext3_orphan_add/del and ext3_orphan_cleanup):
//! inodes with no links that are still open. On disk they form a chain from
//! `s_last_orphan` through each inode's `i_dtime`, so that a crash frees
//! them at the next mount; in memory the chain is a list, oldest first.

use std::sync::Arc;

use super::inode::{InodeRef, InodeState};
use super::{Filesystem, Result};
use crate::format::InodeNo;
use crate::journal::Handle;

const ORPHAN_CREDITS: u32 = 8;

/// The orphan after `ino` in the chain (older; 0 at its end), if `ino` is
/// on it: what its `i_dtime` must say on disk.
pub(crate) fn next_in(list: &[InodeNo], ino: InodeNo) -> Option<u32> {
    let pos = list.iter().position(|&i| i == ino)?;
    Some(if pos == 0 { 0 } else { list[pos - 1].0 })
}

impl Filesystem {
    /// Puts `ino` (whose lock the caller holds) at the head of the chain.
    pub(crate) fn orphan_add(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        st: &mut InodeState,
    ) -> Result<()> {
        {
            let mut list = self.orphans.lock();
            if list.contains(&ino) {
                return Ok(());
            }
            st.disk.i_dtime = list.last().map_or(0, |i| i.0);
            list.push(ino);
            self.sb.lock().s_last_orphan = ino.0;
        }
        self.write_superblock(h)
    }

    /// Takes `ino` out of the chain. The orphan that pointed at it (the
    /// next newer one) gets its on-disk `i_dtime` patched in place, without
    /// taking its inode lock (no inode lock may be taken inside a handle).
    /// The patch is made with the list locked, as `write_inode` writes an
    /// orphan's slot, so the two never undo each other's link: the buffer
    /// joins the handle first, and the pointer is looked up again under the
    /// lock in case the chain changed meanwhile.
    pub(crate) fn orphan_del(&self, h: &mut Handle<'_>, ino: InodeNo) -> Result<()> {
        loop {
            let pointer = {
                let list = self.orphans.lock();
                let Some(pos) = list.iter().position(|&i| i == ino) else {
                    return Ok(());
                };
                list.get(pos + 1).copied()
            };
            let Some(p) = pointer else {
                return self.orphan_del_newest(h, ino);
            };
            let (block, off) = self.inode_location(p)?;
            let buf = self.cache.get(block)?;
            let access = h.get_write_access(&buf)?;
            let mut list = self.orphans.lock();
            let Some(pos) = list.iter().position(|&i| i == ino) else {
                return Ok(());
            };
            if list.get(pos + 1) != Some(&p) {
                continue;
            }
            let next = next_in(&list, ino).unwrap_or(0);
            list.remove(pos);
            crate::format::inode::raw::set_i_dtime(&mut access.write()[off..], next);
            return Ok(());
        }
    }

    /// Takes `ino` out of the chain if it is still its newest orphan, which
    /// the superblock points at; otherwise goes back to [`orphan_del`].
    fn orphan_del_newest(&self, h: &mut Handle<'_>, ino: InodeNo) -> Result<()> {
        {
            let mut list = self.orphans.lock();
            let Some(pos) = list.iter().position(|&i| i == ino) else {
                return Ok(());
            };
            if pos + 1 != list.len() {
                drop(list);
                return self.orphan_del(h, ino);
            }
            let next = next_in(&list, ino).unwrap_or(0);
            list.remove(pos);
            self.sb.lock().s_last_orphan = next;
        }
        self.write_superblock(h)
    }

    /// Frees an inode with no links once nothing holds it open and the
    /// kernel has forgotten it: FUSE must never see an inode number reused
    /// while it still knows the old inode (it would mark that one bad, and
    /// every request still using it would fail with EIO).
    pub(crate) fn release_inode_if_unused(&self, inode: &Arc<InodeRef>) -> Result<()> {
        let mut st = inode.state.write();
        let busy = st.open_count != 0 || st.nlookup != 0;
        if st.disk.i_links_count != 0 || busy || st.disk.i_mode == 0 || st.freed {
            return Ok(());
        }
        let mut h = self.journal.start(ORPHAN_CREDITS)?;
        let res = self.delete_inode(&mut h, inode.ino, &mut st);
        let stop = h.stop();
        res?;
        stop?;
        drop(st);
        self.inodes.evict(inode.ino);
        Ok(())
    }

    /// ext3_delete_inode: free the blocks and the inode, leave `i_dtime`.
    fn delete_inode(&self, h: &mut Handle<'_>, ino: InodeNo, st: &mut InodeState) -> Result<()> {
        self.orphan_del(h, ino)?;
        let is_dir = st.disk.is_dir();
        // Only a block map is freed (ext3_can_truncate): a fast symlink's
        // target, a device number or a fifo's or socket's garbage in
        // i_block names no blocks of this inode.
        if st.disk.has_block_map(self.block_size) {
            self.free_blocks_from(h, ino, st, 0)?;
        }
        if st.disk.i_file_acl != 0 {
            self.xattr_release_block(h, ino, st)?;
        }
        st.disk.i_size = 0;
        st.disk.i_dtime = crate::util::now().0 as u32;
        self.write_inode(h, ino, &st.disk)?;
        st.freed = true;
        self.free_inode(h, ino, is_dir)
    }

    /// open(2) holds the inode alive past its last unlink.
    pub fn open(&self, ino: InodeNo) -> Result<()> {
        let inode = self.iget(ino)?;
        inode.state.write().open_count += 1;
        Ok(())
    }

    /// The last close of an unlinked file frees it.
    pub fn release(&self, ino: InodeNo) -> Result<()> {
        let inode = self.iget(ino)?;
        {
            let mut st = inode.state.write();
            st.open_count = st.open_count.saturating_sub(1);
        }
        self.release_inode_if_unused(&inode)
    }

    /// The kernel forgets `n` lookups of `ino`; an unlinked inode it no
    /// longer knows is freed.
    pub fn forget(&self, ino: InodeNo, n: u64) {
        let Some(inode) = self.inodes.get(ino) else {
            return;
        };
        {
            let mut st = inode.state.write();
            st.nlookup = st.nlookup.saturating_sub(n);
        }
        if let Err(e) = self.release_inode_if_unused(&inode) {
            tracing::error!(inode = ino.0, "freeing a forgotten inode failed: {e}");
        }
        drop(inode);
        self.inodes.evict(ino);
    }

    /// At unmount the kernel's references are gone: free every inode that
    /// is unlinked and was only kept for it.
    pub(crate) fn release_all_orphans(&self) -> Result<()> {
        let orphans: Vec<InodeNo> = self.orphans.lock().clone();
        for ino in orphans {
            let inode = self.iget(ino)?;
            {
                let mut st = inode.state.write();
                st.nlookup = 0;
                st.open_count = 0;
            }
            self.release_inode_if_unused(&inode)?;
        }
        Ok(())
    }

    /// Counts a lookup the kernel now holds.
    pub fn remember(&self, ino: InodeNo) {
        if let Ok(inode) = self.iget(ino) {
            inode.state.write().nlookup += 1;
        }
    }

    /// Frees what a crash left on the orphan chain, at mount.
    pub(crate) fn orphan_cleanup(&self) -> Result<usize> {
        let (mut next, limit, first_ino) = {
            let sb = self.sb.lock();
            (sb.s_last_orphan, sb.s_inodes_count, sb.first_ino())
        };
        let mut chain = Vec::new();
        let mut seen = std::collections::HashSet::new();
        while next != 0 && chain.len() < limit as usize {
            // As ext3_orphan_get: reserved inodes (the root, the journal)
            // are never orphans, and a chain must not loop.
            if next > limit || next < first_ino || !seen.insert(next) {
                tracing::error!(inode = next, "orphan chain is corrupt; stopping cleanup");
                break;
            }
            chain.push(InodeNo(next));
            next = self.iget(InodeNo(next))?.state.read().disk.i_dtime;
        }
        let count = chain.len();
        // Oldest first in memory, as orphan_add builds it.
        chain.reverse();
        *self.orphans.lock() = chain.clone();
        for ino in chain.into_iter().rev() {
            let inode = self.iget(ino)?;
            if inode.state.read().disk.i_links_count == 0 {
                self.release_inode_if_unused(&inode)?;
            } else {
                self.orphan_truncate(&inode)?;
            }
        }
        Ok(count)
    }

    /// An orphan that still has links was mid-truncate: finish it.
    fn orphan_truncate(&self, inode: &Arc<InodeRef>) -> Result<()> {
        let mut st = inode.state.write();
        let mut h = self.journal.start(ORPHAN_CREDITS)?;
        let size = st.disk.i_size;
        let bs = self.block_size as u64;
        // As ext3_truncate, which ext3_can_truncate stops for inodes
        // without a block map.
        let res = if st.disk.has_block_map(self.block_size) {
            self.free_blocks_from(&mut h, inode.ino, &mut st, size.div_ceil(bs))
        } else {
            Ok(())
        };
        let res = res
            .and_then(|()| self.orphan_del(&mut h, inode.ino))
            .and_then(|()| {
                st.disk.i_dtime = 0;
                self.write_inode(&mut h, inode.ino, &st.disk)
            });
        let stop = h.stop();
        res?;
        stop?;
        Ok(())
    }
}
