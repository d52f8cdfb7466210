//! The ext3 superblock (struct ext2_super_block): 1024 bytes at byte offset
//! 1024 of the device, little-endian, with backups in sparse groups.
//!
//! The parsed struct keeps the raw bytes so that fields jbdfs does not model
//! survive a parse/serialize round trip untouched.

use std::io;

use super::bytes::*;
use super::{BlockNo, Corruption, FormatError, GroupNo, InodeNo, Location};

pub const SUPERBLOCK_OFFSET: u64 = 1024;
pub const SUPERBLOCK_SIZE: usize = 1024;
pub const EXT2_SUPER_MAGIC: u16 = 0xEF53;

pub const EXT2_VALID_FS: u16 = 0x0001;
pub const EXT2_ERROR_FS: u16 = 0x0002;
pub const EXT3_ORPHAN_FS: u16 = 0x0004;

pub const EXT2_ERRORS_CONTINUE: u16 = 1;
pub const EXT2_ERRORS_RO: u16 = 2;
pub const EXT2_ERRORS_PANIC: u16 = 3;

/// `s_creator_os` values.
pub const EXT2_OS_LINUX: u32 = 0;
pub const EXT2_OS_HURD: u32 = 1;
pub const EXT2_OS_MASIX: u32 = 2;
pub const EXT2_OS_FREEBSD: u32 = 3;
pub const EXT2_OS_LITES: u32 = 4;

pub const EXT2_GOOD_OLD_REV: u32 = 0;
pub const EXT2_DYNAMIC_REV: u32 = 1;
pub const EXT2_GOOD_OLD_FIRST_INO: u32 = 11;
pub const EXT2_GOOD_OLD_INODE_SIZE: u16 = 128;

/// log2 of the largest block size ext2/3 allow (64 KiB; the smallest is
/// 1 KiB, `s_log_block_size` 0).
pub const EXT2_MAX_BLOCK_LOG_SIZE: u32 = 16;
/// `EXT2_MAX_BLOCKS_PER_GROUP` without bigalloc: `(1 << 16) - 8`, so that a
/// group's free block count fits the descriptor's 16 bits.
pub const EXT2_MAX_BLOCKS_PER_GROUP: u32 = (1 << 16) - 8;

pub const EXT2_FLAGS_SIGNED_HASH: u32 = 0x0001;
pub const EXT2_FLAGS_UNSIGNED_HASH: u32 = 0x0002;

/// Feature bits, named as in e2fsprogs' `lib/ext2fs/ext2_fs.h`.
pub mod feature {
    pub const COMPAT_DIR_PREALLOC: u32 = 0x0001;
    pub const COMPAT_IMAGIC_INODES: u32 = 0x0002;
    pub const COMPAT_HAS_JOURNAL: u32 = 0x0004;
    pub const COMPAT_EXT_ATTR: u32 = 0x0008;
    pub const COMPAT_RESIZE_INODE: u32 = 0x0010;
    pub const COMPAT_DIR_INDEX: u32 = 0x0020;
    pub const COMPAT_SPARSE_SUPER2: u32 = 0x0200;

    pub const INCOMPAT_COMPRESSION: u32 = 0x0001;
    pub const INCOMPAT_FILETYPE: u32 = 0x0002;
    pub const INCOMPAT_RECOVER: u32 = 0x0004;
    pub const INCOMPAT_JOURNAL_DEV: u32 = 0x0008;
    pub const INCOMPAT_META_BG: u32 = 0x0010;
    pub const INCOMPAT_EXTENTS: u32 = 0x0040;
    pub const INCOMPAT_64BIT: u32 = 0x0080;
    pub const INCOMPAT_MMP: u32 = 0x0100;
    pub const INCOMPAT_FLEX_BG: u32 = 0x0200;
    pub const INCOMPAT_EA_INODE: u32 = 0x0400;
    pub const INCOMPAT_DIRDATA: u32 = 0x1000;
    pub const INCOMPAT_CSUM_SEED: u32 = 0x2000;
    pub const INCOMPAT_LARGEDIR: u32 = 0x4000;
    pub const INCOMPAT_INLINE_DATA: u32 = 0x8000;
    pub const INCOMPAT_ENCRYPT: u32 = 0x10000;
    pub const INCOMPAT_CASEFOLD: u32 = 0x20000;

    pub const RO_COMPAT_SPARSE_SUPER: u32 = 0x0001;
    pub const RO_COMPAT_LARGE_FILE: u32 = 0x0002;
    pub const RO_COMPAT_BTREE_DIR: u32 = 0x0004;
    pub const RO_COMPAT_HUGE_FILE: u32 = 0x0008;
    pub const RO_COMPAT_GDT_CSUM: u32 = 0x0010;
    pub const RO_COMPAT_DIR_NLINK: u32 = 0x0020;
    pub const RO_COMPAT_EXTRA_ISIZE: u32 = 0x0040;
    pub const RO_COMPAT_QUOTA: u32 = 0x0100;
    pub const RO_COMPAT_BIGALLOC: u32 = 0x0200;
    pub const RO_COMPAT_METADATA_CSUM: u32 = 0x0400;
    pub const RO_COMPAT_READONLY: u32 = 0x1000;
    pub const RO_COMPAT_PROJECT: u32 = 0x2000;
    pub const RO_COMPAT_VERITY: u32 = 0x8000;
    pub const RO_COMPAT_ORPHAN_PRESENT: u32 = 0x10000;

