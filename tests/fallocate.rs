// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! fallocate beyond plain allocation, in-process: hole punching
//! (PUNCH_HOLE | KEEP_SIZE) in direct, single-, double- and triple-indirect
//! ranges and across their edges, partial blocks, pointer blocks freed when
//! they empty, i_blocks and the free count, every data mode; and the ENOSPC
//! retry after a commit (fstests generic/213). Images end `e2fsck -fn`
//! clean, and Linux reads the punched files back from a loop mount.

use jbdfs_testkit as common;
use jbdfs_testkit as robust_common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use jbdfs::device::BlockDevice;
use jbdfs::format::InodeNo;
use jbdfs::fs::{DataMode, Filesystem, FsError, MountConfig};
use jbdfs::journal::JournalConfig;
use jbdfs::mkfs::MkfsOptions;
use robust_common::*;

/// Logical block where each level of the block map starts, for `bs`.
fn level_starts(bs: u64) -> [u64; 3] {
    let p = bs / 4;
    [12, 12 + p, 12 + p + p * p]
}

/// The data modes in the order the tests have always taken them (each
/// mode's name seeds its random steps).
const MODES: [DataMode; 3] = [DataMode::Ordered, DataMode::Journal, DataMode::Writeback];

/// A file and the bytes it should hold, block by block (absent blocks
/// read as zeros), so files reaching the triple-indirect blocks at 4 KiB
/// (past 4 GiB) cost only what they hold.
struct Model {
    ino: InodeNo,
    bs: u64,
    size: u64,
    blocks: BTreeMap<u64, Vec<u8>>,
}

impl Model {
    fn new(ino: InodeNo, bs: u64) -> Self {
        Model {
            ino,
            bs,
            size: 0,
            blocks: BTreeMap::new(),
        }
    }

    /// Applies `f(block bytes, from, to, offset in the range)` to each
    /// block `at..end` touches.
    fn each_block(&mut self, at: u64, end: u64, mut f: impl FnMut(&mut [u8], usize, usize, usize)) {
        let bs = self.bs;
        for b in at / bs..end.div_ceil(bs) {
            let from = at.max(b * bs) - b * bs;
            let to = end.min((b + 1) * bs) - b * bs;
            let block = self.blocks.entry(b).or_insert_with(|| vec![0; bs as usize]);
            let off = (b * bs + from - at) as usize;
            f(block, from as usize, to as usize, off);
        }
    }

    fn write(&mut self, fs: &Filesystem, at: u64, data: &[u8]) {
        assert_eq!(fs.write(self.ino, at, data, true).unwrap(), data.len());
        let end = at + data.len() as u64;
        self.each_block(at, end, |block, from, to, off| {
            block[from..to].copy_from_slice(&data[off..off + to - from])
        });
        self.size = self.size.max(end);
    }

    fn punch(&mut self, fs: &Filesystem, at: u64, len: u64) {
        fs.punch_hole(self.ino, at, len).unwrap();
        let end = (at + len).min(self.size);
        if at < end {
            self.each_block(at, end, |block, from, to, _| block[from..to].fill(0));
        }
    }

    /// The file's bytes `at..at + len` against the model's.
    fn check_range(&self, fs: &Filesystem, at: u64, len: u64, what: &str) {
        let end = (at + len).min(self.size);
        if at >= end {
            return;
        }
        let got = fs.read(self.ino, at, (end - at) as u32).unwrap();
        assert_eq!(got.len() as u64, end - at, "{what}: short read at {at}");
        for (i, &byte) in got.iter().enumerate() {
            let pos = at + i as u64;
            let want = self
                .blocks
                .get(&(pos / self.bs))
                .map_or(0, |b| b[(pos % self.bs) as usize]);
            assert_eq!(byte, want, "{what}: byte {pos}");
        }
    }

    /// The size, every block the model holds, and the whole of a small
    /// file.
    fn check(&self, fs: &Filesystem, what: &str) {
        assert_eq!(
            fs.getattr(self.ino).unwrap().i_size,
            self.size,
            "{what}: size"
        );
        if self.size <= 8 << 20 {
            return self.check_range(fs, 0, self.size, what);
        }
        for &b in self.blocks.keys() {
            self.check_range(fs, b * self.bs, self.bs, what);
        }
    }
}

fn sectors(fs: &Filesystem, ino: InodeNo) -> u64 {
    fs.getattr(ino).unwrap().i_blocks
}

fn free(fs: &Filesystem) -> u64 {
    fs.statfs().unwrap().free_blocks
}

