// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! Journal recovery against its oracles: journals Linux left behind in a
//! mounted ext3 image, replayed by e2fsck and by us, must give the same
//! filesystem; synthetic journals check each rule of fs/jbd2/recovery.c
//! (commit, revoke, escape, wrap-around, idempotence); and no input may
//! make recovery panic.

use jbdfs_testkit as common;

use std::ffi::OsStr;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};

use common::*;
use jbdfs::device::{BlockDevice, FileDevice, MemoryDevice, OpenOptions};
use jbdfs::format::jbd::{self, CommitBlock, JournalSuperblock, LoggedBlock};
use jbdfs::format::superblock::{feature, Superblock};
use jbdfs::journal::jmap::JournalMap;
use jbdfs::journal::recovery::{recover, RecoverOptions, RecoveryError, RecoveryReport};
use jbdfs::journal::{JournalBlock, Tid};
use jbdfs::mkfs::{format, plan, MkfsOptions, Zeroed};
use jbdfs::util::Progress;

const WRITE: RecoverOptions = RecoverOptions { write: true };
const DRY: RecoverOptions = RecoverOptions { write: false };

// ---------------------------------------------------------------------------
// Journals written by Linux
// ---------------------------------------------------------------------------

fn sync() {
    run("sync", Vec::<&str>::new()).expect_ok();
}

/// Files, directories, deletions and renames over several commits, with
/// blocks that begin with the JBD magic (escaped when data is journaled)
/// and freed indirect blocks (revoked).
fn linux_workload(root: &Path, block_size: usize) {
    let mut rng = Rng::new(0x5eed_0001 + block_size as u64);
    let d = root.join("dir/sub");
    std::fs::create_dir_all(&d).unwrap();
    for i in 0..30usize {
        let len = (i * 977 + 1) % (40 * block_size);
        std::fs::write(d.join(format!("f{i}")), rng.bytes(len)).unwrap();
    }
    let mut magic = Vec::new();
    for i in 0..8u8 {
        let mut block = vec![i; block_size];
        block[..4].copy_from_slice(&jbd::JBD2_MAGIC_NUMBER.to_be_bytes());
        magic.extend_from_slice(&block);
    }
    std::fs::write(root.join("magic"), &magic).unwrap();
    // Large enough to need an indirect block, freed in a later commit.
    std::fs::write(root.join("big"), rng.bytes(300 * block_size)).unwrap();
    sync();
    std::fs::remove_file(root.join("big")).unwrap();
    for i in (0..30).step_by(4) {
        std::fs::remove_file(d.join(format!("f{i}"))).unwrap();
    }
    std::fs::rename(d.join("f1"), root.join("dir/moved")).unwrap();
    std::fs::create_dir(root.join("later")).unwrap();
    std::fs::write(root.join("later/reused"), rng.bytes(50 * block_size)).unwrap();
    sync();
    std::fs::write(root.join("later/small"), b"last commit").unwrap();
    std::fs::write(root.join("later/magic"), &magic).unwrap();
    sync();
}

fn cp_sparse(from: &Path, to: &Path) {
    run(
        "cp",
        [
            OsStr::new("--sparse=always"),
            from.as_os_str(),
            to.as_os_str(),
        ],
    )
    .expect_ok();
}

/// Builds an image, runs the workload, and copies the image twice while
/// still mounted (so the journal needs recovery).
fn image_left_by_linux(block_size: u32, options: &str, copies: [&TempImage; 2]) {
    let img = TempImage::new("jrec-linux");
    let bs = block_size.to_string();
    run(
        "mke2fs",
        ["-q", "-F", "-t", "ext3", "-b", &bs, img.path_str(), "64M"],
    )
    .expect_ok();
    let mut m = LoopMount::mount_with(&img.path, options)
        .unwrap_or_else(|o| panic!("mount failed:\n{}", o.describe()));
    linux_workload(m.path(), block_size as usize);
    // Copy the copy: the mounted filesystem may still write between two
    // reads of the original.
    cp_sparse(&img.path, &copies[0].path);
    cp_sparse(&copies[0].path, &copies[1].path);
    m.umount().expect_ok();
}