    /// What jbdfs reads and writes. RECOVER is transient state, not a format.
    pub const SUPP_COMPAT: u32 = COMPAT_DIR_PREALLOC
        | COMPAT_HAS_JOURNAL
        | COMPAT_EXT_ATTR
        | COMPAT_RESIZE_INODE
        | COMPAT_DIR_INDEX;
    pub const SUPP_INCOMPAT: u32 = INCOMPAT_FILETYPE | INCOMPAT_RECOVER;
    /// dir_nlink is ext4's, but only changes how a directory past 65,000
    /// subdirectories is counted (1: "many"), which jbdfs does as ext4 does.
    pub const SUPP_RO_COMPAT: u32 =
        RO_COMPAT_SPARSE_SUPER | RO_COMPAT_LARGE_FILE | RO_COMPAT_DIR_NLINK;

    /// Names as e2fsprogs spells them (mke2fs -O, dumpe2fs).
    pub const NAMES: &[(Kind, u32, &str)] = &[
        (Kind::Compat, COMPAT_DIR_PREALLOC, "dir_prealloc"),
        (Kind::Compat, COMPAT_IMAGIC_INODES, "imagic_inodes"),
        (Kind::Compat, COMPAT_HAS_JOURNAL, "has_journal"),
        (Kind::Compat, COMPAT_EXT_ATTR, "ext_attr"),
        (Kind::Compat, COMPAT_RESIZE_INODE, "resize_inode"),
        (Kind::Compat, COMPAT_DIR_INDEX, "dir_index"),
        (Kind::Compat, COMPAT_SPARSE_SUPER2, "sparse_super2"),
        (Kind::Incompat, INCOMPAT_COMPRESSION, "compression"),
        (Kind::Incompat, INCOMPAT_FILETYPE, "filetype"),
        (Kind::Incompat, INCOMPAT_RECOVER, "needs_recovery"),
        (Kind::Incompat, INCOMPAT_JOURNAL_DEV, "journal_dev"),
        (Kind::Incompat, INCOMPAT_META_BG, "meta_bg"),
        (Kind::Incompat, INCOMPAT_EXTENTS, "extent"),
        (Kind::Incompat, INCOMPAT_64BIT, "64bit"),
        (Kind::Incompat, INCOMPAT_MMP, "mmp"),
        (Kind::Incompat, INCOMPAT_FLEX_BG, "flex_bg"),
        (Kind::Incompat, INCOMPAT_EA_INODE, "ea_inode"),
        (Kind::Incompat, INCOMPAT_DIRDATA, "dirdata"),
        (Kind::Incompat, INCOMPAT_CSUM_SEED, "metadata_csum_seed"),
        (Kind::Incompat, INCOMPAT_LARGEDIR, "large_dir"),
        (Kind::Incompat, INCOMPAT_INLINE_DATA, "inline_data"),
        (Kind::Incompat, INCOMPAT_ENCRYPT, "encrypt"),
        (Kind::Incompat, INCOMPAT_CASEFOLD, "casefold"),
        (Kind::RoCompat, RO_COMPAT_SPARSE_SUPER, "sparse_super"),
        (Kind::RoCompat, RO_COMPAT_LARGE_FILE, "large_file"),
        (Kind::RoCompat, RO_COMPAT_BTREE_DIR, "btree_dir"),
        (Kind::RoCompat, RO_COMPAT_HUGE_FILE, "huge_file"),
        (Kind::RoCompat, RO_COMPAT_GDT_CSUM, "uninit_bg"),
        (Kind::RoCompat, RO_COMPAT_DIR_NLINK, "dir_nlink"),
        (Kind::RoCompat, RO_COMPAT_EXTRA_ISIZE, "extra_isize"),
        (Kind::RoCompat, RO_COMPAT_QUOTA, "quota"),
        (Kind::RoCompat, RO_COMPAT_BIGALLOC, "bigalloc"),
        (Kind::RoCompat, RO_COMPAT_METADATA_CSUM, "metadata_csum"),
        (Kind::RoCompat, RO_COMPAT_READONLY, "read-only"),
        (Kind::RoCompat, RO_COMPAT_PROJECT, "project"),
        (Kind::RoCompat, RO_COMPAT_VERITY, "verity"),
        (Kind::RoCompat, RO_COMPAT_ORPHAN_PRESENT, "orphan_present"),
    ];

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Kind {
        Compat,
        Incompat,
        RoCompat,
    }

    /// Looks a feature up by its e2fsprogs name.
    pub fn by_name(name: &str) -> Option<(Kind, u32)> {
        NAMES
            .iter()
            .find(|(_, _, n)| *n == name)
            .map(|&(k, bit, _)| (k, bit))
    }

    /// The names of the bits set in `mask` of `kind`; unknown bits appear as
    /// e2fsprogs prints them (`FEATURE_I31` and so on).
    pub fn names(kind: Kind, mask: u32) -> Vec<String> {
        (0..32)
            .map(|i| 1u32 << i)
            .filter(|bit| mask & bit != 0)
            .map(|bit| {
                NAMES
                    .iter()
                    .find(|(k, b, _)| *k == kind && *b == bit)
                    .map(|(_, _, n)| n.to_string())
                    .unwrap_or_else(|| {
                        let prefix = match kind {
                            Kind::Compat => 'C',
                            Kind::Incompat => 'I',
                            Kind::RoCompat => 'R',
                        };
                        format!("FEATURE_{prefix}{}", bit.trailing_zeros())
                    })
            })
            .collect()
    }
}

