// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! EXT4_IOC_SHUTDOWN through the kernel (issue 21), as fstests' godown and
//! `xfs_io -x -c shutdown` send it: with each of its three flags, every
//! later request fails with EIO, unmount works, and the next mount keeps
//! exactly what the flag promises — everything (the default: a freeze
//! first), everything committed including the running transaction
//! (LOGFLUSH), or only what had committed before (NOLOGFLUSH). A caller
//! without CAP_SYS_ADMIN is refused. e2fsck -fn is clean after each.
//!
//! Needs root and /dev/fuse; the unprivileged case also needs setpriv
//! (skipped with a message without it, except under CI).

use jbdfs_testkit as common;
use jbdfs_testkit::daemon as daemon_common;

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

use common::image_4k;
use common::{assert_e2fsck_clean, dumpe2fs_header, run, TempDir, TempImage};
use daemon_common::Daemon;

/// `_IOR('X', 125, __u32)` and its flags (fs/ext4/ext4.h).
const EXT4_IOC_SHUTDOWN: u32 = 0x8004_587d;
const GOING_DEFAULT: u32 = 0;
const GOING_LOGFLUSH: u32 = 1;
const GOING_NOLOGFLUSH: u32 = 2;

/// A fresh 64 MiB image with 4 KiB blocks.
fn fresh_image(tag: &str) -> TempImage {
    image_4k(tag, 64 << 20)
}

/// A mount whose periodic commit cannot come between the test's steps.
fn mount(img: &TempImage, dir: &TempDir) -> Daemon {
    Daemon::start(&img.path, &dir.path, "commit=300", Duration::from_secs(20)).expect("mount")
}

fn unmount(d: Daemon) {
    d.stop_ok();
}

/// ioctl(EXT4_IOC_SHUTDOWN, &flags) on an open file of the mount.
fn shutdown(file: &File, flags: u32) -> std::io::Result<()> {
    // SAFETY: the kernel reads a u32 through the pointer, which points at
    // a live local for the duration of the call.
    let r = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            EXT4_IOC_SHUTDOWN as libc::c_ulong,
            &flags as *const u32,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn assert_eio<T: std::fmt::Debug>(what: &str, res: std::io::Result<T>) {
    match res {
        Err(e) if e.raw_os_error() == Some(libc::EIO) => {}
        other => panic!("{what} after shutdown: {other:?}, expected EIO"),
    }
}

/// Writes and fsyncs `synced`, then makes a directory after that commit
/// (`late`), shuts down with `flags`, checks that the mount now fails
/// with EIO, unmounts and remounts; returns whether `late` survived.
fn shutdown_with(flags: u32, tag: &str) -> bool {
    let img = fresh_image(tag);
    let dir = TempDir::new(tag);
    let d = mount(&img, &dir);
    let m = &dir.path;
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut f = File::create(m.join("synced")).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    std::fs::create_dir(m.join("late")).unwrap();
    let mut open = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.join("open"))
        .unwrap();

    let root = File::open(m).unwrap();
    shutdown(&root, flags).expect("shutdown ioctl");

    // Requests that must reach the daemon: names never looked up, a
    // create, an fsync, a directory listing.
    assert_eio("stat of a new name", std::fs::metadata(m.join("never")));
    assert_eio("create", File::create(m.join("after")));
    assert_eio("mkdir", std::fs::create_dir(m.join("after-dir")));
    let _ = open.write_all(b"lost");
    assert_eio("fsync", open.sync_all());
    assert_eio("readdir", std::fs::read_dir(m.join("late")).map(|_| ()));
    assert_eio("statfs-backed df", nix_statfs(m));
    drop((open, root, f));
    unmount(d);
    // NOLOGFLUSH and LOGFLUSH leave the log to replay; the default left
    // it checkpointed and clean.
    let needs = dumpe2fs_header(&img.path)
        .features()
        .contains("needs_recovery");
    assert_eq!(needs, flags != GOING_DEFAULT, "needs_recovery after {tag}");

    let d = mount(&img, &dir);
    assert_eq!(
        std::fs::read(m.join("synced")).unwrap(),
        data,
        "an fsync'd file must survive any shutdown"
    );
    let late = m.join("late").is_dir();
    for gone in ["after", "after-dir"] {
        assert!(!m.join(gone).exists(), "{gone} was made after the shutdown");
    }
    unmount(d);
    assert_e2fsck_clean(&img.path, tag);
    late
}

