// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! Inode flags through the kernel (issue 18): chattr and lsattr on a jbdfs
//! mount, each operation the immutable and append-only flags forbid
//! failing with EPERM (root included), unprivileged callers refused,
//! the sync, dirsync and noatime flags and the version, and the same
//! flags seen and honoured by Linux's ext3 on a loop mount of the image,
//! both ways. e2fsck -fn is clean after each.
//!
//! Needs root, /dev/fuse and e2fsprogs' chattr/lsattr: skipped with a
//! message without them, except that under CI missing tools fail.

use jbdfs_testkit as common;
use jbdfs_testkit::daemon as daemon_common;

use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use common::{run, Out, TempDir, TempImage};
use daemon_common::Daemon;
use jbdfs::mkfs::{make_filesystem, MkfsOptions, Request};

/// FUSE and the flag tools (e2fsprogs, util-linux), or the test returns.
macro_rules! skip_unless_runnable {
    () => {
        jbdfs_testkit::require!(fuse, "chattr", "lsattr", "setpriv");
    };
}

/// A fresh 64 MiB ext3 image.
fn fresh_image(tag: &str) -> TempImage {
    let img = TempImage::new(tag);
    let req = Request {
        options: MkfsOptions {
            block_size: Some(4096),
            ..Default::default()
        },
        size: Some(64 << 20),
        quiet: true,
        ..Default::default()
    };
    make_filesystem(&img.path, &req).unwrap();
    img
}

/// jbdfs serving `img` on a new directory, `allow_other` so that other
/// users can be tried.
fn mount(img: &TempImage, extra: &str) -> (Daemon, TempDir) {
    let dir = TempDir::new("flags-mnt");
    let opts = match extra {
        "" => "allow_other".to_string(),
        e => format!("allow_other,{e}"),
    };
    let d = Daemon::start(&img.path, &dir.path, &opts, Duration::from_secs(20)).expect("mount");
    (d, dir)
}

fn unmount(d: Daemon) {
    d.stop_ok();
}

fn chattr(args: &str, path: &Path) -> Out {
    let mut v: Vec<&OsStr> = args.split_whitespace().map(OsStr::new).collect();
    v.push(path.as_os_str());
    run("chattr", v)
}

