//! ext3 directory blocks: linear entries (`ext2_dir_entry_2`), the htree
//! (dir_index) root and node blocks, and the directory hash functions.
//!
//! A 64 KiB block's whole-block `rec_len` does not fit the 16-bit field, so
//! entries are read and written through [`rec_len_from_disk`] and
//! [`rec_len_to_disk`], the kernel's encoding (`ext4_rec_len_from_disk`).

use super::bytes::{self, le16, le32, put_bytes, put_le16, put_le32};
use super::{FormatError, InodeNo};

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
    block[off + DE_NAME_LEN]
}

pub fn set_name_len_at(block: &mut [u8], off: usize, name_len: u8) {
    block[off + DE_NAME_LEN] = name_len;
}

pub fn file_type_at(block: &[u8], off: usize) -> u8 {
    block[off + DE_FILE_TYPE]
}

pub fn set_file_type_at(block: &mut [u8], off: usize, file_type: u8) {
    block[off + DE_FILE_TYPE] = file_type;
}

/// The name bytes of the entry at `off`, as far as the block holds them.
pub fn name_at(block: &[u8], off: usize) -> &[u8] {
    let start = (off + DE_NAME).min(block.len());
    let end = (start + usize::from(name_len_at(block, off))).min(block.len());
    &block[start..end]
}

/// Parses and validates the entry at `off`, as `ext3_check_dir_entry` does.
pub fn entry_at(
    block: &[u8],
    off: usize,
    inodes_count: Option<u32>,
) -> Result<DirEntryRef<'_>, FormatError> {
    let b = block.get(off..).unwrap_or(&[]);
    bytes::need(STRUCTURE, b, DIRENT_HEADER_LEN)?;
    let inode = le32(b, 0);
    let rec_len = rec_len_at(block, off);
    let name_len = b[6];
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
        file_type: b[7],
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
    let len = e.rec_len;
    if e.name.len() != usize::from(e.name_len) {
        return Err(bad("name_len", e.name_len, "does not match the name"));
    }
    check_rec_len(e.rec_len, e.name_len, block.len().saturating_sub(off))?;
    let raw = to_rec_len(len, block.len())?;
    let b = block
        .get_mut(off..off + len)
        .ok_or_else(|| bad("rec_len", len as u64, "directory entry across blocks"))?;
    put_le32(b, DE_INODE, e.inode.0);
    put_le16(b, DE_REC_LEN, raw);
    b[DE_NAME_LEN] = e.name_len;
    b[DE_FILE_TYPE] = e.file_type;
    put_bytes(b, DIRENT_HEADER_LEN, &e.name);
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
    let need = check_new_name(name).map_err(|e| DirentError::new(0, e))?;
    let mut slot = None;
    for e in iter_block(block, None) {
        let e = e?;
        if e.inode.0 != 0 && e.name == name {
            return Ok(Insert::Exists(e.offset));
        }
        let fits = e.rec_len >= e.used_len() + need;
        if slot.is_none() && fits {
            slot = Some((e.offset, e.used_len(), e.rec_len));
        }
    }
    let Some((off, used, rec_len)) = slot else {
        return Ok(Insert::NoSpace);
    };
    let new_off = split_slot(block, off, used)?;
    let entry = DirEntry {
        inode,
        rec_len: rec_len - used,
        name_len: name.len() as u8,
        file_type,
        name: name.to_vec(),
    };
    write_entry(block, new_off, &entry).map_err(|e| DirentError::new(new_off, e))?;
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

// ---------------------------------------------------------------------------
// htree (dir_index)
// ---------------------------------------------------------------------------

pub const DX_HASH_LEGACY: u8 = 0;
pub const DX_HASH_HALF_MD4: u8 = 1;
pub const DX_HASH_TEA: u8 = 2;
pub const DX_HASH_LEGACY_UNSIGNED: u8 = 3;
pub const DX_HASH_HALF_MD4_UNSIGNED: u8 = 4;
pub const DX_HASH_TEA_UNSIGNED: u8 = 5;

