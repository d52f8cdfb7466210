//! ext3 inodes (struct ext2_inode and ext2_inode_large): 128 bytes of core
//! fields, then for larger inodes `i_extra_isize` bytes of extra fields
//! (nanosecond and creation times) and the in-inode xattr area.
//!
//! The parsed struct keeps the raw on-disk bytes, so that the in-inode xattr
//! area and fields jbdfs does not model round-trip untouched.

use super::bytes::*;
use super::FormatError;

pub const EXT2_GOOD_OLD_INODE_SIZE: usize = 128;
pub const EXT2_N_BLOCKS: usize = 15;
/// Symlinks shorter than this live in `i_block` ("fast" symlinks).
pub const EXT2_FAST_SYMLINK_MAX: usize = EXT2_N_BLOCKS * 4;

pub const S_IFMT: u16 = 0o170000;
pub const S_IFSOCK: u16 = 0o140000;
pub const S_IFLNK: u16 = 0o120000;
pub const S_IFREG: u16 = 0o100000;
pub const S_IFBLK: u16 = 0o060000;
pub const S_IFDIR: u16 = 0o040000;
pub const S_IFCHR: u16 = 0o020000;
pub const S_IFIFO: u16 = 0o010000;
pub const S_ISUID: u16 = 0o4000;
pub const S_ISGID: u16 = 0o2000;
pub const S_IXGRP: u16 = 0o0010;

/// i_flags bits, as in the kernel's ext3_fs.h.
pub mod flags {
    pub const EXT2_SECRM_FL: u32 = 0x0000_0001;
    pub const EXT2_UNRM_FL: u32 = 0x0000_0002;
    pub const EXT2_COMPR_FL: u32 = 0x0000_0004;
    pub const EXT2_SYNC_FL: u32 = 0x0000_0008;
    pub const EXT2_IMMUTABLE_FL: u32 = 0x0000_0010;
    pub const EXT2_APPEND_FL: u32 = 0x0000_0020;
    pub const EXT2_NODUMP_FL: u32 = 0x0000_0040;
    pub const EXT2_NOATIME_FL: u32 = 0x0000_0080;
    pub const EXT2_INDEX_FL: u32 = 0x0000_1000;
    pub const EXT3_JOURNAL_DATA_FL: u32 = 0x0000_4000;
    pub const EXT2_DIRSYNC_FL: u32 = 0x0001_0000;
    pub const EXT2_TOPDIR_FL: u32 = 0x0002_0000;
    pub const EXT4_HUGE_FILE_FL: u32 = 0x0004_0000;
    pub const EXT4_EXTENTS_FL: u32 = 0x0008_0000;
    pub const EXT4_EA_INODE_FL: u32 = 0x0020_0000;
    pub const EXT4_INLINE_DATA_FL: u32 = 0x1000_0000;

    // The rest of ext3's flags (include/linux/ext3_fs.h), for the masks.
    pub const EXT3_DIRTY_FL: u32 = 0x0000_0100;
    pub const EXT3_COMPRBLK_FL: u32 = 0x0000_0200;
    pub const EXT3_NOCOMPR_FL: u32 = 0x0000_0400;
    pub const EXT3_ECOMPR_FL: u32 = 0x0000_0800;
    pub const EXT3_IMAGIC_FL: u32 = 0x0000_2000;
    pub const EXT3_NOTAIL_FL: u32 = 0x0000_8000;
    pub const EXT3_RESERVED_FL: u32 = 0x8000_0000;

