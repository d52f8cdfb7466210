//! Process crashes: the daemon is killed with SIGKILL in the middle of a
//! workload over FUSE, in each data mode, while it records its device log
//! (`-o record=PATH`), with a mark after every fsync that returned
//! (requested through PATH.mark and SIGUSR2). Then:
//! - a new mount recovers, fsck (jbdfs's and e2fsck) is clean, and every
//!   fsync'd file is intact;
//! - every flush prefix of the recorded log, replayed, holds every file
//!   whose mark precedes the next flush, and e2fsck finds it clean.

#[path = "../../tests/common/mod.rs"]
mod common;
#[path = "../../tests/crash_common/mod.rs"]
mod crash_common;

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use jbdfs::device::record::{base_image_path, read_log};
use jbdfs::device::{BlockDevice, Event, FileDevice, MemoryDevice, OpenOptions};
use jbdfs::format::InodeNo;
use jbdfs::fs::{Filesystem, MountConfig};
use jbdfs::journal::recovery::{recover, RecoverOptions};
use jbdfs::mkfs::{make_filesystem, MkfsOptions, Request};

const SYNCED: usize = 16;

fn data(i: usize) -> Vec<u8> {
    (0..(i * 1777 % 30000 + 1))
        .map(|k| (k * 13 + i * 7 + 1) as u8)
        .collect()
}

