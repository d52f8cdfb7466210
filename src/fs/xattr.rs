//! Extended attributes (Linux: fs/ext3/xattr.c). Attributes live in the
//! inode's spare bytes when they fit, the rest in one external block. A
//! block is shared by every inode with identical attributes and refcounted
//! in its header, as ext3 does through its mbcache: here an in-memory index
//! from block hash to blocks plays that part.

use std::collections::HashMap;

use parking_lot::Mutex;

use super::inode::InodeState;
use super::{Filesystem, FsError, Result};
use crate::format::acl::AclType;
use crate::format::inode::Inode;
use crate::format::xattr::{self as fx, Xattr};
use crate::format::{BlockNo, Corruption, InodeNo, Location};
use crate::journal::Handle;

/// ext3's EXT3_XATTR_REFCOUNT_MAX: a block shared by this many inodes is
/// not shared further.
const REFCOUNT_MAX: u32 = 1024;
/// Journal credits for an xattr change: the inode, the old and the new
/// xattr block, and a bitmap, a descriptor and the superblock for each of
/// an allocation and a free.
pub(super) const XATTR_CREDITS: u32 = 16;

/// setxattr's XATTR_CREATE and XATTR_REPLACE.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SetMode {
    #[default]
    Either,
    Create,
    Replace,
}

/// Known shareable xattr blocks by hash (the mbcache's job).
#[derive(Default)]
pub struct XattrShare {
    blocks: Mutex<HashMap<u32, Vec<BlockNo>>>,
}

impl Filesystem {
    fn corrupt_xattr(&self, ino: InodeNo, e: crate::format::FormatError) -> FsError {
        Corruption::new(Location::Inode(ino), e).into()
    }

    /// The inode's attributes: (in the inode, in its block).
    pub(super) fn xattr_lists(
        &self,
        ino: InodeNo,
        st: &InodeState,
    ) -> Result<(Vec<Xattr>, Vec<Xattr>)> {
        let ibody =
            fx::parse_ibody(st.disk.xattr_area()).map_err(|e| self.corrupt_xattr(ino, e))?;
        let block = match st.disk.i_file_acl {
            0 => Vec::new(),
            b => {
                let b = self.check_block_ptr(ino, b)?;
                let buf = self.cache.get(b)?;
                let data = buf.read();
                fx::parse_block(&data)
                    .map_err(|e| Corruption::new(Location::Block(b), e))?
                    .entries
            }
        };
        Ok((ibody, block))
    }

    pub fn getxattr(&self, ino: InodeNo, name: &[u8]) -> Result<Vec<u8>> {
        if let Some(kind) = AclType::of_name(name) {
            return self.get_acl(ino, kind);
        }
        let key = Xattr::from_full_name(name, Vec::new()).map_err(|_| FsError::NotSupported)?;
        let inode = self.iget(ino)?;
        let st = inode.state.read();
        let (a, b) = self.xattr_lists(ino, &st)?;
        a.into_iter()
            .chain(b)
            .find(|x| x.name_index == key.name_index && x.name == key.name)
            .map(|x| x.value)
            .ok_or(FsError::NoData)
    }

    /// Full names, each followed by a NUL, as listxattr returns them.
    pub fn listxattr(&self, ino: InodeNo) -> Result<Vec<u8>> {
        let inode = self.iget(ino)?;
        let st = inode.state.read();
        let (a, b) = self.xattr_lists(ino, &st)?;
        let mut out = Vec::new();
        for x in a.into_iter().chain(b) {
            if !self.posix_acl && fx::is_acl(x.name_index) {
                continue;
            }
            if let Some(n) = x.full_name() {
                out.extend_from_slice(&n);
                out.push(0);
            }
        }
        Ok(out)
    }

    pub fn setxattr(&self, ino: InodeNo, name: &[u8], value: &[u8], mode: SetMode) -> Result<()> {
        if name.len() > 255 {
            return Err(FsError::Range);
        }
        if let Some(kind) = AclType::of_name(name) {
            return self.set_acl(ino, kind, Some(value), mode, &|_| true);
        }
        let new = Xattr::from_full_name(name, value.to_vec()).map_err(|_| FsError::NotSupported)?;
        self.change_xattrs(ino, |list, _| {
            let pos = list
                .iter()
                .position(|x| x.name_index == new.name_index && x.name == new.name);
            match (pos, mode) {
                (Some(_), SetMode::Create) => return Err(FsError::Exists),
                (None, SetMode::Replace) => return Err(FsError::NoData),
                (Some(i), _) => list[i] = new.clone(),
                (None, _) => list.push(new.clone()),
            }
            Ok(())
        })
    }