/// The fields of the superblock that jbdfs reads or writes, by the kernel's
/// names. Fields not listed here stay in `raw`.
#[derive(Clone, Debug)]
pub struct Superblock {
    pub s_inodes_count: u32,
    pub s_blocks_count: u32,
    pub s_r_blocks_count: u32,
    pub s_free_blocks_count: u32,
    pub s_free_inodes_count: u32,
    pub s_first_data_block: u32,
    pub s_log_block_size: u32,
    pub s_log_frag_size: u32,
    pub s_blocks_per_group: u32,
    pub s_frags_per_group: u32,
    pub s_inodes_per_group: u32,
    pub s_mtime: u32,
    pub s_wtime: u32,
    pub s_mnt_count: u16,
    pub s_max_mnt_count: i16,
    pub s_magic: u16,
    pub s_state: u16,
    pub s_errors: u16,
    pub s_minor_rev_level: u16,
    pub s_lastcheck: u32,
    pub s_checkinterval: u32,
    pub s_creator_os: u32,
    pub s_rev_level: u32,
    pub s_def_resuid: u16,
    pub s_def_resgid: u16,
    pub s_first_ino: u32,
    pub s_inode_size: u16,
    pub s_block_group_nr: u16,
    pub s_feature_compat: u32,
    pub s_feature_incompat: u32,
    pub s_feature_ro_compat: u32,
    pub s_uuid: [u8; 16],
    pub s_volume_name: [u8; 16],
    pub s_last_mounted: [u8; 64],
    pub s_reserved_gdt_blocks: u16,
    pub s_journal_uuid: [u8; 16],
    pub s_journal_inum: u32,
    pub s_journal_dev: u32,
    pub s_last_orphan: u32,
    pub s_hash_seed: [u32; 4],
    pub s_def_hash_version: u8,
    pub s_jnl_backup_type: u8,
    pub s_desc_size: u16,
    pub s_default_mount_opts: u32,
    pub s_first_meta_bg: u32,
    pub s_mkfs_time: u32,
    pub s_jnl_blocks: [u32; 17],
    pub s_min_extra_isize: u16,
    pub s_want_extra_isize: u16,
    pub s_flags: u32,
    /// RAID stride: blocks read or written before the next disk (mke2fs
    /// `-E stride=`).
    pub s_raid_stride: u16,
    /// RAID stripe width: blocks in a full stripe (`-E stripe_width=`).
    pub s_raid_stripe_width: u32,
    pub s_kbytes_written: u64,
    pub s_error_count: u32,
    pub s_first_error_time: u32,
    pub s_first_error_ino: u32,
    pub s_first_error_block: u64,
    pub s_first_error_func: [u8; 32],
    pub s_first_error_line: u32,
    pub s_last_error_time: u32,
    pub s_last_error_ino: u32,
    pub s_last_error_line: u32,
    pub s_last_error_block: u64,
    pub s_last_error_func: [u8; 32],
    raw: Box<[u8; SUPERBLOCK_SIZE]>,
}

/// `s_jnl_backup_type` value meaning `s_jnl_blocks` holds the journal
/// inode's `i_block`, `i_size_high` and `i_size`.
pub const EXT3_JNL_BACKUP_BLOCKS: u8 = 1;

/// Two values are equal when they serialize to the same bytes.
impl PartialEq for Superblock {
    fn eq(&self, other: &Self) -> bool {
        self.to_bytes()[..] == other.to_bytes()[..]
    }
}

impl Eq for Superblock {}

const S: &str = "superblock";

impl Superblock {
    /// Parses and validates a superblock read from byte offset 1024.
    pub fn parse(buf: &[u8]) -> Result<Self, FormatError> {
        need(S, buf, SUPERBLOCK_SIZE)?;
        let sb = Self::parse_fields(buf);
        sb.validate()?;
        Ok(sb)
    }

