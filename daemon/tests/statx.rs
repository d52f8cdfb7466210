// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! statx(2)'s birth time through the kernel. Over io_uring the daemon
//! decodes FUSE_STATX itself and answers with `i_crtime`, which ext3's
//! large inodes keep (Linux's ext3 reports it too): the time the file was
//! made, unmoved by writes and attribute changes, the same after a
//! remount, and the same as debugfs reads from the image. A 128-byte inode
//! has no crtime, and statx then reports none. fuser 0.18 answers
//! FUSE_STATX with ENOSYS, so over /dev/fuse statx reports no birth time.
//!
//! Needs root and /dev/fuse; the io_uring half runs in test.sh's second
//! pass (`JBDFS_TEST_TRANSPORT=io_uring`).

use jbdfs_testkit as common;
use jbdfs_testkit::daemon as daemon_common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{assert_e2fsck_clean, image_4k, TempDir, TempImage};
use daemon_common::{transport, Daemon, TestTransport};

/// statx(AT_FDCWD, path, 0, STATX_BASIC_STATS | STATX_BTIME): the birth
/// time, if the answer has one.
fn birth_time(path: &Path) -> Option<(i64, u32)> {
    let c = CString::new(path.as_os_str().as_bytes()).expect("a path without NUL");
    // SAFETY: statx only writes the struct, which is plain data and zeroed
    // is a valid value; the path is NUL-terminated and outlives the call.
    let (r, sx) = unsafe {
        let mut sx: libc::statx = std::mem::zeroed();
        let mask = libc::STATX_BASIC_STATS | libc::STATX_BTIME;
        let r = libc::statx(libc::AT_FDCWD, c.as_ptr(), 0, mask, &mut sx);
        (r, sx)
    };
    assert_eq!(
        r,
        0,
        "statx {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    assert_eq!(
        sx.stx_mask & libc::STATX_BASIC_STATS,
        libc::STATX_BASIC_STATS
    );
    (sx.stx_mask & libc::STATX_BTIME != 0).then_some((sx.stx_btime.tv_sec, sx.stx_btime.tv_nsec))
}

/// debugfs's `crtime: 0xSECONDS:EXTRA` of `/name`, as seconds and
/// nanoseconds (the extra word holds the nanoseconds above 2 epoch bits).
fn crtime_on_disk(image: &Path, name: &str) -> (i64, u32) {
    let out = common::debugfs(image, &format!("stat /{name}")).expect_ok();
    let stat = common::parse_stat(&out.stdout);
    let field = stat
        .get("crtime")
        .unwrap_or_else(|| panic!("no crtime: {}", out.stdout));
    let (lo, extra) = field.split_once(':').expect("crtime as LO:EXTRA");
    let lo = u32::from_str_radix(lo.trim_start_matches("0x"), 16).expect("hex seconds");
    let extra = u32::from_str_radix(extra, 16).expect("hex extra");
    (lo as i32 as i64 + (((extra & 3) as i64) << 32), extra >> 2)
}

fn now() -> (i64, u32) {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970");
    (d.as_secs() as i64, d.subsec_nanos())
}

fn mount(img: &Path, m: &Path) -> Daemon {
    Daemon::start(img, m, "", Duration::from_secs(20)).expect("mount")
}

#[test]
fn birth_time_is_crtime_over_io_uring_and_absent_over_dev_fuse() {
    jbdfs_testkit::require!(fuse);
    let img = image_4k("statx", 64 << 20);
    let dir = TempDir::new("statx");
    let m = &dir.path;
    let d = mount(&img.path, m);
    let before = now();
    std::fs::write(m.join("f"), b"born").expect("create");
    std::fs::create_dir(m.join("sub")).expect("mkdir");
    let after = now();
    let born = birth_time(&m.join("f"));
    if transport() == TestTransport::DevFuse {
        assert_eq!(born, None, "fuser 0.18 cannot carry FUSE_STATX");
        d.stop_ok();
        assert_e2fsck_clean(&img.path, "after statx over /dev/fuse");
        return;
    }
    let born = born.expect("a birth time over io_uring");
    // File times come from the coarse clock (the kernel's current_time,
    // and jbdfs's to match it): a tick behind the fine one; a second is allowed.
    let tick_before = (before.0 - 1, before.1);
    assert!(
        tick_before <= born && born <= after,
        "{before:?} <= {born:?} <= {after:?}"
    );
    assert!(
        birth_time(&m.join("sub")).is_some(),
        "a directory's birth time"
    );
    assert!(birth_time(m).is_some(), "the root's birth time (mkfs's)");
    // Writes and attribute changes move mtime and ctime, never btime.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(m.join("f"), b"rewritten").expect("rewrite");
    std::fs::set_permissions(
        m.join("f"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .expect("chmod");
    assert_eq!(birth_time(&m.join("f")), Some(born));
    d.stop_ok();
    assert_e2fsck_clean(&img.path, "after statx over io_uring");
    assert_eq!(
        crtime_on_disk(&img.path, "f"),
        born,
        "statx and debugfs agree"
    );
    let d = mount(&img.path, m);
    assert_eq!(
        birth_time(&m.join("f")),
        Some(born),
        "the same after a remount"
    );
    d.stop_ok();
}

#[test]
fn a_small_inode_has_no_birth_time() {
    jbdfs_testkit::require!(fuse);
    if transport() == TestTransport::DevFuse {
        return; // over /dev/fuse no inode has one: the test above checks that
    }
    let opts = jbdfs::mkfs::MkfsOptions {
        block_size: Some(4096),
        inode_size: 128,
        ..Default::default()
    };
    let img: TempImage = common::jbdfs_image_with("statx128", opts, 64 << 20);
    let dir = TempDir::new("statx128");
    let m = &dir.path;
    let d = mount(&img.path, m);
    std::fs::write(m.join("f"), b"no room for crtime").expect("create");
    assert_eq!(birth_time(&m.join("f")), None);
    d.stop_ok();
    assert_e2fsck_clean(&img.path, "after statx of a 128-byte inode");
}
