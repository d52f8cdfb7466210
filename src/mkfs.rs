//! mkfs.jbdfs: lay out a fresh ext3 filesystem on a block device.
//!
//! The layout follows mke2fs without flex_bg: each group holds, in order, an
//! optional superblock and descriptor-table backup, its block bitmap, its
//! inode bitmap and its inode table, then data. The journal lives in inode 8,
//! mapped through indirect blocks placed in line with its data, in the middle
//! of the filesystem as mke2fs places it.

use std::collections::BTreeMap;
use std::io;

use crate::device::BlockDevice;
use crate::format::group_desc::{GroupDesc, GROUP_DESC_SIZE};
use crate::format::inode::{ino, Inode, Timestamp, S_IFDIR, S_IFREG};
use crate::format::jbd::{self, JournalSuperblock};
use crate::format::superblock::{self as sbm, feature, Superblock};
use crate::format::{BlockNo, GroupNo};
use crate::util::Progress;

/// What the user asked for, in mke2fs's terms.
#[derive(Clone, Debug)]
pub struct MkfsOptions {
    /// `-b`: a power of two from 1024 to 65536; `None` picks by size as
    /// mke2fs does (never above 4096).
    pub block_size: Option<u32>,
    /// `-N`: the number of inodes wanted.
    pub inodes_count: Option<u64>,
    /// `-i`: bytes per inode.
    pub inode_ratio: Option<u64>,
    /// `-I`: 128 or 256.
    pub inode_size: u16,
    /// `-J size=`: the journal size in MiB.
    pub journal_mib: Option<u64>,
    /// `-L`
    pub label: String,
    /// `-U`
    pub uuid: Option<[u8; 16]>,
    /// `-m`: percentage of blocks reserved for root.
    pub reserved_percent: f64,
    /// `-O`: features to set ("name") or clear ("^name"), in order.
    pub features: Vec<String>,
}