/// `EXT2_HTREE_EOF_32BIT`: the hash that marks the end of a readdir.
pub const EXT2_HTREE_EOF_32BIT: u32 = 0x7fff_ffff;
/// ext3 allows at most this many index levels below the root.
pub const DX_MAX_INDIRECT_LEVELS: u8 = 1;
/// `unused_flags` bit that makes a tree unreadable to us.
pub const EXT2_HASH_FLAG_INCOMPAT: u8 = 0x1;

const DX_STRUCTURE: &str = "dx_root";
const DX_NODE_STRUCTURE: &str = "dx_node";
/// Offset of dx_root_info: past the "." (12) and ".." (12) headers.
const DX_ROOT_INFO_OFF: usize = 0x18;
const DX_ROOT_INFO_LEN: u8 = 8;
const DX_ROOT_ENTRIES_OFF: usize = DX_ROOT_INFO_OFF + DX_ROOT_INFO_LEN as usize;
const DX_NODE_ENTRIES_OFF: usize = 8;
const DX_ENTRY_LEN: usize = 8;

/// One index entry: names hashing to >= `hash` live under `block` (a
/// logical block of the directory). The first entry's hash is implicitly 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DxEntry {
    pub hash: u32,
    pub block: u32,
}

/// The root block of an indexed directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DxRoot {
    pub dot_inode: InodeNo,
    pub dotdot_inode: InodeNo,
    pub hash_version: u8,
    pub info_length: u8,
    pub indirect_levels: u8,
    pub unused_flags: u8,
    pub limit: u16,
    /// `count` entries; `entries[0].hash` is 0 (its slot holds countlimit).
    pub entries: Vec<DxEntry>,
}

/// An interior index block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DxNode {
    pub limit: u16,
    pub entries: Vec<DxEntry>,
}

/// `dx_root_limit`: index entries that fit in a root block.
pub fn dx_root_limit(block_size: usize) -> usize {
    block_size.saturating_sub(DX_ROOT_ENTRIES_OFF) / DX_ENTRY_LEN
}

/// `dx_node_limit`: index entries that fit in an interior block.
pub fn dx_node_limit(block_size: usize) -> usize {
    block_size.saturating_sub(DX_NODE_ENTRIES_OFF) / DX_ENTRY_LEN
}

/// Whether the block has the shape of an htree root: "." then a ".." whose
/// `rec_len` covers the rest, then an 8-byte dx_root_info. The inode's
/// EXT3_INDEX_FL is what really says the directory is indexed.
pub fn looks_like_dx_root(block: &[u8]) -> bool {
    if bytes::need(DX_STRUCTURE, block, DX_ROOT_ENTRIES_OFF).is_err() {
        return false;
    }
    let dot = rec_len_at(block, 0) == 12 && block[6] == 1 && block[8] == b'.';
    let dotdot_len = rec_len_at(block, 12);
    let dotdot = dotdot_len == block.len() - 12 && block[18] == 2 && &block[20..22] == b"..";
    dot && dotdot && le32(block, DX_ROOT_INFO_OFF) == 0 && block[0x1d] == DX_ROOT_INFO_LEN
}

/// Whether the block has the shape of an interior index block: one unused
/// entry spanning the block. An emptied leaf block looks the same, so only
/// the tree's own pointers tell them apart.
pub fn looks_like_dx_node(block: &[u8]) -> bool {
    if bytes::need(DX_NODE_STRUCTURE, block, DX_NODE_ENTRIES_OFF).is_err() {
        return false;
    }
    le32(block, 0) == 0 && rec_len_at(block, 0) == block.len() && block[6] == 0
}

