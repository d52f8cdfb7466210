// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! `mkfs.jbdfs -d ROOTDIR` (issue 45): a tree of every kind of file goes
//! in, e2fsck finds the image clean, Linux reads the same tree back
//! (content, type, mode, owner, times, xattrs, ACLs, link counts), two
//! runs with SOURCE_DATE_EPOCH, -U and -E hash_seed= are byte-identical,
//! and a tree that does not fit names the file and leaves no image.

use std::path::Path;
use std::process::{Command, Output};

use jbdfs_testkit::{TempDir, TempImage};

const MKFS: &str = env!("CARGO_BIN_EXE_mkfs-jbdfs");

fn text(o: &Output) -> String {
    jbdfs_testkit::Out::of("", o.clone()).describe()
}

fn sh(script: &str, dir: &Path) -> String {
    let o = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{script}: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Every kind of file mke2fs -d copies.
const TREE: &str = r#"set -e
mkdir -p dir/sub big
printf 'hello\n' > dir/file
dd if=/dev/urandom of=sparse bs=4096 count=3 seek=10 status=none
truncate -s 1M sparse
dd if=/dev/urandom of=tail-hole bs=1000 count=5 status=none
truncate -s 300000 tail-hole
: > empty
ln dir/file hardlink
ln dir/file dir/sub/hardlink2
ln -s dir/file fast-link
ln -s "$(printf 'x%.0s' $(seq 200))/target" slow-link
mknod chr c 1 7
mknod blk b 7 200
mkfifo fifo
python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("sock")'
chmod 4751 dir/file; chmod 1777 dir/sub; chmod 2750 dir
chown 1000:100 dir/file; chown -h 65534:65534 fast-link; chown 123:456 fifo
for i in $(seq 600); do : > big/entry-with-a-longish-name-$i; done
setfattr -n user.colour -v blue dir/file
setfattr -n security.selinux -v system_u:object_r:etc_t:s0 empty
setfattr -n user.big -v "$(head -c 600 /dev/zero | tr '\0' v)" sparse
setfacl -m u:1000:rw,g:100:r,m:rw empty
setfacl -d -m u:1000:rwx dir/sub
touch -h -d '2001-02-03 04:05:06.123456789' fast-link dir/file
touch -d '1999-12-31 23:59:59.5' -a tail-hole
"#;

/// What Linux shows of a tree, sorted: each entry's type, mode, owner,
/// link count, times (ns) and symlink target; non-directories' sizes
/// (directories' differ by design: block counts); file contents, device
/// numbers, and every xattr (ACLs and security labels included) as
/// getfattr prints them, one block a file.
fn listing(root: &Path) -> String {
    let script = r#"
        set -f; skip='! -path ./lost+found ! -path ./lost+found/*'
        find . -mindepth 1 $skip -printf '%p %y %m %U:%G %n %T@ %A@ %C@ %l\n' | sort
        find . -mindepth 1 $skip ! -type d -printf '%p %s\n' | sort
        find . -type f -exec sha256sum {} + | sort -k2
        find . \( -type b -o -type c \) -exec stat -c '%n %t:%T' {} + | sort
    "#;
    let entries = sh(script, root);
    let xattrs = sh("getfattr -R -h -d -m - -e hex . 2>/dev/null || true", root);
    let mut blocks: Vec<&str> = xattrs
        .split("\n\n")
        .map(str::trim)
        .filter(|b| !b.is_empty() && !b.contains("lost+found"))
        .collect();
    blocks.sort();
    format!("{entries}\n{}", blocks.join("\n\n"))
}

/// Reads every file, symlink and directory once, so that relatime has
/// moved the atimes it moves (a first read after a write) before the tree
/// is listed or copied: the copy's reading must not change the source.
fn settle(root: &Path) {
    sh(
        "find . -type f -exec cat {} + >/dev/null; find . -type l -exec readlink {} + >/dev/null; ls -laR . >/dev/null",
        root,
    );
}

fn mkfs_d(root: &Path, image: &Path, size: &str, extra: &[&str]) -> Output {
    Command::new(MKFS)
        .args(["-q", "-d"])
        .arg(root)
        .args(extra)
        .arg(image)
        .arg(size)
        .env("LC_ALL", "C")
        .output()
        .unwrap()
}

#[test]
fn a_tree_of_every_kind_goes_in_and_linux_reads_it_back() {
    jbdfs_testkit::require!(root, e2fsprogs, "setfattr", "setfacl", "getfattr", "python3");
    let src = TempDir::new("mkfs-d-src");
    sh(TREE, &src.path);
    settle(&src.path);
    let before = listing(&src.path);
    let img = TempImage::new("mkfs-d");
    let o = mkfs_d(&src.path, &img.path, "64M", &[]);
    assert!(o.status.success(), "mkfs -d: {}", text(&o));
    jbdfs_testkit::assert_e2fsck_clean(&img.path, "after mkfs -d");
    // The 600-entry directory is indexed.
    let o = jbdfs_testkit::e2fs::debugfs(&img.path, "stat /big");
    assert!(o.stdout.contains("Flags: 0x1000"), "{}", o.stdout);
    // The sparse file's holes stayed holes: 3 data blocks of 4 KiB
    // (1 KiB blocks: 12, plus an indirect block, plus the xattr block).
    let o = jbdfs_testkit::e2fs::debugfs(&img.path, "stat /sparse");
    assert!(o.stdout.contains("Blockcount: 28"), "{}", o.stdout);

    if jbdfs_testkit::available!("Linux's reading of the image"; loop) {
        let m = jbdfs_testkit::loopdev::LoopMount::mount_with(&img.path, "ro,noatime").unwrap();
        let got = listing(m.path());
        if got != before {
            let (a, b): (Vec<_>, Vec<_>) = (got.lines().collect(), before.lines().collect());
            let first = a.iter().zip(&b).position(|(x, y)| x != y);
            panic!(
                "Linux reads back another tree; first difference at line {first:?}:\n  image: {:?}\n  tree:  {:?}",
                first.and_then(|i| a.get(i)),
                first.and_then(|i| b.get(i))
            );
        }
        // The root directory's mode and owner are the tree's.
        let stat = |p: &Path| sh(&format!("stat -c '%a %U' {}", p.display()), &src.path);
        assert_eq!(stat(m.path()), stat(&src.path));
    }
}

#[test]
fn two_runs_with_a_fixed_clock_uuid_and_seed_are_byte_identical() {
    jbdfs_testkit::require!(root, "python3", "setfattr", "setfacl");
    let src = TempDir::new("mkfs-d-repro");
    sh(TREE, &src.path);
    settle(&src.path);
    let fixed = [
        "-U",
        "01234567-89ab-cdef-0123-456789abcdef",
        "-E",
        "hash_seed=11111111-2222-3333-4444-555555555555",
    ];
    let images: Vec<Vec<u8>> = (0..2)
        .map(|_| {
            let img = TempImage::new("mkfs-d-repro");
            let o = Command::new(MKFS)
                .args(["-q", "-d"])
                .arg(&src.path)
                .args(fixed)
                .arg(&img.path)
                .arg("32M")
                .env("SOURCE_DATE_EPOCH", "1700000000")
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", text(&o));
            std::fs::read(&img.path).unwrap()
        })
        .collect();
    let differ = images[0]
        .chunks(1024)
        .zip(images[1].chunks(1024))
        .position(|(a, b)| a != b);
    assert_eq!(
        differ, None,
        "the images differ first in 1 KiB block {differ:?}"
    );
}

#[test]
fn a_tree_that_does_not_fit_names_the_file_and_leaves_no_image() {
    jbdfs_testkit::require!(e2fsprogs);
    let src = TempDir::new("mkfs-d-big");
    sh(
        "mkdir d && head -c 12000000 /dev/urandom > d/too-big && echo small > a",
        &src.path,
    );
    let img = TempImage::new("mkfs-d-big");
    let o = mkfs_d(&src.path, &img.path, "8M", &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(err.contains("d/too-big: does not fit"), "{err}");
    assert!(err.contains("no filesystem was made"), "{err}");
    assert!(!img.path.exists(), "a half-made image was left");
    // Over an existing file, no filesystem is left for anyone to take.
    std::fs::write(&img.path, b"").unwrap();
    let o = mkfs_d(&src.path, &img.path, "8M", &["-F"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let o = Command::new("dumpe2fs")
        .arg("-h")
        .arg(&img.path)
        .output()
        .unwrap();
    assert!(!o.status.success(), "a filesystem was left: {}", text(&o));
    // A file that cannot be read is named (a directory where a file is
    // expected cannot be faked as root; a missing tree is).
    let o = mkfs_d(&src.path.join("missing"), &img.path, "8M", &["-F"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("missing: cannot read"), "{err}");
}
