// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! mkfs.jbdfs's mke2fs options for image builders (issue 45): -E, -T, -j,
//! -r, -g, -e, -M, -o and -S, each beside `mke2fs -t ext3` with the same
//! options (dumpe2fs -h alike) and e2fsck-clean.

use std::path::Path;
use std::process::{Command, Output};

use jbdfs_testkit::TempImage;

const MKFS: &str = env!("CARGO_BIN_EXE_mkfs-jbdfs");
const UUID: &str = "01234567-89ab-cdef-0123-456789abcdef";
const SEED: &str = "11111111-2222-3333-4444-555555555555";

fn run(prog: &str, args: &[&str], target: &Path, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(prog);
    c.args(args).arg(target).arg("64M").env("LC_ALL", "C");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap_or_else(|e| panic!("run {prog}: {e}"))
}

fn text(o: &Output) -> String {
    jbdfs_testkit::Out::of("", o.clone()).describe()
}

/// `dumpe2fs -h`, without what differs between any two runs (times, and
/// the random hash seed unless `-E hash_seed=` fixed it) and without
/// mke2fs's "Overhead clusters", which jbdfs leaves zero, as mke2fs
/// before 1.47 did.
fn header(path: &Path, seeded: bool) -> String {
    let o = Command::new("dumpe2fs")
        .arg("-h")
        .arg(path)
        .env("LC_ALL", "C")
        .output()
        .unwrap();
    assert!(o.status.success(), "dumpe2fs: {}", text(&o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| {
            let k = l.split(':').next().unwrap_or("");
            !(k.contains("time")
                || k.contains("created")
                || k.contains("checked")
                || k.starts_with("Lifetime")
                || k.starts_with("Overhead")
                || (!seeded && k.starts_with("Directory Hash Seed")))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn e2fsck_clean(path: &Path, what: &str) {
    let o = Command::new("e2fsck")
        .arg("-fn")
        .arg(path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{what}: e2fsck -fn: {}", text(&o));
}

/// jbdfs and mke2fs (without resize_inode, which ext3 in jbdfs lacks)
/// with the same options.
fn both(tag: &str, args: &[&str], env: &[(&str, &str)]) -> (TempImage, TempImage) {
    let ours = TempImage::new(tag);
    let theirs = TempImage::new(tag);
    let mut a = vec!["-q", "-U", UUID];
    a.extend_from_slice(args);
    let o = run(MKFS, &a, &ours.path, env);
    assert!(o.status.success(), "mkfs.jbdfs {args:?}: {}", text(&o));
    let mut b = vec!["-F", "-t", "ext3", "-O", "^resize_inode"];
    b.extend_from_slice(&a);
    let o = run("mke2fs", &b, &theirs.path, env);
    assert!(o.status.success(), "mke2fs {args:?}: {}", text(&o));
    (ours, theirs)
}

#[test]
fn extended_options_and_usage_types_match_mke2fs() {
    jbdfs_testkit::require!(e2fsprogs);
    // mke2fs takes the last -E only; the options go in one.
    let seed = format!("hash_seed={SEED}");
    let seed_lazy = format!("{seed},lazy_itable_init=1,discard");
    let cases: Vec<Vec<&str>> = vec![
        vec![
            "-E",
            "root_owner=1000:100,stride=16,stripe_width=64,nodiscard",
        ],
        vec!["-E", &seed_lazy, "-T", "news"],
        vec!["-T", "largefile", "-e", "remount-ro", "-M", "/srv/image"],
        vec!["-T", "small,hurd", "-g", "4096", "-j", "-r", "1"],
        vec!["-o", "hurd", "-E", &seed],
        vec!["-o", "freebsd", "-e", "panic", "-T", "floppy"],
        vec!["-g", "2048", "-T", "largefile4", "-E", "stride=8"],
    ];
    for args in &cases {
        let seeded = args.iter().any(|a| a.contains("hash_seed"));
        let (ours, theirs) = both("ext-opts", args, &[]);
        assert_eq!(
            header(&ours.path, seeded),
            header(&theirs.path, seeded),
            "dumpe2fs -h differs for {args:?}"
        );
        e2fsck_clean(&ours.path, &format!("{args:?}"));
    }
    // root_owner is the root inode's, and without a value the caller's.
    let (ours, _) = both("ext-owner", &["-E", "root_owner=1000:100"], &[]);
    let o = jbdfs_testkit::e2fs::debugfs(&ours.path, "stat /");
    assert!(
        o.stdout.contains("User:  1000   Group:   100"),
        "{}",
        o.stdout
    );
    let (ours, _) = both("ext-owner", &["-E", "root_owner"], &[]);
    let o = jbdfs_testkit::e2fs::debugfs(&ours.path, "stat /");
    let (uid, gid) = {
        use std::os::unix::fs::MetadataExt;
        // A file this process makes is its user's and group's.
        let m = std::fs::metadata(&ours.path).unwrap();
        (m.uid(), m.gid())
    };
    assert!(
        o.stdout
            .contains(&format!("User: {uid:>5}   Group: {gid:>5}")),
        "{}",
        o.stdout
    );
}

/// Without a mke2fs.conf, mke2fs uses its built-in profile; so does jbdfs.
#[test]
fn usage_types_without_a_profile_are_mke2fs_s_built_in_ones() {
    jbdfs_testkit::require!(e2fsprogs);
    let none = [("MKE2FS_CONFIG", "/nonexistent/mke2fs.conf")];
    for t in ["news", "largefile", "hurd", "small"] {
        let (ours, theirs) = both("ext-builtin", &["-T", t], &none);
        assert_eq!(
            header(&ours.path, false),
            header(&theirs.path, false),
            "-T {t}"
        );
        e2fsck_clean(&ours.path, t);
    }
}

#[test]
fn bad_options_are_named_and_nothing_is_made() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["-E", "stride=4,frobnicate"],
            "unknown extended option 'frobnicate'",
        ),
        (
            &["-E", "root_owner=me"],
            "invalid extended option 'root_owner=me'",
        ),
        (&["-E", "hash_seed=xyz"], "hash_seed=xyz"),
        (&["-E", "stride=70000"], "stride=70000"),
        (&["-T", "bogus"], "usage type 'bogus'"),
        (&["-r", "0"], "revision 0"),
        (&["-g", "1004"], "invalid blocks per group 1004"),
        (&["-g", "128"], "invalid blocks per group 128"),
        (&["-e", "explode"], "invalid errors behaviour 'explode'"),
        (&["-o", "plan9"], "invalid creator OS 'plan9'"),
        (
            &["-S"],
            "-S rewrites the superblocks of an existing filesystem",
        ),
    ];
    for (args, want) in cases {
        let img = TempImage::new("ext-bad");
        let o = run(MKFS, args, &img.path, &[]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o));
        assert!(err.contains(want), "{args:?}: wanted '{want}' in: {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(!img.path.exists(), "{args:?} created the target");
    }
}

/// -S over a filesystem whose superblock is gone: the superblocks and
/// descriptors mke2fs -S writes (it, too, without discarding, which would
/// lose the data -S is for), and e2fsck then finds the files.
#[test]
fn super_only_rewrites_what_mke2fs_s_does_and_e2fsck_recovers_the_files() {
    jbdfs_testkit::require!(e2fsprogs);
    let (ours, theirs) = both("ext-super", &[], &[]);
    let file = TempImage::new("ext-super-file");
    std::fs::write(&file.path, b"kept through -S\n").unwrap();
    let w = format!("write {} kept", file.path.display());
    for img in [&ours, &theirs] {
        let o = Command::new("debugfs")
            .args(["-w", "-R", &w])
            .arg(&img.path)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o));
        // The primary superblock lost.
        jbdfs_testkit::temp::write_bytes(&img.path, 1024, &[0u8; 1024]);
    }
    let o = run(MKFS, &["-q", "-S", "-U", UUID], &ours.path, &[]);
    assert!(o.status.success(), "mkfs.jbdfs -S: {}", text(&o));
    let o = run(
        "mke2fs",
        &[
            "-q",
            "-F",
            "-S",
            "-E",
            "nodiscard",
            "-t",
            "ext3",
            "-O",
            "^resize_inode",
            "-U",
            UUID,
        ],
        &theirs.path,
        &[],
    );
    assert!(o.status.success(), "mke2fs -S: {}", text(&o));
    assert_eq!(header(&ours.path, false), header(&theirs.path, false));
    let o = Command::new("e2fsck")
        .arg("-fy")
        .arg(&ours.path)
        .output()
        .unwrap();
    assert!(o.status.code().is_some_and(|c| c <= 1), "{}", text(&o));
    e2fsck_clean(&ours.path, "after -S and e2fsck -fy");
    let o = jbdfs_testkit::e2fs::debugfs(&ours.path, "cat /kept");
    assert_eq!(o.stdout, "kept through -S\n");
}