/// The flags field of `lsattr -d PATH` (`----i-----...`).
fn lsattr(path: &Path) -> String {
    let o = run("lsattr", [OsStr::new("-d"), path.as_os_str()]).expect_ok();
    o.stdout
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The version `lsattr -vd` shows.
fn lsattr_version(path: &Path) -> u64 {
    let o = run("lsattr", [OsStr::new("-vd"), path.as_os_str()]).expect_ok();
    o.stdout.split_whitespace().next().unwrap().parse().unwrap()
}

/// The flag letters `lsattr -d PATH` shows, without the dashes (`iD`):
/// the same whatever width this e2fsprogs prints.
fn letters(path: &Path) -> String {
    lsattr(path).chars().filter(|&c| c != '-').collect()
}

/// Whether `lsattr -d PATH` shows the flag letter `c`.
fn has(path: &Path, c: char) -> bool {
    lsattr(path).contains(c)
}

/// The errno of a failed std operation; panics if it succeeded.
fn errno<T: std::fmt::Debug>(what: &str, r: std::io::Result<T>) -> i32 {
    match r {
        Ok(v) => panic!("{what}: expected an error, got {v:?}"),
        Err(e) => e.raw_os_error().unwrap_or(0),
    }
}

/// Asserts that a std operation fails with EPERM.
fn eperm<T: std::fmt::Debug>(what: &str, r: std::io::Result<T>) {
    assert_eq!(errno(what, r), libc::EPERM, "{what}");
}

/// Asserts that a command fails with "Operation not permitted" (EPERM).
fn cmd_eperm(o: Out) {
    assert!(
        !o.success() && o.stderr.contains("Operation not permitted"),
        "expected EPERM:\n{}",
        o.describe()
    );
}

fn sh(cmd: &str) -> Out {
    run("sh", ["-c", cmd])
}

fn open_write(p: &Path) -> std::io::Result<File> {
    OpenOptions::new().write(true).open(p)
}

fn open_append(p: &Path) -> std::io::Result<File> {
    OpenOptions::new().append(true).open(p)
}

/// Explicit access and modification times (utimensat with both given).
fn set_both_times(p: &Path) -> std::io::Result<()> {
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
    let times = std::fs::FileTimes::new().set_accessed(t).set_modified(t);
    File::open(p)?.set_times(times)
}

fn e2fsck_clean(img: &TempImage, what: &str) {
    common::assert_e2fsck_clean(&img.path, what);
}

#[test]
fn immutable_refuses_every_change_even_to_root() {
    skip_unless_runnable!();
    let img = fresh_image("flags-imm");
    let (d, dir) = mount(&img, "");
    let m = dir.path.clone();
    let f = m.join("f");
    std::fs::write(&f, b"kept").unwrap();
    let idir = m.join("idir");
    std::fs::create_dir(&idir).unwrap();
    std::fs::write(idir.join("child"), b"child").unwrap();
    std::fs::create_dir(idir.join("sub")).unwrap();
    let outside = m.join("outside");
    std::fs::write(&outside, b"o").unwrap();
    // Open for writing before the flag is set: its writes are refused too.
    let mut early = open_write(&f).unwrap();

    assert_eq!(letters(&f), "");
    chattr("+i", &f).expect_ok();
    chattr("+i", &idir).expect_ok();
    assert!(has(&f, 'i') && has(&idir, 'i'), "{}", lsattr(&f));

    // The file: no write, truncate, unlink, rename, link, chmod, chown,
    // xattr or times, and root is no exception.
    eperm("open for write", open_write(&f));
    eperm("open for append", open_append(&f));
    eperm(
        "open with O_TRUNC",
        OpenOptions::new().write(true).truncate(true).open(&f),
    );
    cmd_eperm(run("truncate", [OsStr::new("-s0"), f.as_os_str()]));
    eperm("ftruncate of an earlier fd", early.set_len(0));
    let late = early
        .write_all(b"late")
        .and_then(|()| early.sync_all())
        .map(|()| "written");
    // (The kernel's page cache keeps the refused bytes until it drops
    // the page; the image keeps what was there, checked below.)
    eperm("write through an earlier fd", late);
    eperm("unlink", std::fs::remove_file(&f));
    eperm("rename", std::fs::rename(&f, m.join("g")));
    eperm("link", std::fs::hard_link(&f, m.join("h")));
    eperm(
        "chmod",
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)),
    );
    eperm("chown", std::os::unix::fs::chown(&f, Some(1), Some(1)));
    eperm("utimes", set_both_times(&f));
    cmd_eperm(run("touch", [f.as_os_str()]));
    if jbdfs_testkit::available!("setfattr on an immutable file"; "setfattr") {
        cmd_eperm(run(
            "setfattr",
            [
                OsStr::new("-n"),
                OsStr::new("user.x"),
                OsStr::new("-v"),
                OsStr::new("1"),
                f.as_os_str(),
            ],
        ));
    }

    // The directory: nothing created in it, removed from it, renamed in
    // or out of it; its files themselves stay writable.
    eperm("create in", File::create(idir.join("new")));
    eperm("mkdir in", std::fs::create_dir(idir.join("newdir")));
    eperm(
        "symlink in",
        std::os::unix::fs::symlink("t", idir.join("link")),
    );
    cmd_eperm(run("mkfifo", [idir.join("fifo").as_os_str()]));
    eperm("link into", std::fs::hard_link(&outside, idir.join("l")));
    eperm("unlink in", std::fs::remove_file(idir.join("child")));
    eperm("rmdir in", std::fs::remove_dir(idir.join("sub")));
    eperm(
        "rename out",
        std::fs::rename(idir.join("child"), m.join("c")),
    );
    eperm("rename in", std::fs::rename(&outside, idir.join("o")));
    eperm(
        "rename within",
        std::fs::rename(idir.join("child"), idir.join("c2")),
    );
    eperm("rmdir of it", std::fs::remove_dir(&idir));
    eperm("rename of it", std::fs::rename(&idir, m.join("moved")));
    std::fs::write(idir.join("child"), b"changed").unwrap();
    assert_eq!(std::fs::read(idir.join("child")).unwrap(), b"changed");

    drop(early);
    unmount(d);
    e2fsck_clean(&img, "after immutable");
    let on_disk = common::debugfs(&img.path, "cat /f");
    assert_eq!(on_disk.stdout, "kept", "{}", on_disk.describe());

    // Cleared, everything works again.
    let (d, dir) = mount(&img, "");
    let m = dir.path.clone();
    let (f, idir) = (m.join("f"), m.join("idir"));
    assert_eq!(std::fs::read(&f).unwrap(), b"kept");
    chattr("-i", &f).expect_ok();
    chattr("-i", &idir).expect_ok();
    std::fs::write(&f, b"free").unwrap();
    std::fs::rename(idir.join("child"), m.join("child")).unwrap();
    std::fs::remove_file(&f).unwrap();
    unmount(d);
    e2fsck_clean(&img, "after clearing immutable");
}