/// Parses an htree root block, checking what `dx_probe` checks.
pub fn parse_dx_root(block: &[u8]) -> Result<DxRoot, FormatError> {
    bytes::need(DX_STRUCTURE, block, DX_ROOT_ENTRIES_OFF + DX_ENTRY_LEN)?;
    let root = DxRoot {
        dot_inode: InodeNo(le32(block, 0)),
        dotdot_inode: InodeNo(le32(block, 12)),
        hash_version: block[0x1c],
        info_length: block[0x1d],
        indirect_levels: block[0x1e],
        unused_flags: block[0x1f],
        limit: 0,
        entries: Vec::new(),
    };
    check_dx_root_info(block, &root)?;
    let (limit, entries) = parse_dx_entries(
        DX_STRUCTURE,
        block,
        DX_ROOT_ENTRIES_OFF,
        dx_root_limit(block.len()),
    )?;
    Ok(DxRoot {
        limit,
        entries,
        ..root
    })
}

fn check_dx_root_info(block: &[u8], root: &DxRoot) -> Result<(), FormatError> {
    let dx = |field, value: u64, reason| FormatError::bad_field(DX_STRUCTURE, field, value, reason);
    if le32(block, DX_ROOT_INFO_OFF) != 0 {
        return Err(dx(
            "reserved_zero",
            le32(block, DX_ROOT_INFO_OFF).into(),
            "must be 0",
        ));
    }
    if root.hash_version > DX_HASH_TEA_UNSIGNED {
        return Err(dx("hash_version", root.hash_version.into(), "unknown hash"));
    }
    if root.info_length != DX_ROOT_INFO_LEN {
        return Err(dx("info_length", root.info_length.into(), "must be 8"));
    }
    if root.indirect_levels > DX_MAX_INDIRECT_LEVELS {
        return Err(dx(
            "indirect_levels",
            root.indirect_levels.into(),
            "too deep for ext3",
        ));
    }
    if root.unused_flags & EXT2_HASH_FLAG_INCOMPAT != 0 {
        return Err(dx(
            "unused_flags",
            root.unused_flags.into(),
            "incompatible hash flags",
        ));
    }
    Ok(())
}

/// Parses an interior index block.
pub fn parse_dx_node(block: &[u8]) -> Result<DxNode, FormatError> {
    bytes::need(DX_NODE_STRUCTURE, block, DX_NODE_ENTRIES_OFF + DX_ENTRY_LEN)?;
    if !looks_like_dx_node(block) {
        return Err(FormatError::bad_field(
            DX_NODE_STRUCTURE,
            "rec_len",
            le16(block, 4),
            "fake dirent must be unused and span the block",
        ));
    }
    let (limit, entries) = parse_dx_entries(
        DX_NODE_STRUCTURE,
        block,
        DX_NODE_ENTRIES_OFF,
        dx_node_limit(block.len()),
    )?;
    Ok(DxNode { limit, entries })
}

/// Reads dx_countlimit at `off` and the `count` entries it governs.
fn parse_dx_entries(
    structure: &'static str,
    block: &[u8],
    off: usize,
    expect_limit: usize,
) -> Result<(u16, Vec<DxEntry>), FormatError> {
    let limit = le16(block, off);
    let count = le16(block, off + 2);
    if usize::from(limit) != expect_limit {
        return Err(FormatError::bad_field(
            structure,
            "limit",
            limit,
            "wrong for block size",
        ));
    }
    if count == 0 || count > limit {
        return Err(FormatError::bad_field(
            structure,
            "count",
            count,
            "must be 1..=limit",
        ));
    }
    let mut entries = Vec::with_capacity(count.into());
    for i in 0..usize::from(count) {
        let e = block
            .get(off + i * DX_ENTRY_LEN..off + (i + 1) * DX_ENTRY_LEN)
            .ok_or_else(|| FormatError::bad_field(structure, "count", count, "past block end"))?;
        let hash = if i == 0 { 0 } else { le32(e, 0) };
        entries.push(DxEntry {
            hash,
            block: le32(e, 4),
        });
    }
    Ok((limit, entries))
}

