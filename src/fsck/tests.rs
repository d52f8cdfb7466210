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
