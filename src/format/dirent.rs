//! ext3 directory blocks: linear entries (`ext2_dir_entry_2`). The htree
//! (dir_index) root and node blocks are in [`super::htree`] and the name
//! hashes in [`super::dirhash`]; both are re-exported here, where callers
//! have always found them.
//!
//! A 64 KiB block's whole-block `rec_len` does not fit the 16-bit field, so
//! entries are read and written through [`rec_len_from_disk`] and
//! [`rec_len_to_disk`], the kernel's encoding (`ext4_rec_len_from_disk`).

use super::bytes::{self, le16, le32, put_bytes, put_le16, put_le32};
use super::{FormatError, InodeNo};

pub use super::dirhash::{
    dx_hash, effective_hash_version, DX_DEFAULT_SEED, DX_HASH_HALF_MD4, DX_HASH_HALF_MD4_UNSIGNED,
    DX_HASH_LEGACY, DX_HASH_LEGACY_UNSIGNED, DX_HASH_TEA, DX_HASH_TEA_UNSIGNED,
    EXT2_HTREE_EOF_32BIT,
};
pub use super::htree::{
    dx_node_limit, dx_root_limit, looks_like_dx_node, looks_like_dx_root, parse_dx_node,
    parse_dx_root, write_dx_node, write_dx_root, DxEntry, DxNode, DxRoot, DX_MAX_INDIRECT_LEVELS,
    EXT2_HASH_FLAG_INCOMPAT,
};

const STRUCTURE: &str = "dirent";

pub const EXT2_FT_UNKNOWN: u8 = 0;
pub const EXT2_FT_REG_FILE: u8 = 1;
pub const EXT2_FT_DIR: u8 = 2;
pub const EXT2_FT_CHRDEV: u8 = 3;
pub const EXT2_FT_BLKDEV: u8 = 4;
pub const EXT2_FT_FIFO: u8 = 5;
pub const EXT2_FT_SOCK: u8 = 6;
pub const EXT2_FT_SYMLINK: u8 = 7;
pub const EXT2_FT_MAX: u8 = 8;

/// The file type a directory entry carries for an inode of `mode`.
pub fn file_type_of(mode: u16) -> u8 {
    use super::inode as fi;
    match mode & fi::S_IFMT {
        fi::S_IFREG => EXT2_FT_REG_FILE,
        fi::S_IFDIR => EXT2_FT_DIR,
        fi::S_IFCHR => EXT2_FT_CHRDEV,
        fi::S_IFBLK => EXT2_FT_BLKDEV,
        fi::S_IFIFO => EXT2_FT_FIFO,
        fi::S_IFSOCK => EXT2_FT_SOCK,
        fi::S_IFLNK => EXT2_FT_SYMLINK,
        _ => EXT2_FT_UNKNOWN,
    }
}

/// Longest name an entry can hold (`name_len` is one byte).
pub const EXT2_NAME_LEN: usize = 255;
/// Size of the fixed part of an entry.
pub const DIRENT_HEADER_LEN: usize = 8;
/// `EXT3_DIR_REC_LEN(1)`: the smallest valid `rec_len`.
pub const EXT3_DIR_REC_LEN_MIN: usize = 12;
/// Largest directory block: ext3's largest block size.
pub const MAX_DIR_BLOCK_SIZE: usize = 65536;
/// `EXT4_MAX_REC_LEN`: what a 64 KiB block's whole-block `rec_len` is
/// stored as.
pub const EXT4_MAX_REC_LEN: u16 = 65535;

/// `ext4_rec_len_from_disk`: the length an on-disk `rec_len` stands for in
/// a block of `block_size` bytes. Below 64 KiB the field is the length; at
/// 64 KiB and up, 65535 and 0 mean the whole block and the two low bits
/// (always clear in a real length) carry bits 16 and 17.
pub fn rec_len_from_disk(raw: u16, block_size: usize) -> usize {
    let len = usize::from(raw);
    if block_size < 65536 {
        len
    } else if raw == EXT4_MAX_REC_LEN || raw == 0 {
        block_size
    } else {
        (len & 65532) | ((len & 3) << 16)
    }
}

/// `ext4_rec_len_to_disk`: the on-disk form of a `rec_len` of `len` bytes
/// in a block of `block_size` bytes, or `None` if no 16-bit value says it.
pub fn rec_len_to_disk(len: usize, block_size: usize) -> Option<u16> {
    if len < 65536 {
        return u16::try_from(len).ok();
    }
    if len > block_size || len > 1 << 18 || len % 4 != 0 {
        return None;
    }
    if len == block_size {
        return Some(if block_size == 65536 {
            EXT4_MAX_REC_LEN
        } else {
            0
        });
    }
    Some(((len & 65532) | ((len >> 16) & 3)) as u16)
}