/// Builds an htree root block. `root.limit` is ignored (it follows from the
/// block size) and `entries[0].hash` is not stored.
pub fn write_dx_root(block_size: usize, root: &DxRoot) -> Result<Vec<u8>, FormatError> {
    let mut block = new_dir_block(block_size, root.dot_inode, root.dotdot_inode)?;
    put_le32(&mut block, DX_ROOT_INFO_OFF, 0);
    block[0x1c] = root.hash_version;
    block[0x1d] = DX_ROOT_INFO_LEN;
    block[0x1e] = root.indirect_levels;
    block[0x1f] = root.unused_flags;
    let limit = dx_root_limit(block_size);
    write_dx_entries(&mut block, DX_ROOT_ENTRIES_OFF, limit, &root.entries)?;
    Ok(block)
}

/// Builds an interior index block.
pub fn write_dx_node(block_size: usize, entries: &[DxEntry]) -> Result<Vec<u8>, FormatError> {
    let mut block = init_block(block_size)?;
    let limit = dx_node_limit(block_size);
    write_dx_entries(&mut block, DX_NODE_ENTRIES_OFF, limit, entries)?;
    Ok(block)
}

fn write_dx_entries(
    block: &mut [u8],
    off: usize,
    limit: usize,
    entries: &[DxEntry],
) -> Result<(), FormatError> {
    if entries.is_empty() || entries.len() > limit {
        let n = entries.len() as u64;
        return Err(FormatError::bad_field(
            "dx_countlimit",
            "count",
            n,
            "must be 1..=limit",
        ));
    }
    for (i, e) in entries.iter().enumerate() {
        put_le32(block, off + i * DX_ENTRY_LEN, e.hash);
        put_le32(block, off + i * DX_ENTRY_LEN + 4, e.block);
    }
    // The countlimit overlays entry 0's hash, so it goes in last.
    put_le16(block, off, limit as u16);
    put_le16(block, off + 2, entries.len() as u16);
    Ok(())
}

// ---------------------------------------------------------------------------
// Directory hashes (fs/ext4/hash.c)
// ---------------------------------------------------------------------------

/// Seed used when `s_hash_seed` is all zeroes.
pub const DX_DEFAULT_SEED: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];

/// The version the kernel hashes with: an on-disk signed version is bumped
/// to its unsigned twin when the superblock has EXT2_FLAGS_UNSIGNED_HASH.
pub fn effective_hash_version(on_disk: u8, unsigned_hash: bool) -> u8 {
    if unsigned_hash && on_disk <= DX_HASH_TEA {
        on_disk + 3
    } else {
        on_disk
    }
}

/// `ext4fs_dirhash`: (hash, minor_hash) of `name`. `seed` is s_hash_seed
/// as four little-endian words.
pub fn dx_hash(name: &[u8], hash_version: u8, seed: &[u32; 4]) -> Result<(u32, u32), FormatError> {
    let mut buf = if seed.iter().all(|&w| w == 0) {
        DX_DEFAULT_SEED
    } else {
        *seed
    };
    let unsigned = hash_version >= DX_HASH_LEGACY_UNSIGNED;
    let (hash, minor) = match hash_version {
        DX_HASH_LEGACY | DX_HASH_LEGACY_UNSIGNED => (dx_hack_hash(name, unsigned), 0),
        DX_HASH_HALF_MD4 | DX_HASH_HALF_MD4_UNSIGNED => {
            for_chunks(name, 32, unsigned, |w| half_md4_transform(&mut buf, w));
            (buf[1], buf[2])
        }
        DX_HASH_TEA | DX_HASH_TEA_UNSIGNED => {
            for_chunks(name, 16, unsigned, |w| tea_transform(&mut buf, w));
            (buf[0], buf[1])
        }
        v => return Err(bad("hash_version", v, "unknown directory hash")),
    };
    Ok((fix_hash(hash), minor))
}

