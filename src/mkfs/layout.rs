//! Writing a planned filesystem where mke2fs (without flex_bg) would put
//! it, so that e2fsck and the kernel take it for one of theirs: each group
//! holds, in order, an optional superblock and descriptor-table backup, its
//! block bitmap, its inode bitmap and its inode table, then data. Here are
//! the superblocks and descriptors, the bitmaps, the inode tables, the
//! reserved inodes and the root and lost+found directories.

use std::collections::BTreeMap;
use std::io;

use super::geometry::Geometry;
use super::journal::JournalMap;
use super::{MkfsOptions, Result, Zeroed};
use crate::device::BlockDevice;
use crate::format::dirent::{set_rec_len_at, DX_HASH_HALF_MD4, EXT2_FT_DIR};
use crate::format::group_desc::GroupDesc;
use crate::format::inode::{ino, Inode, Timestamp, S_IFDIR, S_IFREG};
use crate::format::superblock::{self as sbm, feature, Superblock};
use crate::util::Progress;

/// The extra-field size mke2fs gives new 256-byte inodes.
const EXTRA_ISIZE: u16 = 32;

/// mke2fs grows lost+found to 16 KiB, and to at least two blocks, so that
/// e2fsck can reconnect files without allocating.
pub(super) fn lost_found_blocks(block_size: u32) -> u32 {
    let mut size = 0;
    let mut blocks = 1;
    for _ in 1..12 {
        size += block_size;
        if size >= 16 * 1024 && size >= 2 * block_size {
            break;
        }
        blocks += 1;
    }
    blocks
}

/// Hands out free data blocks in order, skipping group metadata.
pub(super) struct Allocator<'a> {
    g: &'a Geometry,
    /// Allocated runs: start -> length.
    runs: BTreeMap<u32, u32>,
    last: Option<u32>,
}

impl<'a> Allocator<'a> {
    pub(super) fn new(g: &'a Geometry) -> Self {
        Allocator {
            g,
            runs: BTreeMap::new(),
            last: None,
        }
    }

    /// The first free block at or after `goal` (blocks are only ever
    /// handed out in increasing order from one goal, so "free" means "past
    /// the last one handed out").
    pub(super) fn next(&mut self, goal: u32) -> u32 {
        let mut b = match self.last {
            Some(l) if l >= goal => l + 1,
            _ => goal,
        };
        loop {
            let (grp, _) = self.g_group(b);
            let l = self.g.group(grp);
            if b < l.data_start {
                b = l.data_start;
            }
            if b < self.g.blocks_count {
                break;
            }
            // Wrap to the start of the filesystem's data.
            b = self.g.group(0).data_start;
        }
        self.last = Some(b);
        match self.runs.range_mut(..b).next_back() {
            Some((&s, len)) if s + *len == b => *len += 1,
            _ => {
                self.runs.insert(b, 1);
            }
        }
        b
    }

    fn g_group(&self, b: u32) -> (u32, u32) {
        let i = b - self.g.first_data_block;
        (i / self.g.blocks_per_group, i % self.g.blocks_per_group)
    }

    /// Allocated blocks inside `[first, first + len)`.
    fn runs_in(&self, first: u32, len: u32) -> impl Iterator<Item = (u32, u32)> + '_ {
        let end = first + len;
        let start_key = self
            .runs
            .range(..=first)
            .next_back()
            .map(|(&s, _)| s)
            .unwrap_or(first);
        self.runs.range(start_key..end).filter_map(move |(&s, &l)| {
            let a = s.max(first);
            let b = (s + l).min(end);
            (a < b).then(|| (a, b - a))
        })
    }
}

