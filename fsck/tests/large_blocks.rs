// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! Block sizes above 4 KiB (issue 29): images made by `mkfs.jbdfs -b 8192`,
//! `16384` and `65536`, filled through jbdfs's library, must be clean to
//! e2fsck and fsck.jbdfs and read back by debugfs; and e2fsprogs' own 8 KiB
//! block images (f_8192_block, f_16384_block) must come out of `fsck -yf`
//! as they come out of `e2fsck -yf`. Linux on x86 cannot mount these
//! images (blocks larger than its pages), so e2fsprogs is the oracle.

use jbdfs_testkit as common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{debugfs, parse_stat, run, Out, TempDir, TempImage};
use jbdfs::device::{FileDevice, OpenOptions};
use jbdfs::format::InodeNo;
use jbdfs::fs::namei::Caller;
use jbdfs::fs::{Filesystem, MountConfig};
use jbdfs_testkit::require::Need;

const FSCK: &str = env!("CARGO_BIN_EXE_fsck-jbdfs");
const ROOT: InodeNo = InodeNo(2);
const ME: Caller = Caller { uid: 0, gid: 0 };

/// e2fsprogs' test suite (the `tests/` folder of e2fsprogs, tarred); the
/// e2fsprogs-image test is skipped without it (a failure with
/// JBDFS_REQUIRE_ORACLES=1). Where: [`common::shared_file`].
const E2FSPROGS_TESTS: &str = "e2fsprogs/e2fsprogs-tests-a9f482e5.tar.gz";

/// Makes the image with the mkfs.jbdfs binary when it was built beside
/// fsck-jbdfs (a workspace build), else with the library call it wraps.
fn mkfs(img: &Path, bs: u32, size: &str) {
    let bin = Path::new(FSCK).with_file_name("mkfs-jbdfs");
    if bin.exists() {
        let bs = bs.to_string();
        let args = ["-q", "-b", &bs, img.to_str().unwrap(), size];
        run(bin.to_str().unwrap(), args).expect_ok();
        return;
    }
    eprintln!("mkfs-jbdfs is not built; using jbdfs::mkfs::make_filesystem");
    let req = jbdfs::mkfs::Request {
        options: jbdfs::mkfs::MkfsOptions {
            block_size: Some(bs),
            ..Default::default()
        },
        size: jbdfs::mkfs::parse_size(size, None),
        quiet: true,
        ..Default::default()
    };
    jbdfs::mkfs::make_filesystem(img, &req).unwrap();
}