/// Feeds `name` to a transform `step` bytes at a time.
fn for_chunks(name: &[u8], step: usize, unsigned: bool, mut f: impl FnMut(&[u32; 8])) {
    let mut rest = name;
    while !rest.is_empty() {
        f(&str2hashbuf(rest, step, unsigned));
        rest = rest.get(step..).unwrap_or(&[]);
    }
}

fn fix_hash(hash: u32) -> u32 {
    let hash = hash & !1;
    if hash == EXT2_HTREE_EOF_32BIT << 1 {
        (EXT2_HTREE_EOF_32BIT - 1) << 1
    } else {
        hash
    }
}

/// A name byte as C's `char` (signed) or `unsigned char` would widen it.
fn widen(c: u8, unsigned: bool) -> u32 {
    if unsigned {
        c.into()
    } else {
        c as i8 as i32 as u32
    }
}

fn dx_hack_hash(name: &[u8], unsigned: bool) -> u32 {
    let (mut hash0, mut hash1) = (0x12a3_fe2du32, 0x37ab_e8f9u32);
    for &c in name {
        let mut hash = hash1.wrapping_add(hash0 ^ widen(c, unsigned).wrapping_mul(7_152_373));
        if hash & 0x8000_0000 != 0 {
            hash = hash.wrapping_sub(0x7fff_ffff);
        }
        hash1 = hash0;
        hash0 = hash;
    }
    hash0 << 1
}

/// Packs the first `num_bytes` of `rest` into words, padding with a pattern
/// made from the length of all of `rest` (not just the bytes used).
fn str2hashbuf(rest: &[u8], num_bytes: usize, unsigned: bool) -> [u32; 8] {
    let msg = rest.get(..num_bytes).unwrap_or(rest);
    let len32 = rest.len() as u32;
    let mut pad = len32 | (len32 << 8);
    pad |= pad << 16;
    let mut out = [pad; 8];
    let mut val = pad;
    for (i, &c) in msg.iter().enumerate() {
        val = widen(c, unsigned).wrapping_add(val << 8);
        if i % 4 == 3 {
            out[i / 4] = val;
            val = pad;
        }
    }
    if msg.len() % 4 != 0 {
        out[msg.len() / 4] = val;
    }
    out
}

fn tea_transform(buf: &mut [u32; 4], input: &[u32; 8]) {
    const DELTA: u32 = 0x9E37_79B9;
    let (mut b0, mut b1) = (buf[0], buf[1]);
    let [a, b, c, d, ..] = *input;
    let mut sum = 0u32;
    for _ in 0..16 {
        sum = sum.wrapping_add(DELTA);
        b0 = b0.wrapping_add(
            (b1 << 4).wrapping_add(a) ^ b1.wrapping_add(sum) ^ (b1 >> 5).wrapping_add(b),
        );
        b1 = b1.wrapping_add(
            (b0 << 4).wrapping_add(c) ^ b0.wrapping_add(sum) ^ (b0 >> 5).wrapping_add(d),
        );
    }
    buf[0] = buf[0].wrapping_add(b0);
    buf[1] = buf[1].wrapping_add(b1);
}

