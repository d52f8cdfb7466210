//! Indexed (htree) directories on write (Linux: the dx half of
//! fs/ext3/namei.c): indexing a directory that outgrows its first block
//! (make_indexed_dir), adding names through the index (dx_probe,
//! ext3_dx_add_entry) with leaf splits (do_split) and index-node splits,
//! down to ext3's one level of index nodes below the root.
//!
//! Removing and retargeting names never touches the index (as in ext3: the
//! leaf just keeps the room). Lookups use the in-memory name index of
//! dir.rs, so the tree is only walked to find the leaf a new name goes in.

use super::inode::InodeState;
use super::{Filesystem, FsError, Result};
use crate::format::dirent::{
    self, dx_hash, effective_hash_version, parse_dx_node, parse_dx_root, rec_len_for, DirEntry,
    Planned, DX_HASH_TEA_UNSIGNED,
};
use crate::format::htree::{
    write_dx_table, DxRootInfo, DX_NODE_ENTRIES_OFFSET, DX_ROOT_INFO_OFFSET, EXT4_DX_BLOCK_MASK,
};
use crate::format::inode::flags::EXT2_INDEX_FL;
use crate::format::superblock::{feature, EXT2_FLAGS_UNSIGNED_HASH};
use crate::format::{Corruption, InodeNo, Location};
use crate::journal::Handle;

/// The hash a directory's names are indexed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DxHash {
    /// The version hashed with (an unsigned twin where the superblock says
    /// so), always a known one.
    version: u8,
    seed: [u32; 4],
}

impl DxHash {
    /// For a root's stored `hash_version`; `None` for an unknown hash.
    pub(crate) fn new(on_disk: u8, unsigned: bool, seed: [u32; 4]) -> Option<Self> {
        let version = effective_hash_version(on_disk, unsigned);
        (version <= DX_HASH_TEA_UNSIGNED).then_some(DxHash { version, seed })
    }

    /// The major hash of `name` (even: bit 0 is the index's "continued").
    pub(crate) fn of(&self, name: &[u8]) -> u32 {
        self.major_minor(name).0
    }

    /// The major and minor hashes of `name`: readdir's order.
    pub(crate) fn major_minor(&self, name: &[u8]) -> (u32, u32) {
        dx_hash(name, self.version, &self.seed).unwrap_or((0, 0))
    }
}

/// A leaf split as do_split makes it: the entries that stay, those that
/// move to the new block, and the index entry's hash for the new block
/// (with bit 0 set when equal hashes continue across the split).
#[derive(Debug)]
pub(crate) struct LeafSplit {
    pub keep: Vec<DirEntry>,
    pub moved: Vec<DirEntry>,
    pub hash2: u32,
}

/// Splits a full leaf's live entries by hash (do_split): sorted by hash,
/// the upper half by size moves (ext4's rule: entries from the top until
/// half the block; by count when that is not reached). `None` when there
/// are fewer than two entries, which no full block of 1 KiB or more has.
pub(crate) fn split_leaf(
    entries: Vec<DirEntry>,
    hash: &DxHash,
    block_size: usize,
) -> Option<LeafSplit> {
    let count = entries.len();
    if count < 2 {
        return None;
    }
    let mut map: Vec<(u32, DirEntry)> =
        entries.into_iter().map(|e| (hash.of(&e.name), e)).collect();
    map.sort_by_key(|(h, _)| *h);
    let (mut size, mut moved) = (0usize, 0usize);
    let mut broke_above_zero = false;
    for i in (0..count).rev() {
        let s = rec_len_for(map[i].1.name.len());
        if size + s / 2 > block_size / 2 {
            broke_above_zero = i > 0;
            break;
        }
        size += s;
        moved += 1;
    }
    let split = if broke_above_zero {
        count - moved
    } else {
        count / 2
    };
    let split = split.clamp(1, count - 1);
    let hash2 = map[split].0;
    let continued = u32::from(hash2 == map[split - 1].0);
    let upper = map.split_off(split);
    Some(LeafSplit {
        keep: map.into_iter().map(|(_, e)| e).collect(),
        moved: upper.into_iter().map(|(_, e)| e).collect(),
        hash2: hash2 + continued,
    })
}