/// Mounts both images read-only and diffs their trees; also diffs
/// `debugfs rdump` of both.
fn compare_trees(a: &Path, b: &Path) {
    let ma = LoopMount::mount_with(a, "loop,ro")
        .unwrap_or_else(|o| panic!("mount failed:\n{}", o.describe()));
    let mb = LoopMount::mount_with(b, "loop,ro")
        .unwrap_or_else(|o| panic!("mount failed:\n{}", o.describe()));
    let o = run(
        "diff",
        [
            OsStr::new("-r"),
            ma.path().as_os_str(),
            mb.path().as_os_str(),
        ],
    );
    assert!(o.success(), "trees differ:\n{}", o.describe());
    drop((ma, mb));
    let da = TempDir::new("jrec-rdump-a");
    let db = TempDir::new("jrec-rdump-b");
    for (img, dir) in [(a, &da), (b, &db)] {
        let req = format!("rdump / {}", dir.path.display());
        let o = debugfs(img, &req);
        assert!(o.success(), "{}", o.describe());
    }
    let o = run(
        "diff",
        [OsStr::new("-r"), da.path.as_os_str(), db.path.as_os_str()],
    );
    assert!(o.success(), "rdump trees differ:\n{}", o.describe());
}

/// Blocks holding a superblock or group descriptor copy, which e2fsck
/// rewrites when it fixes summary counts.
fn summary_blocks(sb: &Superblock) -> Vec<u32> {
    let mut out = Vec::new();
    for g in 0..sb.group_count() {
        let gn = jbdfs::format::GroupNo(g);
        if g == 0 || sb.group_has_super(gn) {
            let first = sb.group_first_block(gn).0;
            out.extend(first..=first + sb.gdt_blocks());
        }
    }
    out
}

fn read_sb(path: &Path) -> Superblock {
    Superblock::parse(&read_bytes(path, 1024, 1024)).unwrap()
}

/// Names of the primary superblock fields that differ, by byte offset.
fn superblock_fields_differing(a: &Path, b: &Path) -> Vec<&'static str> {
    const FIELDS: &[(usize, usize, &str)] = &[
        (0x0C, 4, "s_free_blocks_count"),
        (0x10, 4, "s_free_inodes_count"),
        (0x30, 4, "s_wtime"),
        (0x34, 2, "s_mnt_count"),
        (0x3A, 2, "s_state"),
        (0x40, 4, "s_lastcheck"),
        (0x60, 4, "s_feature_incompat"),
        (0x178, 8, "s_kbytes_written"),
    ];
    let x = read_bytes(a, 1024, 1024);
    let y = read_bytes(b, 1024, 1024);
    let mut out = Vec::new();
    for (i, (p, q)) in x.iter().zip(&y).enumerate() {
        if p != q {
            let name = FIELDS
                .iter()
                .find(|(off, len, _)| (*off..off + len).contains(&i))
                .map_or("(unnamed)", |f| f.2);
            if !out.contains(&name) {
                out.push(name);
            }
        }
    }
    out
}

/// Block numbers whose contents differ between two images.
fn differing_blocks(a: &Path, b: &Path, block_size: usize) -> Vec<u32> {
    let x = std::fs::read(a).unwrap();
    let y = std::fs::read(b).unwrap();
    assert_eq!(x.len(), y.len());
    x.chunks(block_size)
        .zip(y.chunks(block_size))
        .enumerate()
        .filter(|(_, (p, q))| p != q)
        .map(|(i, _)| i as u32)
        .collect()
}

