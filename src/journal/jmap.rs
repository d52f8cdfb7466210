//! Where the journal lives: the block map of the journal inode (inode 8,
//! `s_journal_inum`), turning journal-relative block numbers into disk
//! blocks the way `jbd2_journal_bmap` does for an internal journal.
//!
//! Recovery runs before anything else trusts the image, so every pointer is
//! range-checked and the whole map is read once up front: a journal is at
//! most a few hundred thousand blocks, and a flat `Vec` makes every later
//! lookup free of I/O and of error paths.

use crate::device::BlockDevice;
use crate::format::group_desc::{GroupDesc, GROUP_DESC_SIZE};
use crate::format::indirect::{get_ptr, max_file_blocks, EXT3_IND_BLOCK, EXT3_NDIR_BLOCKS};
use crate::format::inode::{flags, Inode, S_IFREG};
use crate::format::superblock::{Superblock, EXT3_JNL_BACKUP_BLOCKS};
use crate::format::{BlockNo, Corruption, FormatError, GroupNo, InodeNo, Location};

use super::recovery::RecoveryError;
use super::JournalBlock;

const JOURNAL_INODE: &str = "journal inode";

/// The disk block of every journal block, in journal order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalMap {
    blocks: Vec<u32>,
}

impl JournalMap {
    /// Reads the journal inode named by `sb` and its whole block map.
    pub fn load(dev: &dyn BlockDevice, sb: &Superblock) -> Result<JournalMap, RecoveryError> {
        check_device_holds_fs(dev, sb)?;
        let ino = sb.s_journal_inum;
        let inode = read_inode(dev, sb, ino)?;
        Self::of_inode(dev, sb, ino, &inode)
    }

    /// The map kept in the superblock's copy of the journal inode's block
    /// map (`s_jnl_blocks`), for when the inode itself is damaged: e2fsck
    /// falls back to it the same way. `None` when the superblock keeps no
    /// copy.
    pub fn load_backup(
        dev: &dyn BlockDevice,
        sb: &Superblock,
    ) -> Option<Result<JournalMap, RecoveryError>> {
        let inode = backup_inode(sb)?;
        Some(
            check_device_holds_fs(dev, sb)
                .and_then(|()| Self::of_inode(dev, sb, sb.s_journal_inum, &inode)),
        )
    }

    fn of_inode(
        dev: &dyn BlockDevice,
        sb: &Superblock,
        ino: u32,
        inode: &Inode,
    ) -> Result<JournalMap, RecoveryError> {
        check_journal_inode(ino, inode)?;
        let count = journal_blocks(sb, ino, inode)?;
        let mut w = MapWalker {
            dev,
            sb,
            left: count,
            out: Vec::with_capacity(count as usize),
        };
        let at = Location::Inode(InodeNo(ino));
        for &ptr in &inode.i_block[..EXT3_NDIR_BLOCKS] {
            w.leaf(ptr, at)?;
        }
        for depth in 1..=3u32 {
            w.tree(
                inode.i_block[EXT3_IND_BLOCK - 1 + depth as usize],
                depth,
                at,
            )?;
        }
        Ok(JournalMap { blocks: w.out })
    }

    /// A map given directly, for callers that already know the layout.
    pub fn from_blocks(blocks: Vec<u32>) -> Self {
        JournalMap { blocks }
    }

    /// The disk block holding journal block `journal_block`.
    pub fn disk_block(&self, journal_block: JournalBlock) -> Option<BlockNo> {
        self.blocks.get(journal_block.index()).map(|&b| BlockNo(b))
    }