pub(super) fn build_superblock(
    g: &Geometry,
    opts: &MkfsOptions,
    uuid: &[u8; 16],
    descs: &[GroupDesc],
    journal: &JournalMap,
    now: u32,
) -> Result<Superblock> {
    let mut sb = Superblock::zeroed();
    sb.s_inodes_count = g.inodes_count();
    sb.s_blocks_count = g.blocks_count;
    sb.s_r_blocks_count = g.r_blocks_count;
    sb.s_free_blocks_count = descs.iter().map(|d| d.bg_free_blocks_count as u32).sum();
    sb.s_free_inodes_count = descs.iter().map(|d| d.bg_free_inodes_count as u32).sum();
    sb.s_first_data_block = g.first_data_block;
    sb.s_log_block_size = g.block_size.trailing_zeros() - 10;
    sb.s_log_frag_size = sb.s_log_block_size;
    sb.s_blocks_per_group = g.blocks_per_group;
    sb.s_frags_per_group = g.blocks_per_group;
    sb.s_inodes_per_group = g.inodes_per_group;
    sb.s_wtime = now;
    sb.s_max_mnt_count = -1;
    sb.s_magic = sbm::EXT2_SUPER_MAGIC;
    sb.s_state = sbm::EXT2_VALID_FS;
    sb.s_errors = opts.errors;
    sb.s_creator_os = opts.creator_os;
    let last = opts.last_mounted.as_bytes();
    sb.s_last_mounted[..last.len()].copy_from_slice(last);
    sb.s_raid_stride = opts.stride.unwrap_or(0);
    sb.s_raid_stripe_width = opts.stripe_width.unwrap_or(0);
    sb.s_lastcheck = now;
    sb.s_rev_level = sbm::EXT2_DYNAMIC_REV;
    sb.s_first_ino = ino::EXT2_FIRST_INO;
    sb.s_inode_size = g.inode_size;
    sb.s_feature_compat = g.compat;
    sb.s_feature_incompat = g.incompat;
    sb.s_feature_ro_compat = g.ro_compat;
    sb.s_uuid = *uuid;
    sb.s_volume_name[..opts.label.len()].copy_from_slice(opts.label.as_bytes());
    sb.s_journal_inum = ino::EXT2_JOURNAL_INO;
    if g.compat & feature::COMPAT_DIR_INDEX != 0 {
        let seed = match opts.hash_seed {
            Some(s) => s,
            None => crate::util::random_uuid()?,
        };
        for (i, w) in sb.s_hash_seed.iter_mut().enumerate() {
            *w = u32::from_le_bytes([
                seed[4 * i],
                seed[4 * i + 1],
                seed[4 * i + 2],
                seed[4 * i + 3],
            ]);
        }
        sb.s_def_hash_version = DX_HASH_HALF_MD4;
    }
    sb.s_flags = if (std::ffi::c_char::MIN as i32) < 0 {
        sbm::EXT2_FLAGS_SIGNED_HASH
    } else {
        sbm::EXT2_FLAGS_UNSIGNED_HASH
    };
    // acl,user_xattr, as mke2fs.conf's default_mntopts.
    sb.s_default_mount_opts = 0x0004 | 0x0008;
    sb.s_mkfs_time = now;
    sb.s_jnl_backup_type = sbm::EXT3_JNL_BACKUP_BLOCKS;
    sb.s_jnl_blocks[..15].copy_from_slice(&journal.i_block);
    let jsize = g.journal_blocks as u64 * g.block_size as u64;
    sb.s_jnl_blocks[15] = (jsize >> 32) as u32;
    sb.s_jnl_blocks[16] = jsize as u32;
    if g.inode_size > 128 {
        sb.s_min_extra_isize = EXTRA_ISIZE;
        sb.s_want_extra_isize = EXTRA_ISIZE;
    }
    Ok(sb)
}

/// Writes blocks to the device, skipping zero blocks on a zeroed device.
pub(super) struct Writer<'a> {
    pub(super) dev: &'a dyn BlockDevice,
    pub(super) g: &'a Geometry,
    pub(super) zeroed: Zeroed,
}

/// Zero blocks are written in chunks of this many bytes.
const ZERO_CHUNK: usize = 1 << 20;

impl<'a> Writer<'a> {
    pub(super) fn new(dev: &'a dyn BlockDevice, g: &'a Geometry, zeroed: Zeroed) -> Self {
        Writer { dev, g, zeroed }
    }

    pub(super) fn offset(&self, block: u32) -> u64 {
        block as u64 * self.g.block_size as u64
    }

    pub(super) fn write_block(&self, block: u32, data: &[u8]) -> io::Result<()> {
        if self.zeroed == Zeroed::All && data.iter().all(|&b| b == 0) {
            return Ok(());
        }
        self.dev.write_at(data, self.offset(block))
    }

    pub(super) fn zero_range(&self, block: u32, count: u32) -> io::Result<()> {
        if self.zeroed == Zeroed::All {
            return Ok(());
        }
        let zeros = vec![0u8; ZERO_CHUNK];
        let mut pos = self.offset(block);
        let end = self.offset(block + count);
        while pos < end {
            let n = ((end - pos) as usize).min(ZERO_CHUNK);
            self.dev.write_at(&zeros[..n], pos)?;
            pos += n as u64;
        }
        Ok(())
    }