impl Default for MkfsOptions {
    fn default() -> Self {
        MkfsOptions {
            block_size: None,
            inodes_count: None,
            inode_ratio: None,
            inode_size: 256,
            journal_mib: None,
            label: String::new(),
            uuid: None,
            reserved_percent: 5.0,
            features: Vec::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MkfsError {
    #[error("invalid block size {0}: must be a power of two from 1024 to 65536")]
    BadBlockSize(u64),
    #[error("invalid inode size {0}: must be 128 or 256")]
    BadInodeSize(u64),
    #[error("filesystem too small: {size} bytes; jbdfs needs at least {min} bytes")]
    TooSmall { size: u64, min: u64 },
    #[error("filesystem too large: {blocks} blocks of {block_size} bytes; ext3 without 64bit allows 2^32 - 1 blocks")]
    TooLarge { blocks: u64, block_size: u32 },
    #[error("unknown feature '{0}'")]
    UnknownFeature(String),
    #[error("feature '{0}' is not supported by jbdfs (ext3 format only)")]
    UnsupportedFeature(String),
    #[error("feature 'has_journal' cannot be cleared: jbdfs is a journaling filesystem")]
    JournalRequired,
    #[error("invalid journal size {0} MiB: must give between 1024 and 10,240,000 blocks and at most half the filesystem")]
    BadJournalSize(u64),
    #[error("invalid reserved blocks percentage {0}: must be between 0 and 50")]
    BadReserved(f64),
    #[error("too many inodes ({0}); ext3 allows at most 2^32 - 1")]
    TooManyInodes(u64),
    #[error("invalid label '{0}': at most 16 bytes")]
    BadLabel(String),
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

pub type Result<T> = std::result::Result<T, MkfsError>;

const SMALL_FS: u64 = 512 << 20;
const FLOPPY_FS: u64 = 3 << 20;
const BIG_FS: u64 = 4 << 40;
const HUGE_FS: u64 = 16 << 40;
/// The extra-field size mke2fs gives new 256-byte inodes.
const EXTRA_ISIZE: u16 = 32;
/// The smallest journal JBD accepts.
const MIN_JOURNAL_BLOCKS: u32 = 1024;
/// ext3's block sizes: `s_log_block_size` 0 to 6.
pub const MIN_BLOCK_SIZE: u32 = 1024;
pub const MAX_BLOCK_SIZE: u32 = 1 << sbm::EXT2_MAX_BLOCK_LOG_SIZE;
const MAX_JOURNAL_BLOCKS: u64 = 10_240_000;

/// The computed geometry of a filesystem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub block_size: u32,
    pub blocks_count: u32,
    pub first_data_block: u32,
    pub blocks_per_group: u32,
    pub groups: u32,
    pub inodes_per_group: u32,
    pub inode_size: u16,
    pub itable_blocks: u32,
    pub gdt_blocks: u32,
    pub journal_blocks: u32,
    pub r_blocks_count: u32,
    pub compat: u32,
    pub incompat: u32,
    pub ro_compat: u32,
}

/// Where one group's metadata sits.
#[derive(Clone, Copy, Debug)]
pub struct GroupLayout {
    pub first: u32,
    pub len: u32,
    pub has_super: bool,
    pub block_bitmap: u32,
    pub inode_bitmap: u32,
    pub inode_table: u32,
    /// The first block after the group's metadata.
    pub data_start: u32,
}

impl Geometry {
    pub fn inodes_count(&self) -> u32 {
        self.groups * self.inodes_per_group
    }

    fn sparse(&self) -> bool {
        self.ro_compat & feature::RO_COMPAT_SPARSE_SUPER != 0
    }

    pub fn group(&self, g: u32) -> GroupLayout {
        let first = self.first_data_block + g * self.blocks_per_group;
        let len = (self.blocks_count - first).min(self.blocks_per_group);
        let has_super = !self.sparse() || sbm::is_sparse_group(g);
        let meta = if has_super { 1 + self.gdt_blocks } else { 0 };
        let block_bitmap = first + meta;
        GroupLayout {
            first,
            len,
            has_super,
            block_bitmap,
            inode_bitmap: block_bitmap + 1,
            inode_table: block_bitmap + 2,
            data_start: block_bitmap + 2 + self.itable_blocks,
        }
    }

    /// Group numbers that hold superblock backups (not group 0).
    pub fn backup_groups(&self) -> Vec<u32> {
        (1..self.groups)
            .filter(|&g| self.group(g).has_super)
            .collect()
    }
}

fn default_block_size(size: u64) -> u32 {
    if size < SMALL_FS {
        1024
    } else {
        4096
    }
}

fn default_inode_ratio(size: u64) -> u64 {
    match size {
        s if s < FLOPPY_FS => 8192,
        s if s < SMALL_FS => 4096,
        s if s >= HUGE_FS => 65536,
        s if s >= BIG_FS => 32768,
        _ => 16384,
    }
}

/// The feature masks after applying `-O` to jbdfs's defaults.
pub fn resolve_features(requests: &[String]) -> Result<(u32, u32, u32)> {
    use feature::*;
    let mut masks = [
        COMPAT_HAS_JOURNAL | COMPAT_EXT_ATTR | COMPAT_DIR_INDEX,
        INCOMPAT_FILETYPE,
        RO_COMPAT_SPARSE_SUPER | RO_COMPAT_LARGE_FILE,
    ];
    let settable = [
        COMPAT_HAS_JOURNAL | COMPAT_EXT_ATTR | COMPAT_DIR_INDEX,
        INCOMPAT_FILETYPE,
        RO_COMPAT_SPARSE_SUPER | RO_COMPAT_LARGE_FILE,
    ];
    for req in requests.iter().flat_map(|r| r.split(',')) {
        let req = req.trim();
        if req.is_empty() {
            continue;
        }
        if req == "none" {
            masks = [COMPAT_HAS_JOURNAL, 0, 0];
            continue;
        }
        let (clear, name) = match req.strip_prefix('^') {
            Some(n) => (true, n),
            None => (false, req),
        };
        let (kind, bit) = by_name(name).ok_or_else(|| MkfsError::UnknownFeature(name.into()))?;
        let idx = match kind {
            Kind::Compat => 0,
            Kind::Incompat => 1,
            Kind::RoCompat => 2,
        };
        if settable[idx] & bit == 0 {
            return Err(MkfsError::UnsupportedFeature(name.into()));
        }
        if clear && bit == COMPAT_HAS_JOURNAL && idx == 0 {
            return Err(MkfsError::JournalRequired);
        }
        if clear {
            masks[idx] &= !bit;
        } else {
            masks[idx] |= bit;
        }
    }
    Ok((masks[0], masks[1], masks[2]))
}

/// Computes the geometry for a device of `size` bytes.
pub fn plan(opts: &MkfsOptions, size: u64) -> Result<Geometry> {
    let bs = opts.block_size.unwrap_or_else(|| default_block_size(size));
    if !bs.is_power_of_two() || !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&bs) {
        return Err(MkfsError::BadBlockSize(bs.into()));
    }
    if ![128, 256].contains(&opts.inode_size) {
        return Err(MkfsError::BadInodeSize(opts.inode_size.into()));
    }
    if !(0.0..=50.0).contains(&opts.reserved_percent) {
        return Err(MkfsError::BadReserved(opts.reserved_percent));
    }
    if opts.label.len() > 16 {
        return Err(MkfsError::BadLabel(opts.label.clone()));
    }
    let (compat, incompat, ro_compat) = resolve_features(&opts.features)?;
    let blocks = size / bs as u64;
    if blocks > u32::MAX as u64 {
        return Err(MkfsError::TooLarge {
            blocks,
            block_size: bs,
        });
    }
    let too_small = || MkfsError::TooSmall {
        size,
        min: 2048 * bs as u64,
    };
    if blocks < 2048 {
        return Err(too_small());
    }
    let mut g = Geometry {
        block_size: bs,
        blocks_count: blocks as u32,
        first_data_block: u32::from(bs == 1024),
        // One bitmap block's bits, capped (from 8 KiB blocks on) so that a
        // group's free count fits the descriptor's 16 bits, as mke2fs does.
        blocks_per_group: (8 * bs).min(sbm::EXT2_MAX_BLOCKS_PER_GROUP),
        groups: 0,
        inodes_per_group: 0,
        inode_size: opts.inode_size,
        itable_blocks: 0,
        gdt_blocks: 0,
        journal_blocks: 0,
        r_blocks_count: 0,
        compat,
        incompat,
        ro_compat,
    };
    fit_groups(&mut g, opts, size).ok_or_else(too_small)?;
    g.journal_blocks = journal_blocks(opts, &g)?;
    g.r_blocks_count = reserved_blocks(blocks, g.blocks_count, opts.reserved_percent);
    check_space(&g).ok_or_else(too_small)?;
    Ok(g)
}

/// The reserved blocks, as mke2fs counts them: from the size asked for,
/// then scaled by the ratio that left if a too-small last group was
/// dropped (ext2fs_initialize), which can be one block less than taking the
/// percentage of the final count.
fn reserved_blocks(asked: u64, blocks: u32, percent: f64) -> u32 {
    let first = (percent * asked as f64 / 100.0) as u64;
    if u64::from(blocks) == asked {
        return first as u32;
    }
    let ratio = 100.0 * first as f64 / asked as f64;
    (ratio * f64::from(blocks) / 100.0) as u32
}

/// Chooses the group count and inode table size, dropping a last group too
/// small to hold its own metadata, as mke2fs does.
fn fit_groups(g: &mut Geometry, opts: &MkfsOptions, size: u64) -> Option<()> {
    loop {
        let data = g.blocks_count.checked_sub(g.first_data_block)?;
        g.groups = data.div_ceil(g.blocks_per_group);
        if g.groups == 0 {
            return None;
        }
        g.gdt_blocks =
            (g.groups as u64 * GROUP_DESC_SIZE as u64).div_ceil(g.block_size as u64) as u32;
        g.inodes_per_group = inodes_per_group(g, opts, size)?;
        g.itable_blocks =
            (g.inodes_per_group as u64 * g.inode_size as u64).div_ceil(g.block_size as u64) as u32;
        let last = g.group(g.groups - 1);
        let overhead = last.data_start - last.first;
        if g.groups > 1 && last.len < overhead + 50 {
            g.blocks_count = last.first;
            continue;
        }
        if last.len <= overhead {
            return None;
        }
        return Some(());
    }
}

fn inodes_per_group(g: &Geometry, opts: &MkfsOptions, size: u64) -> Option<u32> {
    let bs = g.block_size as u64;
    let wanted = match opts.inodes_count {
        Some(n) => n,
        None => {
            // mke2fs never defaults to more than one inode per block.
            let ratio = opts
                .inode_ratio
                .unwrap_or_else(|| default_inode_ratio(size).max(bs))
                .max(1024);
            g.blocks_count as u64 * bs / ratio
        }
    };
    let groups = g.groups as u64;
    let per_block = bs / g.inode_size as u64;
    // As mke2fs: fill whole inode-table blocks, then round down to whole
    // bitmap bytes.
    let unit = lcm(per_block, 8);
    let mut ipg = wanted.div_ceil(groups).max(16);
    ipg = (ipg.div_ceil(per_block) * per_block) & !7;
    // An inode bitmap is one block, the descriptor's free count is 16 bits
    // (EXT2_MAX_INODES_PER_GROUP), and the table must leave room for data.
    let max_by_bitmap = (8 * bs).min(65536 - per_block);
    let max_by_space = (g.blocks_per_group as u64 / 2) * per_block;
    ipg = ipg.min(max_by_bitmap).min(max_by_space / unit * unit);
    if ipg * groups > u32::MAX as u64 || ipg < 16 {
        return None;
    }
    Some(ipg as u32)
}

fn lcm(a: u64, b: u64) -> u64 {
    fn gcd(a: u64, b: u64) -> u64 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    a / gcd(a, b) * b
}

fn journal_blocks(opts: &MkfsOptions, g: &Geometry) -> Result<u32> {
    let Some(mib) = opts.journal_mib else {
        return Ok(jbd::default_journal_blocks(g.blocks_count as u64));
    };
    let blocks = mib.saturating_mul(1 << 20) / g.block_size as u64;
    if blocks < MIN_JOURNAL_BLOCKS as u64
        || blocks > MAX_JOURNAL_BLOCKS
        || blocks > g.blocks_count as u64 / 2
    {
        return Err(MkfsError::BadJournalSize(mib));
    }
    Ok(blocks as u32)
}

/// Checks that the journal, its indirect blocks and the directories fit.
fn check_space(g: &Geometry) -> Option<()> {
    let free: u64 = (0..g.groups)
        .map(|i| {
            let l = g.group(i);
            (l.first + l.len - l.data_start) as u64
        })
        .sum();
    let ptrs = g.block_size as u64 / 4;
    let journal = g.journal_blocks as u64 + g.journal_blocks as u64 / ptrs + 3;
    (journal + 32 <= free).then_some(())
}

/// What mkfs made, for the summary.
#[derive(Clone, Debug)]
pub struct Summary {
    pub geometry: Geometry,
    pub uuid: [u8; 16],
    pub backups: Vec<u32>,
}

/// How much of the device already reads as zeros.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Zeroed {
    /// Everything reads as zeros (a fresh or hole-punched file): skip
    /// writing zero blocks.
    All,
    /// Unknown contents: write every block that must read as zeros.
    Nothing,
}

/// A fresh image of `size` bytes in memory, formatted with `opts`, for
/// in-process tests and tools.
pub fn memory_image(opts: &MkfsOptions, size: u64) -> Result<crate::device::MemoryDevice> {
    let dev = crate::device::MemoryDevice::new(size)?;
    let g = plan(opts, size)?;
    format(&dev, opts, &g, Zeroed::All, &mut Progress::quiet())?;
    Ok(dev)
}

/// Lays out the filesystem of `geometry` on `dev`.
pub fn format(
    dev: &dyn BlockDevice,
    opts: &MkfsOptions,
    geometry: &Geometry,
    zeroed: Zeroed,
    progress: &mut Progress,
) -> Result<Summary> {
    let uuid = match opts.uuid {
        Some(u) => u,
        None => crate::util::random_uuid()?,
    };
    let w = Writer::new(dev, geometry, zeroed);
    let mut alloc = Allocator::new(geometry);
    let now = crate::util::now().0 as u32;

    w.zero_inode_tables(progress)?;
    let root_blk = alloc.next(geometry.group(0).data_start);
    let lpf_blocks: Vec<u32> = (0..lost_found_blocks(geometry.block_size))
        .map(|_| alloc.next(root_blk))
        .collect();
    let journal = build_journal(geometry, &mut alloc);
    progress.message(&format!(
        "Creating journal ({} blocks): ",
        geometry.journal_blocks
    ));
    w.write_journal(&journal, &uuid, progress)?;
    progress.message("done\n");

    w.write_directories(root_blk, &lpf_blocks, now)?;
    w.write_reserved_inodes(&journal, &lpf_blocks, now)?;
    let descs = w.write_bitmaps(&alloc, progress)?;
    let sb = build_superblock(geometry, opts, &uuid, &descs, &journal, now)?;
    progress.message("Writing superblocks and filesystem accounting information: ");
    w.write_superblocks(&sb, &descs)?;
    dev.flush()?;
    progress.message("done\n");
    Ok(Summary {
        geometry: geometry.clone(),
        uuid,
        backups: backup_blocks(geometry),
    })
}

/// The blocks holding superblock backups.
pub fn backup_blocks(g: &Geometry) -> Vec<u32> {
    g.backup_groups()
        .into_iter()
        .map(|n| g.group(n).first)
        .collect()
}

/// mke2fs grows lost+found to 16 KiB, and to at least two blocks, so that
/// e2fsck can reconnect files without allocating.
fn lost_found_blocks(block_size: u32) -> u32 {
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
struct Allocator<'a> {
    g: &'a Geometry,
    /// Allocated runs: start -> length.
    runs: BTreeMap<u32, u32>,
    last: Option<u32>,
}

impl<'a> Allocator<'a> {
    fn new(g: &'a Geometry) -> Self {
        Allocator {
            g,
            runs: BTreeMap::new(),
            last: None,
        }
    }