/// A block of `block_size` holding `entries` packed from its start, the
/// last one taking the rest (an empty block if there are none). Entries
/// that do not fit are a corruption of the directory `dir` they came from.
pub(crate) fn pack_entries(
    dir: InodeNo,
    block_size: usize,
    entries: &[DirEntry],
) -> Result<Vec<u8>> {
    let corrupt = |e| FsError::from(Corruption::new(Location::Inode(dir), e));
    let mut block = dirent::init_block(block_size).map_err(corrupt)?;
    let mut off = 0;
    for (i, e) in entries.iter().enumerate() {
        let used = rec_len_for(e.name.len());
        let rec_len = if i + 1 == entries.len() {
            block_size - off
        } else {
            used
        };
        let e = DirEntry {
            rec_len,
            name_len: e.name.len() as u8,
            ..e.clone()
        };
        dirent::write_entry(&mut block, off, &e).map_err(corrupt)?;
        off += used;
    }
    Ok(block)
}

/// The live entries of a block, in block order.
fn live_entries(block: &[u8]) -> std::result::Result<Vec<DirEntry>, dirent::DirentError> {
    let mut out = Vec::new();
    for e in dirent::iter_block(block, None) {
        let e = e?;
        if e.inode.0 != 0 {
            out.push(e.to_entry());
        }
    }
    Ok(out)
}

/// An index table: (hash, block) pairs, entry 0's hash read as 0.
pub(crate) type DxTable = Vec<(u32, u32)>;

/// One level of the path dx_probe walks: an index block, its entries
/// (entry 0's hash read as 0) and the entry followed.
#[derive(Clone, Debug)]
pub(crate) struct Frame {
    /// The directory's logical block holding this table.
    pub block: u32,
    pub entries: DxTable,
    pub at: usize,
    pub limit: usize,
}

impl Frame {
    fn full(&self) -> bool {
        self.entries.len() >= self.limit
    }
}

/// The entry of a sorted table a hash falls under (dx_probe's search).
pub(crate) fn dx_search(entries: &[(u32, u32)], hash: u32) -> usize {
    entries[1..].partition_point(|e| e.0 <= hash)
}

/// Splits a full index node (ext3_dx_add_entry, levels > 0): the upper
/// half goes to a new node; returns (left, right, the right's hash).
pub(crate) fn split_node(entries: &[(u32, u32)]) -> (DxTable, DxTable, u32) {
    let icount1 = entries.len() / 2;
    let right = entries[icount1..].to_vec();
    (entries[..icount1].to_vec(), right.clone(), right[0].0)
}

/// A walk over an indexed directory's leaves in hash order, as readdir
/// takes them (ext4_htree_next_block).
#[derive(Clone)]
pub(crate) struct LeafWalk {
    pub hash: DxHash,
    frames: Vec<Frame>,
    started: bool,
}

/// How dx_probe went.
enum Probe {
    /// The path from the root to the leaf's index entry.
    Path(DxHash, u32, Vec<Frame>),
    /// The index cannot be used (ext3's ERR_BAD_DX_DIR).
    Bad(&'static str),
}

impl Filesystem {
    /// Whether the filesystem indexes directories (`dir_index`).
    pub(crate) fn has_dir_index(&self) -> bool {
        self.sb.lock().s_feature_compat & feature::COMPAT_DIR_INDEX != 0
    }

    /// The superblock's hash settings: (s_def_hash_version, unsigned, seed).
    fn hash_settings(&self) -> (u8, bool, [u32; 4]) {
        let sb = self.sb.lock();
        (
            sb.s_def_hash_version,
            sb.s_flags & EXT2_FLAGS_UNSIGNED_HASH != 0,
            sb.s_hash_seed,
        )
    }

    /// The hash new indexes use (s_def_hash_version), and one-block
    /// directories list by; `None` when the superblock names no known one.
    pub(crate) fn default_dx_hash(&self) -> Option<DxHash> {
        let (def, unsigned, seed) = self.hash_settings();
        DxHash::new(def, unsigned, seed)
    }

    fn dir_blocks(&self, st: &InodeState) -> u32 {
        (st.disk.i_size / self.block_size as u64) as u32
    }

    /// dx_probe: reads the root (and the index node under it) down to the
    /// entry whose leaf `name` belongs in.
    fn dx_probe(&self, dir: InodeNo, st: &InodeState, name: &[u8]) -> Result<Probe> {
        self.dx_probe_by(dir, st, |hash| hash.of(name))
    }

