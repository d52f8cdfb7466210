// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! One image, one writer, as a user meets it: the real `jbdfs`, `umount`,
//! `fusermount3`, `mkfs-jbdfs` and `fsck-jbdfs` programs against a mounted
//! image. The lock itself is unit-tested in src/device/lock.rs; only here
//! do the daemonizing parent's refusal, the mount type umount(8) picks its
//! helper by, the helper's wait for the lock, and a remount racing the old
//! daemon's exit meet.
//!
//! Needs root and /dev/fuse: skipped with a loud SKIP line otherwise, and
//! failed instead when CI is set, so that CI cannot pass by skipping.

use jbdfs_testkit as common;
use jbdfs_testkit::daemon as daemon_common;

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Out, TempDir, TempImage};
use jbdfs::device::lock::{self, LockKind};

/// The daemon's wait for an image locked but not mounted (LOCK_WAIT in
/// daemon/src/daemon.rs); a mounted image must be refused well within it.
const DAEMON_LOCK_WAIT: Duration = Duration::from_secs(5);

/// Where umount(8) looks for type helpers, whatever the install prefix.
const UMOUNT_HELPER: &str = "/sbin/umount.fuse.jbdfs";

/// The checkout's umount helper, run by hand: a block device's tests need
/// it whether or not it is installed.
fn checkout_umount_helper() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/umount.fuse.jbdfs")
}

/// One test at a time in this process: a child spawned for one test
/// inherits, until it execs, whatever files another test has open on its
/// mount, and an unmount at that moment fails with EBUSY.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A test's turn: alone in this process, and (over io_uring) holding the
/// enable_uring switch on for its mounts.
struct Turn {
    _serial: std::sync::MutexGuard<'static, ()>,
    _uring: Option<daemon_common::SwitchTurn>,
}

/// Whether `test` can run here, and if so the turn it runs in. A skip
/// must be seen, and under CI a machine that cannot mount is a broken
/// runner, not a pass.
fn ready(_test: &str) -> Option<Turn> {
    if !jbdfs_testkit::require::met(&[jbdfs_testkit::require::Need::Fuse]) {
        return None;
    }
    // A failed test poisons the lock; the others still run.
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    Some(Turn {
        _serial: serial,
        _uring: daemon_common::transport().turn(),
    })
}

/// mkfs-jbdfs and fsck-jbdfs belong to other crates of the workspace, so
/// Cargo gives this package no CARGO_BIN_EXE_ for them; a workspace build
/// puts them beside jbdfs. Building them from here would deadlock on the
/// target directory's lock, which `cargo test` holds while tests run.
fn sibling_bin(name: &str) -> Result<PathBuf, String> {
    let dir = std::env::var_os("JBDFS_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_BIN_EXE_jbdfs"))
                .parent()
                .expect("jbdfs has a directory")
                .to_path_buf()
        });
    let p = dir.join(name);
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!(
            "{} not built (cargo build --workspace with this profile, or set JBDFS_BIN_DIR)",
            p.display()
        ))
    }
}

/// Runs `prog` with a time limit, capturing its output. A daemon that
/// wrongly accepted a mount with -f would otherwise hang the test.
fn run_limited(prog: &Path, args: &[&str], limit: Duration) -> Out {
    let cmdline = std::iter::once(prog.display().to_string())
        .chain(args.iter().map(|a| a.to_string()))
        .collect::<Vec<_>>()
        .join(" ");
    let mut child = Command::new(prog)
        .args(args)
        .env("LC_ALL", "C")
        // The messages tested must not depend on the caller's log settings.
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmdline}: {e}"));
    let mut out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out_pipe.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmdline} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Out {
        code: status.code(),
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
        cmdline,
    }
}

/// `jbdfs ARGS`, over the run's transport (daemon_common): every call here
/// mounts, or is refused a mount.
fn jbdfs(args: &[&str]) -> Out {
    let mut args = args.to_vec();
    args.extend(["-o", daemon_common::transport().option()]);
    run_limited(
        Path::new(env!("CARGO_BIN_EXE_jbdfs")),
        &args,
        Duration::from_secs(90),
    )
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 test path")
}

/// The type and source of the mount on `target`, from mountinfo.
fn mount_entry(target: &Path) -> Option<(String, String)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let sep = f.iter().position(|&x| x == "-")?;
        let (fstype, source) = (f.get(sep + 1)?, f.get(sep + 2)?);
        (lock::unescape(f.get(4)?) == s(target))
            .then(|| (fstype.to_string(), lock::unescape(source)))
    })
}