    /// The flags FS_IOC_GETFLAGS shows (lsattr).
    pub const EXT3_FL_USER_VISIBLE: u32 = 0x0003_DFFF;
    /// The flags FS_IOC_SETFLAGS may change (chattr); the others keep
    /// their value. `EXT3_JOURNAL_DATA_FL` is not among them: ext3 changes
    /// it on its own path, behind CAP_SYS_RESOURCE.
    pub const EXT3_FL_USER_MODIFIABLE: u32 = 0x0003_80FF;
    /// The flags a new inode takes from its directory.
    pub const EXT3_FL_INHERITED: u32 = EXT2_SECRM_FL
        | EXT2_UNRM_FL
        | EXT2_COMPR_FL
        | EXT2_SYNC_FL
        | EXT2_NODUMP_FL
        | EXT2_NOATIME_FL
        | EXT3_COMPRBLK_FL
        | EXT3_NOCOMPR_FL
        | EXT3_JOURNAL_DATA_FL
        | EXT3_NOTAIL_FL
        | EXT2_DIRSYNC_FL;
    /// The flags a regular file may carry: all but the directory ones.
    pub const EXT3_REG_FLMASK: u32 = !(EXT2_DIRSYNC_FL | EXT2_TOPDIR_FL);
    /// The flags other non-directories (symlinks, devices, fifos,
    /// sockets) may carry.
    pub const EXT3_OTHER_FLMASK: u32 = EXT2_NODUMP_FL | EXT2_NOATIME_FL;

    /// ext3_mask_flags: `flags` less those inappropriate for an inode of
    /// `mode` (the S_IFMT bits decide).
    pub fn ext3_mask_flags(mode: u16, flags: u32) -> u32 {
        match mode & super::S_IFMT {
            super::S_IFDIR => flags,
            super::S_IFREG => flags & EXT3_REG_FLMASK,
            _ => flags & EXT3_OTHER_FLMASK,
        }
    }
}

/// Reserved inode numbers.
pub mod ino {
    pub const EXT2_BAD_INO: u32 = 1;
    pub const EXT2_ROOT_INO: u32 = 2;
    pub const EXT4_USR_QUOTA_INO: u32 = 3;
    pub const EXT4_GRP_QUOTA_INO: u32 = 4;
    pub const EXT2_BOOT_LOADER_INO: u32 = 5;
    pub const EXT2_UNDEL_DIR_INO: u32 = 6;
    pub const EXT2_RESIZE_INO: u32 = 7;
    pub const EXT2_JOURNAL_INO: u32 = 8;
    pub const EXT2_EXCLUDE_INO: u32 = 9;
    pub const EXT4_REPLICA_INO: u32 = 10;
    pub const EXT2_FIRST_INO: u32 = 11;
}

/// Fields read and written in place in an on-disk inode record, for code
/// that must see or patch bytes without parsing the whole inode (the
/// orphan chain's link in `i_dtime`; fsck reading what the parser would
/// reject). The record must hold the field: 128 bytes for the core fields,
/// more for `i_extra_isize`.
pub mod raw {
    use super::super::bytes::{le16, le32, put_le16, put_le32};

    const I_MODE: usize = 0x00;
    const I_DTIME: usize = 0x14;
    const I_LINKS_COUNT: usize = 0x1A;
    const L_I_FILE_ACL_HIGH: usize = 0x76;
    const I_EXTRA_ISIZE: usize = 0x80;

    pub fn i_mode(raw: &[u8]) -> u16 {
        le16(raw, I_MODE)
    }

    pub fn i_dtime(raw: &[u8]) -> u32 {
        le32(raw, I_DTIME)
    }

    /// Rewrites `i_dtime`, which links an orphan to the next one.
    pub fn set_i_dtime(raw: &mut [u8], dtime: u32) {
        put_le32(raw, I_DTIME, dtime);
    }

    pub fn i_links_count(raw: &[u8]) -> u16 {
        le16(raw, I_LINKS_COUNT)
    }

    /// `osd2.linux2.l_i_file_acl_high`: zero on ext3 (no 64bit).
    pub fn l_i_file_acl_high(raw: &[u8]) -> u16 {
        le16(raw, L_I_FILE_ACL_HIGH)
    }

    pub fn set_l_i_file_acl_high(raw: &mut [u8], v: u16) {
        put_le16(raw, L_I_FILE_ACL_HIGH, v);
    }

    /// `i_extra_isize` as stored, valid or not (a large inode only).
    pub fn i_extra_isize(raw: &[u8]) -> u16 {
        le16(raw, I_EXTRA_ISIZE)
    }

    pub fn set_i_extra_isize(raw: &mut [u8], v: u16) {
        put_le16(raw, I_EXTRA_ISIZE, v);
    }
}

/// The extra fields of a large inode that hold times.
const EXTRA_TIMES_END: u16 = 0x98 - 0x80;

