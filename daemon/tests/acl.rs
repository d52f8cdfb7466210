// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! POSIX ACLs through the jbdfs daemon, with Linux's ext3 (a loop mount of
//! the same image) as the oracle: ACLs set on either side read back the
//! same on the other (`getfacl`), the same setfacl/chmod/create sequence
//! gives the same ACLs and modes on both (inheritance of default ACLs,
//! masks, chmod, ACLs equivalent to a mode, the setgid rule), both enforce
//! them for a named user, a named group and a mask, `noacl` turns them
//! off, and e2fsck finds the image clean after each side.
//!
//! Needs root, /dev/fuse, loop devices and the `acl` package (setfacl,
//! getfacl); skipped loudly without them, and failed instead when CI is
//! set.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use jbdfs_testkit as common;
use jbdfs_testkit::daemon as daemon_common;

use common::{run, LoopMount, Out};
use daemon_common::Daemon;
use jbdfs_testkit::require::Need;

/// One test at a time: each mounts the daemon and a loop device.
static SERIAL: Mutex<()> = Mutex::new(());

/// Whether these tests can run here: FUSE, loop mounts and the ACL tools
/// (packages acl and util-linux).
fn ready(_test: &str) -> bool {
    jbdfs_testkit::require::met(&[
        Need::Fuse,
        Need::Loop,
        Need::Tool("setfacl"),
        Need::Tool("getfacl"),
        Need::Tool("setpriv"),
    ])
}
/// A fresh jbdfs image (mkfs sets the `acl` default mount option, as
/// mke2fs does) and a directory for the mount point.
fn image(tag: &str) -> (common::TempImage, common::TempDir) {
    let options = jbdfs::mkfs::MkfsOptions {
        block_size: Some(1024),
        ..Default::default()
    };
    let img = common::jbdfs_image_with(tag, options, 32 << 20);
    let dir = common::TempDir::new(tag);
    std::fs::create_dir(dir.path.join("mnt")).unwrap();
    (img, dir)
}

fn mount_jbdfs(img: &Path, mnt: &Path, opts: &str) -> Daemon {
    let opts = match opts {
        "" => "allow_other".to_string(),
        o => format!("allow_other,{o}"),
    };
    Daemon::start(img, mnt, &opts, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("mount jbdfs -o {opts}: {e:?}"))
}

fn stop_jbdfs(d: Daemon, img: &Path) {
    let exited = d.stop();
    assert!(exited.status.success(), "jbdfs exited badly: {exited:?}");
    common::assert_e2fsck_clean(img, "the image after jbdfs");
}

fn mount_linux(img: &Path) -> LoopMount {
    LoopMount::mount(img).unwrap_or_else(|o| panic!("loop mount:\n{}", o.describe()))
}

fn stop_linux(mut m: LoopMount, img: &Path) {
    let o = m.umount();
    assert!(o.success(), "umount:\n{}", o.describe());
    common::assert_e2fsck_clean(img, "the image after Linux");
}

/// Runs a shell script in `dir` as root.
fn sh_in(dir: &Path, script: &str) -> Out {
    run("sh", ["-c", &format!("cd '{}' && {script}", dir.display())])
}

/// Runs a shell command in `dir` as `uid`:`gid` with only the given
/// supplementary groups (none when empty) and no capabilities.
fn as_user(dir: &Path, uid: u32, gid: u32, groups: &str, cmd: &str) -> Out {
    let groups = match groups {
        "" => "--clear-groups".to_string(),
        g => format!("--groups={g}"),
    };
    run(
        "setpriv",
        [
            &format!("--reuid={uid}"),
            &format!("--regid={gid}"),
            &groups,
            "sh",
            "-c",
            &format!("cd '{}' && {cmd}", dir.display()),
        ],
    )
}

