// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! mkfs.jbdfs against e2fsprogs: images made in-process by
//! `jbdfs::mkfs::make_filesystem` must pass `e2fsck -fn`, show ext3's
//! features and mke2fs's geometry in `dumpe2fs`, mount as ext3 in the
//! kernel and survive use there.

use jbdfs_testkit as common;

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use jbdfs::mkfs::{make_filesystem, MkfsOptions, Request};
use jbdfs_testkit::require::Need;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn request(size: u64, options: MkfsOptions) -> Request {
    Request {
        options,
        size: Some(size),
        quiet: true,
        ..Default::default()
    }
}

fn opts(block_size: u32, inode_size: u16) -> MkfsOptions {
    MkfsOptions {
        block_size: Some(block_size),
        inode_size,
        ..Default::default()
    }
}

/// Makes a jbdfs image of `size` bytes with `options` at a fresh path.
fn make(tag: &str, size: u64, options: MkfsOptions) -> TempImage {
    let img = TempImage::new(tag);
    let req = request(size, options.clone());
    if let Err(e) = make_filesystem(&img.path, &req) {
        panic!("make_filesystem({size} bytes, {options:?}) failed: {e}");
    }
    img
}

/// Makes an image with mke2fs on a sparse file of `size` bytes.
fn make_mke2fs(tag: &str, size: u64, extra: &[&str]) -> TempImage {
    let img = TempImage::sparse(tag, size);
    let mut args: Vec<&OsStr> = ["-q", "-F", "-t", "ext3"].iter().map(OsStr::new).collect();
    args.extend(extra.iter().map(OsStr::new));
    args.push(img.path.as_os_str());
    run("mke2fs", args).expect_ok();
    img
}

fn human(size: u64) -> String {
    if size >= GIB {
        format!("{}G", size / GIB)
    } else {
        format!("{}M", size / MIB)
    }
}

/// Every block size and inode size at `size`: e2fsck -fn must exit 0.
fn e2fsck_matrix(size: u64) {
    e2fsck_matrix_of(size, &[1024, 2048, 4096]);
}