/// A timestamp with the extra-field encoding: the low two bits of the extra
/// word extend the seconds past 2038, the upper 30 bits are nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp {
    pub sec: i64,
    pub nsec: u32,
}

impl Timestamp {
    pub fn decode(lo: u32, extra: Option<u32>) -> Self {
        let base = lo as i32 as i64;
        match extra {
            None => Timestamp { sec: base, nsec: 0 },
            Some(x) => Timestamp {
                sec: base + (((x & 3) as i64) << 32),
                nsec: (x >> 2).min(999_999_999),
            },
        }
    }

    /// The `(lo, extra)` words for this time.
    pub fn encode(&self) -> (u32, u32) {
        let lo = self.sec as u32;
        let epoch = ((self.sec - (lo as i32 as i64)) >> 32) as u32 & 3;
        (lo, (self.nsec.min(999_999_999) << 2) | epoch)
    }
}

/// An inode, with the kernel's field names. `i_size` joins `i_size_lo` and
/// `i_size_high`; the times carry nanoseconds when the inode has room for them.
#[derive(Clone, Debug)]
pub struct Inode {
    pub i_mode: u16,
    pub i_uid: u32,
    pub i_gid: u32,
    pub i_size: u64,
    pub i_atime: Timestamp,
    pub i_ctime: Timestamp,
    pub i_mtime: Timestamp,
    pub i_crtime: Timestamp,
    pub i_dtime: u32,
    pub i_links_count: u16,
    /// In 512-byte sectors, including indirect and xattr blocks.
    pub i_blocks: u64,
    pub i_flags: u32,
    pub i_version: u32,
    pub i_block: [u32; EXT2_N_BLOCKS],
    pub i_generation: u32,
    pub i_file_acl: u32,
    pub i_faddr: u32,
    pub i_extra_isize: u16,
    raw: Vec<u8>,
}

/// Two values are equal when they serialize to the same bytes.
impl PartialEq for Inode {
    fn eq(&self, other: &Self) -> bool {
        self.to_bytes()[..] == other.to_bytes()[..]
    }
}

impl Eq for Inode {}

const S: &str = "inode";

impl Inode {
    /// A zeroed inode of `size` bytes (128 or more) with `i_extra_isize` set
    /// to `extra_isize` when there is room.
    pub fn new(size: usize, extra_isize: u16) -> Self {
        let mut raw = vec![0u8; size.max(EXT2_GOOD_OLD_INODE_SIZE)];
        if raw.len() > EXT2_GOOD_OLD_INODE_SIZE {
            let fit = (raw.len() - EXT2_GOOD_OLD_INODE_SIZE) as u16;
            put_le16(&mut raw, 0x80, extra_isize.min(fit));
        }
        Self::parse_fields(&raw)
    }

    /// Parses an on-disk inode of `buf.len()` bytes (its inode size).
    pub fn parse(buf: &[u8]) -> Result<Self, FormatError> {
        need(S, buf, EXT2_GOOD_OLD_INODE_SIZE)?;
        if buf.len() > EXT2_GOOD_OLD_INODE_SIZE {
            need(S, buf, EXT2_GOOD_OLD_INODE_SIZE + 4)?;
            let extra = le16(buf, 0x80) as usize;
            if extra % 4 != 0 || EXT2_GOOD_OLD_INODE_SIZE + extra > buf.len() {
                return Err(FormatError::bad_field(
                    S,
                    "i_extra_isize",
                    extra as u64,
                    "must be a multiple of 4 that fits in the inode",
                ));
            }
        }
        Ok(Self::parse_fields(buf))
    }

