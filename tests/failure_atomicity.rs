// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! A failed operation leaves the filesystem exactly as it was (issue 16):
//! each ENOSPC (or EEXIST) that comes after an operation has begun to
//! change buffers, in-process on a memory device. Every test compares
//! what statfs, getattr, getxattr and readdir say before and after the
//! failure, then unmounts and asks `e2fsck -fn`.

use jbdfs_testkit as common;
use jbdfs_testkit as robust_common;

use std::sync::Arc;

use jbdfs::device::{BlockDevice, MemoryDevice};
use jbdfs::format::InodeNo;
use jbdfs::fs::namei::{RenameFlags, SetAttr};
use jbdfs::fs::xattr::SetMode;
use jbdfs::fs::{Filesystem, FsError, MountConfig};
use jbdfs::mkfs::MkfsOptions;
use robust_common::*;

/// An image whose directories stay linear (no dir_index).
fn linear_image(size: u64, block_size: u32) -> Arc<MemoryDevice> {
    mem_image(
        size,
        &MkfsOptions {
            block_size: Some(block_size),
            features: vec!["^dir_index".into()],
            ..Default::default()
        },
    )
}

/// Everything a failed operation on these inodes could have changed:
/// the free counts, each inode as getattr shows it, each directory's
/// entries.
#[derive(Debug, PartialEq, Eq)]
struct State {
    free_blocks: u64,
    free_inodes: u64,
    inodes: Vec<String>,
    dirs: Vec<Vec<String>>,
}

fn state(fs: &Filesystem, inodes: &[InodeNo], dirs: &[InodeNo]) -> State {
    let s = fs.statfs().unwrap();
    State {
        free_blocks: s.free_blocks,
        free_inodes: s.free_inodes,
        inodes: inodes.iter().map(|&i| inode_summary(fs, i)).collect(),
        dirs: dirs.iter().map(|&d| listing(fs, d)).collect(),
    }
}

/// What getattr says of `ino`, less the bytes nobody reads.
fn inode_summary(fs: &Filesystem, ino: InodeNo) -> String {
    let i = fs.getattr(ino).unwrap();
    format!(
        "inode {}: size {} links {} i_blocks {} flags {:#x} xattr block {} map {:?} ctime {:?} mtime {:?}",
        ino.0,
        i.i_size,
        i.i_links_count,
        i.i_blocks,
        i.i_flags,
        i.i_file_acl,
        i.i_block,
        i.i_ctime,
        i.i_mtime
    )
}

fn listing(fs: &Filesystem, dir: InodeNo) -> Vec<String> {
    let mut v: Vec<_> = fs
        .readdir(dir, 0, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| format!("{}={}", String::from_utf8_lossy(&e.name), e.ino.0))
        .collect();
    v.sort();
    v
}

/// Runs `op`, which must fail with ENOSPC, and checks that it changed
/// nothing `inodes` and `dirs` show.
fn fails_changing_nothing<T: std::fmt::Debug>(
    fs: &Filesystem,
    inodes: &[InodeNo],
    dirs: &[InodeNo],
    what: &str,
    op: impl FnOnce() -> Result<T, FsError>,
) {
    let before = state(fs, inodes, dirs);
    let r = op();
    assert!(
        matches!(r, Err(FsError::NoSpace)),
        "{what}: expected ENOSPC, got {r:?}"
    );
    let after = state(fs, inodes, dirs);
    assert!(
        after == before,
        "{what} changed the filesystem:\n{}",
        differences(&before, &after)
    );
}

/// What differs between two states, one line each.
fn differences(before: &State, after: &State) -> String {
    let mut out = Vec::new();
    if before.free_blocks != after.free_blocks {
        out.push(format!(
            "free blocks {} -> {}",
            before.free_blocks, after.free_blocks
        ));
    }
    if before.free_inodes != after.free_inodes {
        out.push(format!(
            "free inodes {} -> {}",
            before.free_inodes, after.free_inodes
        ));
    }
    for (b, a) in before.inodes.iter().zip(&after.inodes) {
        if b != a {
            out.push(format!("before: {b}\nafter:  {a}"));
        }
    }
    for (b, a) in before.dirs.iter().zip(&after.dirs) {
        let gone: Vec<_> = b.iter().filter(|n| !a.contains(n)).collect();
        let new: Vec<_> = a.iter().filter(|n| !b.contains(n)).collect();
        if !gone.is_empty() || !new.is_empty() {
            out.push(format!("entries gone {gone:?}, new {new:?}"));
        }
    }
    out.join("\n")
}