fn e2fsck_matrix_of(size: u64, block_sizes: &[u32]) {
    let mut failures = Vec::new();
    for &bs in block_sizes {
        for isz in [128u16, 256] {
            let what = format!("{} image, -b {bs} -I {isz}", human(size));
            let img = make(&format!("fsck{bs}-{isz}"), size, opts(bs, isz));
            let o = e2fsck(&img.path);
            if !o.success() {
                failures.push(format!("{what}:\n{}", o.describe()));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "e2fsck -fn rejected {} image(s):\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn e2fsck_accepts_every_geometry_8m() {
    e2fsck_matrix(8 * MIB);
}

#[test]
fn e2fsck_accepts_every_geometry_100m() {
    e2fsck_matrix(100 * MIB);
}

#[test]
fn e2fsck_accepts_every_geometry_2g() {
    e2fsck_matrix(2 * GIB);
}

/// Blocks above 4 KiB (issue 29), which Linux on x86 cannot mount.
#[test]
fn e2fsck_accepts_large_blocks_2g() {
    e2fsck_matrix_of(2 * GIB, &[8192, 16384, 32768, 65536]);
}

#[test]
fn dumpe2fs_lists_ext3_features() {
    for (size, bs) in [(8 * MIB, None), (100 * MIB, Some(4096)), (2 * GIB, None)] {
        let o = MkfsOptions {
            block_size: bs,
            ..Default::default()
        };
        let img = make("features", size, o);
        let h = dumpe2fs_header(&img.path);
        let features = h.features();
        for want in [
            "has_journal",
            "ext_attr",
            "filetype",
            "sparse_super",
            "large_file",
        ] {
            assert!(
                features.contains(want),
                "{} image: '{want}' missing from Filesystem features: {features:?}",
                human(size)
            );
        }
        assert_eq!(h.field("Filesystem state"), "clean");
        assert_eq!(h.num("Journal inode"), 8);
    }
}

#[test]
fn journal_size_option_is_honoured() {
    // (filesystem size, block size, journal MiB)
    let cases = [
        (100 * MIB, 1024u32, 4u64),
        (100 * MIB, 1024, 10),
        (100 * MIB, 4096, 16),
        (2 * GIB, 4096, 64),
        (2 * GIB, 2048, 128),
    ];
    for (size, bs, mib) in cases {
        let o = MkfsOptions {
            block_size: Some(bs),
            journal_mib: Some(mib),
            ..Default::default()
        };
        let img = make("journal", size, o);
        let h = dumpe2fs_header(&img.path);
        let what = format!("{} image, -b {bs}, -J size={mib}", human(size));
        assert_eq!(h.journal_bytes(), mib * MIB, "{what}: Total journal size");
        assert_eq!(
            h.num("Total journal blocks"),
            mib * MIB / bs as u64,
            "{what}: Total journal blocks"
        );
        assert_e2fsck_clean(&img.path, &what);
    }
}

/// With no options, the geometry mke2fs picks for the same size.
fn default_geometry_matches_mke2fs(size: u64) {
    let ours = make("defaults", size, MkfsOptions::default());
    let theirs = make_mke2fs("defaults-mke2fs", size, &[]);
    let (a, b) = (dumpe2fs_header(&ours.path), dumpe2fs_header(&theirs.path));
    let mut diffs = Vec::new();
    for key in [
        "Block size",
        "Block count",
        "Inode count",
        "Inode size",
        "Total journal blocks",
    ] {
        if a.get(key) != b.get(key) {
            diffs.push(format!(
                "{key}: jbdfs {:?}, mke2fs {:?}",
                a.get(key),
                b.get(key)
            ));
        }
    }
    assert!(
        diffs.is_empty(),
        "{} image made with default options differs from mke2fs -t ext3:\n{}",
        human(size),
        diffs.join("\n")
    );
}

#[test]
fn default_geometry_matches_mke2fs_8m() {
    default_geometry_matches_mke2fs(8 * MIB);
}

#[test]
fn default_geometry_matches_mke2fs_100m() {
    default_geometry_matches_mke2fs(100 * MIB);
}

#[test]
fn default_geometry_matches_mke2fs_2g() {
    default_geometry_matches_mke2fs(2 * GIB);
}

/// Available bytes on the filesystem holding `dir`, from `df -Pk`.
fn available_bytes(dir: &Path) -> Option<u64> {
    let o = run("df", [OsStr::new("-Pk"), dir.as_os_str()]);
    let line = o.stdout.lines().nth(1)?;
    let kib: u64 = line.split_whitespace().nth(3)?.parse().ok()?;
    Some(kib * 1024)
}

#[test]
fn one_tebibyte_sparse_image_is_quick_and_small() {
    let dir = std::env::temp_dir();
    let free = available_bytes(&dir);
    jbdfs_testkit::require!(
        (Need::That(
            free.is_some_and(|n| n >= 2 * GIB),
            format!("{} has {free:?} bytes free, need 2 GiB", dir.display())
        ))
    );
    let img = TempImage::new_in(&dir, "1tib");
    let start = Instant::now();
    let summary = make_filesystem(&img.path, &request(1 << 40, MkfsOptions::default()))
        .unwrap_or_else(|e| panic!("1 TiB make_filesystem failed: {e}"));
    let elapsed = start.elapsed();
    assert!(
        elapsed < Duration::from_secs(60),
        "formatting a 1 TiB sparse file took {elapsed:?}, the limit is 60 s"
    );
    let meta = std::fs::metadata(&img.path).unwrap();
    assert_eq!(meta.len(), 1 << 40, "image length");
    let used = meta.blocks() * 512;
    assert!(
        used < GIB,
        "the 1 TiB image uses {used} bytes of real disk, the limit is 1 GiB"
    );
    let h = dumpe2fs_header(&img.path);
    assert_eq!(h.num("Block size"), 4096);
    assert_eq!(h.num("Block count"), (1u64 << 40) / 4096);
    assert_eq!(
        h.num("Block count"),
        summary.geometry.blocks_count as u64,
        "summary vs dumpe2fs"
    );
    assert_eq!(h.num("Inode count"), summary.geometry.inodes_count() as u64);
    eprintln!("1 TiB image: {elapsed:?}, {used} bytes on disk");
}

// ---------------------------------------------------------------------------
// Loop mounts

/// A pattern that differs at every 4-byte position, so misplaced blocks show.
fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let w = (i / 4) as u32;
            (w.wrapping_mul(2_654_435_761) >> ((i % 4) * 8)) as u8
        })
        .collect()
}