/// `EXT3_DIR_REC_LEN`: the bytes an entry with this name length needs.
pub const fn rec_len_for(name_len: usize) -> usize {
    (DIRENT_HEADER_LEN + name_len + 3) & !3
}

/// An owned directory entry, for building blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub inode: InodeNo,
    /// The record's length in bytes (decoded: up to the block size).
    pub rec_len: usize,
    pub name_len: u8,
    pub file_type: u8,
    pub name: Vec<u8>,
}

/// A validated entry borrowed from a block, with its offset in the block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirEntryRef<'a> {
    pub offset: usize,
    pub inode: InodeNo,
    /// The record's length in bytes (decoded: up to the block size).
    pub rec_len: usize,
    pub name_len: u8,
    pub file_type: u8,
    pub name: &'a [u8],
}

impl DirEntryRef<'_> {
    pub fn to_entry(&self) -> DirEntry {
        DirEntry {
            inode: self.inode,
            rec_len: self.rec_len,
            name_len: self.name_len,
            file_type: self.file_type,
            name: self.name.to_vec(),
        }
    }

    /// Bytes this entry needs for itself; the rest of `rec_len` is slack.
    /// An unused entry (inode 0) needs nothing.
    pub fn used_len(&self) -> usize {
        if self.inode.0 == 0 {
            0
        } else {
            rec_len_for(self.name_len.into())
        }
    }
}

/// A bad entry, and where in the block it starts.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("directory entry at offset {offset}: {error}")]
pub struct DirentError {
    pub offset: usize,
    #[source]
    pub error: FormatError,
}

impl DirentError {
    fn new(offset: usize, error: FormatError) -> Self {
        DirentError { offset, error }
    }
}

/// Rejects block sizes no `rec_len` could span, or that are not a
/// multiple of 4.
pub fn check_block_size(block_size: usize) -> Result<(), FormatError> {
    let ok =
        (EXT3_DIR_REC_LEN_MIN..=MAX_DIR_BLOCK_SIZE).contains(&block_size) && block_size % 4 == 0;
    if ok {
        Ok(())
    } else {
        Err(FormatError::bad_field(
            STRUCTURE,
            "block size",
            block_size as u64,
            "directory blocks must be 12..=65536 bytes, a multiple of 4",
        ))
    }
}

/// Offsets of `struct ext2_dir_entry_2`'s fields in an entry.
const DE_INODE: usize = 0;
const DE_REC_LEN: usize = 4;
const DE_NAME_LEN: usize = 6;
const DE_FILE_TYPE: usize = 7;
const DE_NAME: usize = 8;

// Fields of the entry at `off` of a directory block, read and written in
// place, for code that repairs entries the parser rejects (fsck) or patches
// one field of an entry already found. The entry's 8-byte header must lie
// inside the block: that is the caller's to check.

pub fn inode_at(block: &[u8], off: usize) -> u32 {
    le32(block, off + DE_INODE)
}

pub fn set_inode_at(block: &mut [u8], off: usize, ino: u32) {
    put_le32(block, off + DE_INODE, ino);
}

/// The decoded `rec_len` of the entry at `off`; `block` is the whole
/// directory block, whose length decides the encoding.
pub fn rec_len_at(block: &[u8], off: usize) -> usize {
    rec_len_from_disk(le16(block, off + DE_REC_LEN), block.len())
}

/// Stores `rec_len` in the entry at `off`, encoded for the block's size.
/// fsck repairs lengths through this, so an impossible one (past the block)
/// is stored truncated rather than refused, as the kernel's encoder would.
pub fn set_rec_len_at(block: &mut [u8], off: usize, rec_len: usize) {
    let raw = rec_len_to_disk(rec_len, block.len()).unwrap_or(rec_len as u16);
    put_le16(block, off + DE_REC_LEN, raw);
}

pub fn name_len_at(block: &[u8], off: usize) -> u8 {
    bytes::byte(block, off + DE_NAME_LEN)
}

pub fn set_name_len_at(block: &mut [u8], off: usize, name_len: u8) {
    bytes::put_byte(block, off + DE_NAME_LEN, name_len);
}

pub fn file_type_at(block: &[u8], off: usize) -> u8 {
    bytes::byte(block, off + DE_FILE_TYPE)
}

pub fn set_file_type_at(block: &mut [u8], off: usize, file_type: u8) {
    bytes::put_byte(block, off + DE_FILE_TYPE, file_type);
}

