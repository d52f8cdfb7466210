// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! The fuzz targets' bodies as ordinary tests: every seed in fuzz/seeds/
//! and every crash input kept in fuzz/regressions/ (one directory per
//! target) must run through its target without a panic. The ignored test
//! `write_seed_corpus` regenerates fuzz/seeds/ from images made by jbdfs's
//! mkfs and by mke2fs (fuzz/README.md).

use jbdfs_testkit as common;
#[path = "robust_common/harness.rs"]
mod harness;
#[path = "robust_common/walk.rs"]
mod walk;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use jbdfs::device::{BlockDevice, MemoryDevice};

/// A fuzz target's body.
type Body = fn(&[u8]);

const TARGETS: [(&str, Body); 5] = [
    ("format_parsers", harness::format_parsers),
    ("journal_recovery", harness::journal_recovery),
    ("mount_walk", harness::mount_walk),
    ("fsck_image", harness::fsck_image),
    ("nbd_client", harness::nbd_client),
];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

fn inputs(kind: &str, target: &str) -> Vec<PathBuf> {
    let dir = fuzz_dir().join(kind).join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    files
}

#[test]
fn every_seed_and_kept_crash_runs_clean() {
    let mut ran = 0;
    for (target, body) in TARGETS {
        let files: Vec<PathBuf> = inputs("seeds", target)
            .into_iter()
            .chain(inputs("regressions", target))
            .collect();
        assert!(!files.is_empty(), "no seeds for {target}");
        for f in files {
            let data = std::fs::read(&f).unwrap();
            eprintln!("{target}: {}", f.display());
            body(&data);
            ran += 1;
        }
    }
    eprintln!("{ran} inputs");
}

/// Sparse-image records of every non-zero block of `img` (1 KiB blocks).
fn sparse(img: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, block) in img.chunks(walk::SPARSE_BLOCK).enumerate() {
        if block.iter().any(|&b| b != 0) {
            out.extend_from_slice(&(i as u16).to_le_bytes());
            out.extend_from_slice(block);
        }
    }
    out
}

/// Zeroes the journal's log blocks (after a clean unmount they are stale
/// and only make the seed bigger).
fn without_log(mut img: Vec<u8>) -> Vec<u8> {
    let dev = MemoryDevice::from_vec(img.clone());
    let sb = jbdfs::fs::mount::read_superblock(&dev).unwrap();
    let map = jbdfs::journal::jmap::JournalMap::load(&dev, &sb).unwrap();
    let bs = sb.block_size() as usize;
    for &b in &map.blocks()[1..] {
        img[b as usize * bs..(b as usize + 1) * bs].fill(0);
    }
    img
}

fn write_seed(target: &str, name: &str, data: &[u8]) {
    let dir = fuzz_dir().join("seeds").join(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), data).unwrap();
    eprintln!("{target}/{name}: {} bytes", data.len());
}

fn mke2fs_image() -> Option<Vec<u8>> {
    if !jbdfs_testkit::available!("the mke2fs seed"; "mke2fs") {
        return None;
    }
    let img = common::mke2fs_image(
        "seed-mke2fs",
        walk::SPARSE_DEVICE as u64,
        &["-b", "1024", "-J", "size=1"],
    )
    .unwrap_or_else(|o| panic!("{}", o.describe()));
    Some(std::fs::read(&img.path).unwrap())
}

/// An mke2fs image in which Linux made an htree directory (300 entries)
/// and a few files; None without loop mounts.
fn linux_htree_image() -> Option<Vec<u8>> {
    if !jbdfs_testkit::available!("the Linux-made seed"; loop) {
        return None;
    }
    let raw = mke2fs_image()?;
    let img = common::TempImage::new("seed-linux");
    std::fs::write(&img.path, raw).unwrap();
    let _g = common::LOOP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut m = common::LoopMount::mount(&img.path).ok()?;
    let dir = m.path().join("big");
    std::fs::create_dir(&dir).unwrap();
    for i in 0..300 {
        // Empty: the seed keeps the directory, not 300 data blocks.
        std::fs::write(dir.join(format!("entry-with-a-longer-name-{i}")), b"").unwrap();
    }
    std::fs::write(m.path().join("file"), vec![3u8; 20_000]).unwrap();
    std::os::unix::fs::symlink("big/entry-with-a-longer-name-7", m.path().join("sym")).unwrap();
    m.umount().expect_ok();
    Some(std::fs::read(&img.path).unwrap())
}

