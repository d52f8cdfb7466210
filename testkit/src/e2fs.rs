//! e2fsprogs as the oracle: `e2fsck -fn` must find an image clean, and
//! parsers for `dumpe2fs` and `debugfs` output.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::Path;

use jbdfs::device::MemoryDevice;

use crate::cmd::{run, Out};
use crate::temp::TempImage;

/// Runs `e2fsck -fn` on an image.
pub fn e2fsck(image: &Path) -> Out {
    run("e2fsck", [OsStr::new("-fn"), image.as_os_str()])
}

/// Panics with e2fsck's output unless `e2fsck -fn` exits 0.
pub fn assert_e2fsck_clean(image: &Path, what: &str) {
    let o = e2fsck(image);
    assert!(
        o.success(),
        "e2fsck -fn found problems in {what}:\n{}",
        o.describe()
    );
}

/// Panics with e2fsck's output unless `e2fsck -fn` finds the bytes
/// `image` clean (written to a scratch file first).
pub fn assert_bytes_clean(image: &[u8], what: &str) {
    let img = TempImage::new("e2fsck");
    std::fs::write(&img.path, image).expect("write image for e2fsck");
    assert_e2fsck_clean(&img.path, what);
}

/// [`assert_bytes_clean`] of an in-memory device as it stands.
pub fn assert_mem_clean(mem: &MemoryDevice, what: &str) {
    assert_bytes_clean(&mem.snapshot(), what);
}

/// Runs `e2fsck -fy` on an image (repairs).
pub fn e2fsck_fy(image: &Path) -> Out {
    run("e2fsck", [OsStr::new("-fy"), image.as_os_str()])
}

/// e2fsck -fy may repair (exit 0, 1 or 2); afterwards -fn must be clean.
pub fn assert_repairs_to_clean(image: &Path, what: &str) -> Out {
    let fixed = e2fsck_fy(image);
    assert!(
        matches!(fixed.code, Some(0..=2)),
        "e2fsck -fy could not repair {what}:\n{}",
        fixed.describe()
    );
    assert_e2fsck_clean(image, &format!("{what}, after e2fsck -fy"));
    fixed
}

/// `key: value` lines of a dumpe2fs header, in order.
#[derive(Clone, Debug, Default)]
pub struct Header {
    pub lines: Vec<(String, String)>,
}

impl Header {
    pub fn parse(text: &str) -> Self {
        let mut lines = Vec::new();
        for line in text.lines() {
            if line.starts_with("Group ") {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                let k = k.trim();
                if k.is_empty() || k.starts_with("dumpe2fs ") {
                    continue;
                }
                lines.push((k.to_string(), v.trim().to_string()));
            }
        }
        Header { lines }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.lines
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `key`, panicking (with the whole header) when absent.
    pub fn field(&self, key: &str) -> &str {
        self.get(key)
            .unwrap_or_else(|| panic!("dumpe2fs has no '{key}' line; header:\n{self:#?}"))
    }

    /// The leading number of `key`'s value.
    pub fn num(&self, key: &str) -> u64 {
        let v = self.field(key);
        let digits: String = v
            .trim_start_matches('-')
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        digits
            .parse()
            .unwrap_or_else(|_| panic!("'{key}: {v}' is not a number"))
    }

    pub fn features(&self) -> std::collections::BTreeSet<String> {
        self.field("Filesystem features")
            .split_whitespace()
            .map(str::to_string)
            .collect()
    }

    /// "Total journal size" in bytes (dumpe2fs prints e.g. `4096k`, `16M`).
    pub fn journal_bytes(&self) -> u64 {
        let v = self.field("Total journal size");
        let (n, unit) = v.split_at(v.len() - 1);
        let n: u64 = n.parse().unwrap_or_else(|_| panic!("journal size '{v}'"));
        match unit {
            "k" | "K" => n << 10,
            "M" => n << 20,
            "G" => n << 30,
            _ => panic!("journal size '{v}' has an unknown unit"),
        }
    }
}

/// `dumpe2fs -h` of an image, parsed; panics when dumpe2fs fails.
pub fn dumpe2fs_header(image: &Path) -> Header {
    let o = run("dumpe2fs", [OsStr::new("-h"), image.as_os_str()]).expect_ok();
    Header::parse(&o.stdout)
}

/// One group's lines of a full `dumpe2fs`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DumpGroup {
    pub group: u32,
    pub block_bitmap: u32,
    pub inode_bitmap: u32,
    pub inode_table: (u32, u32),
    pub free_blocks: u32,
    pub free_inodes: u32,
    pub directories: u32,
}

fn first_number(s: &str) -> Option<u32> {
    let d: String = s
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    d.parse().ok()
}

