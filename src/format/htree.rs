//! The htree (dir_index) index blocks. They are disguised as directory
//! blocks (a root is "." and ".." with the index after them, an interior
//! node one unused entry spanning the block), so that code without
//! dir_index still reads the directory as a linear one.
//!
//! Two readers, for two kinds of caller: [`parse_dx_root`] and
//! [`parse_dx_node`] check what the kernel's `dx_probe` checks, for the
//! filesystem, which must not follow an index it cannot trust; the field
//! accessors ([`DxRootInfo`], [`dx_countlimit`], [`dx_entry`]) judge
//! nothing, for a checker that must weigh every field itself (e2fsck's
//! pass 1 and 2 do), and return `None` where the block is too short, so
//! nothing read from disk can index past its end. The hashes that order
//! the entries are in [`super::dirhash`].

use super::bytes::{self, le16, le32, put_le16, put_le32};
use super::dirent::{init_block, new_dir_block, rec_len_at};
use super::dirhash::DX_HASH_TEA_UNSIGNED;
use super::{FormatError, InodeNo};

/// `EXT4_HTREE_LEVEL_COMPAT`: index levels (root included) without largedir.
pub const EXT4_HTREE_LEVEL_COMPAT: u8 = 2;
/// `EXT4_HTREE_LEVEL`: index levels with largedir.
pub const EXT4_HTREE_LEVEL: u8 = 3;
/// `EXT4_DX_BLOCK_MASK`: the bits of `dx_entry.block` that are a block.
pub const EXT4_DX_BLOCK_MASK: u32 = 0x0fff_ffff;
/// Where `dx_root_info` starts in a root block: after "." (12) and ".." (12).
pub const DX_ROOT_INFO_OFFSET: usize = 24;
/// Where an interior node's `dx_countlimit` starts: after its fake dirent.
pub const DX_NODE_ENTRIES_OFFSET: usize = 8;
/// `sizeof(struct ext2_dx_entry)`.
pub const DX_ENTRY_SIZE: usize = 8;
/// ext3 allows at most this many index levels below the root.
pub const DX_MAX_INDIRECT_LEVELS: u8 = 1;
/// `unused_flags` bit that makes a tree unreadable to us.
pub const EXT2_HASH_FLAG_INCOMPAT: u8 = 0x1;

const DX_STRUCTURE: &str = "dx_root";
const DX_NODE_STRUCTURE: &str = "dx_node";
const DX_ROOT_INFO_LEN: u8 = 8;
/// Where a root's entry table starts: after its 8-byte `dx_root_info`.
const DX_ROOT_ENTRIES_OFF: usize = DX_ROOT_INFO_OFFSET + DX_ROOT_INFO_LEN as usize;

/// `struct ext2_dx_root_info`, as stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DxRootInfo {
    pub reserved_zero: u32,
    pub hash_version: u8,
    pub info_length: u8,
    pub indirect_levels: u8,
    pub unused_flags: u8,
}

impl DxRootInfo {
    /// The root info of a root block (`None` if the block is too short).
    pub fn read(block: &[u8]) -> Option<Self> {
        let b: [u8; 8] = bytes::get(block, DX_ROOT_INFO_OFFSET)?;
        Some(DxRootInfo {
            reserved_zero: le32(&b, 0),
            hash_version: b[4],
            info_length: b[5],
            indirect_levels: b[6],
            unused_flags: b[7],
        })
    }

    pub fn write(&self, block: &mut [u8]) {
        let mut b = [0u8; 8];
        put_le32(&mut b, 0, self.reserved_zero);
        b[4] = self.hash_version;
        b[5] = self.info_length;
        b[6] = self.indirect_levels;
        b[7] = self.unused_flags;
        bytes::put_bytes(block, DX_ROOT_INFO_OFFSET, &b);
    }

    /// Where the root's `dx_countlimit` (and entry table) starts, as the
    /// kernel and e2fsck find it: right after `info_length` bytes of info.
    pub fn entries_offset(&self) -> usize {
        DX_ROOT_INFO_OFFSET + usize::from(self.info_length)
    }
}

/// `struct ext2_dx_countlimit`, which overlays the first entry's hash.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DxCountLimit {
    pub limit: u16,
    pub count: u16,
}

/// The `dx_countlimit` at `off` (`None` if it does not fit in the block).
pub fn dx_countlimit(block: &[u8], off: usize) -> Option<DxCountLimit> {
    let b = block.get(off..off.checked_add(4)?)?;
    Some(DxCountLimit {
        limit: le16(b, 0),
        count: le16(b, 2),
    })
}

