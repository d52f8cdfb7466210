// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! The jbdfs daemon's command line as mount.fuse3 and fstab users meet it:
//! help, option errors named by option, and the argument orders mount helpers use.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use jbdfs_testkit as common;
use jbdfs_testkit::daemon as daemon_common;

use daemon_common::{transport, Daemon, TestTransport};

fn jbdfs(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_jbdfs"))
        .args(args)
        // The test must not depend on the caller's log settings.
        .env_remove("RUST_LOG")
        .output()
        .expect("run jbdfs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A real image file and mount point, so only the thing under test can fail.
struct Fixture {
    dir: PathBuf,
}

impl Fixture {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("jbdfs-cli-{name}-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("mnt")).unwrap();
        std::fs::write(dir.join("image"), [0u8; 4096]).unwrap();
        Fixture { dir }
    }

    fn image(&self) -> String {
        self.dir.join("image").display().to_string()
    }

    fn mnt(&self) -> String {
        self.dir.join("mnt").display().to_string()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Got as far as reading the (deliberately blank) image: every argument
/// was accepted, and the bad image is refused with a clear message.
fn assert_accepted(out: &Output) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot mount"), "{err}");
}

#[test]
fn help_lists_flags_and_exits_zero() {
    let out = jbdfs(&["--help"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in ["-f", "-o", "-d", "-s", "SOURCE", "MOUNTPOINT", "bdelay="] {
        assert!(text.contains(needle), "help lacks {needle}:\n{text}");
    }
}

#[test]
fn version_exits_zero() {
    let out = jbdfs(&["--version"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("jbdfs "));
}

#[test]
fn unknown_option_is_named() {
    let fx = Fixture::new("unknown");
    let out = jbdfs(&[&fx.image(), &fx.mnt(), "-o", "noatime,frobnicate"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("jbdfs: unknown mount option \"frobnicate\""),
        "{err}"
    );
}

#[test]
fn bad_bdelay_is_named() {
    let fx = Fixture::new("bdelay");
    let out = jbdfs(&[&fx.image(), &fx.mnt(), "-o", "bdelay=bogus"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with("jbdfs: "), "{err}");
    assert!(err.contains("bdelay") && err.contains("bogus"), "{err}");
}

#[test]
fn missing_source_argument_is_a_usage_error() {
    let out = jbdfs(&["-o", "ro"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("SOURCE"), "{err}");
}

#[test]
fn nonexistent_source_is_reported() {
    let fx = Fixture::new("nosource");
    let missing = fx.dir.join("no-such-image").display().to_string();
    let out = jbdfs(&[&missing, &fx.mnt()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("jbdfs: SOURCE") && err.contains("no-such-image"),
        "{err}"
    );
}

#[test]
fn source_must_not_be_a_directory() {
    let fx = Fixture::new("dirsource");
    let out = jbdfs(&[&fx.mnt(), &fx.mnt()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("neither a regular file nor a block device"),
        "{err}"
    );
}

#[test]
fn mountpoint_must_be_a_directory() {
    let fx = Fixture::new("filemnt");
    let out = jbdfs(&[&fx.image(), &fx.image()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("MOUNTPOINT") && err.contains("not a directory"),
        "{err}"
    );
}

#[test]
fn options_after_positionals_as_mount_fuse3_passes_them() {
    let fx = Fixture::new("after");
    let out = jbdfs(&[
        &fx.image(),
        &fx.mnt(),
        "-o",
        "rw,nosuid,nodev",
        "-o",
        "data=journal",
    ]);
    assert_accepted(&out);
}

#[test]
fn options_before_positionals() {
    let fx = Fixture::new("before");
    let out = jbdfs(&["-o", "bdelay=1,noatime", "-f", "-s", &fx.image(), &fx.mnt()]);
    assert_accepted(&out);
}

#[test]
fn options_between_positionals_and_attached_form() {
    let fx = Fixture::new("between");
    let out = jbdfs(&[
        &fx.image(),
        "-obdelay=yield",
        &fx.mnt(),
        "-o",
        "_netdev,x-systemd.automount",
    ]);
    assert_accepted(&out);
}

#[test]
fn debug_flag_turns_on_debug_logging() {
    let fx = Fixture::new("debug");
    let out = jbdfs(&["-d", &fx.image(), &fx.mnt(), "-o", "threads=4"]);
    assert_accepted(&out);
    let err = stderr(&out);
    assert!(
        err.contains("parsed mount options") && err.contains("threads: 4"),
        "{err}"
    );
}

#[test]
fn options_are_quiet_without_debug() {
    let fx = Fixture::new("quiet");
    let out = jbdfs(&[&fx.image(), &fx.mnt()]);
    assert_accepted(&out);
    assert!(!stderr(&out).contains("parsed mount options"));
}

#[test]
fn ext4_images_are_refused_naming_the_features() {
    jbdfs_testkit::require!("mke2fs");
    let fx = Fixture::new("ext4");
    let img = fx.image();
    std::fs::write(&img, []).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.set_len(32 << 20).unwrap();
    let made = Command::new("mke2fs")
        .args(["-q", "-F", "-t", "ext4", &img])
        .status();
    assert!(
        made.map(|s| s.success()).unwrap_or(false),
        "mke2fs -t ext4 failed"
    );
    let out = jbdfs(&["-f", &img, &fx.mnt()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("unsupported filesystem features"), "{err}");
    assert!(err.contains("extent"), "{err}");
}

/// `jbdfs --generate-man DIR` writes jbdfs.8: valid roff that man -l
/// renders, naming every flag and every mount option of --help.
#[test]
fn man_page_names_every_flag_and_mount_option() {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_jbdfs"));
    jbdfs_man::check_binary(bin, "jbdfs").unwrap();
}

/// A fresh 64 MiB image (4 KiB blocks) and a directory holding a mount
/// point `mnt`, both removed on drop.
fn image_and_dir(tag: &str) -> (common::TempImage, common::TempDir) {
    let options = jbdfs::mkfs::MkfsOptions {
        block_size: Some(4096),
        ..Default::default()
    };
    let img = common::jbdfs_image_with(tag, options, 64 << 20);
    let dir = common::TempDir::new(tag);
    std::fs::create_dir(dir.path.join("mnt")).unwrap();
    (img, dir)
}

/// Some work through the mount, read back.
fn exercise(mnt: &Path) {
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 249) as u8).collect();
    let f = mnt.join("file");
    std::fs::write(&f, &data).unwrap();
    std::fs::File::open(&f).unwrap().sync_all().unwrap();
    std::fs::create_dir(mnt.join("dir")).unwrap();
    std::fs::rename(&f, mnt.join("dir/moved")).unwrap();
    assert_eq!(std::fs::read(mnt.join("dir/moved")).unwrap(), data);
}

/// The stats file's last line.
fn transport_line(stats: &Path) -> String {
    let text =
        std::fs::read_to_string(stats).unwrap_or_else(|e| panic!("{}: {e}", stats.display()));
    text.lines().last().unwrap_or_default().to_string()
}

/// The stats file's last line proves which transport served a mount: with
/// JBDFS_TEST_TRANSPORT=io_uring the mount is `-o stats=PATH,io_uring` and
/// must say `transport: io_uring, N queues, depth 8` (N the possible CPUs),
/// with no fallback warning; otherwise `transport: /dev/fuse, 8 workers`.
#[test]
fn the_stats_file_names_the_transport_that_served() {
    jbdfs_testkit::require!(fuse);
    let t = transport();
    let (img, dir) = image_and_dir("cli-transport");
    let mnt = dir.path.join("mnt");
    let stats = dir.path.join("stats");
    let opts = format!("stats={}", stats.display());
    let d = Daemon::start(&img.path, &mnt, &opts, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("mount with -o {}: {e:?}", t.with(&opts)));
    exercise(&mnt);
    let exited = d.stop();
    assert!(exited.status.success(), "{:?}", exited);
    assert_eq!(
        transport_line(&stats),
        t.stats_line(8),
        "-o {}; daemon stderr:\n{}",
        t.with(&opts),
        exited.stderr
    );
    if t == TestTransport::IoUring {
        assert!(
            !exited.stderr.contains("enable_uring") && !exited.stderr.contains("/dev/fuse"),
            "io_uring was granted, yet the daemon warned of a fallback:\n{}",
            exited.stderr
        );
    }
    common::assert_e2fsck_clean(
        &img.path,
        "the image after a mount over the run's transport",
    );
}

/// Rings that sleep as soon as they have answered (`io_uring_poll_us=0`)
/// and rings that poll for the longest the option allows serve the same:
/// files written and fsync'd from two threads at once read back whole, the
/// stats line names the polling, unmount ends the polling queues, and
/// e2fsck finds the image clean. Only the io_uring pass runs it.
#[test]
fn rings_serve_alike_whether_they_poll_or_sleep_at_once() {
    let test = "rings_serve_alike_whether_they_poll_or_sleep_at_once";
    jbdfs_testkit::require!(fuse);
    if transport() != TestTransport::IoUring {
        jbdfs_testkit::require::not_this_pass(
            test,
            "the polling of rings is an io_uring option (JBDFS_TEST_TRANSPORT=io_uring)",
        );
        return;
    }
    for poll_us in [0, 10_000] {
        let (img, dir) = image_and_dir(&format!("cli-poll-{poll_us}"));
        let mnt = dir.path.join("mnt");
        let stats = dir.path.join("stats");
        let opts = format!("stats={},io_uring_poll_us={poll_us}", stats.display());
        let d = Daemon::start(&img.path, &mnt, &opts, Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("mount with -o {opts}: {e:?}"));
        let writers: Vec<_> = (0..2)
            .map(|t| {
                let dir = mnt.join(format!("t{t}"));
                std::thread::spawn(move || {
                    std::fs::create_dir(&dir).unwrap();
                    for i in 0..100u32 {
                        let body = format!("{t}:{i}:").repeat(100 + i as usize);
                        let path = dir.join(format!("f{i}"));
                        std::fs::write(&path, &body).unwrap();
                        std::fs::File::open(&path).unwrap().sync_all().unwrap();
                        assert_eq!(std::fs::read_to_string(&path).unwrap(), body);
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        let exited = d.stop();
        assert!(exited.status.success(), "-o {opts}: {exited:?}");
        let line = transport_line(&stats);
        assert!(
            line.starts_with("transport: io_uring, ")
                && line.ends_with(&format!(", poll {poll_us}us")),
            "-o {opts}: the stats file ends with {line:?}"
        );
        common::assert_e2fsck_clean(&img.path, &format!("the image after -o {opts}"));
    }
}

/// `-o io_uring` with the kernel's enable_uring off: the daemon warns once,
/// naming the parameter, and serves over /dev/fuse; without the option it
/// serves over /dev/fuse without a word. Where enable_uring is on,
/// only the io_uring pass (JBDFS_TEST_TRANSPORT=io_uring, as scripts/test.sh
/// runs it) turns it off for the test, waiting for every io_uring mount of
/// the tests first and keeping them out meanwhile, and puts it back.
#[test]
fn io_uring_with_enable_uring_off_warns_once_and_serves_over_dev_fuse() {
    let test = "io_uring_with_enable_uring_off_warns_once_and_serves_over_dev_fuse";
    jbdfs_testkit::require!(fuse);
    // Decided before the switch is locked: transport() reads it under a
    // shared lock, which would wait for ours.
    let run = transport();
    if daemon_common::uring_switch().as_deref() == Some("Y") && run != TestTransport::IoUring {
        // Not a missing facility: this pass is not the one that runs it.
        jbdfs_testkit::require::not_this_pass(
            test,
            &format!(
                "{} is on, and only the io_uring pass turns it off \
                 (JBDFS_TEST_TRANSPORT=io_uring)",
                daemon_common::ENABLE_URING
            ),
        );
        return;
    }
    let off = match daemon_common::uring_switched_off() {
        Ok(off) => off,
        Err(why) => {
            jbdfs_testkit::require::skip(test, None, &why);
            return;
        }
    };
    assert_ne!(daemon_common::uring_switch().as_deref(), Some("Y"));
    let (img, dir) = image_and_dir("cli-uring-off");
    let mnt = dir.path.join("mnt");
    let stats = dir.path.join("stats");
    let opts = format!("io_uring,stats={}", stats.display());
    let d = Daemon::start_exactly(&img.path, &mnt, &opts, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("-o {opts} with enable_uring off did not mount: {e:?}"));
    exercise(&mnt);
    let exited = d.stop();
    assert!(exited.status.success(), "{:?}", exited);
    assert_eq!(
        transport_line(&stats),
        TestTransport::DevFuse.stats_line(8),
        "daemon stderr:\n{}",
        exited.stderr
    );
    let named: Vec<&str> = exited
        .stderr
        .lines()
        .filter(|l| l.contains("enable_uring"))
        .collect();
    assert_eq!(
        named.len(),
        1,
        "one line naming enable_uring; stderr:\n{}",
        exited.stderr
    );
    assert!(named[0].contains("WARN"), "{}", named[0]);
    common::assert_e2fsck_clean(&img.path, "the image after a fallback to /dev/fuse");

    // The default (neither io_uring nor noio_uring) falls back quietly.
    let opts = format!("stats={}", stats.display());
    let d = Daemon::start_exactly(&img.path, &mnt, &opts, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("-o {opts} with enable_uring off did not mount: {e:?}"));
    exercise_again(&mnt);
    let exited = d.stop();
    drop(off);
    assert!(exited.status.success(), "{:?}", exited);
    assert_eq!(
        transport_line(&stats),
        TestTransport::DevFuse.stats_line(8),
        "the default with enable_uring off; daemon stderr:\n{}",
        exited.stderr
    );
    assert!(
        !exited.stderr.contains("enable_uring"),
        "the default transport warned:\n{}",
        exited.stderr
    );
    common::assert_e2fsck_clean(&img.path, "the image after the default transport");
}

/// What [`exercise`] left, read back and removed.
fn exercise_again(mnt: &Path) {
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 249) as u8).collect();
    assert_eq!(std::fs::read(mnt.join("dir/moved")).unwrap(), data);
    std::fs::remove_file(mnt.join("dir/moved")).unwrap();
    std::fs::remove_dir(mnt.join("dir")).unwrap();
}

/// Neither `-o io_uring` nor `-o noio_uring`: the daemon serves over
/// io_uring when enable_uring is on and over /dev/fuse when it is off,
/// without a warning either way.
#[test]
fn the_default_transport_follows_enable_uring() {
    jbdfs_testkit::require!(fuse);
    // The switch stays as it is while mounted.
    let _turn = daemon_common::switch_turn();
    let on = daemon_common::uring_switch().as_deref() == Some("Y");
    let expected = match on {
        true => TestTransport::IoUring,
        false => TestTransport::DevFuse,
    };
    let (img, dir) = image_and_dir("cli-default");
    let mnt = dir.path.join("mnt");
    let stats = dir.path.join("stats");
    let opts = format!("stats={}", stats.display());
    let d = Daemon::start_exactly(&img.path, &mnt, &opts, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("mount with -o {opts}: {e:?}"));
    exercise(&mnt);
    let exited = d.stop();
    assert!(exited.status.success(), "{:?}", exited);
    assert_eq!(
        transport_line(&stats),
        expected.stats_line(8),
        "enable_uring {}; daemon stderr:\n{}",
        if on { "on" } else { "off" },
        exited.stderr
    );
    assert!(
        !exited.stderr.contains("enable_uring"),
        "the default transport warned:\n{}",
        exited.stderr
    );
    common::assert_e2fsck_clean(&img.path, "the image after the default transport");
}

/// The ordinary user the user-mount test runs as (nobody).
const USER: u32 = 65534;

/// A command run as [`USER`], with its runtime directory `runtime`.
fn as_user(runtime: &Path) -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "env"])
        .arg(format!("XDG_RUNTIME_DIR={}", runtime.display()))
        .env_remove("RUST_LOG");
    c
}

fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(uid))
        .unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
}

/// Lets [`USER`] open /dev/fuse, as a normal host's mode 0666 does, where
/// a container leaves it 0600: an ACL entry for the test's user, removed
/// on drop. `None` when that cannot be done.
struct FuseForUser {
    added: bool,
    /// /dev/fuse had no ACL before: remove it whole (-x leaves the mask).
    had_none: bool,
}

impl FuseForUser {
    fn grant() -> Option<FuseForUser> {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata("/dev/fuse").ok()?.permissions().mode();
        if mode & 0o006 == 0o006 {
            return Some(FuseForUser {
                added: false,
                had_none: false,
            });
        }
        let had_none = Command::new("getfacl")
            .args(["--skip-base", "--absolute-names", "/dev/fuse"])
            .output()
            .is_ok_and(|o| o.status.success() && o.stdout.iter().all(u8::is_ascii_whitespace));
        let ok = Command::new("setfacl")
            .args(["-m", "u:65534:rw", "/dev/fuse"])
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(FuseForUser {
            added: true,
            had_none,
        })
    }
}

impl Drop for FuseForUser {
    fn drop(&mut self) {
        if self.added {
            let args: &[&str] = if self.had_none {
                &["-b", "/dev/fuse"]
            } else {
                &["-x", "u:65534", "/dev/fuse"]
            };
            let _ = Command::new("setfacl").args(args).status();
        }
    }
}

/// Issue 45: an ordinary user's mount (fusermount3, no root; /dev/fuse
/// opened to the user with an ACL where a container leaves it 0600) prints
/// nothing, puts its pid file in `$XDG_RUNTIME_DIR/jbdfs/`, and both
/// `fusermount3 -u` and umount.fuse.jbdfs (which finds the pid there and
/// waits for the write-back) leave the image clean.
#[test]
fn an_ordinary_users_mount_is_quiet_and_unmounts_clean() {
    jbdfs_testkit::require!(fuse, e2fsprogs, "setpriv", "fusermount3", "setfacl");
    let fuse_access = FuseForUser::grant();
    jbdfs_testkit::require!(
        (common::require::Need::That(
            fuse_access.is_some(),
            "/dev/fuse is not open to other users and takes no ACL".into()
        ))
    );
    let _turn = daemon_common::switch_turn();
    // The image's root directory is the user's (mkfs.jbdfs -E root_owner).
    let options = jbdfs::mkfs::MkfsOptions {
        block_size: Some(4096),
        root_owner: Some((USER, USER)),
        ..Default::default()
    };
    let img = common::jbdfs_image_with("cli-user", options, 64 << 20);
    let dir = common::TempDir::new("cli-user");
    let mnt = dir.path.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let runtime = dir.path.join("run");
    std::fs::create_dir(&runtime).unwrap();
    for p in [&dir.path, &mnt, &runtime, &img.path] {
        chown(p, USER);
    }
    std::fs::set_permissions(
        &runtime,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let canon = std::fs::canonicalize(&mnt).unwrap();
    let name: String = canon
        .to_string_lossy()
        .chars()
        .map(|c| if c == '/' { '_' } else { c })
        .collect();
    let pid_file = runtime.join("jbdfs").join(format!("{name}.pid"));
    let helper = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/umount.fuse.jbdfs");

    for unmount in ["fusermount3", "umount.fuse.jbdfs"] {
        let mut child = as_user(&runtime)
            .arg(daemon_common::jbdfs_bin())
            .arg("-f")
            .arg(&img.path)
            .arg(&mnt)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let _guard = daemon_common::UnmountOnDrop(mnt.clone());
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !daemon_common::is_fuse_mounted(&canon) {
            if let Some(status) = child.try_wait().unwrap() {
                let out = child.wait_with_output().unwrap();
                panic!("the user's mount failed ({status}): {}", stderr(&out));
            }
            assert!(std::time::Instant::now() < deadline, "no mount");
            std::thread::sleep(Duration::from_millis(20));
        }
        let pid = std::fs::read_to_string(&pid_file)
            .unwrap_or_else(|e| panic!("{}: {e}", pid_file.display()));
        assert_eq!(pid.trim(), child.id().to_string());
        let file = mnt.join(format!("by-{unmount}"));
        let out = as_user(&runtime)
            .arg("sh")
            .arg("-c")
            .arg(r#"printf 'the user wrote this\n' >"$1" && sync "$1""#)
            .arg("sh")
            .arg(&file)
            .output()
            .unwrap();
        assert!(out.status.success(), "write, fsync: {}", stderr(&out));
        let out = match unmount {
            "fusermount3" => as_user(&runtime)
                .args(["fusermount3", "-u"])
                .arg(&mnt)
                .output(),
            _ => as_user(&runtime)
                .arg("bash")
                .arg(&helper)
                .arg(&mnt)
                .output(),
        }
        .unwrap();
        assert!(out.status.success(), "{unmount}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{unmount} said something");
        if unmount == "umount.fuse.jbdfs" {
            // The helper returns once the daemon has let the image go.
            common::assert_e2fsck_clean(&img.path, "as umount.fuse.jbdfs returns");
        }
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(stderr(&out), "", "a user's mount says nothing");
        assert!(out.stdout.is_empty(), "{:?}", out.stdout);
        assert!(!pid_file.exists(), "{} left behind", pid_file.display());
        common::assert_e2fsck_clean(&img.path, &format!("after {unmount}"));
    }
    let d = Daemon::start_exactly(&img.path, &mnt, "ro", Duration::from_secs(30)).unwrap();
    for unmount in ["fusermount3", "umount.fuse.jbdfs"] {
        let got = std::fs::read_to_string(mnt.join(format!("by-{unmount}"))).unwrap();
        assert_eq!(got, "the user wrote this\n");
    }
    d.stop_ok();
}