fn half_md4_transform(buf: &mut [u32; 4], x: &[u32; 8]) {
    const K2: u32 = 0x5A82_7999;
    const K3: u32 = 0x6ED9_EBA1;
    let f = |x: u32, y: u32, z: u32| z ^ (x & (y ^ z));
    let g = |x: u32, y: u32, z: u32| (x & y).wrapping_add((x ^ y) & z);
    let h = |x: u32, y: u32, z: u32| x ^ y ^ z;
    let mut s = *buf;
    // Each round updates s[a] from the other three, rotating which is `a`.
    let mut round = |fun: &dyn Fn(u32, u32, u32) -> u32, k: u32, order: [(usize, u32); 8]| {
        for (step, (xi, rot)) in order.iter().enumerate() {
            let a = (4 - step % 4) % 4;
            let (b, c, d) = ((a + 1) % 4, (a + 2) % 4, (a + 3) % 4);
            let v = s[a]
                .wrapping_add(fun(s[b], s[c], s[d]))
                .wrapping_add(x[*xi].wrapping_add(k));
            s[a] = v.rotate_left(*rot);
        }
    };
    round(
        &f,
        0,
        [
            (0, 3),
            (1, 7),
            (2, 11),
            (3, 19),
            (4, 3),
            (5, 7),
            (6, 11),
            (7, 19),
        ],
    );
    round(
        &g,
        K2,
        [
            (1, 3),
            (3, 5),
            (5, 9),
            (7, 13),
            (0, 3),
            (2, 5),
            (4, 9),
            (6, 13),
        ],
    );
    round(
        &h,
        K3,
        [
            (3, 3),
            (7, 9),
            (2, 11),
            (6, 15),
            (1, 3),
            (5, 9),
            (0, 11),
            (4, 15),
        ],
    );
    for (dst, v) in buf.iter_mut().zip(s) {
        *dst = dst.wrapping_add(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic xorshift64, so failures reproduce.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

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

    fn sample_dx_root() -> DxRoot {
        DxRoot {
            dot_inode: InodeNo(12),
            dotdot_inode: InodeNo(2),
            hash_version: DX_HASH_HALF_MD4,
            info_length: 8,
            indirect_levels: 0,
            unused_flags: 0,
            limit: 0,
            entries: vec![DxEntry { hash: 0, block: 1 }, DxEntry { hash: 8, block: 2 }],
        }
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

        let root = write_dx_root(BS, &sample_dx_root()).unwrap();
        assert!(looks_like_dx_root(&root));
        assert_eq!(
            parse_dx_root(&root).unwrap().limit as usize,
            dx_root_limit(BS)
        );
        let node = write_dx_node(BS, &sample_dx_root().entries).unwrap();
        assert_eq!(
            parse_dx_node(&node).unwrap().limit as usize,
            dx_node_limit(BS)
        );
    }

    #[test]
    fn dx_root_and_node_round_trip() {
        let entries: Vec<DxEntry> = (0..5)
            .map(|i| DxEntry {
                hash: if i == 0 { 0 } else { i * 0x1000_0000 },
                block: i + 1,
            })
            .collect();
        let root = DxRoot {
            dot_inode: InodeNo(12),
            dotdot_inode: InodeNo(2),
            hash_version: DX_HASH_HALF_MD4,
            info_length: 8,
            indirect_levels: 0,
            unused_flags: 0,
            limit: dx_root_limit(1024) as u16,
            entries: entries.clone(),
        };
        let block = write_dx_root(1024, &root).unwrap();
        assert!(looks_like_dx_root(&block));
        assert_eq!(parse_dx_root(&block).unwrap(), root);
        assert_eq!(root.limit, 124);
        // The root still reads as a valid linear block holding "." and "..".
        assert_eq!(parse_block(&block, None).unwrap().len(), 2);
        let node = write_dx_node(1024, &entries).unwrap();
        assert!(looks_like_dx_node(&node));
        let parsed = parse_dx_node(&node).unwrap();
        assert_eq!((parsed.limit, parsed.entries), (127, entries));
    }

    #[test]
    fn dx_root_rejects_bad_info() {
        let root = DxRoot {
            dot_inode: InodeNo(12),
            dotdot_inode: InodeNo(2),
            hash_version: DX_HASH_TEA,
            info_length: 8,
            indirect_levels: 0,
            unused_flags: 0,
            limit: 0,
            entries: vec![DxEntry::default()],
        };
        let good = write_dx_root(1024, &root).unwrap();
        for (off, v) in [
            (0x1c, 9u8),
            (0x1d, 4),
            (0x1e, 2),
            (0x1f, 1),
            (0x22, 0),
            (0x20, 1),
        ] {
            let mut b = good.clone();
            b[off] = v;
            assert!(parse_dx_root(&b).is_err(), "offset {off:#x}");
        }
    }

    const SEED: [u32; 4] = [0xbfc9_2537, 0x6048_f371, 0x1ad4_d0b4, 0x1a9a_e134];
    const LONG: &[u8] = b"caf\xc3\xa9_long_name_with_more_than_thirty_two_bytes_x";
    const ALNUM: &[u8] =
        b"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789";

    /// (name, hash_version, seed, hash, minor_hash)
    type HashCase<'a> = (&'a [u8], u8, &'a [u32; 4], u32, u32);

    /// Values printed by e2fsprogs 1.47 `debugfs -R "dx_hash -h H [-s S] NAME"`.
    #[test]
    fn hashes_match_debugfs() {
        let zero = [0u32; 4];
        let cases: &[HashCase] = &[
            (b"name3", DX_HASH_LEGACY, &zero, 0xa7fc_f5ce, 0),
            (LONG, DX_HASH_LEGACY, &zero, 0x8fd6_63c4, 0),
            (ALNUM, DX_HASH_LEGACY, &zero, 0xe078_7e10, 0),
            (b"name3", DX_HASH_HALF_MD4, &SEED, 0x0d69_2bb8, 0xd40c_2bbc),
            (b"name3", DX_HASH_HALF_MD4, &zero, 0x6689_95ec, 0x6e06_ab07),
            (LONG, DX_HASH_HALF_MD4, &SEED, 0x69f8_c304, 0x0553_dbf3),
            (LONG, DX_HASH_HALF_MD4, &zero, 0x5370_36f6, 0xf50b_cddc),
            (ALNUM, DX_HASH_HALF_MD4, &SEED, 0xb065_ed7a, 0x77ad_86f8),
            (ALNUM, DX_HASH_HALF_MD4, &zero, 0x201f_dc7c, 0xcd81_d85b),
            (b"name3", DX_HASH_TEA, &SEED, 0xb295_2034, 0x71d0_e50d),
            (b"name3", DX_HASH_TEA, &zero, 0xeafa_1730, 0xc378_4348),
            (LONG, DX_HASH_TEA, &SEED, 0xa4b9_6f0a, 0x6e30_c9e9),
            (LONG, DX_HASH_TEA, &zero, 0x1159_3df6, 0xa8f7_02a4),
            (ALNUM, DX_HASH_TEA, &SEED, 0x3c92_5f08, 0x0066_6736),
            (ALNUM, DX_HASH_TEA, &zero, 0xfa94_0220, 0xc032_b74f),
            (LONG, DX_HASH_LEGACY_UNSIGNED, &zero, 0xbda9_d258, 0),
            (
                LONG,
                DX_HASH_HALF_MD4_UNSIGNED,
                &zero,
                0xa72f_8112,
                0xd36b_b104,
            ),
            (LONG, DX_HASH_TEA_UNSIGNED, &zero, 0x38da_6168, 0x9faf_03c2),
        ];
        for &(name, v, seed, hash, minor) in cases {
            let got = dx_hash(name, v, seed).unwrap();
            assert_eq!(got, (hash, minor), "{} v{v}", String::from_utf8_lossy(name));
        }
        assert!(dx_hash(b"x", 6, &zero).is_err());
    }

    #[test]
    fn hash_low_bit_clear_and_eof_avoided() {
        assert_eq!(fix_hash(0xffff_ffff), 0xffff_fffc);
        assert_eq!(fix_hash(0xffff_fffe), 0xffff_fffc);
        assert_eq!(fix_hash(0x1235), 0x1234);
        assert_eq!(
            effective_hash_version(DX_HASH_TEA, true),
            DX_HASH_TEA_UNSIGNED
        );
        assert_eq!(effective_hash_version(DX_HASH_TEA, false), DX_HASH_TEA);
    }

    #[test]
    fn random_and_truncated_blocks_never_panic() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
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
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
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