const PATTERN_LEN: usize = 3 * (1 << 20) + 12345;

fn loop_mount_case(bs: u32, isz: u16) {
    let name = format!("loop_mount_b{bs}_i{isz}");
    jbdfs_testkit::require!(loop);
    let _serial = LOOP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let img = make(&format!("loop{bs}-{isz}"), 100 * MIB, opts(bs, isz));
    let data = pattern(PATTERN_LEN);
    {
        let mut m = LoopMount::mount(&img.path)
            .unwrap_or_else(|o| panic!("{name}: mount failed:\n{}", o.describe()));
        let root = m.path().to_path_buf();
        std::fs::write(root.join("pattern.bin"), &data).unwrap();
        std::fs::create_dir_all(root.join("a/b/c")).unwrap();
        std::fs::create_dir(root.join("gone-dir")).unwrap();
        for i in 0..50 {
            std::fs::write(
                root.join("a/b").join(format!("small-{i}")),
                format!("file {i}\n").repeat(i + 1),
            )
            .unwrap();
        }
        // A file with a hole and an indirect block.
        {
            let mut f = std::fs::File::create(root.join("a/sparse")).unwrap();
            use std::io::Seek;
            f.seek(std::io::SeekFrom::Start(5 * MIB)).unwrap();
            f.write_all(b"tail").unwrap();
        }
        std::os::unix::fs::symlink("a/b/small-4", root.join("link")).unwrap();
        std::os::unix::fs::symlink("x".repeat(200), root.join("long-link")).unwrap();
        std::fs::hard_link(root.join("a/b/small-7"), root.join("hard")).unwrap();
        // Delete some.
        for i in (0..50).step_by(3) {
            std::fs::remove_file(root.join("a/b").join(format!("small-{i}"))).unwrap();
        }
        std::fs::remove_dir(root.join("gone-dir")).unwrap();
        std::fs::remove_file(root.join("a/b/small-7")).unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("hard")).unwrap(),
            "file 7\n".repeat(8)
        );
        let o = m.umount();
        assert!(o.success(), "{name}: umount failed:\n{}", o.describe());
    }
    assert_e2fsck_clean(&img.path, &format!("{name} after use under the kernel"));
    {
        let m = LoopMount::mount(&img.path)
            .unwrap_or_else(|o| panic!("{name}: remount failed:\n{}", o.describe()));
        let mut back = Vec::new();
        std::fs::File::open(m.path().join("pattern.bin"))
            .unwrap()
            .read_to_end(&mut back)
            .unwrap();
        assert!(
            back == data,
            "{name}: the pattern file reads back differently"
        );
        assert_eq!(
            std::fs::read_link(m.path().join("link")).unwrap(),
            Path::new("a/b/small-4")
        );
        assert_eq!(
            std::fs::read_to_string(m.path().join("link")).unwrap(),
            "file 4\n".repeat(5)
        );
        assert!(!m.path().join("gone-dir").exists());
        assert_eq!(std::fs::metadata(m.path().join("hard")).unwrap().nlink(), 1);
    }
    assert_e2fsck_clean(&img.path, &format!("{name} after the remount"));
}

#[test]
fn loop_mount_b1024_i256() {
    loop_mount_case(1024, 256);
}

#[test]
fn loop_mount_b2048_i256() {
    loop_mount_case(2048, 256);
}

#[test]
fn loop_mount_b4096_i256() {
    loop_mount_case(4096, 256);
}

#[test]
fn loop_mount_b1024_i128() {
    loop_mount_case(1024, 128);
}

// ---------------------------------------------------------------------------
// Parity with mke2fs