/// fsck.jbdfs -fn exits 0 and leaves the image as it was.
fn fsck_clean(img: &Path, what: &str) -> Out {
    let before = std::fs::read(img).unwrap();
    let o = run(FSCK, [Path::new("-fn"), img]);
    assert!(o.success(), "{what}: fsck.jbdfs -fn:\n{}", o.describe());
    assert!(
        std::fs::read(img).unwrap() == before,
        "{what}: fsck -fn changed the image"
    );
    o
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A 255-byte name: 248 of them fill a 64 KiB directory block.
fn long_name(i: usize) -> String {
    format!("{i:05}-{}", "n".repeat(249))
}

const NAMES: usize = 600;
/// Names 246..494 fill the second block of a 64 KiB directory.
const EMPTIED: std::ops::Range<usize> = 240..500;

fn removed(i: usize) -> bool {
    i & 1 == 1 || EMPTIED.contains(&i)
}

/// Files, directories and links written through the library, then
/// unmounted: a directory of several blocks with entries removed from
/// each (the first of a block, the middle, a whole block's worth), a file
/// past the direct blocks, one reaching the double-indirect tree, and
/// symlinks of both kinds.
fn fill(img: &Path, bs: u32) -> Vec<u8> {
    let dev = FileDevice::open(img, OpenOptions::default()).unwrap();
    let fs = Filesystem::mount(Arc::new(dev), &MountConfig::default()).unwrap();
    assert_eq!(fs.block_size(), bs);
    let (d, _) = fs.mkdir(ROOT, b"dir", 0o755, ME).unwrap();
    for i in 0..NAMES {
        fs.mknod(d, long_name(i).as_bytes(), 0o100644, 0, ME)
            .unwrap();
    }
    // Every odd name, and all of EMPTIED: in 64 KiB blocks that empties
    // the second block, whose first entry then spans it (rec_len 65536).
    for i in (0..NAMES).filter(|&i| removed(i)) {
        fs.unlink(d, long_name(i).as_bytes()).unwrap();
    }
    let (sub, _) = fs.mkdir(d, b"sub", 0o700, ME).unwrap();
    fs.mknod(sub, b"inner", 0o100600, 0, ME).unwrap();
    let data = pattern(3 << 20, 5);
    let (f, _) = fs.mknod(ROOT, b"big", 0o100644, 0, ME).unwrap();
    fs.write(f, 0, &data, true).unwrap();
    // Past 12 + bs/4 blocks: the double-indirect tree at every block size.
    let far = (12 + u64::from(bs) / 4 + 5) * u64::from(bs) + 17;
    let (s, _) = fs.mknod(ROOT, b"sparse", 0o100644, 0, ME).unwrap();
    fs.write(s, far, b"far away", true).unwrap();
    fs.symlink(ROOT, b"fast", b"big", ME).unwrap();
    fs.symlink(ROOT, b"slow", "x".repeat(300).as_bytes(), ME)
        .unwrap();
    fs.unmount().unwrap();
    data
}

/// Mounted again, jbdfs reads the directory back, emptied block included.
fn relist(img: &Path, bs: u32) {
    let dev = FileDevice::open(img, OpenOptions::default()).unwrap();
    let cfg = MountConfig {
        read_only: true,
        ..Default::default()
    };
    let fs = Filesystem::mount(Arc::new(dev), &cfg).unwrap();
    let (d, _) = fs.lookup(ROOT, b"dir").unwrap();
    let names = fs.readdir(d, 0, usize::MAX).unwrap();
    let kept = (0..NAMES).filter(|&i| !removed(i)).count();
    assert_eq!(names.len(), kept + 3, "-b {bs}: ., .., sub and the names");
    fs.unmount().unwrap();
}

fn stat(img: &Path, path: &str) -> std::collections::BTreeMap<String, String> {
    let o = debugfs(img, &format!("stat {path}")).expect_ok();
    parse_stat(&o.stdout)
}

fn check_with_debugfs(img: &Path, bs: u32, data: &[u8], dir: &Path) {
    let what = format!("-b {bs}");
    let ls = debugfs(img, "ls -l /dir").expect_ok();
    // debugfs lists a block's unused first entry too, as inode 0.
    let listed: Vec<&str> = ls
        .stdout
        .lines()
        .filter(|l| l.split_whitespace().next() != Some("0"))
        .filter_map(|l| l.split_whitespace().last())
        .filter(|t| t.len() == 255)
        .collect();
    let kept: Vec<String> = (0..NAMES).filter(|&i| !removed(i)).map(long_name).collect();
    assert_eq!(listed.len(), kept.len(), "{what}: ls /dir:\n{}", ls.stdout);
    assert!(kept.iter().all(|n| listed.contains(&n.as_str())), "{what}");
    assert!(ls.stdout.contains(" sub"), "{what}: {}", ls.stdout);
    if bs == 65536 {
        // The emptied block holds one unused entry spanning it, stored as
        // EXT4_MAX_REC_LEN (65535), which e2fsck and debugfs just read.
        let blocks = debugfs(img, "blocks /dir").expect_ok();
        let second: u64 = blocks
            .stdout
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let head = common::read_bytes(img, second * u64::from(bs), 8);
        assert_eq!(u32::from_le_bytes(head[..4].try_into().unwrap()), 0);
        assert_eq!(u16::from_le_bytes([head[4], head[5]]), 65535);
    }
    let inner = debugfs(img, "ls -l /dir/sub").expect_ok();
    assert!(inner.stdout.contains("inner"), "{what}: {}", inner.stdout);

    let big = stat(img, "/big");
    assert_eq!(big["Size"], data.len().to_string(), "{what}: {big:?}");
    let out = dir.join(format!("big-{bs}"));
    let dump = format!("dump /big {}", out.display());
    debugfs(img, &dump).expect_ok();
    assert!(std::fs::read(&out).unwrap() == data, "{what}: /big differs");

    let far = (12 + u64::from(bs) / 4 + 5) * u64::from(bs) + 17;
    let sparse = stat(img, "/sparse");
    assert_eq!(sparse["Size"], (far + 8).to_string(), "{what}: {sparse:?}");
    let out = dir.join(format!("sparse-{bs}"));
    let dump = format!("dump /sparse {}", out.display());
    debugfs(img, &dump).expect_ok();
    let back = std::fs::read(&out).unwrap();
    assert_eq!(&back[far as usize..], b"far away", "{what}");
    assert!(back[..far as usize].iter().all(|&b| b == 0), "{what}");

    let fast = stat(img, "/fast");
    assert_eq!(fast["Fast link dest"], "big", "{what}");
    let slow = stat(img, "/slow");
    assert_eq!(slow["Size"], "300", "{what}: {slow:?}");
    assert_eq!(slow["Blockcount"], (bs / 512).to_string(), "{what}");
}

#[test]
fn mkfs_large_blocks_are_clean_and_readable_by_e2fsprogs() {
    jbdfs_testkit::require!(e2fsprogs);
    let dir = TempDir::new("large-blocks");
    for bs in [8192u32, 16384, 65536] {
        let what = format!("mkfs.jbdfs -b {bs}");
        let img = TempImage::new(&format!("b{bs}"));
        mkfs(&img.path, bs, "256M");
        let h = common::dumpe2fs_header(&img.path);
        assert_eq!(h.num("Block size"), u64::from(bs), "{what}");
        assert_eq!(h.num("First block"), 0, "{what}");
        common::assert_e2fsck_clean(&img.path, &format!("{what} (fresh)"));
        fsck_clean(&img.path, &format!("{what} (fresh)"));
        if bs == 65536 {
            // jbdfs indexes /dir where dir_index is on; the emptied-block
            // check needs it linear (8 and 16 KiB cover the htree).
            let req = "feature -dir_index";
            run("debugfs", ["-w", "-R", req, img.path.to_str().unwrap()]).expect_ok();
        }

        let data = fill(&img.path, bs);
        common::assert_e2fsck_clean(&img.path, &what);
        let o = fsck_clean(&img.path, &what);
        assert!(o.stdout.contains("Pass 5"), "{what}: {}", o.describe());
        check_with_debugfs(&img.path, bs, &data, &dir.path);
        relist(&img.path, bs);
    }
}

/// Unpacks `f_NAME/image.gz` from the e2fsprogs suite into `dir`.
fn e2fsprogs_image(tarball: &Path, case: &str, dir: &Path) -> (PathBuf, String) {
    let member = format!("e2fsprogs-tests/tests/{case}");
    let o = run(
        "tar",
        [
            "-xzf",
            tarball.to_str().unwrap(),
            "-C",
            dir.to_str().unwrap(),
            &format!("{member}/image.gz"),
            &format!("{member}/expect.1"),
        ],
    );
    assert!(o.success(), "{}", o.describe());
    let gz = dir.join(&member).join("image.gz");
    run("gzip", [Path::new("-d"), &gz]).expect_ok();
    let img = dir.join(format!("{case}.img"));
    std::fs::rename(dir.join(&member).join("image"), &img).unwrap();
    let expect = std::fs::read_to_string(dir.join(&member).join("expect.1")).unwrap();
    (img, expect)
}

/// The lines both fscks print, with the image's name as e2fsprogs' test
/// harness writes it, and the exit status as `expect.1` ends.
fn transcript(o: &Out, img: &Path) -> String {
    let name = img.to_str().unwrap();
    let mut t = o.stdout.replace(name, "test_filesys");
    t.push_str(&format!("Exit status is {}\n", o.code.unwrap_or(-1)));
    t
}

#[test]
fn e2fsprogs_large_block_images_are_checked_as_e2fsck_checks_them() {
    let tarball = common::shared_file(E2FSPROGS_TESTS);
    jbdfs_testkit::require!(e2fsprogs, (Need::File(tarball.clone())));
    let tarball = tarball.as_path();
    let dir = TempDir::new("e2fsprogs-large");
    for case in ["f_8192_block", "f_16384_block"] {
        let (img, expect) = e2fsprogs_image(tarball, case, &dir.path);
        let theirs = dir.path.join(format!("{case}-e2fsck.img"));
        std::fs::copy(&img, &theirs).unwrap();
        let e = run("e2fsck", [Path::new("-yf"), &theirs]);
        let ours = run(FSCK, [Path::new("-yf"), &img]);
        assert_eq!(
            transcript(&ours, &img),
            transcript(&e, &theirs),
            "{case}: fsck.jbdfs -yf and e2fsck -yf differ"
        );
        assert_eq!(transcript(&ours, &img), expect, "{case}: expect.1");
        common::assert_e2fsck_clean(&img, case);
        fsck_clean(&img, case);
    }
}
