// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! The mkfs.jbdfs command line: help, argument errors that leave the
//! target alone, -n, -F, -L/-U and sizes in blocks.

use std::path::Path;
use std::process::{Command, Output};
use std::time::SystemTime;

use jbdfs_testkit::TempImage;

const MKFS: &str = env!("CARGO_BIN_EXE_mkfs-jbdfs");

fn mkfs(args: &[&str], target: &Path, size: Option<&str>) -> Output {
    let mut c = Command::new(MKFS);
    c.args(args).arg(target);
    if let Some(s) = size {
        c.arg(s);
    }
    c.env("LC_ALL", "C").output().expect("run mkfs-jbdfs")
}

fn text(o: &Output) -> String {
    format!(
        "status: {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `dumpe2fs -h` value of `key`.
fn dumpe2fs(path: &Path, key: &str) -> String {
    let o = Command::new("dumpe2fs")
        .arg("-h")
        .arg(path)
        .env("LC_ALL", "C")
        .output()
        .expect("run dumpe2fs");
    assert!(o.status.success(), "dumpe2fs failed: {}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    out.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
        .unwrap_or_else(|| panic!("dumpe2fs has no '{key}':\n{out}"))
}

/// Contents and modification time, to prove a file was not touched.
fn snapshot(path: &Path) -> (Vec<u8>, SystemTime) {
    let data = std::fs::read(path).unwrap();
    let mtime = std::fs::metadata(path).unwrap().modified().unwrap();
    (data, mtime)
}

fn assert_untouched(path: &Path, before: &(Vec<u8>, SystemTime), what: &str) {
    let after = snapshot(path);
    assert!(after.0 == before.0, "{what}: the target's contents changed");
    assert_eq!(after.1, before.1, "{what}: the target's mtime changed");
}

/// A 4 MiB file of non-zero, non-filesystem bytes.
fn junk_file(tag: &str) -> TempImage {
    let s = TempImage::new(tag);
    let data: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8 | 1).collect();
    std::fs::write(&s.path, data).unwrap();
    // Make the mtime distinguishable from "now".
    let old = SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&s.path)
        .unwrap()
        .set_modified(old)
        .unwrap();
    s
}

fn make_fs(tag: &str, size: &str) -> TempImage {
    let s = TempImage::new(tag);
    let o = mkfs(&["-q"], &s.path, Some(size));
    assert!(o.status.success(), "mkfs failed: {}", text(&o));
    let old = SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&s.path)
        .unwrap()
        .set_modified(old)
        .unwrap();
    s
}

#[test]
fn help_lists_the_options() {
    let o = Command::new(MKFS).arg("--help").output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let help = String::from_utf8_lossy(&o.stdout);
    for flag in [
        "-b", "-N", "-i", "-I", "-J", "-L", "-U", "-m", "-O", "-q", "-F", "-n",
    ] {
        assert!(
            help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}...")),
            "--help does not mention {flag}:\n{help}"
        );
    }
}

/// Bad requests: each fails with a message naming the problem and leaves
/// an existing target byte-for-byte alone, and a missing one uncreated.
#[test]
fn bad_arguments_fail_without_touching_the_target() {
    let cases: &[(&[&str], Option<&str>, &str)] = &[
        (&[], Some("100K"), "too small"),
        (&["-b", "3000"], Some("8M"), "invalid block size 3000"),
        (
            &["-O", "frobnicate"],
            Some("8M"),
            "unknown feature 'frobnicate'",
        ),
        (&["-O", "extent"], Some("8M"), "'extent' is not supported"),
        (&["-I", "512"], Some("8M"), "inode size"),
        (&["-J", "size=1000"], Some("8M"), "journal size"),
        (&["-m", "70"], Some("8M"), "reserved"),
        (&["-L", "a-label-longer-than-16"], Some("8M"), "label"),
        (&["-U", "not-a-uuid"], Some("8M"), "UUID"),
        (&["-t", "ext4"], Some("8M"), "ext4"),
        (&[], Some("12Q"), "invalid size"),
    ];
    for (args, size, want) in cases {
        let what = format!("mkfs-jbdfs {} IMG {}", args.join(" "), size.unwrap_or(""));
        // An existing file that holds no filesystem.
        let junk = junk_file("junk");
        let before = snapshot(&junk.path);
        let o = mkfs(args, &junk.path, *size);
        assert!(!o.status.success(), "{what} succeeded: {}", text(&o));
        assert!(
            stderr(&o).contains(want),
            "{what}: stderr does not mention '{want}': {}",
            text(&o)
        );
        assert_untouched(&junk.path, &before, &what);
        // A path that does not exist yet.
        let missing = TempImage::new("missing");
        let o = mkfs(args, &missing.path, *size);
        assert!(!o.status.success(), "{what} succeeded: {}", text(&o));
        assert!(
            !missing.path.exists(),
            "{what}: a failed mkfs created {}",
            missing.path.display()
        );
    }
}