#[test]
fn append_only_allows_only_appends() {
    skip_unless_runnable!();
    let img = fresh_image("flags-app");
    let (d, dir) = mount(&img, "");
    let m = dir.path.clone();
    let f = m.join("log");
    std::fs::write(&f, b"one\n").unwrap();
    let adir = m.join("adir");
    std::fs::create_dir(&adir).unwrap();
    std::fs::write(adir.join("old"), b"old").unwrap();
    chattr("+a", &f).expect_ok();
    chattr("+a", &adir).expect_ok();
    assert!(has(&f, 'a') && has(&adir, 'a'));

    eperm("open for write without O_APPEND", open_write(&f));
    eperm(
        "open with O_TRUNC",
        OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_TRUNC)
            .open(&f),
    );
    // Appends work, through the page cache and past close.
    {
        let mut a = open_append(&f).unwrap();
        a.write_all(b"two\n").unwrap();
        eperm("ftruncate", a.set_len(0));
        a.sync_all().unwrap();
    }
    let mut a = open_append(&f).unwrap();
    a.write_all(&vec![b'x'; 3 << 20]).unwrap();
    drop(a);
    let text = std::fs::read(&f).unwrap();
    assert_eq!(&text[..8], b"one\ntwo\n");
    assert_eq!(text.len(), 8 + (3 << 20));
    cmd_eperm(run("truncate", [OsStr::new("-s0"), f.as_os_str()]));
    eperm("unlink", std::fs::remove_file(&f));
    eperm("rename", std::fs::rename(&f, m.join("g")));
    eperm("link", std::fs::hard_link(&f, m.join("h")));
    eperm(
        "chmod",
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)),
    );
    eperm("chown", std::os::unix::fs::chown(&f, Some(1), None));
    eperm("explicit times", set_both_times(&f));
    // touch (times to now) is allowed, as on ext3.
    run("touch", [f.as_os_str()]).expect_ok();

    // The directory: names may be added, not removed.
    std::fs::write(adir.join("new"), b"n").unwrap();
    std::fs::create_dir(adir.join("newdir")).unwrap();
    eperm("unlink in", std::fs::remove_file(adir.join("old")));
    eperm("rmdir in", std::fs::remove_dir(adir.join("newdir")));
    eperm("rename out", std::fs::rename(adir.join("old"), m.join("o")));
    std::fs::write(adir.join("old"), b"rewritten").unwrap();

    chattr("-a", &f).expect_ok();
    chattr("-a", &adir).expect_ok();
    std::fs::remove_file(&f).unwrap();
    std::fs::remove_file(adir.join("old")).unwrap();
    unmount(d);
    e2fsck_clean(&img, "after append-only");
}

