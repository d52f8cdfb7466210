// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! Fault injection: EIO on read, write or flush at a chosen request, under
//! each errors= policy. Each test asserts the exact errno the caller sees,
//! what the superblock records (read back by dumpe2fs), that data committed
//! before the fault survives, and that e2fsck -fy repairs the image so that
//! e2fsck -fn is clean.

use jbdfs_testkit as common;
use jbdfs_testkit as robust_common;
use jbdfs_testkit::daemon as daemon_common;

use std::sync::Arc;
use std::time::Duration;

use jbdfs::device::{FaultOp, FaultPlan, MemoryDevice};
use jbdfs::fs::error::ErrorsPolicy;
use jbdfs::fs::error::PanicAction;
use jbdfs::fs::{DataMode, Filesystem, MountConfig};
use robust_common::*;

const SIZE: u64 = 8 << 20;

fn config(errors: ErrorsPolicy) -> MountConfig {
    MountConfig {
        errors,
        panic_action: PanicAction::StopWriting,
        ..Default::default()
    }
}

/// Mounts, writes a committed file "kept" (fsync'd), and returns it all.
fn with_committed_file(
    errors: ErrorsPolicy,
) -> (
    Arc<MemoryDevice>,
    Arc<jbdfs::device::FaultDevice>,
    Arc<Filesystem>,
) {
    let mem = small_image(SIZE);
    let (fault, fs) = mount_faulty(&mem, &config(errors));
    let f = make_file(&fs, ROOT, "kept", &pattern(50_000, 1));
    fs.fsync(f, false).unwrap();
    (mem, fault, fs)
}

/// After a fault: the error is in the superblock, e2fsck repairs the image
/// to clean, and the committed file reads back whole.
fn check_after_fault(mem: &MemoryDevice, tag: &str, func: &str) {
    let img = to_file(&mem.snapshot(), tag);
    let h = common::dumpe2fs_header(&img.path);
    assert!(
        h.field("Filesystem state").contains("with errors"),
        "{tag}: state {:?}",
        h.field("Filesystem state")
    );
    assert!(h.num("FS Error count") >= 1, "{tag}: error count");
    assert_eq!(h.field("First error function"), func, "{tag}");
    assert!(h.get("First error time").is_some(), "{tag}");
    assert!(h.get("Last error time").is_some(), "{tag}");
    replayed_by_jbdfs_keeps_the_record(mem, tag);
    let fixed = assert_repairs_to_clean(&img.path, tag);
    let fixed_bytes = std::fs::read(&img.path).unwrap();
    let again = Arc::new(MemoryDevice::from_vec(fixed_bytes));
    let fs = mount_mem(&again);
    let (f, _) = fs
        .lookup(ROOT, b"kept")
        .unwrap_or_else(|e| panic!("{tag}: committed file lost: {e}\n{}", fixed.describe()));
    assert_eq!(
        read_all(&fs, f),
        pattern(50_000, 1),
        "{tag}: committed data"
    );
    fs.unmount().unwrap();
    let h = common::dumpe2fs_header(&to_file(&again.snapshot(), tag).path);
    assert_eq!(h.field("Filesystem state"), "clean", "{tag}: after fsck");
}

/// jbdfs's own recovery of the faulted image (a copy): the committed file
/// is there, and the replay did not wipe the error record.
fn replayed_by_jbdfs_keeps_the_record(mem: &MemoryDevice, tag: &str) {
    let copy = Arc::new(MemoryDevice::from_vec(mem.snapshot()));
    let fs = mount_mem(&copy);
    let (f, _) = fs.lookup(ROOT, b"kept").unwrap();
    assert_eq!(read_all(&fs, f), pattern(50_000, 1), "{tag}: after replay");
    fs.unmount().unwrap();
    let h = common::dumpe2fs_header(&to_file(&copy.snapshot(), tag).path);
    assert_eq!(h.field("Filesystem state"), "clean with errors", "{tag}");
    assert!(h.num("FS Error count") >= 1, "{tag}: after replay");
}