fn linux_case(block_size: u32, options: &str) {
    jbdfs_testkit::require!(loop);
    let _guard = LOOP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let c1 = TempImage::new("jrec-e2fsck");
    let c2 = TempImage::new("jrec-ours");
    image_left_by_linux(block_size, options, [&c1, &c2]);

    let h = dumpe2fs_header(&c2.path);
    assert!(h.features().contains("needs_recovery"), "{h:?}");
    assert_ne!(h.num("Journal start"), 0, "Linux left a clean journal");

    let dry = {
        let dev = FileDevice::open(&c2.path, OpenOptions::default()).unwrap();
        recover(&dev, DRY).unwrap()
    };
    let before = std::fs::read(&c2.path).unwrap();
    let fsck = run("e2fsck", [OsStr::new("-fy"), c1.path.as_os_str()]);
    assert!(matches!(fsck.code, Some(0 | 1)), "{}", fsck.describe());
    let report = {
        let dev = FileDevice::open(&c2.path, OpenOptions::default()).unwrap();
        recover(&dev, WRITE).unwrap()
    };
    assert_ne!(before, std::fs::read(&c2.path).unwrap());
    assert_eq!(dry, report, "a dry run predicts the replay");
    eprintln!(
        "{block_size}-byte blocks, -o {options}: {report:?}\ne2fsck -fy on the copy said:\n{}",
        fsck.stdout
    );
    assert!(report.needed && report.transactions >= 1);
    assert_eq!(report.bad_blocks, 0);
    assert_e2fsck_clean(&c2.path, "the image we recovered");

    let h1 = dumpe2fs_header(&c1.path);
    let h2 = dumpe2fs_header(&c2.path);
    assert!(!h2.features().contains("needs_recovery"));
    assert_eq!(h2.num("Journal start"), 0);
    assert_eq!(
        h1.field("Journal sequence"),
        h2.field("Journal sequence"),
        "the journal restarts where e2fsck restarts it"
    );
    compare_trees(&c1.path, &c2.path);

    let sb = read_sb(&c2.path);
    let allowed = summary_blocks(&sb);
    let diff = differing_blocks(&c1.path, &c2.path, block_size as usize);
    eprintln!("blocks differing from e2fsck's image: {diff:?} (superblock and descriptor copies allowed: e2fsck fixes summary counts)");
    let unexpected: Vec<u32> = diff
        .iter()
        .copied()
        .filter(|b| !allowed.contains(b))
        .collect();
    assert!(
        unexpected.is_empty(),
        "data or metadata blocks differ: {unexpected:?}"
    );
    let fields = superblock_fields_differing(&c1.path, &c2.path);
    eprintln!("superblock fields differing from e2fsck's: {fields:?}");
    let fsck_fields = [
        "s_free_blocks_count",
        "s_free_inodes_count",
        "s_wtime",
        "s_mnt_count",
        "s_state",
        "s_lastcheck",
        "s_kbytes_written",
    ];
    assert!(fields.iter().all(|f| fsck_fields.contains(f)), "{fields:?}");

    let map = {
        let dev = FileDevice::open(&c2.path, OpenOptions::default()).unwrap();
        JournalMap::load(&dev, &sb).unwrap()
    };
    // debugfs lists the indirect blocks too, each before the blocks it maps.
    let listed = debugfs_blocks(&c2.path, 8);
    let mut rest = listed.iter();
    assert!(
        map.blocks().iter().all(|b| rest.any(|l| l == b)),
        "journal map is not in debugfs's order"
    );
    let indirect = listed.len() - map.len() as usize;
    assert!(indirect <= 2 + map.len() as usize / (block_size as usize / 4) + 1);
}

#[test]
fn linux_journal_1k_ordered() {
    linux_case(1024, "loop,commit=60");
}

#[test]
fn linux_journal_4k_ordered() {
    linux_case(4096, "loop,commit=60");
}

#[test]
fn linux_journal_1k_data_journal() {
    linux_case(1024, "loop,commit=60,data=journal");
}

#[test]
fn linux_journal_4k_data_journal() {
    linux_case(4096, "loop,commit=60,data=journal");
}

// ---------------------------------------------------------------------------
// Synthetic journals
// ---------------------------------------------------------------------------

const BS: u32 = 1024;
const IMAGE: u64 = 8 << 20;

fn fresh_image() -> MemoryDevice {
    let o = MkfsOptions {
        block_size: Some(BS),
        ..Default::default()
    };
    let dev = MemoryDevice::new(IMAGE).unwrap();
    let g = plan(&o, IMAGE).unwrap();
    format(&dev, &o, &g, Zeroed::All, &mut Progress::quiet()).unwrap();
    dev
}

fn dev_sb(dev: &dyn BlockDevice) -> Superblock {
    let mut b = vec![0u8; 1024];
    dev.read_at(&mut b, 1024).unwrap();
    Superblock::parse(&b).unwrap()
}

fn read_block(dev: &dyn BlockDevice, b: u32) -> Vec<u8> {
    let mut buf = vec![0u8; BS as usize];
    dev.read_at(&mut buf, u64::from(b) * u64::from(BS)).unwrap();
    buf
}

fn write_block(dev: &dyn BlockDevice, b: u32, data: &[u8]) {
    dev.write_at(data, u64::from(b) * u64::from(BS)).unwrap();
}

/// Home blocks well away from the metadata and the journal of the 8 MiB
/// image.
fn home(i: u32) -> u32 {
    7000 + i
}

fn pattern(tag: u8) -> Vec<u8> {
    (0..BS as usize)
        .map(|i| tag.wrapping_add((i % 251) as u8))
        .collect()
}

/// Writes transactions into the journal of an image, as jbd's commit would.
struct LogBuilder<'a> {
    dev: &'a MemoryDevice,
    map: JournalMap,
    jsb: JournalSuperblock,
    pos: u32,
    seq: u32,
}

/// One transaction to write.
#[derive(Default)]
struct Tx {
    blocks: Vec<(u32, Vec<u8>)>,
    revokes: Vec<u32>,
    commit: bool,
}

impl Tx {
    fn committed(blocks: Vec<(u32, Vec<u8>)>, revokes: Vec<u32>) -> Tx {
        Tx {
            blocks,
            revokes,
            commit: true,
        }
    }
}

