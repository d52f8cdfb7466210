// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! fsck.jbdfs against real images: clean ones made by mke2fs and by jbdfs's
//! mkfs (every block size and inode size) must exit 0 and be left as they
//! are, and the damaged corpus of scripts/fsck-corpus.sh must be judged as
//! e2fsck judges it and repaired to an image e2fsck finds clean.

use std::path::Path;
use std::process::Command;

use jbdfs_testkit::{run, scratch_dir, Out, TempDir};

const FSCK: &str = env!("CARGO_BIN_EXE_fsck-jbdfs");

/// A few directories and files, one large enough for indirect blocks.
fn populate(img: &Path, dir: &Path) {
    let data = dir.join("data");
    std::fs::write(&data, vec![7u8; 300_000]).unwrap();
    let cmds = format!(
        "mkdir a\nmkdir a/b\nwrite {0} a/big\nwrite {0} f\nsymlink l /x/y\n",
        data.display()
    );
    let script = dir.join("cmds");
    std::fs::write(&script, cmds).unwrap();
    let o = run(
        "debugfs",
        [
            "-w",
            "-f",
            &script.to_string_lossy(),
            &img.to_string_lossy(),
        ],
    );
    assert!(o.success(), "debugfs: {}", o.describe());
}

fn assert_clean_and_untouched(img: &Path, what: &str) {
    let e = run("e2fsck", ["-fn", &img.to_string_lossy()]);
    assert_eq!(e.code, Some(0), "{what}: e2fsck: {}", e.describe());
    let before = std::fs::read(img).unwrap();
    for flags in ["-fn", "-fy", "-fp"] {
        let o = run(FSCK, [flags, &img.to_string_lossy()]);
        assert_eq!(o.code, Some(0), "{what}: fsck {flags}: {}", o.describe());
        assert!(
            std::fs::read(img).unwrap() == before,
            "{what}: fsck {flags} changed the image"
        );
    }
}

#[test]
fn clean_images_of_every_geometry_exit_0() {
    jbdfs_testkit::require!(e2fsprogs);
    let dir = TempDir::new_in(&scratch_dir(), "fsck-clean");
    for bs in [1024u32, 2048, 4096] {
        for isz in [128u16, 256] {
            let img = dir.path.join(format!("e2-{bs}-{isz}.img"));
            let o = run(
                "mke2fs",
                [
                    "-q",
                    "-F",
                    "-t",
                    "ext3",
                    "-b",
                    &bs.to_string(),
                    "-I",
                    &isz.to_string(),
                    &img.to_string_lossy(),
                    "48M",
                ],
            );
            assert!(o.success(), "mke2fs: {}", o.describe());
            populate(&img, &dir.path);
            assert_clean_and_untouched(&img, &format!("mke2fs -b {bs} -I {isz}"));

            let img = dir.path.join(format!("jb-{bs}-{isz}.img"));
            let req = jbdfs::mkfs::Request {
                options: jbdfs::mkfs::MkfsOptions {
                    block_size: Some(bs),
                    inode_size: isz,
                    ..Default::default()
                },
                size: Some(48 << 20),
                quiet: true,
                ..Default::default()
            };
            jbdfs::mkfs::make_filesystem(&img, &req).unwrap();
            assert_clean_and_untouched(&img, &format!("jbdfs mkfs -b {bs} -I {isz} (fresh)"));
            populate(&img, &dir.path);
            assert_clean_and_untouched(&img, &format!("jbdfs mkfs -b {bs} -I {isz}"));
        }
    }
}

/// The corpus check, bounded: two of the script's base images (1 KiB
/// blocks with 128-byte inodes from mke2fs, and a jbdfs-made image), about
/// 120 damaged images in all. FSCK_CORPUS_BASES picks others (1k,2k,4k,jbdfs).
#[test]
fn damaged_corpus_agrees_with_e2fsck_and_is_repaired() {
    jbdfs_testkit::require!(e2fsprogs);
    let dir = TempDir::new_in(&scratch_dir(), "fsck-corpus");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let script = root.join("scripts/fsck-corpus.sh");
    let mkfs = Path::new(FSCK).with_file_name("mkfs-jbdfs");
    let default_bases = if mkfs.exists() { "1k,jbdfs" } else { "1k,4k" };
    let bases = std::env::var("FSCK_CORPUS_BASES").unwrap_or_else(|_| default_bases.to_string());
    let o = Command::new("bash")
        .arg(&script)
        .args(["all", &dir.path.to_string_lossy(), &bases])
        .env("FSCK", FSCK)
        .env("MKFS", &mkfs)
        .env("TIMEOUT", "60")
        .output()
        .unwrap();
    let o = Out::of("scripts/fsck-corpus.sh all", o);
    let out = &o.stdout;
    eprintln!("{out}");
    assert!(o.success(), "corpus check failed:\n{}", o.describe());
    assert!(out.contains("agreement"), "{}", o.describe());
    repaired_images_mount(&dir.path);
}

