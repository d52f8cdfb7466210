// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! htree on write: directories that jbdfs grows past one block get an
//! index, kept through creates, deletes and renames, that e2fsck finds
//! clean and Linux uses (issue 18). Images without dir_index stay linear.

use jbdfs_testkit as common;

use std::collections::BTreeSet;
use std::path::Path;

use common::*;
use jbdfs::format::InodeNo;
use jbdfs::fs::namei::{Caller, RenameFlags};
use jbdfs::fs::Filesystem;
use jbdfs::mkfs::MkfsOptions;

const ROOT: InodeNo = InodeNo(2);
const ME: Caller = Caller { uid: 0, gid: 0 };

/// Names of varied lengths, so leaves hold different counts.
fn name(i: usize) -> String {
    format!("n{i}-{}", "x".repeat(i % 37))
}

fn image(tag: &str, bs: u32, n: usize, features: &[&str]) -> TempImage {
    let opts = MkfsOptions {
        block_size: Some(bs),
        inodes_count: Some(n as u64 + 4096),
        features: features.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    jbdfs_image_with(tag, opts, 384 << 20)
}

/// Every name of `expect` found in `dir` through jbdfs, and nothing else.
fn check_jbdfs(fs: &Filesystem, dir: InodeNo, expect: &BTreeSet<String>) {
    let listed: BTreeSet<String> = fs
        .readdir(dir, 0, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.name).unwrap())
        .filter(|n| n != "." && n != "..")
        .collect();
    assert_eq!(&listed, expect, "readdir lists exactly the names");
    for n in expect {
        fs.lookup(dir, n.as_bytes())
            .unwrap_or_else(|e| panic!("lookup {n}: {e}"));
    }
}

fn is_indexed(image: &Path, dir: &str) -> bool {
    let stat = debugfs(image, &format!("stat {dir}"));
    let flags = stat
        .stdout
        .lines()
        .find_map(|l| l.split("Flags: ").nth(1))
        .map(|f| f.split_whitespace().next().unwrap_or("").to_string())
        .unwrap_or_default();
    let flags = u32::from_str_radix(flags.trim_start_matches("0x"), 16).unwrap_or(0);
    flags & 0x1000 != 0
}

/// Creates `n` names in /big, deletes a third, renames some to /other
/// (itself indexed) and back, and checks jbdfs, e2fsck, debugfs and Linux.
fn big_directory(bs: u32, n: usize) {
    let img = image(&format!("htree-{bs}-{n}"), bs, n, &[]);
    let fs = mount_file(&img.path);
    let (big, _) = fs.mkdir(ROOT, b"big", 0o755, ME).unwrap();
    let (other, _) = fs.mkdir(ROOT, b"other", 0o755, ME).unwrap();
    let mut in_big = BTreeSet::new();
    let mut in_other = BTreeSet::new();
    for i in 0..n {
        fs.mknod(big, name(i).as_bytes(), 0o100644, 0, ME).unwrap();
        in_big.insert(name(i));
    }
    for i in (0..n).step_by(3) {
        fs.unlink(big, name(i).as_bytes()).unwrap();
        in_big.remove(&name(i));
    }
    let flags = RenameFlags::default();
    for i in (1..n).step_by(5).filter(|i| i % 3 != 0) {
        let to = format!("moved-{i}");
        fs.rename(big, name(i).as_bytes(), other, to.as_bytes(), flags)
            .unwrap();
        in_big.remove(&name(i));
        in_other.insert(to);
    }
    // Some back, under new names, and some renamed in place.
    for i in (1..n).step_by(5).filter(|i| i % 3 != 0 && i % 4 == 0) {
        let (from, to) = (format!("moved-{i}"), format!("back-{i}"));
        fs.rename(other, from.as_bytes(), big, to.as_bytes(), flags)
            .unwrap();
        in_other.remove(&from);
        in_big.insert(to);
    }
    for i in (2..n).step_by(11).filter(|i| i % 3 != 0 && i % 5 != 1) {
        let to = format!("renamed-{i}");
        fs.rename(big, name(i).as_bytes(), big, to.as_bytes(), flags)
            .unwrap();
        in_big.remove(&name(i));
        in_big.insert(to);
    }
    check_jbdfs(&fs, big, &in_big);
    check_jbdfs(&fs, other, &in_other);
    fs.unmount().unwrap();
    drop(fs);

    let what = format!("{n} names in one directory, {bs}-byte blocks");
    assert_e2fsck_clean(&img.path, &what);
    for d in ["/big", "/other"] {
        assert!(is_indexed(&img.path, d), "{d} is not indexed ({what})");
        let htree = debugfs(&img.path, &format!("htree {d}"));
        assert!(
            htree.stdout.contains("Root node dump"),
            "{}",
            htree.describe()
        );
    }

    // A new mount reads the index back and keeps adding through it.
    let fs = mount_file(&img.path);
    let (big, _) = fs.lookup(ROOT, b"big").unwrap();
    check_jbdfs(&fs, big, &in_big);
    for i in 0..500 {
        let nm = format!("after-remount-{i}");
        fs.mknod(big, nm.as_bytes(), 0o100644, 0, ME).unwrap();
        in_big.insert(nm);
    }
    fs.unmount().unwrap();
    drop(fs);
    assert_e2fsck_clean(&img.path, &format!("{what}, after a remount"));

    if !jbdfs_testkit::available!("the Linux half"; loop) {
        return;
    }
    let _guard = LOOP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut m = LoopMount::mount(&img.path).unwrap_or_else(|o| panic!("{}", o.describe()));
    for (d, expect) in [("big", &in_big), ("other", &in_other)] {
        let dir = m.path().join(d);
        let seen: BTreeSet<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(&seen, expect, "Linux lists /{d}");
        // Lookups go through Linux's htree code (dx_find_entry).
        for nm in expect.iter().step_by(7) {
            std::fs::symlink_metadata(dir.join(nm))
                .unwrap_or_else(|e| panic!("Linux stat /{d}/{nm}: {e}"));
        }
        assert!(std::fs::symlink_metadata(dir.join("not-there")).is_err());
    }
    // Linux adds to the index jbdfs built, and e2fsck still agrees.
    for i in 0..200 {
        std::fs::write(m.path().join(format!("big/linux-{i}")), b"x").unwrap();
    }
    m.umount().expect_ok();
    assert_e2fsck_clean(&img.path, &format!("{what}, after Linux added names"));
}

