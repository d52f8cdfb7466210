// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! fsync without a waiting thread (`Filesystem::fsync_then`, which the FUSE
//! adapter uses so that the thread finishing a commit sends the replies):
//! every callback runs exactly once, with success, and by the time it runs
//! the file is durable. The device is snapshotted once every callback has
//! come back, as if the machine had crashed then; the snapshot is replayed
//! by a fresh mount, which must find every file with its data, and e2fsck
//! must find the result clean.

use jbdfs_testkit as common;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use jbdfs::device::{FileDevice, MemoryDevice, OpenOptions};
use jbdfs::format::InodeNo;
use jbdfs::fs::namei::Caller;
use jbdfs::fs::{Filesystem, MountConfig};
use jbdfs::journal::CommitStart;
use jbdfs::mkfs::MkfsOptions;

const ROOT: InodeNo = InodeNo(2);
const ME: Caller = Caller { uid: 0, gid: 0 };
const THREADS: usize = 8;
const FILES: usize = 40;

fn contents(t: usize, i: usize) -> Vec<u8> {
    (0..4096).map(|b| (b * 7 + t * 31 + i) as u8).collect()
}

/// Creates, writes and fsyncs files from several threads without waiting;
/// returns each callback's (name, outcome). Deferred commits start at the
/// end of each thread's "batch" of three files, as a ring queue's do.
fn fsync_from_threads(fs: &Filesystem, start: CommitStart) -> Vec<(String, bool)> {
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let tx = tx.clone();
            s.spawn(move || {
                for i in 0..FILES {
                    let name = format!("t{t}-f{i}");
                    let (ino, _) = fs.mknod(ROOT, name.as_bytes(), 0o100644, 0, ME).unwrap();
                    fs.write(ino, 0, &contents(t, i), true).unwrap();
                    let tx = tx.clone();
                    fs.fsync_then(
                        ino,
                        false,
                        start,
                        Box::new(move |res| tx.send((name, res.is_ok())).unwrap()),
                    );
                    if i % 3 == 2 || i == FILES - 1 {
                        fs.journal().commit_if_requested();
                    }
                }
            });
        }
    });
    drop(tx);
    let mut done = Vec::new();
    while done.len() < THREADS * FILES {
        done.push(
            rx.recv_timeout(Duration::from_secs(30))
                .expect("an fsync never completed"),
        );
    }
    done
}

#[test]
fn fsyncs_completed_by_callback_are_durable_when_the_callback_runs() {
    callbacks_run_once_and_only_after_durability(CommitStart::Now);
}

#[test]
fn fsyncs_whose_commit_waits_for_the_batch_end_are_durable_when_the_callback_runs() {
    callbacks_run_once_and_only_after_durability(CommitStart::Deferred);
}

fn callbacks_run_once_and_only_after_durability(start: CommitStart) {
    let opts = MkfsOptions {
        block_size: Some(1024),
        ..Default::default()
    };
    let img = jbdfs_image_with("fsync-callbacks", opts, 64 << 20);
    let dev = Arc::new(MemoryDevice::from_vec(std::fs::read(&img.path).unwrap()));
    let fs = Filesystem::mount(dev.clone(), &MountConfig::default()).unwrap();
    let done = fsync_from_threads(&fs, start);
    // The crash: whatever reached the device by now, and nothing later.
    let crashed = dev.snapshot();
    let mut names: Vec<&String> = done.iter().map(|(n, _)| n).collect();
    names.sort();
    names.dedup();
    assert_eq!(
        names.len(),
        THREADS * FILES,
        "each callback runs exactly once"
    );
    assert!(done.iter().all(|(_, ok)| *ok), "every fsync succeeded");
    fs.unmount().unwrap();
    drop(fs);

    std::fs::write(&img.path, &crashed).unwrap();
    let dev = FileDevice::open(&img.path, OpenOptions::default()).unwrap();
    let fs = Filesystem::mount(Arc::new(dev), &MountConfig::default()).unwrap();
    for t in 0..THREADS {
        for i in 0..FILES {
            let name = format!("t{t}-f{i}");
            let (ino, _) = fs
                .lookup(ROOT, name.as_bytes())
                .unwrap_or_else(|e| panic!("{name} lost after its fsync returned: {e}"));
            assert_eq!(fs.read(ino, 0, 4096).unwrap(), contents(t, i), "{name}");
        }
    }
    fs.unmount().unwrap();
    drop(fs);
    assert_e2fsck_clean(
        &img.path,
        "an image replayed after fsyncs completed by callback",
    );
}

/// A transport that serves requests in batches asks the journal how long to
/// go on serving before a deferred commit (`Journal::gather_budget`): as
/// with jbd's batching loop, never under bdelay=0 (nor jbd2 with no
/// wait), never for a lone writer (the same process as the last fsync), and
/// under yield and auto on a fast device for at most max_batch_time.
#[test]
fn a_deferred_commit_gathers_for_other_writers_as_bdelay_says() {
    use jbdfs::journal::{Batching, DEFAULT_MAX_BATCH_TIME_US};
    let cases = [
        (Batching::Off, false),
        (
            Batching::Jbd2 {
                min_us: 0,
                max_us: 0,
            },
            false,
        ),
        (Batching::Yield, true),
        (Batching::default(), true),
        (Batching::Auto { max_us: 0 }, false),
    ];
    let img = jbdfs_image_with("gather-budget", MkfsOptions::default(), 32 << 20);
    for (batching, gathers) in cases {
        let dev = Arc::new(MemoryDevice::from_vec(std::fs::read(&img.path).unwrap()));
        let mut cfg = MountConfig::default();
        cfg.journal.batching = batching;
        let fs = Filesystem::mount(dev, &cfg).unwrap();
        // A commit first, so that auto knows the device is fast.
        let (ino, _) = fs.mknod(ROOT, b"f", 0o100644, 0, ME).unwrap();
        fs.fsync(ino, false).unwrap();
        let j = fs.journal();
        let cap = Duration::from_micros(DEFAULT_MAX_BATCH_TIME_US as u64);
        let first = j.gather_budget(100);
        assert_eq!(first.is_some(), gathers, "{batching:?}");
        assert!(first.is_none_or(|b| b <= cap), "{batching:?}: {first:?}");
        assert_eq!(
            j.gather_budget(100),
            None,
            "{batching:?}: a lone writer waits"
        );
        assert_eq!(j.gather_budget(101).is_some(), gathers, "{batching:?}");
        fs.unmount().unwrap();
    }
}