    pub fn removexattr(&self, ino: InodeNo, name: &[u8]) -> Result<()> {
        if let Some(kind) = AclType::of_name(name) {
            return self.set_acl(ino, kind, None, SetMode::Either, &|_| true);
        }
        let key = Xattr::from_full_name(name, Vec::new()).map_err(|_| FsError::NotSupported)?;
        self.change_xattrs(ino, |list, _| {
            let before = list.len();
            list.retain(|x| !(x.name_index == key.name_index && x.name == key.name));
            if list.len() == before {
                Err(FsError::NoData)
            } else {
                Ok(())
            }
        })
    }

    /// Applies `edit` to the inode's attributes (and, for ACLs, to the
    /// inode itself: its mode). Whether they fit is decided before
    /// anything changes, and the inode is changed on a copy kept only on
    /// success: a set that fails (ENOSPC) leaves the inode, its block and
    /// the share index as they were.
    pub(super) fn change_xattrs(
        &self,
        ino: InodeNo,
        edit: impl FnOnce(&mut Vec<Xattr>, &mut Inode) -> Result<()>,
    ) -> Result<()> {
        if self.is_read_only() {
            return Err(FsError::ReadOnly);
        }
        let inode = self.iget(ino)?;
        let mut st = inode.state.write();
        super::flags::may_change_xattrs(&st.disk)?;
        let mut h = self.journal.start(XATTR_CREDITS)?;
        let res = self
            .apply_xattrs(&mut h, ino, &mut st, edit)
            .and_then(|()| {
                st.disk.i_ctime = super::now();
                self.write_inode(&mut h, ino, &st.disk)
            });
        let stopped = h.stop();
        res?;
        stopped?;
        Ok(())
    }

    /// [`Self::change_xattrs`] inside the caller's handle, with the
    /// inode's lock held: `st.disk` takes the new in-inode area, block
    /// pointer (and whatever `edit` changed) only on success, and the
    /// caller writes the inode.
    pub(super) fn apply_xattrs(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        st: &mut InodeState,
        edit: impl FnOnce(&mut Vec<Xattr>, &mut Inode) -> Result<()>,
    ) -> Result<()> {
        let (a, b) = self.xattr_lists(ino, st)?;
        let mut list: Vec<Xattr> = a.into_iter().chain(b).collect();
        let mut disk = st.disk.clone();
        edit(&mut list, &mut disk)?;
        let (ibody, block) = self.layout_xattrs(&disk, list)?;
        disk.set_xattr_area(&ibody);
        // The block's changes are in the handle once this succeeds: the
        // inode must follow them even if its write fails.
        self.store_block(h, ino, &mut disk, block.as_deref())?;
        st.disk = disk;
        Ok(())
    }

    /// Places `list` in the inode (smallest first) and the rest in a block:
    /// the new in-inode area and block contents (`None`: no block), or
    /// ENOSPC when the rest does not fit in a block.
    fn layout_xattrs(
        &self,
        disk: &Inode,
        mut list: Vec<Xattr>,
    ) -> Result<(Vec<u8>, Option<Vec<u8>>)> {
        list.sort_by_key(|x| fx::entry_len(x.name.len()) + fx::value_len(x.value.len()));
        let area_len = disk.xattr_area().len();
        let mut split = list.len();
        let ibody = loop {
            match fx::build_ibody(area_len, &list[..split])
                .map_err(|_| FsError::Invalid("bad xattr"))?
            {
                Some(area) => break area,
                None if split > 0 => split -= 1,
                None => break vec![0; area_len],
            }
        };
        let rest = list.split_off(split);
        if rest.is_empty() {
            return Ok((ibody, None));
        }
        let block = fx::build_block(self.block_size as usize, 1, &rest)
            .map_err(|_| FsError::Invalid("bad xattr"))?
            .ok_or(FsError::NoSpace)?;
        Ok((ibody, Some(block)))
    }