    /// dx_probe for the hash `hash_of` picks once the root names the hash.
    fn dx_probe_by(
        &self,
        dir: InodeNo,
        st: &InodeState,
        hash_of: impl FnOnce(&DxHash) -> u32,
    ) -> Result<Probe> {
        let blocks = self.dir_blocks(st);
        let root = {
            let buf = self.dir_block(dir, st, 0)?;
            let data = buf.read();
            match parse_dx_root(&data) {
                Ok(r) => r,
                Err(_) => return Ok(Probe::Bad("its root block is not an htree root")),
            }
        };
        let (_, unsigned, seed) = self.hash_settings();
        let Some(hash) = DxHash::new(root.hash_version, unsigned, seed) else {
            return Ok(Probe::Bad("its hash is unknown"));
        };
        let h = hash_of(&hash);
        let entries: Vec<(u32, u32)> = root.entries.iter().map(|e| (e.hash, e.block)).collect();
        let at = dx_search(&entries, h);
        let mut frames = vec![Frame {
            block: 0,
            entries,
            at,
            limit: usize::from(root.limit),
        }];
        for _ in 0..root.indirect_levels {
            let Some(f) = frames.last() else {
                return Ok(Probe::Bad("its index is empty"));
            };
            let b = f.entries[f.at].1 & EXT4_DX_BLOCK_MASK;
            if b == 0 || b >= blocks {
                return Ok(Probe::Bad("an index entry points outside the directory"));
            }
            let node = {
                let buf = self.dir_block(dir, st, b)?;
                let data = buf.read();
                match parse_dx_node(&data) {
                    Ok(n) => n,
                    Err(_) => return Ok(Probe::Bad("an index node is damaged")),
                }
            };
            let entries: Vec<(u32, u32)> = node.entries.iter().map(|e| (e.hash, e.block)).collect();
            let at = dx_search(&entries, h);
            frames.push(Frame {
                block: b,
                entries,
                at,
                limit: usize::from(node.limit),
            });
        }
        let Some(f) = frames.last() else {
            return Ok(Probe::Bad("its index is empty"));
        };
        let leaf = f.entries[f.at].1 & EXT4_DX_BLOCK_MASK;
        if leaf == 0 || leaf >= blocks {
            return Ok(Probe::Bad("an index entry points outside the directory"));
        }
        Ok(Probe::Path(hash, h, frames))
    }

    /// The walk over `dir`'s leaves from the one holding hash `major` on;
    /// `None` when the index cannot be used.
    pub(crate) fn dx_leaves_from(
        &self,
        dir: InodeNo,
        st: &InodeState,
        major: u32,
    ) -> Result<Option<LeafWalk>> {
        Ok(match self.dx_probe_by(dir, st, |_| major)? {
            Probe::Path(hash, _, frames) => Some(LeafWalk {
                hash,
                frames,
                started: false,
            }),
            Probe::Bad(_) => None,
        })
    }

    /// The walk's next leaf, and whether its index entry says it continues
    /// the hash its predecessor ended with (bit 0, set by a split between
    /// equal hashes); `None` past the last leaf.
    pub(crate) fn dx_next_leaf(
        &self,
        dir: InodeNo,
        st: &InodeState,
        walk: &mut LeafWalk,
    ) -> Result<Option<(u32, bool)>> {
        let mut continued = false;
        if walk.started {
            let Some(level) = walk.frames.iter().rposition(|f| f.at + 1 < f.entries.len()) else {
                return Ok(None);
            };
            walk.frames[level].at += 1;
            let f = &walk.frames[level];
            continued = f.entries[f.at].0 & 1 == 1;
            for below in level + 1..walk.frames.len() {
                let above = &walk.frames[below - 1];
                let b = self.dx_child(dir, st, above.entries[above.at].1)?;
                let node = {
                    let buf = self.dir_block(dir, st, b)?;
                    let data = buf.read();
                    parse_dx_node(&data).map_err(|_| self.corrupt_index(dir, b))?
                };
                walk.frames[below] = Frame {
                    block: b,
                    entries: node.entries.iter().map(|e| (e.hash, e.block)).collect(),
                    at: 0,
                    limit: usize::from(node.limit),
                };
            }
        }
        walk.started = true;
        let Some(f) = walk.frames.last() else {
            return Err(self.corrupt_index(dir, 0));
        };
        Ok(Some((
            self.dx_child(dir, st, f.entries[f.at].1)?,
            continued,
        )))
    }

