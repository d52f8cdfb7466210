// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! The volume label through the kernel (issue 21): FS_IOC_GETFSLABEL reads
//! what e2label wrote, FS_IOC_SETFSLABEL changes it for e2label and
//! dumpe2fs after unmount, refuses more than ext3's 16 bytes, and is a
//! committed journal transaction when it returns: a NOLOGFLUSH shutdown
//! right after it still finds the new label after the replay. e2fsck -fn
//! is clean afterwards.
//!
//! Needs root, /dev/fuse and e2fsprogs.

use jbdfs_testkit as common;
use jbdfs_testkit::daemon as daemon_common;

use std::fs::File;
use std::os::fd::AsRawFd;
use std::time::Duration;

use common::image_4k;
use common::{assert_e2fsck_clean, dumpe2fs_header, run, TempDir};
use daemon_common::Daemon;

const FS_IOC_GETFSLABEL: u32 = 0x8100_9431;
const FS_IOC_SETFSLABEL: u32 = 0x4100_9432;
const EXT4_IOC_SHUTDOWN: u32 = 0x8004_587d;
const GOING_NOLOGFLUSH: u32 = 2;

/// ioctl(fd, cmd, ptr), as an io::Result.
fn ioctl<T>(f: &File, cmd: u32, arg: *mut T) -> std::io::Result<()> {
    // SAFETY: each caller passes a pointer to a live buffer at least as
    // large as `cmd`'s size says, valid for the duration of the call.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), cmd as libc::c_ulong, arg) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn get_label(f: &File) -> String {
    let mut buf = [0u8; 256];
    ioctl(f, FS_IOC_GETFSLABEL, buf.as_mut_ptr()).expect("FS_IOC_GETFSLABEL");
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8(buf[..n].to_vec()).unwrap()
}

fn set_label(f: &File, label: &str) -> std::io::Result<()> {
    let mut buf = [0u8; 256];
    buf[..label.len()].copy_from_slice(label.as_bytes());
    ioctl(f, FS_IOC_SETFSLABEL, buf.as_mut_ptr())
}

fn e2label(img: &std::path::Path) -> String {
    run("e2label", [img.to_str().unwrap()])
        .expect_ok()
        .stdout
        .trim()
        .to_string()
}

#[test]
fn label_ioctls_agree_with_e2label_and_are_journaled() {
    jbdfs_testkit::require!(fuse);
    let img = image_4k("label", 64 << 20);
    let dir = TempDir::new("label");
    run("e2label", [img.path_str(), "from-e2label"]).expect_ok();

    let d = Daemon::start(&img.path, &dir.path, "", Duration::from_secs(20)).expect("mount");
    let root = File::open(&dir.path).unwrap();
    assert_eq!(get_label(&root), "from-e2label");
    set_label(&root, "sixteen-bytes-ok").expect("set a 16-byte label");
    assert_eq!(get_label(&root), "sixteen-bytes-ok");
    let e = set_label(&root, "seventeen-bytes!!").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "17 bytes: {e}");
    set_label(&root, "jbdfs").expect("set label");
    assert_eq!(get_label(&root), "jbdfs", "a shorter label leaves no tail");
    drop(root);
    d.stop_ok();
    assert_eq!(e2label(&img.path), "jbdfs");
    assert_eq!(
        dumpe2fs_header(&img.path).field("Filesystem volume name"),
        "jbdfs"
    );
    assert_e2fsck_clean(&img.path, "after label changes");

    // Committed by the time the ioctl returns: a shutdown that keeps only
    // committed transactions keeps it, and the replay brings it home.
    let d =
        Daemon::start(&img.path, &dir.path, "commit=300", Duration::from_secs(20)).expect("mount");
    let root = File::open(&dir.path).unwrap();
    set_label(&root, "journaled").expect("set label");
    let mut flags = GOING_NOLOGFLUSH;
    ioctl(&root, EXT4_IOC_SHUTDOWN, &mut flags as *mut u32).expect("shutdown");
    drop(root);
    d.stop_ok();
    let d = Daemon::start(&img.path, &dir.path, "", Duration::from_secs(20)).expect("mount");
    let root = File::open(&dir.path).unwrap();
    assert_eq!(get_label(&root), "journaled");
    drop(root);
    d.stop_ok();
    assert_eq!(e2label(&img.path), "journaled");
    assert_e2fsck_clean(&img.path, "after a label change and a shutdown");
}
