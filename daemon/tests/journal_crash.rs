// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! Crash consistency through the journal: images copied while jbdfs has
//! them mounted (a crash at that instant) are replayed by e2fsck and by the
//! Linux kernel, and then hold everything that was fsync'd, with e2fsck
//! finding nothing else to fix.

use jbdfs_testkit as common;
use jbdfs_testkit::daemon as daemon_common;

use std::path::Path;
use std::sync::Arc;

use common::*;
use jbdfs::device::{FileDevice, OpenOptions};
use jbdfs::format::InodeNo;
use jbdfs::fs::namei::Caller;
use jbdfs::fs::{DataMode, Filesystem, MountConfig};
use jbdfs::mkfs::MkfsOptions;

const ROOT: InodeNo = InodeNo(2);
const ME: Caller = Caller { uid: 0, gid: 0 };

fn data(i: usize) -> Vec<u8> {
    (0..(i * 997 % 20000 + 1))
        .map(|k| (k * 7 + i) as u8)
        .collect()
}

/// 64 MiB, or 256 MiB for 64 KiB blocks (mkfs needs 2048 blocks).
fn jbdfs_image(bs: u32) -> TempImage {
    let opts = MkfsOptions {
        block_size: Some(bs),
        ..Default::default()
    };
    let size = (64 << 20).max(4096 * u64::from(bs));
    jbdfs_image_with("journal", opts, size)
}

fn mount(path: &Path) -> Arc<Filesystem> {
    let dev = FileDevice::open(path, OpenOptions::default()).unwrap();
    Filesystem::mount(Arc::new(dev), &MountConfig::default()).unwrap()
}

/// A copy of the image as the device holds it right now.
fn crash_copy(img: &TempImage, tag: &str) -> TempImage {
    let copy = TempImage::new(tag);
    std::fs::copy(&img.path, &copy.path).unwrap();
    copy
}

#[test]
fn fsynced_files_survive_a_crash_replayed_by_e2fsck() {
    for bs in [1024, 4096, 65536] {
        let img = jbdfs_image(bs);
        let fs = mount(&img.path);
        let (d, _) = fs.mkdir(ROOT, b"dir", 0o755, ME).unwrap();
        for i in 0..50 {
            let (f, _) = fs
                .mknod(d, format!("f{i}").as_bytes(), 0o100644, 0, ME)
                .unwrap();
            fs.write(f, 0, &data(i), true).unwrap();
        }
        fs.fsync(d, false).unwrap();
        let copy = crash_copy(&img, "crash1");
        // Unsynced work after the crash point must not break anything.
        for i in 0..50 {
            fs.unlink(d, format!("f{i}").as_bytes()).unwrap();
        }
        let copy2 = crash_copy(&img, "crash2");
        fs.unmount().unwrap();
        drop(fs);
        assert_e2fsck_clean(&img.path, "the cleanly unmounted image");
        assert_eq!(dumpe2fs_header(&img.path).field("Journal start"), "0");

        let h = dumpe2fs_header(&copy.path);
        assert!(
            h.features().contains("needs_recovery"),
            "the crash copy is marked for recovery"
        );
        assert_ne!(
            h.field("Journal start"),
            "0",
            "the crash copy has a journal to replay"
        );
        let fixed = run("e2fsck", ["-fy", copy.path_str()]);
        assert!(fixed.code.is_some_and(|c| c <= 1), "{}", fixed.describe());
        assert_e2fsck_clean(&copy.path, "the replayed crash copy");
        for i in 0..50 {
            let out = TempImage::new("dump");
            debugfs(&copy.path, &format!("dump /dir/f{i} {}", out.path_str())).expect_ok();
            let got = std::fs::read(&out.path).unwrap_or_default();
            assert_eq!(
                got,
                data(i),
                "fsync'd file f{i} after replay ({bs}-byte blocks)"
            );
        }
        let fixed = run("e2fsck", ["-fy", copy2.path_str()]);
        assert!(fixed.code.is_some_and(|c| c <= 1), "{}", fixed.describe());
        assert_e2fsck_clean(&copy2.path, "the second crash copy");
    }
}

#[test]
fn linux_replays_a_journal_jbdfs_left() {
    jbdfs_testkit::require!(loop);
    let img = jbdfs_image(4096);
    let fs = mount(&img.path);
    let (d, _) = fs.mkdir(ROOT, b"dir", 0o755, ME).unwrap();
    for i in 0..100 {
        let (f, _) = fs
            .mknod(d, format!("f{i}").as_bytes(), 0o100644, 0, ME)
            .unwrap();
        fs.write(f, 0, &data(i), true).unwrap();
        if i % 10 == 0 {
            fs.rename(
                d,
                format!("f{i}").as_bytes(),
                ROOT,
                format!("moved{i}").as_bytes(),
                Default::default(),
            )
            .unwrap();
        }
    }
    fs.fsync(d, false).unwrap();
    let copy = crash_copy(&img, "linux-crash");
    fs.unmount().unwrap();
    drop(fs);

    let _guard = LOOP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut m = LoopMount::mount(&copy.path).unwrap_or_else(|o| panic!("{}", o.describe()));
    for i in 0..100 {
        let path = if i % 10 == 0 {
            m.path().join(format!("moved{i}"))
        } else {
            m.path().join(format!("dir/f{i}"))
        };
        assert_eq!(std::fs::read(&path).unwrap(), data(i), "{}", path.display());
    }
    m.umount().expect_ok();
    assert_e2fsck_clean(&copy.path, "the image Linux replayed");
}