    fn parse_fields(buf: &[u8]) -> Self {
        let extra_isize = if buf.len() > EXT2_GOOD_OLD_INODE_SIZE {
            le16(buf, 0x80)
        } else {
            0
        };
        let extra = |off: usize| {
            let field_end = (off + 4 - EXT2_GOOD_OLD_INODE_SIZE) as u16;
            (extra_isize >= field_end).then(|| le32(buf, off))
        };
        let mut i_block = [0u32; EXT2_N_BLOCKS];
        for (i, b) in i_block.iter_mut().enumerate() {
            *b = le32(buf, 0x28 + 4 * i);
        }
        let crtime = match extra(0x90) {
            Some(lo) => Timestamp::decode(lo, extra(0x94)),
            None => Timestamp::default(),
        };
        Inode {
            i_mode: le16(buf, 0x00),
            i_uid: le16(buf, 0x02) as u32 | (le16(buf, 0x78) as u32) << 16,
            i_gid: le16(buf, 0x18) as u32 | (le16(buf, 0x7A) as u32) << 16,
            i_size: le32(buf, 0x04) as u64 | (le32(buf, 0x6C) as u64) << 32,
            i_atime: Timestamp::decode(le32(buf, 0x08), extra(0x8C)),
            i_ctime: Timestamp::decode(le32(buf, 0x0C), extra(0x84)),
            i_mtime: Timestamp::decode(le32(buf, 0x10), extra(0x88)),
            i_crtime: crtime,
            i_dtime: le32(buf, 0x14),
            i_links_count: le16(buf, 0x1A),
            i_blocks: le32(buf, 0x1C) as u64 | (le16(buf, 0x74) as u64) << 32,
            i_flags: le32(buf, 0x20),
            i_version: le32(buf, 0x24),
            i_block,
            i_generation: le32(buf, 0x64),
            i_file_acl: le32(buf, 0x68),
            i_faddr: le32(buf, 0x70),
            i_extra_isize: extra_isize,
            raw: buf.to_vec(),
        }
    }