    /// Points `disk` at a block holding exactly `want` (a block image with
    /// refcount 1), or at none. The block is rewritten in place when the
    /// inode is its only user, else another block with the same contents
    /// is shared or a new one written; the old block is let go only after
    /// that, so a failed allocation changes nothing.
    fn store_block(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        disk: &mut Inode,
        want: Option<&[u8]>,
    ) -> Result<()> {
        let mut share = self.xattr_share.blocks.lock();
        // xattr_lists has read and checked it.
        let old = match disk.i_file_acl {
            0 => None,
            b => Some(self.check_block_ptr(ino, b)?),
        };
        let Some(want) = want else {
            if old.is_some() {
                self.xattr_release_block_locked(h, ino, disk, &mut share)?;
            }
            return Ok(());
        };
        let hash = fx::h_hash(want).map_err(|e| Corruption::new(Location::Inode(ino), e))?;
        let sectors = (self.block_size / 512) as u64;
        let mut sole_user = None;
        if let Some(b) = old {
            let buf = self.cache.get(b)?;
            let (same, refs) = {
                let d = buf.read();
                let refs =
                    fx::h_refcount(&d).map_err(|e| Corruption::new(Location::Block(b), e))?;
                (fx::same_but_refcount(&d, want), refs)
            };
            if same {
                return Ok(());
            }
            if refs == 1 {
                sole_user = Some(buf);
            }
        }
        if let Some(b) = self.find_shared(h, hash, want, &share)? {
            if old.is_some() {
                self.xattr_release_block_locked(h, ino, disk, &mut share)?;
            }
            disk.i_file_acl = b.0;
            disk.i_blocks += sectors;
            return Ok(());
        }
        if let Some(buf) = sole_user {
            h.modify(&buf)?.copy_from_slice(want);
            // Known now under its new contents' hash only.
            let b = buf.block();
            for blocks in share.values_mut() {
                blocks.retain(|&x| x != b);
            }
            share.entry(hash).or_default().push(b);
            return Ok(());
        }
        let goal = {
            let sb = self.sb.lock();
            sb.group_first_block(sb.inode_group(ino.0).0)
        };
        let (b, _) = self.alloc_blocks(h, goal, 1, true)?;
        if let Err(e) = self.write_new_xattr_block(h, b, want) {
            if let Err(u) = self.free_blocks(h, b, 1) {
                tracing::error!(inode = ino.0, "undoing a new xattr block: {u}");
            }
            return Err(e);
        }
        share.entry(hash).or_default().push(b);
        if old.is_some() {
            self.xattr_release_block_locked(h, ino, disk, &mut share)?;
        }
        disk.i_file_acl = b.0;
        disk.i_blocks += sectors;
        Ok(())
    }

    fn write_new_xattr_block(&self, h: &mut Handle<'_>, b: BlockNo, block: &[u8]) -> Result<()> {
        let buf = self.cache.get_new(b)?;
        h.modify(&buf)?.copy_from_slice(block);
        Ok(())
    }

    /// A known block with the same attributes, its refcount raised.
    fn find_shared(
        &self,
        h: &mut Handle<'_>,
        hash: u32,
        want: &[u8],
        share: &HashMap<u32, Vec<BlockNo>>,
    ) -> Result<Option<BlockNo>> {
        let Some(cands) = share.get(&hash) else {
            return Ok(None);
        };
        for &b in cands {
            let buf = self.cache.get(b)?;
            let refs = {
                let d = buf.read();
                let refs =
                    fx::h_refcount(&d).map_err(|e| Corruption::new(Location::Block(b), e))?;
                // Same content apart from the refcount field.
                let same = fx::same_but_refcount(&d, want);
                if !same || refs == 0 || refs >= REFCOUNT_MAX {
                    continue;
                }
                refs
            };
            fx::set_h_refcount(&mut h.modify(&buf)?, refs + 1)
                .map_err(|e| Corruption::new(Location::Block(b), e))?;
            return Ok(Some(b));
        }
        Ok(None)
    }

    /// Drops `st`'s reference to its attribute block, freeing the block
    /// when it was the last one.
    pub(crate) fn xattr_release_block(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        st: &mut InodeState,
    ) -> Result<()> {
        let mut share = self.xattr_share.blocks.lock();
        self.xattr_release_block_locked(h, ino, &mut st.disk, &mut share)
    }

    fn xattr_release_block_locked(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        disk: &mut Inode,
        share: &mut HashMap<u32, Vec<BlockNo>>,
    ) -> Result<()> {
        let block = disk.i_file_acl;
        disk.i_file_acl = 0;
        let b = match self.check_block_ptr(ino, block) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(
                    inode = ino.0,
                    block,
                    "ignoring a corrupt xattr block pointer: {e}"
                );
                return Ok(());
            }
        };
        let sectors = (self.block_size / 512) as u64;
        disk.i_blocks = disk.i_blocks.saturating_sub(sectors);
        let buf = self.cache.get(b)?;
        let (magic, refs) = {
            let d = buf.read();
            let at = |e| Corruption::new(Location::Block(b), e);
            (
                fx::h_magic(&d).map_err(at)?,
                fx::h_refcount(&d).map_err(at)?,
            )
        };
        if magic != fx::EXT2_XATTR_MAGIC {
            tracing::error!(
                inode = ino.0,
                block,
                "xattr block has a bad magic; not freeing it"
            );
            return Ok(());
        }
        if refs <= 1 {
            drop(buf);
            for blocks in share.values_mut() {
                blocks.retain(|&x| x != b);
            }
            return self.free_blocks(h, b, 1);
        }
        fx::set_h_refcount(&mut h.modify(&buf)?, refs - 1)
            .map_err(|e| Corruption::new(Location::Block(b), e))?;
        Ok(())
    }
}