/// A file written densely over blocks `0..n`.
fn dense_file(fs: &Filesystem, name: &str, bs: u64, n: u64) -> Model {
    let (ino, _) = fs.mknod(ROOT, name.as_bytes(), 0o100644, 0, ME).unwrap();
    let mut m = Model::new(ino, bs);
    m.write(fs, 0, &pattern((n * bs) as usize, 7));
    m
}

/// Punching across the direct/single/double edges, with partial blocks at
/// both ends: exactly the whole blocks inside are freed, plus the single
/// indirect block (all of whose pointers went); the double-indirect tree
/// keeps the pointer block still naming blocks past the hole.
#[test]
fn punch_across_direct_single_and_double_indirect() {
    for bs in [1024u64, 4096] {
        let mem = mem_image_bs(64 << 20, bs as u32);
        let fs = mount_mem_data(&mem, DataMode::Ordered);
        let [single, double, _] = level_starts(bs);
        let n = double + 40;
        let mut m = dense_file(&fs, "f", bs, n);
        let (s0, f0) = (sectors(&fs, m.ino), free(&fs));
        // From the middle of block 5 to the middle of block double + 20.
        let (at, end) = (5 * bs + 100, (double + 20) * bs + 7);
        m.punch(&fs, at, end - at);
        m.check(&fs, &format!("{bs}: after the punch"));
        let whole = (double + 20) - 6;
        let freed = whole + 1; // and the single indirect block
        assert_eq!(free(&fs), f0 + freed, "{bs}: free count");
        assert_eq!(s0 - sectors(&fs, m.ino), freed * bs / 512, "{bs}: i_blocks");
        for b in [
            5,
            6,
            single - 1,
            single,
            double - 1,
            double,
            double + 19,
            double + 20,
        ] {
            let mapped = fs.bmap(m.ino, b as u32).unwrap().is_some();
            let inside = (6..double + 20).contains(&b);
            assert_eq!(mapped, !inside, "{bs}: block {b} mapped");
        }
        fs.unmount().unwrap();
        assert_mem_clean(&mem, &format!("{bs}: punched across three levels"));
        let fs = mount_mem_data(&mem, DataMode::Ordered);
        m.check(&fs, &format!("{bs}: after a remount"));
        fs.unmount().unwrap();
    }
}

/// More groups than one transaction can log a bitmap and descriptor for
/// (1 KiB blocks, 1.1 GiB, a 1 MiB journal: 256 credits, 138 groups): a
/// long punch is freed in chunks, one handle each, and a sparse range's
/// holes are stepped over. The result is the same as in one handle.
#[test]
fn a_punch_over_more_groups_than_a_transaction_holds_is_chunked() {
    let bs = 1024u64;
    let img = common::TempImage::new("punch-chunks");
    let req = jbdfs::mkfs::Request {
        options: MkfsOptions {
            block_size: Some(bs as u32),
            journal_mib: Some(1),
            ..Default::default()
        },
        size: Some(1100 << 20),
        quiet: true,
        ..Default::default()
    };
    jbdfs::mkfs::make_filesystem(&img.path, &req).unwrap();
    let open = || {
        let dev = jbdfs::device::FileDevice::open(&img.path, Default::default()).unwrap();
        Filesystem::mount(Arc::new(dev), &MountConfig::default()).unwrap()
    };
    let fs = open();
    assert_eq!(fs.journal().max_transaction_credits(), 256);
    let [_, double, _] = level_starts(bs);
    let mut m = dense_file(&fs, "f", bs, 2000);
    m.write(&fs, (double + 20000) * bs, &pattern(300 * bs as usize, 5));
    let f_empty = free(&fs) + sectors(&fs, m.ino) / 2;
    m.punch(&fs, 700 * bs + 3, 1000 * bs);
    m.check(&fs, "a chunked punch");
    m.punch(&fs, 1500 * bs, m.size);
    m.check(&fs, "a chunked punch over a sparse range");
    m.punch(&fs, 0, m.size);
    assert_eq!(sectors(&fs, m.ino), 0, "no block left");
    assert_eq!(free(&fs), f_empty, "every block back");
    fs.unmount().unwrap();
    drop(fs);
    common::assert_e2fsck_clean(&img.path, "after chunked punches");
    let fs = open();
    m.check(&fs, "after a remount");
    fs.unmount().unwrap();
}

