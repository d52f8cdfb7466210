// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! Checks the journal parsers against journals made by mke2fs and, when we
//! may loop-mount (root), written by the kernel. Skips with a message when
//! the tools or privileges are missing.

use jbdfs::format::jbd::{self, CommitBlock, JournalHeader, JournalSuperblock};
use std::path::{Path, PathBuf};
use std::process::Command;

fn tool(name: &str) -> Option<PathBuf> {
    ["/sbin", "/usr/sbin", "/bin", "/usr/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
}

fn run(prog: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(prog).args(args).output().expect("run tool");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("jbdfs-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The value after `key:` in dumpe2fs -h output.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

fn parse_num(s: &str) -> u32 {
    match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16).unwrap(),
        None => s.parse().unwrap(),
    }
}

fn journal_superblock(img: &Path, debugfs: &Path) -> JournalSuperblock {
    let (_, out) = run(debugfs, &["-R", "bmap <8> 0", img.to_str().unwrap()]);
    let block: u64 = out.trim().parse().expect("bmap output");
    let raw = std::fs::read(img).unwrap();
    let off = (block * 4096) as usize;
    JournalSuperblock::parse(&raw[off..off + 1024]).expect("journal superblock")
}

#[test]
fn mke2fs_journal_superblock() {
    let (Some(mke2fs), Some(debugfs), Some(dumpe2fs)) =
        (tool("mke2fs"), tool("debugfs"), tool("dumpe2fs"))
    else {
        println!("skipping: e2fsprogs not found");
        return;
    };
    let dir = scratch("jbd-sb");
    let img = dir.join("j.img");
    let img_s = img.to_str().unwrap();
    run(
        &mke2fs,
        &["-q", "-F", "-t", "ext3", "-b", "4096", img_s, "64M"],
    );
    let sb = journal_superblock(&img, &debugfs);
    let (_, dump) = run(&dumpe2fs, &["-h", img_s]);
    assert!(sb.is_v2());
    assert_eq!(sb.s_blocksize, 4096);
    let total = field(&dump, "Total journal blocks").or(field(&dump, "Journal length"));
    assert_eq!(sb.s_maxlen, parse_num(total.expect("journal length")));
    assert_eq!((sb.s_first, sb.s_start, sb.s_nr_users), (1, 0, 1));
    let seq = field(&dump, "Journal sequence").expect("journal sequence");
    assert_eq!(sb.s_sequence, parse_num(seq));
    assert!(sb.check_features().is_ok());
    let raw = sb.to_bytes();
    assert_eq!(JournalSuperblock::parse(&raw).unwrap(), sb);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Mounts the image, makes a few transactions, and unmounts. False if
/// mounting is not possible here.
fn kernel_transactions(img: &Path, mnt: &Path) -> bool {
    std::fs::create_dir_all(mnt).unwrap();
    let mount = Command::new("mount")
        .args(["-t", "ext3", "-o", "loop"])
        .arg(img)
        .arg(mnt)
        .output();
    if !mount.is_ok_and(|o| o.status.success()) {
        return false;
    }
    for i in 0..4 {
        std::fs::write(mnt.join(format!("f{i}")), vec![i as u8; 40_000]).unwrap();
        let _ = Command::new("sync").status();
    }
    std::fs::remove_file(mnt.join("f1")).unwrap();
    let _ = Command::new("sync").status();
    Command::new("umount").arg(mnt).status().unwrap().success()
}

#[test]
fn kernel_written_log_parses() {
    let (Some(mke2fs), Some(debugfs)) = (tool("mke2fs"), tool("debugfs")) else {
        println!("skipping: e2fsprogs not found");
        return;
    };
    let dir = scratch("jbd-log");
    let img = dir.join("j.img");
    let img_s = img.to_str().unwrap();
    run(
        &mke2fs,
        &["-q", "-F", "-t", "ext3", "-b", "4096", img_s, "64M"],
    );
    if !kernel_transactions(&img, &dir.join("mnt")) {
        println!("skipping: cannot loop-mount ext3 here (needs root)");
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let sb = journal_superblock(&img, &debugfs);
    let jfile = dir.join("journal");
    run(
        &debugfs,
        &["-R", &format!("dump <8> {}", jfile.display()), img_s],
    );
    let journal = std::fs::read(&jfile).unwrap();
    let last = walk_log(&journal, &sb);
    assert!(
        last >= 2,
        "expected some committed transactions, last {last}"
    );
    // Unmounting can close an empty transaction, so the next sequence may
    // be more than one past the last one logged.
    assert!(
        sb.s_sequence > last,
        "s_sequence {} after {last}",
        sb.s_sequence
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Walks descriptor/data/commit runs from s_first; returns the last
/// committed sequence.
fn walk_log(journal: &[u8], sb: &JournalSuperblock) -> u32 {
    let bs = sb.s_blocksize as usize;
    let block = |i: usize| &journal[i * bs..(i + 1) * bs];
    let (mut i, mut last, mut expect) = (sb.s_first as usize, 0, None);
    while let Ok(h) = JournalHeader::parse(block(i)) {
        if expect.is_some_and(|s| s != h.h_sequence) {
            break;
        }
        match h.h_blocktype {
            jbd::JBD2_DESCRIPTOR_BLOCK => {
                let (_, tags) = jbd::parse_descriptor(block(i)).unwrap();
                assert!(tags[0].uuid.is_some());
                assert!(tags.last().unwrap().t_flags & jbd::JBD2_FLAG_LAST_TAG != 0);
                i += tags.len();
            }
            jbd::JBD2_REVOKE_BLOCK => {
                jbd::parse_revoke(block(i)).unwrap();
            }
            jbd::JBD2_COMMIT_BLOCK => {
                let c = CommitBlock::parse(block(i)).unwrap();
                assert!(c.h_commit_sec > 1_600_000_000 && c.h_commit_nsec < 1_000_000_000);
                last = c.h_sequence;
                expect = Some(last + 1);
            }
            t => panic!("unexpected block type {t}"),
        }
        i += 1;
    }
    last
}