#[test]
fn existing_filesystem_needs_force() {
    let fs = make_fs("existing", "8M");
    let before = snapshot(&fs.path);
    for args in [&[][..], &["-b", "4096"][..], &["-q"][..]] {
        let o = mkfs(args, &fs.path, None);
        assert!(!o.status.success(), "overwrote without -F: {}", text(&o));
        let err = stderr(&o);
        assert!(
            err.contains("ext3 filesystem") && err.contains("-F"),
            "the refusal should name the filesystem found and -F: {}",
            text(&o)
        );
        assert_untouched(&fs.path, &before, "mkfs without -F on a filesystem");
    }
    // With a size too.
    let o = mkfs(&[], &fs.path, Some("8M"));
    assert!(!o.status.success(), "overwrote without -F: {}", text(&o));
    assert_untouched(&fs.path, &before, "mkfs IMG SIZE without -F");

    let uuid_before = dumpe2fs(&fs.path, "Filesystem UUID");
    let o = mkfs(&["-q", "-F"], &fs.path, None);
    assert!(o.status.success(), "-F failed: {}", text(&o));
    let uuid_after = dumpe2fs(&fs.path, "Filesystem UUID");
    assert_ne!(uuid_before, uuid_after, "-F should make a new filesystem");
    assert_eq!(std::fs::metadata(&fs.path).unwrap().len(), 8 << 20);
}

#[test]
fn missing_path_without_size_fails_and_creates_nothing() {
    let s = TempImage::new("nosize");
    let o = mkfs(&[], &s.path, None);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        stderr(&o).contains("does not exist"),
        "error should say the path does not exist: {}",
        text(&o)
    );
    assert!(!s.path.exists());
}

#[test]
fn dry_run_writes_nothing() {
    let s = TempImage::new("dry");
    let o = mkfs(&["-n"], &s.path, Some("16M"));
    assert!(o.status.success(), "{}", text(&o));
    assert!(!s.path.exists(), "-n created the image");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("16384 1k blocks"), "-n summary: {out}");

    let junk = junk_file("dry-junk");
    let before = snapshot(&junk.path);
    let o = mkfs(&["-n"], &junk.path, None);
    assert!(o.status.success(), "{}", text(&o));
    assert_untouched(&junk.path, &before, "-n on an existing file");

    let fs = make_fs("dry-fs", "8M");
    let before = snapshot(&fs.path);
    let o = mkfs(&["-n", "-F"], &fs.path, None);
    assert!(o.status.success(), "{}", text(&o));
    assert_untouched(&fs.path, &before, "-n -F on a filesystem");
}

#[test]
fn label_and_uuid_show_up_in_dumpe2fs() {
    let s = TempImage::new("label");
    let uuid = "0123abcd-4567-4890-8abc-def012345678";
    let o = mkfs(&["-q", "-L", "my-volume", "-U", uuid], &s.path, Some("8M"));
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(dumpe2fs(&s.path, "Filesystem volume name"), "my-volume");
    assert_eq!(dumpe2fs(&s.path, "Filesystem UUID"), uuid);
}

#[test]
fn bare_size_counts_blocks_of_dash_b() {
    let s = TempImage::new("blocks");
    let o = mkfs(&["-q", "-b", "2048"], &s.path, Some("8192"));
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(dumpe2fs(&s.path, "Block size"), "2048");
    assert_eq!(dumpe2fs(&s.path, "Block count"), "8192");
    assert_eq!(std::fs::metadata(&s.path).unwrap().len(), 8192 * 2048);

    // Without -b a bare number is KiB.
    let s = TempImage::new("kib");
    let o = mkfs(&["-q"], &s.path, Some("8192"));
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::metadata(&s.path).unwrap().len(), 8192 * 1024);
}

#[test]
fn summary_names_block_and_inode_counts() {
    let s = TempImage::new("summary");
    let o = mkfs(&["-b", "4096", "-N", "5000"], &s.path, Some("64M"));
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let blocks = dumpe2fs(&s.path, "Block count");
    let inodes = dumpe2fs(&s.path, "Inode count");
    assert_eq!(blocks, "16384");
    assert!(
        inodes.parse::<u64>().unwrap() >= 5000,
        "-N 5000 gave {inodes} inodes"
    );
    assert!(
        out.contains(&format!("{blocks} 4k blocks")),
        "summary does not name the block count {blocks}:\n{out}"
    );
    assert!(
        out.contains(&format!("{inodes} inodes")),
        "summary does not name the inode count {inodes}:\n{out}"
    );
    assert!(
        out.contains(&dumpe2fs(&s.path, "Filesystem UUID")),
        "summary does not name the UUID:\n{out}"
    );

    let q = TempImage::new("quiet");
    let o = mkfs(&["-q"], &q.path, Some("8M"));
    assert!(o.status.success(), "{}", text(&o));
    assert!(o.stdout.is_empty(), "-q printed: {}", text(&o));
}

/// `mkfs-jbdfs --generate-man DIR` writes mkfs.jbdfs.8: valid roff that
/// man -l renders, naming every option of --help.
#[test]
fn man_page_names_every_option() {
    jbdfs_man::check_binary(std::path::Path::new(MKFS), "mkfs.jbdfs").unwrap();
}
