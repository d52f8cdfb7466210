// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! The set-user-ID and set-group-ID bits under FUSE_HANDLE_KILLPRIV_V2,
//! where the daemon, not the kernel, drops them: a write or a truncate by a
//! caller without CAP_FSETID, and every chown, leave the modes Linux's ext3
//! leaves (measured on ext3 with the same commands; fstests generic/193
//! and 355 check the same rules). Runs on the transport the test run
//! chooses (JBDFS_TEST_TRANSPORT); e2fsck -fn is clean afterwards.
//!
//! Needs root, /dev/fuse and util-linux's setpriv, truncate and chgrp.

use jbdfs_testkit as common;
use jbdfs_testkit::daemon as daemon_common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use common::{run, TempDir, TempImage};
use daemon_common::Daemon;

const NOBODY: &str = "setpriv --reuid=65534 --regid=65534 --clear-groups";

fn mode_of(file: &Path) -> u32 {
    std::fs::metadata(file).unwrap().permissions().mode() & 0o7777
}

#[test]
fn writes_truncates_and_chowns_drop_set_id_bits_as_ext3_does() {
    jbdfs_testkit::require!(fuse);
    let img = TempImage::sparse("set-id", 64 << 20);
    run("mke2fs", ["-q", "-F", "-t", "ext3", img.path_str()]).expect_ok();
    let dir = TempDir::new("set-id-mnt");
    let d =
        Daemon::start(&img.path, &dir.path, "allow_other", Duration::from_secs(20)).expect("mount");
    std::fs::set_permissions(&dir.path, PermissionsExt::from_mode(0o777)).unwrap();
    let f = dir.path.join("f");
    std::fs::write(&f, b"x\n").unwrap();
    let f_s = f.to_str().unwrap();
    // (mode before, command, mode after), as Linux's ext3 gives them.
    let cases = [
        // A write by a caller without CAP_FSETID, not in the file's group.
        (0o6777, format!("{NOBODY} sh -c 'echo y >> {f_s}'"), 0o0777),
        (0o6767, format!("{NOBODY} sh -c 'echo y >> {f_s}'"), 0o0767),
        // A truncate by the same caller.
        (0o6777, format!("{NOBODY} truncate -s 10 {f_s}"), 0o0777),
        // Root (CAP_FSETID) keeps both through a write and a truncate.
        (0o6777, format!("sh -c 'echo y >> {f_s}'"), 0o6777),
        (0o6777, format!("truncate -s 5 {f_s}"), 0o6777),
        // A chown drops S_ISUID whoever asks, to the same owner too, and
        // S_ISGID where the group may execute.
        (0o6777, format!("chown root {f_s}"), 0o0777),
        (0o6767, format!("chown root {f_s}"), 0o2767),
        // Nothing that changes neither contents nor owner drops a bit.
        (0o6767, format!("{NOBODY} cat {f_s}"), 0o6767),
    ];
    for (before, cmd, after) in &cases {
        std::fs::set_permissions(&f, PermissionsExt::from_mode(*before)).unwrap();
        run("sh", ["-c", cmd]).expect_ok();
        assert_eq!(mode_of(&f), *after, "{before:o} after `{cmd}`");
    }
    // The owner, not in the file's group, changes its group: S_ISUID goes,
    // and S_ISGID where the group may not execute, since the caller is
    // neither in the old group nor capable.
    run("chown", ["65534", f_s]).expect_ok();
    std::fs::set_permissions(&f, PermissionsExt::from_mode(0o6767)).unwrap();
    run("sh", ["-c", &format!("{NOBODY} chgrp 65534 {f_s}")]).expect_ok();
    assert_eq!(mode_of(&f), 0o0767, "chgrp by an owner outside the group");
    drop(d.stop());
    common::assert_e2fsck_clean(&img.path, "after the set-ID cases");
}
