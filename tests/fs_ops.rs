// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! The filesystem layer in-process, on image files checked by e2fsck.

use std::process::Command;
use std::sync::Arc;

use jbdfs::device::{FileDevice, OpenOptions};
use jbdfs::format::InodeNo;
use jbdfs::fs::namei::{Caller, SetAttr};
use jbdfs::fs::{Filesystem, FsError, MountConfig};
use jbdfs::mkfs::MkfsOptions;

use jbdfs_testkit::{assert_e2fsck_clean, jbdfs_image, mount_file};

const ROOT: InodeNo = InodeNo(2);
const ME: Caller = Caller { uid: 0, gid: 0 };

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn create_write_read_unlink_is_clean() {
    for bs in [1024, 4096] {
        let img = jbdfs_image("fsops", 64 << 20, bs);
        let fs = mount_file(&img.path);
        let (f, _) = fs.mknod(ROOT, b"file", 0o100644, 0, ME).unwrap();
        let data = pattern(3 << 20, 7);
        fs.write(f, 0, &data, true).unwrap();
        assert_eq!(fs.read(f, 0, data.len() as u32).unwrap(), data);
        // Partial overwrite across a block edge keeps the rest.
        fs.write(f, bs as u64 - 3, b"abcdef", true).unwrap();
        let back = fs.read(f, bs as u64 - 5, 10).unwrap();
        assert_eq!(&back[2..8], b"abcdef");
        assert_eq!(back[0..2], data[bs as usize - 5..bs as usize - 3]);
        let (d, _) = fs.mkdir(ROOT, b"dir", 0o755, ME).unwrap();
        for i in 0..300 {
            fs.mknod(d, format!("n{i}").as_bytes(), 0o100600, 0, ME)
                .unwrap();
        }
        for i in (0..300).step_by(2) {
            fs.unlink(d, format!("n{i}").as_bytes()).unwrap();
        }
        assert!(matches!(fs.rmdir(ROOT, b"dir"), Err(FsError::NotEmpty)));
        fs.symlink(ROOT, b"fast", b"/short/target", ME).unwrap();
        let long = vec![b'x'; 200];
        let (sl, _) = fs.symlink(ROOT, b"slow", &long, ME).unwrap();
        assert_eq!(fs.readlink(sl).unwrap(), long);
        fs.link(f, d, b"hardlink").unwrap();
        fs.mknod(ROOT, b"fifo", 0o010644, 0, ME).unwrap();
        fs.mknod(ROOT, b"chr", 0o020644, libc::makedev(1, 3) as u32, ME)
            .unwrap();
        let (big, _) = fs.mknod(ROOT, b"sparse", 0o100644, 0, ME).unwrap();
        fs.write(big, 300 << 20, b"end", true).unwrap();
        assert_eq!(fs.read(big, 1 << 20, 4).unwrap(), vec![0; 4]);
        let attr = SetAttr {
            size: Some(5000),
            ..Default::default()
        };
        fs.setattr(f, &attr, ME).unwrap();
        assert_eq!(fs.getattr(f).unwrap().i_size, 5000);
        fs.unmount().unwrap();
        drop(fs);
        assert_e2fsck_clean(&img.path, "the image");
        let fs = mount_file(&img.path);
        let (again, inode) = fs.lookup(ROOT, b"file").unwrap();
        assert_eq!(again, f);
        assert_eq!(inode.i_links_count, 2);
        assert_eq!(fs.read(f, 0, 100).unwrap(), data[..100].to_vec());
        fs.unlink(ROOT, b"sparse").unwrap();
        fs.unlink(d, b"hardlink").unwrap();
        fs.unmount().unwrap();
        drop(fs);
        assert_e2fsck_clean(&img.path, "the image");
    }
}