/// Files of one block each, to be deleted later to free exactly that many.
fn spares(fs: &Filesystem, n: usize) {
    for i in 0..n {
        make_file(fs, ROOT, &format!("spare{i}"), b"s");
    }
}

/// Deletes `n` spares and commits, so exactly `n` blocks can be allocated.
fn free_spares(fs: &Filesystem, n: usize) {
    let before = fs.statfs().unwrap().free_blocks;
    for i in 0..n {
        fs.unlink(ROOT, format!("spare{i}").as_bytes()).unwrap();
    }
    fs.journal().force_commit().unwrap();
    assert_eq!(fs.statfs().unwrap().free_blocks, before + n as u64);
}

/// Fills every free block (the reserved ones too) with one file.
fn fill(fs: &Filesystem) {
    let (f, _) = fs.mknod(ROOT, b"filler", 0o100644, 0, ME).unwrap();
    let chunk = vec![0xA5u8; 1 << 20];
    let mut at = 0u64;
    // Blocks freed by the running transaction can be had once it commits.
    for _ in 0..2 {
        fs.journal().force_commit().unwrap();
        loop {
            match fs.write(f, at, &chunk, true) {
                Ok(n) => at += n as u64,
                Err(FsError::NoSpace) => break,
                Err(e) => panic!("filling: {e}"),
            }
        }
    }
    fs.journal().force_commit().unwrap();
    assert_eq!(fs.statfs().unwrap().free_blocks, 0, "the filler left room");
}

fn xattr_name(i: usize) -> Vec<u8> {
    format!("user.attribute{i:04}").into_bytes()
}

fn xattr_value(i: usize) -> Vec<u8> {
    format!("val{i:05}").into_bytes()
}

/// Sets attributes 0, 1, ... on `f` until one fails; returns how many
/// fit and the error of the first that did not.
fn set_until_full(fs: &Filesystem, f: InodeNo) -> (usize, FsError) {
    for i in 0.. {
        if let Err(e) = fs.setxattr(f, &xattr_name(i), &xattr_value(i), SetMode::Create) {
            return (i, e);
        }
        if i == 20 {
            fs.fsync(f, false).unwrap();
        }
    }
    unreachable!()
}

fn check_xattrs(fs: &Filesystem, f: InodeNo, n: usize, what: &str) {
    for i in 0..n {
        match fs.getxattr(f, &xattr_name(i)) {
            Ok(v) => assert_eq!(v, xattr_value(i), "{what}: attribute {i}"),
            Err(e) => panic!("{what}: attribute {i} of {n} is gone: {e:?}"),
        }
    }
    let names = fs.listxattr(f).unwrap();
    let count = names.iter().filter(|&&b| b == 0).count();
    assert_eq!(count, n, "{what}: listxattr");
}

/// Issue 16: a setxattr that does not fit in the external block fails
/// with ENOSPC and leaves every attribute, synced or not, in place.
#[test]
fn setxattr_enospc_keeps_every_attribute() {
    let mem = mem_image_bs(32 << 20, 4096);
    let fs = mount_mem(&mem);
    let (f, _) = fs.mknod(ROOT, b"f", 0o100644, 0, ME).unwrap();
    let (n, err) = set_until_full(&fs, f);
    assert!(matches!(err, FsError::NoSpace), "{err:?}");
    assert!(n > 60, "only {n} attributes fit");
    check_xattrs(&fs, f, n, "after the failed setxattr");
    assert_ne!(fs.getattr(f).unwrap().i_file_acl, 0);
    fails_changing_nothing(&fs, &[f], &[], "another new attribute", || {
        fs.setxattr(f, &xattr_name(n), &xattr_value(n), SetMode::Either)
    });
    fails_changing_nothing(&fs, &[f], &[], "a larger value", || {
        fs.setxattr(f, &xattr_name(7), &[b'x'; 400], SetMode::Replace)
    });
    check_xattrs(&fs, f, n, "after more failed setxattrs");
    fs.unmount().unwrap();
    assert_mem_clean(&mem, "after failed setxattrs");
    let fs = mount_mem(&mem);
    check_xattrs(&fs, f, n, "after remount");
    fs.unmount().unwrap();
}

