// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! fallocate through the kernel: hole punching (`fallocate -p`) reads back
//! as zeros and gives blocks back, the modes ext4 refuses on block-mapped
//! files (ZERO_RANGE; PUNCH_HOLE without KEEP_SIZE) are EOPNOTSUPP, and
//! the set-user-ID and set-group-ID bits go when an unprivileged caller
//! fallocates or punches, by the kernel's rule (fstests generic/683 and
//! 684: FUSE's file_modified drops set-group-ID only from a file its group
//! may execute, and the daemon drops it from the others when the caller is
//! not in the file's group). e2fsck -fn is clean afterwards.
//!
//! Needs root, /dev/fuse and util-linux's fallocate and setpriv: skipped
//! with a message without them, except under CI.

use jbdfs_testkit as common;
use jbdfs_testkit::daemon as daemon_common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use common::{run, Out, TempDir, TempImage};
use daemon_common::Daemon;

/// A 64 MiB image made by mke2fs, so that punching also meets a layout
/// jbdfs's own mkfs did not choose.
fn fresh_image(block_size: u32) -> TempImage {
    let img = TempImage::sparse("falloc", 64 << 20);
    let bs = block_size.to_string();
    run(
        "mke2fs",
        ["-q", "-F", "-t", "ext3", "-b", &bs, img.path_str()],
    )
    .expect_ok();
    img
}

/// `fallocate ARGS FILE`, as root or (with `nobody`) as uid/gid 65534.
fn fallocate(args: &str, file: &Path, nobody: bool) -> Out {
    let who = if nobody {
        "setpriv --reuid=65534 --regid=65534 --clear-groups "
    } else {
        ""
    };
    run(
        "sh",
        ["-c", &format!("{who}fallocate {args} '{}'", file.display())],
    )
}

fn mode_of(file: &Path) -> u32 {
    std::fs::metadata(file).unwrap().permissions().mode() & 0o7777
}

#[test]
fn punch_hole_through_the_kernel() {
    jbdfs_testkit::require!(fuse);
    for bs in [1024u32, 4096] {
        let img = fresh_image(bs);
        let dir = TempDir::new("falloc-mnt");
        let d = Daemon::start(&img.path, &dir.path, "", Duration::from_secs(20)).expect("mount");
        let f = dir.path.join("f");
        let data: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251 + 1) as u8).collect();
        std::fs::write(&f, &data).unwrap();
        let blocks = std::fs::metadata(&f).unwrap().blocks();
        // 300 KiB from 5000: partial blocks at both ends.
        fallocate("-p -o 5000 -l 307200", &f, false).expect_ok();
        let mut want = data.clone();
        want[5000..5000 + 307200].fill(0);
        assert!(
            std::fs::read(&f).unwrap() == want,
            "{bs}: bytes after punch"
        );
        let after = std::fs::metadata(&f).unwrap();
        assert_eq!(after.len(), data.len() as u64, "{bs}: size kept");
        assert!(after.blocks() < blocks - 500, "{bs}: blocks given back");
        for (args, what) in [
            ("-z -o 0 -l 4096", "ZERO_RANGE"),
            ("-c -o 0 -l 4096", "COLLAPSE"),
        ] {
            let o = fallocate(args, &f, false);
            assert!(
                !o.success() && o.stderr.contains("not supported"),
                "{bs}: {what} must be EOPNOTSUPP:\n{}",
                o.describe()
            );
        }
        drop(d.stop());
        common::assert_e2fsck_clean(&img.path, "after punching through the kernel");
    }
}

#[test]
fn unprivileged_fallocate_and_punch_clear_setuid_and_setgid() {
    jbdfs_testkit::require!(fuse);
    let img = fresh_image(4096);
    let dir = TempDir::new("falloc-mnt");
    let d =
        Daemon::start(&img.path, &dir.path, "allow_other", Duration::from_secs(20)).expect("mount");
    let f = dir.path.join("f");
    std::fs::write(&f, vec![1u8; 65536]).unwrap();
    let set = |mode: u32| std::fs::set_permissions(&f, PermissionsExt::from_mode(mode)).unwrap();
    // (mode before, fallocate arguments, mode after) for uid and gid 65534,
    // not in the file's group: S_ISUID always goes, and S_ISGID too,
    // executable by the group or not (setattr_should_drop_sgid; fstests
    // generic/683 and 684, as Linux's ext3 gives them).
    let cases = [
        (0o6777, "-l 131072", 0o0777),
        (0o6777, "-p -o 0 -l 4096", 0o0777),
        (0o2767, "-l 131072", 0o0767),
        (0o6767, "-p -o 4096 -l 4096", 0o0767),
    ];
    for (before, args, after) in cases {
        set(before);
        fallocate(args, &f, true).expect_ok();
        assert_eq!(
            mode_of(&f),
            after,
            "{before:o} after fallocate {args} by uid 65534"
        );
    }
    // A caller in the file's group keeps S_ISGID where the group may not
    // execute.
    set(0o6767);
    let in_group = run(
        "setpriv",
        [
            "--reuid=65534",
            "--regid=0",
            "--clear-groups",
            "fallocate",
            "-l",
            "131072",
            f.to_str().unwrap(),
        ],
    );
    in_group.expect_ok();
    assert_eq!(mode_of(&f), 0o2767, "a member of the group keeps S_ISGID");
    // Root (CAP_FSETID) keeps both.
    set(0o6777);
    fallocate("-p -o 0 -l 4096", &f, false).expect_ok();
    assert_eq!(mode_of(&f), 0o6777, "root's punch keeps the bits");
    drop(d.stop());
    common::assert_e2fsck_clean(&img.path, "after unprivileged fallocates");
}