#[test]
fn data_write_eio_remounts_read_only() {
    let (mem, fault, fs) = with_committed_file(ErrorsPolicy::RemountRo);
    let (f, _) = fs.mknod(ROOT, b"new", 0o100644, 0, ME).unwrap();
    fault.arm(FaultPlan::new(FaultOp::Write, 1));
    // File data goes home through the data queue, so the write returns and
    // the error comes back at fsync, as Linux reports writeback errors.
    fs.write(f, 0, &pattern(20_000, 2), true).unwrap();
    assert_eq!(errno_of(fs.fsync(f, false)), libc::EIO);
    assert!(fs.is_read_only());
    assert_eq!(
        errno_of(fs.mknod(ROOT, b"other", 0o100644, 0, ME)),
        libc::EROFS
    );
    assert_eq!(errno_of(fs.write(f, 0, b"x", true)), libc::EROFS);
    assert_eq!(errno_of(fs.mkdir(ROOT, b"d", 0o755, ME)), libc::EROFS);
    assert_eq!(errno_of(fs.unlink(ROOT, b"kept")), libc::EROFS);
    // Reads keep working.
    let (k, _) = fs.lookup(ROOT, b"kept").unwrap();
    assert_eq!(read_all(&fs, k), pattern(50_000, 1));
    fs.unmount().unwrap();
    drop(fs);
    check_after_fault(&mem, "data-write", "jbdfs_write_block");
}

#[test]
fn journal_write_eio_fails_the_fsync_and_keeps_what_committed() {
    let (mem, fault, fs) = with_committed_file(ErrorsPolicy::RemountRo);
    let sb = fs.superblock();
    // The journal's first blocks (its inode's first direct pointers).
    let bs = fs.block_size() as u64;
    let journal_start = sb.s_jnl_blocks[0] as u64 * bs;
    fault.arm(FaultPlan::new(FaultOp::Write, 1).in_range(journal_start..journal_start + (1 << 20)));
    let f = make_file(&fs, ROOT, "doomed", b"not committed");
    assert_eq!(errno_of(fs.fsync(f, false)), libc::EIO);
    assert_eq!(fault.injected(), 1);
    assert_eq!(errno_of(fs.mknod(ROOT, b"x", 0o100644, 0, ME)), libc::EROFS);
    let (k, _) = fs.lookup(ROOT, b"kept").unwrap();
    assert_eq!(read_all(&fs, k), pattern(50_000, 1));
    fs.unmount().unwrap();
    drop(fs);
    check_after_fault(&mem, "journal-write", "jbdfs_write_block");
}

#[test]
fn flush_eio_fails_the_fsync() {
    let (mem, fault, fs) = with_committed_file(ErrorsPolicy::RemountRo);
    let f = make_file(&fs, ROOT, "unflushed", &pattern(4096, 3));
    fault.arm(FaultPlan::new(FaultOp::Flush, 1));
    assert_eq!(errno_of(fs.fsync(f, false)), libc::EIO);
    assert_eq!(
        errno_of(fs.setattr(f, &Default::default(), ME)),
        libc::EROFS
    );
    fs.unmount().unwrap();
    drop(fs);
    check_after_fault(&mem, "flush", "jbdfs_flush");
}

/// A metadata read that fails: the lookup gets EIO; remount-ro follows,
/// and once the device reads again, reads work but writes stay refused.
#[test]
fn metadata_read_eio_remounts_read_only() {
    let (mem, _, fs) = with_committed_file(ErrorsPolicy::RemountRo);
    let (d, _) = fs.mkdir(ROOT, b"dir", 0o755, ME).unwrap();
    make_file(&fs, d, "inner", b"inner data");
    fs.unmount().unwrap();
    drop(fs);
    let (fault, fs) = mount_faulty(&mem, &config(ErrorsPolicy::RemountRo));
    let (d, _) = fs.lookup(ROOT, b"dir").unwrap();
    fault.arm(FaultPlan::new(FaultOp::Read, 1));
    assert_eq!(errno_of(fs.lookup(d, b"inner")), libc::EIO);
    let (i, _) = fs.lookup(d, b"inner").unwrap();
    assert_eq!(read_all(&fs, i), b"inner data");
    assert_eq!(errno_of(fs.mknod(d, b"more", 0o100644, 0, ME)), libc::EROFS);
    fs.unmount().unwrap();
    drop(fs);
    check_after_fault(&mem, "meta-read", "jbdfs_read_metadata");
}

/// A data read that fails is the reader's EIO only: no policy, no record.
#[test]
fn data_read_eio_is_only_the_readers_error() {
    let (mem, _, fs) = with_committed_file(ErrorsPolicy::RemountRo);
    fs.unmount().unwrap();
    drop(fs);
    let (fault, fs) = mount_faulty(&mem, &config(ErrorsPolicy::RemountRo));
    let (k, _) = fs.lookup(ROOT, b"kept").unwrap();
    fs.getattr(k).unwrap();
    fault.arm(FaultPlan::new(FaultOp::Read, 1));
    assert_eq!(errno_of(fs.read(k, 0, 4096)), libc::EIO);
    assert!(!fs.is_read_only());
    make_file(&fs, ROOT, "after", b"still writable");
    fs.unmount().unwrap();
    drop(fs);
    let img = to_file(&mem.snapshot(), "data-read");
    assert_eq!(
        common::dumpe2fs_header(&img.path).field("Filesystem state"),
        "clean"
    );
    common::assert_e2fsck_clean(&img.path, "after a data read error");
}