/// The same with a block two inodes share: a set that does not fit, and
/// one that fits but finds no block to copy the shared one into, change
/// neither inode nor the block's refcount; the share index still leads
/// later sets to the right block.
#[test]
fn setxattr_enospc_on_a_shared_block_changes_nothing() {
    let mem = mem_image_bs(32 << 20, 4096);
    let fs = mount_mem(&mem);
    // How many fit, learnt on a file of its own: a and b never fail
    // before the block is shared.
    let (probe, _) = fs.mknod(ROOT, b"probe", 0o100644, 0, ME).unwrap();
    let (n, err) = set_until_full(&fs, probe);
    assert!(matches!(err, FsError::NoSpace), "{err:?}");
    fs.unlink(ROOT, b"probe").unwrap();
    let (a, _) = fs.mknod(ROOT, b"a", 0o100644, 0, ME).unwrap();
    let (b, _) = fs.mknod(ROOT, b"b", 0o100644, 0, ME).unwrap();
    for f in [a, b] {
        for i in 0..n {
            fs.setxattr(f, &xattr_name(i), &xattr_value(i), SetMode::Create)
                .unwrap();
        }
    }
    let acl = |i: InodeNo| fs.getattr(i).unwrap().i_file_acl;
    assert_eq!(acl(a), acl(b), "identical attributes share one block");
    fails_changing_nothing(&fs, &[a, b], &[], "a new attribute on b", || {
        fs.setxattr(b, &xattr_name(n), &xattr_value(n), SetMode::Create)
    });
    check_xattrs(&fs, a, n, "a, after b's failed setxattr");
    check_xattrs(&fs, b, n, "b, after its failed setxattr");

    // A change that fits needs a block of b's own: none is left.
    fill(&fs);
    fails_changing_nothing(&fs, &[a, b], &[], "a changed value on b", || {
        fs.setxattr(b, &xattr_name(3), b"VAL00003", SetMode::Replace)
    });
    check_xattrs(&fs, a, n, "a, after b's copy failed");
    check_xattrs(&fs, b, n, "b, after its copy failed");
    fs.unlink(ROOT, b"filler").unwrap();
    fs.journal().force_commit().unwrap();

    // b gets a block of its own, then shares a's again.
    fs.removexattr(b, &xattr_name(5)).unwrap();
    assert_ne!(acl(a), acl(b));
    fs.setxattr(b, &xattr_name(5), &xattr_value(5), SetMode::Create)
        .unwrap();
    assert_eq!(acl(a), acl(b), "b shares a's block again");
    let (c, _) = fs.mknod(ROOT, b"c", 0o100644, 0, ME).unwrap();
    for i in 0..n {
        fs.setxattr(c, &xattr_name(i), &xattr_value(i), SetMode::Create)
            .unwrap();
    }
    assert_eq!(acl(a), acl(c), "c shares the block too");
    fs.unmount().unwrap();
    assert_mem_clean(&mem, "after failed setxattrs on a shared block");
    let fs = mount_mem(&mem);
    for f in [a, b, c] {
        check_xattrs(&fs, f, n, "after remount");
    }
    fs.unmount().unwrap();
}