    /// The directory block an index entry points to, checked.
    fn dx_child(&self, dir: InodeNo, st: &InodeState, entry_block: u32) -> Result<u32> {
        let b = entry_block & EXT4_DX_BLOCK_MASK;
        if b == 0 || b >= self.dir_blocks(st) {
            return Err(self.corrupt_index(dir, b));
        }
        Ok(b)
    }

    fn corrupt_index(&self, dir: InodeNo, block: u32) -> FsError {
        FsError::corrupt(
            Location::Inode(dir),
            "directory index",
            "block",
            block,
            "an index entry points outside the directory or at a damaged node",
        )
    }

    /// ext3_dx_add_entry: adds `name` to the indexed directory `dir`,
    /// splitting the leaf (and an index node) when it is full. `Ok(false)`
    /// when the index is unusable; the caller then drops it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn dx_add(
        &self,
        h: &mut Handle<'_>,
        dir: InodeNo,
        st: &mut InodeState,
        name: &[u8],
        ino: InodeNo,
        file_type: u8,
    ) -> Result<bool> {
        // One split makes room in the leaf the name belongs to; a second
        // try only for entries of equal hashes filling a block.
        for _ in 0..3 {
            let (hash, _, mut frames) = match self.dx_probe(dir, st, name)? {
                Probe::Path(hash, h, f) => (hash, h, f),
                Probe::Bad(why) => {
                    tracing::warn!(inode = dir.0, "htree directory read linearly: {why}");
                    return Ok(false);
                }
            };
            let Some(f) = frames.last() else {
                return Err(self.corrupt_index(dir, 0));
            };
            let leaf = f.entries[f.at].1 & EXT4_DX_BLOCK_MASK;
            let node_split = f.full();
            if self.dx_leaf_insert(h, dir, st, leaf, name, ino, file_type)? {
                return Ok(true);
            }
            if node_split && frames.len() > 1 && frames[0].full() {
                tracing::warn!(inode = dir.0, "directory index full");
                return Err(FsError::NoSpace);
            }
            if h.credits() < 24 {
                h.extend(16);
            }
            let new = self.dir_grow_n(h, dir, st, if node_split { 2 } else { 1 })?;
            if node_split {
                self.dx_split_node(h, dir, st, &mut frames, new[1])?;
            }
            let Some(frame) = frames.last_mut() else {
                return Err(self.corrupt_index(dir, 0));
            };
            self.dx_split_leaf(h, dir, st, &hash, frame, leaf, new[0])?;
        }
        Err(FsError::NoSpace)
    }

    /// Puts the entry into leaf `leaf` if it fits (packing the leaf when
    /// its free room is there but scattered). `Ok(false)` if it is full.
    #[allow(clippy::too_many_arguments)]
    fn dx_leaf_insert(
        &self,
        h: &mut Handle<'_>,
        dir: InodeNo,
        st: &mut InodeState,
        leaf: u32,
        name: &[u8],
        ino: InodeNo,
        file_type: u8,
    ) -> Result<bool> {
        let buf = self.dir_block(dir, st, leaf)?;
        // One pass finds a duplicate, the slot and the room after; the
        // directory's lock (`st`) keeps the block as it was seen until
        // the insert below.
        let planned =
            dirent::plan_insert(&buf.read(), name).map_err(|e| self.corrupt_leaf(dir, e))?;
        let plan = match planned {
            Planned::Exists(_) => return Err(FsError::Exists),
            Planned::Plan(p) => p,
        };
        if plan.free < plan.need {
            return Ok(false);
        }
        let (res, room) = {
            let mut data = h.modify(&buf)?;
            if plan.fits() {
                let r = dirent::apply_insert(&mut data, &plan, ino, name, file_type);
                (r.map_err(|e| self.corrupt_leaf(dir, e))?, plan.room_after)
            } else {
                // The room is there, but scattered: pack the leaf first.
                let live = live_entries(&data).map_err(|e| self.corrupt_leaf(dir, e))?;
                let packed = pack_entries(dir, data.len(), &live)?;
                data.copy_from_slice(&packed);
                dirent::insert_entry_room(&mut data, ino, name, file_type)
                    .map_err(|e| self.corrupt_leaf(dir, e))?
            }
        };
        super::dir::entry_inserted(dir, leaf, res)?;
        let room = room as u32;
        self.dir_index_note(st, leaf, room, &[(name, ino, file_type)]);
        Ok(true)
    }

