// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! Crash states the campaign (`scripts/crash-campaign`) found failing, kept
//! as regression tests. Each names the bug in docs/CRASH.md.

use jbdfs_testkit as common;
use jbdfs_testkit::crash as crash_common;

use std::sync::Arc;

use jbdfs::device::{BlockDevice, Event, MemoryDevice, RecordingDevice};
use jbdfs::format::InodeNo;
use jbdfs::fs::namei::{Caller, SetAttr};
use jbdfs::fs::{DataMode, Filesystem, MountConfig};
use jbdfs::journal::recovery::{recover, RecoverOptions};

const ROOT: InodeNo = InodeNo(2);
const ME: Caller = Caller { uid: 0, gid: 0 };

fn fresh() -> Arc<MemoryDevice> {
    crash_common::fresh_image(8 << 20)
}

/// CRASH-1 (docs/CRASH.md). Shrinking a file zeroes the tail of its new
/// last block in place before the transaction with the new size commits;
/// a crash between leaves the old size over zeroed bytes that were
/// fsync'd. Found as truncate_append state 16 (ordered and writeback).
#[test]
fn shrinking_truncate_never_zeroes_synced_bytes_inside_the_old_size() {
    // The window depends on when the data writer runs: try it often.
    for mode in [DataMode::Ordered, DataMode::Writeback].repeat(8) {
        let mem = fresh();
        let base = mem.snapshot();
        let rec = Arc::new(RecordingDevice::new(mem));
        let dev: Arc<dyn BlockDevice> = rec.clone();
        let cfg = MountConfig {
            data: mode,
            ..Default::default()
        };
        let fs = Filesystem::mount(dev, &cfg).unwrap();
        let (f, _) = fs.mknod(ROOT, b"t", 0o100644, 0, ME).unwrap();
        let data: Vec<u8> = (0..1489u32).map(|i| (i % 251 + 1) as u8).collect();
        fs.write(f, 0, &data, true).unwrap();
        fs.fsync(f, false).unwrap();
        rec.mark("synced");
        let shrink = SetAttr {
            size: Some(851),
            ..Default::default()
        };
        fs.setattr(f, &shrink, ME).unwrap();
        let events = rec.events();
        drop(fs);
        let synced = events
            .iter()
            .position(|e| *e == Event::Mark("synced".into()))
            .unwrap();
        for upto in synced..=events.len() {
            let img = MemoryDevice::from_vec(crash_common::image_after(&base, &events, upto));
            recover(&img, RecoverOptions { write: true }).unwrap();
            let dev: Arc<dyn BlockDevice> = Arc::new(img);
            let ro = MountConfig {
                read_only: true,
                ..Default::default()
            };
            let fs = Filesystem::mount(dev, &ro).unwrap();
            let (f, _) = fs.lookup(ROOT, b"t").unwrap();
            let got = fs.read(f, 0, 4096).unwrap();
            assert!(
                got == data || got == data[..851],
                "data={mode}, crash at event {upto}: {} bytes, neither the synced file nor its truncation",
                got.len()
            );
        }
    }
}

/// CRASH-2 (docs/CRASH.md). fallocate with KEEP_SIZE past the end of file
/// allocates blocks beyond i_size, which block-mapped ext3 cannot express:
/// e2fsck reports "i_size is X, should be Y". Found as fsx state 21 (every
/// mode); it needs no crash, a clean unmount shows it.
#[test]
fn fallocate_keep_size_past_eof_leaves_e2fsck_clean() {
    let mem = fresh();
    let dev: Arc<dyn BlockDevice> = mem.clone();
    let fs = Filesystem::mount(dev, &MountConfig::default()).unwrap();
    let (f, _) = fs.mknod(ROOT, b"f", 0o100644, 0, ME).unwrap();
    fs.write(f, 0, &[7u8; 3000], true).unwrap();
    // EOPNOTSUPP (as Linux gives for block-mapped files) or success; either
    // way the image must stay valid.
    let _ = fs.fallocate(f, 2000, 12330, true, true);
    fs.unmount().unwrap();
    drop(fs);
    let img = common::TempImage::new("falloc-keep");
    std::fs::write(&img.path, mem.snapshot()).unwrap();
    common::assert_e2fsck_clean(&img.path, "an image after fallocate(KEEP_SIZE) past EOF");
}

/// CRASH-3 (docs/CRASH.md). Freeing a block drops its copy waiting for
/// checkpoint at once (journal/transaction.rs `revoke`), while the
/// transaction that frees it is still running. When the next commit first
/// checkpoints and empties the log, that copy goes neither home nor stays
/// in the log; a crash before the freeing transaction commits leaves the
/// committed file pointing at blocks whose home content is stale. Found as
/// fsx state 188 in data=journal (the copies there are file data; in any
/// mode they can be indirect or directory blocks).
#[test]
fn freed_blocks_keep_their_checkpoint_copy_until_the_free_commits() {
    let mem = fresh();
    let base = mem.snapshot();
    let rec = Arc::new(RecordingDevice::new(mem));
    let dev: Arc<dyn BlockDevice> = rec.clone();
    let cfg = MountConfig {
        data: DataMode::Journal,
        ..Default::default()
    };
    let fs = Filesystem::mount(dev, &cfg).unwrap();
    let (g, _) = fs.mknod(ROOT, b"g", 0o100644, 0, ME).unwrap();
    let content = |round: usize| -> Vec<u8> {
        (0..20480)
            .map(|i| ((i + round * 7) % 250 + 1) as u8)
            .collect()
    };
    let rounds = 40;
    for round in 0..rounds {
        let (f, _) = fs.mknod(ROOT, b"f", 0o100644, 0, ME).unwrap();
        fs.write(f, 0, &content(round), true).unwrap();
        fs.fsync(f, false).unwrap();
        rec.mark(&format!("synced {round}"));
        fs.unlink(ROOT, b"f").unwrap();
        fs.write(
            g,
            (round as u64 % 8) * 24576,
            &[round as u8 + 1; 24576],
            true,
        )
        .unwrap();
        fs.fsync(g, false).unwrap();
        rec.mark(&format!("unlinked {round}"));
    }
    let events = rec.events();
    drop(fs);
    let ro = MountConfig {
        read_only: true,
        ..Default::default()
    };
    // The last mark before the next flush after `upto`: what is durable.
    let durable = |upto: usize| {
        let next = (upto..events.len())
            .find(|&i| events[i] == Event::Flush)
            .unwrap_or(events.len());
        events[..next].iter().rev().find_map(|e| match e {
            Event::Mark(m) => Some(m.clone()),
            _ => None,
        })
    };
    for upto in 0..=events.len() {
        let Some(mark) = durable(upto) else { continue };
        let img = MemoryDevice::from_vec(crash_common::image_after(&base, &events, upto));
        recover(&img, RecoverOptions { write: true }).unwrap();
        let dev: Arc<dyn BlockDevice> = Arc::new(img);
        let fs = Filesystem::mount(dev, &ro).unwrap();
        if let Some(round) = mark.strip_prefix("synced ") {
            let round: usize = round.parse().unwrap();
            let got = fs
                .lookup(ROOT, b"f")
                .map(|(f, _)| fs.read(f, 0, 1 << 20).unwrap());
            let ok = match &got {
                Ok(d) => (round..rounds).any(|r| *d == content(r)),
                // The unlink after it committed.
                Err(jbdfs::fs::FsError::NotFound) => true,
                Err(_) => false,
            };
            assert!(
                ok,
                "crash at event {upto} (after {mark}): f is not the synced file ({:?} bytes)",
                got.map(|d| d.len())
            );
        }
    }
}