/// A create whose name needs a new directory block, on a full disk:
/// mknod, mkdir, symlink, link and rename all fail with ENOSPC and leave
/// no inode allocated, no link counted, no name added.
#[test]
fn creates_needing_a_directory_block_on_a_full_disk_change_nothing() {
    let mem = mem_image_bs(16 << 20, 1024);
    let fs = mount_mem(&mem);
    let (d, _) = fs.mkdir(ROOT, b"d", 0o755, ME).unwrap();
    let (x, _) = fs.mknod(ROOT, b"x", 0o100644, 0, ME).unwrap();
    fill(&fs);
    // Fill d's only block; the first name that does not fit fails.
    let mut i = 0;
    loop {
        let name = format!("entry{i:04}");
        match fs.mknod(d, name.as_bytes(), 0o100644, 0, ME) {
            Ok(_) => i += 1,
            Err(FsError::NoSpace) => break,
            Err(e) => panic!("{name}: {e}"),
        }
    }
    assert_eq!(fs.getattr(d).unwrap().i_size, 1024, "{i} names");
    let all = [d, x, ROOT];
    let dirs = [d, ROOT];
    fails_changing_nothing(&fs, &all, &dirs, "mknod", || {
        fs.mknod(d, b"one-more", 0o100644, 0, ME)
    });
    fails_changing_nothing(&fs, &all, &dirs, "mkdir", || {
        fs.mkdir(d, b"one-more", 0o755, ME)
    });
    fails_changing_nothing(&fs, &all, &dirs, "symlink", || {
        fs.symlink(d, b"one-more", b"target", ME)
    });
    fails_changing_nothing(&fs, &all, &dirs, "link", || fs.link(x, d, b"one-more"));
    fails_changing_nothing(&fs, &all, &dirs, "rename", || {
        fs.rename(ROOT, b"x", d, b"one-more", RenameFlags::default())
    });
    let names = listing(&fs, d);
    fs.unmount().unwrap();
    assert_mem_clean(&mem, "after creates failed on a full disk");
    let fs = mount_mem(&mem);
    assert_eq!(listing(&fs, d), names);
    fs.unmount().unwrap();
}

/// mkdir and a slow symlink with one block free and a full directory:
/// the new inode takes the block, the directory needs another. Both the
/// block and the inode go back, and the inode's slot is never written.
#[test]
fn mkdir_and_slow_symlink_with_one_free_block_change_nothing() {
    let mem = mem_image_bs(16 << 20, 1024);
    let fs = mount_mem(&mem);
    let (d, _) = fs.mkdir(ROOT, b"d", 0o755, ME).unwrap();
    spares(&fs, 1);
    fill(&fs);
    let mut i = 0;
    while fs
        .mknod(d, format!("entry{i:04}").as_bytes(), 0o100644, 0, ME)
        .is_ok()
    {
        i += 1;
    }
    free_spares(&fs, 1);
    let all = [d, ROOT];
    fails_changing_nothing(&fs, &all, &all, "mkdir", || {
        fs.mkdir(d, b"one-more", 0o755, ME)
    });
    fs.journal().force_commit().unwrap();
    let target = vec![b't'; 200];
    fails_changing_nothing(&fs, &all, &all, "slow symlink", || {
        fs.symlink(d, b"one-more", &target, ME)
    });
    fs.journal().force_commit().unwrap();
    // The block is still there for one that fits.
    fs.symlink(ROOT, b"fits", &target, ME).unwrap();
    assert_eq!(fs.statfs().unwrap().free_blocks, 0);
    fs.unmount().unwrap();
    assert_mem_clean(&mem, "after mkdir and symlink failed with one block free");
}

/// A directory of exactly 12 full blocks and one block free: a new name
/// needs the indirect block and a data block. The indirect block must
/// not stay allocated when the data block cannot be had.
#[test]
fn a_directory_insert_needing_an_indirect_block_changes_nothing() {
    let mem = linear_image(16 << 20, 1024);
    let fs = mount_mem(&mem);
    let (d, _) = fs.mkdir(ROOT, b"d", 0o755, ME).unwrap();
    let (x, _) = fs.mknod(ROOT, b"x", 0o100644, 0, ME).unwrap();
    // 8-byte names take 16 bytes: 62 in the first block, 64 in the others.
    for i in 0..62 + 11 * 64 {
        fs.link(x, d, format!("n{i:07}").as_bytes()).unwrap();
    }
    assert_eq!(fs.getattr(d).unwrap().i_size, 12 * 1024);
    spares(&fs, 1);
    fill(&fs);
    free_spares(&fs, 1);
    let all = [d, x, ROOT];
    let dirs = [d, ROOT];
    fails_changing_nothing(&fs, &all, &dirs, "rename into d", || {
        fs.rename(ROOT, b"x", d, b"x0000000", RenameFlags::default())
    });
    fails_changing_nothing(&fs, &all, &dirs, "mknod in d", || {
        fs.mknod(d, b"y0000000", 0o100644, 0, ME)
    });
    fs.unmount().unwrap();
    assert_mem_clean(&mem, "after inserts needing an indirect block failed");
}