    /// Journal blocks mapped (the inode's size in blocks).
    pub fn len(&self) -> u32 {
        self.blocks.len() as u32
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The mapped disk blocks in journal order.
    pub fn blocks(&self) -> &[u32] {
        &self.blocks
    }
}

/// The journal inode as the superblock's backup describes it, as e2fsck
/// rebuilds it: a regular file of one link, mode 0600, with the saved block
/// map and size.
pub fn backup_inode(sb: &Superblock) -> Option<Inode> {
    if sb.s_jnl_backup_type != EXT3_JNL_BACKUP_BLOCKS || sb.s_jnl_blocks[..15] == [0; 15] {
        return None;
    }
    let mut inode = Inode::new(sb.inode_size() as usize, 0);
    inode.i_block.copy_from_slice(&sb.s_jnl_blocks[..15]);
    inode.i_size = (u64::from(sb.s_jnl_blocks[15]) << 32) | u64::from(sb.s_jnl_blocks[16]);
    inode.i_links_count = 1;
    inode.i_mode = S_IFREG | 0o600;
    Some(inode)
}

/// Later reads index the device by `s_blocks_count`; a short device would
/// turn corruption into confusing I/O errors.
fn check_device_holds_fs(dev: &dyn BlockDevice, sb: &Superblock) -> Result<(), RecoveryError> {
    sb.check_fits(dev.size())
        .map_err(|e| Corruption::new(Location::Superblock, e).into())
}

fn corrupt(at: Location, field: &'static str, value: u32, reason: &'static str) -> RecoveryError {
    Corruption::new(
        at,
        FormatError::bad_field(JOURNAL_INODE, field, value, reason),
    )
    .into()
}

fn read_block(dev: &dyn BlockDevice, sb: &Superblock, b: u32) -> Result<Vec<u8>, RecoveryError> {
    let bs = sb.block_size();
    let mut buf = vec![0u8; bs as usize];
    dev.read_at(&mut buf, u64::from(b) * u64::from(bs))?;
    Ok(buf)
}

fn read_group_desc(
    dev: &dyn BlockDevice,
    sb: &Superblock,
    g: GroupNo,
) -> Result<GroupDesc, RecoveryError> {
    let (block, off) = sb.group_desc_location(g);
    let at = Location::GroupDesc(g);
    if block.0 >= sb.s_blocks_count {
        return Err(corrupt(
            at,
            "group",
            g.0,
            "descriptor lies past the filesystem",
        ));
    }
    let buf = read_block(dev, sb, block.0)?;
    let bytes = buf.get(off..off + GROUP_DESC_SIZE).unwrap_or(&[]);
    GroupDesc::parse(bytes).map_err(|e| Corruption::new(at, e).into())
}

/// Reads inode `ino` from its group's inode table.
fn read_inode(dev: &dyn BlockDevice, sb: &Superblock, ino: u32) -> Result<Inode, RecoveryError> {
    let at = Location::Inode(InodeNo(ino));
    if ino == 0 || ino > sb.s_inodes_count {
        let err = FormatError::bad_field(
            "superblock",
            "s_journal_inum",
            ino,
            "not an inode of this filesystem",
        );
        return Err(Corruption::new(Location::Superblock, err).into());
    }
    let (g, index) = sb.inode_group(ino);
    let table = read_group_desc(dev, sb, g)?.bg_inode_table;
    let end = u64::from(table) + u64::from(sb.inode_table_blocks());
    if table == 0 || end > u64::from(sb.s_blocks_count) {
        return Err(corrupt(
            Location::GroupDesc(g),
            "bg_inode_table",
            table,
            "inode table outside the filesystem",
        ));
    }
    let isz = u64::from(sb.inode_size());
    let mut buf = vec![0u8; isz as usize];
    let offset = u64::from(table) * u64::from(sb.block_size()) + u64::from(index) * isz;
    dev.read_at(&mut buf, offset)?;
    Inode::parse(&buf).map_err(|e| Corruption::new(at, e).into())
}

/// What `ext4_get_journal_inode` refuses, plus extents: their i_block is
/// not a block map and reading it as one would replay into random blocks.
fn check_journal_inode(ino: u32, inode: &Inode) -> Result<(), RecoveryError> {
    let at = Location::Inode(InodeNo(ino));
    if inode.i_links_count == 0 || !inode.is_reg() {
        return Err(corrupt(
            at,
            "i_mode",
            u32::from(inode.i_mode),
            "journal inode is not a live regular file",
        ));
    }
    if inode.i_flags & flags::EXT4_EXTENTS_FL != 0 {
        return Err(RecoveryError::Unsupported(format!(
            "journal inode {ino} uses extents"
        )));
    }
    Ok(())
}

/// The journal's length in blocks, from i_size.
fn journal_blocks(sb: &Superblock, ino: u32, inode: &Inode) -> Result<u32, RecoveryError> {
    let at = Location::Inode(InodeNo(ino));
    let bs = u64::from(sb.block_size());
    let blocks = inode.i_size.div_ceil(bs);
    let limit = max_file_blocks(sb.block_size())
        .map_err(|e| Corruption::new(at, e))?
        .min(u64::from(sb.s_blocks_count));
    if blocks == 0 || blocks > limit {
        let shown = u32::try_from(blocks).unwrap_or(u32::MAX);
        return Err(corrupt(
            at,
            "i_size",
            shown,
            "journal size in blocks is zero or larger than the filesystem",
        ));
    }
    // blocks <= s_blocks_count, a u32.
    Ok(blocks as u32)
}

/// Collects data block pointers in logical order until `left` reaches zero.
struct MapWalker<'a> {
    dev: &'a dyn BlockDevice,
    sb: &'a Superblock,
    left: u32,
    out: Vec<u32>,
}

impl MapWalker<'_> {
    /// A journal has no holes: every pointer it needs must name a block.
    fn check_ptr(&self, ptr: u32, at: Location) -> Result<(), RecoveryError> {
        if ptr == 0 || ptr >= self.sb.s_blocks_count {
            return Err(corrupt(
                at,
                "block pointer",
                ptr,
                "journal block is a hole or outside the filesystem",
            ));
        }
        Ok(())
    }

    fn leaf(&mut self, ptr: u32, at: Location) -> Result<(), RecoveryError> {
        if self.left == 0 {
            return Ok(());
        }
        self.check_ptr(ptr, at)?;
        self.out.push(ptr);
        self.left -= 1;
        Ok(())
    }

    /// Walks an indirect block of `depth` (1 = IND) named by `ptr`.
    fn tree(&mut self, ptr: u32, depth: u32, at: Location) -> Result<(), RecoveryError> {
        if self.left == 0 {
            return Ok(());
        }
        self.check_ptr(ptr, at)?;
        let block = read_block(self.dev, self.sb, ptr)?;
        let here = Location::Block(BlockNo(ptr));
        let slots = self.sb.block_size() / 4;
        for slot in 0..slots {
            if self.left == 0 {
                break;
            }
            let child = get_ptr(&block, slot)
                .map_err(|e| Corruption::new(here, e))?
                .0;
            if depth == 1 {
                self.leaf(child, here)?;
            } else {
                self.tree(child, depth - 1, here)?;
            }
        }
        Ok(())
    }
}