/// `getfacl -R` of `dir`, one block per file, in name order (the two
/// filesystems list directories in different orders).
fn acls(dir: &Path) -> Vec<String> {
    let o = sh_in(dir, "getfacl -R .").expect_ok();
    let mut blocks: Vec<String> = o
        .stdout
        .split("\n\n")
        .map(|b| b.trim().to_string())
        .filter(|b| !b.is_empty())
        .collect();
    blocks.sort();
    blocks
}

/// Panics naming the files whose `getfacl` blocks differ, if any do.
fn assert_same_acls(left: &[String], right: &[String], what: &str) {
    let only = |a: &[String], b: &[String]| -> Vec<String> {
        a.iter().filter(|x| !b.contains(x)).cloned().collect()
    };
    let (l, r) = (only(left, right), only(right, left));
    assert!(
        l.is_empty() && r.is_empty(),
        "{what}:\n--- only on the first ---\n{}\n--- only on the second ---\n{}",
        l.join("\n\n"),
        r.join("\n\n")
    );
}

/// What the ACL tests do on each side, as root with umask 022 (and 077
/// once): named users and groups, a mask, an ACL equivalent to the mode
/// (stored as the mode alone), chmod of a file with an ACL, removal, a
/// large ACL (in an xattr block), the setgid bit of a file whose owner is
/// not in its group, and default ACLs inherited by files, directories,
/// subdirectories, a fifo, a symlink and under another umask.
const SCENARIO: &str = "set -e
umask 022
touch named; setfacl -m u:daemon:rw,u:nobody:-,g:bin:r,g:sys:rwx named
touch masked; setfacl -m u:daemon:rwx,m::r masked
touch equiv; setfacl -m u::rwx,g::r-x,o::r-- equiv
touch chmodded; setfacl -m u:daemon:rw chmodded; chmod 640 chmodded
touch removed; setfacl -m u:daemon:r removed; setfacl -b removed
touch big; setfacl -m \"$(seq -s, -f 'u:%g:r' 1000 1040)\" big
touch sg; chown nobody sg; chmod 2775 sg
setpriv --reuid=65534 --regid=65534 --clear-groups setfacl -m u:daemon:r sg
mkdir dflt; setfacl -m d:u:daemon:rwx,d:g:bin:rx,d:m::rwx,d:o::- dflt
touch dflt/file; mkdir dflt/sub; touch dflt/sub/deep; mkdir -m 700 dflt/priv
mkfifo dflt/fifo; ln -s file dflt/sym
umask 077; touch dflt/u077; mkdir dflt/u077d; umask 022
mkdir minimal; setfacl -m d:u::rwx,d:g::r-x,d:o::- minimal; touch minimal/f; mkdir minimal/d
mkdir both; setfacl -m u:daemon:rx,d:u:daemon:rwx both; chmod 701 both
mkdir gone; setfacl -m d:u:daemon:r gone; setfacl -k gone; touch gone/f
";

/// The files of [`SCENARIO`] that must end with no ACL xattr at all:
/// their ACLs say no more than their modes.
const NO_XATTR: &[&str] = &["equiv", "removed", "minimal/f", "gone/f", "dflt/sym"];

/// Files whose ACLs the enforcement checks rely on, made as root.
const ENFORCED: &str = "set -e
umask 022
echo data > user_denied; setfacl -m u:nobody:- user_denied
echo data > group_allowed; chmod 640 group_allowed; setfacl -m g:bin:r group_allowed
echo data > masked; chmod 600 masked; setfacl -m u:daemon:rw,m::r masked
mkdir dir; chmod 700 dir; setfacl -m u:nobody:x dir; echo data > dir/inner
";

const NOBODY: u32 = 65534;
const DAEMON: u32 = 1;
const BIN_GROUP: &str = "2";