    fn corrupt_leaf(&self, dir: InodeNo, e: dirent::DirentError) -> FsError {
        Corruption::new(Location::Inode(dir), e.error).into()
    }

    /// Appends `n` empty blocks to the directory; all or none.
    fn dir_grow_n(
        &self,
        h: &mut Handle<'_>,
        dir: InodeNo,
        st: &mut InodeState,
        n: usize,
    ) -> Result<Vec<u32>> {
        let saved = (st.disk.clone(), st.last_alloc);
        let mut got = Vec::new();
        let mut news = Vec::new();
        for _ in 0..n {
            match self.dir_grow(h, dir, st) {
                Ok((b, new)) => {
                    got.push(b);
                    news.push(new);
                }
                Err(e) => {
                    for new in news.iter().rev() {
                        if let Err(u) = self.unmap_new(h, dir, st, new) {
                            tracing::error!(inode = dir.0, "undoing a directory's growth: {u}");
                        }
                    }
                    (st.disk, st.last_alloc) = saved;
                    if let (Some(idx), Some(&first)) = (st.dir_index.as_mut(), got.first()) {
                        idx.truncate_room(first as usize);
                    }
                    return Err(e);
                }
            }
        }
        Ok(got)
    }

    /// Writes a frame's table back into its block.
    fn dx_write_frame(
        &self,
        h: &mut Handle<'_>,
        dir: InodeNo,
        st: &InodeState,
        frame: &Frame,
        levels: Option<u8>,
    ) -> Result<()> {
        let buf = self.dir_block(dir, st, frame.block)?;
        {
            let mut data = h.modify(&buf)?;
            if frame.block == 0 {
                let mut info = DxRootInfo::read(&data).ok_or_else(|| self.corrupt_index(dir, 0))?;
                if let Some(l) = levels {
                    info.indirect_levels = l;
                    info.write(&mut data);
                }
                write_dx_table(&mut data, info.entries_offset(), &frame.entries);
            } else {
                let fresh = dirent::init_block(data.len())
                    .map_err(|e| Corruption::new(Location::Inode(dir), e))?;
                data[..DX_NODE_ENTRIES_OFFSET].copy_from_slice(&fresh[..DX_NODE_ENTRIES_OFFSET]);
                write_dx_table(&mut data, DX_NODE_ENTRIES_OFFSET, &frame.entries);
            }
        }
        Ok(())
    }

    /// Makes room in the deepest index table for one more entry: splits a
    /// full node in two under the root, or moves a full root's entries
    /// into a new node (the tree grows a level). `nb` is a new block.
    fn dx_split_node(
        &self,
        h: &mut Handle<'_>,
        dir: InodeNo,
        st: &mut InodeState,
        frames: &mut Vec<Frame>,
        nb: u32,
    ) -> Result<()> {
        let limit = crate::format::dirent::dx_node_limit(self.block_size as usize);
        if frames.len() > 1 {
            let Some(f) = frames.pop() else {
                return Err(self.corrupt_index(dir, 0));
            };
            let (left, right, hash2) = split_node(&f.entries);
            let icount1 = left.len();
            let lf = Frame {
                block: f.block,
                entries: left,
                at: f.at.min(icount1.saturating_sub(1)),
                limit,
            };
            let rf = Frame {
                block: nb,
                entries: right,
                at: f.at.saturating_sub(icount1),
                limit,
            };
            self.dx_write_frame(h, dir, st, &lf, None)?;
            self.dx_write_frame(h, dir, st, &rf, None)?;
            let root = &mut frames[0];
            root.entries.insert(root.at + 1, (hash2, nb));
            self.dx_write_frame(h, dir, st, &frames[0], None)?;
            frames.push(if f.at >= icount1 { rf } else { lf });
        } else {
            let root = &mut frames[0];
            let node = Frame {
                block: nb,
                entries: std::mem::replace(&mut root.entries, vec![(0, nb)]),
                at: root.at,
                limit,
            };
            root.at = 0;
            self.dx_write_frame(h, dir, st, &node, None)?;
            self.dx_write_frame(h, dir, st, &frames[0], Some(1))?;
            frames.push(node);
        }
        Ok(())
    }