/// The name bytes of the entry at `off`, as far as the block holds them.
pub fn name_at(block: &[u8], off: usize) -> &[u8] {
    let start = (off + DE_NAME).min(block.len());
    let end = (start + usize::from(name_len_at(block, off))).min(block.len());
    block.get(start..end).unwrap_or(&[])
}

/// Parses and validates the entry at `off`, as `ext3_check_dir_entry` does.
pub fn entry_at(
    block: &[u8],
    off: usize,
    inodes_count: Option<u32>,
) -> Result<DirEntryRef<'_>, FormatError> {
    let b = block.get(off..).unwrap_or(&[]);
    let header: [u8; DIRENT_HEADER_LEN] = bytes::array_at(STRUCTURE, b, 0)?;
    let inode = le32(&header, DE_INODE);
    let rec_len = rec_len_at(block, off);
    let name_len = header[DE_NAME_LEN];
    check_rec_len(rec_len, name_len, b.len())?;
    if let Some(limit) = inodes_count {
        if inode > limit {
            return Err(bad("inode", inode, "inode out of bounds"));
        }
    }
    let name = b
        .get(DIRENT_HEADER_LEN..DIRENT_HEADER_LEN + usize::from(name_len))
        .ok_or_else(|| bad("name_len", name_len, "name crosses the block end"))?;
    Ok(DirEntryRef {
        offset: off,
        inode: InodeNo(inode),
        rec_len,
        name_len,
        file_type: header[DE_FILE_TYPE],
        name,
    })
}

fn bad(field: &'static str, value: impl Into<u64>, reason: &'static str) -> FormatError {
    FormatError::bad_field(STRUCTURE, field, value, reason)
}

fn check_rec_len(len: usize, name_len: u8, room: usize) -> Result<(), FormatError> {
    let rec_len = len as u64;
    if len < EXT3_DIR_REC_LEN_MIN {
        Err(bad("rec_len", rec_len, "rec_len is smaller than minimal"))
    } else if len % 4 != 0 {
        Err(bad("rec_len", rec_len, "rec_len % 4 != 0"))
    } else if len < rec_len_for(name_len.into()) {
        Err(bad("rec_len", rec_len, "rec_len is too small for name_len"))
    } else if len > room {
        Err(bad("rec_len", rec_len, "directory entry across blocks"))
    } else {
        Ok(())
    }
}

/// Iterates over the entries of one directory block, stopping after the
/// first invalid one (which it yields as an error).
pub struct DirBlockIter<'a> {
    block: &'a [u8],
    off: usize,
    inodes_count: Option<u32>,
    done: bool,
}

/// Entries of `block`; `inodes_count` (s_inodes_count) bounds inode numbers.
pub fn iter_block(block: &[u8], inodes_count: Option<u32>) -> DirBlockIter<'_> {
    DirBlockIter {
        block,
        off: 0,
        inodes_count,
        done: false,
    }
}

impl<'a> Iterator for DirBlockIter<'a> {
    type Item = Result<DirEntryRef<'a>, DirentError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.off >= self.block.len() {
            return None;
        }
        match entry_at(self.block, self.off, self.inodes_count) {
            Ok(e) => {
                self.off += e.rec_len;
                Some(Ok(e))
            }
            Err(error) => {
                self.done = true;
                Some(Err(DirentError::new(self.off, error)))
            }
        }
    }
}

/// All entries of a block, or the first bad one.
pub fn parse_block(
    block: &[u8],
    inodes_count: Option<u32>,
) -> Result<Vec<DirEntryRef<'_>>, DirentError> {
    iter_block(block, inodes_count).collect()
}

/// Writes `e` at `off`. The entry must be self-consistent and fit the block;
/// bytes of the record past the name are left as they were.
pub fn write_entry(block: &mut [u8], off: usize, e: &DirEntry) -> Result<(), FormatError> {
    if e.name.len() != usize::from(e.name_len) {
        return Err(bad("name_len", e.name_len, "does not match the name"));
    }
    write_raw(block, off, e.inode, e.rec_len, &e.name, e.file_type)
}

/// Writes one entry at `off`; `name` is at most 255 bytes.
fn write_raw(
    block: &mut [u8],
    off: usize,
    inode: InodeNo,
    len: usize,
    name: &[u8],
    file_type: u8,
) -> Result<(), FormatError> {
    let name_len =
        u8::try_from(name.len()).map_err(|_| bad("name_len", name.len() as u64, "over 255"))?;
    check_rec_len(len, name_len, block.len().saturating_sub(off))?;
    let raw = to_rec_len(len, block.len())?;
    let b = block
        .get_mut(off..off + len)
        .ok_or_else(|| bad("rec_len", len as u64, "directory entry across blocks"))?;
    put_le32(b, DE_INODE, inode.0);
    put_le16(b, DE_REC_LEN, raw);
    put_bytes(b, DE_NAME_LEN, &[name_len, file_type]);
    put_bytes(b, DIRENT_HEADER_LEN, name);
    Ok(())
}