    fn parse_fields(buf: &[u8]) -> Self {
        let raw = Box::new(bytes::<SUPERBLOCK_SIZE>(buf, 0));
        let u32s = |off: usize, out: &mut [u32]| {
            for (i, v) in out.iter_mut().enumerate() {
                *v = le32(buf, off + 4 * i);
            }
        };
        let mut s_hash_seed = [0u32; 4];
        u32s(0xEC, &mut s_hash_seed);
        let mut s_jnl_blocks = [0u32; 17];
        u32s(0x10C, &mut s_jnl_blocks);
        Superblock {
            s_inodes_count: le32(buf, 0x00),
            s_blocks_count: le32(buf, 0x04),
            s_r_blocks_count: le32(buf, 0x08),
            s_free_blocks_count: le32(buf, 0x0C),
            s_free_inodes_count: le32(buf, 0x10),
            s_first_data_block: le32(buf, 0x14),
            s_log_block_size: le32(buf, 0x18),
            s_log_frag_size: le32(buf, 0x1C),
            s_blocks_per_group: le32(buf, 0x20),
            s_frags_per_group: le32(buf, 0x24),
            s_inodes_per_group: le32(buf, 0x28),
            s_mtime: le32(buf, 0x2C),
            s_wtime: le32(buf, 0x30),
            s_mnt_count: le16(buf, 0x34),
            s_max_mnt_count: le16(buf, 0x36) as i16,
            s_magic: le16(buf, 0x38),
            s_state: le16(buf, 0x3A),
            s_errors: le16(buf, 0x3C),
            s_minor_rev_level: le16(buf, 0x3E),
            s_lastcheck: le32(buf, 0x40),
            s_checkinterval: le32(buf, 0x44),
            s_creator_os: le32(buf, 0x48),
            s_rev_level: le32(buf, 0x4C),
            s_def_resuid: le16(buf, 0x50),
            s_def_resgid: le16(buf, 0x52),
            s_first_ino: le32(buf, 0x54),
            s_inode_size: le16(buf, 0x58),
            s_block_group_nr: le16(buf, 0x5A),
            s_feature_compat: le32(buf, 0x5C),
            s_feature_incompat: le32(buf, 0x60),
            s_feature_ro_compat: le32(buf, 0x64),
            s_uuid: bytes(buf, 0x68),
            s_volume_name: bytes(buf, 0x78),
            s_last_mounted: bytes(buf, 0x88),
            s_reserved_gdt_blocks: le16(buf, 0xCE),
            s_journal_uuid: bytes(buf, 0xD0),
            s_journal_inum: le32(buf, 0xE0),
            s_journal_dev: le32(buf, 0xE4),
            s_last_orphan: le32(buf, 0xE8),
            s_hash_seed,
            s_def_hash_version: super::bytes::byte(buf, 0xFC),
            s_jnl_backup_type: super::bytes::byte(buf, 0xFD),
            s_desc_size: le16(buf, 0xFE),
            s_default_mount_opts: le32(buf, 0x100),
            s_first_meta_bg: le32(buf, 0x104),
            s_mkfs_time: le32(buf, 0x108),
            s_jnl_blocks,
            s_min_extra_isize: le16(buf, 0x15C),
            s_want_extra_isize: le16(buf, 0x15E),
            s_flags: le32(buf, 0x160),
            s_raid_stride: le16(buf, 0x164),
            s_raid_stripe_width: le32(buf, 0x170),
            s_kbytes_written: le64(buf, 0x178),
            s_error_count: le32(buf, 0x194),
            s_first_error_time: le32(buf, 0x198),
            s_first_error_ino: le32(buf, 0x19C),
            s_first_error_block: le64(buf, 0x1A0),
            s_first_error_func: bytes(buf, 0x1A8),
            s_first_error_line: le32(buf, 0x1C8),
            s_last_error_time: le32(buf, 0x1CC),
            s_last_error_ino: le32(buf, 0x1D0),
            s_last_error_line: le32(buf, 0x1D4),
            s_last_error_block: le64(buf, 0x1D8),
            s_last_error_func: bytes(buf, 0x1E0),
            raw,
        }
    }

    /// A superblock with every field zero, for mkfs to fill in.
    pub fn zeroed() -> Self {
        Self::parse_fields(&[0u8; SUPERBLOCK_SIZE])
    }

    /// Serializes into the 1024 on-disk bytes.
    pub fn to_bytes(&self) -> [u8; SUPERBLOCK_SIZE] {
        let mut b = *self.raw;
        self.write_fields(&mut b);
        b
    }

    fn write_fields(&self, b: &mut [u8]) {
        put_le32(b, 0x00, self.s_inodes_count);
        put_le32(b, 0x04, self.s_blocks_count);
        put_le32(b, 0x08, self.s_r_blocks_count);
        put_le32(b, 0x0C, self.s_free_blocks_count);
        put_le32(b, 0x10, self.s_free_inodes_count);
        put_le32(b, 0x14, self.s_first_data_block);
        put_le32(b, 0x18, self.s_log_block_size);
        put_le32(b, 0x1C, self.s_log_frag_size);
        put_le32(b, 0x20, self.s_blocks_per_group);
        put_le32(b, 0x24, self.s_frags_per_group);
        put_le32(b, 0x28, self.s_inodes_per_group);
        put_le32(b, 0x2C, self.s_mtime);
        put_le32(b, 0x30, self.s_wtime);
        put_le16(b, 0x34, self.s_mnt_count);
        put_le16(b, 0x36, self.s_max_mnt_count as u16);
        put_le16(b, 0x38, self.s_magic);
        put_le16(b, 0x3A, self.s_state);
        put_le16(b, 0x3C, self.s_errors);
        put_le16(b, 0x3E, self.s_minor_rev_level);
        put_le32(b, 0x40, self.s_lastcheck);
        put_le32(b, 0x44, self.s_checkinterval);
        put_le32(b, 0x48, self.s_creator_os);
        put_le32(b, 0x4C, self.s_rev_level);
        put_le16(b, 0x50, self.s_def_resuid);
        put_le16(b, 0x52, self.s_def_resgid);
        put_le32(b, 0x54, self.s_first_ino);
        put_le16(b, 0x58, self.s_inode_size);
        put_le16(b, 0x5A, self.s_block_group_nr);
        put_le32(b, 0x5C, self.s_feature_compat);
        put_le32(b, 0x60, self.s_feature_incompat);
        put_le32(b, 0x64, self.s_feature_ro_compat);
        put_bytes(b, 0x68, &self.s_uuid);
        put_bytes(b, 0x78, &self.s_volume_name);
        put_bytes(b, 0x88, &self.s_last_mounted);
        put_le16(b, 0xCE, self.s_reserved_gdt_blocks);
        put_bytes(b, 0xD0, &self.s_journal_uuid);
        put_le32(b, 0xE0, self.s_journal_inum);
        put_le32(b, 0xE4, self.s_journal_dev);
        put_le32(b, 0xE8, self.s_last_orphan);
        for (i, v) in self.s_hash_seed.iter().enumerate() {
            put_le32(b, 0xEC + 4 * i, *v);
        }
        super::bytes::put_byte(b, 0xFC, self.s_def_hash_version);
        super::bytes::put_byte(b, 0xFD, self.s_jnl_backup_type);
        put_le16(b, 0xFE, self.s_desc_size);
        put_le32(b, 0x100, self.s_default_mount_opts);
        put_le32(b, 0x104, self.s_first_meta_bg);
        put_le32(b, 0x108, self.s_mkfs_time);
        for (i, v) in self.s_jnl_blocks.iter().enumerate() {
            put_le32(b, 0x10C + 4 * i, *v);
        }
        put_le16(b, 0x15C, self.s_min_extra_isize);
        put_le16(b, 0x15E, self.s_want_extra_isize);
        put_le32(b, 0x160, self.s_flags);
        put_le16(b, 0x164, self.s_raid_stride);
        put_le32(b, 0x170, self.s_raid_stripe_width);
        put_le64(b, 0x178, self.s_kbytes_written);
        self.write_error_fields(b);
    }

