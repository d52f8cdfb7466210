//! The htree (dir_index) structures read field by field, without judging
//! them: `dx_root_info`, `dx_countlimit` and `dx_entry` at the kernel's
//! offsets, for a checker that must weigh every field itself (e2fsck's
//! pass 1 and 2 do). Each accessor returns `None` where the block is too
//! short, so nothing read from disk can index past its end. The validating
//! parser, the writer and the hash functions are in [`super::dirent`].

use super::bytes::{le16, le32, put_le16, put_le32};

/// `EXT2_HASH_SIPHASH`: only for encrypted casefolded directories (ext4).
pub const DX_HASH_SIPHASH: u8 = 6;
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
        let b = block.get(DX_ROOT_INFO_OFFSET..DX_ROOT_INFO_OFFSET + 8)?;
        Some(DxRootInfo {
            reserved_zero: le32(b, 0),
            hash_version: b[4],
            info_length: b[5],
            indirect_levels: b[6],
            unused_flags: b[7],
        })
    }

    pub fn write(&self, block: &mut [u8]) {
        let b = &mut block[DX_ROOT_INFO_OFFSET..DX_ROOT_INFO_OFFSET + 8];
        put_le32(b, 0, self.reserved_zero);
        b[4] = self.hash_version;
        b[5] = self.info_length;
        b[6] = self.indirect_levels;
        b[7] = self.unused_flags;
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
