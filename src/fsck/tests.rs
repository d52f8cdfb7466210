//! In-process checks of fsck on images made by jbdfs's mkfs in memory.

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

fn opts(mode: Mode) -> FsckOptions {
    FsckOptions {
        mode,
        force: true,
        ..Default::default()
    }
}

#[test]
fn fresh_image_is_clean() {
    let dev = image();
    let r = check(&dev, &opts(Mode::No)).unwrap();
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    assert_eq!(r.exit_code(), 0);
    assert_eq!(r.inodes_used, 11);
}

#[test]
fn damaged_descriptor_is_reported_and_no_byte_changes() {
    let dev = image();
    // Group 0's block bitmap pointer, in the table right after the superblock.
    let sb = read_superblock(&dev).unwrap();
    let gdt = (u64::from(sb.s_first_data_block) + 1) * u64::from(sb.block_size());
    dev.write_at(&u32::MAX.to_le_bytes(), gdt).unwrap();
    let before = dev.snapshot();
    let r = check(&dev, &opts(Mode::No)).unwrap();
    assert_eq!(r.exit_code(), exit::UNCORRECTED, "{:?}", r.problems);
    assert!(before == dev.snapshot());
    let r = check(&dev, &opts(Mode::Yes)).unwrap();
    assert_eq!(r.exit_code(), exit::NONDESTRUCT, "{:?}", r.problems);
    let r = check(&dev, &opts(Mode::No)).unwrap();
    assert_eq!(r.exit_code(), 0, "{:?}", r.problems);
}

#[test]
fn not_ext3_is_an_error() {
    let dev = MemoryDevice::new(1 << 20).unwrap();
    assert!(matches!(
        check(&dev, &FsckOptions::default()),
        Err(FsckError::Corrupt(_))
    ));
}

/// Byte offset of inode `ino` in `dev`'s inode table.
fn inode_at(dev: &MemoryDevice, ino: u32) -> u64 {
    let sb = read_superblock(dev).unwrap();
    let descs = super_check::read_descs(dev, &sb, sb.s_first_data_block).unwrap();
    let (g, idx) = sb.inode_group(ino);
    u64::from(descs[g.0 as usize].bg_inode_table) * u64::from(sb.block_size())
        + u64::from(idx) * u64::from(sb.inode_size())
}

#[test]
fn a_zeroed_journal_inode_is_rebuilt_from_the_superblock_backup() {
    let dev = image();
    let sb = read_superblock(&dev).unwrap();
    let ino = sb.s_journal_inum;
    let at = inode_at(&dev, ino);
    let mut before = vec![0u8; sb.inode_size() as usize];
    dev.read_at(&mut before, at).unwrap();
    dev.write_at(&vec![0u8; before.len()], at).unwrap();
    let r = check(&dev, &opts(Mode::Yes)).unwrap();
    assert!(r.exit_code() <= exit::NONDESTRUCT, "{:?}", r.problems);
    let sb = read_superblock(&dev).unwrap();
    assert!(sb.has_compat(feature::COMPAT_HAS_JOURNAL), "journal kept");
    assert_eq!(sb.s_journal_inum, ino);
    let map = crate::journal::jmap::JournalMap::load(&dev, &sb).unwrap();
    let first = crate::journal::jmap::backup_inode(&sb).unwrap().i_block[0];
    assert_eq!(map.blocks()[0], first, "the same blocks as before");
    let r = check(&dev, &opts(Mode::No)).unwrap();
    assert_eq!(r.exit_code(), 0, "{:?}", r.problems);
}

#[test]
fn a_journal_without_the_has_journal_flag_is_released() {
    let dev = image();
    let mut sb = read_superblock(&dev).unwrap();
    sb.s_feature_compat &= !feature::COMPAT_HAS_JOURNAL;
    dev.write_at(&sb.to_bytes(), sbm::SUPERBLOCK_OFFSET)
        .unwrap();
    let r = check(&dev, &opts(Mode::Yes)).unwrap();
    assert_eq!(r.exit_code(), exit::NONDESTRUCT, "{:?}", r.problems);
    assert!(r.problems[0].contains("has_journal flag is clear"));
    assert_eq!(read_superblock(&dev).unwrap().s_journal_inum, 0);
    let r = check(&dev, &opts(Mode::No)).unwrap();
    assert_eq!(r.exit_code(), 0, "{:?}", r.problems);
}