/// A triple-indirect range punched whole frees its data and every pointer
/// block under i_block[14] (four of them: triple, double, two singles);
/// punching what is left of the file gives back every block it had.
#[test]
fn punch_frees_the_triple_indirect_tree() {
    let bs = 1024u64;
    let mem = mem_image_bs(96 << 20, bs as u32);
    let fs = mount_mem_data(&mem, DataMode::Ordered);
    let [_, _, triple] = level_starts(bs);
    let (ino, _) = fs.mknod(ROOT, b"sparse", 0o100644, 0, ME).unwrap();
    let mut m = Model::new(ino, bs);
    let f_empty = free(&fs);
    m.write(&fs, 0, &pattern(3000, 1));
    let (s0, f0) = (sectors(&fs, ino), free(&fs));
    // 300 blocks: over the first single-indirect block of the triple tree.
    m.write(&fs, triple * bs, &pattern(300 * bs as usize, 2));
    let used = f0 - free(&fs);
    assert_eq!(used, 300 + 4, "data and four pointer blocks");
    m.punch(&fs, triple * bs - 10, 300 * bs + 20);
    m.check(&fs, "after punching the triple-indirect range");
    assert_eq!(free(&fs), f0, "the whole tree is free again");
    assert_eq!(sectors(&fs, ino), s0, "i_blocks as before the tree");
    m.punch(&fs, 0, m.size);
    m.check(&fs, "after punching everything");
    assert_eq!(sectors(&fs, ino), 0, "no block left");
    assert_eq!(free(&fs), f_empty, "every block back");
    fs.unmount().unwrap();
    assert_mem_clean(&mem, "a triple-indirect tree punched away");
}

/// The edges: a punch inside one block zeroes it and frees nothing; a
/// punch over a hole allocates nothing; a punch past the end changes
/// nothing (not even the times); one running past the end keeps the size;
/// PUNCH on an append-only or immutable file is EPERM; and a punched range
/// written again reads back.
#[test]
fn punch_edges_and_refusals() {
    let bs = 4096u64;
    let mem = mem_image_bs(32 << 20, bs as u32);
    let fs = mount_mem_data(&mem, DataMode::Ordered);
    let mut m = dense_file(&fs, "f", bs, 20);
    let f0 = free(&fs);
    m.punch(&fs, 3 * bs + 10, 100);
    m.check(&fs, "inside one block");
    assert_eq!(free(&fs), f0, "nothing freed inside one block");
    m.punch(&fs, 4 * bs, bs);
    assert_eq!(free(&fs), f0 + 1, "one aligned block");
    m.punch(&fs, 4 * bs + 1, 10);
    assert!(fs.bmap(m.ino, 4).unwrap().is_none(), "a hole stays a hole");
    assert_eq!(free(&fs), f0 + 1, "punching a hole allocates nothing");
    let before = fs.getattr(m.ino).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    m.punch(&fs, 20 * bs, 5 * bs);
    let after = fs.getattr(m.ino).unwrap();
    assert_eq!(
        (after.i_mtime, after.i_ctime, after.i_blocks),
        (before.i_mtime, before.i_ctime, before.i_blocks),
        "past the end: nothing at all"
    );
    m.punch(&fs, 18 * bs + 5, 10 * bs);
    m.check(&fs, "running past the end");
    assert_eq!(fs.getattr(m.ino).unwrap().i_size, 20 * bs, "size kept");
    m.write(&fs, 4 * bs - 3, &pattern(bs as usize + 6, 9));
    m.check(&fs, "written again");
    let flags = fs.get_flags(m.ino).unwrap();
    for (flag, name) in [(0x20u32, "append-only"), (0x10, "immutable")] {
        fs.set_flags(m.ino, flags | flag, &root_caller()).unwrap();
        let e = errno_of(fs.punch_hole(m.ino, 0, bs));
        assert_eq!(e, libc::EPERM, "{name}");
        fs.set_flags(m.ino, flags, &root_caller()).unwrap();
    }
    assert!(matches!(
        fs.punch_hole(m.ino, 0, 0),
        Err(FsError::Invalid(_))
    ));
    m.check(&fs, "after the refusals");
    fs.unmount().unwrap();
    assert_mem_clean(&mem, "punch edges");
}

fn root_caller() -> jbdfs::fs::flags::FlagsCaller {
    jbdfs::fs::flags::FlagsCaller {
        uid: 0,
        cap_effective: u64::MAX,
    }
}