/// Checks the ACLs of [`ENFORCED`] in `dir` against other users: a named
/// user denied where "other" would allow, a named group allowed where
/// "other" would deny, a mask limiting a named user, and search access
/// to a directory granted to one user.
fn check_enforced(dir: &Path, side: &str) {
    #[rustfmt::skip]
    let checks: &[(&str, u32, &str, &str, bool)] = &[
        ("named user denied", NOBODY, "", "cat user_denied", false),
        ("others still read", DAEMON, "", "cat user_denied", true),
        ("named group allowed", NOBODY, BIN_GROUP, "cat group_allowed", true),
        ("outside the group", NOBODY, "", "cat group_allowed", false),
        ("mask lets read", DAEMON, "", "cat masked", true),
        ("mask stops write", DAEMON, "", "echo x >> masked", false),
        ("no entry, no access", NOBODY, "", "cat masked", false),
        ("search granted", NOBODY, "", "cat dir/inner", true),
        ("read not granted", NOBODY, "", "ls dir", false),
        ("others no search", DAEMON, "", "cat dir/inner", false),
    ];
    for &(what, uid, groups, cmd, allowed) in checks {
        let o = as_user(dir, uid, uid, groups, cmd);
        assert_eq!(
            o.success(),
            allowed,
            "{side}: {what}: expected {}:\n{}",
            if allowed { "success" } else { "EACCES" },
            o.describe()
        );
        if !allowed {
            assert!(
                o.stderr.contains("Permission denied"),
                "{side}: {what}:\n{}",
                o.describe()
            );
        }
    }
}

/// The ACLs of `names` (paths under `top` in the image) as debugfs sees
/// them on disk: which of them still have an ACL xattr.
fn with_acl_xattr(img: &Path, top: &str, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .filter(|n| {
            let o = common::debugfs(img, &format!("ea_list {top}/{n}"));
            o.stdout.contains("posix_acl")
        })
        .map(|n| format!("{top}/{n}"))
        .collect()
}

#[test]
fn acls_agree_with_linux_both_ways() {
    let test = "acls_agree_with_linux_both_ways";
    if !ready(test) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (img, dir) = image("acl-agree");
    let mnt = dir.path.join("mnt");

    // Set through jbdfs.
    let d = mount_jbdfs(&img.path, &mnt, "");
    std::fs::create_dir(mnt.join("j")).unwrap();
    sh_in(&mnt.join("j"), SCENARIO).expect_ok();
    let by_jbdfs = acls(&mnt.join("j"));
    stop_jbdfs(d, &img.path);
    assert_eq!(
        with_acl_xattr(&img.path, "j", NO_XATTR),
        Vec::<String>::new()
    );

    // Read by Linux, and the same scenario done by Linux.
    let _loop = common::LOOP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let linux = mount_linux(&img.path);
    let read_by_linux = acls(&linux.path().join("j"));
    assert_same_acls(
        &by_jbdfs,
        &read_by_linux,
        "Linux reads jbdfs's ACLs differently",
    );
    std::fs::create_dir(linux.path().join("k")).unwrap();
    sh_in(&linux.path().join("k"), SCENARIO).expect_ok();
    let by_linux = acls(&linux.path().join("k"));
    stop_linux(linux, &img.path);
    assert_same_acls(
        &by_jbdfs,
        &by_linux,
        "the same setfacl, chmod and create sequence gives other ACLs on jbdfs (first) than on Linux",
    );
    assert_eq!(
        with_acl_xattr(&img.path, "k", NO_XATTR),
        Vec::<String>::new()
    );
    // Sanity: the scenario did make ACLs, some in an xattr block.
    let stat = common::debugfs(&img.path, "stat j/big").expect_ok();
    assert!(!stat.stdout.contains("File ACL: 0"), "{}", stat.stdout);
    assert!(by_jbdfs
        .iter()
        .any(|b| b.contains("default:user:daemon:rwx")));

    // Linux's ACLs read through jbdfs.
    let d = mount_jbdfs(&img.path, &mnt, "");
    let read_by_jbdfs = acls(&mnt.join("k"));
    assert_same_acls(
        &by_linux,
        &read_by_jbdfs,
        "jbdfs reads Linux's ACLs differently",
    );
    assert_same_acls(&by_jbdfs, &acls(&mnt.join("j")), "jbdfs's own ACLs changed");
    stop_jbdfs(d, &img.path);
}

