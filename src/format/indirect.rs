//! ext3 indirect block maps: where a logical block's pointer lives in the
//! i_block[] tree, pointer slots in indirect blocks, and file size limits.

use super::bytes::{le32, put_le32};
use super::{BlockNo, FormatError};

const STRUCTURE: &str = "indirect block";

pub const EXT3_NDIR_BLOCKS: usize = 12;
pub const EXT3_IND_BLOCK: usize = EXT3_NDIR_BLOCKS;
pub const EXT3_DIND_BLOCK: usize = EXT3_IND_BLOCK + 1;
pub const EXT3_TIND_BLOCK: usize = EXT3_DIND_BLOCK + 1;
pub const EXT3_N_BLOCKS: usize = EXT3_TIND_BLOCK + 1;

/// The kernel's `MAX_LFS_FILESIZE` on 64-bit hosts.
pub const MAX_LFS_FILESIZE: u64 = i64::MAX as u64;

/// Where a logical block's pointer is: `offsets[0]` indexes i_block[], each
/// later offset indexes the indirect block named by the previous level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockPath {
    /// Levels used, 1 (direct) to 4 (triple indirect).
    pub depth: usize,
    offsets: [u32; 4],
    /// Logical blocks after this one whose pointers sit in the same
    /// last-level block (or i_block[] for direct blocks): the kernel's
    /// `boundary`, used to batch allocation.
    pub blocks_to_boundary: u32,
}

impl BlockPath {
    pub fn offsets(&self) -> &[u32] {
        self.offsets.get(..self.depth).unwrap_or(&self.offsets)
    }
}

/// Pointers per indirect block (`EXT3_ADDR_PER_BLOCK`) for a valid block size.
pub fn ptrs_per_block(block_size: u32) -> Result<u32, FormatError> {
    if block_size.is_power_of_two() && (1024..=65536).contains(&block_size) {
        Ok(block_size / 4)
    } else {
        Err(FormatError::bad_field(
            STRUCTURE,
            "block size",
            block_size,
            "must be a power of two in 1024..=65536",
        ))
    }
}

/// Logical blocks addressable through i_block[]: 12 + p + p^2 + p^3.
pub fn max_file_blocks(block_size: u32) -> Result<u64, FormatError> {
    let p = u64::from(ptrs_per_block(block_size)?);
    Ok(EXT3_NDIR_BLOCKS as u64 + p + p * p + p * p * p)
}

/// `ext3_block_to_path`: the path to `logical`'s pointer.
pub fn block_to_path(block_size: u32, logical: u64) -> Result<BlockPath, FormatError> {
    let p = u64::from(ptrs_per_block(block_size)?);
    let direct = EXT3_NDIR_BLOCKS as u64;
    // The leaf is the last offset of the path, named again so that it need
    // not be looked up by depth.
    let (depth, offsets, leaf, last) = if logical < direct {
        (1, [logical, 0, 0, 0], logical, direct)
    } else if logical - direct < p {
        let i = logical - direct;
        (2, [EXT3_IND_BLOCK as u64, i, 0, 0], i, p)
    } else if logical - direct - p < p * p {
        let i = logical - direct - p;
        (3, [EXT3_DIND_BLOCK as u64, i / p, i % p, 0], i % p, p)
    } else if logical - direct - p - p * p < p * p * p {
        let i = logical - direct - p - p * p;
        (
            4,
            [EXT3_TIND_BLOCK as u64, i / (p * p), (i / p) % p, i % p],
            i % p,
            p,
        )
    } else {
        return Err(FormatError::bad_field(
            STRUCTURE,
            "logical block",
            logical,
            "beyond the triple-indirect limit",
        ));
    };
    // Every value is below p (at most 16384) or 12, so the narrowing is exact.
    Ok(BlockPath {
        depth,
        offsets: offsets.map(|o| o as u32),
        blocks_to_boundary: (last - 1 - leaf) as u32,
    })
}

/// `ext3_max_size`: the largest file size, limited by the tree's reach and
/// by i_blocks counting at most 2^32 - 1 sectors of data plus indirect
/// blocks (ext3 has no huge_file).
pub fn ext3_max_size(block_size: u32) -> Result<u64, FormatError> {
    let p = u64::from(ptrs_per_block(block_size)?);
    let bits = block_size.trailing_zeros();
    let meta_blocks = 1 + (1 + p) + (1 + p + p * p);
    let sectors_limit = ((1u64 << 32) - 1) >> (bits - 9);
    let tree_limit = max_file_blocks(block_size)? << bits;
    // For 32 and 64 KiB blocks ext3's formula, which counts every indirect
    // block of a full tree, goes negative; ext4 (which mounts ext3 today)
    // counts only the indirect blocks a file of the i_blocks limit needs.
    let upper_limit = match sectors_limit.checked_sub(meta_blocks) {
        Some(blocks) => blocks << bits,
        None => bitmap_limit_blocks(sectors_limit, p) << bits,
    };
    Ok(tree_limit.min(upper_limit).min(MAX_LFS_FILESIZE))
}

/// `ext4_max_bitmap_size` without huge_file, past the point where the tree
/// no longer limits the size: the data blocks of a dense file whose data
/// and indirect blocks together are `limit` blocks.
fn bitmap_limit_blocks(limit: u64, p: u64) -> u64 {
    let mut left = limit - EXT3_NDIR_BLOCKS as u64 - p;
    // The single indirect block.
    let mut meta = 1;
    if left < p * p {
        meta += 1 + left.div_ceil(p);
        return limit - meta;
    }
    meta += 1 + p;
    left -= p * p;
    meta += 1 + left.div_ceil(p) + left.div_ceil(p * p);
    limit - meta
}

