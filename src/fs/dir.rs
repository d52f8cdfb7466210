//! Directories (Linux: fs/ext3/dir.c and the linear half of namei.c):
//! lookup, insertion, removal and listing of entries in a directory's
//! blocks, with an in-memory name index per directory so that lookups and
//! creates in a directory of 100,000 entries cost the same as in one of ten.
//!
//! Indexed (htree) directories are read linearly here (their index blocks
//! look like empty entry blocks); names are added to them through the
//! index (htree.rs), and a directory that outgrows its first block is
//! indexed, when the filesystem has `dir_index`. Without it, the first
//! change to a directory still flagged indexed clears `EXT2_INDEX_FL`.

use std::collections::HashMap;
use std::sync::Arc;

use super::bmap::NewBlocks;
use super::inode::InodeState;
use super::{Filesystem, FsError, Result};
use crate::cache::Buffer;
use crate::format::dirent::{self, Insert};
use crate::format::inode::flags::EXT2_INDEX_FL;
use crate::format::{Corruption, InodeNo, Location};
use crate::journal::Handle;

/// A name's place in its directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirSlot {
    pub ino: InodeNo,
    pub file_type: u8,
    pub block: u32,
}

/// The in-memory index of one directory: names, and the room left in each
/// block, kept in step with every change made through jbdfs.
#[derive(Debug, Default)]
pub struct DirIndex {
    names: HashMap<Vec<u8>, DirSlot>,
    /// The longest entry each block can still take (up to a whole 64 KiB
    /// block, hence not a u16).
    room: Vec<u32>,
    /// A block likely to have room: where the last insert went.
    hint: usize,
}

impl DirIndex {
    pub fn get(&self, name: &[u8]) -> Option<DirSlot> {
        self.names.get(name).copied()
    }

    /// Forgets the room of blocks from `len` on (an undone growth).
    pub(crate) fn truncate_room(&mut self, len: usize) {
        self.room.truncate(len);
    }
}

/// The longest new entry that fits in `block`.
pub(crate) fn block_room(block: &[u8]) -> u32 {
    dirent::block_room(block) as u32
}

impl Filesystem {
    fn dir_block_count(&self, st: &InodeState) -> u32 {
        (st.disk.i_size / self.block_size as u64) as u32
    }

    /// The buffer of directory block `idx`.
    pub(crate) fn dir_block(&self, ino: InodeNo, st: &InodeState, idx: u32) -> Result<Arc<Buffer>> {
        let m = self.map_blocks(ino, st, idx, 1)?;
        match m.physical {
            Some(b) => Ok(self.cache.get(b)?),
            None => Err(FsError::corrupt(
                Location::Inode(ino),
                "directory",
                "logical block",
                idx,
                "a hole inside the directory's size",
            )),
        }
    }

    fn corrupt_dir(&self, ino: InodeNo, e: dirent::DirentError) -> FsError {
        Corruption::new(Location::Inode(ino), e.error).into()
    }

