//! Block group descriptors (struct ext2_group_desc, 32 bytes each), stored in
//! the blocks right after each superblock copy.

use super::bytes::*;
use super::{BlockNo, FormatError};

pub const GROUP_DESC_SIZE: usize = 32;

/// `bg_flags`: the group's inode table is not initialised (uninit_bg).
pub const EXT2_BG_INODE_UNINIT: u16 = 0x0001;
/// `bg_flags`: the group's block bitmap is not initialised (uninit_bg).
pub const EXT2_BG_BLOCK_UNINIT: u16 = 0x0002;

const S: &str = "group descriptor";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupDesc {
    pub bg_block_bitmap: u32,
    pub bg_inode_bitmap: u32,
    pub bg_inode_table: u32,
    pub bg_free_blocks_count: u16,
    pub bg_free_inodes_count: u16,
    pub bg_used_dirs_count: u16,
    pub bg_flags: u16,
    pub bg_exclude_bitmap_lo: u32,
    pub bg_block_bitmap_csum_lo: u16,
    pub bg_inode_bitmap_csum_lo: u16,
    pub bg_itable_unused: u16,
    pub bg_checksum: u16,
}

impl GroupDesc {
    pub fn parse(buf: &[u8]) -> Result<Self, FormatError> {
        need(S, buf, GROUP_DESC_SIZE)?;
        Ok(GroupDesc {
            bg_block_bitmap: le32(buf, 0x00),
            bg_inode_bitmap: le32(buf, 0x04),
            bg_inode_table: le32(buf, 0x08),
            bg_free_blocks_count: le16(buf, 0x0C),
            bg_free_inodes_count: le16(buf, 0x0E),
            bg_used_dirs_count: le16(buf, 0x10),
            bg_flags: le16(buf, 0x12),
            bg_exclude_bitmap_lo: le32(buf, 0x14),
            bg_block_bitmap_csum_lo: le16(buf, 0x18),
            bg_inode_bitmap_csum_lo: le16(buf, 0x1A),
            bg_itable_unused: le16(buf, 0x1C),
            bg_checksum: le16(buf, 0x1E),
        })
    }

    pub fn write(&self, buf: &mut [u8]) {
        put_le32(buf, 0x00, self.bg_block_bitmap);
        put_le32(buf, 0x04, self.bg_inode_bitmap);
        put_le32(buf, 0x08, self.bg_inode_table);
        put_le16(buf, 0x0C, self.bg_free_blocks_count);
        put_le16(buf, 0x0E, self.bg_free_inodes_count);
        put_le16(buf, 0x10, self.bg_used_dirs_count);
        put_le16(buf, 0x12, self.bg_flags);
        put_le32(buf, 0x14, self.bg_exclude_bitmap_lo);
        put_le16(buf, 0x18, self.bg_block_bitmap_csum_lo);
        put_le16(buf, 0x1A, self.bg_inode_bitmap_csum_lo);
        put_le16(buf, 0x1C, self.bg_itable_unused);
        put_le16(buf, 0x1E, self.bg_checksum);
    }

    pub fn to_bytes(&self) -> [u8; GROUP_DESC_SIZE] {
        let mut b = [0u8; GROUP_DESC_SIZE];
        self.write(&mut b);
        b
    }

    /// Checks that the group's bitmaps and inode table lie inside the
    /// filesystem, so that later reads of them are in range.
    pub fn validate(
        &self,
        first_data_block: u32,
        blocks_count: u32,
        itable_blocks: u32,
    ) -> Result<(), FormatError> {
        let in_range = |b: u32, len: u32| {
            b >= first_data_block && b.checked_add(len).is_some_and(|end| end <= blocks_count)
        };
        if !in_range(self.bg_block_bitmap, 1) {
            return Err(FormatError::bad_field(
                S,
                "bg_block_bitmap",
                self.bg_block_bitmap,
                "outside the filesystem",
            ));
        }
        if !in_range(self.bg_inode_bitmap, 1) {
            return Err(FormatError::bad_field(
                S,
                "bg_inode_bitmap",
                self.bg_inode_bitmap,
                "outside the filesystem",
            ));
        }
        if !in_range(self.bg_inode_table, itable_blocks) {
            return Err(FormatError::bad_field(
                S,
                "bg_inode_table",
                self.bg_inode_table,
                "outside the filesystem",
            ));
        }
        Ok(())
    }

    pub fn block_bitmap(&self) -> BlockNo {
        BlockNo(self.bg_block_bitmap)
    }

    pub fn inode_bitmap(&self) -> BlockNo {
        BlockNo(self.bg_inode_bitmap)
    }

    pub fn inode_table(&self) -> BlockNo {
        BlockNo(self.bg_inode_table)
    }
}

/// Parses the descriptors of `count` groups from the concatenated table blocks.
pub fn parse_table(buf: &[u8], count: u32) -> Result<Vec<GroupDesc>, FormatError> {
    need(S, buf, count as usize * GROUP_DESC_SIZE)?;
    buf.chunks_exact(GROUP_DESC_SIZE)
        .take(count as usize)
        .map(GroupDesc::parse)
        .collect()
}

/// Serializes descriptors into a table padded with zeros to `blocks` blocks.
pub fn table_to_bytes(descs: &[GroupDesc], block_size: usize, blocks: usize) -> Vec<u8> {
    let mut out = vec![0u8; block_size * blocks];
    for (d, chunk) in descs.iter().zip(out.chunks_exact_mut(GROUP_DESC_SIZE)) {
        d.write(chunk);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let d = GroupDesc {
            bg_block_bitmap: 3,
            bg_inode_bitmap: 4,
            bg_inode_table: 5,
            bg_free_blocks_count: 100,
            bg_free_inodes_count: 200,
            bg_used_dirs_count: 2,
            bg_flags: 0,
            bg_itable_unused: 7,
            bg_checksum: 0xbeef,
            ..Default::default()
        };
        assert_eq!(GroupDesc::parse(&d.to_bytes()).unwrap(), d);
        let t = table_to_bytes(&[d, d], 1024, 1);
        assert_eq!(t.len(), 1024);
        assert_eq!(parse_table(&t, 2).unwrap(), vec![d, d]);
        assert!(parse_table(&t, 64).is_err());
    }

    #[test]
    fn validate_rejects_out_of_range() {
        let d = GroupDesc {
            bg_block_bitmap: 3,
            bg_inode_bitmap: 4,
            bg_inode_table: 5,
            ..Default::default()
        };
        assert!(d.validate(1, 8192, 256).is_ok());
        assert!(d.validate(1, 100, 256).is_err());
        let bad = GroupDesc {
            bg_inode_table: u32::MAX,
            ..d
        };
        let e = bad.validate(1, 8192, 256).unwrap_err();
        assert!(e.to_string().contains("bg_inode_table"));
    }
}