#[test]
fn jbdfs_replays_its_own_journal_at_mount() {
    for bs in [1024, 4096, 65536] {
        let img = jbdfs_image(bs);
        let fs = mount(&img.path);
        let (d, _) = fs.mkdir(ROOT, b"dir", 0o755, ME).unwrap();
        for i in 0..40 {
            let (f, _) = fs
                .mknod(d, format!("f{i}").as_bytes(), 0o100644, 0, ME)
                .unwrap();
            fs.write(f, 0, &data(i), true).unwrap();
        }
        for i in 0..10 {
            fs.unlink(d, format!("f{i}").as_bytes()).unwrap();
        }
        fs.fsync(d, false).unwrap();
        let copy = crash_copy(&img, "own-crash");
        fs.unmount().unwrap();
        drop(fs);

        let fs = mount(&copy.path);
        assert!(fs.lookup(d, b"f3").is_err(), "the unlink was replayed");
        for i in 10..40 {
            let (f, _) = fs.lookup(d, format!("f{i}").as_bytes()).unwrap();
            assert_eq!(fs.read(f, 0, 1 << 20).unwrap(), data(i), "f{i}");
        }
        fs.unmount().unwrap();
        drop(fs);
        assert_e2fsck_clean(&copy.path, "a crash copy jbdfs recovered");
        assert_eq!(dumpe2fs_header(&copy.path).field("Journal start"), "0");
    }
}

/// The daemon in the foreground on `dir`, its stderr discarded.
fn spawn_daemon(image: &Path, dir: &Path, opts: &str) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_jbdfs"))
        .arg("-f")
        .arg(image)
        .arg(dir)
        .args(["-o", opts])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits up to 5 s for the mount on `dir`.