pub fn set_dx_countlimit(block: &mut [u8], off: usize, cl: DxCountLimit) {
    put_le16(block, off, cl.limit);
    put_le16(block, off + 2, cl.count);
}

/// Entry `i` of the table at `off`: (`hash`, `block`) as stored. Entry 0's
/// hash slot holds the countlimit.
pub fn dx_entry(block: &[u8], off: usize, i: usize) -> Option<(u32, u32)> {
    let at = off.checked_add(i.checked_mul(DX_ENTRY_SIZE)?)?;
    let b = block.get(at..at.checked_add(DX_ENTRY_SIZE)?)?;
    Some((le32(b, 0), le32(b, 4)))
}

pub fn set_dx_entry(block: &mut [u8], off: usize, i: usize, hash: u32, blk: u32) {
    let at = off + i * DX_ENTRY_SIZE;
    put_le32(block, at, hash);
    put_le32(block, at + 4, blk);
}

/// Sets only entry `i`'s block (entry 0's hash slot is the countlimit).
pub fn set_dx_entry_block(block: &mut [u8], off: usize, i: usize, blk: u32) {
    put_le32(block, off + i * DX_ENTRY_SIZE + 4, blk);
}

/// The `limit` a table starting at `off` must have: the entries that fit
/// in the rest of the block (no metadata_csum tail in ext3).
pub fn dx_limit(block_size: usize, off: usize) -> usize {
    block_size.saturating_sub(off) / DX_ENTRY_SIZE
}

/// Writes a whole table at `off`: `entries` (entry 0's hash is not
/// stored), then the countlimit over entry 0's hash with the limit the
/// block allows. The caller keeps `entries` within that limit.
pub fn write_dx_table(block: &mut [u8], off: usize, entries: &[(u32, u32)]) {
    let limit = dx_limit(block.len(), off);
    debug_assert!(!entries.is_empty() && entries.len() <= limit);
    for (i, &(hash, blk)) in entries.iter().enumerate() {
        set_dx_entry(block, off, i, hash, blk);
    }
    set_dx_countlimit(
        block,
        off,
        DxCountLimit {
            limit: limit as u16,
            count: entries.len() as u16,
        },
    );
}

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
    dx_limit(block_size, DX_ROOT_ENTRIES_OFF)
}

/// `dx_node_limit`: index entries that fit in an interior block.
pub fn dx_node_limit(block_size: usize) -> usize {
    dx_limit(block_size, DX_NODE_ENTRIES_OFFSET)
}

/// Whether the block has the shape of an htree root: "." then a ".." whose
/// `rec_len` covers the rest, then an 8-byte dx_root_info. The inode's
/// EXT3_INDEX_FL is what really says the directory is indexed.
pub fn looks_like_dx_root(block: &[u8]) -> bool {
    if bytes::need(DX_STRUCTURE, block, DX_ROOT_ENTRIES_OFF).is_err() {
        return false;
    }
    let byte = |off| bytes::byte(block, off);
    let dot = rec_len_at(block, 0) == 12 && byte(6) == 1 && byte(8) == b'.';
    let dotdot_len = rec_len_at(block, 12);
    let dotdot =
        dotdot_len == block.len() - 12 && byte(18) == 2 && block.get(20..22) == Some(&b".."[..]);
    dot && dotdot && le32(block, DX_ROOT_INFO_OFFSET) == 0 && byte(0x1d) == DX_ROOT_INFO_LEN
}

/// Whether the block has the shape of an interior index block: one unused
/// entry spanning the block. An emptied leaf block looks the same, so only
/// the tree's own pointers tell them apart.
pub fn looks_like_dx_node(block: &[u8]) -> bool {
    if bytes::need(DX_NODE_STRUCTURE, block, DX_NODE_ENTRIES_OFFSET).is_err() {
        return false;
    }
    le32(block, 0) == 0 && rec_len_at(block, 0) == block.len() && bytes::byte(block, 6) == 0
}