    pub(super) fn zero_inode_tables(&self, progress: &mut Progress) -> io::Result<()> {
        progress.start("Writing inode tables", self.g.groups as u64);
        for grp in 0..self.g.groups {
            self.zero_range(self.g.group(grp).inode_table, self.g.itable_blocks)?;
            progress.set(grp as u64 + 1);
        }
        progress.finish();
        Ok(())
    }

    fn new_inode(&self, mode: u16, now: u32) -> Inode {
        let mut i = Inode::new(self.g.inode_size as usize, EXTRA_ISIZE);
        let t = Timestamp {
            sec: now as i64,
            nsec: 0,
        };
        i.i_mode = mode;
        i.i_atime = t;
        i.i_ctime = t;
        i.i_mtime = t;
        i.i_crtime = t;
        i
    }

    fn write_inode(&self, n: u32, inode: &Inode) -> io::Result<()> {
        let idx = n - 1;
        let grp = idx / self.g.inodes_per_group;
        let within = (idx % self.g.inodes_per_group) as u64 * self.g.inode_size as u64;
        let off = self.offset(self.g.group(grp).inode_table) + within;
        self.dev.write_at(&inode.to_bytes(), off)
    }

    pub(super) fn write_directories(
        &self,
        root_blk: u32,
        lpf: &[u32],
        root_owner: (u32, u32),
        now: u32,
    ) -> io::Result<()> {
        let bs = self.g.block_size as usize;
        let ft = self.g.incompat & feature::INCOMPAT_FILETYPE != 0;
        let dir_type = if ft { EXT2_FT_DIR } else { 0 };
        let root = dir_block(
            bs,
            &[
                (ino::EXT2_ROOT_INO, &b"."[..]),
                (ino::EXT2_ROOT_INO, b".."),
                (ino::EXT2_FIRST_INO, b"lost+found"),
            ],
            dir_type,
        );
        self.dev.write_at(&root, self.offset(root_blk))?;
        let first = dir_block(
            bs,
            &[
                (ino::EXT2_FIRST_INO, &b"."[..]),
                (ino::EXT2_ROOT_INO, b".."),
            ],
            dir_type,
        );
        self.dev.write_at(&first, self.offset(lpf[0]))?;
        let empty = dir_block(bs, &[], 0);
        for &b in &lpf[1..] {
            self.dev.write_at(&empty, self.offset(b))?;
        }
        let sectors = (self.g.block_size / 512) as u64;
        let mut r = self.new_inode(S_IFDIR | 0o755, now);
        r.i_links_count = 3;
        (r.i_uid, r.i_gid) = root_owner;
        r.i_size = bs as u64;
        r.i_blocks = sectors;
        r.i_block[0] = root_blk;
        self.write_inode(ino::EXT2_ROOT_INO, &r)?;
        let mut l = self.new_inode(S_IFDIR | 0o700, now);
        l.i_links_count = 2;
        l.i_size = (bs * lpf.len()) as u64;
        l.i_blocks = sectors * lpf.len() as u64;
        l.i_block[..lpf.len()].copy_from_slice(lpf);
        self.write_inode(ino::EXT2_FIRST_INO, &l)
    }

    pub(super) fn write_reserved_inodes(
        &self,
        j: &JournalMap,
        _lpf: &[u32],
        now: u32,
    ) -> io::Result<()> {
        let sectors = (self.g.block_size / 512) as u64;
        let mut ji = self.new_inode(S_IFREG | 0o600, now);
        ji.i_links_count = 1;
        ji.i_size = j.data.len() as u64 * self.g.block_size as u64;
        ji.i_blocks = (j.data.len() + j.indirect.len()) as u64 * sectors;
        ji.i_block = j.i_block;
        self.write_inode(ino::EXT2_JOURNAL_INO, &ji)?;
        // The bad blocks inode: empty, with times, as mke2fs leaves it.
        let mut bad = Inode::new(self.g.inode_size as usize, 0);
        let t = Timestamp {
            sec: now as i64,
            nsec: 0,
        };
        bad.i_atime = t;
        bad.i_ctime = t;
        bad.i_mtime = t;
        self.write_inode(ino::EXT2_BAD_INO, &bad)
    }