/// Present and not a zombie: a container may have nobody reaping the
/// daemon, which its parent left behind when it returned.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
        st.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z")
    })
}

fn wait_gone(pid: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// What became of daemon `pid`, for failure messages: a dead daemon shows
/// on its mount only as ENOTCONN, which says nothing of why it died.
fn daemon_state(pid: u32) -> String {
    // A daemon caught dying (exiting, or printing a panic) gets a moment
    // to finish, so that the message says how it ended.
    wait_gone(pid, Duration::from_secs(2));
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return format!("daemon {pid} is gone");
    };
    // Fields from the third (state) on; the wait status is the 52nd.
    let f: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    match (f.first(), f.get(49).and_then(|w| w.parse::<i32>().ok())) {
        (Some(&"Z"), Some(w)) if w & 0x7f != 0 => {
            format!("daemon {pid} was killed by signal {}", w & 0x7f)
        }
        (Some(&"Z"), Some(w)) => format!("daemon {pid} exited with status {}", w >> 8),
        (state, _) => format!("daemon {pid} is alive (state {state:?})"),
    }
}

/// Checks that `mnt` holds files f0..count with their contents.
fn check_files(mnt: &Path, count: usize, pid: u32, round: usize) {
    for i in 0..count {
        match std::fs::read(mnt.join(format!("f{i}"))) {
            Ok(got) => assert!(got == content(i), "round {round}: f{i} differs"),
            Err(e) => panic!("round {round}: f{i}: {e}; {}", daemon_state(pid)),
        }
    }
}

fn write_file(mnt: &Path, i: usize, pid: u32) {
    std::fs::write(mnt.join(format!("f{i}")), content(i))
        .unwrap_or_else(|e| panic!("writing f{i}: {e}; {}", daemon_state(pid)));
}

/// Whether anything holds a lock on `image` (any lock conflicts with a
/// writer's).
fn image_locked(image: &Path) -> bool {
    let f = std::fs::File::open(image).unwrap();
    lock::conflicts(&f, LockKind::Write).unwrap()
}

/// A fresh image and a directory for mount points, unmounted (lazily,
/// waiting for the daemons) however the test ends.
struct Fixture {
    image: TempImage,
    dir: TempDir,
}

impl Fixture {
    fn new(tag: &str) -> Fixture {
        Self::sized(tag, 64 << 20)
    }

    /// A fresh image of `size` bytes with 4 KiB blocks.
    fn sized(tag: &str, size: u64) -> Fixture {
        Fixture {
            image: common::image_4k(tag, size),
            dir: TempDir::new(tag),
        }
    }

    /// [`Fixture::sized`], its image on a loop device.
    fn on_loop_device(tag: &str, size: u64) -> (Fixture, common::LoopDevice) {
        let fx = Self::sized(tag, size);
        let dev = common::LoopDevice::attach(&fx.image.path).expect("losetup");
        (fx, dev)
    }

    fn image(&self) -> &str {
        self.image.path_str()
    }

    /// A mount point, canonical as mountinfo shows it.
    fn mnt(&self, name: &str) -> PathBuf {
        let p = self.dir.path.join(name);
        std::fs::create_dir_all(&p).unwrap();
        std::fs::canonicalize(p).unwrap()
    }

    /// Mounts the image on `mnt` with the daemonizing `jbdfs` and returns
    /// the daemon's pid.
    fn mount(&self, mnt: &Path) -> u32 {
        let out = jbdfs(&[self.image(), s(mnt)]);
        assert!(out.success(), "mount failed:\n{}", out.describe());
        assert!(
            mount_entry(mnt).is_some(),
            "jbdfs returned before the mount was live:\n{}",
            out.describe()
        );
        daemon_pid(mnt)
    }

    /// Unmounts as an administrator would. With the helper installed that
    /// is umount(8), which must return only once the daemon has let go of
    /// the image; without it, fusermount3 and a wait for the daemon.
    fn umount(&self, mnt: &Path, pid: u32) {
        if Path::new(UMOUNT_HELPER).exists() {
            common::run("umount", [s(mnt)]).expect_ok();
            assert!(
                !image_locked(&self.image.path),
                "umount {} returned while daemon {pid} still locked {} (alive: {})",
                mnt.display(),
                self.image(),
                alive(pid)
            );
        } else {
            fusermount_u(mnt);
            assert!(
                wait_gone(pid, Duration::from_secs(30)),
                "daemon {pid} did not exit"
            );
        }
        assert!(
            mount_entry(mnt).is_none(),
            "{} still mounted",
            mnt.display()
        );
    }

