// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! In-process crash tests: a workload runs on a recording device over a
//! memory image; the image is then rebuilt as it stood at many points of the
//! write log (a crash there), recovered by mounting, and checked: every file
//! whose fsync returned before the crash point reads back exactly, and
//! e2fsck -fn finds nothing beyond what replay fixed.

use jbdfs_testkit::crash as crash_common;

use std::process::Command;
use std::sync::Arc;

use jbdfs::device::{BlockDevice, Event, MemoryDevice, RecordingDevice};
use jbdfs::format::InodeNo;
use jbdfs::fs::namei::Caller;
use jbdfs::fs::{DataMode, Filesystem, MountConfig};

const ROOT: InodeNo = InodeNo(2);
const ROUNDS: usize = 3;

/// An fsync that returned: at which log position, for which file and round.
struct Synced {
    at: usize,
    file: usize,
    round: usize,
}
const ME: Caller = Caller { uid: 0, gid: 0 };

fn content(i: usize, round: usize) -> Vec<u8> {
    format!("file {i} round {round} ")
        .repeat(1 + (i * 37 + round * 11) % 300)
        .into_bytes()
}

/// Runs the workload; returns the base image and, per fsync, the log
/// position at which it returned and what the file then held.
fn workload(mode: DataMode) -> (Vec<u8>, Vec<Event>, Vec<Synced>) {
    let mem = crash_common::fresh_image(16 << 20);
    let base = mem.snapshot();
    let rec = Arc::new(RecordingDevice::new(mem));
    let dev: Arc<dyn BlockDevice> = rec.clone();
    let cfg = MountConfig {
        data: mode,
        ..Default::default()
    };
    let fs = Filesystem::mount(dev, &cfg).unwrap();
    let mut synced = Vec::new();
    let (d, _) = fs.mkdir(ROOT, b"d", 0o755, ME).unwrap();
    for round in 0..ROUNDS {
        for i in 0..8 {
            let name = format!("f{i}");
            let f = match fs.lookup(d, name.as_bytes()) {
                Ok((f, _)) => f,
                Err(_) => fs.mknod(d, name.as_bytes(), 0o100644, 0, ME).unwrap().0,
            };
            let data = content(i, round);
            let t = jbdfs::fs::namei::SetAttr {
                size: Some(0),
                ..Default::default()
            };
            fs.setattr(f, &t, ME).unwrap();
            fs.write(f, 0, &data, true).unwrap();
            if i % 3 == 0 {
                fs.rename(d, name.as_bytes(), d, b"tmp", Default::default())
                    .unwrap();
                fs.rename(d, b"tmp", d, name.as_bytes(), Default::default())
                    .unwrap();
            }
            fs.fsync(f, false).unwrap();
            synced.push(Synced {
                at: rec.events().len(),
                file: i,
                round,
            });
            let _ = data;
        }
    }
    let events = rec.events();
    drop(fs);
    (base, events, synced)
}

fn check_state(img: Vec<u8>, synced: &[Synced], upto: usize, tag: &str) {
    let mem = Arc::new(MemoryDevice::from_vec(img));
    let dev: Arc<dyn BlockDevice> = mem.clone();
    let fs = Filesystem::mount(dev, &MountConfig::default())
        .unwrap_or_else(|e| panic!("{tag}: mount after crash at {upto}: {e}"));
    // The newest round of each file whose fsync returned before the crash.
    let mut newest = std::collections::BTreeMap::new();
    for s in synced.iter().filter(|s| s.at <= upto) {
        newest.insert(s.file, s.round);
    }
    if !newest.is_empty() {
        let (d, _) = fs.lookup(ROOT, b"d").unwrap();
        for (&i, &round) in &newest {
            let (f, _) = fs
                .lookup(d, format!("f{i}").as_bytes())
                .unwrap_or_else(|e| panic!("{tag}@{upto}: f{i} lost: {e}"));
            let got = fs.read(f, 0, 1 << 20).unwrap();
            // The synced round, or a later one (complete, or truncated to
            // empty by a later round's first step): never older, never torn.
            let later_or_same = (round..ROUNDS).any(|r| got == content(i, r));
            let truncated = got.is_empty() && round + 1 < ROUNDS;
            assert!(
                later_or_same || truncated,
                "{tag}@{upto}: f{i} holds {} bytes matching no round >= {round}",
                got.len()
            );
        }
    }
    fs.unmount().unwrap();
    drop(fs);
    let path = std::env::temp_dir().join(format!(
        "jbdfs-crash-{}-{tag}-{upto}.img",
        std::process::id()
    ));
    std::fs::write(&path, mem.snapshot()).unwrap();
    let out = Command::new("e2fsck")
        .arg("-fn")
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "{tag}: e2fsck after crash at event {upto} and recovery:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

fn campaign(mode: DataMode) {
    let tag = mode.name();
    let (base, events, synced) = workload(mode);
    let flushes: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| **e == Event::Flush)
        .map(|(i, _)| i + 1)
        .collect();
    // Every prefix ending at a flush, plus write boundaries in between.
    let mut points: Vec<usize> = flushes.iter().step_by(2).copied().collect();
    points.extend((0..events.len()).step_by(events.len() / 40 + 1));
    points.push(events.len());
    points.sort_unstable();
    points.dedup();
    for upto in &points {
        check_state(
            crash_common::image_after(&base, &events, *upto),
            &synced,
            *upto,
            tag,
        );
    }
    eprintln!("{tag}: {} crash states tested, 0 failed", points.len());
}

#[test]
fn crash_at_many_points_ordered() {
    campaign(DataMode::Ordered);
}

#[test]
fn crash_at_many_points_data_journal() {
    campaign(DataMode::Journal);
}
