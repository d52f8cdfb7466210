// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! The fsck.jbdfs command line: e2fsck's flags and exit codes.

use std::path::Path;
use std::process::{Command, Output};

use jbdfs_testkit::TempImage;

const FSCK: &str = env!("CARGO_BIN_EXE_fsck-jbdfs");

fn run(prog: &str, args: &[&str], path: Option<&Path>) -> Output {
    let mut c = Command::new(prog);
    c.args(args);
    if let Some(p) = path {
        c.arg(p);
    }
    c.env("LC_ALL", "C")
        .output()
        .unwrap_or_else(|e| panic!("run {prog}: {e}"))
}

fn fsck(args: &[&str], path: &Path) -> Output {
    run(FSCK, args, Some(path))
}

fn text(o: &Output) -> String {
    format!(
        "status: {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn code(o: &Output) -> Option<i32> {
    o.status.code()
}

/// A fresh jbdfs image made with the library.
fn jbdfs_image(tag: &str, size: u64, block_size: u32) -> TempImage {
    let s = TempImage::new(tag);
    let req = jbdfs::mkfs::Request {
        options: jbdfs::mkfs::MkfsOptions {
            block_size: Some(block_size),
            ..Default::default()
        },
        size: Some(size),
        quiet: true,
        ..Default::default()
    };
    jbdfs::mkfs::make_filesystem(&s.path, &req).unwrap();
    s
}

/// "N/M files" and "N/M blocks" from a summary line.
fn usage(out: &str) -> Option<((u64, u64), (u64, u64))> {
    let line = out.lines().rfind(|l| l.contains(" files"))?;
    let pair = |word: &str| -> Option<(u64, u64)> {
        let tokens: Vec<&str> = line.split_whitespace().collect();
        let i = tokens
            .iter()
            .position(|t| t.trim_end_matches(',') == word)?;
        let (a, b) = tokens.get(i.checked_sub(1)?)?.split_once('/')?;
        Some((a.parse().ok()?, b.parse().ok()?))
    };
    Some((pair("files")?, pair("blocks")?))
}

#[test]
fn help_exits_zero() {
    let o = run(FSCK, &["--help"], None);
    assert_eq!(code(&o), Some(0), "{}", text(&o));
    let help = String::from_utf8_lossy(&o.stdout);
    for flag in ["-n", "-p", "-y", "-f"] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
}

#[test]
fn clean_image_exits_zero_and_reports_usage_like_e2fsck() {
    for bs in [1024, 4096] {
        let img = jbdfs_image("clean", 64 << 20, bs);
        let o = fsck(&["-fn"], &img.path);
        assert_eq!(code(&o), Some(0), "fsck -fn on a fresh image: {}", text(&o));
        let ours = usage(&String::from_utf8_lossy(&o.stdout))
            .unwrap_or_else(|| panic!("no 'N/M files' and 'N/M blocks': {}", text(&o)));
        let e = run("e2fsck", &["-fn"], Some(&img.path));
        assert_eq!(code(&e), Some(0), "e2fsck: {}", text(&e));
        let theirs = usage(&String::from_utf8_lossy(&e.stdout))
            .unwrap_or_else(|| panic!("e2fsck summary: {}", text(&e)));
        assert_eq!(ours, theirs, "fsck.jbdfs vs e2fsck usage, {bs}-byte blocks");
        assert_eq!(ours.0 .0, 11, "a fresh filesystem uses 11 inodes");

        // Without -f a clean filesystem is skipped, still exit 0.
        let o = fsck(&["-n"], &img.path);
        assert_eq!(code(&o), Some(0), "{}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("clean"),
            "{}",
            text(&o)
        );
    }
}

#[test]
fn not_a_filesystem_exits_8() {
    let zeros = TempImage::sparse("zeros", 4 << 20);
    let random = TempImage::new("random");
    let bytes: Vec<u8> = {
        let mut f = std::fs::File::open("/dev/urandom").unwrap();
        let mut b = vec![0u8; 4 << 20];
        std::io::Read::read_exact(&mut f, &mut b).unwrap();
        b
    };
    std::fs::write(&random.path, bytes).unwrap();
    let tiny = TempImage::sparse("tiny", 1000);
    for (what, img) in [("zeros", &zeros), ("random", &random), ("tiny", &tiny)] {
        let o = fsck(&["-fn"], &img.path);
        assert_eq!(code(&o), Some(8), "{what}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("superblock") || err.contains("not hold a valid"),
            "{what}: the message should say there is no valid superblock: {}",
            text(&o)
        );
    }
    let missing = TempImage::new("missing");
    let o = fsck(&["-fn"], &missing.path);
    assert_eq!(code(&o), Some(8), "nonexistent path: {}", text(&o));
}

#[test]
fn unsupported_features_exit_8_and_are_named() {
    let cases: &[(&[&str], &[&str])] = &[
        (&["-t", "ext3", "-O", "extent"], &["extent"]),
        (&["-t", "ext4"], &["extent", "64bit", "flex_bg"]),
    ];
    for (args, names) in cases {
        let img = TempImage::sparse("ext4", 64 << 20);
        let mut a = vec!["-q", "-F"];
        a.extend_from_slice(args);
        let m = run("mke2fs", &a, Some(&img.path));
        assert!(m.status.success(), "mke2fs: {}", text(&m));
        let o = fsck(&["-fn"], &img.path);
        assert_eq!(code(&o), Some(8), "mke2fs {args:?}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        for n in *names {
            assert!(
                err.contains(n),
                "mke2fs {args:?}: the error should name '{n}': {}",
                text(&o)
            );
        }
    }
}

#[test]
fn corrupt_group_descriptor_exits_4() {
    for (bs, gdt_block) in [(1024u64, 2u64), (4096, 1)] {
        let img = jbdfs_image("corrupt", 64 << 20, bs as u32);
        // bg_inode_table is at byte 8 of group 0's descriptor.
        let offset = gdt_block * bs + 8;
        let dd = run(
            "dd",
            &[
                "if=/dev/urandom",
                &format!("of={}", img.path.display()),
                "bs=1",
                "count=4",
                &format!("seek={offset}"),
                "conv=notrunc",
                "status=none",
            ],
            None,
        );
        assert!(dd.status.success(), "dd: {}", text(&dd));
        // Make sure the garbage really lies outside group 0.
        let raw = std::fs::read(&img.path).unwrap();
        let o8 = offset as usize;
        let v = u32::from_le_bytes(raw[o8..o8 + 4].try_into().unwrap());
        if v < 8 * bs as u32 {
            std::os::unix::fs::FileExt::write_all_at(
                &std::fs::OpenOptions::new()
                    .write(true)
                    .open(&img.path)
                    .unwrap(),
                &u32::MAX.to_le_bytes(),
                offset,
            )
            .unwrap();
        }
        let o = fsck(&["-fn"], &img.path);
        assert_eq!(code(&o), Some(4), "{bs}-byte blocks: {}", text(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains("Inode table for group 0"),
            "the problem should be named: {}",
            text(&o)
        );
        // e2fsck agrees that the descriptor is bad (it then falls back to
        // the backup descriptors, so its exit status says nothing).
        let e = run("e2fsck", &["-fn"], Some(&img.path));
        assert!(
            String::from_utf8_lossy(&e.stdout).contains("Corrupt group descriptor"),
            "e2fsck: {}",
            text(&e)
        );
    }
}

#[test]
fn conflicting_modes_exit_16() {
    let img = jbdfs_image("modes", 8 << 20, 1024);
    for args in [
        &["-n", "-y"][..],
        &["-n", "-p"],
        &["-p", "-y"],
        &["-a", "-n"],
    ] {
        let o = fsck(args, &img.path);
        assert_eq!(code(&o), Some(16), "{args:?}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("only one"),
            "{args:?}: {}",
            text(&o)
        );
    }
    let o = fsck(&["--no-such-flag"], &img.path);
    assert_eq!(code(&o), Some(16), "unknown flag: {}", text(&o));
}

/// -D rebuilds directories, which -n cannot: e2fsck refuses the pair with
/// exit 8 and so does fsck.jbdfs; -fyD on a clean image exits 0.
#[test]
fn optimize_directories() {
    let img = jbdfs_image("optimize", 8 << 20, 1024);
    let o = fsck(&["-n", "-D"], &img.path);
    assert_eq!(code(&o), Some(8), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("The -n and -D options are incompatible."),
        "{}",
        text(&o)
    );
    let o = fsck(&["-fyD"], &img.path);
    assert_eq!(code(&o), Some(0), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("Pass 3A: Optimizing directories"),
        "{}",
        text(&o)
    );
    let o = fsck(&["-fn"], &img.path);
    assert_eq!(code(&o), Some(0), "{}", text(&o));
}

/// `fsck-jbdfs --generate-man DIR` writes fsck.jbdfs.8: valid roff that
/// man -l renders, naming every option of --help.
#[test]
fn man_page_names_every_option() {
    jbdfs_man::check_binary(std::path::Path::new(FSCK), "fsck.jbdfs").unwrap();
}