#[test]
fn five_thousand_names_1k_blocks() {
    big_directory(1024, 5_000);
}

#[test]
fn five_thousand_names_4k_blocks() {
    big_directory(4096, 5_000);
}

#[test]
fn fifty_thousand_names_1k_blocks() {
    big_directory(1024, 50_000);
}

#[test]
fn fifty_thousand_names_4k_blocks() {
    big_directory(4096, 50_000);
}

#[test]
fn without_dir_index_directories_stay_linear() {
    let img = image("htree-none", 1024, 3000, &["^dir_index"]);
    let fs = mount_file(&img.path);
    let (big, _) = fs.mkdir(ROOT, b"big", 0o755, ME).unwrap();
    let mut expect = BTreeSet::new();
    for i in 0..3000 {
        fs.mknod(big, name(i).as_bytes(), 0o100644, 0, ME).unwrap();
        expect.insert(name(i));
    }
    check_jbdfs(&fs, big, &expect);
    fs.unmount().unwrap();
    drop(fs);
    assert_e2fsck_clean(&img.path, "a large directory without dir_index");
    assert!(!is_indexed(&img.path, "/big"));
}

/// Names with bytes above 0x7f, where signed and unsigned hashes differ.
fn high_name(i: usize) -> Vec<u8> {
    let mut n = format!("h{i}-").into_bytes();
    n.extend((0..(i % 23)).map(|k| 0x80 + ((i + k) % 120) as u8));
    n
}

/// Every hash (legacy, half_md4, tea), signed and unsigned, as the
/// superblock asks: e2fsck and Linux agree with the index jbdfs built.
#[test]
fn every_superblock_hash_signed_and_unsigned() {
    use std::os::unix::ffi::OsStrExt;
    for hash in ["legacy", "half_md4", "tea"] {
        for flags in ["1", "2"] {
            let img = image(&format!("htree-{hash}-{flags}"), 1024, 3000, &[]);
            for req in [
                format!("ssv def_hash_version {hash}"),
                format!("ssv flags {flags}"),
            ] {
                run("debugfs", ["-w", "-R", &req, img.path_str()]).expect_ok();
            }
            let fs = mount_file(&img.path);
            let (big, _) = fs.mkdir(ROOT, b"big", 0o755, ME).unwrap();
            for i in 0..3000 {
                fs.mknod(big, &high_name(i), 0o100644, 0, ME).unwrap();
            }
            for i in (0..3000).step_by(4) {
                fs.unlink(big, &high_name(i)).unwrap();
            }
            fs.unmount().unwrap();
            drop(fs);
            let what = format!("hash {hash}, s_flags {flags}");
            assert_e2fsck_clean(&img.path, &what);
            assert!(is_indexed(&img.path, "/big"), "{what}");
            if !jbdfs_testkit::available!("the Linux half"; loop) {
                continue;
            }
            let _guard = LOOP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
            let mut m = LoopMount::mount(&img.path).unwrap_or_else(|o| panic!("{}", o.describe()));
            let dir = m.path().join("big");
            assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2250, "{what}");
            for i in (1..3000).filter(|i| i % 4 != 0).step_by(3) {
                let p = dir.join(std::ffi::OsStr::from_bytes(&high_name(i)));
                std::fs::symlink_metadata(&p)
                    .unwrap_or_else(|e| panic!("{what}: Linux stat {p:?}: {e}"));
            }
            m.umount().expect_ok();
        }
    }
}