    fn write_error_fields(&self, b: &mut [u8]) {
        put_le32(b, 0x194, self.s_error_count);
        put_le32(b, 0x198, self.s_first_error_time);
        put_le32(b, 0x19C, self.s_first_error_ino);
        put_le64(b, 0x1A0, self.s_first_error_block);
        put_bytes(b, 0x1A8, &self.s_first_error_func);
        put_le32(b, 0x1C8, self.s_first_error_line);
        put_le32(b, 0x1CC, self.s_last_error_time);
        put_le32(b, 0x1D0, self.s_last_error_ino);
        put_le32(b, 0x1D4, self.s_last_error_line);
        put_le64(b, 0x1D8, self.s_last_error_block);
        put_bytes(b, 0x1E0, &self.s_last_error_func);
    }

    /// Checks what the rest of jbdfs relies on, so that later arithmetic
    /// (group counts, inode locations) cannot overflow or divide by zero.
    pub fn validate(&self) -> Result<(), FormatError> {
        let bad = |field, value: u64, reason| Err(FormatError::bad_field(S, field, value, reason));
        if self.s_magic != EXT2_SUPER_MAGIC {
            return Err(FormatError::BadMagic {
                structure: S,
                found: self.s_magic.into(),
                expected: EXT2_SUPER_MAGIC.into(),
            });
        }
        if self.s_log_block_size > EXT2_MAX_BLOCK_LOG_SIZE - 10 {
            return bad(
                "s_log_block_size",
                self.s_log_block_size.into(),
                "block size must be a power of two from 1024 to 65536",
            );
        }
        if self.s_rev_level > EXT2_DYNAMIC_REV {
            return bad("s_rev_level", self.s_rev_level.into(), "unknown revision");
        }
        let bs = self.block_size() as u64;
        let expect_first = u32::from(bs == 1024);
        if self.s_first_data_block != expect_first {
            return bad(
                "s_first_data_block",
                self.s_first_data_block.into(),
                "must be 1 for 1 KiB blocks and 0 otherwise",
            );
        }
        if self.s_blocks_per_group == 0 || self.s_blocks_per_group > self.max_blocks_per_group() {
            return bad(
                "s_blocks_per_group",
                self.s_blocks_per_group.into(),
                "must be between 1 and 8 times the block size, and at most 65528",
            );
        }
        if self.s_inodes_per_group == 0 || self.s_inodes_per_group > self.max_inodes_per_group() {
            return bad(
                "s_inodes_per_group",
                self.s_inodes_per_group.into(),
                "must be between 1 and 8 times the block size, and fit a 16-bit count",
            );
        }
        self.validate_sizes(bs)
    }

    fn validate_sizes(&self, bs: u64) -> Result<(), FormatError> {
        let bad = |field, value: u64, reason| Err(FormatError::bad_field(S, field, value, reason));
        let isz = self.inode_size();
        if isz < 128 || !isz.is_power_of_two() || isz as u64 > bs {
            return bad(
                "s_inode_size",
                isz.into(),
                "must be a power of two from 128 to the block size",
            );
        }
        if self.s_blocks_count <= self.s_first_data_block {
            return bad("s_blocks_count", self.s_blocks_count.into(), "too small");
        }
        let groups = self.group_count() as u64;
        if groups * self.s_inodes_per_group as u64 != self.s_inodes_count as u64 {
            return bad(
                "s_inodes_count",
                self.s_inodes_count.into(),
                "must equal s_inodes_per_group times the group count",
            );
        }
        if self.s_rev_level >= EXT2_DYNAMIC_REV
            && (self.s_first_ino < EXT2_GOOD_OLD_FIRST_INO
                || self.s_first_ino >= self.s_inodes_count)
        {
            return bad("s_first_ino", self.s_first_ino.into(), "out of range");
        }
        if self.s_r_blocks_count > self.s_blocks_count {
            return bad(
                "s_r_blocks_count",
                self.s_r_blocks_count.into(),
                "more reserved blocks than blocks",
            );
        }
        Ok(())
    }

    pub fn block_size(&self) -> u32 {
        1024u32 << self.s_log_block_size.min(EXT2_MAX_BLOCK_LOG_SIZE - 10)
    }

    /// Whether a device of `device_bytes` holds all `s_blocks_count`
    /// blocks: reads index the device by them, and a short device would
    /// turn corruption into confusing I/O errors.
    pub fn check_fits(&self, device_bytes: u64) -> Result<(), FormatError> {
        let needed = u64::from(self.s_blocks_count) * u64::from(self.block_size());
        if needed > device_bytes {
            return Err(FormatError::bad_field(
                "superblock",
                "s_blocks_count",
                self.s_blocks_count,
                "the filesystem is larger than the device",
            ));
        }
        Ok(())
    }