/// A journal holding committed transactions: the base image mounted,
/// changed and fsync'd, copied without unmounting (a crash).
fn crashed_journal() -> Vec<u8> {
    let mem = Arc::new(MemoryDevice::from_vec(harness::base_image().to_vec()));
    let dev: Arc<dyn BlockDevice> = mem.clone();
    let fs = jbdfs::fs::Filesystem::mount(dev, &Default::default()).unwrap();
    let who = jbdfs::fs::namei::Caller { uid: 0, gid: 0 };
    let root = jbdfs::format::InodeNo(2);
    let (f, _) = fs.mknod(root, b"new", 0o100644, 0, who).unwrap();
    fs.write(f, 0, b"journalled", true).unwrap();
    fs.fsync(f, false).unwrap();
    fs.unlink(root, b"d").ok();
    let (d, _) = fs.lookup(root, b"d").unwrap();
    fs.unlink(d, b"f1").unwrap();
    fs.fsync(f, false).unwrap();
    let img = mem.snapshot();
    let sb = jbdfs::fs::mount::read_superblock(&*mem).unwrap();
    let map = jbdfs::journal::jmap::JournalMap::load(&*mem, &sb).unwrap();
    let bs = sb.block_size() as usize;
    let jsb =
        jbdfs::format::jbd::JournalSuperblock::parse(&img[map.blocks()[0] as usize * bs..][..bs])
            .unwrap();
    let mut out = jsb.s_sequence.to_be_bytes().to_vec();
    for &b in &map.blocks()[1..] {
        let block = &img[b as usize * bs..(b as usize + 1) * bs];
        if block.iter().all(|&x| x == 0) {
            break;
        }
        out.extend_from_slice(block);
    }
    drop(fs);
    out
}

#[test]
#[ignore = "writes fuzz/seeds/; run by hand to regenerate the corpus"]
fn write_seed_corpus() {
    let base = without_log(harness::base_image().to_vec());
    let mut images = vec![("jbdfs-mkfs-tree", base.clone())];
    if let Some(raw) = mke2fs_image() {
        images.push(("mke2fs-empty", raw.clone()));
        let mem = Arc::new(MemoryDevice::from_vec(raw));
        let dev: Arc<dyn BlockDevice> = mem.clone();
        let fs = jbdfs::fs::Filesystem::mount(dev, &Default::default()).unwrap();
        let who = jbdfs::fs::namei::Caller { uid: 0, gid: 0 };
        let root = jbdfs::format::InodeNo(2);
        let (d, _) = fs.mkdir(root, b"dir", 0o755, who).unwrap();
        let (f, _) = fs.mknod(d, b"file", 0o100644, 0, who).unwrap();
        fs.write(f, 0, &[7u8; 15_000], true).unwrap();
        fs.symlink(root, b"link", b"dir/file", who).unwrap();
        fs.unmount().unwrap();
        images.push(("mke2fs-tree", without_log(mem.snapshot())));
    }
    if let Some(linux) = linux_htree_image() {
        images.push(("linux-htree", without_log(linux)));
    }
    for (name, img) in &images {
        write_seed("mount_walk", name, &sparse(img));
        write_seed("fsck_image", name, &sparse(img));
    }
    let journal = crashed_journal();
    write_seed("journal_recovery", "crashed", &journal);
    // Parsers: a superblock, a descriptor table, an inode table block, the
    // root directory block, and journal blocks.
    let at = 1024;
    write_seed("format_parsers", "superblock", &base[at..at + 1024]);
    write_seed("format_parsers", "group-desc", &base[2048..2048 + 64]);
    let dev = MemoryDevice::from_vec(base.clone());
    let sb = jbdfs::fs::mount::read_superblock(&dev).unwrap();
    let gd = jbdfs::fs::mount::read_group_descs(&dev, &sb).unwrap()[0];
    let it = gd.bg_inode_table as usize * 1024;
    write_seed("format_parsers", "inode-root", &base[it + 256..it + 512]);
    let root = jbdfs::format::inode::Inode::parse(&base[it + 256..it + 512]).unwrap();
    let rb = root.i_block[0] as usize * 1024;
    write_seed("format_parsers", "dir-block", &base[rb..rb + 1024]);
    for (i, block) in journal[4..].chunks(1024).take(3).enumerate() {
        write_seed("format_parsers", &format!("journal-{i}"), block);
    }
}

/// The image seeds are real filesystems: each mounts and has files, so the
/// fuzzer starts from images that get past the superblock checks.
#[test]
fn image_seeds_mount_and_hold_a_tree() {
    for f in inputs("seeds", "mount_walk") {
        let img = walk::sparse_image(&std::fs::read(&f).unwrap());
        match walk::mount_and_walk(img, false) {
            walk::Outcome::Served(r) => {
                assert!(r.dirs >= 2 && r.errors == 0, "{}: {r:?}", f.display());
            }
            walk::Outcome::Refused(m) => panic!("{}: refused: {m}", f.display()),
        }
    }
}
