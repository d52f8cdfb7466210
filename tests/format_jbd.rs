// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! Checks the journal parsers against journals made by mke2fs and, when we
//! may loop-mount (root), written by the kernel. Skips with a message when
//! the tools or privileges are missing.

use jbdfs::format::jbd::{self, CommitBlock, JournalHeader, JournalSuperblock};
use std::path::Path;
use std::process::Command;

use jbdfs_testkit::{run, tool, LoopMount, TempDir, LOOP_LOCK};

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
    let out = run(debugfs, ["-R", "bmap <8> 0", img.to_str().unwrap()]).stdout;
    let block: u64 = out.trim().parse().expect("bmap output");
    let raw = std::fs::read(img).unwrap();
    let off = (block * 4096) as usize;
    JournalSuperblock::parse(&raw[off..off + 1024]).expect("journal superblock")
}

#[test]
fn mke2fs_journal_superblock() {
    jbdfs_testkit::require!(e2fsprogs);
    let (mke2fs, debugfs, dumpe2fs) = (
        tool("mke2fs").unwrap(),
        tool("debugfs").unwrap(),
        tool("dumpe2fs").unwrap(),
    );
    let scratch = TempDir::new("jbd-sb");
    let dir = scratch.path.clone();
    let img = dir.join("j.img");
    let img_s = img.to_str().unwrap();
    run(
        &mke2fs,
        ["-q", "-F", "-t", "ext3", "-b", "4096", img_s, "64M"],
    );
    let sb = journal_superblock(&img, &debugfs);
    let dump = run(&dumpe2fs, ["-h", img_s]).stdout;
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
}

/// Mounts the image (Linux's ext3 on a loop device), makes a few
/// transactions, and unmounts.
fn kernel_transactions(img: &Path) {
    let _serial = LOOP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut m = LoopMount::mount(img).unwrap_or_else(|o| panic!("{}", o.describe()));
    let mnt = m.path().to_path_buf();
    for i in 0..4 {
        std::fs::write(mnt.join(format!("f{i}")), vec![i as u8; 40_000]).unwrap();
        let _ = Command::new("sync").status();
    }
    std::fs::remove_file(mnt.join("f1")).unwrap();
    let _ = Command::new("sync").status();
    m.umount().expect_ok();
}

#[test]
fn kernel_written_log_parses() {
    jbdfs_testkit::require!(e2fsprogs, loop);
    let (mke2fs, debugfs) = (tool("mke2fs").unwrap(), tool("debugfs").unwrap());
    let scratch = TempDir::new("jbd-log");
    let dir = scratch.path.clone();
    let img = dir.join("j.img");
    let img_s = img.to_str().unwrap();
    run(
        &mke2fs,
        ["-q", "-F", "-t", "ext3", "-b", "4096", img_s, "64M"],
    );
    kernel_transactions(&img);
    let sb = journal_superblock(&img, &debugfs);
    let jfile = dir.join("journal");
    run(
        &debugfs,
        ["-R", &format!("dump <8> {}", jfile.display()), img_s],
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