fn wait_mounted(dir: &Path) {
    let canon = std::fs::canonicalize(dir).unwrap();
    for _ in 0..500 {
        if jbdfs_daemon::daemon::is_mounted(&canon) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("mount did not come up");
}

#[test]
fn kill_9_of_the_daemon_loses_nothing_fsynced() {
    jbdfs_testkit::require!(fuse);
    let img = jbdfs_image(4096);
    let dir = TempDir::new("kill9");
    let _unmount = daemon_common::UnmountOnDrop(dir.path.clone());
    let transport = daemon_common::transport();
    let _turn = transport.turn();
    let spawn = || spawn_daemon(&img.path, &dir.path, transport.option());
    let wait_mounted = || wait_mounted(&dir.path);
    let mut child = spawn();
    wait_mounted();
    for i in 0..30 {
        use std::io::Write;
        let mut f = std::fs::File::create(dir.path.join(format!("f{i}"))).unwrap();
        f.write_all(&data(i)).unwrap();
        f.sync_all().unwrap();
    }
    // Unsynced work in flight when the daemon dies.
    for i in 30..60 {
        let _ = std::fs::write(dir.path.join(format!("f{i}")), data(i));
    }
    child.kill().unwrap();
    let _ = child.wait();
    run("umount", ["-l", dir.path.to_str().unwrap()]);
    assert!(dumpe2fs_header(&img.path)
        .features()
        .contains("needs_recovery"));

    let mut child = spawn();
    wait_mounted();
    for i in 0..30 {
        assert_eq!(
            std::fs::read(dir.path.join(format!("f{i}"))).unwrap(),
            data(i),
            "fsync'd f{i}"
        );
    }
    daemon_common::umount_retrying(&dir.path);
    let _ = child.wait();
    assert_e2fsck_clean(&img.path, "the image after kill -9 and recovery");
}

/// After a crash, a read-only mount shows the recovered state, as Linux's
/// does when the image can be written: the journal is replayed (and the
/// orphans freed) first, so what was fsync'd is there and the image is
/// clean afterwards (fstests generic/417, 646).
#[test]
fn a_read_only_mount_after_a_crash_replays_the_journal() {
    jbdfs_testkit::require!(fuse);
    let img = jbdfs_image(4096);
    let dir = TempDir::new("ro-replay");
    let _unmount = daemon_common::UnmountOnDrop(dir.path.clone());
    let transport = daemon_common::transport();
    let _turn = transport.turn();
    let spawn = |extra: &str| {
        spawn_daemon(
            &img.path,
            &dir.path,
            &format!("{}{extra}", transport.option()),
        )
    };
    let wait_mounted = || wait_mounted(&dir.path);
    let mut child = spawn("");
    wait_mounted();
    for i in 0..10 {
        use std::io::Write;
        let mut f = std::fs::File::create(dir.path.join(format!("f{i}"))).unwrap();
        f.write_all(&data(i)).unwrap();
        f.sync_all().unwrap();
    }
    child.kill().unwrap();
    let _ = child.wait();
    run("umount", ["-l", dir.path.to_str().unwrap()]);
    assert!(dumpe2fs_header(&img.path)
        .features()
        .contains("needs_recovery"));

    let mut child = spawn(",ro");
    wait_mounted();
    for i in 0..10 {
        assert_eq!(
            std::fs::read(dir.path.join(format!("f{i}"))).unwrap(),
            data(i),
            "fsync'd f{i} on the read-only mount"
        );
    }
    daemon_common::umount_retrying(&dir.path);
    let _ = child.wait();
    assert_e2fsck_clean(&img.path, "the image after a read-only mount that replayed");
}

/// `-o ro,noload` (ext4's `norecovery`) mounts a crashed image without
/// replaying its journal, as ext3 does: what only the log holds is not
/// seen, and the image still needs recovery afterwards; without `ro` the
/// option is refused, and a remount read-write is refused too.
#[test]
fn noload_mounts_read_only_without_replaying() {
    jbdfs_testkit::require!(fuse);
    let img = jbdfs_image(4096);
    let dir = TempDir::new("noload");
    let _unmount = daemon_common::UnmountOnDrop(dir.path.clone());
    let transport = daemon_common::transport();
    let _turn = transport.turn();
    let opts = |extra: &str| format!("{}{extra}", transport.option());
    let mut child = spawn_daemon(&img.path, &dir.path, &opts(""));
    wait_mounted(&dir.path);
    {
        use std::io::Write;
        let mut f = std::fs::File::create(dir.path.join("logged")).unwrap();
        f.write_all(&data(1)).unwrap();
        f.sync_all().unwrap();
    }
    child.kill().unwrap();
    let _ = child.wait();
    run("umount", ["-l", dir.path.to_str().unwrap()]);

    let refused = run(
        env!("CARGO_BIN_EXE_jbdfs"),
        [
            "-f",
            img.path_str(),
            dir.path.to_str().unwrap(),
            "-o",
            &opts(",noload"),
        ],
    );
    assert!(!refused.success(), "noload without ro mounted");
    assert!(
        refused.stderr.contains("needs -o ro"),
        "{}",
        refused.describe()
    );

    let mut child = spawn_daemon(&img.path, &dir.path, &opts(",ro,norecovery"));
    wait_mounted(&dir.path);
    assert!(
        !dir.path.join("logged").exists(),
        "a file only the log holds is seen without replay"
    );
    let remount = run(
        env!("CARGO_BIN_EXE_jbdfs"),
        [
            img.path_str(),
            dir.path.to_str().unwrap(),
            "-o",
            "remount,rw",
        ],
    );
    assert!(!remount.success(), "remount,rw of an unreplayed image");
    daemon_common::umount_retrying(&dir.path);
    let _ = child.wait();
    assert!(
        dumpe2fs_header(&img.path)
            .features()
            .contains("needs_recovery"),
        "noload leaves the journal to replay"
    );
    let mut child = spawn_daemon(&img.path, &dir.path, &opts(""));
    wait_mounted(&dir.path);
    assert_eq!(std::fs::read(dir.path.join("logged")).unwrap(), data(1));
    daemon_common::umount_retrying(&dir.path);
    let _ = child.wait();
    assert_e2fsck_clean(&img.path, "after the replay that noload left");
}

#[test]
fn data_journal_logs_file_data_and_survives_a_crash() {
    for bs in [1024, 4096, 65536] {
        let img = jbdfs_image(bs);
        let dev = FileDevice::open(&img.path, OpenOptions::default()).unwrap();
        let cfg = MountConfig {
            data: DataMode::Journal,
            ..Default::default()
        };
        let fs = Filesystem::mount(Arc::new(dev), &cfg).unwrap();
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 31 % 253) as u8).collect();
        let (f, _) = fs.mknod(ROOT, b"big", 0o100644, 0, ME).unwrap();
        fs.write(f, 0, &big, true).unwrap();
        fs.write(f, 5000, b"overwritten in place", true).unwrap();
        let mut expect = big.clone();
        expect[5000..5020].copy_from_slice(b"overwritten in place");
        assert_eq!(
            fs.read(f, 0, big.len() as u32).unwrap(),
            expect,
            "reads see logged data"
        );
        fs.fsync(f, false).unwrap();
        let copy = crash_copy(&img, "dj-crash");
        fs.setattr(
            f,
            &jbdfs::fs::namei::SetAttr {
                size: Some(7000),
                ..Default::default()
            },
            ME,
        )
        .unwrap();
        assert_eq!(fs.read(f, 0, 8000).unwrap(), expect[..7000].to_vec());
        fs.unmount().unwrap();
        drop(fs);
        assert_e2fsck_clean(&img.path, "data=journal after unmount");

        let fs = mount(&copy.path);
        let (f, _) = fs.lookup(ROOT, b"big").unwrap();
        assert_eq!(
            fs.read(f, 0, big.len() as u32).unwrap(),
            expect,
            "fsync'd data after replay ({bs})"
        );
        fs.unmount().unwrap();
        drop(fs);
        assert_e2fsck_clean(&copy.path, "data=journal crash copy after replay");
    }
}