/// Parses the group sections of a full `dumpe2fs`.
pub fn parse_groups(text: &str) -> Vec<DumpGroup> {
    let mut groups: Vec<DumpGroup> = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if let Some(rest) = line.strip_prefix("Group ") {
            let n = first_number(rest).expect("group number");
            groups.push(DumpGroup {
                group: n,
                ..Default::default()
            });
            continue;
        }
        let Some(g) = groups.last_mut() else { continue };
        if let Some(rest) = t.strip_prefix("Block bitmap at ") {
            g.block_bitmap = first_number(rest).expect("block bitmap");
        } else if let Some(rest) = t.strip_prefix("Inode bitmap at ") {
            g.inode_bitmap = first_number(rest).expect("inode bitmap");
        } else if let Some(rest) = t.strip_prefix("Inode table at ") {
            let range = rest.split_whitespace().next().unwrap_or("");
            let (a, b) = range.split_once('-').unwrap_or((range, range));
            g.inode_table = (a.parse().expect("itable"), b.parse().expect("itable end"));
        } else if t.contains(" free blocks, ") {
            for part in t.split(',') {
                let n = first_number(part).unwrap_or(0);
                if part.contains("free blocks") {
                    g.free_blocks = n;
                } else if part.contains("free inodes") {
                    g.free_inodes = n;
                } else if part.contains("directories") {
                    g.directories = n;
                }
            }
        }
    }
    groups
}

/// Full `dumpe2fs` of an image, groups parsed.
pub fn dumpe2fs_groups(image: &Path) -> Vec<DumpGroup> {
    let o = run("dumpe2fs", [image.as_os_str()]).expect_ok();
    parse_groups(&o.stdout)
}

/// Runs one debugfs request (`-R`) read-only.
pub fn debugfs(image: &Path, request: &str) -> Out {
    run(
        "debugfs",
        [OsStr::new("-R"), OsStr::new(request), image.as_os_str()],
    )
}

/// Key/value pairs from `debugfs -R "stat ..."`: the lines hold several
/// `Key: value` pairs separated by runs of spaces.
pub fn parse_stat(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let t = line.trim();
        // Time lines: "ctime: 0x6b1032d4:00000000 -- Wed Dec  2 ...".
        for time in ["ctime", "atime", "mtime", "crtime", "dtime"] {
            if let Some(rest) = t.strip_prefix(&format!("{time}: ")) {
                let v = rest.split(" -- ").next().unwrap_or("").trim();
                out.insert(time.to_string(), v.to_string());
            }
        }
        if let Some(rest) = t.strip_prefix("Fast link dest: ") {
            out.insert("Fast link dest".into(), rest.trim_matches('"').to_string());
            continue;
        }
        if let Some(rest) = t.strip_prefix("Size of extra inode fields: ") {
            out.insert("Size of extra inode fields".into(), rest.to_string());
            continue;
        }
        // Split into tokens; a token ending in ':' starts a key whose value
        // is the next token.
        let tokens: Vec<&str> = t.split_whitespace().collect();
        let mut i = 0;
        while i < tokens.len() {
            let tok = tokens[i];
            if let Some(key) = tok.strip_suffix(':') {
                if let Some(v) = tokens.get(i + 1) {
                    if !v.ends_with(':') {
                        out.entry(key.to_string()).or_insert_with(|| v.to_string());
                        i += 2;
                        continue;
                    }
                }
            }
            i += 1;
        }
    }
    out
}

/// A debugfs time "0x5e0c89c0" or "0x6b1032d4:00000000" as (seconds,
/// nanoseconds), decoded as the kernel does (extra epoch bits included).
pub fn parse_debugfs_time(v: &str) -> (i64, u32) {
    let v = v.trim_start_matches("0x");
    let (lo, extra) = match v.split_once(':') {
        Some((a, b)) => (a, Some(b)),
        None => (v, None),
    };
    let lo = u32::from_str_radix(lo, 16).unwrap_or_else(|_| panic!("time '{v}'"));
    let sec = lo as i32 as i64;
    match extra {
        None => (sec, 0),
        Some(x) => {
            let x = u32::from_str_radix(x, 16).unwrap_or_else(|_| panic!("time '{v}'"));
            (sec + (((x & 3) as i64) << 32), x >> 2)
        }
    }
}

/// The numbers printed by `debugfs -R "blocks <N>"`.
pub fn debugfs_blocks(image: &Path, ino: u32) -> Vec<u32> {
    let o = debugfs(image, &format!("blocks <{ino}>")).expect_ok();
    o.stdout
        .split_whitespace()
        .map(|t| t.parse().unwrap_or_else(|_| panic!("block '{t}'")))
        .collect()
}
