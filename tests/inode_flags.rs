// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! Inode flags in-process, without the kernel in front: the checks jbdfs
//! itself makes (the VFS makes some of them first on a FUSE mount, so
//! only here are jbdfs's own seen alone): who may set which flag, the
//! masks, EPERM from every operation the immutable and append-only flags
//! forbid, inheritance, and the sync flag's commits. e2fsck -fn is clean
//! afterwards. daemon/tests/inode_flags.rs does the same through FUSE.

use jbdfs_testkit as common;

use common::TempImage;
use jbdfs::format::inode::flags::*;
use jbdfs::format::InodeNo;
use jbdfs::fs::flags::{FlagsCaller, CAP_FOWNER, CAP_LINUX_IMMUTABLE};
use jbdfs::fs::namei::{Caller, RenameFlags, SetAttr};
use jbdfs::fs::xattr::SetMode;
use jbdfs::fs::{Filesystem, FsError};
use jbdfs::mkfs::{make_filesystem, MkfsOptions, Request};

const ROOT: InodeNo = InodeNo(2);
const ME: Caller = Caller { uid: 0, gid: 0 };
/// Root with every capability.
const ROOT_CAPS: FlagsCaller = FlagsCaller {
    uid: 0,
    cap_effective: 0x1ff_ffff_ffff,
};

fn image(tag: &str) -> TempImage {
    let img = TempImage::new(tag);
    let req = Request {
        options: MkfsOptions {
            block_size: Some(1024),
            ..Default::default()
        },
        size: Some(16 << 20),
        quiet: true,
        ..Default::default()
    };
    make_filesystem(&img.path, &req).unwrap();
    img
}

fn file(fs: &Filesystem, dir: InodeNo, name: &str) -> InodeNo {
    let (ino, _) = fs.mknod(dir, name.as_bytes(), 0o644, 0, ME).unwrap();
    fs.write(ino, 0, name.as_bytes(), true).unwrap();
    ino
}

fn eperm<T: std::fmt::Debug>(what: &str, r: Result<T, FsError>) {
    match r {
        Err(FsError::NotPermitted) => {}
        other => panic!("{what}: expected EPERM, got {other:?}"),
    }
}