    /// do_split: moves the upper half (by hash) of leaf `leaf` into the new
    /// block `nb` and adds its index entry after the frame's current one.
    #[allow(clippy::too_many_arguments)]
    fn dx_split_leaf(
        &self,
        h: &mut Handle<'_>,
        dir: InodeNo,
        st: &mut InodeState,
        hash: &DxHash,
        frame: &mut Frame,
        leaf: u32,
        nb: u32,
    ) -> Result<()> {
        let bs = self.block_size as usize;
        let buf = self.dir_block(dir, st, leaf)?;
        let live = live_entries(&buf.read()).map_err(|e| self.corrupt_leaf(dir, e))?;
        let split = split_leaf(live, hash, bs).ok_or_else(|| {
            FsError::corrupt(
                Location::Inode(dir),
                "directory",
                "logical block",
                leaf,
                "a full htree leaf with fewer than two entries",
            )
        })?;
        // Both halves packed before either block changes.
        let (moved_block, keep_block) = (
            pack_entries(dir, bs, &split.moved)?,
            pack_entries(dir, bs, &split.keep)?,
        );
        let new_buf = self.dir_block(dir, st, nb)?;
        h.modify(&new_buf)?.copy_from_slice(&moved_block);
        h.modify(&buf)?.copy_from_slice(&keep_block);
        frame.entries.insert(frame.at + 1, (split.hash2, nb));
        self.dx_write_frame(h, dir, st, frame, None)?;
        let moved: Vec<_> = split
            .moved
            .iter()
            .map(|e| (&e.name[..], e.inode, e.file_type))
            .collect();
        let room_new = super::dir::block_room(&new_buf.read());
        let room_old = super::dir::block_room(&buf.read());
        self.dir_index_note(st, nb, room_new, &moved);
        self.dir_index_note(st, leaf, room_old, &[]);
        Ok(())
    }

