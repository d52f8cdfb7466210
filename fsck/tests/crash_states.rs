// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! fsck.jbdfs on crash states of images jbdfs wrote: a directory workload
//! (create, write, hard link, unlink, rmdir, fsync) runs on a recording
//! device; the image is rebuilt as it stood at many flush points, with the
//! journal not yet replayed. For each state, `-n` (checking as if replayed,
//! in memory) must find it consistent and change nothing; `-y` must leave
//! an image e2fsck -fn finds clean; and after a real replay e2fsck -fn must
//! agree that it is clean.

use std::sync::Arc;

use jbdfs::device::{BlockDevice, Event, MemoryDevice, RecordingDevice};
use jbdfs::format::InodeNo;
use jbdfs::fs::namei::Caller;
use jbdfs::fs::{Filesystem, MountConfig};
use jbdfs::fsck::{check, FsckOptions, Mode};
use jbdfs::journal::recovery::{recover, RecoverOptions};
use jbdfs::mkfs::{memory_image, MkfsOptions};

const ROOT: InodeNo = InodeNo(2);
const WHO: Caller = Caller { uid: 0, gid: 0 };

/// The base image and the write log of the workload.
fn record_workload() -> (Vec<u8>, Vec<Event>) {
    let opts = MkfsOptions {
        block_size: Some(1024),
        ..Default::default()
    };
    let mem = Arc::new(memory_image(&opts, 8 << 20).unwrap());
    let base = mem.snapshot();
    let rec = Arc::new(RecordingDevice::new(mem));
    let dev: Arc<dyn BlockDevice> = rec.clone();
    let fs = Filesystem::mount(dev, &MountConfig::default()).unwrap();
    for round in 0..3u32 {
        let dname = format!("dir{round}");
        let (d, _) = fs.mkdir(ROOT, dname.as_bytes(), 0o755, WHO).unwrap();
        for i in 0..6u32 {
            let name = format!("f{i}");
            let (f, _) = fs.mknod(d, name.as_bytes(), 0o100644, 0, WHO).unwrap();
            let data = vec![b'a' + i as u8; 700 * (i as usize + 1) * (round as usize + 1)];
            fs.write(f, 0, &data, true).unwrap();
            if i % 2 == 0 {
                fs.link(f, ROOT, format!("l{round}-{i}").as_bytes())
                    .unwrap();
            }
            fs.fsync(f, false).unwrap();
        }
        fs.unlink(d, b"f1").unwrap();
        if round > 0 {
            let old = format!("dir{}", round - 1);
            let (od, _) = fs.lookup(ROOT, old.as_bytes()).unwrap();
            for i in 0..6u32 {
                let _ = fs.unlink(od, format!("f{i}").as_bytes());
            }
            fs.rmdir(ROOT, old.as_bytes()).unwrap();
        }
    }
    let events = rec.events();
    drop(fs);
    (base, events)
}

fn state_at(base: &[u8], events: &[Event], upto: usize) -> Vec<u8> {
    jbdfs_testkit::crash::image_after(base, events, upto)
}

fn e2fsck_clean(img: &[u8], tag: &str) -> Result<(), String> {
    let file = jbdfs_testkit::to_file(img, &format!("fsck-crash-{tag}"));
    let out = jbdfs_testkit::e2fsck(&file.path);
    if out.success() {
        Ok(())
    } else {
        Err(out.describe())
    }
}

fn opts(mode: Mode) -> FsckOptions {
    FsckOptions {
        mode,
        force: true,
        ..Default::default()
    }
}

#[test]
fn crash_states_check_clean_as_if_replayed() {
    jbdfs_testkit::require!("e2fsck");
    let (base, events) = record_workload();
    let mut points: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| **e == Event::Flush)
        .map(|(i, _)| i + 1)
        .collect();
    points.push(events.len());
    let step = points.len() / 40 + 1;
    let mut replays = 0;
    for &upto in points.iter().step_by(step) {
        let img = state_at(&base, &events, upto);
        let mem = MemoryDevice::from_vec(img.clone());
        let r = check(&mem, &opts(Mode::No)).unwrap();
        assert_eq!(r.unfixed, 0, "crash at {upto}: fsck -n: {:?}", r.problems);
        assert!(mem.snapshot() == img, "crash at {upto}: fsck -n wrote");
        replays += usize::from(r.journal_replayed);

        let replayed = MemoryDevice::from_vec(img.clone());
        recover(&replayed, RecoverOptions { write: true }).unwrap();
        e2fsck_clean(&replayed.snapshot(), &format!("replayed-{upto}"))
            .unwrap_or_else(|e| panic!("crash at {upto}: e2fsck after replay:\n{e}"));

        let fixed = MemoryDevice::from_vec(img);
        let r = check(&fixed, &opts(Mode::Yes)).unwrap();
        assert_eq!(r.unfixed, 0, "crash at {upto}: fsck -y: {:?}", r.problems);
        e2fsck_clean(&fixed.snapshot(), &format!("fixed-{upto}"))
            .unwrap_or_else(|e| panic!("crash at {upto}: e2fsck after fsck -y:\n{e}"));
        let again = check(&fixed, &opts(Mode::No)).unwrap();
        assert_eq!(
            again.exit_code(),
            0,
            "crash at {upto}: second fsck -n: {:?}",
            again.problems
        );
    }
    assert!(
        replays > 0,
        "no crash state needed a replay: the test tests nothing"
    );
}
