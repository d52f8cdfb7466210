// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! Handle credits, as jbd enforces them: a handle adds at most the buffers it
//! reserved, a transaction never reserves more than a quarter of the log,
//! and work bigger than that is split across handles rather than refused —
//! checked on a 1024-block journal, the smallest mke2fs makes.

use jbdfs_testkit as common;

use common::*;
use jbdfs::format::InodeNo;
use jbdfs::fs::namei::{Caller, SetAttr};
use jbdfs::fs::xattr::SetMode;
use jbdfs::fs::{DataMode, MountConfig};
use jbdfs::mkfs::MkfsOptions;

const ROOT: InodeNo = InodeNo(2);
const ME: Caller = Caller { uid: 0, gid: 0 };

/// A 64 MiB image, 1 KiB blocks, with a 1 MiB (1024-block) journal.
fn tiny_journal_image() -> TempImage {
    let opts = MkfsOptions {
        block_size: Some(1024),
        journal_mib: Some(1),
        ..Default::default()
    };
    jbdfs_image_with("credits", opts, 64 << 20)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i / 1024) as u8).wrapping_mul(31) ^ (i as u8) ^ seed)
        .collect()
}

#[test]
fn a_write_bigger_than_a_transaction_is_split_across_handles() {
    for mode in [DataMode::Ordered, DataMode::Journal] {
        let img = tiny_journal_image();
        let fs = mount_file_cfg(
            &img.path,
            &MountConfig {
                data: mode,
                ..Default::default()
            },
        );
        // 8 MiB in one call: in data=journal that is 8192 logged blocks
        // against a transaction limit of 256.
        let data = pattern(8 << 20, 7);
        let (f, _) = fs.mknod(ROOT, b"big", 0o100644, 0, ME).unwrap();
        assert_eq!(fs.write(f, 0, &data, true).unwrap(), data.len());
        fs.fsync(f, false).unwrap();
        assert_eq!(fs.read(f, 0, data.len() as u32).unwrap(), data);
        if mode == DataMode::Journal {
            let stats = fs.journal_stats();
            let commits: u64 = stats.split_whitespace().next().unwrap().parse().unwrap();
            assert!(
                commits >= 32,
                "8192 logged blocks need at least 32 transactions of 256:\n{stats}"
            );
        }
        // Allocating a large range and truncating it away also fit.
        fs.fallocate(f, 8 << 20, 16 << 20, false, true).unwrap();
        let shrink = SetAttr {
            size: Some(1 << 20),
            ..Default::default()
        };
        fs.setattr(f, &shrink, ME).unwrap();
        fs.unmount().unwrap();
        drop(fs);
        assert_e2fsck_clean(&img.path, "an image after writes larger than a transaction");
        let fs = mount_file_cfg(
            &img.path,
            &MountConfig {
                data: mode,
                ..Default::default()
            },
        );
        let (ino, attr) = fs.lookup(ROOT, b"big").unwrap();
        assert_eq!(attr.i_size, 1 << 20);
        assert_eq!(fs.read(ino, 0, 1 << 20).unwrap(), &data[..1 << 20]);
        fs.unmount().unwrap();
    }
}

#[test]
fn many_small_operations_fill_transactions_without_overflowing_the_log() {
    let img = tiny_journal_image();
    let fs = mount_file_cfg(
        &img.path,
        &MountConfig {
            data: DataMode::Ordered,
            ..Default::default()
        },
    );
    for i in 0..600u32 {
        let name = format!("f{i}");
        let (f, _) = fs.mknod(ROOT, name.as_bytes(), 0o100644, 0, ME).unwrap();
        fs.write(f, 0, &pattern(3000, i as u8), true).unwrap();
        fs.setxattr(f, b"user.n", name.as_bytes(), SetMode::Either)
            .unwrap();
    }
    fs.unmount().unwrap();
    drop(fs);
    assert_e2fsck_clean(&img.path, "600 creates on a 1024-block journal");
}