#[test]
fn acls_are_enforced_on_both_sides() {
    let test = "acls_are_enforced_on_both_sides";
    if !ready(test) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (img, dir) = image("acl-enforce");
    let mnt = dir.path.join("mnt");

    // Set by jbdfs, enforced by jbdfs, then by Linux.
    let d = mount_jbdfs(&img.path, &mnt, "");
    std::fs::create_dir(mnt.join("j")).unwrap();
    sh_in(&mnt.join("j"), ENFORCED).expect_ok();
    check_enforced(&mnt.join("j"), "jbdfs on jbdfs's ACLs");
    stop_jbdfs(d, &img.path);

    let _loop = common::LOOP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let linux = mount_linux(&img.path);
    check_enforced(&linux.path().join("j"), "Linux on jbdfs's ACLs");
    // Set by Linux, enforced by Linux, then by jbdfs.
    std::fs::create_dir(linux.path().join("k")).unwrap();
    sh_in(&linux.path().join("k"), ENFORCED).expect_ok();
    check_enforced(&linux.path().join("k"), "Linux on Linux's ACLs");
    stop_linux(linux, &img.path);

    let d = mount_jbdfs(&img.path, &mnt, "");
    check_enforced(&mnt.join("k"), "jbdfs on Linux's ACLs");
    // A chmod through jbdfs reaches the ACL's mask: the named group loses
    // its read, as on Linux.
    sh_in(&mnt.join("k"), "chmod 600 group_allowed").expect_ok();
    let o = as_user(
        &mnt.join("k"),
        NOBODY,
        NOBODY,
        BIN_GROUP,
        "cat group_allowed",
    );
    assert!(
        !o.success(),
        "chmod did not reach the mask:\n{}",
        o.describe()
    );
    stop_jbdfs(d, &img.path);
}

#[test]
fn noacl_turns_acls_off_as_in_ext3() {
    let test = "noacl_turns_acls_off_as_in_ext3";
    if !ready(test) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (img, dir) = image("acl-noacl");
    let mnt = dir.path.join("mnt");
    let d = mount_jbdfs(&img.path, &mnt, "");
    sh_in(
        &mnt,
        "set -e; echo data > f; setfacl -m u:nobody:- f; mkdir d; setfacl -m d:u:daemon:rwx d",
    )
    .expect_ok();
    stop_jbdfs(d, &img.path);

    let d = mount_jbdfs(&img.path, &mnt, "noacl");
    // Neither stored nor enforced: the names are not supported.
    let o = sh_in(&mnt, "setfacl -m u:daemon:r f");
    assert!(
        !o.success() && o.stderr.contains("Operation not supported"),
        "{}",
        o.describe()
    );
    let o = sh_in(&mnt, "getfacl -c f").expect_ok();
    assert!(!o.stdout.contains("nobody"), "{}", o.describe());
    as_user(&mnt, NOBODY, NOBODY, "", "cat f").expect_ok();
    // The umask applies and nothing is inherited.
    sh_in(&mnt, "set -e; umask 027; mkdir d/sub; touch d/file").expect_ok();
    let modes = sh_in(&mnt, "stat -c '%a %n' d/sub d/file").expect_ok();
    assert_eq!(modes.stdout, "750 d/sub\n640 d/file\n");
    stop_jbdfs(d, &img.path);

    // With ACLs back on: the old ones are there, the new inodes have none.
    let d = mount_jbdfs(&img.path, &mnt, "acl");
    let o = sh_in(&mnt, "getfacl -c f d/sub d/file").expect_ok();
    assert!(o.stdout.contains("user:nobody:---"), "{}", o.describe());
    assert!(!o.stdout.contains("daemon"), "{}", o.describe());
    stop_jbdfs(d, &img.path);
}