    /// Writes every group's bitmaps and returns the group descriptors.
    pub(super) fn write_bitmaps(
        &self,
        alloc: &Allocator,
        progress: &mut Progress,
    ) -> io::Result<Vec<GroupDesc>> {
        progress.start("Writing group bitmaps", self.g.groups as u64);
        let mut descs = Vec::with_capacity(self.g.groups as usize);
        for grp in 0..self.g.groups {
            let (desc, bb, ib) = self.group_bitmaps(grp, alloc, true);
            self.write_block(desc.bg_block_bitmap, &bb)?;
            self.write_block(desc.bg_inode_bitmap, &ib)?;
            descs.push(desc);
            progress.set(grp as u64 + 1);
        }
        progress.finish();
        Ok(descs)
    }

    /// The group descriptors of a filesystem that holds nothing but its
    /// metadata, for `-S`, whose bitmaps are left for e2fsck to rebuild:
    /// every inode counted free, as mke2fs -S leaves them.
    pub(super) fn bare_descriptors(&self, alloc: &Allocator) -> Vec<GroupDesc> {
        (0..self.g.groups)
            .map(|grp| self.group_bitmaps(grp, alloc, false).0)
            .collect()
    }

    /// Group `grp`'s descriptor and block and inode bitmaps; `reserved`:
    /// inodes 1 to 11 (the reserved ones and lost+found) are in use.
    fn group_bitmaps(
        &self,
        grp: u32,
        alloc: &Allocator,
        reserved: bool,
    ) -> (GroupDesc, Vec<u8>, Vec<u8>) {
        let l = self.g.group(grp);
        let bs = self.g.block_size as usize;
        let mut bb = vec![0u8; bs];
        set_bits(&mut bb, 0, l.data_start - l.first);
        for (s, n) in alloc.runs_in(l.first, l.len) {
            set_bits(&mut bb, s - l.first, n);
        }
        set_bits(&mut bb, l.len, 8 * bs as u32 - l.len);
        let used_blocks = count_bits(&bb, l.len);
        let mut ib = vec![0u8; bs];
        let ipg = self.g.inodes_per_group;
        let (used_inodes, dirs) = if grp == 0 && reserved {
            (ino::EXT2_FIRST_INO, 2)
        } else {
            (0, 0)
        };
        set_bits(&mut ib, 0, used_inodes);
        set_bits(&mut ib, ipg, 8 * bs as u32 - ipg);
        let desc = GroupDesc {
            bg_block_bitmap: l.block_bitmap,
            bg_inode_bitmap: l.inode_bitmap,
            bg_inode_table: l.inode_table,
            bg_free_blocks_count: (l.len - used_blocks) as u16,
            bg_free_inodes_count: (ipg - used_inodes) as u16,
            bg_used_dirs_count: dirs,
            ..Default::default()
        };
        (desc, bb, ib)
    }

    pub(super) fn write_superblocks(&self, sb: &Superblock, descs: &[GroupDesc]) -> io::Result<()> {
        let bs = self.g.block_size as usize;
        let table =
            crate::format::group_desc::table_to_bytes(descs, bs, self.g.gdt_blocks as usize);
        let mut sb = sb.clone();
        for grp in std::iter::once(0).chain(self.g.backup_groups()) {
            let l = self.g.group(grp);
            sb.s_block_group_nr = grp as u16;
            let bytes = sb.to_bytes();
            let (block, off) = if grp == 0 {
                (l.first, sbm::SUPERBLOCK_OFFSET - self.offset(l.first))
            } else {
                (l.first, 0)
            };
            // Block 0 of a 4 KiB filesystem also holds the boot sector,
            // which stays zero.
            let mut buf = vec![0u8; bs];
            buf[off as usize..off as usize + bytes.len()].copy_from_slice(&bytes);
            self.dev.write_at(&buf, self.offset(block))?;
            self.dev.write_at(&table, self.offset(block + 1))?;
        }
        if self.g.first_data_block == 1 {
            // The boot block of a 1 KiB filesystem.
            self.dev.write_at(&vec![0u8; 1024], 0)?;
        }
        Ok(())
    }
}

