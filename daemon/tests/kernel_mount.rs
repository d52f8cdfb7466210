// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! A root mount behaves like the kernel's ext3 (issue 18, "mounts as the
//! kernel's"): other users work under the permission bits, setuid and
//! device nodes are allowed unless nosuid/nodev say otherwise, a mount
//! says nothing when all is well, and `mount -o remount,ro|rw` works
//! through the helper mount(8) runs (`jbdfs SOURCE DIR -o remount,...`),
//! leaving the image clean while read-only.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use jbdfs_testkit as common;
use jbdfs_testkit::daemon as daemon_common;

use daemon_common::Daemon;

fn image_and_dir(tag: &str) -> (common::TempImage, common::TempDir) {
    let img = common::jbdfs_image_with(tag, Default::default(), 64 << 20);
    let dir = common::TempDir::new(tag);
    std::fs::create_dir(dir.path.join("mnt")).unwrap();
    (img, dir)
}

/// (mount options, super options) of the mount on `dir`.
fn mount_options(dir: &Path) -> (Vec<String>, Vec<String>) {
    let canon = std::fs::canonicalize(dir).unwrap();
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = info
        .lines()
        .rev()
        .find(|l| l.split(' ').nth(4) == Some(canon.to_str().unwrap()))
        .unwrap_or_else(|| panic!("{} is not mounted", canon.display()));
    let (left, right) = line.split_once(" - ").unwrap();
    let words = |s: &str| s.split(',').map(String::from).collect::<Vec<_>>();
    (
        words(left.split(' ').nth(5).unwrap()),
        words(right.split(' ').nth(2).unwrap()),
    )
}

/// Runs a shell command as nobody.
fn as_nobody(script: &str) -> Output {
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
        ])
        .arg(script)
        .output()
        .expect("setpriv (util-linux)")
}