/// Every repairable image of the corpus, once `fsck -fy` is done with it,
/// mounts in jbdfs (read-only, in process) with a root directory.
fn repaired_images_mount(dir: &Path) {
    use std::sync::Arc;
    let mut mounted = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".img") || name.contains("truncated") || name.contains("not-ext3") {
            continue;
        }
        let o = run(FSCK, ["-fy", &path.to_string_lossy()]);
        assert!(
            matches!(o.code, Some(0 | 1)),
            "{name}: fsck -fy: {}",
            o.describe()
        );
        let mem = Arc::new(jbdfs::device::MemoryDevice::from_vec(
            std::fs::read(&path).unwrap(),
        ));
        let cfg = jbdfs::fs::MountConfig {
            read_only: true,
            ..Default::default()
        };
        let fs = jbdfs::fs::Filesystem::mount(mem, &cfg)
            .unwrap_or_else(|e| panic!("{name}: jbdfs cannot mount the repaired image: {e}"));
        let root = fs
            .getattr(jbdfs::format::InodeNo(2))
            .unwrap_or_else(|e| panic!("{name}: root after repair: {e}"));
        assert!(
            root.is_dir(),
            "{name}: root is not a directory after repair"
        );
        mounted += 1;
    }
    assert!(mounted > 0, "no repaired image was mounted");
}

/// The resize inode of a mke2fs image (resize_inode is its default):
/// cleared, or with its double-indirect block pointing at the wrong
/// reserved GDT block, it is found invalid and made anew as e2fsck makes it
/// (same blocks and size), after which e2fsck and a second fsck find
/// nothing.
#[test]
fn a_damaged_resize_inode_is_recreated() {
    jbdfs_testkit::require!(e2fsprogs);
    let dir = TempDir::new_in(&scratch_dir(), "fsck-resize");
    for (bs, damage) in [
        ("1024", "clri <7>"),
        ("4096", "clri <7>"),
        ("1024", "sif <7> block[DIND] 5000"),
    ] {
        let img = dir.path.join(format!("r{bs}.img"));
        let img_s = img.to_str().unwrap();
        let _ = std::fs::remove_file(&img);
        let mk = run("mke2fs", ["-q", "-F", "-t", "ext3", "-b", bs, img_s, "64M"]);
        assert!(mk.success(), "{}", mk.describe());
        let dmg = run("debugfs", ["-w", "-R", damage, img_s]);
        assert!(dmg.success(), "{}", dmg.describe());
        let reference = dir.path.join("ref.img");
        std::fs::copy(&img, &reference).unwrap();
        let fixed = run(FSCK, ["-fy", img_s]);
        assert_eq!(fixed.code, Some(1), "{bs}, {damage}: {}", fixed.describe());
        assert!(
            fixed.stdout.contains("Resize inode not valid"),
            "{}",
            fixed.describe()
        );
        assert_clean_and_untouched(&img, &format!("{bs}-byte blocks after {damage}"));
        let e = run("e2fsck", ["-fy", reference.to_str().unwrap()]);
        assert_eq!(e.code, Some(1), "{}", e.describe());
        let blocks = |p: &Path| {
            let o = run("debugfs", ["-R", "stat <7>", p.to_str().unwrap()]);
            let s = o.stdout.clone();
            s.lines()
                .filter(|l| l.contains("Size:") || l.contains("(DIND)") || l.contains("TOTAL"))
                .map(|l| l.split("Size:").last().unwrap_or(l).to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(blocks(&img), blocks(&reference), "as e2fsck makes it");
    }
}