/// A directory block holding `entries`, the last one stretched to the end.
fn dir_block(bs: usize, entries: &[(u32, &[u8])], file_type: u8) -> Vec<u8> {
    let mut b = vec![0u8; bs];
    if entries.is_empty() {
        set_rec_len_at(&mut b, 0, bs);
        return b;
    }
    let mut off = 0;
    for (i, (ino, name)) in entries.iter().enumerate() {
        let need = (8 + name.len() + 3) & !3;
        let rec_len = if i + 1 == entries.len() {
            bs - off
        } else {
            need
        };
        b[off..off + 4].copy_from_slice(&ino.to_le_bytes());
        set_rec_len_at(&mut b, off, rec_len);
        b[off + 6] = name.len() as u8;
        b[off + 7] = file_type;
        b[off + 8..off + 8 + name.len()].copy_from_slice(name);
        off += rec_len;
    }
    b
}

/// Sets bits `start..start + count`, whole bytes at a time where it can:
/// a 64 KiB block's bitmap pads half a million bits past a group's end.
fn set_bits(map: &mut [u8], start: u32, count: u32) {
    let end = start + count;
    let mut i = start;
    while i < end {
        if i % 8 == 0 && end - i >= 8 {
            let bytes = (end - i) / 8;
            map[(i / 8) as usize..(i / 8 + bytes) as usize].fill(0xff);
            i += bytes * 8;
        } else {
            map[(i / 8) as usize] |= 1 << (i % 8);
            i += 1;
        }
    }
}

fn count_bits(map: &[u8], limit: u32) -> u32 {
    (0..limit)
        .filter(|&i| map[(i / 8) as usize] & (1 << (i % 8)) != 0)
        .count() as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemoryDevice;
    use crate::mkfs::{format, plan, Summary};

    fn make(size: u64, opts: &MkfsOptions) -> (MemoryDevice, Summary) {
        let dev = MemoryDevice::new(size).unwrap();
        let g = plan(opts, size).unwrap();
        let s = format(&dev, opts, &g, Zeroed::All, &mut Progress::quiet()).unwrap();
        (dev, s)
    }

    #[test]
    fn superblock_parses_back() {
        let (dev, s) = make(16 << 20, &MkfsOptions::default());
        let mut buf = vec![0u8; 1024];
        dev.read_at(&mut buf, 1024).unwrap();
        let sb = Superblock::parse(&buf).unwrap();
        assert_eq!(sb.s_blocks_count, s.geometry.blocks_count);
        assert_eq!(sb.s_free_inodes_count, sb.s_inodes_count - 11);
        assert!(sb.has_compat(feature::COMPAT_HAS_JOURNAL));
    }

    #[test]
    fn lost_found_sizes_match_mke2fs() {
        assert_eq!(lost_found_blocks(1024), 12);
        assert_eq!(lost_found_blocks(2048), 8);
        assert_eq!(lost_found_blocks(4096), 4);
        assert_eq!(lost_found_blocks(8192), 2);
        assert_eq!(lost_found_blocks(65536), 2);
    }

    #[test]
    fn a_64k_image_parses_back_with_encoded_directories() {
        let o = MkfsOptions {
            block_size: Some(65536),
            ..Default::default()
        };
        let (dev, s) = make(256 << 20, &o);
        let mut buf = vec![0u8; 1024];
        dev.read_at(&mut buf, 1024).unwrap();
        let sb = Superblock::parse(&buf).unwrap();
        assert_eq!(sb.block_size(), 65536);
        assert_eq!(sb.s_blocks_count, s.geometry.blocks_count);
        // lost+found's second block is one empty entry spanning the block,
        // stored as EXT4_MAX_REC_LEN.
        let mut inode = vec![0u8; 256];
        let itable = s.geometry.group(0).inode_table as u64 * 65536;
        dev.read_at(&mut inode, itable + 10 * 256).unwrap();
        let second = u32::from_le_bytes(inode[44..48].try_into().unwrap());
        let mut block = vec![0u8; 65536];
        dev.read_at(&mut block, second as u64 * 65536).unwrap();
        assert_eq!(u16::from_le_bytes([block[4], block[5]]), 65535);
        assert!(crate::format::dirent::is_empty_block(&block).unwrap());
    }

    #[test]
    fn set_bits_matches_bit_by_bit() {
        for (start, count) in [(0, 0), (3, 2), (5, 30), (8, 16), (1, 7), (13, 100)] {
            let mut fast = vec![0u8; 32];
            set_bits(&mut fast, start, count);
            let mut slow = vec![0u8; 32];
            for i in start..start + count {
                slow[(i / 8) as usize] |= 1 << (i % 8);
            }
            assert_eq!(fast, slow, "{start}+{count}");
        }
    }
}