fn requested_commits(fs: &Filesystem) -> u64 {
    let text = fs.journal_stats();
    let line = text.lines().next().unwrap();
    let inner = line.split('(').nth(1).unwrap();
    inner.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn who_may_set_which_flag() {
    let img = image("flags-who");
    let fs = common::mount_file(&img.path);
    let f = file(&fs, ROOT, "f");
    let d = fs.mkdir(ROOT, b"d", 0o755, ME).unwrap().0;
    let owner = FlagsCaller {
        uid: 1000,
        cap_effective: 0,
    };
    fs.setattr(
        f,
        &SetAttr {
            uid: Some(1000),
            ..Default::default()
        },
        ME,
    )
    .unwrap();

    // The owner: the ordinary flags, not i or a.
    fs.set_flags(f, EXT2_NODUMP_FL | EXT2_NOATIME_FL, &owner)
        .unwrap();
    assert_eq!(fs.get_flags(f).unwrap(), EXT2_NODUMP_FL | EXT2_NOATIME_FL);
    eperm("owner +i", fs.set_flags(f, EXT2_IMMUTABLE_FL, &owner));
    eperm("owner +a", fs.set_flags(f, EXT2_APPEND_FL, &owner));
    // Someone else: nothing, unless CAP_FOWNER.
    let other = FlagsCaller {
        uid: 1001,
        cap_effective: 0,
    };
    eperm("non-owner", fs.set_flags(f, 0, &other));
    let fowner = FlagsCaller {
        uid: 1001,
        cap_effective: 1 << CAP_FOWNER,
    };
    fs.set_flags(f, EXT2_NODUMP_FL, &fowner).unwrap();
    eperm(
        "CAP_FOWNER alone, +i",
        fs.set_flags(f, EXT2_IMMUTABLE_FL, &fowner),
    );
    // Root without CAP_LINUX_IMMUTABLE: neither setting nor clearing.
    let root_without = FlagsCaller {
        uid: 0,
        cap_effective: ROOT_CAPS.cap_effective & !(1 << CAP_LINUX_IMMUTABLE),
    };
    eperm(
        "root without the capability, +i",
        fs.set_flags(f, EXT2_IMMUTABLE_FL, &root_without),
    );
    fs.set_flags(f, EXT2_APPEND_FL, &ROOT_CAPS).unwrap();
    eperm(
        "root without the capability, -a",
        fs.set_flags(f, 0, &root_without),
    );

    // The masks: invisible flags and directory flags on a file are
    // EOPNOTSUPP; visible, unmodifiable ones (I) are kept as they are.
    let unsupported = |r: Result<(), FsError>| matches!(r, Err(FsError::NotSupported));
    assert!(unsupported(fs.set_flags(f, EXT4_EXTENTS_FL, &ROOT_CAPS)));
    assert!(unsupported(fs.set_flags(f, EXT2_DIRSYNC_FL, &ROOT_CAPS)));
    assert!(unsupported(fs.set_flags(f, EXT2_TOPDIR_FL, &ROOT_CAPS)));
    fs.set_flags(
        d,
        EXT2_DIRSYNC_FL | EXT2_TOPDIR_FL | EXT2_INDEX_FL,
        &ROOT_CAPS,
    )
    .unwrap();
    assert_eq!(
        fs.get_flags(d).unwrap(),
        EXT2_DIRSYNC_FL | EXT2_TOPDIR_FL,
        "INDEX_FL is not the caller's to set"
    );
    // Per-file data journaling is not offered.
    let no_resource = FlagsCaller {
        uid: 0,
        cap_effective: ROOT_CAPS.cap_effective & !(1 << 24),
    };
    eperm(
        "+j without CAP_SYS_RESOURCE",
        fs.set_flags(f, EXT2_APPEND_FL | EXT3_JOURNAL_DATA_FL, &no_resource),
    );
    assert!(unsupported(fs.set_flags(
        f,
        EXT2_APPEND_FL | EXT3_JOURNAL_DATA_FL,
        &ROOT_CAPS
    )));

    // An inode that stays immutable changes no other flag.
    fs.set_flags(f, EXT2_IMMUTABLE_FL, &ROOT_CAPS).unwrap();
    eperm(
        "+A while immutable",
        fs.set_flags(f, EXT2_IMMUTABLE_FL | EXT2_NOATIME_FL, &ROOT_CAPS),
    );
    fs.set_flags(f, EXT2_IMMUTABLE_FL, &ROOT_CAPS).unwrap();
    fs.set_flags(f, EXT2_NOATIME_FL, &ROOT_CAPS).unwrap();

    // The version.
    eperm("non-owner SETVERSION", fs.set_version(f, 9, &other));
    fs.set_version(f, 9, &owner).unwrap();
    assert_eq!(fs.get_version(f).unwrap(), 9);
    fs.unmount().unwrap();
    drop(fs);
    common::assert_e2fsck_clean(&img.path, "after flag changes");
    let fs = common::mount_file(&img.path);
    assert_eq!(fs.get_flags(f).unwrap(), EXT2_NOATIME_FL);
    assert_eq!(fs.get_version(f).unwrap(), 9);
    fs.unmount().unwrap();
}

#[test]
fn immutable_and_append_only_refuse_every_change() {
    let img = image("flags-refuse");
    let fs = common::mount_file(&img.path);
    let imm = file(&fs, ROOT, "imm");
    let app = file(&fs, ROOT, "app");
    let plain = file(&fs, ROOT, "plain");
    let idir = fs.mkdir(ROOT, b"idir", 0o755, ME).unwrap().0;
    let adir = fs.mkdir(ROOT, b"adir", 0o755, ME).unwrap().0;
    let in_i = file(&fs, idir, "child");
    file(&fs, adir, "child");
    fs.set_flags(imm, EXT2_IMMUTABLE_FL, &ROOT_CAPS).unwrap();
    fs.set_flags(idir, EXT2_IMMUTABLE_FL, &ROOT_CAPS).unwrap();
    fs.set_flags(app, EXT2_APPEND_FL, &ROOT_CAPS).unwrap();
    fs.set_flags(adir, EXT2_APPEND_FL, &ROOT_CAPS).unwrap();

    let write = libc::O_WRONLY;
    let append = libc::O_WRONLY | libc::O_APPEND;
    let trunc = libc::O_WRONLY | libc::O_APPEND | libc::O_TRUNC;
    // Immutable: no writing open, write, truncate, fallocate, attribute,
    // xattr, unlink, rename or link.
    eperm("open", fs.may_open(imm, write));
    eperm("open O_APPEND", fs.may_open(imm, append));
    fs.may_open(imm, libc::O_RDONLY).unwrap();
    eperm("write", fs.write(imm, 0, b"x", true));
    eperm("fallocate", fs.fallocate(imm, 0, 4096, false, true));
    for (what, a) in [
        (
            "truncate",
            SetAttr {
                size: Some(0),
                ..Default::default()
            },
        ),
        (
            "chmod",
            SetAttr {
                mode: Some(0o600),
                ..Default::default()
            },
        ),
        (
            "chown",
            SetAttr {
                uid: Some(5),
                ..Default::default()
            },
        ),
        (
            "touch",
            SetAttr {
                mtime: Some(Default::default()),
                ..Default::default()
            },
        ),
    ] {
        eperm(what, fs.setattr(imm, &a, ME));
    }
    eperm(
        "setxattr",
        fs.setxattr(imm, b"user.a", b"1", SetMode::Either),
    );
    eperm("removexattr", fs.removexattr(imm, b"user.a"));
    eperm("unlink", fs.unlink(ROOT, b"imm"));
    eperm(
        "rename",
        fs.rename(ROOT, b"imm", ROOT, b"x", RenameFlags::default()),
    );
    eperm("link", fs.link(imm, ROOT, b"l"));
    eperm(
        "replaced by rename",
        fs.rename(ROOT, b"plain", ROOT, b"imm", RenameFlags::default()),
    );
    // Immutable directory: no name added, removed or renamed.
    eperm("create in", fs.mknod(idir, b"n", 0o644, 0, ME));
    eperm("mkdir in", fs.mkdir(idir, b"n", 0o755, ME));
    eperm("symlink in", fs.symlink(idir, b"n", b"t", ME));
    eperm("link into", fs.link(plain, idir, b"n"));
    eperm("unlink in", fs.unlink(idir, b"child"));
    eperm(
        "rename out",
        fs.rename(idir, b"child", ROOT, b"c", RenameFlags::default()),
    );
    eperm(
        "rename in",
        fs.rename(ROOT, b"plain", idir, b"p", RenameFlags::default()),
    );
    eperm("rmdir of it", fs.rmdir(ROOT, b"idir"));
    fs.write(in_i, 0, b"still writable", true).unwrap();

    // Append-only: opens must append, no truncate, attribute, explicit
    // time, xattr, unlink, rename or link; writes and touch work.
    eperm("open without O_APPEND", fs.may_open(app, write));
    eperm("open O_TRUNC", fs.may_open(app, trunc));
    fs.may_open(app, append).unwrap();
    assert_eq!(fs.write(app, 3, b"+more", true).unwrap(), 5);
    for (what, a) in [
        (
            "truncate",
            SetAttr {
                size: Some(0),
                ..Default::default()
            },
        ),
        (
            "chmod",
            SetAttr {
                mode: Some(0o600),
                ..Default::default()
            },
        ),
        (
            "utimes",
            SetAttr {
                mtime: Some(Default::default()),
                times_set: true,
                ..Default::default()
            },
        ),
    ] {
        eperm(what, fs.setattr(app, &a, ME));
    }
    let now = jbdfs::format::inode::Timestamp { sec: 1, nsec: 0 };
    let touch = SetAttr {
        atime: Some(now),
        mtime: Some(now),
        ..Default::default()
    };
    fs.setattr(app, &touch, ME).unwrap();
    eperm(
        "setxattr",
        fs.setxattr(app, b"user.a", b"1", SetMode::Either),
    );
    eperm("unlink", fs.unlink(ROOT, b"app"));
    eperm(
        "rename",
        fs.rename(ROOT, b"app", ROOT, b"x", RenameFlags::default()),
    );
    eperm("link", fs.link(app, ROOT, b"l"));
    // Append-only directory: names come, never go.
    fs.mknod(adir, b"new", 0o644, 0, ME).unwrap();
    eperm("unlink in", fs.unlink(adir, b"child"));
    eperm(
        "rename out",
        fs.rename(adir, b"child", ROOT, b"c", RenameFlags::default()),
    );
    eperm(
        "rename over a name in it",
        fs.rename(ROOT, b"plain", adir, b"child", RenameFlags::default()),
    );
    fs.rename(ROOT, b"plain", adir, b"moved-in", RenameFlags::default())
        .unwrap();

    for ino in [imm, idir, app, adir] {
        fs.set_flags(ino, 0, &ROOT_CAPS).unwrap();
    }
    fs.unlink(ROOT, b"imm").unwrap();
    fs.unlink(adir, b"child").unwrap();
    fs.unmount().unwrap();
    drop(fs);
    common::assert_e2fsck_clean(&img.path, "after refused changes");
}

#[test]
fn inheritance_and_the_sync_flags() {
    let img = image("flags-sync");
    let fs = common::mount_file(&img.path);
    let d = fs.mkdir(ROOT, b"d", 0o755, ME).unwrap().0;
    let all = EXT2_SYNC_FL | EXT2_DIRSYNC_FL | EXT2_NOATIME_FL | EXT2_NODUMP_FL | EXT2_TOPDIR_FL;
    fs.set_flags(d, all, &ROOT_CAPS).unwrap();
    let sub = fs.mkdir(d, b"sub", 0o755, ME).unwrap().0;
    let f = file(&fs, d, "f");
    let l = fs.symlink(d, b"l", b"f", ME).unwrap().0;
    assert_eq!(fs.get_flags(sub).unwrap(), all & !EXT2_TOPDIR_FL);
    assert_eq!(
        fs.get_flags(f).unwrap(),
        EXT2_SYNC_FL | EXT2_NOATIME_FL | EXT2_NODUMP_FL
    );
    assert_eq!(fs.get_flags(l).unwrap(), EXT2_NOATIME_FL | EXT2_NODUMP_FL);
    assert!(fs.may_open(f, libc::O_RDWR).unwrap().sync);

    // Each write to a +S file, and each change in a +D directory, commits.
    let before = requested_commits(&fs);
    for i in 0..4 {
        fs.write(f, i * 10, b"synchronous", true).unwrap();
    }
    assert!(requested_commits(&fs) >= before + 4);
    let plain = fs.mkdir(ROOT, b"plain", 0o755, ME).unwrap().0;
    fs.set_flags(plain, EXT2_DIRSYNC_FL, &ROOT_CAPS).unwrap();
    let before = requested_commits(&fs);
    for i in 0..4 {
        fs.mknod(plain, format!("n{i}").as_bytes(), 0o644, 0, ME)
            .unwrap();
    }
    assert!(requested_commits(&fs) >= before + 4);
    fs.unmount().unwrap();
    drop(fs);
    common::assert_e2fsck_clean(&img.path, "after inherited flags");
}