#[test]
fn unprivileged_callers_cannot_set_i_or_a() {
    skip_unless_runnable!();
    let img = fresh_image("flags-priv");
    let (d, dir) = mount(&img, "");
    let m = dir.path.clone();
    std::fs::set_permissions(&m, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mine = m.join("nobodys");
    std::fs::write(&mine, b"x").unwrap();
    std::os::unix::fs::chown(&mine, Some(65534), Some(65534)).unwrap();
    let roots = m.join("roots");
    std::fs::write(&roots, b"x").unwrap();
    let nobody = |args: &str, p: &Path| {
        let cmd = format!(
            "setpriv --reuid=65534 --regid=65534 --clear-groups chattr {args} '{}'",
            p.display()
        );
        sh(&cmd)
    };
    // The owner may change the other flags, but not i or a.
    nobody("+d", &mine).expect_ok();
    assert!(has(&mine, 'd'));
    cmd_eperm(nobody("+i", &mine));
    cmd_eperm(nobody("+a", &mine));
    // A non-owner may change nothing.
    cmd_eperm(nobody("+d", &roots));
    // Root without CAP_LINUX_IMMUTABLE is refused too, both ways.
    let dropped = |args: &str, p: &Path| {
        sh(&format!(
            "setpriv --inh-caps=-linux_immutable --bounding-set=-linux_immutable chattr {args} '{}'",
            p.display()
        ))
    };
    cmd_eperm(dropped("+i", &roots));
    chattr("+a", &roots).expect_ok();
    cmd_eperm(dropped("-a", &roots));
    assert!(has(&roots, 'a') && !has(&mine, 'i'));
    chattr("-a", &roots).expect_ok();
    unmount(d);
    e2fsck_clean(&img, "after unprivileged attempts");
}

/// The "N transactions (M requested)" count of a `-o stats=` file.
fn requested_commits(stats: &Path) -> u64 {
    let text = std::fs::read_to_string(stats).unwrap();
    let line = text.lines().next().unwrap();
    let inner = line.split('(').nth(1).unwrap();
    inner.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn sync_dirsync_noatime_and_the_version() {
    skip_unless_runnable!();
    let img = fresh_image("flags-sync");
    let stats = img.path.with_extension("stats");
    let _cleanup = TempImage {
        path: stats.clone(),
    };
    let (d, dir) = mount(&img, &format!("stats={}", stats.display()));
    let m = dir.path.clone();
    let wait_stats = || std::thread::sleep(Duration::from_millis(1300));

    // S: every write commits before it returns.
    let f = m.join("synced");
    std::fs::write(&f, b"").unwrap();
    chattr("+S", &f).expect_ok();
    assert!(has(&f, 'S'));
    wait_stats();
    let before = requested_commits(&stats);
    let mut w = open_write(&f).unwrap();
    for _ in 0..5 {
        w.write_all(&[7u8; 4096]).unwrap();
    }
    drop(w);
    wait_stats();
    let requested = requested_commits(&stats) - before;
    assert!(
        requested >= 5,
        "5 writes to a +S file asked for {requested} commits"
    );
    assert_eq!(std::fs::read(&f).unwrap().len(), 5 * 4096);

    // D: every change in the directory commits; new subdirectories
    // inherit D, new files in it do not (D is for directories).
    let dd = m.join("dirsynced");
    std::fs::create_dir(&dd).unwrap();
    chattr("+D", &dd).expect_ok();
    assert!(has(&dd, 'D'));
    wait_stats();
    let before = requested_commits(&stats);
    for i in 0..5 {
        File::create(dd.join(format!("f{i}"))).unwrap();
    }
    std::fs::create_dir(dd.join("sub")).unwrap();
    wait_stats();
    let requested = requested_commits(&stats) - before;
    assert!(
        requested >= 6,
        "6 creates in a +D directory asked for {requested} commits"
    );
    assert!(has(&dd.join("sub"), 'D'));
    assert!(!has(&dd.join("f0"), 'D'));

    // d and A (and S) are kept and inherited as ext3 does.
    let da = m.join("da");
    std::fs::create_dir(&da).unwrap();
    chattr("+dA", &da).expect_ok();
    assert_eq!(letters(&da), "dA");
    std::fs::write(da.join("child"), b"c").unwrap();
    assert_eq!(letters(&da.join("child")), "dA");
    // D or T make no sense on a file: EOPNOTSUPP, as ext4 answers.
    let o = chattr("+T", &f);
    assert!(
        !o.success() && o.stderr.contains("Operation not supported"),
        "{}",
        o.describe()
    );

    // The version (i_generation).
    chattr("-v 4242", &f).expect_ok();
    assert_eq!(lsattr_version(&f), 4242);
    unmount(d);
    e2fsck_clean(&img, "after sync, dirsync, noatime and version");

    // Kept across a remount.
    let (d, dir) = mount(&img, "");
    let m = dir.path.clone();
    assert_eq!(lsattr_version(&m.join("synced")), 4242);
    assert_eq!(letters(&m.join("synced")), "S");
    assert_eq!(letters(&m.join("da")), "dA");
    unmount(d);
}

/// `lsattr -d` of each path under `root` (relative), for comparison.
fn attrs_of(root: &Path, rels: &[&str]) -> Vec<(String, String)> {
    rels.iter()
        .map(|r| (r.to_string(), lsattr(&root.join(r))))
        .collect()
}

/// A kernel ext3 mount of the image (serialised with other loop mounts).
fn linux_mount(img: &TempImage) -> common::LoopMount {
    common::LoopMount::mount(&img.path).unwrap_or_else(|o| panic!("{}", o.describe()))
}

#[test]
fn linux_and_jbdfs_honour_each_others_flags() {
    skip_unless_runnable!();
    jbdfs_testkit::require!(loop);
    let img = fresh_image("flags-linux");
    let rels = ["imm", "app", "sync", "dsync", "da", "da/child", "plain"];

    // Set by jbdfs, seen and honoured by Linux.
    let (d, dir) = mount(&img, "");
    let m: PathBuf = dir.path.clone();
    for f in ["imm", "app", "sync", "plain"] {
        std::fs::write(m.join(f), f).unwrap();
    }
    for dname in ["dsync", "da"] {
        std::fs::create_dir(m.join(dname)).unwrap();
    }
    chattr("+i", &m.join("imm")).expect_ok();
    chattr("+a", &m.join("app")).expect_ok();
    chattr("+S", &m.join("sync")).expect_ok();
    chattr("+D", &m.join("dsync")).expect_ok();
    chattr("+dA", &m.join("da")).expect_ok();
    std::fs::write(m.join("da/child"), b"c").unwrap();
    chattr("-v 77", &m.join("plain")).expect_ok();
    let ours = attrs_of(&m, &rels);
    unmount(d);
    e2fsck_clean(&img, "after jbdfs set the flags");

    {
        let _l = common::LOOP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let mut lm = linux_mount(&img);
        let k = lm.path().to_path_buf();
        assert_eq!(attrs_of(&k, &rels), ours, "Linux sees what jbdfs set");
        assert_eq!(lsattr_version(&k.join("plain")), 77);
        eperm("Linux: unlink of +i", std::fs::remove_file(k.join("imm")));
        eperm("Linux: write to +i", open_write(&k.join("imm")));
        eperm("Linux: write to +a", open_write(&k.join("app")));
        eperm("Linux: unlink of +a", std::fs::remove_file(k.join("app")));
        open_append(&k.join("app"))
            .and_then(|mut a| a.write_all(b"+linux"))
            .unwrap();
        // Now the other way: Linux sets, jbdfs must honour.
        chattr("-i", &k.join("imm")).expect_ok();
        chattr("-a", &k.join("app")).expect_ok();
        chattr("+a", &k.join("imm")).expect_ok();
        chattr("+i", &k.join("app")).expect_ok();
        chattr("+i", &k.join("dsync")).expect_ok();
        chattr("-S", &k.join("sync")).expect_ok();
        chattr("+A", &k.join("plain")).expect_ok();
        let o = lm.umount();
        assert!(o.success(), "{}", o.describe());
    }
    e2fsck_clean(&img, "after Linux changed the flags");

    let (d, dir) = mount(&img, "");
    let m: PathBuf = dir.path.clone();
    let expect = [
        ("imm", "a"),
        ("app", "i"),
        ("sync", ""),
        ("dsync", "Di"),
        ("plain", "A"),
    ];
    for (rel, flags) in expect {
        assert_eq!(letters(&m.join(rel)), flags, "{rel} as jbdfs shows it");
    }
    assert_eq!(std::fs::read(m.join("app")).unwrap(), b"app+linux");
    eperm(
        "jbdfs: unlink of Linux's +i",
        std::fs::remove_file(m.join("app")),
    );
    eperm("jbdfs: write to Linux's +i", open_write(&m.join("app")));
    eperm(
        "jbdfs: unlink of Linux's +a",
        std::fs::remove_file(m.join("imm")),
    );
    eperm("jbdfs: write to Linux's +a", open_write(&m.join("imm")));
    eperm(
        "jbdfs: create in Linux's +i directory",
        File::create(m.join("dsync/x")),
    );
    open_append(&m.join("imm"))
        .and_then(|mut a| a.write_all(b"+jbdfs"))
        .unwrap();
    assert_eq!(std::fs::read(m.join("imm")).unwrap(), b"imm+jbdfs");
    for (rel, flag) in [("imm", "-a"), ("app", "-i"), ("dsync", "-i")] {
        chattr(flag, &m.join(rel)).expect_ok();
    }
    std::fs::remove_file(m.join("app")).unwrap();
    unmount(d);
    e2fsck_clean(&img, "after jbdfs honoured Linux's flags");
}

/// chattr moves ctime, as ext3's ioctl does, and stat shows it at once
/// for a directory: the kernel is told its cached attributes are stale.
/// (A regular file's ctime is the kernel's own under FUSE's writeback
/// cache, which never takes it from the daemon: fstests generic/277.)
#[test]
fn chattr_moves_the_ctime_stat_shows() {
    skip_unless_runnable!();
    let img = fresh_image("flags-ctime");
    let (d, dir) = mount(&img, "");
    let sub = dir.path.join("sub");
    std::fs::create_dir(&sub).unwrap();
    let ctime = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(p).unwrap();
        (m.ctime(), m.ctime_nsec())
    };
    let before = ctime(&sub);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    chattr("+d", &sub).expect_ok();
    let after = ctime(&sub);
    assert!(
        after > before,
        "ctime {before:?} -> {after:?} after chattr +d"
    );
    unmount(d);
    e2fsck_clean(&img, "after chattr +d");
}