fn to_rec_len(len: usize, block_size: usize) -> Result<u16, FormatError> {
    rec_len_to_disk(len, block_size)
        .ok_or_else(|| bad("rec_len", len as u64, "has no 16-bit encoding"))
}

/// An empty directory block: one unused entry spanning the whole block.
pub fn init_block(block_size: usize) -> Result<Vec<u8>, FormatError> {
    check_block_size(block_size)?;
    let mut block = vec![0u8; block_size];
    let empty = DirEntry {
        inode: InodeNo(0),
        rec_len: block_size,
        name_len: 0,
        file_type: 0,
        name: Vec::new(),
    };
    write_entry(&mut block, 0, &empty)?;
    Ok(block)
}

/// The first block of a new directory: "." and "..", the latter taking the
/// rest of the block so later names can split it.
pub fn new_dir_block(
    block_size: usize,
    self_ino: InodeNo,
    parent_ino: InodeNo,
) -> Result<Vec<u8>, FormatError> {
    check_block_size(block_size)?;
    let mut block = vec![0u8; block_size];
    write_entry(&mut block, 0, &dot_entry(self_ino, b".", 12))?;
    write_entry(
        &mut block,
        12,
        &dot_entry(parent_ino, b"..", block_size - 12),
    )?;
    Ok(block)
}

/// [`new_dir_block`] for a filesystem without the `filetype` feature, whose
/// entries carry no file type (that byte is then the high byte of the
/// name length, to e2fsck).
pub fn new_untyped_dir_block(
    block_size: usize,
    self_ino: InodeNo,
    parent_ino: InodeNo,
) -> Result<Vec<u8>, FormatError> {
    let mut block = new_dir_block(block_size, self_ino, parent_ino)?;
    set_file_type_at(&mut block, 0, 0);
    set_file_type_at(&mut block, 12, 0);
    Ok(block)
}

fn dot_entry(inode: InodeNo, name: &[u8], rec_len: usize) -> DirEntry {
    DirEntry {
        inode,
        rec_len,
        name_len: name.len() as u8,
        file_type: EXT2_FT_DIR,
        name: name.to_vec(),
    }
}

/// The outcome of [`insert_entry`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Insert {
    /// The new entry starts at this offset.
    Inserted(usize),
    /// No slot in this block is large enough.
    NoSpace,
    /// The name is already present (at this offset); nothing was changed.
    Exists(usize),
}

/// Finds an entry named `name` (ignoring unused entries).
pub fn find_entry<'a>(
    block: &'a [u8],
    name: &[u8],
) -> Result<Option<DirEntryRef<'a>>, DirentError> {
    for e in iter_block(block, None) {
        let e = e?;
        if e.inode.0 != 0 && e.name == name {
            return Ok(Some(e));
        }
    }
    Ok(None)
}

/// Adds `name` to the block as `ext4_find_dest_de` + `ext4_insert_dentry`
/// do: reuse an unused entry, or split one with enough slack.
pub fn insert_entry(
    block: &mut [u8],
    inode: InodeNo,
    name: &[u8],
    file_type: u8,
) -> Result<Insert, DirentError> {
    insert_entry_room(block, inode, name, file_type).map(|(r, _)| r)
}

/// [`insert_entry`], and the block's largest slack afterwards (what
/// [`block_room`] would find), from the same single pass over the block.
pub fn insert_entry_room(
    block: &mut [u8],
    inode: InodeNo,
    name: &[u8],
    file_type: u8,
) -> Result<(Insert, usize), DirentError> {
    match plan_insert(block, name)? {
        Planned::Exists(off) => Ok((Insert::Exists(off), block_room(block))),
        Planned::Plan(plan) => {
            let r = apply_insert(block, &plan, inode, name, file_type)?;
            let room = match r {
                Insert::Inserted(_) => plan.room_after,
                _ => plan.room_now,
            };
            Ok((r, room))
        }
    }
}

/// The largest slack of any entry in the block: the longest name a new
/// entry could have without packing the block.
pub fn block_room(block: &[u8]) -> usize {
    iter_block(block, None)
        .filter_map(|e| e.ok())
        .map(|e| e.rec_len - e.used_len())
        .max()
        .unwrap_or(0)
}

