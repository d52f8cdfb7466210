// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! Access times as ext3 keeps them (issue 18, atime): fstests generic/003's
//! sequence, and the same sequence run by Linux's ext3 on the same kind of
//! image, under relatime (the default), strictatime, noatime and
//! nodiratime, must move atime at the same steps.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use jbdfs_testkit as common;
use jbdfs_testkit::daemon as daemon_common;

use daemon_common::Daemon;

fn atime(p: &Path) -> (i64, i64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).unwrap();
    (m.atime(), m.atime_nsec())
}

/// Past the one-second granularity some steps compare at.
fn tick() {
    std::thread::sleep(Duration::from_millis(1100));
}

/// Runs the sequence in `mnt`; returns, per step, whether atime moved:
/// first read of a new file, second read, listing a directory after a
/// file was made in it, read after a rewrite, open for writing only, open
/// for reading and writing with no read (xfs_io's fsync, generic/392),
/// and a read through such an open after a rewrite.
fn sequence(mnt: &Path) -> Vec<(&'static str, bool)> {
    let dir = mnt.join("d");
    std::fs::create_dir(&dir).unwrap();
    let f = dir.join("f");
    std::fs::write(&f, b"aaa\n").unwrap();
    let mut out = Vec::new();
    let mut step = |name: &'static str, path: &Path, act: &dyn Fn()| {
        let before = atime(path);
        tick();
        act();
        out.push((name, atime(path) != before));
    };
    let cat = || {
        std::fs::read(&f).unwrap();
    };
    step("first read", &f, &cat);
    step("second read", &f, &cat);
    let ls = || {
        std::fs::read_dir(&dir).unwrap().for_each(drop);
    };
    step("listing the directory", &dir, &ls);
    step("listing it again", &dir, &ls);
    let rewrite_and_read = || {
        std::fs::write(&f, b"xyz\n").unwrap();
        cat();
    };
    step("read after a rewrite", &f, &rewrite_and_read);
    let open_for_write = || {
        std::fs::OpenOptions::new().write(true).open(&f).unwrap();
    };
    step("open for writing", &f, &open_for_write);
    let open_read_write = || {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&f)
            .unwrap();
        file.sync_all().unwrap();
    };
    step(
        "open for reading and writing, no read",
        &f,
        &open_read_write,
    );
    let rewrite_then_read_write_open = || {
        std::fs::write(&f, b"abc\n").unwrap();
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&f)
            .unwrap();
        let mut s = String::new();
        std::io::Read::read_to_string(&mut file, &mut s).unwrap();
        assert_eq!(s, "abc\n");
    };
    step(
        "read through an open for reading and writing after a rewrite",
        &f,
        &rewrite_then_read_write_open,
    );
    out
}

fn linux_sequence(image: &Path, opts: &str) -> Vec<(&'static str, bool)> {
    let dir = common::TempDir::new("atime-linux");
    let st = Command::new("mount")
        .args(["-t", "ext3", "-o"])
        .arg(format!("loop,{opts}"))
        .arg(image)
        .arg(&dir.path)
        .status()
        .unwrap();
    assert!(
        st.success(),
        "loop mount of {} with {opts}",
        image.display()
    );
    let out = sequence(&dir.path);
    let _ = Command::new("umount").arg(&dir.path).status();
    out
}

#[test]
fn atime_moves_as_linux_moves_it_under_each_mount_option() {
    jbdfs_testkit::require!(fuse);
    // Without loop mounts: jbdfs against the expected table only.
    let linux = jbdfs_testkit::available!("Linux's side"; loop);
    let expect_relatime = [true, false, true, false, true, false, false, true];
    for (opts, expected) in [
        ("relatime", expect_relatime),
        (
            "strictatime",
            [true, true, true, true, true, false, false, true],
        ),
        ("noatime", [false; 8]),
        (
            "relatime,nodiratime",
            [true, false, false, false, true, false, false, true],
        ),
    ] {
        let img = common::jbdfs_image_with("atime", Default::default(), 32 << 20);
        let dir = common::TempDir::new("atime");
        let mnt = dir.path.join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let d = Daemon::start(&img.path, &mnt, opts, Duration::from_secs(30)).unwrap();
        let got = sequence(&mnt);
        let exited = d.stop();
        assert!(exited.status.success(), "{exited:?}");
        common::assert_e2fsck_clean(&img.path, &format!("after the atime sequence, -o {opts}"));
        let moved: Vec<bool> = got.iter().map(|(_, m)| *m).collect();
        assert_eq!(moved, expected, "jbdfs -o {opts}: {got:?}");
        if linux {
            let img = common::jbdfs_image_with("atime-k", Default::default(), 32 << 20);
            let theirs = linux_sequence(&img.path, opts);
            assert_eq!(got, theirs, "jbdfs against Linux ext3, -o {opts}");
        }
    }
}