/// Random writes and punches over all three indirection levels, in every
/// data mode and both block sizes, checked against a model after each
/// step, after a remount and by e2fsck.
#[test]
fn random_punches_and_writes_match_a_model_in_every_mode() {
    for bs in [1024u64, 4096] {
        for mode in MODES {
            let mem = mem_image_bs(96 << 20, bs as u32);
            let fs = mount_mem_data(&mem, mode);
            let [_, double, triple] = level_starts(bs);
            let (ino, _) = fs.mknod(ROOT, b"r", 0o100644, 0, ME).unwrap();
            let mut m = Model::new(ino, bs);
            let mut rng = Rng::new(bs ^ mode.name().len() as u64);
            // Regions near each level's start, where the edges are.
            let centres = [0, double, triple];
            let what = |i| format!("{bs} {mode}: step {i}");
            for i in 0..120 {
                let centre = centres[rng.below(3) as usize] * bs;
                let at = (centre + rng.below(300 * bs)).saturating_sub(150 * bs);
                let len = 1 + rng.below(80 * bs);
                if rng.below(3) == 0 {
                    m.punch(&fs, at, len);
                } else {
                    m.write(&fs, at, &pattern(len as usize, i));
                }
                if i % 20 == 0 {
                    m.check(&fs, &what(i));
                }
            }
            m.check(&fs, &what(120));
            fs.unmount().unwrap();
            assert_mem_clean(&mem, &format!("{bs} {mode}: random punches"));
            let fs = mount_mem_data(&mem, mode);
            m.check(&fs, &format!("{bs} {mode}: after a remount"));
            fs.unmount().unwrap();
        }
    }
}

/// Linux reads what jbdfs punched: a loop mount of the image shows the
/// model's bytes, and e2fsck stays clean. Skipped (loudly) without root or
/// loop devices, except under CI, where that is a failure.
#[test]
fn linux_reads_punched_files() {
    jbdfs_testkit::require!(loop);
    for bs in [1024u64, 4096] {
        let mem = mem_image_bs(64 << 20, bs as u32);
        let fs = mount_mem_data(&mem, DataMode::Ordered);
        let [single, double, _] = level_starts(bs);
        let mut m = dense_file(&fs, "f", bs, double + 30);
        m.punch(&fs, 3 * bs + 17, (single + 5) * bs);
        m.punch(&fs, (double - 2) * bs - 1, 10 * bs);
        fs.unmount().unwrap();
        let img = to_file(&mem.snapshot(), "punch-linux");
        common::assert_e2fsck_clean(&img.path, "before Linux mounts it");
        let _guard = common::LOOP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let mut lm =
            common::LoopMount::mount(&img.path).unwrap_or_else(|o| panic!("{}", o.describe()));
        let got = std::fs::read(lm.path().join("f")).unwrap();
        lm.umount().expect_ok();
        let want = fs_free_model_bytes(&m);
        assert!(got == want, "{bs}: Linux reads other bytes");
        common::assert_e2fsck_clean(&img.path, "after Linux read it");
    }
}

/// A small model's whole content.
fn fs_free_model_bytes(m: &Model) -> Vec<u8> {
    let mut out = vec![0u8; m.size as usize];
    for (&b, bytes) in &m.blocks {
        let at = (b * m.bs) as usize;
        let n = bytes.len().min(out.len().saturating_sub(at));
        out[at..at + n].copy_from_slice(&bytes[..n]);
    }
    out
}

/// fstests generic/213's situation: most of the disk freed by an unlink
/// whose transaction has not committed, then at once a fallocate (or a
/// write) of most of the space, as an unprivileged caller. The freed
/// blocks cannot be reused before the commit; jbdfs commits and retries,
/// as ext3_should_retry_alloc does, instead of failing with ENOSPC.
fn fill_unlink_then(how: &str, refill: impl Fn(&Filesystem, InodeNo, u64)) {
    let bs = 1024u64;
    let mem = mem_image_bs(32 << 20, bs as u32);
    let dev: Arc<dyn BlockDevice> = mem.clone();
    // No periodic commit may come to the rescue during the test.
    let cfg = MountConfig {
        journal: JournalConfig {
            commit_interval: Duration::from_secs(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let fs = Filesystem::mount(dev, &cfg).unwrap();
    for round in 0..3 {
        let room = free(&fs) * 9 / 10;
        let big = make_file(&fs, ROOT, "big", &pattern((room * bs) as usize, 3));
        fs.fsync(big, false).unwrap();
        fs.unlink(ROOT, b"big").unwrap();
        let (f, _) = fs.mknod(ROOT, b"again", 0o100644, 0, ME).unwrap();
        refill(&fs, f, room * bs);
        assert_eq!(fs.getattr(f).unwrap().i_size, room * bs, "{how} {round}");
        fs.unlink(ROOT, b"again").unwrap();
    }
    fs.unmount().unwrap();
    assert_mem_clean(&mem, &format!("after {how} into just-freed space"));
}

#[test]
fn fallocate_right_after_an_unlink_commits_and_retries() {
    fill_unlink_then("fallocate", |fs, f, len| {
        fs.fallocate(f, 0, len, false, false).unwrap()
    });
}

#[test]
fn write_right_after_an_unlink_commits_and_retries() {
    fill_unlink_then("write", |fs, f, len| {
        let n = fs.write(f, 0, &pattern(len as usize, 4), false).unwrap();
        assert_eq!(n as u64, len, "a short write");
    });
}
