// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! Checks the directory-entry and htree code against a directory that
//! e2fsprogs indexed itself. Skips (with a message) when e2fsprogs is absent.

use jbdfs::format::bytes::le32;
use jbdfs::format::dirent::{self, DxEntry};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use jbdfs_testkit::{run, tool, TempDir};

/// An image with directory `d` of 500 names, indexed by `e2fsck -D`.
fn make_htree_image(dir: &Path, debugfs: &Path) -> Option<PathBuf> {
    let img = dir.join("x.img");
    let img_s = img.to_str().unwrap();
    let mke2fs = tool("mke2fs")?;
    let e2fsck = tool("e2fsck")?;
    run(
        &mke2fs,
        ["-q", "-F", "-t", "ext3", "-b", "1024", img_s, "8M"],
    );
    let mut cmds = String::from("mkdir d\n");
    for i in 0..500 {
        cmds.push_str(&format!("write /dev/null d/name{i}\n"));
    }
    let cmd_file = dir.join("cmds");
    std::fs::write(&cmd_file, cmds).unwrap();
    run(debugfs, ["-w", "-f", cmd_file.to_str().unwrap(), img_s]);
    run(&e2fsck, ["-fyD", img_s]);
    Some(img)
}

/// "hash-minor" per name, from `debugfs -R "htree d"` leaf listings.
fn debugfs_leaf_hashes(text: &str) -> HashMap<String, (u32, u32)> {
    let mut out = HashMap::new();
    let toks: Vec<&str> = text.split_whitespace().collect();
    for w in toks.windows(4) {
        let Some(hm) = w[1].strip_prefix("0x") else {
            continue;
        };
        let Some((h, m)) = hm.split_once('-') else {
            continue;
        };
        if !w[2].starts_with('(') {
            continue;
        }
        let parse = |s: &str| u32::from_str_radix(s.trim_start_matches("0x"), 16).ok();
        if let (Some(h), Some(m)) = (parse(h), parse(m)) {
            out.insert(w[3].to_string(), (h, m));
        }
    }
    out
}

#[test]
fn htree_directory_from_e2fsprogs() {
    jbdfs_testkit::require!(e2fsprogs);
    let debugfs = tool("debugfs").unwrap();
    let scratch = TempDir::new("dirent");
    let dir = scratch.path.clone();
    let img = make_htree_image(&dir, &debugfs).unwrap();
    let img_s = img.to_str().unwrap();
    let raw = std::fs::read(&img).unwrap();
    let sb = &raw[1024..2048];
    let seed = [
        le32(sb, 0xEC),
        le32(sb, 0xF0),
        le32(sb, 0xF4),
        le32(sb, 0xF8),
    ];
    let dump = dir.join("d.bin");
    run(
        &debugfs,
        ["-R", &format!("dump d {}", dump.display()), img_s],
    );
    let data = std::fs::read(&dump).unwrap();
    assert!(data.len() > 1024, "directory should span several blocks");

    let root = dirent::parse_dx_root(&data[..1024]).expect("dx_root");
    assert!(dirent::looks_like_dx_root(&data[..1024]));
    assert_eq!(root.hash_version, sb[0xFC]);
    assert_eq!(root.indirect_levels, 0);
    assert_eq!(root.limit, 124);
    let version = dirent::effective_hash_version(root.hash_version, sb[0x160] & 2 != 0);

    let htree = run(&debugfs, ["-R", "htree d", img_s]).stdout;
    assert!(htree.contains(&format!(
        "Number of entries (count): {}",
        root.entries.len()
    )));
    let expected = debugfs_leaf_hashes(&htree);
    assert!(
        expected.len() >= 500,
        "parsed {} names from debugfs",
        expected.len()
    );

    let mut seen = 0;
    for (i, e) in root.entries.iter().enumerate() {
        let hi = root
            .entries
            .get(i + 1)
            .map_or(u64::MAX, |n: &DxEntry| n.hash.into());
        seen += check_leaf(&data, e, hi, version, &seed, &expected);
    }
    assert_eq!(seen, 500);

    let uuid: [u8; 16] = sb[0xEC..0xFC].try_into().unwrap();
    let seed_s = jbdfs::util::format_uuid(&uuid);
    for (name, v) in [
        ("name7", 1u8),
        ("a_much_longer_name_than_thirty_two_bytes", 2),
        ("x", 0),
    ] {
        let cmd = format!("dx_hash -h {v} -s {seed_s} {name}");
        let text = run(&debugfs, ["-R", &cmd, img_s]).stdout;
        let (hash, minor) = dirent::dx_hash(name.as_bytes(), v, &seed).unwrap();
        let want = format!("Hash of {name} is {hash:#x} (minor {minor:#x})");
        assert!(text.contains(&want), "{text} vs {want}");
    }
}

/// Every name in the leaf hashes into the leaf's range and matches debugfs.
fn check_leaf(
    data: &[u8],
    e: &DxEntry,
    hi: u64,
    version: u8,
    seed: &[u32; 4],
    expected: &HashMap<String, (u32, u32)>,
) -> usize {
    let off = e.block as usize * 1024;
    let block = &data[off..off + 1024];
    let mut n = 0;
    for d in dirent::iter_block(block, None) {
        let d = d.expect("valid leaf entry");
        if d.inode.0 == 0 {
            continue;
        }
        let (hash, minor) = dirent::dx_hash(d.name, version, seed).unwrap();
        assert!(
            hash >= e.hash && u64::from(hash) < hi,
            "hash out of leaf range"
        );
        let name = String::from_utf8_lossy(d.name).into_owned();
        assert_eq!(expected.get(&name), Some(&(hash, minor)), "{name}");
        n += 1;
    }
    n
}