/// What one pass over a block finds about inserting a name:
/// [`plan_insert`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Planned {
    /// The name is present, at this offset.
    Exists(usize),
    Plan(InsertPlan),
}

/// Where a new entry would go, and the block's slack before and after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InsertPlan {
    /// The first entry whose slack holds the new one: its offset, the
    /// bytes it uses and its rec_len. None when no single slack is large
    /// enough (packing the block may still make room: see `free`).
    slot: Option<(usize, usize, usize)>,
    /// The record length the new entry needs.
    pub need: usize,
    /// All the slack in the block together.
    pub free: usize,
    /// The largest slack now.
    pub room_now: usize,
    /// The largest slack once the entry is in `slot`.
    pub room_after: usize,
}

impl InsertPlan {
    pub fn fits(&self) -> bool {
        self.slot.is_some()
    }
}

/// One pass over a block for inserting `name`: whether it is there,
/// where it would go, and the slack before and after, so that a caller
/// that holds the directory's lock between this and [`apply_insert`]
/// need not walk the block again.
pub fn plan_insert(block: &[u8], name: &[u8]) -> Result<Planned, DirentError> {
    let need = check_new_name(name).map_err(|e| DirentError::new(0, e))?;
    let mut slot = None;
    let mut free = 0;
    // The two largest slacks, and where the largest is: after the insert
    // the slot's own slack is gone, and the new entry keeps what is left.
    let (mut max1, mut max1_at, mut max2) = (0, usize::MAX, 0);
    for e in iter_block(block, None) {
        let e = e?;
        if e.inode.0 != 0 && e.name == name {
            return Ok(Planned::Exists(e.offset));
        }
        let used = e.used_len();
        let slack = e.rec_len - used;
        free += slack;
        if slot.is_none() && slack >= need {
            slot = Some((e.offset, used, e.rec_len));
        }
        if slack > max1 {
            (max2, max1, max1_at) = (max1, slack, e.offset);
        } else if slack > max2 {
            max2 = slack;
        }
    }
    let room_after = match slot {
        Some((off, used, rec_len)) => {
            let others = if off == max1_at { max2 } else { max1 };
            others.max(rec_len - used - need)
        }
        None => max1,
    };
    Ok(Planned::Plan(InsertPlan {
        slot,
        need,
        free,
        room_now: max1,
        room_after,
    }))
}

/// Puts `name` where `plan` (made by [`plan_insert`] on this block, with
/// nothing changed since) says; NoSpace when no slot held it.
pub fn apply_insert(
    block: &mut [u8],
    plan: &InsertPlan,
    inode: InodeNo,
    name: &[u8],
    file_type: u8,
) -> Result<Insert, DirentError> {
    let Some((off, used, rec_len)) = plan.slot else {
        return Ok(Insert::NoSpace);
    };
    let new_off = split_slot(block, off, used)?;
    write_raw(block, new_off, inode, rec_len - used, name, file_type)
        .map_err(|e| DirentError::new(new_off, e))?;
    Ok(Insert::Inserted(new_off))
}

fn check_new_name(name: &[u8]) -> Result<usize, FormatError> {
    if name.is_empty() || name.len() > EXT2_NAME_LEN {
        return Err(bad(
            "name_len",
            name.len() as u64,
            "name must be 1..=255 bytes",
        ));
    }
    Ok(rec_len_for(name.len()))
}

/// Shrinks a live entry at `off` to its own length so the rest can be used;
/// returns where the new entry goes.
fn split_slot(block: &mut [u8], off: usize, used: usize) -> Result<usize, DirentError> {
    if used == 0 {
        return Ok(off);
    }
    let short = to_rec_len(used, block.len()).map_err(|e| DirentError::new(off, e))?;
    put_le16(block, off + DE_REC_LEN, short);
    Ok(off + used)
}

/// Removes `name` as `ext4_generic_delete_entry` does: fold its space into
/// the previous entry, or mark it unused if it is first in the block.
/// Returns the inode the entry pointed to, or `None` if absent.
pub fn remove_entry(block: &mut [u8], name: &[u8]) -> Result<Option<InodeNo>, DirentError> {
    let mut prev: Option<(usize, usize)> = None;
    let mut found = None;
    for e in iter_block(block, None) {
        let e = e?;
        if e.inode.0 != 0 && e.name == name {
            found = Some((e.offset, e.rec_len, e.inode));
            break;
        }
        prev = Some((e.offset, e.rec_len));
    }
    let Some((off, rec_len, inode)) = found else {
        return Ok(None);
    };
    match prev {
        Some((poff, plen)) => {
            let merged =
                to_rec_len(plen + rec_len, block.len()).map_err(|e| DirentError::new(poff, e))?;
            put_le16(block, poff + DE_REC_LEN, merged);
        }
        None => put_le32(block, off, 0),
    }
    Ok(Some(inode))
}