    fn e2fsck_clean(&self, what: &str) {
        common::assert_e2fsck_clean(&self.image.path, what);
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let Ok(entries) = std::fs::read_dir(&self.dir.path) else {
            return;
        };
        for e in entries.filter_map(Result::ok) {
            let Ok(mnt) = std::fs::canonicalize(e.path()) else {
                continue;
            };
            if mount_entry(&mnt).is_none() {
                continue;
            }
            let pid = jbdfs_daemon::daemon::pid_file_path(&mnt)
                .and_then(|p| std::fs::read_to_string(p).ok())
                .and_then(|t| t.trim().parse::<u32>().ok());
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(&mnt)
                .status();
            // The image and directory go next; the daemon must be done.
            if let Some(pid) = pid {
                wait_gone(pid, Duration::from_secs(30));
            }
        }
    }
}

/// The pid of the daemon serving `mnt`, from the file it writes for
/// umount.fuse.jbdfs before the mount goes live.
fn daemon_pid(mnt: &Path) -> u32 {
    let path =
        jbdfs_daemon::daemon::pid_file_path(mnt).expect("root's pid files are in /run/jbdfs");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("no pid file {}: {e}", path.display()));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("pid file {}: {text:?}: {e}", path.display()))
}

fn content(round: usize) -> Vec<u8> {
    // Sizes and bytes differ per round, so a file from another round or
    // a stale block cannot pass for this one.
    (0..1000 + round * 4099)
        .map(|i| (i * 31 + round * 7) as u8)
        .collect()
}

#[test]
fn a_second_daemon_is_refused_and_the_first_keeps_serving() {
    let Some(_turn) = ready("a_second_daemon_is_refused_and_the_first_keeps_serving") else {
        return;
    };
    let fx = Fixture::new("second");
    let a = fx.mnt("a");
    let b = fx.mnt("b");
    let pid = fx.mount(&a);
    std::fs::write(a.join("before"), content(1)).unwrap();

    // Read-only too: its shared lock conflicts with the writer's. With -f
    // the refusal must come before serving, or this would never return.
    for extra in [&[][..], &["-o", "ro"], &["-f"]] {
        let mut args = vec![fx.image(), s(&b)];
        args.extend_from_slice(extra);
        let started = Instant::now();
        let out = jbdfs(&args);
        let took = started.elapsed();
        let err = &out.stderr;
        assert_eq!(out.code, Some(1), "{}", out.describe());
        for needle in [
            format!("jbdfs: {} is in use", fx.image()),
            format!("by jbdfs (pid {pid})"),
            format!("mounted on {}", a.display()),
        ] {
            assert!(err.contains(&needle), "no {needle:?}:\n{}", out.describe());
        }
        assert!(
            took < DAEMON_LOCK_WAIT,
            "a mounted image is refused at once, not after the wait for a \
             departing daemon; took {took:?}"
        );
        assert!(
            mount_entry(&b).is_none(),
            "{} was mounted by the refused daemon",
            b.display()
        );
    }

    assert!(alive(pid), "the first daemon died");
    assert_eq!(daemon_pid(&a), pid, "the pid file was taken over");
    assert_eq!(std::fs::read(a.join("before")).unwrap(), content(1));
    std::fs::write(a.join("after"), content(2)).unwrap();
    fx.umount(&a, pid);
    fx.e2fsck_clean("the image after a refused second daemon");
    let pid = fx.mount(&a);
    assert_eq!(std::fs::read(a.join("before")).unwrap(), content(1));
    assert_eq!(std::fs::read(a.join("after")).unwrap(), content(2));
    fx.umount(&a, pid);
}

#[test]
fn mountinfo_shows_the_type_fuse_jbdfs() {
    let Some(_turn) = ready("mountinfo_shows_the_type_fuse_jbdfs") else {
        return;
    };
    let fx = Fixture::new("type");
    let a = fx.mnt("a");
    let pid = fx.mount(&a);
    let (fstype, source) = mount_entry(&a).expect("mounted");
    // umount(8) picks umount.fuse.jbdfs by this type; plain "fuse" would
    // unmount without waiting for the daemon.
    assert_eq!(fstype, "fuse.jbdfs");
    let canon = std::fs::canonicalize(&fx.image.path).unwrap();
    assert_eq!(Path::new(&source), canon, "the source names the image");
    fx.umount(&a, pid);
}