fn slot_offset(block: &[u8], slot: u32) -> Result<usize, FormatError> {
    let off = slot as usize * 4;
    if off + 4 <= block.len() {
        Ok(off)
    } else {
        Err(FormatError::bad_field(
            STRUCTURE,
            "slot",
            slot,
            "past the end of the block",
        ))
    }
}

/// Reads pointer `slot` of an indirect block (0 means a hole).
pub fn get_ptr(block: &[u8], slot: u32) -> Result<BlockNo, FormatError> {
    let off = slot_offset(block, slot)?;
    Ok(BlockNo(le32(block, off)))
}

/// Writes pointer `slot` of an indirect block.
pub fn set_ptr(block: &mut [u8], slot: u32, ptr: BlockNo) -> Result<(), FormatError> {
    let off = slot_offset(block, slot)?;
    put_le32(block, off, ptr.0);
    Ok(())
}

/// All pointers of an indirect block, in slot order.
pub fn ptrs(block: &[u8]) -> impl Iterator<Item = BlockNo> + '_ {
    block.chunks_exact(4).map(|c| BlockNo(le32(c, 0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(bs: u32, l: u64) -> (Vec<u32>, u32) {
        let p = block_to_path(bs, l).unwrap();
        (p.offsets().to_vec(), p.blocks_to_boundary)
    }

    #[test]
    fn every_level_edge() {
        for bs in [1024u32, 2048, 4096] {
            let p = u64::from(bs / 4);
            let pm = p as u32 - 1;
            let d = 12;
            assert_eq!(path(bs, 0), (vec![0], 11));
            assert_eq!(path(bs, 11), (vec![11], 0));
            assert_eq!(path(bs, d), (vec![12, 0], pm));
            assert_eq!(path(bs, d + p - 1), (vec![12, pm], 0));
            assert_eq!(path(bs, d + p), (vec![13, 0, 0], pm));
            assert_eq!(path(bs, d + p + 1), (vec![13, 0, 1], pm - 1));
            assert_eq!(path(bs, d + p + p), (vec![13, 1, 0], pm));
            assert_eq!(path(bs, d + p + p * p - 1), (vec![13, pm, pm], 0));
            assert_eq!(path(bs, d + p + p * p), (vec![14, 0, 0, 0], pm));
            assert_eq!(path(bs, d + p + p * p + p), (vec![14, 0, 1, 0], pm));
            assert_eq!(path(bs, d + p + p * p + p * p), (vec![14, 1, 0, 0], pm));
            let last = max_file_blocks(bs).unwrap() - 1;
            assert_eq!(last, d + p + p * p + p * p * p - 1);
            assert_eq!(path(bs, last), (vec![14, pm, pm, pm], 0));
            assert!(block_to_path(bs, last + 1).is_err());
            assert!(block_to_path(bs, u64::MAX).is_err());
        }
    }

    #[test]
    fn depth_matches_offsets() {
        assert_eq!(block_to_path(1024, 5).unwrap().depth, 1);
        assert_eq!(block_to_path(1024, 12).unwrap().depth, 2);
        assert_eq!(block_to_path(1024, 12 + 256).unwrap().depth, 3);
        assert_eq!(block_to_path(1024, 12 + 256 + 65536).unwrap().depth, 4);
    }

    #[test]
    fn max_sizes_match_ext3() {
        // 1k and 2k are limited by the tree, 4k by i_blocks.
        assert_eq!(ext3_max_size(1024).unwrap(), 16_843_020 * 1024);
        assert_eq!(ext3_max_size(2048).unwrap(), 134_480_396 * 2048);
        assert_eq!(ext3_max_size(4096).unwrap(), 2_194_719_883_264);
        assert!(ext3_max_size(1024).unwrap() > 16 << 30);
        assert!(ext3_max_size(2048).unwrap() > 256 << 30);
        assert!(ext3_max_size(4096).unwrap() < 2 << 40);
        assert!(ext3_max_size(1000).is_err());
        assert!(ext3_max_size(16384).is_ok());
        // 2^32 - 1 sectors are 33,554,431 blocks of 64 KiB, 2,049 of them
        // indirect (ext4_max_bitmap_size).
        assert_eq!(ext3_max_size(65536).unwrap(), (33_554_431 - 2_049) << 16);
        assert_eq!(ext3_max_size(32768).unwrap(), (67_108_863 - 8_193) << 15);
        assert!(ext3_max_size(131072).is_err());
    }

    #[test]
    fn pointer_slots_round_trip() {
        let mut b = vec![0u8; 1024];
        set_ptr(&mut b, 0, BlockNo(7)).unwrap();
        set_ptr(&mut b, 255, BlockNo(0xdead_beef)).unwrap();
        assert_eq!(get_ptr(&b, 0).unwrap(), BlockNo(7));
        assert_eq!(get_ptr(&b, 255).unwrap(), BlockNo(0xdead_beef));
        assert!(get_ptr(&b, 256).is_err());
        assert!(set_ptr(&mut b, u32::MAX, BlockNo(1)).is_err());
        assert!(get_ptr(&b[..3], 0).is_err());
        let all: Vec<_> = ptrs(&b).collect();
        assert_eq!(
            (all.len(), all[0], all[255]),
            (256, BlockNo(7), BlockNo(0xdead_beef))
        );
    }

    #[test]
    fn random_inputs_never_panic() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let bs = 1u32 << (x % 20);
            let _ = block_to_path(bs, x >> (x % 64));
            let _ = ext3_max_size(bs);
            let _ = get_ptr(&[0u8; 10], (x >> 32) as u32);
        }
    }
}