/// True if the block holds no live entry (every entry has inode 0).
pub fn is_empty_block(block: &[u8]) -> Result<bool, DirentError> {
    for e in iter_block(block, None) {
        if e?.inode.0 != 0 {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic xorshift64, so failures reproduce.
    use crate::util::rng::Rng;

    fn names(block: &[u8]) -> Vec<Vec<u8>> {
        iter_block(block, None)
            .map(|e| e.unwrap())
            .filter(|e| e.inode.0 != 0)
            .map(|e| e.name.to_vec())
            .collect()
    }

    #[test]
    fn rec_len_rounds_to_four() {
        assert_eq!(rec_len_for(1), 12);
        assert_eq!(rec_len_for(4), 12);
        assert_eq!(rec_len_for(5), 16);
        assert_eq!(rec_len_for(255), 264);
    }

    #[test]
    fn entry_round_trips() {
        let mut block = init_block(1024).unwrap();
        let e = DirEntry {
            inode: InodeNo(42),
            rec_len: 1024,
            name_len: 5,
            file_type: EXT2_FT_REG_FILE,
            name: b"hello".to_vec(),
        };
        write_entry(&mut block, 0, &e).unwrap();
        let got = parse_block(&block, Some(100)).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].to_entry(), e);
        assert!(parse_block(&block, Some(41)).is_err());
    }

    #[test]
    fn new_dir_block_has_dot_and_dotdot() {
        let block = new_dir_block(4096, InodeNo(12), InodeNo(2)).unwrap();
        let got = parse_block(&block, None).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(
            (got[0].name, got[0].inode, got[0].rec_len),
            (&b"."[..], InodeNo(12), 12)
        );
        assert_eq!(
            (got[1].name, got[1].inode, got[1].rec_len),
            (&b".."[..], InodeNo(2), 4084)
        );
        assert!(got.iter().all(|e| e.file_type == EXT2_FT_DIR));
    }

    /// The one-pass plan against separate passes: on blocks built by
    /// random inserts and removes (so that slack is scattered, and unused
    /// entries appear), each insert lands where the first fitting entry
    /// is, and the room it reports is what a walk of the block finds.
    #[test]
    fn one_pass_plans_agree_with_walking_the_block() {
        let mut rng = Rng::new(17);
        for round in 0..200 {
            let mut block = new_dir_block(1024, InodeNo(12), InodeNo(2)).unwrap();
            let mut live: Vec<Vec<u8>> = Vec::new();
            for step in 0..150 {
                if !live.is_empty() && rng.chance(35) {
                    let i = rng.below(live.len() as u64) as usize;
                    let gone = live.swap_remove(i);
                    assert!(remove_entry(&mut block, &gone).unwrap().is_some());
                    continue;
                }
                let len = 1 + rng.below(40) as usize;
                let name: Vec<u8> = format!("r{round}s{step}-{}", "x".repeat(len)).into_bytes();
                let free: usize = iter_block(&block, None)
                    .map(|e| e.unwrap())
                    .map(|e| e.rec_len - e.used_len())
                    .sum();
                let first_fit = iter_block(&block, None)
                    .map(|e| e.unwrap())
                    .find(|e| e.rec_len - e.used_len() >= rec_len_for(name.len()))
                    .map(|e| e.offset + e.used_len());
                let Planned::Plan(plan) = plan_insert(&block, &name).unwrap() else {
                    panic!("a new name found present");
                };
                assert_eq!((plan.free, plan.room_now), (free, block_room(&block)));
                let (r, room) =
                    insert_entry_room(&mut block, InodeNo(20 + step), &name, 1).unwrap();
                match r {
                    Insert::Inserted(off) => {
                        assert_eq!(Some(off), first_fit);
                        live.push(name);
                    }
                    Insert::NoSpace => assert_eq!(first_fit, None),
                    Insert::Exists(_) => panic!("a new name found present"),
                }
                assert_eq!(room, block_room(&block), "round {round} step {step}");
                let mut want = live.clone();
                want.sort();
                let mut got: Vec<Vec<u8>> = names(&block).into_iter().skip(2).collect();
                got.sort();
                assert_eq!(got, want);
            }
            if let Some(present) = live.first() {
                assert!(matches!(
                    plan_insert(&block, present).unwrap(),
                    Planned::Exists(_)
                ));
            }
        }
    }

    #[test]
    fn insert_fills_then_reports_no_space() {
        let mut block = new_dir_block(1024, InodeNo(12), InodeNo(2)).unwrap();
        let mut n = 0;
        loop {
            let name = format!("file{n:04}");
            match insert_entry(&mut block, InodeNo(100 + n), name.as_bytes(), 1).unwrap() {
                Insert::Inserted(_) => n += 1,
                Insert::NoSpace => break,
                Insert::Exists(_) => panic!("duplicate"),
            }
        }
        // 1024 - 24 for the dots, 16 bytes per 8-byte name.
        assert_eq!(n, (1024 - 24) / 16);
        assert_eq!(names(&block).len(), 2 + n as usize);
        let e = insert_entry(&mut block, InodeNo(5), b"file0003", 1).unwrap();
        assert!(matches!(e, Insert::Exists(_)));
    }

    #[test]
    fn remove_merges_into_previous_or_clears_first() {
        let mut block = init_block(1024).unwrap();
        for (i, n) in [&b"a"[..], b"bb", b"ccc"].iter().enumerate() {
            insert_entry(&mut block, InodeNo(10 + i as u32), n, 1).unwrap();
        }
        assert_eq!(remove_entry(&mut block, b"bb").unwrap(), Some(InodeNo(11)));
        assert_eq!(names(&block), vec![b"a".to_vec(), b"ccc".to_vec()]);
        assert_eq!(parse_block(&block, None).unwrap()[0].rec_len, 24);
        assert_eq!(remove_entry(&mut block, b"a").unwrap(), Some(InodeNo(10)));
        assert_eq!(remove_entry(&mut block, b"a").unwrap(), None);
        let first = parse_block(&block, None).unwrap()[0];
        assert_eq!((first.inode, first.rec_len), (InodeNo(0), 24));
        // The freed first slot is reused.
        assert_eq!(
            insert_entry(&mut block, InodeNo(7), b"dd", 1).unwrap(),
            Insert::Inserted(0)
        );
        remove_entry(&mut block, b"dd").unwrap();
        remove_entry(&mut block, b"ccc").unwrap();
        assert!(is_empty_block(&block).unwrap());
    }

    #[test]
    fn bad_entries_are_reported_with_offset() {
        let mut block = new_dir_block(1024, InodeNo(2), InodeNo(2)).unwrap();
        put_le16(&mut block, 12 + 4, 10);
        let err = parse_block(&block, None).unwrap_err();
        assert_eq!(err.offset, 12);
        put_le16(&mut block, 12 + 4, 14);
        assert_eq!(parse_block(&block, None).unwrap_err().offset, 12);
        put_le16(&mut block, 12 + 4, 1016);
        assert_eq!(parse_block(&block, None).unwrap_err().offset, 12);
        put_le16(&mut block, 4, 8);
        assert_eq!(parse_block(&block, None).unwrap_err().offset, 0);
        assert!(init_block(65540).is_err());
        assert!(init_block(131072).is_err());
    }

    #[test]
    fn rec_len_of_a_whole_64k_block_is_encoded_as_the_kernel_does() {
        // The kernel writes 65535 (EXT4_MAX_REC_LEN) and reads 65535 and 0
        // as the whole block.
        assert_eq!(rec_len_to_disk(65536, 65536), Some(65535));
        assert_eq!(rec_len_from_disk(65535, 65536), 65536);
        assert_eq!(rec_len_from_disk(0, 65536), 65536);
        // Lengths below 64 KiB are stored as they are, in any block size.
        for len in [12, 24, 4084, 32768, 65520, 65532] {
            assert_eq!(rec_len_to_disk(len, 65536), Some(len as u16));
            assert_eq!(rec_len_from_disk(len as u16, 65536), len);
        }
        // Below 64 KiB blocks the field is plain: 65535 and 0 are just bad.
        assert_eq!(rec_len_from_disk(65535, 32768), 65535);
        assert_eq!(rec_len_from_disk(0, 4096), 0);
        assert_eq!(rec_len_to_disk(4096, 4096), Some(4096));
        // Past 64 KiB (blocks of 128 and 256 KiB): bits 16-17 in the low two.
        assert_eq!(rec_len_to_disk(65536, 131072), Some(1));
        assert_eq!(rec_len_from_disk(1, 131072), 65536);
        assert_eq!(rec_len_to_disk(131072, 131072), Some(0));
        assert_eq!(rec_len_from_disk(0, 131072), 131072);
        assert_eq!(rec_len_to_disk(65536 + 12, 131072), Some(13));
        assert_eq!(rec_len_from_disk(13, 131072), 65536 + 12);
        // No 16-bit value says these.
        assert_eq!(rec_len_to_disk(65537, 131072), None);
        assert_eq!(rec_len_to_disk(131072, 65536), None);
        assert_eq!(rec_len_to_disk(1 << 19, 1 << 19), None);
    }

    #[test]
    fn a_64k_block_reads_and_writes_its_whole_block_entries_encoded() {
        const BS: usize = 65536;
        let mut block = init_block(BS).unwrap();
        assert_eq!(le16(&block, 4), EXT4_MAX_REC_LEN);
        assert_eq!(rec_len_at(&block, 0), BS);
        assert!(is_empty_block(&block).unwrap());
        assert!(looks_like_dx_node(&block));
        // Linux may also have written 0 for the whole block.
        put_le16(&mut block, 4, 0);
        assert_eq!(parse_block(&block, None).unwrap()[0].rec_len, BS);

        let mut block = new_dir_block(BS, InodeNo(12), InodeNo(2)).unwrap();
        assert_eq!(le16(&block, 16), (BS - 12) as u16);
        assert_eq!(parse_block(&block, None).unwrap()[1].rec_len, BS - 12);
        assert_eq!(
            insert_entry(&mut block, InodeNo(20), b"a", 1).unwrap(),
            Insert::Inserted(24)
        );
        assert_eq!(rec_len_at(&block, 24), BS - 24);
        assert_eq!(remove_entry(&mut block, b"a").unwrap(), Some(InodeNo(20)));
        assert_eq!(rec_len_at(&block, 12), BS - 12);

        // A freed first entry spanning the block is stored as 65535 again.
        let mut block = init_block(BS).unwrap();
        insert_entry(&mut block, InodeNo(30), b"only", 1).unwrap();
        assert_eq!(le16(&block, 4), EXT4_MAX_REC_LEN);
        insert_entry(&mut block, InodeNo(31), b"next", 1).unwrap();
        assert_eq!(le16(&block, 4), 12);
        assert_eq!(rec_len_at(&block, 12), BS - 12);
        remove_entry(&mut block, b"next").unwrap();
        assert_eq!(le16(&block, 4), EXT4_MAX_REC_LEN);
        set_rec_len_at(&mut block, 0, 12);
        assert_eq!(le16(&block, 4), 12);
        set_rec_len_at(&mut block, 0, BS);
        assert_eq!(le16(&block, 4), EXT4_MAX_REC_LEN);
    }

    #[test]
    fn random_and_truncated_blocks_never_panic() {
        let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
        let good = new_dir_block(1024, InodeNo(2), InodeNo(2)).unwrap();
        for round in 0..3000 {
            let len = (rng.next() % 1100) as usize;
            let mut b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            if round % 2 == 0 {
                // Mostly-valid blocks reach deeper code paths.
                b = good.clone();
                b.truncate(len.max(1));
                let i = (rng.next() as usize) % b.len();
                b[i] = rng.next() as u8;
            }
            exercise(&mut b, &mut rng);
        }
    }

    /// 64 KiB blocks decode rec_len specially: damage there (0, 65535,
    /// low bits set) must be reported, never panic or loop.
    #[test]
    fn damaged_64k_blocks_never_panic() {
        let mut rng = Rng::new(0x2545_f491_4f6c_dd1d);
        let mut good = new_dir_block(65536, InodeNo(2), InodeNo(2)).unwrap();
        for i in 0..20u32 {
            let name = format!("name{i}");
            insert_entry(&mut good, InodeNo(20 + i), name.as_bytes(), 1).unwrap();
        }
        for _ in 0..300 {
            let mut b = good.clone();
            for _ in 0..1 + rng.next() % 3 {
                let i = (rng.next() % 400) as usize;
                b[i] = [0, 0xff, 3, rng.next() as u8][(rng.next() % 4) as usize];
            }
            exercise(&mut b, &mut rng);
        }
    }

    fn exercise(b: &mut [u8], rng: &mut Rng) {
        let _ = parse_block(b, Some(rng.next() as u32));
        let _ = parse_dx_root(b);
        let _ = parse_dx_node(b);
        let _ = looks_like_dx_root(b) || looks_like_dx_node(b);
        let _ = find_entry(b, b"..");
        let _ = insert_entry(b, InodeNo(3), b"new", 1);
        let _ = remove_entry(b, b".");
        let _ = is_empty_block(b);
        let name: Vec<u8> = (0..rng.next() % 80).map(|_| rng.next() as u8).collect();
        for v in 0..6 {
            let _ = dx_hash(&name, v, &[rng.next() as u32, 0, 0, 0]);
        }
    }
}