/// errors=continue: the failed request gets EIO, the record is written,
/// and the filesystem goes on writing.
#[test]
fn continue_policy_keeps_writing() {
    let (mem, _, fs) = with_committed_file(ErrorsPolicy::Continue);
    fs.unmount().unwrap();
    drop(fs);
    let (fault, fs) = mount_faulty(&mem, &config(ErrorsPolicy::Continue));
    fault.arm(FaultPlan::new(FaultOp::Read, 1));
    assert_eq!(errno_of(fs.lookup(ROOT, b"kept")), libc::EIO);
    assert!(!fs.is_read_only());
    let f = make_file(&fs, ROOT, "later", b"written after the error");
    fs.fsync(f, false).unwrap();
    assert_eq!(fs.error_state().error_count(), 1);
    fs.unmount().unwrap();
    drop(fs);
    let img = to_file(&mem.snapshot(), "continue");
    let h = common::dumpe2fs_header(&img.path);
    assert_eq!(h.field("Filesystem state"), "clean with errors");
    assert_eq!(h.num("FS Error count"), 1);
    check_after_fault(&mem, "continue", "jbdfs_read_metadata");
}

/// errors=panic: after the error record nothing more reaches the device,
/// whatever the caller does; the image is a crash image that fsck repairs.
#[test]
fn panic_policy_writes_nothing_more() {
    let (mem, fault, fs) = with_committed_file(ErrorsPolicy::Panic);
    let (f, _) = fs.mknod(ROOT, b"new", 0o100644, 0, ME).unwrap();
    fault.arm(FaultPlan::new(FaultOp::Write, 1));
    fs.write(f, 0, &pattern(9000, 4), true).unwrap();
    assert_eq!(errno_of(fs.fsync(f, false)), libc::EIO);
    assert!(fs.error_state().is_halted());
    let frozen = mem.snapshot();
    fault.disarm();
    let _ = fs.mknod(ROOT, b"x", 0o100644, 0, ME);
    let _ = fs.fsync(f, false);
    let _ = fs.sync();
    let _ = fs.unmount();
    drop(fs);
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        mem.snapshot() == frozen,
        "the device changed after the panic"
    );
    check_after_fault(&mem, "panic", "jbdfs_write_block");
}

/// A workload of creates, writes, reads, renames, unlinks and fsyncs;
/// returns the errno of every request that failed.
fn workload(fs: &Filesystem) -> Vec<i32> {
    let mut errors = Vec::new();
    let mut note = |r: Result<(), jbdfs::fs::FsError>| {
        if let Err(e) = r {
            errors.push(e.errno());
        }
    };
    note(
        fs.lookup(ROOT, b"kept")
            .and_then(|(k, _)| fs.read(k, 0, 65536))
            .map(drop),
    );
    for i in 0..12u32 {
        let name = format!("w{i}");
        note(
            fs.mknod(ROOT, name.as_bytes(), 0o100644, 0, ME)
                .and_then(|(f, _)| {
                    fs.write(f, 0, &pattern(3000 + i as usize * 700, i), true)
                        .map(|_| f)
                })
                .and_then(|f| fs.read(f, 0, 4096).map(|_| f))
                .and_then(|f| {
                    if i % 3 == 0 {
                        fs.fsync(f, false)
                    } else {
                        Ok(())
                    }
                }),
        );
        if i % 4 == 1 {
            note(fs.rename(ROOT, name.as_bytes(), ROOT, b"renamed", Default::default()));
        }
        if i % 4 == 2 {
            note(fs.unlink(ROOT, name.as_bytes()));
        }
    }
    note(fs.mkdir(ROOT, b"dir", 0o755, ME).map(drop));
    note(fs.sync());
    errors
}

/// Which requests the sweep fails: a few by default, every one of the
/// first N with `JBDFS_FAULT_SWEEP=N` (a longer campaign).
fn sweep_points() -> Vec<u64> {
    match std::env::var("JBDFS_FAULT_SWEEP")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(n) => (1..=n).collect(),
        None => vec![1, 2, 3, 5, 8, 13, 21, 34],
    }
}