#[test]
fn open_unlinked_file_lives_until_release() {
    let img = jbdfs_image("fsops", 32 << 20, 4096);
    let fs = mount_file(&img.path);
    let (f, _) = fs.mknod(ROOT, b"tmp", 0o100644, 0, ME).unwrap();
    fs.open(f).unwrap();
    fs.write(f, 0, &pattern(100_000, 1), true).unwrap();
    fs.unlink(ROOT, b"tmp").unwrap();
    assert!(fs.lookup(ROOT, b"tmp").is_err());
    assert_eq!(fs.read(f, 0, 10).unwrap(), pattern(10, 1));
    let free_before = fs.statfs().unwrap().free_blocks;
    fs.release(f).unwrap();
    assert!(fs.statfs().unwrap().free_blocks > free_before);
    fs.unmount().unwrap();
    drop(fs);
    assert_e2fsck_clean(&img.path, "the image");
}

#[test]
fn renames_keep_the_tree_consistent() {
    use jbdfs::fs::namei::RenameFlags;
    let img = jbdfs_image("fsops", 32 << 20, 1024);
    let fs = mount_file(&img.path);
    let (a, _) = fs.mkdir(ROOT, b"a", 0o755, ME).unwrap();
    let (b, _) = fs.mkdir(ROOT, b"b", 0o755, ME).unwrap();
    let (sub, _) = fs.mkdir(a, b"sub", 0o755, ME).unwrap();
    let (f, _) = fs.mknod(a, b"f", 0o100644, 0, ME).unwrap();
    let (g, _) = fs.mknod(b, b"g", 0o100644, 0, ME).unwrap();
    fs.write(g, 0, b"gdata", true).unwrap();
    // Same directory, then across directories, then over an existing file.
    fs.rename(a, b"f", a, b"f2", RenameFlags::default())
        .unwrap();
    fs.rename(a, b"f2", b, b"f3", RenameFlags::default())
        .unwrap();
    fs.rename(b, b"f3", b, b"g", RenameFlags::default())
        .unwrap();
    assert_eq!(fs.lookup(b, b"g").unwrap().0, f);
    // A directory moves with its ".." fixed and link counts moved.
    fs.rename(a, b"sub", b, b"sub", RenameFlags::default())
        .unwrap();
    assert_eq!(fs.lookup(sub, b"..").unwrap().0, b);
    assert_eq!(fs.getattr(a).unwrap().i_links_count, 2);
    assert_eq!(fs.getattr(b).unwrap().i_links_count, 3);
    // Into its own subtree is refused.
    assert!(matches!(
        fs.rename(b, b"sub", sub, b"x", RenameFlags::default()),
        Err(FsError::Invalid(_))
    ));
    // NOREPLACE and EXCHANGE.
    let (h, _) = fs.mknod(a, b"h", 0o100644, 0, ME).unwrap();
    let noreplace = RenameFlags {
        noreplace: true,
        ..Default::default()
    };
    assert!(matches!(
        fs.rename(a, b"h", b, b"g", noreplace),
        Err(FsError::Exists)
    ));
    let exchange = RenameFlags {
        exchange: true,
        ..Default::default()
    };
    fs.rename(a, b"h", b, b"sub", exchange).unwrap();
    assert_eq!(fs.lookup(a, b"h").unwrap().0, sub);
    assert_eq!(fs.lookup(b, b"sub").unwrap().0, h);
    assert_eq!(fs.lookup(sub, b"..").unwrap().0, a);
    // Over an empty directory.
    let (e, _) = fs.mkdir(b, b"empty", 0o755, ME).unwrap();
    let _ = e;
    fs.rename(a, b"h", b, b"empty", RenameFlags::default())
        .unwrap();
    fs.unmount().unwrap();
    drop(fs);
    assert_e2fsck_clean(&img.path, "the image");
}

