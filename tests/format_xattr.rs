// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! Checks xattr parsing and serialization against attributes written by
//! debugfs, and that e2fsck accepts blocks we serialize. Skips (with a
//! message) when e2fsprogs is absent.

use jbdfs::format::bytes::le16;
use jbdfs::format::xattr::{self, Xattr};
use std::path::{Path, PathBuf};

use jbdfs_testkit::{run, tool, TempDir};

struct Tools {
    mke2fs: PathBuf,
    debugfs: PathBuf,
    e2fsck: PathBuf,
}

fn tools() -> Option<Tools> {
    Some(Tools {
        mke2fs: tool("mke2fs")?,
        debugfs: tool("debugfs")?,
        e2fsck: tool("e2fsck")?,
    })
}

/// An image with inode size `isize` holding /f with the given attributes
/// (values passed through files so any bytes work).
fn image_with_xattrs(t: &Tools, dir: &Path, isize: &str, attrs: &[(&str, Vec<u8>)]) -> PathBuf {
    let img = dir.join(format!("x{isize}.img"));
    let img_s = img.to_str().unwrap();
    run(
        &t.mke2fs,
        [
            "-q", "-F", "-t", "ext3", "-I", isize, "-b", "1024", img_s, "8M",
        ],
    );
    run(&t.debugfs, ["-w", "-R", "write /dev/null f", img_s]);
    for (i, (name, value)) in attrs.iter().enumerate() {
        let vf = dir.join(format!("v{i}"));
        std::fs::write(&vf, value).unwrap();
        let cmd = format!("ea_set -f {} /f {name}", vf.display());
        run(&t.debugfs, ["-w", "-R", &cmd, img_s]);
    }
    img
}

fn as_pairs(list: &[Xattr]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut v: Vec<_> = list
        .iter()
        .map(|x| (x.full_name().unwrap(), x.value.clone()))
        .collect();
    v.sort();
    v
}

fn expected(attrs: &[(&str, Vec<u8>)]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut v: Vec<_> = attrs
        .iter()
        .map(|(n, val)| (n.as_bytes().to_vec(), val.clone()))
        .collect();
    v.sort();
    v
}

/// e_hash of each entry in the table starting at `first`.
fn entry_hashes(buf: &[u8], first: usize) -> Vec<u32> {
    let mut off = first;
    let mut out = Vec::new();
    while jbdfs::format::bytes::le32(buf, off) != 0 {
        out.push(jbdfs::format::bytes::le32(buf, off + 12));
        off += xattr::entry_len(buf[off].into());
    }
    out
}

/// Writes `bytes` at `off` in a copy of `img` and runs e2fsck -fn on it.
fn fsck_with(t: &Tools, img: &Path, off: usize, bytes: &[u8]) -> (bool, String) {
    let copy = img.with_extension("copy");
    let mut raw = std::fs::read(img).unwrap();
    raw[off..off + bytes.len()].copy_from_slice(bytes);
    std::fs::write(&copy, raw).unwrap();
    let o = run(&t.e2fsck, ["-fn", copy.to_str().unwrap()]);
    (o.success(), o.stdout)
}

#[test]
fn xattr_block_from_debugfs() {
    jbdfs_testkit::require!(e2fsprogs);
    let t = tools().unwrap();
    let scratch = TempDir::new("xattr-block");
    let dir = scratch.path.clone();
    let big: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
    let attrs = [
        ("user.big", big),
        ("user.small", b"hello".to_vec()),
        ("trusted.t", b"xyz".to_vec()),
        (
            "security.selinux",
            b"unconfined_u:object_r:user_home_t:s0\0".to_vec(),
        ),
    ];
    let img = image_with_xattrs(&t, &dir, "128", &attrs);
    let stat = run(&t.debugfs, ["-R", "stat /f", img.to_str().unwrap()]).stdout;
    let acl = stat
        .lines()
        .find_map(|l| l.trim().strip_prefix("File ACL:"))
        .and_then(|s| s.split_whitespace().next()?.parse::<usize>().ok())
        .expect("File ACL in stat output");
    assert_ne!(acl, 0, "attributes should be in a block");
    let raw = std::fs::read(&img).unwrap();
    let block = &raw[acl * 1024..(acl + 1) * 1024];
    let parsed = xattr::parse_block(block).expect("parse debugfs block");
    assert_eq!(as_pairs(&parsed.entries), expected(&attrs));
    assert_eq!(parsed.h_refcount, 1);

    let ours = xattr::build_block(1024, parsed.h_refcount, &parsed.entries)
        .unwrap()
        .expect("fits");
    // e2fsprogs leaves h_hash 0 (allowed: such blocks are just not shared),
    // but its entry hashes must equal ours.
    assert_eq!(entry_hashes(&ours, 32), entry_hashes(block, 32));
    assert_ne!(xattr::parse_block(&ours).unwrap().h_hash, 0);
    let (ok, out) = fsck_with(&t, &img, acl * 1024, &ours);
    assert!(ok, "e2fsck rejected our block:\n{out}");
}

#[test]
fn in_inode_xattrs_from_debugfs() {
    jbdfs_testkit::require!(e2fsprogs);
    let t = tools().unwrap();
    let scratch = TempDir::new("xattr-ibody");
    let dir = scratch.path.clone();
    let attrs = [("user.small", b"hello".to_vec()), ("user.e", Vec::new())];
    let img = image_with_xattrs(&t, &dir, "256", &attrs);
    let imap = run(&t.debugfs, ["-R", "imap /f", img.to_str().unwrap()]).stdout;
    let words: Vec<&str> = imap.split_whitespace().collect();
    let at = words
        .iter()
        .rposition(|w| *w == "block")
        .expect("imap output");
    let blk: usize = words[at + 1].trim_end_matches(',').parse().unwrap();
    let off = usize::from_str_radix(words[at + 3].trim_start_matches("0x"), 16).unwrap();
    let raw = std::fs::read(&img).unwrap();
    let inode = &raw[blk * 1024 + off..blk * 1024 + off + 256];
    let start = 128 + usize::from(le16(inode, 128));
    let area = &inode[start..];
    let list = xattr::parse_ibody(area).expect("parse in-inode area");
    assert_eq!(as_pairs(&list), expected(&attrs));

    let ours = xattr::build_ibody(area.len(), &list)
        .unwrap()
        .expect("fits");
    assert_eq!(xattr::parse_ibody(&ours).unwrap().len(), 2);
    assert_eq!(entry_hashes(&ours, 4), entry_hashes(area, 4));
    let (ok, out) = fsck_with(&t, &img, blk * 1024 + off + start, &ours);
    assert!(ok, "e2fsck rejected our in-inode area:\n{out}");
}
