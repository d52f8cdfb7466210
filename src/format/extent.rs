//! The ext4 extent header (`struct ext4_extent_header`), read only to
//! recognise an extent-mapped inode on a filesystem without the `extents`
//! feature: such a file is ext4's, and fsck must not mistake its i_block
//! for a damaged block map and clear it.

use super::bytes::le16;

/// `EXT4_EXT_MAGIC`.
pub const EXT4_EXT_MAGIC: u16 = 0xF30A;
/// `EXT4_MAX_EXTENT_DEPTH`.
pub const EXT4_MAX_EXTENT_DEPTH: u16 = 5;

const EH_MAGIC: usize = 0;
const EH_ENTRIES: usize = 2;
const EH_MAX: usize = 4;
const EH_DEPTH: usize = 6;
const HEADER_SIZE: usize = 12;
const ENTRY_SIZE: usize = 12;

/// `ext2fs_extent_header_verify`: whether `buf` (an inode's i_block, or a
/// tree block) starts with a plausible extent header.
pub fn header_is_valid(buf: &[u8]) -> bool {
    if buf.len() < HEADER_SIZE || le16(buf, EH_MAGIC) != EXT4_EXT_MAGIC {
        return false;
    }
    let (entries, max, depth) = (
        le16(buf, EH_ENTRIES),
        le16(buf, EH_MAX),
        le16(buf, EH_DEPTH),
    );
    let fits = ((buf.len() - HEADER_SIZE) / ENTRY_SIZE) as u16;
    entries <= max && max <= fits && max + 2 >= fits && depth <= EXT4_MAX_EXTENT_DEPTH
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(entries: u16, max: u16, depth: u16) -> [u8; 60] {
        let mut b = [0u8; 60];
        b[0..2].copy_from_slice(&EXT4_EXT_MAGIC.to_le_bytes());
        b[2..4].copy_from_slice(&entries.to_le_bytes());
        b[4..6].copy_from_slice(&max.to_le_bytes());
        b[6..8].copy_from_slice(&depth.to_le_bytes());
        b
    }

    #[test]
    fn an_inode_root_is_recognised_and_garbage_is_not() {
        assert!(header_is_valid(&header(1, 4, 0)));
        assert!(!header_is_valid(&header(5, 4, 0)), "more entries than room");
        assert!(!header_is_valid(&header(1, 4, 6)), "too deep");
        assert!(!header_is_valid(&[0u8; 60]));
        assert!(!header_is_valid(&[0x0A, 0xF3]), "short");
    }
}
