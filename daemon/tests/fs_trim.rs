// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! FITRIM through the kernel (issue 21): after files are written and
//! deleted (and the deletion committed), `fstrim` on the mount, and the
//! ioctl itself, discard the free blocks: the image file's allocated size
//! shrinks by about what was deleted, the bytes trimmed are reported back
//! in the range's `len`, the files left are intact after a remount, and
//! e2fsck -fn is clean. A caller without CAP_SYS_ADMIN is refused.
//!
//! Needs root and /dev/fuse; the fstrim cases need util-linux's fstrim and
//! setpriv (skipped with a message without them, except under CI).

use jbdfs_testkit as common;
use jbdfs_testkit::daemon as daemon_common;

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use common::image_4k;
use common::{assert_e2fsck_clean, run, TempDir};
use daemon_common::Daemon;

/// `_IOWR('X', 121, struct fstrim_range)`.
const FITRIM: u32 = 0xc018_5879;

/// `struct fstrim_range`.
#[repr(C)]
struct FstrimRange {
    start: u64,
    len: u64,
    minlen: u64,
}

fn fitrim(f: &File, range: &mut FstrimRange) -> std::io::Result<()> {
    // SAFETY: FITRIM reads and writes a struct fstrim_range through the
    // pointer, which points at a live, exclusively borrowed one.
    let r = unsafe {
        libc::ioctl(
            f.as_raw_fd(),
            FITRIM as libc::c_ulong,
            range as *mut FstrimRange,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Bytes the image file occupies on its host filesystem.
fn allocated(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().blocks() * 512
}

fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) ^ seed) as u8 | 1)
        .collect()
}

/// Writes `n` files of `len` bytes named `prefix{i}`, fsync'd.
fn write_files(m: &Path, prefix: &str, n: u32, len: usize) {
    for i in 0..n {
        let mut f = File::create(m.join(format!("{prefix}{i}"))).unwrap();
        f.write_all(&pattern(i, len)).unwrap();
        f.sync_all().unwrap();
    }
}

/// Free blocks the mount reports (statfs counts blocks freed by a running
/// transaction).
fn free_blocks(m: &Path) -> u64 {
    let out = run("stat", ["-f", "-c", "%f", m.to_str().unwrap()]).expect_ok();
    out.stdout.trim().parse().unwrap()
}

/// Deletes `prefix{0..n}` and commits the deletion. The blocks of an
/// unlinked file are freed when the kernel forgets its inode, and FORGET
/// is asynchronous (over io_uring it comes through /dev/fuse, beside the
/// ring), so this waits until statfs shows `bytes` more free before the
/// fsync that commits them.
fn delete_and_commit(m: &Path, prefix: &str, n: u32, bytes: u64, keep: &str) {
    let free_before = free_blocks(m);
    for i in 0..n {
        std::fs::remove_file(m.join(format!("{prefix}{i}"))).unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while free_blocks(m).saturating_sub(free_before) * 4096 < bytes {
        assert!(
            std::time::Instant::now() < deadline,
            "the blocks of {prefix}* were not freed within 20 s of the unlinks"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    File::open(m.join(keep)).unwrap().sync_all().unwrap();
}

#[test]
fn fitrim_gives_free_blocks_back_to_the_image_file() {
    jbdfs_testkit::require!(fuse);
    let img = image_4k("trim", 128 << 20);
    let dir = TempDir::new("trim");
    let m = &dir.path;
    let d = Daemon::start(&img.path, m, "", Duration::from_secs(20)).expect("mount");
    const MIB: usize = 1 << 20;
    write_files(m, "keep", 2, MIB);
    write_files(m, "gone", 4, 8 * MIB);
    // Commit the deletions: blocks freed by an uncommitted transaction are
    // not trimmed.
    delete_and_commit(m, "gone", 4, 32 * MIB as u64, "keep0");
    let before = allocated(&img.path);

    let root = File::open(m).unwrap();
    let mut range = FstrimRange {
        start: 0,
        len: u64::MAX,
        minlen: 0,
    };
    fitrim(&root, &mut range).expect("FITRIM");
    let after = allocated(&img.path);
    assert!(
        range.len >= 32 * MIB as u64,
        "FITRIM reported {} bytes trimmed",
        range.len
    );
    assert!(
        before - after >= 30 * MIB as u64,
        "the image went from {before} to {after} allocated bytes"
    );
    // A second trim finds the same free blocks (ext4 remembers trimmed
    // groups; jbdfs does not), and changes nothing more on the host.
    fitrim(&root, &mut range).expect("FITRIM again");
    assert!(allocated(&img.path) <= after);
    // A range past the end of the filesystem is refused.
    let mut past = FstrimRange {
        start: 1 << 40,
        len: 1 << 20,
        minlen: 0,
    };
    let e = fitrim(&root, &mut past).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");

    // fstrim(8), privileged and not.
    write_files(m, "again", 2, 4 * MIB);
    delete_and_commit(m, "again", 2, 8 * MIB as u64, "keep1");
    if jbdfs_testkit::available!("fstrim(8) as root and unprivileged"; "fstrim", "setpriv") {
        let mp = m.to_str().unwrap();
        let refused = run(
            "setpriv",
            [
                "--inh-caps=-sys_admin",
                "--bounding-set=-sys_admin",
                "fstrim",
                mp,
            ],
        );
        assert!(
            !refused.success() && refused.stderr.contains("not permitted"),
            "fstrim without CAP_SYS_ADMIN: {}",
            refused.describe()
        );
        let before = allocated(&img.path);
        let out = run("fstrim", ["-v", mp]).expect_ok();
        assert!(out.stdout.contains("trimmed"), "{}", out.describe());
        let after = allocated(&img.path);
        assert!(
            before - after >= 7 * MIB as u64,
            "fstrim: the image went from {before} to {after} allocated bytes"
        );
    } else if std::env::var_os("CI").is_some() {
        panic!("fstrim or setpriv is missing; CI is set, so this is a failure");
    } else {
        eprintln!("!!!!!!!! fstrim or setpriv missing: the fstrim(8) cases are not run");
    }
    drop(root);
    d.stop_ok();
    assert_e2fsck_clean(&img.path, "after FITRIM");

    let d = Daemon::start(&img.path, m, "", Duration::from_secs(20)).expect("remount");
    for i in 0..2 {
        assert_eq!(
            std::fs::read(m.join(format!("keep{i}"))).unwrap(),
            pattern(i, MIB),
            "keep{i} after the trims"
        );
    }
    d.stop_ok();
    assert_e2fsck_clean(&img.path, "after FITRIM and a remount");
}
