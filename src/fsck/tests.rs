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

#[test]
fn a_fast_symlink_with_a_wrong_i_blocks_keeps_its_target() {
    // i_blocks says one block, as an xattr block would: the kernel would
    // call the symlink slow, e2fsck (by size) fast. fsck must not read
    // the target as block pointers and clear them.
    let dev = image();
    let sb = read_superblock(&dev).unwrap();
    let ino = 12;
    let mut inode = crate::format::inode::Inode::new(sb.inode_size() as usize, 32);
    inode.i_mode = crate::format::inode::S_IFLNK | 0o777;
    inode.i_links_count = 1;
    let target = b"a-target-of-some-length";
    let mut bytes = [0u8; 60];
    bytes[..target.len()].copy_from_slice(target);
    for (i, w) in inode.i_block.iter_mut().enumerate() {
        *w = u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap());
    }
    inode.i_size = target.len() as u64;
    inode.i_blocks = u64::from(sb.block_size() / 512);
    let at = inode_at(&dev, ino);
    let mut raw = inode.to_bytes();
    raw.truncate(sb.inode_size() as usize);
    dev.write_at(&raw, at).unwrap();
    check(&dev, &opts(Mode::Yes)).unwrap();
    let mut after = vec![0u8; raw.len()];
    dev.read_at(&mut after, at).unwrap();
    let after = crate::format::inode::Inode::parse(&after).unwrap();
    assert_eq!(after.i_block, inode.i_block, "the target was kept");
    assert_eq!(after.i_blocks, 0, "i_blocks was what got fixed");
}