/// dumpe2fs -h lines whose values differ between any two mkfs runs, or that
/// jbdfs does not claim to reproduce.
const PARITY_IGNORED: &[&str] = &[
    "Filesystem UUID",
    "Directory Hash Seed",
    "Filesystem created",
    "Last mount time",
    "Last write time",
    "Last checked",
    "Overhead clusters",
];

/// Differences between two dumpe2fs headers, ignoring `PARITY_IGNORED`.
fn header_diff(ours: &Header, theirs: &Header) -> Vec<String> {
    let keep = |h: &Header| -> Vec<(String, String)> {
        h.lines
            .iter()
            .filter(|(k, _)| !PARITY_IGNORED.contains(&k.as_str()))
            .cloned()
            .collect()
    };
    let (a, b) = (keep(ours), keep(theirs));
    let mut diffs = Vec::new();
    for (k, v) in &a {
        match b.iter().find(|(k2, _)| k2 == k) {
            Some((_, v2)) if v2 == v => {}
            Some((_, v2)) => diffs.push(format!("{k}: jbdfs '{v}', mke2fs '{v2}'")),
            None => diffs.push(format!("{k}: jbdfs '{v}', missing from mke2fs")),
        }
    }
    for (k, v) in &b {
        if !a.iter().any(|(k2, _)| k2 == k) {
            diffs.push(format!("{k}: missing from jbdfs, mke2fs '{v}'"));
        }
    }
    let order = |h: &[(String, String)]| h.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    if diffs.is_empty() && order(&a) != order(&b) {
        diffs.push(format!(
            "same lines in a different order:\njbdfs:  {:?}\nmke2fs: {:?}",
            order(&a),
            order(&b)
        ));
    }
    diffs
}

fn parity(size: u64, block_size: Option<u32>, inode_size: Option<u16>) {
    let options = MkfsOptions {
        block_size,
        inode_size: inode_size.unwrap_or(256),
        ..Default::default()
    };
    let mut args: Vec<String> = vec!["-O".into(), "^resize_inode".into()];
    if let Some(b) = block_size {
        args.extend(["-b".into(), b.to_string()]);
    }
    if let Some(i) = inode_size {
        args.extend(["-I".into(), i.to_string()]);
    }
    let ours = make("parity", size, options);
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let theirs = make_mke2fs("parity-mke2fs", size, &arg_refs);
    let diffs = header_diff(&dumpe2fs_header(&ours.path), &dumpe2fs_header(&theirs.path));
    assert!(
        diffs.is_empty(),
        "dumpe2fs -h of jbdfs and `mke2fs -t ext3 {}` differ for {}:\n{}",
        args.join(" "),
        human(size),
        diffs.join("\n")
    );
}

#[test]
fn parity_with_mke2fs_100m() {
    parity(100 * MIB, None, None);
}

#[test]
fn parity_with_mke2fs_2g() {
    parity(2 * GIB, None, None);
}

/// Every explicit block and inode size at 100 MiB, one assertion at the end
/// so that all differing geometries are reported together.
#[test]
fn parity_with_mke2fs_explicit_geometries_100m() {
    let mut failures = Vec::new();
    for bs in [1024u32, 2048, 4096] {
        for isz in [128u16, 256] {
            let r = std::panic::catch_unwind(|| parity(100 * MIB, Some(bs), Some(isz)));
            if let Err(e) = r {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push(format!("-b {bs} -I {isz}: {msg}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Blocks above 4 KiB: groups capped at 65528 blocks, one inode per block
/// at most by default, and a last group dropped with the reserved count
/// scaled as mke2fs scales it (8 KiB blocks at 512 MiB).
#[test]
fn parity_with_mke2fs_large_blocks_512m() {
    let mut failures = Vec::new();
    for bs in [8192u32, 16384, 32768, 65536] {
        for isz in [128u16, 256] {
            let r = std::panic::catch_unwind(|| parity(512 * MIB, Some(bs), Some(isz)));
            if let Err(e) = r {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push(format!("-b {bs} -I {isz}: {msg}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
