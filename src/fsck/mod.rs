//! fsck.jbdfs: check an ext3 filesystem, with e2fsck's flags and exit codes.
//!
//! This first version reads and validates the superblock and the group
//! descriptor table and reports the filesystem's usage; the five passes and
//! repairs build on it.

use std::io;

use crate::device::BlockDevice;
use crate::format::group_desc::GroupDesc;
use crate::format::superblock::{self as sbm, feature, Superblock};
use crate::format::{Corruption, GroupNo};

/// e2fsck's exit status bits.
pub mod exit {
    pub const OK: u8 = 0;
    pub const NONDESTRUCT: u8 = 1;
    pub const DESTRUCT: u8 = 2;
    pub const UNCORRECTED: u8 = 4;
    pub const ERROR: u8 = 8;
    pub const USAGE: u8 = 16;
    pub const CANCELED: u8 = 32;
}

/// How to answer questions, as e2fsck's -n, -p/-a and -y choose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// -n: open read-only and answer no.
    #[default]
    No,
    /// -p / -a: fix what is safe without asking.
    Preen,
    /// -y: answer yes to everything.
    Yes,
}

#[derive(Clone, Debug, Default)]
pub struct FsckOptions {
    pub mode: Mode,
    /// -f: check even if the filesystem seems clean.
    pub force: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum FsckError {
    #[error("{0}")]
    Corrupt(#[from] Corruption),
    #[error("the filesystem has unsupported features: {0}")]
    Unsupported(String),
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

/// What a check found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Problems found, one message each, in e2fsck's style.
    pub problems: Vec<String>,
    pub fixed: usize,
    pub inodes_used: u64,
    pub inodes_count: u64,
    pub blocks_used: u64,
    pub blocks_count: u64,
    /// Whether the check was skipped because the filesystem is clean.
    pub skipped_clean: bool,
}

impl Report {
    /// The exit status e2fsck would give.
    pub fn exit_code(&self) -> u8 {
        let unfixed = self.problems.len() - self.fixed.min(self.problems.len());
        let mut code = exit::OK;
        if self.fixed > 0 {
            code |= exit::NONDESTRUCT;
        }
        if unfixed > 0 {
            code |= exit::UNCORRECTED;
        }
        code
    }

    /// e2fsck's closing line: "N/M files (0.0% non-contiguous), N/M blocks".
    pub fn summary(&self, name: &str) -> String {
        format!(
            "{name}: {}/{} files (0.0% non-contiguous), {}/{} blocks",
            self.inodes_used, self.inodes_count, self.blocks_used, self.blocks_count
        )
    }
}

impl From<crate::fs::FsError> for FsckError {
    fn from(e: crate::fs::FsError) -> Self {
        match e {
            crate::fs::FsError::Corrupt(c) => FsckError::Corrupt(c),
            crate::fs::FsError::Io(e) => FsckError::Io(e),
            other => FsckError::Io(io::Error::other(other.to_string())),
        }
    }
}

/// Reads and validates the primary superblock.
pub fn read_superblock(dev: &dyn BlockDevice) -> Result<Superblock, FsckError> {
    Ok(crate::fs::mount::read_superblock(dev)?)
}

/// Refuses filesystems jbdfs cannot check: any incompat or ro_compat
/// feature outside the ext3 set.
pub fn check_features(sb: &Superblock) -> Result<(), FsckError> {
    let (inc, ro) = sb.unsupported_features();
    let mut all = inc;
    all.extend(ro);
    let compat = sb.s_feature_compat & !feature::SUPP_COMPAT;
    all.extend(feature::names(feature::Kind::Compat, compat));
    if all.is_empty() {
        Ok(())
    } else {
        Err(FsckError::Unsupported(all.join(", ")))
    }
}

/// Reads the group descriptor table after the primary superblock.
pub fn read_group_descs(
    dev: &dyn BlockDevice,
    sb: &Superblock,
) -> Result<Vec<GroupDesc>, FsckError> {
    Ok(crate::fs::mount::read_group_desc_table(dev, sb)?)
}

/// Checks the superblock and the group descriptors.
pub fn check(dev: &dyn BlockDevice, opts: &FsckOptions) -> Result<Report, FsckError> {
    let sb = read_superblock(dev)?;
    check_features(&sb)?;
    let mut report = Report {
        inodes_count: sb.s_inodes_count as u64,
        blocks_count: sb.s_blocks_count as u64,
        inodes_used: sb.s_inodes_count.saturating_sub(sb.s_free_inodes_count) as u64,
        blocks_used: sb.s_blocks_count.saturating_sub(sb.s_free_blocks_count) as u64,
        ..Default::default()
    };
    let clean = sb.s_state & sbm::EXT2_VALID_FS != 0 && sb.s_state & sbm::EXT2_ERROR_FS == 0;
    if clean && !opts.force {
        report.skipped_clean = true;
        return Ok(report);
    }
    if sb.block_size() as u64 * sb.s_blocks_count as u64 > dev.size() {
        report.problems.push(format!(
            "The filesystem size (according to the superblock) is {} blocks\nThe physical size of the device is {} blocks",
            sb.s_blocks_count,
            dev.size() / sb.block_size() as u64
        ));
    }
    let descs = read_group_descs(dev, &sb)?;
    check_groups(&sb, &descs, &mut report);
    Ok(report)
}

fn check_groups(sb: &Superblock, descs: &[GroupDesc], report: &mut Report) {
    let (mut free_blocks, mut free_inodes) = (0u64, 0u64);
    for (i, d) in descs.iter().enumerate() {
        let g = GroupNo(i as u32);
        let first = sb.group_first_block(g).0;
        let last = first + sb.blocks_in_group(g);
        let inside = |b: u32, n: u32| b >= first && b.checked_add(n).is_some_and(|e| e <= last);
        let checks = [
            ("Block bitmap", d.bg_block_bitmap, 1),
            ("Inode bitmap", d.bg_inode_bitmap, 1),
            ("Inode table", d.bg_inode_table, sb.inode_table_blocks()),
        ];
        for (what, block, n) in checks {
            if !inside(block, n) {
                report.problems.push(format!(
                    "{what} for group {i} is not in group.  (block {block})"
                ));
            }
        }
        if d.bg_free_blocks_count as u32 > sb.blocks_in_group(g) {
            report.problems.push(format!(
                "Free blocks count wrong for group #{i} ({})",
                d.bg_free_blocks_count
            ));
        }
        if d.bg_free_inodes_count as u32 > sb.s_inodes_per_group {
            report.problems.push(format!(
                "Free inodes count wrong for group #{i} ({})",
                d.bg_free_inodes_count
            ));
        }
        free_blocks += d.bg_free_blocks_count as u64;
        free_inodes += d.bg_free_inodes_count as u64;
    }
    report.blocks_used = report.blocks_count.saturating_sub(free_blocks);
    report.inodes_used = report.inodes_count.saturating_sub(free_inodes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemoryDevice;
    use crate::mkfs::{format, plan, MkfsOptions, Zeroed};
    use crate::util::Progress;

    fn image() -> MemoryDevice {
        let o = MkfsOptions::default();
        let dev = MemoryDevice::new(32 << 20).unwrap();
        let g = plan(&o, 32 << 20).unwrap();
        format(&dev, &o, &g, Zeroed::All, &mut Progress::quiet()).unwrap();
        dev
    }

    #[test]
    fn fresh_image_is_clean() {
        let dev = image();
        let r = check(
            &dev,
            &FsckOptions {
                force: true,
                ..Default::default()
            },
        )
        .unwrap();
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        assert_eq!(r.exit_code(), 0);
        assert_eq!(r.inodes_used, 11);
    }

    #[test]
    fn damaged_descriptor_is_reported() {
        let dev = image();
        // Group 0's inode table pointer, in the table at block 2 (1 KiB blocks).
        dev.write_at(&u32::MAX.to_le_bytes(), 2048 + 8).unwrap();
        let r = check(
            &dev,
            &FsckOptions {
                force: true,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(r.exit_code(), exit::UNCORRECTED);
    }

    #[test]
    fn not_ext3_is_an_error() {
        let dev = MemoryDevice::new(1 << 20).unwrap();
        assert!(matches!(
            check(&dev, &FsckOptions::default()),
            Err(FsckError::Corrupt(_))
        ));
    }
}