/// Every kind of fault, at each of the first requests of its kind, in both
/// data modes, on a cold cache: each failed request is EIO or EROFS, the
/// first one EIO; nothing panics or hangs; fsck repairs the image to clean
/// and the file committed before the fault is intact.
#[test]
fn every_fault_kind_at_each_of_the_first_requests() {
    for op in [FaultOp::Read, FaultOp::Write, FaultOp::Flush] {
        for data in [DataMode::Ordered, DataMode::Journal] {
            for nth in sweep_points() {
                let tag = format!("{op:?} #{nth}, data={data}");
                let (mem, _, fs) = with_committed_file(ErrorsPolicy::RemountRo);
                fs.unmount().unwrap();
                drop(fs);
                let cfg = MountConfig {
                    data,
                    ..config(ErrorsPolicy::RemountRo)
                };
                let (fault, fs) = mount_faulty(&mem, &cfg);
                fault.arm(FaultPlan::new(op, nth).sticky());
                let (tx, rx) = std::sync::mpsc::channel();
                let worker = std::thread::spawn(move || {
                    let mut errors = workload(&fs);
                    if let Err(e) = fs.unmount() {
                        errors.push(e.errno());
                    }
                    let _ = tx.send(errors);
                });
                let errors = rx
                    .recv_timeout(Duration::from_secs(60))
                    .unwrap_or_else(|_| panic!("{tag}: hung or panicked"));
                worker.join().unwrap();
                assert!(
                    errors.iter().all(|&e| e == libc::EIO || e == libc::EROFS),
                    "{tag}: {errors:?}"
                );
                // A failed data write is reported at the next fsync or
                // sync (the data goes home through the data queue), so
                // calls in between may already see EROFS; the EIO comes.
                if fault.injected() > 0 {
                    assert!(errors.contains(&libc::EIO), "{tag}: {errors:?}");
                }
                fault.disarm();
                let img = to_file(&mem.snapshot(), "sweep");
                assert_repairs_to_clean(&img.path, &tag);
                let again = Arc::new(MemoryDevice::from_vec(std::fs::read(&img.path).unwrap()));
                let fs = mount_mem(&again);
                let (k, _) = fs.lookup(ROOT, b"kept").unwrap();
                assert_eq!(read_all(&fs, k), pattern(50_000, 1), "{tag}");
                fs.unmount().unwrap();
            }
        }
    }
}

/// Faults at every one of the first writes of a workload: whatever
/// request fails, the caller sees EIO or EROFS, never a panic, and fsck
/// repairs the image to clean with the committed file intact.
#[test]
fn a_write_fault_at_each_of_the_first_requests() {
    for nth in [1, 2, 3, 5, 8, 13, 21] {
        let (mem, fault, fs) = with_committed_file(ErrorsPolicy::RemountRo);
        fault.arm(FaultPlan::new(FaultOp::Write, nth).sticky());
        let mut errors = Vec::new();
        for i in 0..20 {
            let name = format!("f{i}");
            let r = fs
                .mknod(ROOT, name.as_bytes(), 0o100644, 0, ME)
                .and_then(|(f, _)| fs.write(f, 0, &pattern(3000, i), true).map(|_| f))
                .and_then(|f| fs.fsync(f, false));
            if let Err(e) = r {
                errors.push(e.errno());
            }
        }
        assert!(
            errors.iter().all(|&e| e == libc::EIO || e == libc::EROFS),
            "nth={nth}: {errors:?}"
        );
        assert_eq!(errors.first(), Some(&libc::EIO), "nth={nth}");
        let _ = fs.unmount();
        drop(fs);
        fault.disarm();
        let img = to_file(&mem.snapshot(), "nth");
        assert_repairs_to_clean(&img.path, &format!("write fault at {nth}"));
        let again = Arc::new(MemoryDevice::from_vec(std::fs::read(&img.path).unwrap()));
        let fs = mount_mem(&again);
        let (k, _) = fs.lookup(ROOT, b"kept").unwrap();
        assert_eq!(read_all(&fs, k), pattern(50_000, 1), "nth={nth}");
        fs.unmount().unwrap();
    }
}

/// An image with a committed file "good" and a file "bad" whose first
/// block pointer lies outside the filesystem; returns it and bad's inode.
fn image_with_corrupt_file() -> (Vec<u8>, u32) {
    let mem = small_image(SIZE);
    let fs = mount_mem(&mem);
    make_file(&fs, ROOT, "good", &pattern(50_000, 1));
    let bad = make_file(&fs, ROOT, "bad", &pattern(5000, 2));
    let sb = fs.superblock();
    fs.unmount().unwrap();
    drop(fs);
    let mut img = mem.snapshot();
    let dev = MemoryDevice::from_vec(img.clone());
    let gd = jbdfs::fs::mount::read_group_descs(&dev, &sb).unwrap();
    let index = (bad.0 - 1) % sb.s_inodes_per_group;
    let group = ((bad.0 - 1) / sb.s_inodes_per_group) as usize;
    let at = gd[group].bg_inode_table as usize * sb.block_size() as usize
        + index as usize * sb.inode_size() as usize;
    img[at + 40..at + 44].copy_from_slice(&0xFFFF_FF00u32.to_le_bytes());
    (img, bad.0)
}