#[test]
fn mkfs_and_fsck_keep_off_a_mounted_image() {
    let test = "mkfs_and_fsck_keep_off_a_mounted_image";
    let Some(_turn) = ready(test) else {
        return;
    };
    let (mkfs, fsck) = match (sibling_bin("mkfs-jbdfs"), sibling_bin("fsck-jbdfs")) {
        (Ok(m), Ok(f)) => (m, f),
        (Err(e), _) | (_, Err(e)) => {
            jbdfs_testkit::require::skip(test, None, &e);
            return;
        }
    };
    let limit = Duration::from_secs(60);
    let fx = Fixture::new("tools");
    let a = fx.mnt("a");
    let pid = fx.mount(&a);
    std::fs::write(a.join("kept"), content(3)).unwrap();
    // The superblock's UUID, which a new filesystem would replace.
    let uuid = common::read_bytes(&fx.image.path, 1024 + 0x68, 16);

    for args in [&["-q", fx.image()][..], &["-F", "-F", "-q", fx.image()]] {
        let out = run_limited(&mkfs, args, limit);
        assert_eq!(out.code, Some(1), "{}", out.describe());
        for needle in [
            format!("{} is in use", fx.image()),
            format!("(pid {pid})"),
            "; will not make a filesystem here!".to_string(),
        ] {
            assert!(
                out.stderr.contains(&needle),
                "no {needle:?}:\n{}",
                out.describe()
            );
        }
    }
    assert_eq!(
        common::read_bytes(&fx.image.path, 1024 + 0x68, 16),
        uuid,
        "mkfs touched the mounted image"
    );

    for flag in ["-y", "-p", "-a", "-fy"] {
        let out = run_limited(&fsck, &[flag, fx.image()], limit);
        assert_eq!(out.code, Some(8), "{}", out.describe());
        let needle = format!("{} is in use", fx.image());
        assert!(out.stderr.contains(&needle), "{}", out.describe());
        assert!(out.stderr.contains("Cannot continue, aborting."));
    }

    // -n looks anyway, read-only, and says what it looked at.
    let out = run_limited(&fsck, &["-fn", fx.image()], limit);
    let warning = format!("Warning!  {} is in use by jbdfs (pid {pid})", fx.image());
    assert!(out.stdout.contains(&warning), "{}", out.describe());
    assert!(
        matches!(out.code, Some(0 | 4)),
        "fsck -n checks rather than refusing:\n{}",
        out.describe()
    );
    assert!(alive(pid), "the daemon died under mkfs and fsck");

    assert_eq!(std::fs::read(a.join("kept")).unwrap(), content(3));
    fx.umount(&a, pid);
    fx.e2fsck_clean("the image after mkfs and fsck were refused");
    let pid = fx.mount(&a);
    assert_eq!(std::fs::read(a.join("kept")).unwrap(), content(3));
    fx.umount(&a, pid);
}

#[test]
fn thirty_umount_mount_rounds_back_to_back() {
    let Some(_turn) = ready("thirty_umount_mount_rounds_back_to_back") else {
        return;
    };
    if !Path::new(UMOUNT_HELPER).exists() {
        eprintln!(
            "NOTE: no {UMOUNT_HELPER}: unmounting with fusermount3 and waiting for the daemon"
        );
    }
    let fx = Fixture::new("rounds");
    let a = fx.mnt("a");
    for round in 0..30 {
        // Straight after the last unmount: it must have let go already.
        let pid = fx.mount(&a);
        check_files(&a, round, pid, round);
        write_file(&a, round, pid);
        fx.umount(&a, pid);
    }
    fx.e2fsck_clean("the image after 30 rounds");
}