#[test]
fn sixteen_threads_in_shared_directories() {
    let img = jbdfs_image("fsops", 256 << 20, 4096);
    let fs = mount_file(&img.path);
    let dirs: Vec<InodeNo> = (0..4)
        .map(|i| {
            fs.mkdir(ROOT, format!("d{i}").as_bytes(), 0o755, ME)
                .unwrap()
                .0
        })
        .collect();
    let threads: Vec<_> = (0..16u32)
        .map(|t| {
            let fs = fs.clone();
            let dirs = dirs.clone();
            std::thread::spawn(move || {
                let mut x = t.wrapping_mul(2654435761).max(1);
                for i in 0..400u32 {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    let d = dirs[(x % 4) as usize];
                    let d2 = dirs[((x >> 8) % 4) as usize];
                    let name = format!("t{t}-{}", i % 40);
                    let other = format!("t{t}-{}", (i + 7) % 40);
                    match x % 5 {
                        0 | 1 => {
                            if let Ok((f, _)) = fs.mknod(d, name.as_bytes(), 0o100644, 0, ME) {
                                let _ =
                                    fs.write(f, (x % 20000) as u64, &pattern(5000, t as u8), true);
                            }
                        }
                        2 => {
                            let _ = fs.rename(
                                d,
                                name.as_bytes(),
                                d2,
                                other.as_bytes(),
                                Default::default(),
                            );
                        }
                        3 => {
                            let _ = fs.unlink(d, name.as_bytes());
                        }
                        _ => {
                            let _ = fs.readdir(d, 0, 1000);
                            let _ = fs.mkdir(d, format!("sub{t}").as_bytes(), 0o755, ME);
                            let _ = fs.rmdir(d2, format!("sub{t}").as_bytes());
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    fs.unmount().unwrap();
    drop(fs);
    assert_e2fsck_clean(&img.path, "the image");
}

#[test]
fn full_disk_gives_enospc_and_keeps_data() {
    let img = jbdfs_image("fsops", 16 << 20, 1024);
    let fs = mount_file(&img.path);
    let (keep, _) = fs.mknod(ROOT, b"keep", 0o100644, 0, ME).unwrap();
    fs.write(keep, 0, &pattern(100_000, 9), true).unwrap();
    let user = Caller {
        uid: 1000,
        gid: 1000,
    };
    let (f, _) = fs.mknod(ROOT, b"fill", 0o100644, 0, user).unwrap();
    let chunk = pattern(1 << 20, 3);
    let mut off = 0u64;
    let err = loop {
        match fs.write(f, off, &chunk, false) {
            Ok(n) => off += n as u64,
            Err(e) => break e,
        }
    };
    assert!(matches!(err, FsError::NoSpace), "{err:?}");
    // Root may still use the reserved blocks.
    let (r, _) = fs.mknod(ROOT, b"root", 0o100644, 0, ME).unwrap();
    fs.write(r, 0, &pattern(100_000, 4), true).unwrap();
    assert_eq!(fs.read(keep, 0, 100_000).unwrap(), pattern(100_000, 9));
    fs.unmount().unwrap();
    drop(fs);
    assert_e2fsck_clean(&img.path, "the image");
}

#[test]
fn xattrs_in_inode_in_blocks_and_shared() {
    use jbdfs::fs::xattr::SetMode;
    for (bs, isize) in [(4096u32, 256u16), (1024, 128)] {
        let opts = MkfsOptions {
            block_size: Some(bs),
            inode_size: isize,
            ..Default::default()
        };
        let img = jbdfs_testkit::jbdfs_image_with("xattr", opts, 32 << 20);
        let fs = mount_file(&img.path);
        let (a, _) = fs.mknod(ROOT, b"a", 0o100644, 0, ME).unwrap();
        let (b, _) = fs.mknod(ROOT, b"b", 0o100644, 0, ME).unwrap();
        for f in [a, b] {
            fs.setxattr(f, b"user.small", b"v", SetMode::Either)
                .unwrap();
            fs.setxattr(f, b"user.big", &pattern(600, 1), SetMode::Either)
                .unwrap();
            fs.setxattr(f, b"trusted.t", b"trusted value", SetMode::Create)
                .unwrap();
        }
        assert!(matches!(
            fs.setxattr(a, b"trusted.t", b"x", SetMode::Create),
            Err(FsError::Exists)
        ));
        assert!(matches!(
            fs.setxattr(a, b"user.none", b"x", SetMode::Replace),
            Err(FsError::NoData)
        ));
        assert_eq!(fs.getxattr(a, b"user.big").unwrap(), pattern(600, 1));
        let list = fs.listxattr(b).unwrap();
        assert_eq!(list.split(|&c| c == 0).filter(|n| !n.is_empty()).count(), 3);
        // Identical attribute sets share one block.
        let (ia, ib) = (fs.getattr(a).unwrap(), fs.getattr(b).unwrap());
        assert_ne!(ia.i_file_acl, 0);
        assert_eq!(
            ia.i_file_acl, ib.i_file_acl,
            "identical xattrs share a block"
        );
        // Changing one copies it out; removing all frees it.
        fs.setxattr(a, b"security.s", b"label", SetMode::Either)
            .unwrap();
        assert_ne!(fs.getattr(a).unwrap().i_file_acl, ib.i_file_acl);
        assert_eq!(fs.getxattr(b, b"user.big").unwrap(), pattern(600, 1));
        fs.removexattr(b, b"user.big").unwrap();
        assert!(matches!(fs.getxattr(b, b"user.big"), Err(FsError::NoData)));
        assert!(matches!(
            fs.getxattr(b, b"bogus.x"),
            Err(FsError::NotSupported)
        ));
        fs.unlink(ROOT, b"a").unwrap();
        fs.unmount().unwrap();
        drop(fs);
        assert_e2fsck_clean(&img.path, "the image");
    }
}

#[test]
fn files_reach_the_ext3_size_limit_and_no_further() {
    for bs in [1024u32, 4096] {
        let img = jbdfs_image("fsops", 32 << 20, bs);
        let fs = mount_file(&img.path);
        let max = fs.max_file_size();
        let (f, _) = fs.mknod(ROOT, b"huge", 0o100644, 0, ME).unwrap();
        fs.write(f, max - 1, b"x", true).unwrap();
        assert_eq!(fs.getattr(f).unwrap().i_size, max);
        assert_eq!(fs.read(f, max - 1, 10).unwrap(), b"x");
        assert!(matches!(
            fs.write(f, max, b"y", true),
            Err(FsError::FileTooBig)
        ));
        fs.unmount().unwrap();
        drop(fs);
        assert_e2fsck_clean(&img.path, "the image");
    }
}

/// `mount -o remount,ro` as ext3 does it: changes are refused, and the
/// image on disk is clean and complete while still mounted (the log is
/// empty, needs_recovery clear), so e2fsck -fn passes on it; `remount,rw`
/// brings writes back, and the unmounted image is clean again.
#[test]
fn remount_read_only_leaves_a_clean_image_and_read_write_resumes() {
    let img = jbdfs_image("fsops", 64 << 20, 1024);
    let fs = mount_file(&img.path);
    let (f, _) = fs.mknod(ROOT, b"file", 0o100644, 0, ME).unwrap();
    let data = pattern(200_000, 3);
    fs.write(f, 0, &data, true).unwrap();
    fs.mkdir(ROOT, b"dir", 0o755, ME).unwrap();
    fs.remount(true).unwrap();
    assert!(fs.is_read_only());
    assert!(matches!(fs.write(f, 0, b"x", true), Err(FsError::ReadOnly)));
    assert!(fs.mknod(ROOT, b"more", 0o100644, 0, ME).is_err());
    let sb = jbdfs::fs::mount::read_superblock(
        &FileDevice::open(
            &img.path,
            OpenOptions {
                read_only: true,
                no_lock: true,
                ..Default::default()
            },
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        sb.s_feature_incompat & jbdfs::format::superblock::feature::INCOMPAT_RECOVER,
        0,
        "needs_recovery is cleared while read-only"
    );
    assert_e2fsck_clean(&img.path, "the image");
    assert_eq!(fs.read(f, 0, data.len() as u32).unwrap(), data);
    fs.remount(false).unwrap();
    assert!(!fs.is_read_only());
    fs.write(f, 0, b"again", true).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    assert_e2fsck_clean(&img.path, "the image");
    let fs = mount_file(&img.path);
    assert_eq!(fs.read(f, 0, 5).unwrap(), b"again");
    fs.unmount().unwrap();
}

/// A mount made read-only writes nothing (the image's bytes do not
/// change, the journal is not loaded), and `remount,rw` makes it a
/// read-write mount like any other (as ext3_remount from a read-only
/// mount): the journal is loaded then, and the unmounted image is clean.
/// On a device that cannot be written it stays read-only.
#[test]
fn a_read_only_mount_goes_read_write_at_a_remount() {
    let img = jbdfs_image("fsops", 32 << 20, 1024);
    let fs = mount_file(&img.path);
    let (f, _) = fs.mknod(ROOT, b"file", 0o100644, 0, ME).unwrap();
    fs.write(f, 0, b"before", true).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    let bytes = std::fs::read(&img.path).unwrap();

    let ro = MountConfig {
        read_only: true,
        ..Default::default()
    };
    let dev = FileDevice::open(&img.path, OpenOptions::default()).unwrap();
    let fs = Filesystem::mount(Arc::new(dev), &ro).unwrap();
    assert!(fs.is_read_only());
    assert!(
        !fs.journal().is_logging(),
        "a read-only mount loads no journal"
    );
    assert!(matches!(fs.write(f, 0, b"x", true), Err(FsError::ReadOnly)));
    assert_eq!(fs.read(f, 0, 6).unwrap(), b"before");
    fs.sync().unwrap();
    assert!(
        std::fs::read(&img.path).unwrap() == bytes,
        "a read-only mount wrote"
    );

    fs.remount(false).unwrap();
    assert!(!fs.is_read_only());
    assert!(fs.journal().is_logging());
    fs.write(f, 0, b"after!", true).unwrap();
    fs.mknod(ROOT, b"new", 0o100644, 0, ME).unwrap();
    fs.remount(true).unwrap();
    assert_e2fsck_clean(&img.path, "the image");
    fs.remount(false).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    assert_e2fsck_clean(&img.path, "the image");
    let fs = mount_file(&img.path);
    assert_eq!(fs.read(f, 0, 6).unwrap(), b"after!");
    assert!(fs.lookup(ROOT, b"new").is_ok());
    fs.unmount().unwrap();
    drop(fs);

    let dev = FileDevice::open(
        &img.path,
        OpenOptions {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    let for_good = MountConfig {
        read_only_device: true,
        ..ro
    };
    let fs = Filesystem::mount(Arc::new(dev), &for_good).unwrap();
    assert!(matches!(fs.remount(false), Err(FsError::ReadOnly)));
    assert!(fs.is_read_only());
    assert_eq!(fs.read(f, 0, 6).unwrap(), b"after!");
}

/// dir_nlink (ext4's, which e2fsck sets for a directory past 65,000
/// subdirectories) is mounted read-write: it only changes how such a
/// directory is counted, and jbdfs counts as ext4 does.
#[test]
fn dir_nlink_images_mount_read_write_and_stay_clean() {
    let img = jbdfs_image("fsops", 32 << 20, 1024);
    let tune = Command::new("tune2fs")
        .args(["-O", "dir_nlink"])
        .arg(&img.path)
        .output()
        .expect("tune2fs");
    assert!(
        tune.status.success(),
        "{}",
        String::from_utf8_lossy(&tune.stderr)
    );
    let fs = mount_file(&img.path);
    let (d, _) = fs.mkdir(ROOT, b"d", 0o755, ME).unwrap();
    for i in 0..20 {
        fs.mkdir(d, format!("s{i}").as_bytes(), 0o755, ME).unwrap();
    }
    assert_eq!(fs.getattr(d).unwrap().i_links_count, 22);
    for i in 0..5 {
        fs.rmdir(d, format!("s{i}").as_bytes()).unwrap();
    }
    assert_eq!(fs.getattr(d).unwrap().i_links_count, 17);
    fs.unmount().unwrap();
    drop(fs);
    assert_e2fsck_clean(&img.path, "the image");
}

/// RENAME_WHITEOUT (overlayfs's): the file moves and its old name is left
/// pointing at a whiteout, a character device 0:0 with no permission bits
/// owned by the caller, made in the same transaction; with EXCHANGE it is
/// refused. e2fsck -fn is clean, and Linux's debugfs sees the device.
#[test]
fn rename_whiteout_leaves_a_whiteout_at_the_old_name() {
    use jbdfs::fs::namei::RenameFlags;
    let img = jbdfs_image("fsops", 32 << 20, 4096);
    let fs = mount_file(&img.path);
    let (f, _) = fs.mknod(ROOT, b"upper", 0o100644, 0, ME).unwrap();
    fs.write(f, 0, b"moved", true).unwrap();
    let who = Caller {
        uid: 1000,
        gid: 100,
    };
    let whiteout = RenameFlags {
        whiteout: Some(who),
        ..Default::default()
    };
    fs.rename(ROOT, b"upper", ROOT, b"moved", whiteout).unwrap();
    assert_eq!(fs.lookup(ROOT, b"moved").unwrap().0, f);
    let (w, wi) = fs.lookup(ROOT, b"upper").unwrap();
    assert_ne!(w, f);
    assert_eq!(
        wi.i_mode, 0o020000,
        "a character device with no permissions"
    );
    assert_eq!((wi.i_uid, wi.i_gid), (1000, 100));
    let (d, _) = fs.mkdir(ROOT, b"d", 0o755, ME).unwrap();
    fs.rename(ROOT, b"moved", d, b"again", whiteout).unwrap();
    assert!(
        fs.lookup(ROOT, b"moved").is_ok(),
        "a whiteout across directories"
    );
    let both = RenameFlags {
        exchange: true,
        whiteout: Some(who),
        ..Default::default()
    };
    assert!(fs.rename(d, b"again", ROOT, b"upper", both).is_err());
    fs.unmount().unwrap();
    drop(fs);
    assert_e2fsck_clean(&img.path, "the image");
    let out = Command::new("debugfs")
        .args(["-R", "stat /upper"])
        .arg(&img.path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Type: character special"), "{text}");
}

/// A setattr that gives every field the value it holds, ctime included
/// (the kernel's write-back of times it has sent before), takes no handle
/// and changes nothing; one that changes a field, or leaves the ctime to
/// the clock, still takes one and lands.
#[test]
fn a_setattr_that_changes_nothing_takes_no_handle() {
    let img = jbdfs_image("setattr-noop", 64 << 20, 4096);
    let fs = mount_file(&img.path);
    let (f, _) = fs.mknod(ROOT, b"f", 0o100644, 0, ME).unwrap();
    let held = fs.getattr(f).unwrap();
    let same = SetAttr {
        mode: Some(held.i_mode),
        uid: Some(held.i_uid),
        gid: Some(held.i_gid),
        mtime: Some(held.i_mtime),
        ctime: Some(held.i_ctime),
        ..Default::default()
    };
    let before = fs.journal().handles_started();
    fs.setattr(f, &same, ME).unwrap();
    assert_eq!(
        fs.journal().handles_started(),
        before,
        "a no-op setattr took a handle"
    );
    let mut later = held.i_mtime;
    later.sec += 7;
    let changed = SetAttr {
        mtime: Some(later),
        ..same
    };
    fs.setattr(f, &changed, ME).unwrap();
    assert_eq!(fs.journal().handles_started(), before + 1);
    assert_eq!(fs.getattr(f).unwrap().i_mtime, later);
    let no_ctime = SetAttr {
        uid: Some(held.i_uid),
        ..Default::default()
    };
    fs.setattr(f, &no_ctime, ME).unwrap();
    assert_eq!(
        fs.journal().handles_started(),
        before + 2,
        "a chown moves the ctime"
    );
    fs.unmount().unwrap();
    drop(fs);
    let fs = mount_file(&img.path);
    assert_eq!(fs.getattr(f).unwrap().i_mtime, later);
    fs.unmount().unwrap();
    drop(fs);
    assert_e2fsck_clean(&img.path, "after no-op and real setattrs");
}