fn os_errno<T: std::fmt::Debug>(r: std::io::Result<T>) -> i32 {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.raw_os_error().unwrap_or(0),
    }
}

/// `-o errors=` in the daemon: corruption met while serving a read is
/// EIO to the reader, then continue goes on writing, remount-ro refuses
/// writes with EROFS and keeps reading, and panic makes the daemon exit
/// (status 70) at once. The superblock records the error, naming the
/// inode, and e2fsck -fy repairs the image to clean with "good" intact.
#[test]
fn errors_option_takes_effect_in_the_daemon() {
    use daemon_common::Daemon;
    jbdfs_testkit::require!(fuse);
    for policy in ["continue", "remount-ro", "panic"] {
        let (img, bad) = image_with_corrupt_file();
        let file = to_file(&img, "errors-daemon");
        let dir = common::TempDir::new("errors-mnt");
        let opts = format!("errors={policy}");
        let mut d = Daemon::start(&file.path, &dir.path, &opts, Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("{policy}: {e:?}"));
        let m = dir.path.clone();
        let read = os_errno(std::fs::read(m.join("bad")));
        if policy == "panic" {
            // The daemon is gone before it answers: the request aborts
            // (ECONNABORTED), or, when the kernel's readahead met the
            // error first, the connection is already gone (ENOTCONN).
            assert!(
                read == libc::ECONNABORTED || read == libc::ENOTCONN,
                "errors=panic: errno {read}"
            );
        } else {
            assert_eq!(read, libc::EIO, "{policy}");
        }
        match policy {
            "continue" => {
                std::fs::write(m.join("after"), b"still writable").unwrap();
                let e = d.stop();
                assert!(e.status.success(), "{}", e.stderr);
            }
            "remount-ro" => {
                assert_eq!(os_errno(std::fs::write(m.join("after"), b"x")), libc::EROFS);
                assert_eq!(os_errno(std::fs::create_dir(m.join("d"))), libc::EROFS);
                assert_eq!(std::fs::read(m.join("good")).unwrap(), pattern(50_000, 1));
                let e = d.stop();
                assert!(e.status.success(), "{}", e.stderr);
            }
            _ => {
                let e = d
                    .wait_exit(Duration::from_secs(10))
                    .expect("errors=panic: the daemon did not exit");
                assert_eq!(e.status.code(), Some(70), "{}", e.stderr);
            }
        }
        let h = common::dumpe2fs_header(&file.path);
        assert!(
            h.field("Filesystem state").contains("with errors"),
            "{policy}"
        );
        // The kernel may retry a failed read: one error or more.
        assert!(h.num("FS Error count") >= 1, "{policy}");
        assert_eq!(h.num("First error inode #"), bad as u64, "{policy}");
        assert_eq!(h.field("First error function"), "jbdfs_fuse_request");
        assert_repairs_to_clean(&file.path, &format!("errors={policy}"));
        let fixed = Arc::new(MemoryDevice::from_vec(std::fs::read(&file.path).unwrap()));
        let fs = mount_mem(&fixed);
        let (g, _) = fs.lookup(ROOT, b"good").unwrap();
        assert_eq!(read_all(&fs, g), pattern(50_000, 1), "{policy}");
        fs.unmount().unwrap();
    }
}

/// Corruption met on a read-only mount is counted, but nothing is
/// written: the image stays byte for byte as it was.
#[test]
fn a_read_only_mount_records_errors_in_memory_only() {
    let (img, _) = image_with_corrupt_file();
    let mem = Arc::new(MemoryDevice::from_vec(img.clone()));
    let dev: Arc<dyn jbdfs::device::BlockDevice> = mem.clone();
    let cfg = MountConfig {
        read_only: true,
        ..Default::default()
    };
    let fs = Filesystem::mount(dev, &cfg).unwrap();
    let (bad, _) = fs.lookup(ROOT, b"bad").unwrap();
    let err = fs.read(bad, 0, 4096).unwrap_err();
    assert_eq!(err.errno(), libc::EIO);
    fs.report_error(&err, "test_read");
    assert_eq!(fs.error_state().error_count(), 1);
    assert!(fs.is_read_only());
    fs.unmount().unwrap();
    drop(fs);
    assert!(
        mem.snapshot() == img,
        "a read-only mount wrote to the image"
    );
}