/// What mount.fuse3 runs for `mount -o OPTS DIR` on a fuse.jbdfs mount.
fn helper(image: &Path, dir: &Path, opts: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_jbdfs"))
        .arg(image)
        .arg(dir)
        .args(["-o", opts])
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

#[test]
fn a_root_mount_lets_other_users_in_and_allows_suid_and_devices() {
    jbdfs_testkit::require!(fuse);
    let (img, dir) = image_and_dir("kmount-root");
    let mnt = dir.path.join("mnt");
    let d = Daemon::start(&img.path, &mnt, "", Duration::from_secs(30)).unwrap();
    let (mount, sup) = mount_options(&mnt);
    assert!(sup.iter().any(|o| o == "allow_other"), "{sup:?}");
    assert!(sup.iter().any(|o| o == "default_permissions"), "{sup:?}");
    assert!(
        !mount.iter().any(|o| o == "nosuid" || o == "nodev"),
        "{mount:?}"
    );
    std::fs::write(mnt.join("readable"), b"for everyone\n").unwrap();
    std::fs::create_dir(mnt.join("open")).unwrap();
    Command::new("chmod")
        .arg("1777")
        .arg(mnt.join("open"))
        .status()
        .unwrap();
    let m = mnt.display();
    let out = as_nobody(&format!(
        "cat {m}/readable && touch {m}/open/mine && ! echo x 2>/dev/null >{m}/readable"
    ));
    assert!(
        out.status.success(),
        "nobody: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "for everyone\n");
    let exited = d.stop();
    assert!(exited.status.success(), "{exited:?}");
    assert_eq!(exited.stderr, "", "a mount says nothing when all is well");
    common::assert_e2fsck_clean(&img.path, "after other users worked in it");

    let d = Daemon::start(&img.path, &mnt, "nosuid,nodev", Duration::from_secs(30)).unwrap();
    let (mount, _) = mount_options(&mnt);
    assert!(mount.iter().any(|o| o == "nosuid"), "{mount:?}");
    assert!(mount.iter().any(|o| o == "nodev"), "{mount:?}");
    d.stop();
}

#[test]
fn remount_read_only_and_back_through_the_mount_helper() {
    jbdfs_testkit::require!(fuse);
    let (img, dir) = image_and_dir("kmount-remount");
    let mnt = dir.path.join("mnt");
    let d = Daemon::start(&img.path, &mnt, "nosuid", Duration::from_secs(30)).unwrap();
    let data: Vec<u8> = (0..500_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(mnt.join("file"), &data).unwrap();
    std::fs::create_dir(mnt.join("dir")).unwrap();

    let out = helper(&img.path, &mnt, "remount,ro");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (mount, _) = mount_options(&mnt);
    assert!(mount.iter().any(|o| o == "ro"), "{mount:?}");
    assert!(
        mount.iter().any(|o| o == "nosuid"),
        "nosuid kept: {mount:?}"
    );
    let err = std::fs::write(mnt.join("new"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    // Read-only means the image is whole and clean, though still mounted.
    common::assert_e2fsck_clean(&img.path, "while remounted read-only");
    assert_eq!(std::fs::read(mnt.join("file")).unwrap(), data);

    let out = helper(&img.path, &mnt, "remount,data=journal");
    assert!(!out.status.success(), "data= cannot change on remount");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("data=journal"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = helper(&img.path, &mnt, "remount,rw");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (mount, _) = mount_options(&mnt);
    assert!(mount.iter().any(|o| o == "rw"), "{mount:?}");
    std::fs::write(mnt.join("new"), b"after rw").unwrap();
    let exited = d.stop();
    assert!(exited.status.success(), "{exited:?}");
    common::assert_e2fsck_clean(&img.path, "after remount,rw and unmount");
    let listing = common::debugfs(&img.path, "ls -l /");
    assert!(listing.stdout.contains("new"), "{}", listing.stdout);
}

/// A mount made read-only goes read-write at `remount,rw`, as a Linux
/// ext3 mount does: the image was opened for writing under the shared
/// lock, so another read-only mount may share it, and while one does the
/// remount is refused (one image, one writer); once alone it goes
/// read-write.
#[test]
fn a_read_only_mount_remounts_read_write() {
    jbdfs_testkit::require!(fuse);
    let (img, dir) = image_and_dir("kmount-ro-rw");
    let mnt = dir.path.join("mnt");
    let d = Daemon::start(&img.path, &mnt, "", Duration::from_secs(30)).unwrap();
    std::fs::write(mnt.join("file"), b"written rw\n").unwrap();
    d.stop_ok();

    let d = Daemon::start(&img.path, &mnt, "ro", Duration::from_secs(30)).unwrap();
    let err = std::fs::write(mnt.join("new"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    let other = dir.path.join("other");
    std::fs::create_dir(&other).unwrap();
    let d2 = Daemon::start(&img.path, &other, "ro", Duration::from_secs(30)).unwrap();
    let out = helper(&img.path, &mnt, "remount,rw");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "remount,rw beside another mount");
    assert!(stderr.contains("in use"), "{stderr}");
    let (mount, _) = mount_options(&mnt);
    assert!(mount.iter().any(|o| o == "ro"), "{mount:?}");
    d2.stop_ok();

    let out = helper(&img.path, &mnt, "remount,rw");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (mount, _) = mount_options(&mnt);
    assert!(mount.iter().any(|o| o == "rw"), "{mount:?}");
    std::fs::write(mnt.join("new"), b"after rw\n").unwrap();
    assert_eq!(std::fs::read(mnt.join("file")).unwrap(), b"written rw\n");
    // The image has one writer now: a second mount is refused.
    assert!(Daemon::start(&img.path, &other, "ro", Duration::from_secs(10)).is_err());
    let exited = d.stop();
    assert!(exited.status.success(), "{exited:?}");
    let unexpected: Vec<&str> = exited
        .stderr
        .lines()
        .filter(|l| !l.contains("remount failed: cannot write the image"))
        .collect();
    assert!(
        unexpected.is_empty(),
        "only the refusal is logged: {unexpected:?}"
    );
    common::assert_e2fsck_clean(&img.path, "after remount,rw of a read-only mount");
    let listing = common::debugfs(&img.path, "ls -l /");
    assert!(listing.stdout.contains("new"), "{}", listing.stdout);
}

/// The `options:` line of a stats file, once the daemon has written one
/// after `since` (it rewrites the file every second).
fn options_line(stats: &Path, since: std::time::SystemTime) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let fresh = std::fs::metadata(stats)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t > since);
        if fresh {
            if let Some(l) = std::fs::read_to_string(stats)
                .unwrap_or_default()
                .lines()
                .find_map(|l| l.strip_prefix("options: "))
            {
                return l.to_string();
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no fresh stats in {}",
            stats.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `mount -o remount,...` changes what ext3_remount lets change (commit=,
/// barrier, errors=, the batching and atime options) on the fly; a bad
/// value is refused before anything changes.
#[test]
fn remount_changes_commit_barrier_errors_batching_and_atime() {
    jbdfs_testkit::require!(fuse);
    let (img, dir) = image_and_dir("kmount-retune");
    let mnt = dir.path.join("mnt");
    let stats = dir.path.join("stats");
    let opts = format!("stats={},strictatime", stats.display());
    let d = Daemon::start(&img.path, &mnt, &opts, Duration::from_secs(30)).unwrap();
    let before = options_line(&stats, std::time::UNIX_EPOCH);
    assert!(
        before.starts_with("commit=5,barrier=1,errors=remount-ro,bdelay=auto"),
        "{before}"
    );
    assert!(before.ends_with("strictatime"), "{before}");
    std::fs::write(mnt.join("file"), b"read me").unwrap();

    let asked = std::time::SystemTime::now();
    // The mount's own options may come again (fstab and fstests repeat
    // them all), as long as they do not change.
    let out = helper(
        &img.path,
        &mnt,
        &format!(
            "remount,{opts},data=ordered,commit=1,nobarrier,errors=continue,bdelay=jbd2,max_batch_time=2000,noatime"
        ),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::thread::sleep(Duration::from_millis(1100));
    let after = options_line(&stats, asked);
    assert_eq!(
        after,
        "commit=1,barrier=0,errors=continue,bdelay=jbd2,min_batch_time=0,max_batch_time=2000,noatime"
    );
    // noatime now: a read leaves atime where it was.
    let atime = |p: &Path| std::fs::metadata(p).unwrap().accessed().unwrap();
    let was = atime(&mnt.join("file"));
    std::thread::sleep(Duration::from_millis(20));
    std::fs::read(mnt.join("file")).unwrap();
    assert_eq!(atime(&mnt.join("file")), was, "noatime after the remount");

    // A bad value changes nothing, not even the options asked beside it.
    let out = helper(&img.path, &mnt, "remount,commit=9,errors=explode");
    assert!(!out.status.success(), "errors=explode accepted");
    assert!(String::from_utf8_lossy(&out.stderr).contains("explode"));
    let asked = std::time::SystemTime::now();
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(options_line(&stats, asked), after);

    let exited = d.stop();
    assert!(exited.status.success(), "{exited:?}");
    common::assert_e2fsck_clean(&img.path, "after remounts that retuned the journal");
}
