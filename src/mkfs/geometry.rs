//! The numbers of a new filesystem, worked out before anything is written:
//! block size, groups, inodes per group, journal and reserved sizes. They
//! follow mke2fs's choices, so that an image made here is one e2fsprogs
//! would have made (the tests compare with dumpe2fs), and a request that
//! cannot fit is refused before the device is touched.

use super::journal::journal_blocks;
use super::{MkfsError, MkfsOptions, Result};
use crate::format::group_desc::GROUP_DESC_SIZE;
use crate::format::superblock::{self as sbm, feature};
use crate::format::{BlockNo, GroupNo};

const SMALL_FS: u64 = 512 << 20;
const FLOPPY_FS: u64 = 3 << 20;
const BIG_FS: u64 = 4 << 40;
const HUGE_FS: u64 = 16 << 40;
/// ext3's block sizes: `s_log_block_size` 0 to 6.
pub const MIN_BLOCK_SIZE: u32 = 1024;
pub const MAX_BLOCK_SIZE: u32 = 1 << sbm::EXT2_MAX_BLOCK_LOG_SIZE;

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
    if opts.last_mounted.len() > 64 {
        return Err(MkfsError::BadLastMounted);
    }
    let (compat, mut incompat, ro_compat) = resolve_features(&opts.features)?;
    if opts.creator_os == sbm::EXT2_OS_HURD {
        // The Hurd's ext2 has no file types in directory entries (mke2fs
        // clears the feature for it).
        incompat &= !feature::INCOMPAT_FILETYPE;
    }
    let max_bpg = (8 * bs).min(sbm::EXT2_MAX_BLOCKS_PER_GROUP);
    let blocks_per_group = match opts.blocks_per_group {
        Some(b) if b % 8 != 0 || b < 256 || b > max_bpg => {
            return Err(MkfsError::BadBlocksPerGroup(b, max_bpg))
        }
        Some(b) => b,
        // One bitmap block's bits, capped (from 8 KiB blocks on) so that a
        // group's free count fits the descriptor's 16 bits, as mke2fs does.
        None => max_bpg,
    };
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
        blocks_per_group,
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

/// The blocks holding superblock backups.
pub fn backup_blocks(g: &Geometry) -> Vec<u32> {
    g.backup_groups()
        .into_iter()
        .map(|n| g.group(n).first)
        .collect()
}

/// Group number helper for callers that hold a [`GroupNo`].
pub fn group_of(g: &Geometry, b: BlockNo) -> GroupNo {
    GroupNo((b.0 - g.first_data_block) / g.blocks_per_group)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