fn daemon(img: &Path, dir: &Path, opts: &str) -> Child {
    let child = Command::new(env!("CARGO_BIN_EXE_jbdfs"))
        .arg("-f")
        .arg(img)
        .arg(dir)
        .args(["-o", opts])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let canon = std::fs::canonicalize(dir).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !jbdfs_daemon::daemon::is_mounted(&canon) {
        assert!(Instant::now() < deadline, "mount did not come up");
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

/// Asks the daemon to append `label` to its log, and waits until it has;
/// false when the daemon is gone before taking it.
fn mark(log: &Path, pid: u32, label: &str) -> bool {
    let req = jbdfs_daemon::daemon::mark_request_path(log);
    let tmp = req.with_extension("tmp");
    std::fs::write(&tmp, format!("{label}\n")).unwrap();
    std::fs::rename(&tmp, &req).unwrap();
    // SAFETY: kill(2) with a valid signal on our child's pid has no memory effects.
    let rc = unsafe { libc::kill(pid as libc::pid_t, libc::SIGUSR2) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while rc == 0 && req.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    let taken = !req.exists();
    let _ = std::fs::remove_file(&req);
    taken
}

/// Writes, fsyncs and marks f{from}, f{from+1}, ... until the daemon
/// dies, counting the files marked in `done`.
fn synced_files_until_killed(dir: &Path, log: &Path, pid: u32, from: usize, done: &AtomicUsize) {
    for i in from.. {
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(dir.join(format!("f{i}")))?;
            f.write_all(&data(i))?;
            if i % 2 == 0 {
                f.sync_all()
            } else {
                f.sync_data()
            }
        };
        if write().is_err() || !mark(log, pid, &format!("synced {i}")) {
            return;
        }
        done.fetch_add(1, Ordering::Relaxed);
    }
}

fn check_files(fs: &Filesystem, upto: usize, what: &str) {
    for i in 0..upto {
        let (f, _) = fs
            .lookup(InodeNo(2), format!("f{i}").as_bytes())
            .unwrap_or_else(|e| panic!("{what}: fsync'd f{i} missing: {e}"));
        assert_eq!(fs.read(f, 0, 1 << 20).unwrap(), data(i), "{what}: f{i}");
    }
}

/// Every flush prefix of the daemon's log, replayed and checked.
fn check_log_states(log: &Path, mode: &str) -> (usize, usize) {
    let rec = read_log(log).unwrap();
    let base = std::fs::read(base_image_path(log)).unwrap();
    let flushes: Vec<usize> = (0..rec.events.len())
        .filter(|&i| rec.events[i] == Event::Flush)
        .collect();
    let synced_before = |end: usize| {
        rec.events[..end]
            .iter()
            .filter(|e| matches!(e, Event::Mark(m) if m.starts_with("synced ")))
            .count()
    };
    let marked = synced_before(rec.events.len());
    assert!(marked >= SYNCED, "{mode}: {marked} marks in the log");
    let mut img = base.clone();
    let mut at = 0;
    for (n, &f) in flushes.iter().enumerate() {
        crash_common::apply_writes(&mut img, &rec.events[at..=f]);
        at = f + 1;
        let next = flushes.get(n + 1).copied().unwrap_or(rec.events.len());
        let mem = MemoryDevice::from_vec(img.clone());
        recover(&mem, RecoverOptions { write: true }).unwrap();
        let copy = TempImage::new("proc-state");
        std::fs::write(&copy.path, mem.snapshot()).unwrap();
        assert_e2fsck_clean(&copy.path, &format!("{mode}: log state at flush {f}"));
        let dev: Arc<dyn BlockDevice> = Arc::new(mem);
        let ro = MountConfig {
            read_only: true,
            ..Default::default()
        };
        let fs = Filesystem::mount(dev, &ro).unwrap();
        check_files(
            &fs,
            synced_before(next),
            &format!("{mode}: log state at flush {f}"),
        );
    }
    (flushes.len(), marked)
}

#[test]
fn kill_9_mid_workload_in_every_data_mode() {
    if !is_root() || !Path::new("/dev/fuse").exists() {
        eprintln!("skipping: needs root and /dev/fuse");
        return;
    }
    for mode in ["ordered", "writeback", "journal"] {
        let img = TempImage::new("proc-crash");
        let req = Request {
            options: MkfsOptions {
                block_size: Some(4096),
                ..Default::default()
            },
            size: Some(32 << 20),
            quiet: true,
            ..Default::default()
        };
        make_filesystem(&img.path, &req).unwrap();
        let dir = TempDir::new("proc-crash");
        let log = TempImage::new("proc-log");
        let _base = TempImage {
            path: base_image_path(&log.path),
        };
        let opts = format!("data={mode},record={}", log.path_str());
        let mut child = daemon(&img.path, &dir.path, &opts);
        for i in 0..SYNCED {
            let mut f = std::fs::File::create(dir.path.join(format!("f{i}"))).unwrap();
            f.write_all(&data(i)).unwrap();
            if i % 2 == 0 {
                f.sync_all().unwrap();
            } else {
                f.sync_data().unwrap();
            }
            assert!(mark(&log.path, child.id(), &format!("synced {i}")));
        }
        // Unsynced work, then more synced files, in flight when the daemon
        // dies (never touching the files already synced).
        for i in 0..SYNCED {
            let _ = std::fs::write(dir.path.join(format!("u{i}")), data(i));
            let _ = std::fs::rename(dir.path.join(format!("u{i}")), dir.path.join("x"));
        }
        let (d, l, pid) = (dir.path.clone(), log.path.clone(), child.id());
        let done = Arc::new(AtomicUsize::new(0));
        let counter = done.clone();
        let writer =
            std::thread::spawn(move || synced_files_until_killed(&d, &l, pid, SYNCED, &counter));
        // Kill while the writer is busy: after a few more fsyncs.
        let deadline = Instant::now() + Duration::from_secs(30);
        while done.load(Ordering::Relaxed) < 6 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        child.kill().unwrap();
        let _ = child.wait();
        writer.join().unwrap();
        run("umount", ["-l", dir.path.to_str().unwrap()]);
        assert!(dumpe2fs_header(&img.path)
            .features()
            .contains("needs_recovery"));

        let (states, marked) = check_log_states(&log.path, mode);
        assert!(states >= SYNCED, "{mode}: {states} flushes in the log");

        let mut child = daemon(&img.path, &dir.path, &format!("data={mode}"));
        for i in 0..marked {
            let got = std::fs::read(dir.path.join(format!("f{i}"))).unwrap();
            assert_eq!(
                got,
                data(i),
                "{mode}: fsync'd f{i} after kill -9 and remount"
            );
        }
        run("umount", [dir.path.to_str().unwrap()]);
        let _ = child.wait();
        assert_e2fsck_clean(
            &img.path,
            &format!("{mode}: the image after kill -9 and recovery"),
        );
        let dev = FileDevice::open(
            &img.path,
            OpenOptions {
                read_only: true,
                ..Default::default()
            },
        )
        .unwrap();
        let opts = jbdfs::fsck::FsckOptions {
            force: true,
            ..Default::default()
        };
        let report = jbdfs::fsck::check(&dev, &opts).unwrap();
        assert_eq!(
            report.exit_code(),
            0,
            "{mode}: fsck-jbdfs -fn: {:?}",
            report.problems
        );
        eprintln!("{mode}: kill -9 recovered {marked} fsync'd files; {states} log states checked");
    }
}