impl<'a> LogBuilder<'a> {
    /// Starts the log at journal block `start` with transaction `seq`, and
    /// marks the filesystem as needing recovery.
    fn new(dev: &'a MemoryDevice, start: Option<u32>, seq: u32) -> Self {
        let sb = dev_sb(dev);
        let map = JournalMap::load(dev, &sb).unwrap();
        let raw = read_block(dev, map.disk_block(JournalBlock(0)).unwrap().0);
        let mut jsb = JournalSuperblock::parse(&raw).unwrap();
        jsb.s_feature_incompat = jbd::JBD2_FEATURE_INCOMPAT_REVOKE;
        jsb.s_sequence = seq;
        jsb.s_start = start.unwrap_or(jsb.s_first);
        let mut b = LogBuilder {
            dev,
            map,
            jsb,
            pos: 0,
            seq,
        };
        b.pos = b.jsb.s_start;
        b.write_jsb();
        let mut sb = sb;
        sb.s_feature_incompat |= feature::INCOMPAT_RECOVER;
        dev.write_at(&sb.to_bytes(), 1024).unwrap();
        b
    }

    fn write_jsb(&self) {
        let disk = self.map.disk_block(JournalBlock(0)).unwrap().0;
        let mut raw = read_block(self.dev, disk);
        raw[..1024].copy_from_slice(&self.jsb.to_bytes());
        write_block(self.dev, disk, &raw);
    }

    fn put(&mut self, data: &[u8]) {
        let disk = self.map.disk_block(JournalBlock(self.pos)).unwrap().0;
        write_block(self.dev, disk, data);
        self.pos += 1;
        if self.pos == self.jsb.s_maxlen {
            self.pos = self.jsb.s_first;
        }
    }

    fn tx(&mut self, tx: Tx) {
        let bs = BS as usize;
        if !tx.revokes.is_empty() {
            let (block, n) = jbd::build_revoke(bs, self.seq, &tx.revokes).unwrap();
            assert_eq!(n, tx.revokes.len());
            self.put(&block);
        }
        if !tx.blocks.is_empty() {
            let logged: Vec<LoggedBlock> = tx
                .blocks
                .iter()
                .map(|(b, data)| LoggedBlock {
                    blocknr: *b,
                    escaped: jbd::needs_escape(data),
                })
                .collect();
            let (desc, n) = jbd::build_descriptor(bs, self.seq, &[1; 16], &logged).unwrap();
            assert_eq!(n, logged.len());
            self.put(&desc);
            for (_, data) in &tx.blocks {
                let mut copy = data.clone();
                if jbd::needs_escape(&copy) {
                    jbd::escape(&mut copy);
                }
                self.put(&copy);
            }
        }
        if tx.commit {
            let commit = CommitBlock::new(self.seq, 1_700_000_000, 0)
                .build(bs)
                .unwrap();
            self.put(&commit);
        }
        self.seq = self.seq.wrapping_add(1);
    }

    /// Overwrites the next `n` log blocks with `fill(i)`.
    fn scribble(&mut self, n: u32, mut fill: impl FnMut(u32) -> Vec<u8>) {
        for i in 0..n {
            let data = fill(i);
            self.put(&data);
        }
    }
}

fn journal_sb(dev: &dyn BlockDevice) -> JournalSuperblock {
    let map = JournalMap::load(dev, &dev_sb(dev)).unwrap();
    let raw = read_block(dev, map.disk_block(JournalBlock(0)).unwrap().0);
    JournalSuperblock::parse(&raw).unwrap()
}

fn assert_reset(dev: &dyn BlockDevice, next_seq: u32) {
    let jsb = journal_sb(dev);
    assert_eq!((jsb.s_start, jsb.s_sequence), (0, next_seq));
    assert!(!dev_sb(dev).has_incompat(feature::INCOMPAT_RECOVER));
}

#[test]
fn journal_map_matches_mkfs_layout() {
    let dev = fresh_image();
    let sb = dev_sb(&dev);
    let map = JournalMap::load(&dev, &sb).unwrap();
    let jsb = journal_sb(&dev);
    assert_eq!(map.len(), jsb.s_maxlen);
    let mut sorted = map.blocks().to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        map.len() as usize,
        "journal blocks are distinct"
    );
    assert!(map.disk_block(JournalBlock(map.len())).is_none());
    assert!(sorted.iter().all(|&b| b > 0 && b < sb.s_blocks_count));
}

#[test]
fn corrupt_journal_inode_pointer_names_the_inode() {
    let dev = fresh_image();
    let sb = dev_sb(&dev);
    // Inode 8 sits in group 0's inode table; find it through the descriptor.
    let gd = read_block(&dev, 2);
    let table = u32::from_le_bytes(gd[8..12].try_into().unwrap());
    let off = u64::from(table) * u64::from(BS) + 7 * u64::from(sb.inode_size()) + 0x28;
    dev.write_at(&u32::MAX.to_le_bytes(), off).unwrap();
    let err = JournalMap::load(&dev, &sb).unwrap_err();
    assert!(err.to_string().contains("inode 8"), "{err}");
    assert!(matches!(
        recover(&dev, WRITE),
        Err(RecoveryError::Corrupt(_))
    ));
}

