// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! The orphan chain under concurrency: many threads unlink open files,
//! change them while they are orphans and close them, so that orphans join
//! and leave the chain next to each other at once. After a clean unmount
//! e2fsck must find no orphan list left and every inode's dtime right.
//! (The benchmarks once found "Deleted inode N has zero dtime" and a
//! corrupted orphan list after concurrent deletes: a neighbour's dtime was
//! patched after the neighbour itself had been deleted.)

use jbdfs_testkit as common;

use std::sync::Arc;

use common::*;
use jbdfs::device::{FileDevice, OpenOptions};
use jbdfs::format::InodeNo;
use jbdfs::fs::namei::{Caller, SetAttr};
use jbdfs::fs::{Filesystem, MountConfig};
use jbdfs::mkfs::MkfsOptions;

const ROOT: InodeNo = InodeNo(2);
const ME: Caller = Caller { uid: 0, gid: 0 };

fn churn(fs: &Filesystem, thread: usize, rounds: usize) {
    let dir = format!("t{thread}");
    let (d, _) = fs.mkdir(ROOT, dir.as_bytes(), 0o755, ME).unwrap();
    for i in 0..rounds {
        let name = format!("f{i}");
        let (f, _) = fs.mknod(d, name.as_bytes(), 0o100644, 0, ME).unwrap();
        fs.open(f).unwrap();
        fs.write(f, 0, &vec![i as u8; 3000], true).unwrap();
        fs.unlink(d, name.as_bytes()).unwrap();
        // An orphan changed while on the chain: its slot is rewritten.
        let grow = SetAttr {
            size: Some(5000 + i as u64),
            ..Default::default()
        };
        fs.setattr(f, &grow, ME).unwrap();
        if i % 5 == 0 {
            fs.fsync(f, false).unwrap();
        }
        fs.release(f).unwrap();
    }
}

#[test]
fn orphans_joining_and_leaving_at_once_keep_the_chain_right() {
    let opts = MkfsOptions {
        block_size: Some(1024),
        ..Default::default()
    };
    let img = jbdfs_image_with("orphans", opts, 64 << 20);
    let dev = FileDevice::open(&img.path, OpenOptions::default()).unwrap();
    let fs = Filesystem::mount(Arc::new(dev), &MountConfig::default()).unwrap();
    std::thread::scope(|s| {
        for t in 0..8 {
            let fs = &fs;
            s.spawn(move || churn(fs, t, 3000));
        }
    });
    fs.unmount().unwrap();
    drop(fs);
    assert_e2fsck_clean(&img.path, "an image after concurrent orphan churn");
}