/// The benchmark, in process (`cargo test --release --test
/// htree_write -- --ignored --nocapture`): create, then stat, 1,000,000
/// names in one directory through jbdfs, then stat them all through
/// Linux on the directory jbdfs indexed. Prints the times.
#[test]
#[ignore]
fn million_names_benchmark() {
    use std::time::Instant;
    const N: usize = 1_000_000;
    let opts = MkfsOptions {
        block_size: Some(4096),
        inodes_count: Some(N as u64 + 4096),
        ..Default::default()
    };
    let img = jbdfs_image_with("htree-million", opts, 4 << 30);
    let fs = mount_file(&img.path);
    let (big, _) = fs.mkdir(ROOT, b"big", 0o755, ME).unwrap();
    let nm = |i: usize| format!("file-{i:07}");
    let t = Instant::now();
    for i in 0..N {
        fs.mknod(big, nm(i).as_bytes(), 0o100644, 0, ME).unwrap();
    }
    let create = t.elapsed();
    let t = Instant::now();
    for i in 0..N {
        fs.lookup(big, nm((i * 7919) % N).as_bytes()).unwrap();
    }
    let lookup = t.elapsed();
    fs.unmount().unwrap();
    drop(fs);
    let t = Instant::now();
    let fs = mount_file(&img.path);
    fs.lookup(big, nm(N / 2).as_bytes()).unwrap();
    let first = t.elapsed();
    fs.unmount().unwrap();
    drop(fs);
    eprintln!(
        "jbdfs (library): create {N}: {:.1} s ({:.1} us each); lookup: {:.2} us each; \
         first lookup after mount (index built): {:.2} s",
        create.as_secs_f64(),
        create.as_secs_f64() * 1e6 / N as f64,
        lookup.as_secs_f64() * 1e6 / N as f64,
        first.as_secs_f64()
    );
    assert_e2fsck_clean(&img.path, "a million names");
    assert!(is_indexed(&img.path, "/big"));
    if !jbdfs_testkit::available!("the Linux half"; loop) {
        return;
    }
    let _guard = LOOP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut m = LoopMount::mount(&img.path).unwrap_or_else(|o| panic!("{}", o.describe()));
    let dir = m.path().join("big");
    let t = Instant::now();
    for i in 0..N {
        std::fs::symlink_metadata(dir.join(nm((i * 7919) % N))).unwrap();
    }
    let linux = t.elapsed();
    eprintln!(
        "Linux ext3 on the directory jbdfs built: stat {:.2} us each",
        linux.as_secs_f64() * 1e6 / N as f64
    );
    m.umount().expect_ok();
}

/// Lists `dir` a few entries at a time, as getdents does, running `between`
/// after each chunk; returns every name listed, with repeats.
fn list_in_chunks(fs: &Filesystem, dir: InodeNo, mut between: impl FnMut(usize)) -> Vec<String> {
    let mut cookie = 0;
    let mut listed = Vec::new();
    for chunk in 0.. {
        let got = fs.readdir(dir, cookie, 20).unwrap();
        let Some(last) = got.last() else { break };
        cookie = last.next;
        listed.extend(
            got.into_iter()
                .map(|e| String::from_utf8(e.name).unwrap())
                .filter(|n| n != "." && n != ".."),
        );
        between(chunk);
    }
    listed
}

/// A listing that runs while names are created and removed beside it (a
/// backup of a live tree, `rm -r`): every name that was there throughout
/// is listed exactly once, though leaf splits move half of a block and
/// indexing the full first block moves all of it (issue 18: cookies were
/// byte positions, which such moves invalidate).
#[test]
fn a_listing_beside_creates_and_unlinks_returns_every_lasting_name_once() {
    for bs in [1024, 4096] {
        let img = image(&format!("htree-listing-{bs}"), bs, 20_000, &[]);
        let fs = mount_file(&img.path);
        for start in [3usize, 40, 2_000] {
            let (dir, _) = fs
                .mkdir(ROOT, format!("d{start}").as_bytes(), 0o755, ME)
                .unwrap();
            let lasting: BTreeSet<String> = (0..start).map(name).collect();
            for n in &lasting {
                fs.mknod(dir, n.as_bytes(), 0o100644, 0, ME).unwrap();
            }
            let mut doomed = Vec::new();
            let listed = list_in_chunks(&fs, dir, |chunk| {
                // Enough new names per chunk to split leaves (and to index
                // the one-block directories), and some of them removed.
                for k in 0..16 {
                    let n = format!("new-{chunk}-{k}-{}", "y".repeat(k % 23));
                    fs.mknod(dir, n.as_bytes(), 0o100644, 0, ME).unwrap();
                    doomed.push(n);
                }
                for n in doomed.drain(..8) {
                    fs.unlink(dir, n.as_bytes()).unwrap();
                }
            });
            let mut seen = BTreeSet::new();
            for n in &listed {
                assert!(
                    seen.insert(n.clone()) || !lasting.contains(n),
                    "{n} listed twice ({bs}-byte blocks, {start} names at the start)"
                );
            }
            let missing: Vec<_> = lasting.difference(&seen).collect();
            assert!(
                missing.is_empty(),
                "{} lasting names never listed ({bs}-byte blocks, {start} at the start), e.g. {:?}",
                missing.len(),
                missing.first()
            );
        }
        fs.unmount().unwrap();
        drop(fs);
        assert_e2fsck_clean(&img.path, "an image listed while it changed");
    }
}