    /// e2fsck's bound on `s_blocks_per_group`: one bitmap block's bits, and
    /// `EXT2_MAX_BLOCKS_PER_GROUP` so that a group's free count fits the
    /// descriptor's 16 bits (it binds from 8 KiB blocks on).
    pub fn max_blocks_per_group(&self) -> u32 {
        (8 * self.block_size()).min(EXT2_MAX_BLOCKS_PER_GROUP)
    }

    /// e2fsck's bound on `s_inodes_per_group`: one bitmap block's bits, and
    /// `EXT2_MAX_INODES_PER_GROUP` (65536 less one table block's inodes)
    /// for the descriptor's 16-bit free count.
    pub fn max_inodes_per_group(&self) -> u32 {
        let per_block = self.block_size() / u32::from(self.inode_size().max(1));
        (8 * self.block_size()).min(65536 - per_block)
    }

    pub fn inode_size(&self) -> u16 {
        if self.s_rev_level == EXT2_GOOD_OLD_REV {
            EXT2_GOOD_OLD_INODE_SIZE
        } else {
            self.s_inode_size
        }
    }

    pub fn first_ino(&self) -> u32 {
        if self.s_rev_level == EXT2_GOOD_OLD_REV {
            EXT2_GOOD_OLD_FIRST_INO
        } else {
            self.s_first_ino
        }
    }

    pub fn group_count(&self) -> u32 {
        let data_blocks = self.s_blocks_count.saturating_sub(self.s_first_data_block);
        data_blocks.div_ceil(self.s_blocks_per_group.max(1))
    }

    /// The first block of group `g`.
    pub fn group_first_block(&self, g: GroupNo) -> BlockNo {
        BlockNo(self.s_first_data_block + g.0 * self.s_blocks_per_group)
    }

    /// Blocks in group `g` (the last group may be short).
    pub fn blocks_in_group(&self, g: GroupNo) -> u32 {
        let first = self.group_first_block(g).0;
        self.s_blocks_count
            .saturating_sub(first)
            .min(self.s_blocks_per_group)
    }

    /// Group descriptors per block (32 bytes each without 64bit).
    pub fn descs_per_block(&self) -> u32 {
        self.block_size() / super::group_desc::GROUP_DESC_SIZE as u32
    }

    /// Blocks taken by the group descriptor table.
    pub fn gdt_blocks(&self) -> u32 {
        self.group_count().div_ceil(self.descs_per_block())
    }

    /// Blocks taken by one group's inode table.
    pub fn inode_table_blocks(&self) -> u32 {
        (self.s_inodes_per_group * self.inode_size() as u32).div_ceil(self.block_size())
    }

    pub fn has_compat(&self, bit: u32) -> bool {
        self.s_feature_compat & bit != 0
    }

    pub fn has_incompat(&self, bit: u32) -> bool {
        self.s_feature_incompat & bit != 0
    }

    pub fn has_ro_compat(&self, bit: u32) -> bool {
        self.s_feature_ro_compat & bit != 0
    }

    /// Whether group `g` holds a superblock and descriptor-table backup.
    pub fn group_has_super(&self, g: GroupNo) -> bool {
        !self.has_ro_compat(feature::RO_COMPAT_SPARSE_SUPER) || is_sparse_group(g.0)
    }

    /// The group holding inode `ino`, and the inode's index inside it.
    pub fn inode_group(&self, ino: u32) -> (GroupNo, u32) {
        let i = ino.saturating_sub(1);
        (
            GroupNo(i / self.s_inodes_per_group),
            i % self.s_inodes_per_group,
        )
    }

    /// The group holding block `b`, and the block's index inside it.
    pub fn block_group(&self, b: BlockNo) -> (GroupNo, u32) {
        let i = b.0.saturating_sub(self.s_first_data_block);
        (
            GroupNo(i / self.s_blocks_per_group),
            i % self.s_blocks_per_group,
        )
    }

    /// The block holding group `g`'s descriptor, and its byte offset there:
    /// the table follows the primary superblock (no meta_bg).
    pub fn group_desc_location(&self, g: GroupNo) -> (BlockNo, usize) {
        let per_block = self.descs_per_block();
        let block = self.s_first_data_block + 1 + g.0 / per_block;
        (
            BlockNo(block),
            (g.0 % per_block) as usize * super::group_desc::GROUP_DESC_SIZE,
        )
    }

    /// The block holding inode `ino` in its group's inode table, which
    /// starts at `inode_table` (the group's `bg_inode_table`), and the
    /// inode's byte offset in that block.
    pub fn inode_location(&self, ino: InodeNo, inode_table: BlockNo) -> (BlockNo, usize) {
        let (_, index) = self.inode_group(ino.0);
        let byte = u64::from(index) * u64::from(self.inode_size());
        let bs = u64::from(self.block_size());
        (
            BlockNo(inode_table.0 + (byte / bs) as u32),
            (byte % bs) as usize,
        )
    }

    pub fn volume_name(&self) -> String {
        cstr(&self.s_volume_name)
    }

    pub fn last_mounted(&self) -> String {
        cstr(&self.s_last_mounted)
    }

    /// Feature names that jbdfs cannot write without corrupting the image,
    /// split into those that forbid mounting at all (incompat) and those
    /// that allow only read-only (ro_compat).
    pub fn unsupported_features(&self) -> (Vec<String>, Vec<String>) {
        let inc = self.s_feature_incompat & !feature::SUPP_INCOMPAT;
        let ro = self.s_feature_ro_compat & !feature::SUPP_RO_COMPAT;
        (
            feature::names(feature::Kind::Incompat, inc),
            feature::names(feature::Kind::RoCompat, ro),
        )
    }
}