/// Writes needing a new pointer block and a data block, one block free:
/// past the direct blocks (a new single indirect block) and past the
/// first double indirect leaf (a new leaf hung in an existing block).
#[test]
fn writes_needing_a_pointer_block_on_a_full_disk_change_nothing() {
    let mem = mem_image_bs(16 << 20, 1024);
    let fs = mount_mem(&mem);
    let direct = make_file(&fs, ROOT, "direct", &pattern(12 * 1024, 1));
    let leaf = make_file(&fs, ROOT, "leaf", &pattern((12 + 256 + 256) * 1024, 2));
    spares(&fs, 1);
    fill(&fs);
    free_spares(&fs, 1);
    for (f, blocks) in [(direct, 12u64), (leaf, 12 + 256 + 256)] {
        fails_changing_nothing(&fs, &[f], &[], &format!("write at block {blocks}"), || {
            fs.write(f, blocks * 1024, &[7u8; 1024], true)
        });
        fs.journal().force_commit().unwrap();
    }
    assert!(read_all(&fs, direct) == pattern(12 * 1024, 1));
    assert!(read_all(&fs, leaf) == pattern((12 + 256 + 256) * 1024, 2));
    fs.unmount().unwrap();
    assert_mem_clean(&mem, "after writes failed for a pointer block");
}

/// fallocate is all or nothing: refused at once when the holes alone do
/// not fit, and undone when its pointer blocks tip it over, with and
/// without KEEP_SIZE.
#[test]
fn fallocate_on_a_nearly_full_disk_changes_nothing() {
    let mem = mem_image_bs(16 << 20, 1024);
    let fs = mount_mem(&mem);
    let (f, _) = fs.mknod(ROOT, b"f", 0o100644, 0, ME).unwrap();
    let (g, _) = fs.mknod(ROOT, b"g", 0o100644, 0, ME).unwrap();
    let size = SetAttr {
        size: Some(20 * 1024),
        ..Default::default()
    };
    fs.setattr(g, &size, ME).unwrap();
    spares(&fs, 20);
    fill(&fs);
    free_spares(&fs, 20);
    fails_changing_nothing(&fs, &[f], &[], "fallocate of 30 blocks", || {
        fs.fallocate(f, 0, 30 * 1024, false, true)
    });
    // 20 data blocks fit, the indirect block past the 12th does not.
    fails_changing_nothing(&fs, &[f], &[], "fallocate of 20 blocks", || {
        fs.fallocate(f, 0, 20 * 1024, false, true)
    });
    fs.journal().force_commit().unwrap();
    fails_changing_nothing(&fs, &[g], &[], "fallocate KEEP_SIZE of 20 blocks", || {
        fs.fallocate(g, 0, 20 * 1024, true, true)
    });
    fs.journal().force_commit().unwrap();
    // What fits still does.
    fs.fallocate(f, 0, 12 * 1024, false, true).unwrap();
    assert_eq!(fs.getattr(f).unwrap().i_size, 12 * 1024);
    fs.unmount().unwrap();
    assert_mem_clean(&mem, "after fallocates failed");
}

/// A fallocate larger than one transaction whose pointer blocks tip it
/// over at the end: the handles that committed their share are undone too.
/// A 1 MiB journal gives a transaction 256 credits, and each 256 blocks
/// of 1 KiB cost an indirect block: 160 MiB needs three handles.
#[test]
fn fallocate_undone_across_handles() {
    let mem = mem_image(
        192 << 20,
        &MkfsOptions {
            block_size: Some(1024),
            journal_mib: Some(1),
            ..Default::default()
        },
    );
    let fs = mount_mem(&mem);
    let (f, _) = fs.mknod(ROOT, b"f", 0o100644, 0, ME).unwrap();
    make_file(&fs, ROOT, "room", &pattern(160 << 20, 3));
    fill(&fs);
    fs.unlink(ROOT, b"room").unwrap();
    fs.journal().force_commit().unwrap();
    let free = fs.statfs().unwrap().free_blocks;
    let handles = fs.journal().handles_started();
    fails_changing_nothing(&fs, &[f], &[], "fallocate of every free block", || {
        fs.fallocate(f, 0, free * 1024, false, true)
    });
    let used = fs.journal().handles_started() - handles;
    assert!(used >= 3, "the fallocate took only {used} handles");
    fs.unmount().unwrap();
    assert_mem_clean(&mem, "after a fallocate undone across handles");
}