#[test]
fn clean_journal_needs_nothing_but_clears_a_stale_flag() {
    let dev = fresh_image();
    let r = recover(&dev, WRITE).unwrap();
    assert!(!r.needed);
    let mut sb = dev_sb(&dev);
    sb.s_feature_incompat |= feature::INCOMPAT_RECOVER;
    dev.write_at(&sb.to_bytes(), 1024).unwrap();
    let before = dev.snapshot();
    let r = recover(&dev, DRY).unwrap();
    assert!(!r.needed && r.recover_flag);
    assert_eq!(before, dev.snapshot());
    recover(&dev, WRITE).unwrap();
    assert!(!dev_sb(&dev).has_incompat(feature::INCOMPAT_RECOVER));
}

#[test]
fn filesystem_without_journal_needs_nothing() {
    let dev = fresh_image();
    let mut sb = dev_sb(&dev);
    sb.s_feature_compat &= !feature::COMPAT_HAS_JOURNAL;
    dev.write_at(&sb.to_bytes(), 1024).unwrap();
    assert_eq!(recover(&dev, WRITE).unwrap(), RecoveryReport::default());
}

#[test]
fn committed_transaction_is_replayed() {
    let dev = fresh_image();
    let mut log = LogBuilder::new(&dev, None, 10);
    log.tx(Tx::committed(
        vec![(home(0), pattern(1)), (home(1), pattern(2))],
        vec![],
    ));
    let before = dev.snapshot();
    let dry = recover(&dev, DRY).unwrap();
    assert_eq!(before, dev.snapshot(), "a dry run writes nothing");
    let r = recover(&dev, WRITE).unwrap();
    assert_eq!(dry, r);
    assert!(r.needed && r.recover_flag);
    assert_eq!(
        (r.transactions, r.first_seq, r.last_seq),
        (1, Tid(10), Tid(10))
    );
    assert_eq!(r.blocks_replayed, 2);
    assert_eq!(read_block(&dev, home(0)), pattern(1));
    assert_eq!(read_block(&dev, home(1)), pattern(2));
    assert_reset(&dev, 12);
    let again = recover(&dev, WRITE).unwrap();
    assert!(!again.needed);
}

#[test]
fn uncommitted_transaction_is_not_replayed() {
    let dev = fresh_image();
    let mut log = LogBuilder::new(&dev, None, 1);
    log.tx(Tx::committed(vec![(home(0), pattern(1))], vec![]));
    log.tx(Tx {
        blocks: vec![(home(1), pattern(2)), (home(0), pattern(3))],
        ..Default::default()
    });
    let r = recover(&dev, WRITE).unwrap();
    assert_eq!(
        (r.transactions, r.last_seq, r.blocks_replayed),
        (1, Tid(1), 1)
    );
    assert_eq!(read_block(&dev, home(0)), pattern(1));
    assert_eq!(read_block(&dev, home(1)), vec![0; BS as usize]);
    assert_reset(&dev, 3);
}

#[test]
fn only_uncommitted_transaction_replays_nothing_but_resets() {
    let dev = fresh_image();
    let mut log = LogBuilder::new(&dev, None, 5);
    log.tx(Tx {
        blocks: vec![(home(0), pattern(1))],
        ..Default::default()
    });
    let r = recover(&dev, WRITE).unwrap();
    assert!(r.needed);
    assert_eq!(
        (r.transactions, r.blocks_replayed, r.last_seq),
        (0, 0, Tid(4))
    );
    assert_eq!(read_block(&dev, home(0)), vec![0; BS as usize]);
    assert_reset(&dev, 6);
}

#[test]
fn revoke_hides_earlier_copies_but_not_later_ones() {
    let dev = fresh_image();
    let original = pattern(99);
    write_block(&dev, home(0), &original);
    let mut log = LogBuilder::new(&dev, None, 1);
    // T1 logs X; T2 frees it (revoke) and the block is reused for data.
    log.tx(Tx::committed(vec![(home(0), pattern(1))], vec![]));
    log.tx(Tx::committed(vec![], vec![home(0)]));
    // T3 revokes Y; T4 logs Y again, newer than the revoke.
    log.tx(Tx::committed(vec![], vec![home(1)]));
    log.tx(Tx::committed(vec![(home(1), pattern(4))], vec![]));
    // T5 both logs and revokes Z: the revoke covers its own transaction.
    log.tx(Tx::committed(vec![(home(2), pattern(5))], vec![home(2)]));
    let r = recover(&dev, WRITE).unwrap();
    assert_eq!(r.transactions, 5);
    assert_eq!(
        (r.blocks_replayed, r.blocks_revoked, r.revoke_records),
        (1, 2, 3)
    );
    assert_eq!(read_block(&dev, home(0)), original);
    assert_eq!(read_block(&dev, home(1)), pattern(4));
    assert_eq!(read_block(&dev, home(2)), vec![0; BS as usize]);
}