/// Fields read from superblock bytes that may not parse, to find the
/// backups of a damaged primary. The buffer must hold the field.
pub mod raw {
    use super::super::bytes::le32;

    const S_LOG_BLOCK_SIZE: usize = 0x18;
    const S_BLOCKS_PER_GROUP: usize = 0x20;

    pub fn s_log_block_size(raw: &[u8]) -> u32 {
        le32(raw, S_LOG_BLOCK_SIZE)
    }

    pub fn s_blocks_per_group(raw: &[u8]) -> u32 {
        le32(raw, S_BLOCKS_PER_GROUP)
    }

    const S_MAGIC: usize = 0x38;
    const S_FEATURE_COMPAT: usize = 0x5C;
    const S_FEATURE_INCOMPAT: usize = 0x60;
    const S_FEATURE_RO_COMPAT: usize = 0x64;

    /// The features outside jbdfs's set, by name, of bytes that carry the
    /// ext2 magic but may not parse: an ext4 image's geometry (bigalloc's
    /// huge groups) fails validation before its features would be named.
    pub fn unsupported_feature_names(raw: &[u8]) -> Vec<String> {
        use super::feature::{names, Kind, SUPP_COMPAT, SUPP_INCOMPAT, SUPP_RO_COMPAT};
        if raw.len() < S_FEATURE_RO_COMPAT + 4
            || crate::format::bytes::le16(raw, S_MAGIC) != super::EXT2_SUPER_MAGIC
        {
            return Vec::new();
        }
        let mut out = names(
            Kind::Incompat,
            le32(raw, S_FEATURE_INCOMPAT) & !SUPP_INCOMPAT,
        );
        out.extend(names(
            Kind::RoCompat,
            le32(raw, S_FEATURE_RO_COMPAT) & !SUPP_RO_COMPAT,
        ));
        out.extend(names(
            Kind::Compat,
            le32(raw, S_FEATURE_COMPAT) & !SUPP_COMPAT,
        ));
        out
    }
}

/// Why the primary superblock could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Corrupt(#[from] Corruption),
}

/// Reads and validates the primary superblock of a store of `size` bytes
/// through `read_at`, a positional read such as `BlockDevice::read_at`: the
/// one definition that mount and fsck share. The I/O is the caller's; this
/// module only says where the superblock is and what makes it valid.
pub fn read_primary(
    size: u64,
    read_at: impl FnOnce(&mut [u8], u64) -> io::Result<()>,
) -> Result<Superblock, ReadError> {
    let mut buf = vec![0u8; SUPERBLOCK_SIZE];
    if size < SUPERBLOCK_OFFSET + buf.len() as u64 {
        let err = FormatError::Short {
            structure: "superblock",
            len: size.saturating_sub(SUPERBLOCK_OFFSET) as usize,
            need: SUPERBLOCK_SIZE,
        };
        return Err(Corruption::new(Location::Superblock, err).into());
    }
    read_at(&mut buf, SUPERBLOCK_OFFSET)?;
    Superblock::parse(&buf).map_err(|e| Corruption::new(Location::Superblock, e).into())
}

/// Groups 0 and 1 and powers of 3, 5 and 7 carry backups under sparse_super.
pub fn is_sparse_group(g: u32) -> bool {
    fn power_of(mut g: u32, base: u32) -> bool {
        while g > 1 && g % base == 0 {
            g /= base;
        }
        g == 1
    }
    g <= 1 || power_of(g, 3) || power_of(g, 5) || power_of(g, 7)
}

