// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! data=journal within cache_size: journaled file data stays pinned in the
//! buffer cache until checkpoint, so writing far more than the cache holds
//! must make room (commit, checkpoint) instead of growing the cache. Checked
//! on an in-process filesystem by the cache's own high-water mark, then by
//! reading the data back and by e2fsck.

use jbdfs_testkit as common;

use std::sync::Arc;

use common::*;
use jbdfs::format::InodeNo;
use jbdfs::fs::namei::Caller;
use jbdfs::fs::{DataMode, Filesystem, MountConfig};
use jbdfs::mkfs::MkfsOptions;

const ROOT: InodeNo = InodeNo(2);
const ME: Caller = Caller { uid: 0, gid: 0 };
const CACHE_SIZE: usize = 4 << 20;
const FILE_MIB: usize = 24;

fn mount(img: &TempImage) -> Arc<Filesystem> {
    let cfg = MountConfig {
        data: DataMode::Journal,
        cache_size: CACHE_SIZE,
        ..Default::default()
    };
    mount_file_cfg(&img.path, &cfg)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i / 4096) as u8).wrapping_mul(31) ^ (i as u8) ^ seed)
        .collect()
}

/// Writes `FILE_MIB` MiB to a new file in 1 MiB calls, as dd bs=1M would.
fn write_file(fs: &Filesystem, name: &[u8], seed: u8) -> InodeNo {
    let data = pattern(FILE_MIB << 20, seed);
    let (f, _) = fs.mknod(ROOT, name, 0o100644, 0, ME).unwrap();
    for (i, chunk) in data.chunks(1 << 20).enumerate() {
        let n = fs.write(f, (i << 20) as u64, chunk, true).unwrap();
        assert_eq!(n, chunk.len());
    }
    fs.fsync(f, false).unwrap();
    f
}

#[test]
fn data_journal_writes_far_beyond_cache_size_stay_within_it() {
    let opts = MkfsOptions {
        block_size: Some(4096),
        ..Default::default()
    };
    // 128 MiB: a 16 MiB journal, so the log alone could pin 4x the cache.
    let img = jbdfs_image_with("jmem", opts, 128 << 20);
    let fs = mount(&img);
    let cache = fs.buffer_cache().clone();
    std::thread::scope(|s| {
        s.spawn(|| write_file(&fs, b"a", 1));
        s.spawn(|| write_file(&fs, b"b", 2));
    });
    // Two writers of 24 MiB each through a 4 MiB cache (3.5 MiB of it for
    // buffers). A few handles' worth of blocks above the budget is the
    // constant: shards fill unevenly, and each writer may pin one handle's
    // blocks past the check.
    let budget = cache.capacity_bytes();
    let slack = 1 << 20;
    let peak = cache.peak_cached_bytes();
    assert!(
        peak <= budget + slack,
        "the cache peaked at {peak} bytes against a budget of {budget}"
    );
    for (name, seed) in [(&b"a"[..], 1), (&b"b"[..], 2)] {
        let (f, _) = fs.lookup(ROOT, name).unwrap();
        let back = fs.read(f, 0, (FILE_MIB << 20) as u32).unwrap();
        assert!(
            back == pattern(FILE_MIB << 20, seed),
            "file {name:?} differs"
        );
    }
    fs.unmount().unwrap();
    drop(fs);
    assert_eq!(cache.pinned_bytes(), 0, "unmount leaves nothing pinned");
    // The cache holds the device, and with it the image's lock.
    drop(cache);
    e2fsck(&img.path).expect_ok();
    // And after a remount the data comes from home, not from the log.
    let fs = mount(&img);
    let (f, _) = fs.lookup(ROOT, b"a").unwrap();
    let back = fs.read(f, 0, (FILE_MIB << 20) as u32).unwrap();
    assert!(
        back == pattern(FILE_MIB << 20, 1),
        "file a differs after remount"
    );
    fs.unmount().unwrap();
}

/// How many 4 KiB-aligned blocks of the image equal `block`.
fn count_on_disk(img: &TempImage, block: &[u8]) -> usize {
    let bytes = std::fs::read(&img.path).unwrap();
    bytes
        .chunks_exact(block.len())
        .filter(|b| *b == block)
        .count()
}

#[test]
fn checkpoint_writes_committed_bytes_not_newer_ones() {
    let opts = MkfsOptions {
        block_size: Some(4096),
        ..Default::default()
    };
    let img = jbdfs_image_with("jfreeze", opts, 64 << 20);
    let fs = mount(&img);
    let committed = vec![0xa5u8; 4096];
    let newer = vec![0x5au8; 4096];
    let (f, _) = fs.mknod(ROOT, b"f", 0o100644, 0, ME).unwrap();
    fs.write(f, 0, &committed, true).unwrap();
    fs.fsync(f, false).unwrap();
    // The committed block waits for checkpoint with no copy of its own;
    // the next write joins it to a new transaction, which must keep the
    // committed bytes for checkpoint before changing the buffer.
    fs.write(f, 0, &newer, true).unwrap();
    fs.journal().checkpoint_all().unwrap();
    assert!(
        count_on_disk(&img, &committed) >= 1,
        "committed bytes went home"
    );
    assert_eq!(
        count_on_disk(&img, &newer),
        0,
        "uncommitted bytes reached the device"
    );
    assert_eq!(fs.read(f, 0, 4096).unwrap(), newer);
    fs.unmount().unwrap();
    drop(fs);
    e2fsck(&img.path).expect_ok();
    let fs = mount(&img);
    assert_eq!(fs.read(f, 0, 4096).unwrap(), newer);
    fs.unmount().unwrap();
}