#[test]
fn later_transactions_overwrite_earlier_ones() {
    let dev = fresh_image();
    let mut log = LogBuilder::new(&dev, None, 1);
    log.tx(Tx::committed(vec![(home(0), pattern(1))], vec![]));
    log.tx(Tx::committed(vec![(home(0), pattern(2))], vec![]));
    log.tx(Tx::committed(vec![(home(0), pattern(3))], vec![]));
    let r = recover(&dev, WRITE).unwrap();
    assert_eq!((r.transactions, r.blocks_replayed), (3, 3));
    assert_eq!(read_block(&dev, home(0)), pattern(3));
}

#[test]
fn escaped_block_replays_with_its_magic() {
    let dev = fresh_image();
    let mut data = pattern(7);
    data[..4].copy_from_slice(&jbd::JBD2_MAGIC_NUMBER.to_be_bytes());
    let mut log = LogBuilder::new(&dev, None, 1);
    log.tx(Tx::committed(
        vec![(home(0), data.clone()), (home(1), pattern(8))],
        vec![],
    ));
    let r = recover(&dev, WRITE).unwrap();
    assert_eq!((r.blocks_replayed, r.escaped_blocks), (2, 1));
    assert_eq!(read_block(&dev, home(0)), data);
    assert_eq!(read_block(&dev, home(1)), pattern(8));
}

#[test]
fn log_wraps_from_the_end_back_to_s_first() {
    let dev = fresh_image();
    let maxlen = journal_sb(&dev).s_maxlen;
    let mut log = LogBuilder::new(&dev, Some(maxlen - 2), 100);
    log.tx(Tx::committed(
        vec![(home(0), pattern(1)), (home(1), pattern(2))],
        vec![],
    ));
    log.tx(Tx::committed(vec![(home(2), pattern(3))], vec![home(1)]));
    assert!(log.pos < 10, "the log wrapped");
    let r = recover(&dev, WRITE).unwrap();
    assert_eq!(
        (r.transactions, r.blocks_replayed, r.blocks_revoked),
        (2, 2, 1)
    );
    assert_eq!(read_block(&dev, home(0)), pattern(1));
    assert_eq!(read_block(&dev, home(1)), vec![0; BS as usize]);
    assert_eq!(read_block(&dev, home(2)), pattern(3));
}

#[test]
fn sequence_numbers_wrap_around() {
    let dev = fresh_image();
    let mut log = LogBuilder::new(&dev, None, u32::MAX);
    log.tx(Tx::committed(vec![(home(0), pattern(1))], vec![]));
    log.tx(Tx::committed(vec![(home(1), pattern(2))], vec![home(0)]));
    let r = recover(&dev, WRITE).unwrap();
    assert_eq!((r.transactions, r.last_seq), (2, Tid(0)));
    assert_eq!(read_block(&dev, home(0)), vec![0; BS as usize]);
    assert_eq!(read_block(&dev, home(1)), pattern(2));
    assert_reset(&dev, 2);
}

#[test]
fn bad_home_blocks_are_skipped_and_counted() {
    let dev = fresh_image();
    let sb = dev_sb(&dev);
    let map = JournalMap::load(&dev, &sb).unwrap();
    let in_journal = map.disk_block(JournalBlock(5)).unwrap().0;
    let mut log = LogBuilder::new(&dev, None, 1);
    log.tx(Tx::committed(
        vec![
            (0, pattern(1)),
            (sb.s_blocks_count, pattern(2)),
            (in_journal, pattern(3)),
            (home(0), pattern(4)),
        ],
        vec![],
    ));
    let r = recover(&dev, WRITE).unwrap();
    assert_eq!((r.blocks_replayed, r.bad_blocks), (1, 3));
    assert_eq!(read_block(&dev, home(0)), pattern(4));
}

