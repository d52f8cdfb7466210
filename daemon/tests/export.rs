// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! File handles through the kernel (issue 21, FUSE_EXPORT_SUPPORT): what
//! fstests generic/426, 467 and 477 do. name_to_handle_at gives a handle
//! (FUSE's: node id and generation); once the kernel's caches are dropped,
//! open_by_handle_at must find the file again, which it does with a
//! LOOKUP of "." on the node id (and, for a directory, of ".." to connect
//! it to the tree). A handle of a file since deleted gives ESTALE, and so
//! does one whose inode number has been reused: the generation differs.
//! e2fsck -fn is clean afterwards.
//!
//! Needs root (drop_caches, open_by_handle_at's CAP_DAC_READ_SEARCH) and
//! /dev/fuse.

use jbdfs_testkit as common;
use jbdfs_testkit::daemon as daemon_common;

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use common::image_4k;
use common::{assert_e2fsck_clean, TempDir};
use daemon_common::Daemon;

/// `struct file_handle` with room for any handle (MAX_HANDLE_SZ).
#[repr(C)]
struct FileHandle {
    handle_bytes: u32,
    handle_type: i32,
    f_handle: [u8; 128],
}

fn handle_of(path: &Path) -> FileHandle {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut h = FileHandle {
        handle_bytes: 128,
        handle_type: 0,
        f_handle: [0; 128],
    };
    let mut mount_id: libc::c_int = 0;
    // SAFETY: name_to_handle_at(2) with a NUL-terminated path, a handle
    // buffer whose handle_bytes says how much room follows it, and an int
    // for the mount id, all live across the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            libc::AT_FDCWD,
            c.as_ptr(),
            &mut h as *mut FileHandle,
            &mut mount_id as *mut libc::c_int,
            0,
        )
    };
    assert_eq!(
        r,
        0,
        "name_to_handle_at {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    h
}

fn open_by_handle(mount: &File, h: &FileHandle, flags: i32) -> std::io::Result<File> {
    // SAFETY: open_by_handle_at(2) reads the handle, which lives across the
    // call; a descriptor it returns is ours alone.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            mount.as_raw_fd(),
            h as *const FileHandle,
            flags,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd was just returned to us by the kernel and is owned by no one else.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
}

fn drop_caches() {
    std::fs::write("/proc/sys/vm/drop_caches", "3").expect("drop caches");
}

fn assert_estale(what: &str, res: std::io::Result<File>) {
    match res {
        Err(e) if e.raw_os_error() == Some(libc::ESTALE) => {}
        Err(e) => panic!("{what}: {e}, expected ESTALE"),
        Ok(_) => panic!("{what}: opened, expected ESTALE"),
    }
}

#[test]
fn handles_survive_dropped_caches_and_go_stale_when_deleted() {
    jbdfs_testkit::require!(fuse);
    let img = image_4k("export", 64 << 20);
    let dir = TempDir::new("export");
    let d = Daemon::start(&img.path, &dir.path, "", Duration::from_secs(20)).expect("mount");
    let m = &dir.path;
    std::fs::create_dir_all(m.join("a/b/c")).unwrap();
    std::fs::write(m.join("a/b/c/file"), b"by handle").unwrap();
    std::fs::write(m.join("doomed"), b"gone soon").unwrap();
    let file_h = handle_of(&m.join("a/b/c/file"));
    let dir_h = handle_of(&m.join("a/b/c"));
    let doomed_h = handle_of(&m.join("doomed"));
    let doomed_ino = std::fs::metadata(m.join("doomed")).unwrap().ino();
    let mount = File::open(m).unwrap();

    // The kernel forgets everything but the mount's root; the handles
    // must lead back through LOOKUP(node, ".") and, for the directory,
    // LOOKUP(node, "..") up to the root.
    drop_caches();
    let mut s = String::new();
    open_by_handle(&mount, &file_h, libc::O_RDONLY)
        .expect("open file by handle")
        .read_to_string(&mut s)
        .unwrap();
    assert_eq!(s, "by handle");
    drop_caches();
    let dir_f = open_by_handle(&mount, &dir_h, libc::O_RDONLY | libc::O_DIRECTORY)
        .expect("open directory by handle");
    let path = std::fs::read_link(format!("/proc/self/fd/{}", dir_f.as_raw_fd())).unwrap();
    assert_eq!(
        path,
        m.join("a/b/c"),
        "the directory is connected to its path"
    );
    drop(dir_f);

    // Deleted: ESTALE, with the caches dropped and without.
    std::fs::remove_file(m.join("doomed")).unwrap();
    assert_estale("deleted", open_by_handle(&mount, &doomed_h, libc::O_RDONLY));
    drop_caches();
    assert_estale(
        "deleted, caches dropped",
        open_by_handle(&mount, &doomed_h, libc::O_RDONLY),
    );
    // Reused: a new file takes the inode number (the lowest free one in
    // the group), with a new generation.
    let mut reused = false;
    for i in 0..8 {
        let p = m.join(format!("new{i}"));
        std::fs::write(&p, b"new").unwrap();
        if std::fs::metadata(&p).unwrap().ino() == doomed_ino {
            reused = true;
            break;
        }
    }
    assert!(reused, "inode {doomed_ino} was not reused");
    drop_caches();
    assert_estale(
        "inode reused",
        open_by_handle(&mount, &doomed_h, libc::O_RDONLY),
    );
    // The live file's handle still works.
    assert!(open_by_handle(&mount, &file_h, libc::O_RDONLY).is_ok());
    drop(mount);
    d.stop_ok();
    assert_e2fsck_clean(&img.path, "after file handles");
}