/// statfs(2) on the mount, which asks the daemon.
fn nix_statfs(p: &Path) -> std::io::Result<()> {
    let out = run("stat", ["-f", p.to_str().unwrap()]);
    if out.success() {
        Ok(())
    } else if out.stderr.contains("Input/output error") {
        Err(std::io::Error::from_raw_os_error(libc::EIO))
    } else {
        Err(std::io::Error::other(out.describe()))
    }
}

#[test]
fn shutdown_default_keeps_everything() {
    jbdfs_testkit::require!(fuse);
    assert!(shutdown_with(GOING_DEFAULT, "shutdown-default"));
}

#[test]
fn shutdown_logflush_keeps_the_running_transaction() {
    jbdfs_testkit::require!(fuse);
    assert!(shutdown_with(GOING_LOGFLUSH, "shutdown-logflush"));
}

#[test]
fn shutdown_nologflush_keeps_only_what_committed() {
    jbdfs_testkit::require!(fuse);
    assert!(!shutdown_with(GOING_NOLOGFLUSH, "shutdown-nologflush"));
}

/// Set for a child run of this binary: the mount to try a shutdown on.
const CHILD_ENV: &str = "JBDFS_SHUTDOWN_CHILD";

/// Does nothing unless run as [`shutdown_refusals`]'s child: then tries
/// a shutdown of the mount `CHILD_ENV` names and prints the outcome.
#[test]
fn shutdown_child() {
    let Some(mount) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let root = File::open(mount).unwrap();
    match shutdown(&root, GOING_DEFAULT) {
        Ok(()) => println!("shutdown_child: done"),
        Err(e) => println!("shutdown_child: errno {}", e.raw_os_error().unwrap_or(0)),
    }
}

/// Bad flags are EINVAL and change nothing; a caller without
/// CAP_SYS_ADMIN is refused with EPERM and changes nothing.
#[test]
fn shutdown_refusals() {
    jbdfs_testkit::require!(fuse);
    let img = fresh_image("shutdown-refused");
    let dir = TempDir::new("shutdown-refused");
    let d = mount(&img, &dir);
    let m = &dir.path;
    let root = File::open(m).unwrap();
    let e = shutdown(&root, 3).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "flags 3: {e}");
    // A caller without CAP_SYS_ADMIN: this test binary again, under
    // setpriv, running only `shutdown_child` (xfs_io would do, but it
    // stats every mount point first and hangs on any stuck FUSE mount).
    if jbdfs_testkit::available!("a caller without CAP_SYS_ADMIN"; "setpriv") {
        let out = std::process::Command::new("setpriv")
            .args(["--inh-caps=-sys_admin", "--bounding-set=-sys_admin"])
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "shutdown_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, m)
            .output()
            .expect("run setpriv");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains(&format!("shutdown_child: errno {}", libc::EPERM)),
            "shutdown without CAP_SYS_ADMIN: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    } else if std::env::var_os("CI").is_some() {
        panic!("setpriv is missing; CI is set, so this is a failure");
    } else {
        eprintln!("!!!!!!!! setpriv missing: the EPERM case is not run");
    }
    // Still alive.
    File::create(m.join("alive")).unwrap();
    assert!(m.join("alive").exists());
    match std::fs::metadata(m.join("nothing")) {
        Err(e) => assert_eq!(e.kind(), ErrorKind::NotFound),
        Ok(_) => panic!("nothing exists"),
    }
    drop(root);
    unmount(d);
    assert_e2fsck_clean(&img.path, "after refused shutdowns");
}