#[test]
fn garbage_after_a_valid_transaction_only_ends_the_scan() {
    let dev = fresh_image();
    let mut rng = Rng::new(42);
    let mut log = LogBuilder::new(&dev, None, 7);
    log.tx(Tx::committed(vec![(home(0), pattern(1))], vec![]));
    let seq = log.seq;
    log.scribble(40, |i| {
        let mut b = rng.bytes(BS as usize);
        // Some blocks look like journal blocks of the next transaction.
        if i % 3 == 0 {
            b[..4].copy_from_slice(&jbd::JBD2_MAGIC_NUMBER.to_be_bytes());
            b[4..8].copy_from_slice(&(i % 7).to_be_bytes());
            b[8..12].copy_from_slice(&seq.to_be_bytes());
        }
        b
    });
    let r = recover(&dev, WRITE).unwrap();
    assert_eq!((r.transactions, r.blocks_replayed), (1, 1));
    assert_eq!(read_block(&dev, home(0)), pattern(1));
    assert_reset(&dev, seq + 1);
}

/// Patches the journal superblock and expects recovery to refuse it with a
/// message containing `expect`.
fn corrupt_jsb(edit: impl FnOnce(&mut JournalSuperblock, &mut Vec<u8>), expect: &str) {
    let dev = fresh_image();
    let mut log = LogBuilder::new(&dev, None, 1);
    log.tx(Tx::committed(vec![(home(0), pattern(1))], vec![]));
    let disk = log.map.disk_block(JournalBlock(0)).unwrap().0;
    let mut raw = read_block(&dev, disk);
    let mut jsb = log.jsb.clone();
    edit(&mut jsb, &mut raw);
    if raw[..4] == jbd::JBD2_MAGIC_NUMBER.to_be_bytes() {
        raw[..1024].copy_from_slice(&jsb.to_bytes());
    }
    write_block(&dev, disk, &raw);
    let before = dev.snapshot();
    for opts in [DRY, WRITE] {
        let err = recover(&dev, opts).unwrap_err();
        assert!(err.to_string().contains(expect), "{err} lacks {expect}");
    }
    assert_eq!(before, dev.snapshot(), "a refused journal is left alone");
}

#[test]
fn corrupt_journal_superblocks_are_refused_by_name() {
    corrupt_jsb(|_, raw| raw[..4].fill(0), "bad magic");
    corrupt_jsb(|j, _| j.s_blocksize = 4096, "s_blocksize");
    corrupt_jsb(|j, _| j.s_blocksize = 1000, "s_blocksize");
    corrupt_jsb(|j, _| j.s_maxlen = 1 << 20, "s_maxlen");
    corrupt_jsb(|j, _| j.s_first = 0, "s_first");
    corrupt_jsb(|j, _| j.h_blocktype = jbd::JBD2_COMMIT_BLOCK, "h_blocktype");
    corrupt_jsb(
        |j, _| j.s_feature_incompat |= jbd::JBD2_FEATURE_INCOMPAT_CSUM_V3,
        "journal_checksum_v3",
    );
    corrupt_jsb(
        |j, _| j.s_feature_incompat |= jbd::JBD2_FEATURE_INCOMPAT_64BIT | 0x400,
        "journal_64bit, FEATURE_I10",
    );
    let dev = fresh_image();
    let mut log = LogBuilder::new(&dev, None, 1);
    log.jsb.s_feature_incompat |= jbd::JBD2_FEATURE_INCOMPAT_ASYNC_COMMIT;
    log.write_jsb();
    assert!(matches!(
        recover(&dev, DRY),
        Err(RecoveryError::Unsupported(f)) if f.contains("journal_async_commit")
    ));
}

#[test]
fn bad_revoke_count_in_a_committed_transaction_is_an_error() {
    let dev = fresh_image();
    let mut log = LogBuilder::new(&dev, None, 1);
    let revoke_at = log.pos;
    log.tx(Tx::committed(vec![(home(0), pattern(1))], vec![home(1)]));
    let disk = log.map.disk_block(JournalBlock(revoke_at)).unwrap().0;
    let mut raw = read_block(&dev, disk);
    raw[12..16].copy_from_slice(&5000u32.to_be_bytes());
    write_block(&dev, disk, &raw);
    let err = recover(&dev, WRITE).unwrap_err();
    assert!(err.to_string().contains("r_count"), "{err}");
}

/// Fails every write after the first `left`, like a crash in mid-replay.
struct CrashAfter<'a> {
    inner: &'a MemoryDevice,
    left: AtomicI64,
}

impl BlockDevice for CrashAfter<'_> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.left.fetch_sub(1, Ordering::SeqCst) <= 0 {
            return Err(io::Error::other("simulated crash"));
        }
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
}