    /// Serializes into the on-disk size this inode was parsed or created with.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = self.raw.clone();
        self.write_core(&mut b);
        if b.len() > EXT2_GOOD_OLD_INODE_SIZE {
            self.write_extra(&mut b);
        }
        b
    }

    fn write_core(&self, b: &mut [u8]) {
        put_le16(b, 0x00, self.i_mode);
        put_le16(b, 0x02, self.i_uid as u16);
        put_le32(b, 0x04, self.i_size as u32);
        put_le32(b, 0x08, self.i_atime.encode().0);
        put_le32(b, 0x0C, self.i_ctime.encode().0);
        put_le32(b, 0x10, self.i_mtime.encode().0);
        put_le32(b, 0x14, self.i_dtime);
        put_le16(b, 0x18, self.i_gid as u16);
        put_le16(b, 0x1A, self.i_links_count);
        put_le32(b, 0x1C, self.i_blocks as u32);
        put_le32(b, 0x20, self.i_flags);
        put_le32(b, 0x24, self.i_version);
        for (i, v) in self.i_block.iter().enumerate() {
            put_le32(b, 0x28 + 4 * i, *v);
        }
        put_le32(b, 0x64, self.i_generation);
        put_le32(b, 0x68, self.i_file_acl);
        put_le32(b, 0x6C, (self.i_size >> 32) as u32);
        put_le32(b, 0x70, self.i_faddr);
        put_le16(b, 0x74, (self.i_blocks >> 32) as u16);
        put_le16(b, 0x78, (self.i_uid >> 16) as u16);
        put_le16(b, 0x7A, (self.i_gid >> 16) as u16);
    }

    fn write_extra(&self, b: &mut [u8]) {
        put_le16(b, 0x80, self.i_extra_isize);
        let fits = |off: usize| self.i_extra_isize as usize >= off + 4 - EXT2_GOOD_OLD_INODE_SIZE;
        let times = [
            (0x84, self.i_ctime),
            (0x88, self.i_mtime),
            (0x8C, self.i_atime),
        ];
        for (off, t) in times {
            if fits(off) {
                put_le32(b, off, t.encode().1);
            }
        }
        if fits(0x94) {
            let (lo, extra) = self.i_crtime.encode();
            put_le32(b, 0x90, lo);
            put_le32(b, 0x94, extra);
        }
    }

    /// The on-disk size of this inode record.
    pub fn disk_size(&self) -> usize {
        self.raw.len()
    }

    /// Whether the extra fields carry nanosecond times.
    pub fn has_extra_times(&self) -> bool {
        self.i_extra_isize >= EXTRA_TIMES_END
    }

    /// The in-inode xattr area (after the extra fields), if the inode has one.
    pub fn xattr_area(&self) -> &[u8] {
        let start = EXT2_GOOD_OLD_INODE_SIZE + self.i_extra_isize as usize;
        self.raw.get(start..).unwrap_or(&[])
    }

    /// Replaces the in-inode xattr area; `area` must be exactly as long as
    /// [`Self::xattr_area`].
    pub fn set_xattr_area(&mut self, area: &[u8]) -> bool {
        let start = EXT2_GOOD_OLD_INODE_SIZE + self.i_extra_isize as usize;
        match self.raw.get_mut(start..) {
            Some(dst) if dst.len() == area.len() => {
                dst.copy_from_slice(area);
                true
            }
            _ => false,
        }
    }

    pub fn file_type(&self) -> u16 {
        self.i_mode & S_IFMT
    }

    pub fn is_dir(&self) -> bool {
        self.file_type() == S_IFDIR
    }

    pub fn is_reg(&self) -> bool {
        self.file_type() == S_IFREG
    }

    pub fn is_symlink(&self) -> bool {
        self.file_type() == S_IFLNK
    }

    /// A fast symlink keeps its target in `i_block`: no data blocks (an
    /// xattr block may still be counted in `i_blocks`).
    pub fn is_fast_symlink(&self, block_size: u32) -> bool {
        let xattr_sectors = if self.i_file_acl != 0 {
            block_size as u64 / 512
        } else {
            0
        };
        self.is_symlink()
            && self.i_blocks == xattr_sectors
            && self.i_size < EXT2_FAST_SYMLINK_MAX as u64
    }

    /// Whether `i_block` holds a block map: true for regular files,
    /// directories and slow symlinks, the inodes the kernel's
    /// `ext3_can_truncate` lets truncate free blocks from and e2fsck walks.
    /// A fast symlink keeps its target there, a device its number, and a
    /// fifo or socket nothing, so their `i_block` must never be followed.
    pub fn has_block_map(&self, block_size: u32) -> bool {
        match self.file_type() {
            S_IFREG | S_IFDIR => true,
            S_IFLNK => !self.is_fast_symlink(block_size),
            _ => false,
        }
    }

    /// The bytes of `i_block`, where fast symlinks keep their target.
    pub fn i_block_bytes(&self) -> [u8; EXT2_FAST_SYMLINK_MAX] {
        let mut out = [0u8; EXT2_FAST_SYMLINK_MAX];
        for (o, v) in out.chunks_exact_mut(4).zip(self.i_block) {
            o.copy_from_slice(&v.to_le_bytes());
        }
        out
    }

    pub fn set_i_block_bytes(&mut self, bytes: &[u8]) {
        let mut buf = [0u8; EXT2_FAST_SYMLINK_MAX];
        for (b, v) in buf.iter_mut().zip(bytes) {
            *b = *v;
        }
        for (i, v) in self.i_block.iter_mut().enumerate() {
            *v = le32(&buf, 4 * i);
        }
    }

    /// Whether device numbers are stored, as for character and block devices.
    pub fn is_device(&self) -> bool {
        matches!(self.file_type(), S_IFCHR | S_IFBLK)
    }

    /// The device number of a device inode, decoded as the kernel does:
    /// old encoding in i_block[0], new (huge) encoding in i_block[1].
    pub fn rdev(&self) -> (u32, u32) {
        if self.i_block[0] != 0 {
            let d = self.i_block[0];
            ((d >> 8) & 0xff, d & 0xff)
        } else {
            let d = self.i_block[1];
            ((d & 0xfff00) >> 8, (d & 0xff) | ((d >> 12) & 0xfff00))
        }
    }

    /// Stores a device number as the kernel does (old encoding when it fits).
    pub fn set_rdev(&mut self, major: u32, minor: u32) {
        self.i_block = [0; EXT2_N_BLOCKS];
        if major < 256 && minor < 256 {
            self.i_block[0] = (major << 8) | minor;
        } else {
            self.i_block[1] = (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(size: usize) -> Inode {
        let mut i = Inode::new(size, 32);
        i.i_mode = S_IFREG | 0o644;
        i.i_uid = 70000;
        i.i_gid = 1000;
        i.i_size = 5 << 32 | 12345;
        i.i_mtime = Timestamp {
            sec: 1_700_000_000,
            nsec: 123_456_789,
        };
        i.i_atime = Timestamp {
            sec: 1 << 33,
            nsec: 1,
        };
        i.i_links_count = 3;
        i.i_blocks = 1 << 33 | 8;
        i.i_block[14] = 99;
        i.i_file_acl = 1234;
        i
    }

    #[test]
    fn large_inode_round_trip_keeps_nanoseconds() {
        let i = sample(256);
        let b = i.to_bytes();
        assert_eq!(b.len(), 256);
        let back = Inode::parse(&b).unwrap();
        assert_eq!(back, i);
        assert_eq!(back.i_mtime.nsec, 123_456_789);
        assert_eq!(back.i_atime.sec, 1 << 33);
        assert_eq!(back.xattr_area().len(), 256 - 128 - 32);
    }

    #[test]
    fn small_inode_drops_nanoseconds() {
        let i = sample(128);
        let back = Inode::parse(&i.to_bytes()).unwrap();
        assert_eq!(back.i_mtime.nsec, 0);
        assert_eq!(back.i_uid, 70000);
        assert_eq!(back.i_size, i.i_size);
        assert!(back.xattr_area().is_empty());
    }

    #[test]
    fn bad_extra_isize_is_named() {
        let mut b = sample(256).to_bytes();
        put_le16(&mut b, 0x80, 200);
        let e = Inode::parse(&b).unwrap_err();
        assert!(e.to_string().contains("i_extra_isize"));
        assert!(Inode::parse(&b[..100]).is_err());
    }

    #[test]
    fn timestamps_before_1970_and_after_2038() {
        for sec in [
            -1i64,
            -(1 << 31),
            0,
            (1 << 31) - 1,
            1 << 31,
            (1 << 32) + 5,
            1 << 33,
        ] {
            let t = Timestamp { sec, nsec: 42 };
            let (lo, x) = t.encode();
            assert_eq!(Timestamp::decode(lo, Some(x)), t, "sec {sec}");
        }
    }

    #[test]
    fn device_numbers() {
        let mut i = Inode::new(256, 32);
        i.i_mode = S_IFCHR | 0o600;
        i.set_rdev(1, 3);
        assert_eq!(i.rdev(), (1, 3));
        i.set_rdev(300, 70000);
        assert_eq!(i.rdev(), (300, 70000));
    }

    #[test]
    fn only_files_directories_and_slow_symlinks_have_block_maps() {
        let mut i = Inode::new(256, 32);
        for (mode, has) in [
            (S_IFREG, true),
            (S_IFDIR, true),
            (S_IFIFO, false),
            (S_IFSOCK, false),
            (S_IFCHR, false),
            (S_IFBLK, false),
            (0, false),
        ] {
            i.i_mode = mode | 0o644;
            assert_eq!(i.has_block_map(1024), has, "mode {mode:o}");
        }
        i.i_mode = S_IFLNK | 0o777;
        i.i_size = 12;
        assert!(!i.has_block_map(1024), "fast symlink");
        i.i_blocks = 2;
        assert!(i.has_block_map(1024), "slow symlink");
    }

    #[test]
    fn raw_fields_match_the_parser() {
        let mut i = sample(256);
        i.i_dtime = 77;
        let mut b = i.to_bytes();
        assert_eq!(raw::i_mode(&b), i.i_mode);
        assert_eq!(raw::i_links_count(&b), 3);
        assert_eq!(raw::i_dtime(&b), 77);
        assert_eq!(raw::i_extra_isize(&b), 32);
        raw::set_i_dtime(&mut b, 12);
        assert_eq!(Inode::parse(&b).unwrap().i_dtime, 12);
        raw::set_l_i_file_acl_high(&mut b, 5);
        assert_eq!(raw::l_i_file_acl_high(&b), 5);
        raw::set_i_extra_isize(&mut b, 0);
        assert_eq!(Inode::parse(&b).unwrap().i_extra_isize, 0);
    }

    #[test]
    fn fast_symlink_bytes() {
        let mut i = Inode::new(256, 32);
        i.i_mode = S_IFLNK | 0o777;
        i.set_i_block_bytes(b"/some/target");
        i.i_size = 12;
        assert!(i.is_fast_symlink(4096));
        assert_eq!(&i.i_block_bytes()[..12], b"/some/target");
    }
}