/// `fusermount3 -u DIR`, again while it says the mount is busy: the other
/// tests of this binary fork children that hold our descriptors on the
/// mount until they exec, which under load takes a while.
fn fusermount_u(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = common::run("fusermount3", ["-u", s(dir)]);
        if out.success() || Instant::now() > deadline || !out.stderr.contains("busy") {
            out.expect_ok();
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn remount_right_after_fusermount_waits_for_the_old_daemon() {
    let Some(_turn) = ready("remount_right_after_fusermount_waits_for_the_old_daemon") else {
        return;
    };
    let fx = Fixture::new("fusermount");
    let a = fx.mnt("a");
    let rounds = 15;
    let mut pid = fx.mount(&a);
    let mut overlapped = 0;
    for round in 0..rounds {
        write_file(&a, round, pid);
        // fusermount3 returns once the kernel lets go, with the daemon
        // still writing the image back: the next daemon must wait for it.
        fusermount_u(&a);
        let old = pid;
        if alive(old) && image_locked(&fx.image.path) {
            overlapped += 1;
        }
        let out = jbdfs(&[fx.image(), s(&a)]);
        assert!(
            out.success(),
            "round {round}: remount after fusermount3 -u:\n{}",
            out.describe()
        );
        pid = daemon_pid(&a);
        assert_ne!(pid, old, "round {round}: the old daemon still serves");
        check_files(&a, round + 1, pid, round);
    }
    eprintln!("{overlapped} of {rounds} remounts started while the old daemon held the image");
    fx.umount(&a, pid);
    fx.e2fsck_clean("the image after remounts following fusermount3 -u");
}

/// A loop device over an image, detached when dropped (the kernel does
/// so once the last holder closes it).
/// The daemon holds a block device open with O_EXCL and no lock, and
/// umount.fuse.jbdfs waited only for the lock: it returned while the
/// daemon was still closing the device, and a mount right after was
/// refused with EBUSY now and then (fstests generic/050 on a loop device).
/// It must return only once the daemon has exited.
#[test]
fn the_umount_helper_waits_for_the_daemon_of_a_block_device() {
    let Some(_turn) = ready("the_umount_helper_waits_for_the_daemon_of_a_block_device") else {
        return;
    };
    jbdfs_testkit::require!(loop);
    let helper = checkout_umount_helper();
    // Big enough that the daemon's last close of the device, which
    // flushes its cache, takes a while.
    let (fx, dev) = Fixture::on_loop_device("blockdev", 1 << 30);
    let a = fx.mnt("a");
    for round in 0..5 {
        let out = jbdfs(&[s(&dev.path), s(&a)]);
        assert!(out.success(), "round {round}: mount:\n{}", out.describe());
        let pid = daemon_pid(&a);
        // Metadata for the unmount to commit, and 64 MiB of the device in
        // the page cache for the daemon's last close to drop.
        for i in 0..100 {
            std::fs::write(a.join(format!("r{round}-{i}")), b"x").unwrap();
        }
        std::fs::write(a.join(format!("big{round}")), vec![round as u8; 64 << 20]).unwrap();
        common::run(s(&helper), [s(&a)]).expect_ok();
        assert!(
            !alive(pid),
            "round {round}: the helper returned while daemon {pid} was alive"
        );
        let excl = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_EXCL)
            .open(&dev.path);
        assert!(
            excl.is_ok(),
            "round {round}: daemon {pid} is gone but {} is held: {:?}",
            dev.path.display(),
            excl.err()
        );
    }
    drop(dev);
    fx.e2fsck_clean("the image after mounts of its loop device");
}

/// A block device set read-only (`blockdev --setro`) is opened for writing
/// by the kernel, which then refuses each write with EPERM: a read-write
/// mount of one failed at its first commit. As mount(8) does, jbdfs mounts
/// it read-only and says so, and a remount read-write is refused.
#[test]
fn a_write_protected_block_device_mounts_read_only() {
    let Some(_turn) = ready("a_write_protected_block_device_mounts_read_only") else {
        return;
    };
    jbdfs_testkit::require!(loop);
    let helper = checkout_umount_helper();
    let (fx, dev) = Fixture::on_loop_device("setro", 64 << 20);
    let a = fx.mnt("a");
    common::run("blockdev", ["--setro", s(&dev.path)]).expect_ok();
    let out = jbdfs(&[s(&dev.path), s(&a)]);
    assert!(out.success(), "mount:\n{}", out.describe());
    assert!(
        out.stderr.contains("write-protected") && out.stderr.contains("mounting read-only"),
        "the user is told: {}",
        out.describe()
    );
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let line = mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == Some(s(&a)))
        .expect("mounted");
    assert!(line.split(' ').nth(3).unwrap().starts_with("ro,"), "{line}");
    let err = std::fs::write(a.join("f"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    assert!(a.join("lost+found").is_dir(), "the filesystem reads");
    let remount = jbdfs(&[s(&dev.path), s(&a), "-o", "remount,rw"]);
    assert!(!remount.success(), "remount rw of a write-protected device");
    common::run(s(&helper), [s(&a)]).expect_ok();
    // A crash leaves the journal needing recovery. On a device that cannot
    // be written Linux refuses to mount it (the last fsync'd writes would
    // not show), but for -o ro,noload; and -o norecovery alone is taken
    // read-only first, as mount(8) retries a write-protected device.
    common::run("blockdev", ["--setrw", s(&dev.path)]).expect_ok();
    let out = jbdfs(&[s(&dev.path), s(&a)]);
    assert!(out.success(), "mount read-write:\n{}", out.describe());
    let pid = daemon_pid(&a);
    let mut f = std::fs::File::create(a.join("synced")).unwrap();
    std::io::Write::write_all(&mut f, b"in the journal").unwrap();
    f.sync_all().unwrap();
    common::run("kill", ["-9", &pid.to_string()]).expect_ok();
    assert!(
        wait_gone(pid, Duration::from_secs(10)),
        "daemon {pid} killed"
    );
    common::run("umount", ["-l", s(&a)]);
    common::run("blockdev", ["--setro", s(&dev.path)]).expect_ok();
    let refused = jbdfs(&[s(&dev.path), s(&a)]);
    assert!(
        !refused.success(),
        "a journal needing recovery on a write-protected device"
    );
    assert!(
        refused.stderr.contains("needs recovery") && refused.stderr.contains("noload"),
        "{}",
        refused.describe()
    );
    let out = jbdfs(&[s(&dev.path), s(&a), "-o", "norecovery"]);
    assert!(out.success(), "mount -o norecovery:\n{}", out.describe());
    assert!(!a.join("synced").exists(), "only the journal holds it");
    common::run(s(&helper), [s(&a)]).expect_ok();
    common::run("blockdev", ["--setrw", s(&dev.path)]).expect_ok();
    let out = jbdfs(&[s(&dev.path), s(&a)]);
    assert!(out.success(), "mount read-write:\n{}", out.describe());
    assert_eq!(std::fs::read(a.join("synced")).unwrap(), b"in the journal");
    common::run(s(&helper), [s(&a)]).expect_ok();
    drop(dev);
    fx.e2fsck_clean("a write-protected device after a read-only mount");
}

/// A block device is held with O_EXCL, not locked: a mount right after
/// `fusermount3 -u` (which does not wait for the daemon) met EBUSY while
/// the old daemon was still writing the image back (fstests generic/604 on
/// a loop device). It now waits for the device as it waits for an image
/// file's lock, and still refuses at once a device mounted elsewhere.
#[test]
fn a_block_device_remounted_at_once_waits_for_the_old_daemon() {
    let Some(_turn) = ready("a_block_device_remounted_at_once_waits_for_the_old_daemon") else {
        return;
    };
    jbdfs_testkit::require!(loop);
    let (fx, dev) = Fixture::on_loop_device("busydev", 256 << 20);
    let (a, b) = (fx.mnt("a"), fx.mnt("b"));
    let helper = checkout_umount_helper();
    for round in 0..3 {
        let out = jbdfs(&[s(&dev.path), s(&a)]);
        assert!(out.success(), "round {round}: mount:\n{}", out.describe());
        let elsewhere = jbdfs(&[s(&dev.path), s(&b)]);
        assert!(!elsewhere.success(), "a second mount of a mounted device");
        assert!(
            elsewhere.stderr.contains("mounted on"),
            "{}",
            elsewhere.describe()
        );
        for i in 0..200 {
            std::fs::write(a.join(format!("r{round}-{i}")), vec![i as u8; 8192]).unwrap();
        }
        common::run("fusermount3", ["-u", s(&a)]).expect_ok();
        let again = jbdfs(&[s(&dev.path), s(&a)]);
        assert!(
            again.success(),
            "round {round}: mount at once:\n{}",
            again.describe()
        );
        assert_eq!(
            std::fs::read(a.join(format!("r{round}-199"))).unwrap(),
            vec![199u8; 8192]
        );
        common::run(s(&helper), [s(&a)]).expect_ok();
    }
    drop(dev);
    fx.e2fsck_clean("a device mounted again at once, three times");
}