    /// Builds the directory's name index on first use.
    fn ensure_index<'a>(&self, ino: InodeNo, st: &'a mut InodeState) -> Result<&'a mut DirIndex> {
        let idx = match st.dir_index.take() {
            Some(idx) => idx,
            None => {
                let mut idx = DirIndex::default();
                for b in 0..self.dir_block_count(st) {
                    let buf = self.dir_block(ino, st, b)?;
                    let data = buf.read();
                    for e in dirent::iter_block(&data, None) {
                        let e = e.map_err(|e| self.corrupt_dir(ino, e))?;
                        if e.inode.0 != 0 {
                            let slot = DirSlot {
                                ino: e.inode,
                                file_type: e.file_type,
                                block: b,
                            };
                            idx.names.insert(e.name.to_vec(), slot);
                        }
                    }
                    idx.room.push(block_room(&data));
                }
                idx
            }
        };
        Ok(st.dir_index.insert(idx))
    }

    /// Looks `name` up in the directory `dir` (whose state the caller holds).
    pub(crate) fn dir_lookup(
        &self,
        dir: InodeNo,
        st: &mut InodeState,
        name: &[u8],
    ) -> Result<Option<DirSlot>> {
        if !st.disk.is_dir() {
            return Err(FsError::NotDir);
        }
        Ok(self.ensure_index(dir, st)?.names.get(name).copied())
    }

    /// Clears the htree flag where the filesystem has no `dir_index` (or
    /// the index is unusable), so a stale index is never trusted.
    fn drop_htree(&self, st: &mut InodeState) {
        if st.disk.i_flags & EXT2_INDEX_FL != 0 && !self.has_dir_index() {
            st.disk.i_flags &= !EXT2_INDEX_FL;
        }
    }

    /// Records in the name index that block `block` now has `room`, and
    /// that `names` live in it.
    pub(crate) fn dir_index_note(
        &self,
        st: &mut InodeState,
        block: u32,
        room: u32,
        names: &[(&[u8], InodeNo, u8)],
    ) {
        let Some(idx) = st.dir_index.as_mut() else {
            return;
        };
        if let Some(r) = idx.room.get_mut(block as usize) {
            *r = room;
        }
        for &(name, ino, file_type) in names {
            let slot = DirSlot {
                ino,
                file_type,
                block,
            };
            idx.names.insert(name.to_vec(), slot);
        }
    }

    /// Adds `name -> ino` to `dir`, growing the directory by a block when
    /// no block has room. The caller writes the directory's inode. A
    /// failure leaves the directory as it was: its flags, size, blocks and
    /// name index.
    pub(crate) fn dir_add(
        &self,
        h: &mut Handle<'_>,
        dir: InodeNo,
        st: &mut InodeState,
        name: &[u8],
        ino: InodeNo,
        file_type: u8,
    ) -> Result<()> {
        if name.len() > dirent::EXT2_NAME_LEN {
            return Err(FsError::NameTooLong);
        }
        let need = dirent::rec_len_for(name.len()) as u32;
        if self.ensure_index(dir, st)?.names.contains_key(name) {
            return Err(FsError::Exists);
        }
        if st.disk.i_flags & EXT2_INDEX_FL != 0 && self.has_dir_index() {
            if self.dx_add(h, dir, st, name, ino, file_type)? {
                return Ok(());
            }
            // ext3's dx_fallback: the index is unusable, read and grow
            // the directory linearly from now on.
            st.disk.i_flags &= !EXT2_INDEX_FL;
        }
        let idx = self.ensure_index(dir, st)?;
        let candidate = (idx.hint..idx.room.len())
            .chain(0..idx.hint)
            .find(|&b| idx.room[b] >= need);
        let (block, grown) = match candidate {
            Some(b) => (b as u32, None),
            None if idx.room.len() == 1
                && st.disk.i_flags & EXT2_INDEX_FL == 0
                && self.has_dir_index()
                && self.make_indexed_dir(h, dir, st)? =>
            {
                return match self.dx_add(h, dir, st, name, ino, file_type)? {
                    true => Ok(()),
                    false => Err(FsError::corrupt(
                        Location::Inode(dir),
                        "directory",
                        "logical block",
                        0u32,
                        "the index just made is unusable",
                    )),
                };
            }
            None => {
                let saved = (st.disk.clone(), st.last_alloc);
                let (b, new) = self.dir_grow(h, dir, st)?;
                (b, Some((saved, new)))
            }
        };
        let res = self.dir_insert(h, dir, st, block, name, ino, file_type);
        if let (Err(_), Some(((disk, last_alloc), new))) = (&res, grown) {
            // Only I/O or a miscounted block gets here: the new block was
            // allocated and is to be given back with the size it added.
            if let Err(e) = self.unmap_new(h, dir, st, &new) {
                tracing::error!(inode = dir.0, "undoing a directory's growth: {e}");
            }
            st.disk = disk;
            st.last_alloc = last_alloc;
            if let Some(index) = st.dir_index.as_mut() {
                index.room.truncate(block as usize);
            }
        }
        res
    }

    /// Puts the entry into directory block `block`, which has room for it.
    #[allow(clippy::too_many_arguments)]
    fn dir_insert(
        &self,
        h: &mut Handle<'_>,
        dir: InodeNo,
        st: &mut InodeState,
        block: u32,
        name: &[u8],
        ino: InodeNo,
        file_type: u8,
    ) -> Result<()> {
        let buf = self.dir_block(dir, st, block)?;
        let (res, room) = {
            let mut data = h.modify(&buf)?;
            dirent::insert_entry_room(&mut data, ino, name, file_type)
                .map_err(|e| self.corrupt_dir(dir, e))?
        };
        let room = room as u32;
        entry_inserted(dir, block, res)?;
        // Only now that the entry is in: a failure before it must not
        // cost an htree directory its index flag.
        self.drop_htree(st);
        let idx = self.ensure_index(dir, st)?;
        idx.room[block as usize] = room;
        idx.hint = block as usize;
        idx.names.insert(
            name.to_vec(),
            DirSlot {
                ino,
                file_type,
                block,
            },
        );
        Ok(())
    }

    /// Appends an empty block to a directory and returns its index, and
    /// what was allocated for it (for an undo). On failure nothing is
    /// allocated and the directory is as it was.
    pub(crate) fn dir_grow(
        &self,
        h: &mut Handle<'_>,
        dir: InodeNo,
        st: &mut InodeState,
    ) -> Result<(u32, NewBlocks)> {
        let idx = self.dir_block_count(st);
        let saved = (st.disk.clone(), st.last_alloc);
        let mut new = NewBlocks::default();
        let m = self.get_blocks_noting(h, dir, st, idx, 1, true, &mut new)?;
        let res = self.init_grown_block(h, dir, m.physical);
        if let Err(e) = res {
            if let Err(u) = self.unmap_new(h, dir, st, &new) {
                tracing::error!(inode = dir.0, "undoing a directory's growth: {u}");
            }
            (st.disk, st.last_alloc) = saved;
            return Err(e);
        }
        st.disk.i_size += self.block_size as u64;
        if let Some(index) = st.dir_index.as_mut() {
            index.room.push(self.block_size);
        }
        Ok((idx, new))
    }

    /// Fills a directory's new block with one empty entry.
    fn init_grown_block(
        &self,
        h: &mut Handle<'_>,
        dir: InodeNo,
        b: Option<crate::format::BlockNo>,
    ) -> Result<()> {
        let b = b.ok_or(FsError::NoSpace)?;
        let buf = self.cache.get_new(b)?;
        let empty = dirent::init_block(self.block_size as usize)
            .map_err(|e| Corruption::new(Location::Inode(dir), e))?;
        h.modify(&buf)?.copy_from_slice(&empty);
        Ok(())
    }

    /// The slot of `name` and its block: the first step of every change
    /// to an existing entry.
    fn entry_block_for_change(
        &self,
        dir: InodeNo,
        st: &mut InodeState,
        name: &[u8],
    ) -> Result<(DirSlot, Arc<Buffer>)> {
        let slot = self
            .ensure_index(dir, st)?
            .names
            .get(name)
            .copied()
            .ok_or(FsError::NotFound)?;
        let buf = self.dir_block(dir, st, slot.block)?;
        Ok((slot, buf))
    }

    /// Removes `name` from `dir`; returns what it pointed to.
    pub(crate) fn dir_remove(
        &self,
        h: &mut Handle<'_>,
        dir: InodeNo,
        st: &mut InodeState,
        name: &[u8],
    ) -> Result<DirSlot> {
        let (slot, buf) = self.entry_block_for_change(dir, st, name)?;
        let (res, room) = {
            let mut data = h.modify(&buf)?;
            self.drop_htree(st);
            let r = dirent::remove_entry(&mut data, name);
            (r, block_room(&data))
        };
        res.map_err(|e| self.corrupt_dir(dir, e))?;
        let idx = self.ensure_index(dir, st)?;
        idx.names.remove(name);
        idx.room[slot.block as usize] = room;
        Ok(slot)
    }

    /// Points an existing entry at another inode (rename over a target).
    pub(crate) fn dir_retarget(
        &self,
        h: &mut Handle<'_>,
        dir: InodeNo,
        st: &mut InodeState,
        name: &[u8],
        ino: InodeNo,
        file_type: u8,
    ) -> Result<()> {
        let (slot, buf) = self.entry_block_for_change(dir, st, name)?;
        {
            let mut data = h.modify(&buf)?;
            self.drop_htree(st);
            let off = dirent::find_entry(&data, name)
                .map_err(|e| self.corrupt_dir(dir, e))?
                .map(|e| e.offset)
                .ok_or(FsError::NotFound)?;
            dirent::set_inode_at(&mut data, off, ino.0);
            dirent::set_file_type_at(&mut data, off, file_type);
        }
        let idx = self.ensure_index(dir, st)?;
        idx.names.insert(
            name.to_vec(),
            DirSlot {
                ino,
                file_type,
                block: slot.block,
            },
        );
        Ok(())
    }

    /// Whether a directory holds nothing but "." and "..".
    pub(crate) fn dir_is_empty(&self, dir: InodeNo, st: &mut InodeState) -> Result<bool> {
        let idx = self.ensure_index(dir, st)?;
        Ok(idx.names.keys().all(|n| n == b"." || n == b".."))
    }
}

/// What an insert into a block whose room was counted first must have done:
/// put the entry in. Exists is the caller's EEXIST; no space means the count
/// was wrong, which only a corrupt block explains.
pub(super) fn entry_inserted(dir: InodeNo, block: u32, res: Insert) -> Result<()> {
    match res {
        Insert::Inserted(_) => Ok(()),
        Insert::Exists(_) => Err(FsError::Exists),
        Insert::NoSpace => Err(FsError::corrupt(
            Location::Inode(dir),
            "directory",
            "logical block",
            block,
            "its free room was miscounted: the entry did not fit",
        )),
    }
}