    /// make_indexed_dir: turns a one-block directory whose block is full
    /// into an indexed one: block 0 becomes the root ("." and ".." and the
    /// index), its other entries split by hash into two new leaves.
    /// `Ok(false)` (nothing changed) when block 0 does not start with "."
    /// and "..", or the superblock's hash is unknown.
    pub(crate) fn make_indexed_dir(
        &self,
        h: &mut Handle<'_>,
        dir: InodeNo,
        st: &mut InodeState,
    ) -> Result<bool> {
        let bs = self.block_size as usize;
        let def = self.hash_settings().0;
        let Some(hash) = self.default_dx_hash() else {
            return Ok(false);
        };
        let root_buf = self.dir_block(dir, st, 0)?;
        let live = {
            let data = root_buf.read();
            let ok = dirent::rec_len_at(&data, 0) == 12
                && dirent::name_at(&data, 0) == b"."
                && dirent::name_at(&data, 12) == b"..";
            if !ok {
                return Ok(false);
            }
            let mut out = Vec::new();
            for e in dirent::iter_block(&data, None) {
                let e = e.map_err(|e| self.corrupt_leaf(dir, e))?;
                if e.offset >= DX_ROOT_INFO_OFFSET && e.inode.0 != 0 {
                    out.push(e.to_entry());
                }
            }
            out
        };
        let Some(split) = split_leaf(live, &hash, bs) else {
            return Ok(false);
        };
        if h.credits() < 24 {
            h.extend(16);
        }
        // Both halves packed before the directory grows.
        let halves = [
            pack_entries(dir, bs, &split.keep)?,
            pack_entries(dir, bs, &split.moved)?,
        ];
        let new = self.dir_grow_n(h, dir, st, 2)?;
        let (b1, b2) = (new[0], new[1]);
        for (b, block) in [b1, b2].into_iter().zip(&halves) {
            let buf = self.dir_block(dir, st, b)?;
            h.modify(&buf)?.copy_from_slice(block);
        }
        {
            let mut data = h.modify(&root_buf)?;
            dirent::set_rec_len_at(&mut data, 12, bs - 12);
            data[DX_ROOT_INFO_OFFSET..].fill(0);
            let info = DxRootInfo {
                reserved_zero: 0,
                hash_version: def,
                info_length: 8,
                indirect_levels: 0,
                unused_flags: 0,
            };
            info.write(&mut data);
            write_dx_table(
                &mut data,
                info.entries_offset(),
                &[(0, b1), (split.hash2, b2)],
            );
        }
        st.disk.i_flags |= EXT2_INDEX_FL;
        let note = |v: &[DirEntry]| -> Vec<(Vec<u8>, InodeNo, u8)> {
            v.iter()
                .map(|e| (e.name.clone(), e.inode, e.file_type))
                .collect()
        };
        for (b, entries) in [(b1, note(&split.keep)), (b2, note(&split.moved))] {
            let room = super::dir::block_room(&self.dir_block(dir, st, b)?.read());
            let e: Vec<_> = entries.iter().map(|(n, i, t)| (&n[..], *i, *t)).collect();
            self.dir_index_note(st, b, room, &e);
        }
        let room0 = super::dir::block_room(&root_buf.read());
        self.dir_index_note(st, 0, room0, &[]);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::dirent::DX_HASH_HALF_MD4;

    fn entry(i: u32) -> DirEntry {
        let name = format!("name-{i:06}").into_bytes();
        DirEntry {
            inode: InodeNo(100 + i),
            rec_len: rec_len_for(name.len()),
            name_len: name.len() as u8,
            file_type: 1,
            name,
        }
    }

    fn hash() -> DxHash {
        DxHash::new(DX_HASH_HALF_MD4, false, [1, 2, 3, 4]).unwrap()
    }

    #[test]
    fn a_leaf_splits_by_hash_into_two_valid_blocks() {
        for bs in [1024usize, 4096] {
            let n = (bs / rec_len_for(11)) as u32;
            let entries: Vec<_> = (0..n).map(entry).collect();
            let hs = hash();
            let s = split_leaf(entries.clone(), &hs, bs).unwrap();
            assert_eq!(s.keep.len() + s.moved.len(), n as usize);
            assert!(!s.keep.is_empty() && !s.moved.is_empty());
            let h2 = s.hash2 & !1;
            assert!(s.keep.iter().all(|e| hs.of(&e.name) <= h2));
            assert!(s.moved.iter().all(|e| hs.of(&e.name) >= h2));
            // Each half has room for the longest name afterwards.
            for half in [&s.keep, &s.moved] {
                let block = pack_entries(InodeNo(2), bs, half).unwrap();
                let names = live_entries(&block).unwrap();
                assert_eq!(names.len(), half.len());
                let room = super::super::dir::block_room(&block) as usize;
                assert!(room >= rec_len_for(255) || bs < 2048, "{bs}: {room}");
                assert!(room >= bs / 3, "{bs}: {room}");
            }
        }
    }

    #[test]
    fn equal_hashes_across_a_split_set_the_continued_bit() {
        // Equal names hash alike: a run of them straddles the split point.
        let hs = hash();
        let mut entries: Vec<_> = (0..10).map(|_| entry(7)).collect();
        entries.push(entry(8));
        let s = split_leaf(entries, &hs, 1024).unwrap();
        let h7 = hs.of(&entry(7).name);
        if s.hash2 & !1 == h7 {
            assert_eq!(s.hash2 & 1, 1);
        }
    }

    #[test]
    fn search_and_node_split_follow_the_kernel() {
        let t = [(0, 1), (10, 2), (20, 3), (30, 4)];
        assert_eq!(dx_search(&t, 0), 0);
        assert_eq!(dx_search(&t, 9), 0);
        assert_eq!(dx_search(&t, 10), 1);
        assert_eq!(dx_search(&t, 29), 2);
        assert_eq!(dx_search(&t, u32::MAX), 3);
        let (l, r, h) = split_node(&t);
        assert_eq!((l.len(), r.len(), h), (2, 2, 20));
        assert_eq!(r[0], (20, 3));
    }

    #[test]
    fn an_empty_pack_is_an_empty_block() {
        let b = pack_entries(InodeNo(2), 1024, &[]).unwrap();
        assert!(live_entries(&b).unwrap().is_empty());
        assert_eq!(dirent::rec_len_at(&b, 0), 1024);
    }
}