    /// The first free block at or after `goal` (blocks are only ever
    /// handed out in increasing order from one goal, so "free" means "past
    /// the last one handed out").
    fn next(&mut self, goal: u32) -> u32 {
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

/// The journal inode's block map, built in allocation order so that each
/// indirect block sits just before the data it maps.
struct JournalMap {
    i_block: [u32; 15],
    /// Journal data blocks in logical order.
    data: Vec<u32>,
    /// Indirect blocks and their contents.
    indirect: Vec<(u32, Vec<u32>)>,
}

fn build_journal(g: &Geometry, alloc: &mut Allocator) -> JournalMap {
    let goal = g.group(g.groups / 2).data_start;
    let ptrs = (g.block_size / 4) as u64;
    let mut map = JournalMap {
        i_block: [0; 15],
        data: Vec::with_capacity(g.journal_blocks as usize),
        indirect: Vec::new(),
    };
    let mut left = g.journal_blocks as u64;
    let mut next_goal = goal;
    for slot in 0..12 {
        if left == 0 {
            break;
        }
        let b = alloc.next(next_goal);
        next_goal = b;
        map.i_block[slot] = b;
        map.data.push(b);
        left -= 1;
    }
    for depth in 1..=3u32 {
        if left == 0 {
            break;
        }
        map.i_block[11 + depth as usize] = map_tree(depth, ptrs, &mut left, alloc, &mut map);
    }
    map
}

/// Allocates an indirect block of `depth` and, under it, up to `left` blocks.
fn map_tree(
    depth: u32,
    ptrs: u64,
    left: &mut u64,
    alloc: &mut Allocator,
    map: &mut JournalMap,
) -> u32 {
    let node = alloc.next(0);
    let idx = map.indirect.len();
    map.indirect.push((node, vec![0; ptrs as usize]));
    for slot in 0..ptrs as usize {
        if *left == 0 {
            break;
        }
        let child = if depth == 1 {
            let b = alloc.next(0);
            map.data.push(b);
            *left -= 1;
            b
        } else {
            map_tree(depth - 1, ptrs, left, alloc, map)
        };
        map.indirect[idx].1[slot] = child;
    }
    node
}

fn build_superblock(
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
    sb.s_errors = sbm::EXT2_ERRORS_CONTINUE;
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
        let seed = crate::util::random_uuid()?;
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
struct Writer<'a> {
    dev: &'a dyn BlockDevice,
    g: &'a Geometry,
    zeroed: Zeroed,
}

/// Zero blocks are written in chunks of this many bytes.
const ZERO_CHUNK: usize = 1 << 20;

impl<'a> Writer<'a> {
    fn new(dev: &'a dyn BlockDevice, g: &'a Geometry, zeroed: Zeroed) -> Self {
        Writer { dev, g, zeroed }
    }

    fn offset(&self, block: u32) -> u64 {
        block as u64 * self.g.block_size as u64
    }

    fn write_block(&self, block: u32, data: &[u8]) -> io::Result<()> {
        if self.zeroed == Zeroed::All && data.iter().all(|&b| b == 0) {
            return Ok(());
        }
        self.dev.write_at(data, self.offset(block))
    }

    fn zero_range(&self, block: u32, count: u32) -> io::Result<()> {
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

    fn zero_inode_tables(&self, progress: &mut Progress) -> io::Result<()> {
        progress.start("Writing inode tables", self.g.groups as u64);
        for grp in 0..self.g.groups {
            self.zero_range(self.g.group(grp).inode_table, self.g.itable_blocks)?;
            progress.set(grp as u64 + 1);
        }
        progress.finish();
        Ok(())
    }

    fn write_journal(
        &self,
        j: &JournalMap,
        uuid: &[u8; 16],
        progress: &mut Progress,
    ) -> io::Result<()> {
        let bs = self.g.block_size as usize;
        for (blk, ptrs) in &j.indirect {
            let mut buf = vec![0u8; bs];
            for (i, p) in ptrs.iter().enumerate() {
                buf[4 * i..4 * i + 4].copy_from_slice(&p.to_le_bytes());
            }
            self.write_block(*blk, &buf)?;
        }
        // Stale data in the log cannot be mistaken for transactions once
        // zeroed; on a zeroed device there is nothing to do.
        if self.zeroed == Zeroed::Nothing {
            for run in contiguous_runs(&j.data[1..]) {
                self.zero_range(run.0, run.1)?;
            }
        }
        let _ = progress;
        let jsb = JournalSuperblock::new(self.g.block_size, self.g.journal_blocks, *uuid)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut buf = vec![0u8; bs];
        buf[..jbd::JOURNAL_SUPERBLOCK_LEN].copy_from_slice(&jsb.to_bytes());
        self.dev.write_at(&buf, self.offset(j.data[0]))
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

    fn write_directories(&self, root_blk: u32, lpf: &[u32], now: u32) -> io::Result<()> {
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

    fn write_reserved_inodes(&self, j: &JournalMap, _lpf: &[u32], now: u32) -> io::Result<()> {
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
    fn write_bitmaps(
        &self,
        alloc: &Allocator,
        progress: &mut Progress,
    ) -> io::Result<Vec<GroupDesc>> {
        progress.start("Writing group bitmaps", self.g.groups as u64);
        let mut descs = Vec::with_capacity(self.g.groups as usize);
        for grp in 0..self.g.groups {
            descs.push(self.write_group_bitmaps(grp, alloc)?);
            progress.set(grp as u64 + 1);
        }
        progress.finish();
        Ok(descs)
    }

    fn write_group_bitmaps(&self, grp: u32, alloc: &Allocator) -> io::Result<GroupDesc> {
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
        let (used_inodes, dirs) = if grp == 0 {
            (ino::EXT2_FIRST_INO, 2)
        } else {
            (0, 0)
        };
        set_bits(&mut ib, 0, used_inodes);
        set_bits(&mut ib, ipg, 8 * bs as u32 - ipg);
        self.write_block(l.block_bitmap, &bb)?;
        self.write_block(l.inode_bitmap, &ib)?;
        Ok(GroupDesc {
            bg_block_bitmap: l.block_bitmap,
            bg_inode_bitmap: l.inode_bitmap,
            bg_inode_table: l.inode_table,
            bg_free_blocks_count: (l.len - used_blocks) as u16,
            bg_free_inodes_count: (ipg - used_inodes) as u16,
            bg_used_dirs_count: dirs,
            ..Default::default()
        })
    }

    fn write_superblocks(&self, sb: &Superblock, descs: &[GroupDesc]) -> io::Result<()> {
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

use crate::format::dirent::{set_rec_len_at, DX_HASH_HALF_MD4, EXT2_FT_DIR};

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

fn contiguous_runs(blocks: &[u32]) -> Vec<(u32, u32)> {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &b in blocks {
        match runs.last_mut() {
            Some((s, n)) if *s + *n == b => *n += 1,
            _ => runs.push((b, 1)),
        }
    }
    runs
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

/// Detects an existing ext2/3/4 filesystem, so that mkfs can refuse to
/// overwrite it without `-F`.
pub fn existing_filesystem(dev: &dyn BlockDevice) -> io::Result<Option<String>> {
    if dev.size() < sbm::SUPERBLOCK_OFFSET + sbm::SUPERBLOCK_SIZE as u64 {
        return Ok(None);
    }
    let mut buf = vec![0u8; sbm::SUPERBLOCK_SIZE];
    dev.read_at(&mut buf, sbm::SUPERBLOCK_OFFSET)?;
    let magic = u16::from_le_bytes([buf[0x38], buf[0x39]]);
    if magic != sbm::EXT2_SUPER_MAGIC {
        return Ok(None);
    }
    let desc = match Superblock::parse(&buf) {
        Ok(sb) => {
            let kind = if sb.has_compat(feature::COMPAT_HAS_JOURNAL) {
                "ext3"
            } else {
                "ext2"
            };
            let label = sb.volume_name();
            let label = if label.is_empty() {
                String::new()
            } else {
                format!(" labelled '{label}'")
            };
            format!(
                "an {kind} filesystem{label} of {} blocks",
                sb.s_blocks_count
            )
        }
        Err(_) => "a damaged ext2/3/4 superblock".to_string(),
    };
    Ok(Some(desc))
}

/// The backup superblock locations, as mke2fs lists them.
pub fn describe(s: &Summary) -> String {
    let g = &s.geometry;
    let kib = g.block_size / 1024;
    let mut out = format!(
        "Creating filesystem with {} {}k blocks and {} inodes\nFilesystem UUID: {}\n",
        g.blocks_count,
        kib,
        g.inodes_count(),
        crate::util::format_uuid(&s.uuid)
    );
    if !s.backups.is_empty() {
        let list: Vec<String> = s.backups.iter().map(|b| b.to_string()).collect();
        out.push_str("Superblock backups stored on blocks: \n\t");
        out.push_str(&list.join(", "));
        out.push('\n');
    }
    out
}

/// Group number helper for callers that hold a [`GroupNo`].
pub fn group_of(g: &Geometry, b: BlockNo) -> GroupNo {
    GroupNo((b.0 - g.first_data_block) / g.blocks_per_group)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemoryDevice;

    fn make(size: u64, opts: &MkfsOptions) -> (MemoryDevice, Summary) {
        let dev = MemoryDevice::new(size).unwrap();
        let g = plan(opts, size).unwrap();
        let s = format(&dev, opts, &g, Zeroed::All, &mut Progress::quiet()).unwrap();
        (dev, s)
    }

    #[test]
    fn geometry_matches_mke2fs_defaults() {
        let g = plan(&MkfsOptions::default(), 100 << 20).unwrap();
        assert_eq!(g.block_size, 1024);
        assert_eq!(g.journal_blocks, 4096);
        let g = plan(&MkfsOptions::default(), 2 << 30).unwrap();
        assert_eq!(g.block_size, 4096);
        assert_eq!(g.inodes_count(), 131072);
        assert_eq!(g.journal_blocks, 16384);
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
    fn bad_requests_are_refused() {
        let o = MkfsOptions {
            block_size: Some(3000),
            ..Default::default()
        };
        assert!(matches!(
            plan(&o, 1 << 30),
            Err(MkfsError::BadBlockSize(3000))
        ));
        assert!(matches!(
            plan(&MkfsOptions::default(), 1 << 20),
            Err(MkfsError::TooSmall { .. })
        ));
        let o = MkfsOptions {
            features: vec!["frobnicate".into()],
            ..Default::default()
        };
        assert!(matches!(
            plan(&o, 1 << 30),
            Err(MkfsError::UnknownFeature(_))
        ));
        let o = MkfsOptions {
            features: vec!["extent".into()],
            ..Default::default()
        };
        assert!(matches!(
            plan(&o, 1 << 30),
            Err(MkfsError::UnsupportedFeature(_))
        ));
    }

    #[test]
    fn an_image_in_use_is_left_untouched() {
        let path = std::env::temp_dir().join(format!(
            "jbdfs-mkfs-busy-{}-{}",
            std::process::id(),
            crate::util::unique_suffix()
        ));
        std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
        let holder =
            crate::device::FileDevice::open(&path, crate::device::OpenOptions::default()).unwrap();
        let req = Request {
            size: Some(16 << 20),
            force: true,
            quiet: true,
            ..Default::default()
        };
        let err = make_filesystem(&path, &req).expect_err("refused");
        assert!(matches!(err, MakeError::InUse(_)), "{err}");
        assert!(
            err.to_string()
                .ends_with("; will not make a filesystem here!"),
            "{err}"
        );
        // Neither extended to the size asked for nor written.
        assert_eq!(std::fs::read(&path).unwrap(), vec![7u8; 1 << 20]);
        drop(holder);
        make_filesystem(&path, &req).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 16 << 20);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn lost_found_sizes_match_mke2fs() {
        assert_eq!(lost_found_blocks(1024), 12);
        assert_eq!(lost_found_blocks(2048), 8);
        assert_eq!(lost_found_blocks(4096), 4);
        assert_eq!(lost_found_blocks(8192), 2);
        assert_eq!(lost_found_blocks(65536), 2);
    }

    /// mke2fs 1.47's `-t ext3 -b BS` layouts of 512 MiB (dumpe2fs -h).
    #[test]
    fn large_block_geometry_matches_mke2fs() {
        // (block size, blocks, blocks per group, inodes per group, journal)
        let cases = [
            (8192, 65528, 65528, 32768, 4096),
            (16384, 32768, 65528, 32768, 4096),
            (32768, 16384, 65528, 16384, 1024),
            (65536, 8192, 65528, 8192, 1024),
        ];
        for (bs, blocks, bpg, ipg, journal) in cases {
            let o = MkfsOptions {
                block_size: Some(bs),
                ..Default::default()
            };
            let g = plan(&o, 512 << 20).unwrap();
            let got = (
                g.blocks_count,
                g.blocks_per_group,
                g.inodes_per_group,
                g.journal_blocks,
            );
            assert_eq!(got, (blocks, bpg, ipg, journal), "-b {bs}");
            assert_eq!(g.first_data_block, 0);
        }
        for bad in [512, 3000, 131072] {
            let o = MkfsOptions {
                block_size: Some(bad),
                ..Default::default()
            };
            assert!(matches!(plan(&o, 1 << 30), Err(MkfsError::BadBlockSize(_))));
        }
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

/// A request to make a filesystem on a file or block device, as the
/// command line gives it.
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub options: MkfsOptions,
    /// The filesystem size in bytes; `None` uses the whole device.
    pub size: Option<u64>,
    /// `-F`: overwrite an existing filesystem.
    pub force: bool,
    /// `-n`: work out the layout and print it, write nothing.
    pub dry_run: bool,
    pub quiet: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum MakeError {
    #[error("{path}: {error}")]
    Mkfs { path: String, error: MkfsError },
    #[error("{path}: {error}")]
    Io { path: String, error: io::Error },
    #[error("{0} does not exist and no size was given")]
    NoSize(String),
    #[error("{path} contains {what}; use -F to overwrite it")]
    Exists { path: String, what: String },
    #[error("{0} is not a regular file or block device")]
    NotAFile(String),
    #[error("{path}: size {size} is larger than the device ({device} bytes)")]
    LargerThanDevice {
        path: String,
        size: u64,
        device: u64,
    },
    /// Mounted or opened by another program (mke2fs's wording).
    #[error("{0}; will not make a filesystem here!")]
    InUse(crate::device::lock::InUse),
}

/// Parses a size the way mke2fs does: a number with an optional K, M, G or T
/// suffix is bytes; a bare number counts `block_size` blocks when `-b` was
/// given and KiB otherwise.
pub fn parse_size(s: &str, block_size: Option<u32>) -> Option<u64> {
    let s = s.trim();
    let (digits, mult) = match s.char_indices().last()? {
        (i, c) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                's' | 'S' => 9,
                _ => return None,
            };
            (&s[..i], 1u64 << shift)
        }
        _ => (s, block_size.map(u64::from).unwrap_or(1024)),
    };
    digits.parse::<u64>().ok()?.checked_mul(mult)
}

/// Makes a filesystem as `mkfs.jbdfs` does and returns what it made.
/// `path` may be an NBD URI (see [`crate::device::Source`]).
pub fn make_filesystem(
    path: &std::path::Path,
    req: &Request,
) -> std::result::Result<Summary, MakeError> {
    let name = path.display().to_string();
    let io_err = |error| MakeError::Io {
        path: name.clone(),
        error,
    };
    let source = crate::device::Source::parse(path.as_os_str()).map_err(io_err)?;
    if source.is_nbd() {
        return make_on_export(&source, req);
    }
    let meta = match std::fs::metadata(path) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err(e)),
    };
    let target = Target::inspect(path, meta.as_ref(), req).map_err(|e| match e {
        TargetError::Io(e) => io_err(e),
        TargetError::Make(m) => m,
    })?;
    lay_out(&name, req, target.fs_bytes, |len| {
        let dev = target.open(path).map_err(|e| match e {
            TargetError::Io(e) => io_err(e),
            TargetError::Make(m) => m,
        })?;
        let zeroed = target.prepare(&dev, len).map_err(io_err)?;
        Ok((std::sync::Arc::new(dev), zeroed))
    })
}

/// mkfs on an NBD export: its size unless one is given, and, as on a
/// block device, nothing assumed about what it holds.
fn make_on_export(
    source: &crate::device::Source,
    req: &Request,
) -> std::result::Result<Summary, MakeError> {
    let name = source.to_string();
    let io_err = |error| MakeError::Io {
        path: name.clone(),
        error,
    };
    let opts = crate::device::SourceOptions::default();
    let dev = crate::device::open_writable(source, &opts).map_err(io_err)?;
    let fs_bytes = match req.size {
        Some(s) if s > dev.size() => {
            return Err(MakeError::LargerThanDevice {
                path: name,
                size: s,
                device: dev.size(),
            })
        }
        Some(s) => s,
        None => dev.size(),
    };
    if !req.force {
        if let Some(what) = existing_filesystem(&*dev).map_err(io_err)? {
            return Err(MakeError::Exists { path: name, what });
        }
    }
    lay_out(&name, req, fs_bytes, |_| Ok((dev, Zeroed::Nothing)))
}

/// Plans, then (unless a dry run) opens the target through `open` (given
/// the filesystem's length in bytes) and formats it.
fn lay_out(
    name: &str,
    req: &Request,
    fs_bytes: u64,
    open: impl FnOnce(u64) -> std::result::Result<(std::sync::Arc<dyn BlockDevice>, Zeroed), MakeError>,
) -> std::result::Result<Summary, MakeError> {
    let io_err = |error| MakeError::Io {
        path: name.to_string(),
        error,
    };
    let geometry = plan(&req.options, fs_bytes).map_err(|error| MakeError::Mkfs {
        path: name.to_string(),
        error,
    })?;
    let mut progress = Progress::stdout(!req.quiet);
    if req.dry_run {
        let summary = Summary {
            geometry: geometry.clone(),
            uuid: req.options.uuid.unwrap_or_default(),
            backups: backup_blocks(&geometry),
        };
        progress.message(&describe(&summary));
        return Ok(summary);
    }
    let (dev, zeroed) = open(geometry.blocks_count as u64 * geometry.block_size as u64)?;
    let mut options = req.options.clone();
    let uuid = match options.uuid {
        Some(u) => u,
        None => crate::util::random_uuid().map_err(io_err)?,
    };
    options.uuid = Some(uuid);
    progress.message(&describe(&Summary {
        geometry: geometry.clone(),
        uuid,
        backups: backup_blocks(&geometry),
    }));
    format(&*dev, &options, &geometry, zeroed, &mut progress).map_err(|error| MakeError::Mkfs {
        path: name.to_string(),
        error,
    })
}

enum TargetError {
    Io(io::Error),
    Make(MakeError),
}

impl From<io::Error> for TargetError {
    fn from(e: io::Error) -> Self {
        match crate::device::lock::in_use(&e) {
            Some(busy) => TargetError::Make(MakeError::InUse(busy.clone())),
            None => TargetError::Io(e),
        }
    }
}

/// The file or block device being formatted, before anything is written.
struct Target {
    exists: bool,
    is_block_device: bool,
    fs_bytes: u64,
}

impl Target {
    fn inspect(
        path: &std::path::Path,
        meta: Option<&std::fs::Metadata>,
        req: &Request,
    ) -> std::result::Result<Self, TargetError> {
        use std::os::unix::fs::FileTypeExt;
        let name = path.display().to_string();
        let Some(meta) = meta else {
            let size = req
                .size
                .ok_or_else(|| TargetError::Make(MakeError::NoSize(name.clone())))?;
            return Ok(Target {
                exists: false,
                is_block_device: false,
                fs_bytes: size,
            });
        };
        let is_block_device = meta.file_type().is_block_device();
        if !is_block_device && !meta.is_file() {
            return Err(TargetError::Make(MakeError::NotAFile(name)));
        }
        let current = if is_block_device {
            crate::device::FileDevice::open(
                path,
                crate::device::OpenOptions {
                    read_only: true,
                    ..Default::default()
                },
            )?
            .size()
        } else {
            meta.len()
        };
        let fs_bytes = match req.size {
            Some(s) if is_block_device && s > current => {
                return Err(TargetError::Make(MakeError::LargerThanDevice {
                    path: name,
                    size: s,
                    device: current,
                }))
            }
            Some(s) => s,
            None => current,
        };
        if !req.force {
            check_not_formatted(path, &name)?;
        }
        Ok(Target {
            exists: true,
            is_block_device,
            fs_bytes,
        })
    }

    /// Opens the target for writing: locked (an image file) or O_EXCL (a
    /// device) before anything about it changes, so an image in use is
    /// left exactly as it was.
    fn open(
        &self,
        path: &std::path::Path,
    ) -> std::result::Result<crate::device::FileDevice, TargetError> {
        if !self.exists {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)?;
        }
        let opts = crate::device::OpenOptions {
            exclusive: true,
            ..Default::default()
        };
        let mut dev = crate::device::FileDevice::open(path, opts)?;
        dev.grow_to(self.fs_bytes)?;
        Ok(dev)
    }

    /// Makes the filesystem's range read as zeros where that is cheap.
    fn prepare(&self, dev: &crate::device::FileDevice, len: u64) -> io::Result<Zeroed> {
        if self.is_block_device {
            return Ok(Zeroed::Nothing);
        }
        if !self.exists {
            return Ok(Zeroed::All);
        }
        Ok(match punch_hole(dev.file(), len) {
            Ok(()) => Zeroed::All,
            Err(_) => Zeroed::Nothing,
        })
    }
}

fn check_not_formatted(path: &std::path::Path, name: &str) -> std::result::Result<(), TargetError> {
    let dev = crate::device::FileDevice::open(
        path,
        crate::device::OpenOptions {
            read_only: true,
            ..Default::default()
        },
    )?;
    match existing_filesystem(&dev)? {
        Some(what) => Err(TargetError::Make(MakeError::Exists {
            path: name.to_string(),
            what,
        })),
        None => Ok(()),
    }
}

/// Deallocates `[0, len)` of a regular file so that it reads as zeros.
fn punch_hole(file: &std::fs::File, len: u64) -> io::Result<()> {
    crate::device::file::punch_hole(file, 0, len)
}