/// Parses an htree root block, checking what `dx_probe` checks.
pub fn parse_dx_root(block: &[u8]) -> Result<DxRoot, FormatError> {
    bytes::need(DX_STRUCTURE, block, DX_ROOT_ENTRIES_OFF + DX_ENTRY_SIZE)?;
    let root = DxRoot {
        dot_inode: InodeNo(le32(block, 0)),
        dotdot_inode: InodeNo(le32(block, 12)),
        hash_version: bytes::byte(block, 0x1c),
        info_length: bytes::byte(block, 0x1d),
        indirect_levels: bytes::byte(block, 0x1e),
        unused_flags: bytes::byte(block, 0x1f),
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
    if le32(block, DX_ROOT_INFO_OFFSET) != 0 {
        return Err(dx(
            "reserved_zero",
            le32(block, DX_ROOT_INFO_OFFSET).into(),
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
    bytes::need(
        DX_NODE_STRUCTURE,
        block,
        DX_NODE_ENTRIES_OFFSET + DX_ENTRY_SIZE,
    )?;
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
        DX_NODE_ENTRIES_OFFSET,
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
            .get(off + i * DX_ENTRY_SIZE..off + (i + 1) * DX_ENTRY_SIZE)
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
    put_le32(&mut block, DX_ROOT_INFO_OFFSET, 0);
    bytes::put_byte(&mut block, 0x1c, root.hash_version);
    bytes::put_byte(&mut block, 0x1d, DX_ROOT_INFO_LEN);
    bytes::put_byte(&mut block, 0x1e, root.indirect_levels);
    bytes::put_byte(&mut block, 0x1f, root.unused_flags);
    let limit = dx_root_limit(block_size);
    write_dx_entries(&mut block, DX_ROOT_ENTRIES_OFF, limit, &root.entries)?;
    Ok(block)
}

/// Builds an interior index block.
pub fn write_dx_node(block_size: usize, entries: &[DxEntry]) -> Result<Vec<u8>, FormatError> {
    let mut block = init_block(block_size)?;
    let limit = dx_node_limit(block_size);
    write_dx_entries(&mut block, DX_NODE_ENTRIES_OFFSET, limit, entries)?;
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
        put_le32(block, off + i * DX_ENTRY_SIZE, e.hash);
        put_le32(block, off + i * DX_ENTRY_SIZE + 4, e.block);
    }
    // The countlimit overlays entry 0's hash, so it goes in last.
    put_le16(block, off, limit as u16);
    put_le16(block, off + 2, entries.len() as u16);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::dirent::parse_block;
    use crate::format::dirhash::{DX_HASH_HALF_MD4, DX_HASH_TEA};

    #[test]
    fn short_blocks_read_as_none() {
        assert!(DxRootInfo::read(&[0u8; 31]).is_none());
        assert!(dx_countlimit(&[0u8; 10], 8).is_none());
        assert!(dx_countlimit(&[0u8; 12], usize::MAX - 1).is_none());
        assert!(dx_entry(&[0u8; 16], 8, 1).is_none());
        assert!(dx_entry(&[0u8; 16], 8, usize::MAX).is_none());
        assert_eq!(dx_entry(&[1u8; 16], 8, 0), Some((0x0101_0101, 0x0101_0101)));
    }

    #[test]
    fn root_info_round_trips() {
        let mut b = vec![0u8; 1024];
        let info = DxRootInfo {
            reserved_zero: 0,
            hash_version: 1,
            info_length: 8,
            indirect_levels: 1,
            unused_flags: 0,
        };
        info.write(&mut b);
        assert_eq!(DxRootInfo::read(&b), Some(info));
        assert_eq!(info.entries_offset(), 32);
        assert_eq!(dx_limit(1024, 32), 124);
        assert_eq!(dx_limit(1024, DX_NODE_ENTRIES_OFFSET), 127);
        set_dx_countlimit(
            &mut b,
            32,
            DxCountLimit {
                limit: 124,
                count: 2,
            },
        );
        set_dx_entry(&mut b, 32, 1, 0x100, 7);
        set_dx_entry_block(&mut b, 32, 0, 3);
        assert_eq!(
            dx_countlimit(&b, 32),
            Some(DxCountLimit {
                limit: 124,
                count: 2
            })
        );
        assert_eq!(dx_entry(&b, 32, 0).map(|e| e.1), Some(3));
        assert_eq!(dx_entry(&b, 32, 1), Some((0x100, 7)));
    }

    #[test]
    fn a_written_table_reads_back() {
        let mut b = vec![0u8; 1024];
        write_dx_table(
            &mut b,
            DX_NODE_ENTRIES_OFFSET,
            &[(0, 1), (0x10, 2), (0x21, 3)],
        );
        let cl = dx_countlimit(&b, DX_NODE_ENTRIES_OFFSET).unwrap();
        assert_eq!((cl.limit, cl.count), (127, 3));
        assert_eq!(dx_entry(&b, 8, 0).map(|e| e.1), Some(1));
        assert_eq!(dx_entry(&b, 8, 2), Some((0x21, 3)));
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
    fn a_64k_root_and_node_read_back() {
        const BS: usize = 65536;
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
            limit: dx_root_limit(1024) as u16,
            entries: entries.clone(),
            ..sample_dx_root()
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
            hash_version: DX_HASH_TEA,
            entries: vec![DxEntry::default()],
            ..sample_dx_root()
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
}
