// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! open(O_TMPFILE) through the kernel (issue 21). fuser 0.18 does not know
//! FUSE_TMPFILE, so over /dev/fuse the kernel is told ENOSYS and the call
//! fails with EOPNOTSUPP; over io_uring the daemon decodes the request
//! itself and serves it: a nameless file that linkat(AT_EMPTY_PATH) names,
//! and that is freed when closed unnamed. e2fsck -fn is clean afterwards,
//! and the named file holds its data after a remount.
//!
//! Needs root and /dev/fuse; the io_uring half runs in test.sh's second
//! pass (`JBDFS_TEST_TRANSPORT=io_uring`).

use jbdfs_testkit as common;
use jbdfs_testkit::daemon as daemon_common;

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::Duration;

use common::image_4k;
use common::{assert_e2fsck_clean, TempDir};
use daemon_common::{transport, Daemon, TestTransport};

fn open_tmpfile(dir: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o640)
        .custom_flags(libc::O_TMPFILE)
        .open(dir)
}

/// linkat(fd, "", AT_FDCWD, to, AT_EMPTY_PATH): names an open file.
fn link_open_file(f: &File, to: &Path) -> std::io::Result<()> {
    let to = CString::new(to.as_os_str().as_bytes()).expect("a path without NUL");
    // SAFETY: both strings are NUL-terminated and live across the call;
    // the descriptor is owned by `f`, which outlives it.
    let r = unsafe {
        libc::linkat(
            f.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn free_inodes(m: &Path) -> u64 {
    let out = common::run("stat", ["-f", "-c", "%d", m.to_str().unwrap()]).expect_ok();
    out.stdout.trim().parse().unwrap()
}

#[test]
fn o_tmpfile_is_served_over_io_uring_and_refused_over_dev_fuse() {
    jbdfs_testkit::require!(fuse);
    let img = image_4k("tmpfile", 64 << 20);
    let dir = TempDir::new("tmpfile");
    let m = &dir.path;
    let d = Daemon::start(&img.path, m, "", Duration::from_secs(20)).expect("mount");
    if transport() == TestTransport::DevFuse {
        let e = open_tmpfile(m).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}");
        d.stop_ok();
        assert_e2fsck_clean(&img.path, "after a refused O_TMPFILE");
        return;
    }
    let inodes = free_inodes(m);
    let mut gone = open_tmpfile(m).expect("O_TMPFILE");
    gone.write_all(&[9u8; 300_000]).unwrap();
    gone.sync_all().unwrap();
    assert_eq!(gone.metadata().unwrap().nlink(), 0);
    drop(gone);

    let mut kept = open_tmpfile(m).expect("O_TMPFILE");
    kept.write_all(b"written before it had a name\n").unwrap();
    link_open_file(&kept, &m.join("named")).expect("linkat AT_EMPTY_PATH");
    assert_eq!(kept.metadata().unwrap().nlink(), 1);
    drop(kept);
    // The unnamed one is freed once the kernel forgets it (FORGET comes
    // asynchronously).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while free_inodes(m) != inodes - 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the closed tmpfile's inode was not freed: {} free, {inodes} before",
            free_inodes(m)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    d.stop_ok();
    assert_e2fsck_clean(&img.path, "after O_TMPFILE files");

    let d = Daemon::start(&img.path, m, "", Duration::from_secs(20)).expect("remount");
    let mut s = String::new();
    File::open(m.join("named"))
        .unwrap()
        .read_to_string(&mut s)
        .unwrap();
    assert_eq!(s, "written before it had a name\n");
    d.stop_ok();
}