/// An image made by e2fsprogs with directory `d` of 500 names, indexed
/// (htree) by `e2fsck -D`; `None` when e2fsprogs is missing.
fn htree_image() -> Option<Vec<u8>> {
    if !jbdfs_testkit::available!("the e2fsprogs image"; e2fsprogs) {
        return None;
    }
    let img = common::mke2fs_image("atomicity-htree", 8 << 20, &["-b", "1024"])
        .unwrap_or_else(|o| panic!("{}", o.describe()));
    let mut cmds = String::from("mkdir d\n");
    for i in 0..500 {
        cmds.push_str(&format!("write /dev/null d/name{i}\n"));
    }
    let cmd_file = common::TempImage::new("atomicity-cmds");
    std::fs::write(&cmd_file.path, cmds).unwrap();
    common::run("debugfs", ["-w", "-f", cmd_file.path_str(), img.path_str()]).expect_ok();
    let fixed = common::run("e2fsck", ["-fyD", img.path_str()]);
    assert!(matches!(fixed.code, Some(0..=2)), "{}", fixed.describe());
    common::assert_e2fsck_clean(&img.path, "the htree image");
    Some(std::fs::read(&img.path).unwrap())
}

/// A link that fails (EEXIST) into a Linux htree directory leaves its
/// index flag: jbdfs clears it only when it changes the directory.
#[test]
fn a_failed_insert_keeps_the_htree_flag() {
    const EXT2_INDEX_FL: u32 = 0x1000;
    let Some(bytes) = htree_image() else {
        return;
    };
    let mem = Arc::new(MemoryDevice::from_vec(bytes));
    let dev: Arc<dyn BlockDevice> = mem.clone();
    let fs = Filesystem::mount(dev, &MountConfig::default()).unwrap();
    let (d, dir) = fs.lookup(ROOT, b"d").unwrap();
    assert_ne!(dir.i_flags & EXT2_INDEX_FL, 0, "e2fsck -D made no htree");
    let (f, _) = fs.lookup(d, b"name0").unwrap();
    let before = state(&fs, &[d, f], &[d]);
    let r = fs.link(f, d, b"name7");
    assert!(matches!(r, Err(FsError::Exists)), "{r:?}");
    let after = state(&fs, &[d, f], &[d]);
    assert!(
        after == before,
        "the failed link changed d:\n{}",
        differences(&before, &after)
    );
    fs.unmount().unwrap();
    assert_mem_clean(&mem, "after a failed link into an htree directory");
}

/// An indexed directory on a full disk: a name whose leaf is full needs a
/// new block for the split. Such a create fails with ENOSPC and changes
/// nothing; names whose leaf has room still go in.
#[test]
fn an_htree_split_without_a_free_block_changes_nothing() {
    let mem = mem_image_bs(16 << 20, 1024);
    let fs = mount_mem(&mem);
    let (d, _) = fs.mkdir(ROOT, b"d", 0o755, ME).unwrap();
    let (x, _) = fs.mknod(ROOT, b"x", 0o100644, 0, ME).unwrap();
    for i in 0..2000 {
        fs.link(x, d, format!("n{i:07}").as_bytes()).unwrap();
    }
    fill(&fs);
    let all = [d, x, ROOT];
    let dirs = [d];
    let (mut ok, mut failed) = (0, 0);
    for i in 0..3000 {
        let before = state(&fs, &all, &dirs);
        match fs.link(x, d, format!("m{i:07}").as_bytes()) {
            Ok(_) => ok += 1,
            Err(e) => {
                assert!(matches!(e, FsError::NoSpace), "{e:?}");
                let after = state(&fs, &all, &dirs);
                assert!(after == before, "{}", differences(&before, &after));
                failed += 1;
            }
        }
    }
    assert!(ok > 0 && failed > 0, "{ok} went in, {failed} failed");
    fs.unmount().unwrap();
    assert_mem_clean(&mem, "after creates in a full htree directory failed");
}