/// A NUL-padded byte field as a string.
pub fn cstr(b: &[u8]) -> String {
    let name = b.split(|&c| c == 0).next().unwrap_or(b);
    String::from_utf8_lossy(name).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Superblock {
        let mut sb = Superblock::zeroed();
        sb.s_magic = EXT2_SUPER_MAGIC;
        sb.s_rev_level = EXT2_DYNAMIC_REV;
        sb.s_log_block_size = 2;
        sb.s_blocks_count = 65536;
        sb.s_blocks_per_group = 32768;
        sb.s_inodes_per_group = 8192;
        sb.s_inodes_count = 16384;
        sb.s_first_ino = 11;
        sb.s_inode_size = 256;
        sb.s_feature_ro_compat = feature::RO_COMPAT_SPARSE_SUPER;
        sb.s_jnl_blocks[16] = 7;
        sb.s_last_error_func[..4].copy_from_slice(b"func");
        sb
    }

    #[test]
    fn descriptor_and_inode_locations() {
        let mut sb = sample();
        // 4 KiB blocks: 128 descriptors and 16 inodes of 256 bytes a block.
        assert_eq!(sb.group_desc_location(GroupNo(0)), (BlockNo(1), 0));
        assert_eq!(sb.group_desc_location(GroupNo(1)), (BlockNo(1), 32));
        assert_eq!(sb.group_desc_location(GroupNo(128)), (BlockNo(2), 0));
        let t = BlockNo(100);
        assert_eq!(sb.inode_location(InodeNo(1), t), (BlockNo(100), 0));
        assert_eq!(sb.inode_location(InodeNo(2), t), (BlockNo(100), 256));
        assert_eq!(sb.inode_location(InodeNo(17), t), (BlockNo(101), 0));
        // The index is inside the inode's own group.
        assert_eq!(sb.inode_location(InodeNo(8193), t), (BlockNo(100), 0));
        // 1 KiB blocks: the table starts after the superblock in block 1.
        sb.s_log_block_size = 0;
        sb.s_first_data_block = 1;
        assert_eq!(sb.group_desc_location(GroupNo(33)), (BlockNo(3), 32));
        assert_eq!(sb.inode_location(InodeNo(6), t), (BlockNo(101), 256));
    }

    #[test]
    fn raw_fields_match_the_parser() {
        let b = sample().to_bytes();
        assert_eq!(raw::s_log_block_size(&b), 2);
        assert_eq!(raw::s_blocks_per_group(&b), 32768);
    }

    #[test]
    fn reading_a_short_store_names_the_superblock() {
        let e = read_primary(1500, |_, _| Ok(())).unwrap_err();
        assert!(e.to_string().contains("superblock"), "{e}");
        let bytes = sample().to_bytes();
        let sb = read_primary(4096, |buf, off| {
            assert_eq!(off, SUPERBLOCK_OFFSET);
            buf.copy_from_slice(&bytes);
            Ok(())
        })
        .unwrap();
        assert_eq!(sb, sample());
    }

    #[test]
    fn round_trip_keeps_every_byte() {
        let sb = sample();
        let bytes = sb.to_bytes();
        let back = Superblock::parse(&bytes).unwrap();
        assert_eq!(back, sb);
        // A byte jbdfs does not model survives.
        let mut raw = bytes;
        raw[0x3F0] = 0xAA;
        let again = Superblock::parse(&raw).unwrap();
        assert_eq!(again.to_bytes()[0x3F0], 0xAA);
    }

    #[test]
    fn geometry() {
        let sb = sample();
        assert_eq!(sb.block_size(), 4096);
        assert_eq!(sb.group_count(), 2);
        assert_eq!(sb.inode_table_blocks(), 512);
        assert_eq!(sb.inode_group(8193), (GroupNo(1), 0));
        assert_eq!(sb.block_group(BlockNo(32769)), (GroupNo(1), 1));
        assert!(is_sparse_group(0) && is_sparse_group(1) && is_sparse_group(9));
        assert!(is_sparse_group(25) && is_sparse_group(49) && !is_sparse_group(6));
    }

    #[test]
    fn corrupt_fields_are_named() {
        let mut sb = sample();
        sb.s_log_block_size = 9;
        let err = Superblock::parse(&sb.to_bytes()).unwrap_err();
        assert!(err.to_string().contains("s_log_block_size"), "{err}");
        let mut sb = sample();
        sb.s_inodes_per_group = 0;
        assert!(Superblock::parse(&sb.to_bytes()).is_err());
        let mut sb = sample();
        sb.s_magic = 0;
        assert!(matches!(
            Superblock::parse(&sb.to_bytes()),
            Err(FormatError::BadMagic { .. })
        ));
        assert!(Superblock::parse(&[0u8; 100]).is_err());
    }

    #[test]
    fn block_sizes_up_to_64k_are_accepted() {
        for log in 0..=6u32 {
            let bs = 1024u32 << log;
            let mut sb = sample();
            sb.s_log_block_size = log;
            sb.s_first_data_block = u32::from(bs == 1024);
            sb.s_blocks_per_group = (8 * bs).min(EXT2_MAX_BLOCKS_PER_GROUP);
            sb.s_blocks_count = 3 * sb.s_blocks_per_group;
            sb.s_inodes_per_group = 8192;
            sb.s_inodes_count = 3 * 8192;
            let back = Superblock::parse(&sb.to_bytes()).unwrap();
            assert_eq!(back.block_size(), bs);
        }
        let mut sb = sample();
        sb.s_log_block_size = 7;
        assert!(Superblock::parse(&sb.to_bytes()).is_err());
        // mke2fs caps groups at 65528 blocks from 8 KiB blocks on, and
        // e2fsck holds to it: the descriptor's free count is 16 bits.
        sb.s_log_block_size = 3;
        sb.s_blocks_per_group = 65536;
        sb.s_blocks_count = 3 * 65536;
        assert!(Superblock::parse(&sb.to_bytes()).is_err());
        sb.s_blocks_per_group = 65528;
        sb.s_blocks_count = 3 * 65528;
        sb.s_inodes_count = 3 * 8192;
        assert!(Superblock::parse(&sb.to_bytes()).is_ok());
        sb.s_inodes_per_group = 65536;
        sb.s_inodes_count = 3 * 65536;
        assert!(Superblock::parse(&sb.to_bytes()).is_err());
        sb.s_inodes_per_group = 65536 - 32;
        sb.s_inodes_count = 3 * (65536 - 32);
        assert!(Superblock::parse(&sb.to_bytes()).is_ok());
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..2000 {
            let mut b = sample().to_bytes();
            for _ in 0..8 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                b[(x % 1024) as usize] = (x >> 32) as u8;
            }
            if let Ok(sb) = Superblock::parse(&b) {
                let _ = (sb.group_count(), sb.gdt_blocks(), sb.inode_table_blocks());
            }
        }
    }

    #[test]
    fn feature_names() {
        assert_eq!(
            feature::by_name("has_journal"),
            Some((feature::Kind::Compat, feature::COMPAT_HAS_JOURNAL))
        );
        assert_eq!(
            feature::names(feature::Kind::Incompat, 0x40 | 0x8000_0000),
            vec!["extent".to_string(), "FEATURE_I31".to_string()]
        );
    }
}