fn busy_log(dev: &MemoryDevice) {
    write_block(dev, home(3), &pattern(50));
    let mut log = LogBuilder::new(dev, None, 20);
    log.tx(Tx::committed(
        vec![
            (home(0), pattern(1)),
            (home(1), pattern(2)),
            (home(3), pattern(3)),
        ],
        vec![],
    ));
    log.tx(Tx::committed(vec![(home(0), pattern(4))], vec![home(3)]));
    let mut magic = pattern(5);
    magic[..4].copy_from_slice(&jbd::JBD2_MAGIC_NUMBER.to_be_bytes());
    log.tx(Tx::committed(
        vec![(home(2), magic), (home(1), pattern(6))],
        vec![],
    ));
    log.tx(Tx {
        blocks: vec![(home(4), pattern(7))],
        ..Default::default()
    });
}

#[test]
fn replay_interrupted_at_any_write_then_rerun_gives_the_same_image() {
    let clean = fresh_image();
    busy_log(&clean);
    let start = clean.snapshot();
    let r = recover(&clean, WRITE).unwrap();
    assert_eq!(
        (r.transactions, r.blocks_replayed, r.blocks_revoked),
        (3, 5, 1)
    );
    let want = clean.snapshot();
    // Five home writes, the journal superblock, the ext3 superblock.
    for n in 0..=8 {
        let dev = MemoryDevice::from_vec(start.clone());
        let crashing = CrashAfter {
            inner: &dev,
            left: AtomicI64::new(n),
        };
        let first = recover(&crashing, WRITE);
        assert_eq!(first.is_ok(), n >= 7, "after {n} writes: {first:?}");
        recover(&dev, WRITE).unwrap();
        assert!(
            dev.snapshot() == want,
            "crash after {n} writes, then replay"
        );
    }
}

// ---------------------------------------------------------------------------
// Never panic
// ---------------------------------------------------------------------------

/// Byte ranges worth damaging: the journal superblock and the used log.
fn fuzz_targets(dev: &MemoryDevice) -> Vec<(u64, u64)> {
    let sb = dev_sb(dev);
    let map = JournalMap::load(dev, &sb).unwrap();
    (0..16)
        .filter_map(|j| map.disk_block(JournalBlock(j)))
        .map(|b| (u64::from(b.0) * u64::from(BS), u64::from(BS)))
        .collect()
}

#[test]
fn random_damage_to_the_journal_never_panics() {
    let dev = fresh_image();
    busy_log(&dev);
    let targets = fuzz_targets(&dev);
    let pristine = dev.snapshot();
    let mut rng = Rng::new(0xdead_beef_cafe_f00d);
    let mut outcomes = [0u32; 2];
    for round in 0..3000 {
        let mut undo = Vec::new();
        for _ in 0..1 + rng.next() % 6 {
            let (base, len) = targets[(rng.next() as usize) % targets.len()];
            // Header fields and tags sit near the start of a block.
            let off = base + rng.next() % if rng.next() % 2 == 0 { 64 } else { len };
            let mut old = [0u8];
            dev.read_at(&mut old, off).unwrap();
            undo.push((off, old[0]));
            dev.write_at(&[rng.next() as u8], off).unwrap();
        }
        let result = recover(&dev, DRY);
        outcomes[usize::from(result.is_ok())] += 1;
        if round % 100 == 0 {
            let copy = MemoryDevice::from_vec(dev.snapshot());
            let _ = recover(&copy, WRITE);
            let _ = recover(&copy, WRITE);
        }
        for (off, b) in undo.into_iter().rev() {
            dev.write_at(&[b], off).unwrap();
        }
    }
    assert!(dev.snapshot() == pristine, "dry runs never write");
    eprintln!("fuzz: {} errors, {} replays", outcomes[0], outcomes[1]);
    assert!(outcomes[0] > 0 && outcomes[1] > 0);
}

#[test]
fn random_superblock_and_inode_damage_never_panics() {
    let dev = fresh_image();
    busy_log(&dev);
    let sb = dev_sb(&dev);
    let gd = read_block(&dev, 2);
    let table = u32::from_le_bytes(gd[8..12].try_into().unwrap());
    let inode8 = u64::from(table) * u64::from(BS) + 7 * u64::from(sb.inode_size());
    let ranges = [(1024u64, 1024u64), (2048, 32), (inode8, 128)];
    let mut rng = Rng::new(7);
    for _ in 0..2000 {
        let mut undo = Vec::new();
        for _ in 0..1 + rng.next() % 3 {
            let (base, len) = ranges[(rng.next() as usize) % ranges.len()];
            let off = base + rng.next() % len;
            let mut old = [0u8];
            dev.read_at(&mut old, off).unwrap();
            undo.push((off, old[0]));
            dev.write_at(&[rng.next() as u8], off).unwrap();
        }
        let _ = recover(&dev, DRY);
        for (off, b) in undo.into_iter().rev() {
            dev.write_at(&[b], off).unwrap();
        }
    }
    let tiny = MemoryDevice::new(1500).unwrap();
    assert!(recover(&tiny, DRY).is_err());
}
