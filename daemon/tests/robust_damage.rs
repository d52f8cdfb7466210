// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! Damaged images at mount: images made by jbdfs's mkfs and by mke2fs,
//! populated, then damaged at random (seeded) in group 0's metadata —
//! superblock fields, the group descriptor, the bitmaps, the inode table —
//! and in directory blocks (also files' indirect blocks and the journal
//! superblock). Each must be refused with a message, or mount
//! and survive a full walk with writes (every request an error value or a
//! success), never a panic or a hang. Most run in-process over a memory
//! device; a few go through the real daemon with a timeout.

use jbdfs_testkit as common;
use jbdfs_testkit as robust_common;
use jbdfs_testkit::daemon as daemon_common;
#[path = "../../tests/robust_common/walk.rs"]
mod walk;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use jbdfs::format::group_desc::{GroupDesc, GROUP_DESC_SIZE};
use jbdfs::format::inode::Inode;
use jbdfs::format::superblock::{Superblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use jbdfs::format::{BlockNo, InodeNo};
use jbdfs::mkfs::MkfsOptions;
use robust_common::*;
use walk::{mount_and_walk, Outcome, SPARSE_DEVICE};

/// How many damaged images the suite runs per base image;
/// `JBDFS_DAMAGE_IMAGES` asks for more (a longer campaign).
fn images_per_base() -> u64 {
    std::env::var("JBDFS_DAMAGE_IMAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60)
}

/// A tree with a bit of everything: nested directories, small and
/// indirect-block files, fast and slow symlinks, hard links, xattrs.
fn populate(fs: &jbdfs::fs::Filesystem) {
    let (a, _) = fs.mkdir(ROOT, b"a", 0o755, ME).unwrap();
    let (b, _) = fs.mkdir(a, b"b", 0o755, ME).unwrap();
    for i in 0..30 {
        let len = [0, 10, 1000, 5000, 20_000, 300_000][i % 6];
        let dir = [ROOT, a, b][i % 3];
        let f = make_file(fs, dir, &format!("file-{i}"), &pattern(len, i as u32));
        if i % 7 == 0 {
            fs.link(f, ROOT, format!("link-{i}").as_bytes()).unwrap();
        }
        if i % 5 == 0 {
            fs.setxattr(
                f,
                b"user.k",
                &pattern(40 + i * 30, 9),
                jbdfs::fs::xattr::SetMode::Either,
            )
            .unwrap();
        }
    }
    fs.symlink(a, b"fast", b"b/file-2", ME).unwrap();
    fs.symlink(a, b"slow", &[b'x'; 300], ME).unwrap();
}

fn jbdfs_base() -> Vec<u8> {
    let opts = MkfsOptions {
        block_size: Some(1024),
        ..Default::default()
    };
    let mem = mem_image(SPARSE_DEVICE as u64, &opts);
    let fs = mount_mem(&mem);
    populate(&fs);
    fs.unmount().unwrap();
    mem.snapshot()
}

/// An image made by mke2fs -t ext3, populated by jbdfs; None without mke2fs.
fn mke2fs_base() -> Option<Vec<u8>> {
    if !jbdfs_testkit::available!("the mke2fs base"; "mke2fs") {
        return None;
    }
    let img = common::mke2fs_image("damage-mke2fs", SPARSE_DEVICE as u64, &["-b", "1024"])
        .unwrap_or_else(|o| panic!("{}", o.describe()));
    let mem = Arc::new(jbdfs::device::MemoryDevice::from_vec(
        std::fs::read(&img.path).unwrap(),
    ));
    let fs = mount_mem(&mem);
    populate(&fs);
    fs.unmount().unwrap();
    Some(mem.snapshot())
}

/// Byte ranges of group 0's metadata and of directory blocks.
struct Targets {
    superblock: std::ops::Range<usize>,
    group_desc: std::ops::Range<usize>,
    block_bitmap: std::ops::Range<usize>,
    inode_bitmap: std::ops::Range<usize>,
    /// The used part of the inode table.
    inode_table: std::ops::Range<usize>,
    dir_blocks: Vec<std::ops::Range<usize>>,
    /// Files' indirect blocks, and the journal's superblock.
    indirect_blocks: Vec<std::ops::Range<usize>>,
    journal_superblock: std::ops::Range<usize>,
}

fn targets(img: &[u8]) -> Targets {
    let sb_at = SUPERBLOCK_OFFSET as usize;
    let sb = Superblock::parse(&img[sb_at..sb_at + SUPERBLOCK_SIZE]).unwrap();
    let bs = sb.block_size() as usize;
    let gdt = (sb.s_first_data_block as usize + 1) * bs;
    let gd = GroupDesc::parse(&img[gdt..gdt + 32]).unwrap();
    let block = |b: u32| b as usize * bs..(b as usize + 1) * bs;
    let isz = sb.inode_size() as usize;
    let it = gd.bg_inode_table as usize * bs;
    let used = 64usize.min(sb.s_inodes_per_group as usize);
    let mut dir_blocks = Vec::new();
    let mut indirect_blocks = Vec::new();
    let mut journal_superblock = block(0);
    for i in 0..used {
        let raw = &img[it + i * isz..it + (i + 1) * isz];
        if let Ok(ino) = Inode::parse(raw) {
            if i + 1 == 8 {
                journal_superblock = block(ino.i_block[0]);
            } else if ino.is_reg() {
                for &b in ino.i_block[12..].iter().filter(|&&b| b != 0) {
                    indirect_blocks.push(block(b));
                }
            }
            if ino.is_dir() && ino.i_links_count > 0 {
                for &b in ino.i_block[..12].iter().filter(|&&b| b != 0) {
                    if (b as usize + 1) * bs <= img.len() {
                        dir_blocks.push(block(b));
                    }
                }
            }
        }
    }
    Targets {
        superblock: sb_at..sb_at + 0x200,
        group_desc: gdt..gdt + 32,
        block_bitmap: block(gd.bg_block_bitmap),
        inode_bitmap: block(gd.bg_inode_bitmap),
        inode_table: it..it + used * isz,
        dir_blocks,
        indirect_blocks,
        journal_superblock,
    }
}

/// Damages 1 to 4 places of `img`, chosen by `rng`; says what it did.
fn damage(img: &mut [u8], t: &Targets, rng: &mut common::Rng) -> String {
    let mut what = Vec::new();
    for _ in 0..1 + rng.below(4) {
        let (name, range) = match rng.below(8) {
            0 => ("superblock", t.superblock.clone()),
            1 => ("group descriptor", t.group_desc.clone()),
            2 => ("block bitmap", t.block_bitmap.clone()),
            3 => ("inode bitmap", t.inode_bitmap.clone()),
            4 => ("inode table", t.inode_table.clone()),
            5 if !t.indirect_blocks.is_empty() => {
                let i = rng.below(t.indirect_blocks.len() as u64) as usize;
                ("indirect block", t.indirect_blocks[i].clone())
            }
            6 => ("journal superblock", t.journal_superblock.clone()),
            _ if !t.dir_blocks.is_empty() => {
                let i = rng.below(t.dir_blocks.len() as u64) as usize;
                ("directory block", t.dir_blocks[i].clone())
            }
            _ => ("inode table", t.inode_table.clone()),
        };
        let at = range.start + rng.below((range.end - range.start) as u64) as usize;
        let how = match rng.below(5) {
            0 => {
                img[at] ^= 1 << rng.below(8);
                "bit flip"
            }
            1 => {
                img[at] = rng.next() as u8;
                "random byte"
            }
            2 => {
                let end = (at + 16).min(range.end);
                img[at..end].fill(0);
                "16 zero bytes"
            }
            3 => {
                let end = (at + 4).min(range.end);
                img[at..end].fill(0xff);
                "all-ones word"
            }
            _ => {
                let end = (at + 64).min(range.end);
                for b in &mut img[at..end] {
                    *b = rng.next() as u8;
                }
                "64 random bytes"
            }
        };
        what.push(format!("{how} in the {name} at byte {at}"));
    }
    what.join("; ")
}

/// Runs `mount_and_walk` on its own thread; a hang past the timeout fails.
fn walk_with_timeout(img: Vec<u8>, tag: &str) -> Outcome {
    let (tx, rx) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let _ = tx.send(mount_and_walk(img, true));
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(outcome) => {
            worker.join().unwrap();
            outcome
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            let why = worker.join().err().map(|p| {
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            });
            panic!("{tag}: the walk panicked: {why:?}")
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{tag}: the walk hung"),
    }
}

fn campaign(base: &[u8], label: &str, seeds: std::ops::Range<u64>) -> (usize, usize) {
    let t = targets(base);
    let (mut refused, mut served) = (0, 0);
    let mut totals = walk::WalkReport::default();
    for seed in seeds {
        let mut img = base.to_vec();
        let mut rng = common::Rng::new(seed);
        let what = damage(&mut img, &t, &mut rng);
        let tag = format!("{label} seed {seed} ({what})");
        match walk_with_timeout(img, &tag) {
            Outcome::Refused(msg) => {
                assert!(!msg.is_empty(), "{tag}: refused without a message");
                refused += 1;
            }
            Outcome::Served(r) => {
                assert!(r.dirs >= 1, "{tag}: {r:?}");
                served += 1;
                totals.files += r.files;
                totals.errors += r.errors;
                totals.writes_ok += r.writes_ok;
                totals.writes_failed += r.writes_failed;
            }
        }
    }
    eprintln!(
        "{label}: {refused} refused, {served} mounted and walked with writes \
         ({} files visited, {} failed requests, writes {} ok / {} failed)",
        totals.files, totals.errors, totals.writes_ok, totals.writes_failed
    );
    (refused, served)
}

#[test]
fn damaged_group0_metadata_and_directories_never_panic_or_hang() {
    let mut total = 0;
    let base = jbdfs_base();
    let n = images_per_base();
    let (r, s) = campaign(&base, "jbdfs mkfs", 0..n);
    total += r + s;
    if let Some(base) = mke2fs_base() {
        let (r, s) = campaign(&base, "mke2fs", 1_000_000..1_000_000 + n);
        total += r + s;
    }
    assert!(total as u64 >= n);
}

/// The undamaged bases themselves mount, walk and stay e2fsck-clean.
#[test]
fn the_bases_are_clean_and_fully_readable() {
    let base = jbdfs_base();
    let img = to_file(&base, "damage-base");
    common::assert_e2fsck_clean(&img.path, "the jbdfs base");
    match mount_and_walk(base, false) {
        Outcome::Served(r) => {
            assert_eq!(r.errors, 0, "{r:?}");
            assert!(r.files >= 30, "{r:?}");
        }
        Outcome::Refused(m) => panic!("the base was refused: {m}"),
    }
}

/// Walks a mounted tree with system calls; errors are fine, returns the
/// number of entries seen.
fn walk_mount(dir: &std::path::Path, budget: &mut usize) -> usize {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut seen = 0;
    for e in rd.flatten() {
        if *budget == 0 {
            break;
        }
        *budget -= 1;
        seen += 1;
        let p = e.path();
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => seen += walk_mount(&p, budget),
            Ok(m) if m.is_file() => {
                let _ = std::fs::read(&p);
            }
            Ok(m) if m.file_type().is_symlink() => {
                let _ = std::fs::read_link(&p);
            }
            _ => {}
        }
    }
    let _ = std::fs::write(dir.join("daemon-scribble"), b"written through FUSE");
    let _ = std::fs::create_dir(dir.join("daemon-dir"));
    let _ = std::fs::remove_file(dir.join("daemon-scribble"));
    seen
}

/// A handful of damaged images through the real daemon: it exits non-zero
/// with a message, or serves a walk with writes and exits after umount —
/// never a Rust panic (exit 101), a signal, or a hang.
#[test]
fn damaged_images_through_the_daemon() {
    use daemon_common::Daemon;
    jbdfs_testkit::require!(fuse);
    let base = jbdfs_base();
    let t = targets(&base);
    let (mut refused, mut served) = (0, 0);
    for seed in 0..8u64 {
        let mut img = base.clone();
        let what = damage(&mut img, &t, &mut common::Rng::new(seed));
        let tag = format!("daemon seed {seed} ({what})");
        let file = to_file(&img, "damage-daemon");
        let dir = common::TempDir::new("damage-mnt");
        match Daemon::start(&file.path, &dir.path, "", Duration::from_secs(30)) {
            Err(e) => {
                assert_ne!(e.status.code(), Some(101), "{tag}: panicked: {}", e.stderr);
                assert!(e.status.code().is_some(), "{tag}: killed by a signal");
                assert!(!e.status.success(), "{tag}");
                assert!(e.stderr.contains("cannot mount"), "{tag}: {}", e.stderr);
                refused += 1;
            }
            Ok(d) => {
                let (tx, rx) = mpsc::channel();
                let root = dir.path.clone();
                std::thread::spawn(move || {
                    let _ = tx.send(walk_mount(&root, &mut 5000));
                });
                rx.recv_timeout(Duration::from_secs(60))
                    .unwrap_or_else(|_| panic!("{tag}: the walk through FUSE hung"));
                let e = d.stop();
                assert_ne!(e.status.code(), Some(101), "{tag}: panicked: {}", e.stderr);
                assert!(e.status.code().is_some(), "{tag}: killed by a signal");
                served += 1;
            }
        }
    }
    eprintln!("through the daemon: {refused} refused, {served} served");
}

/// Sets `s_last_orphan` of the image.
fn with_last_orphan(img: &[u8], ino: u32) -> Vec<u8> {
    let mut img = img.to_vec();
    let at = SUPERBLOCK_OFFSET as usize;
    let mut sb = Superblock::parse(&img[at..at + SUPERBLOCK_SIZE]).unwrap();
    sb.s_last_orphan = ino;
    img[at..at + SUPERBLOCK_SIZE].copy_from_slice(&sb.to_bytes());
    img
}

/// A damaged orphan chain at mount: reserved inodes (the root, the
/// journal) named as orphans are refused, as ext3_orphan_get does, and a
/// chain through live inodes is cut where it loops; the tree and the
/// journal survive, and e2fsck -fy repairs the rest to clean.
#[test]
fn a_damaged_orphan_chain_frees_no_reserved_or_live_inode() {
    let base = jbdfs_base();
    for ino in [1, 2, 7, 8, 11, 12, 13, u32::MAX] {
        let img = with_last_orphan(&base, ino);
        let tag = format!("s_last_orphan = {ino}");
        match walk_with_timeout(img.clone(), &tag) {
            Outcome::Served(r) => {
                assert!(r.dirs >= 3, "{tag}: {r:?}");
            }
            Outcome::Refused(m) => panic!("{tag}: refused: {m}"),
        }
        let mem = Arc::new(jbdfs::device::MemoryDevice::from_vec(img));
        let fs = mount_mem(&mem);
        assert!(fs.lookup(ROOT, b"a").is_ok(), "{tag}");
        fs.unmount().unwrap();
        let file = to_file(&mem.snapshot(), "orphan");
        let h = common::dumpe2fs_header(&file.path);
        assert!(h.journal_bytes() > 0, "{tag}: the journal is gone");
        assert_repairs_to_clean(&file.path, &tag);
    }
}

/// Reads inode `ino` of the image, lets `f` change it, writes it back.
fn edit_inode(img: &mut [u8], ino: InodeNo, f: impl FnOnce(&mut Inode)) {
    let at = SUPERBLOCK_OFFSET as usize;
    let sb = Superblock::parse(&img[at..at + SUPERBLOCK_SIZE]).unwrap();
    let bs = sb.block_size() as usize;
    let (db, doff) = sb.group_desc_location(sb.inode_group(ino.0).0);
    let gd_at = db.0 as usize * bs + doff;
    let gd = GroupDesc::parse(&img[gd_at..gd_at + GROUP_DESC_SIZE]).unwrap();
    let (b, off) = sb.inode_location(ino, BlockNo(gd.bg_inode_table));
    let at = b.0 as usize * bs + off;
    let end = at + sb.inode_size() as usize;
    let mut inode = Inode::parse(&img[at..end]).unwrap();
    f(&mut inode);
    img[at..end].copy_from_slice(&inode.to_bytes());
}

/// A corrupt fifo or socket on the orphan list whose `i_block` holds the
/// block pointers of another file: orphan cleanup at mount must not free
/// them. Only regular files, directories and slow symlinks have a block
/// map (the kernel's ext3_can_truncate, e2fsck's pass 1); before the fix a
/// fifo's or socket's garbage pointers were freed, so that a live file's
/// blocks (here its direct blocks and its indirect block, with all it
/// maps) went back to the free pool. Both ways onto the list: unlinked
/// while open, then a crash (cleanup deletes the inode), and still linked
/// (cleanup finishes a truncate).
#[test]
fn orphan_cleanup_frees_no_blocks_named_by_a_fifo_or_socket() {
    use jbdfs::format::inode::{S_IFIFO, S_IFSOCK};
    use jbdfs::journal::recovery::{recover, RecoverOptions};
    for (kind, linked) in [(S_IFIFO, false), (S_IFSOCK, false), (S_IFIFO, true)] {
        let tag = format!("mode {kind:o}, linked {linked}");
        let mem = small_image(SPARSE_DEVICE as u64);
        let fs = mount_mem(&mem);
        let data = pattern(40 << 10, 7);
        let victim = make_file(&fs, ROOT, "victim", &data);
        let (node, _) = fs.mknod(ROOT, b"node", kind | 0o644, 0, ME).unwrap();
        fs.fsync(victim, false).unwrap();
        let mut img = if linked {
            fs.unmount().unwrap();
            let mut img = mem.snapshot();
            edit_inode(&mut img, node, |i| i.i_dtime = 0);
            with_last_orphan(&img, node.0)
        } else {
            // Unlinked while open, then a crash: the orphan is on disk
            // once the journal is replayed. (Recovery writes back the
            // superblock it read before replaying, so the logged orphan
            // head is put back by hand, as the log had it.)
            fs.open(node).unwrap();
            fs.unlink(ROOT, b"node").unwrap();
            fs.sync().unwrap();
            let crashed = jbdfs::device::MemoryDevice::from_vec(mem.snapshot());
            recover(&crashed, RecoverOptions { write: true }).unwrap();
            with_last_orphan(&crashed.snapshot(), node.0)
        };
        let free_before = {
            let mem = Arc::new(jbdfs::device::MemoryDevice::from_vec(img.clone()));
            let dev: Arc<dyn jbdfs::device::BlockDevice> = mem;
            let cfg = jbdfs::fs::MountConfig {
                read_only: true,
                ..Default::default()
            };
            let ro = jbdfs::fs::Filesystem::mount(dev, &cfg).unwrap();
            ro.statfs().unwrap().free_blocks
        };
        // The corruption: the node's i_block is the victim's block map.
        let mut pointers = [0; 15];
        edit_inode(&mut img, victim, |i| pointers = i.i_block);
        assert_ne!(pointers[12], 0, "{tag}: the victim needs an indirect block");
        edit_inode(&mut img, node, |i| i.i_block = pointers);

        let mem = Arc::new(jbdfs::device::MemoryDevice::from_vec(img));
        let fs = mount_mem(&mem);
        assert_eq!(
            fs.statfs().unwrap().free_blocks,
            free_before,
            "{tag}: orphan cleanup freed blocks"
        );
        // Blocks freed by mistake would be handed out again.
        let filler = make_file(&fs, ROOT, "filler", &pattern(200 << 10, 9));
        assert_eq!(read_all(&fs, filler).len(), 200 << 10, "{tag}");
        assert!(
            read_all(&fs, victim) == data,
            "{tag}: the victim's data changed"
        );
        fs.unmount().unwrap();
        let file = to_file(&mem.snapshot(), "orphan-fifo");
        common::assert_e2fsck_clean(&file.path, &tag);
    }
}

/// The inode damage and the unusable images of scripts/fsck-corpus.sh,
/// moved here (issue 20): each recipe edits one inode of the populated
/// jbdfs base as `debugfs sif`/`clri` did there, or cuts the image. What
/// the script checked of each, checked here in process: fsck -n (the
/// library's, as fsck.jbdfs runs it) finds damage exactly where
/// `e2fsck -fn` does and writes nothing; fsck -y leaves nothing unfixed
/// and an image e2fsck finds clean, which a second fsck -n passes; the
/// mount and walk of the damaged image neither panics nor hangs. An image
/// that cannot be repaired in place (truncated, not ext3) is refused and
/// left as it was.
#[test]
fn named_inode_damage_is_judged_as_e2fsck_judges_it_and_repaired() {
    jbdfs_testkit::require!("e2fsck");
    let mut bases = vec![("jbdfs mkfs", jbdfs_base())];
    if let Some(b) = mke2fs_base() {
        bases.push(("mke2fs", b));
    }
    for (label, base) in bases {
        let recipes = named_damage(&base);
        let n = recipes.len();
        assert!(n >= 20, "{n} recipes");
        let mut damaged = 0;
        for (name, img) in recipes {
            damaged += usize::from(judged_as_e2fsck_judges_it(
                &format!("{label} base, {name}"),
                name,
                img,
            ));
        }
        // Each recipe is damage e2fsck sees: none is a no-op.
        assert_eq!(damaged, n, "{label} base: {damaged} of {n} recipes damaged");
    }
}

fn fsck_opts(mode: jbdfs::fsck::Mode) -> jbdfs::fsck::FsckOptions {
    jbdfs::fsck::FsckOptions {
        mode,
        force: true,
        ..Default::default()
    }
}

/// Whether the image was damaged (always so for the fatal ones).
fn judged_as_e2fsck_judges_it(name: &str, recipe: &str, img: Vec<u8>) -> bool {
    use jbdfs::device::MemoryDevice;
    use jbdfs::fsck::{check, Mode};
    let fatal = matches!(recipe, "truncated" | "not-ext3");
    let mem = MemoryDevice::from_vec(img.clone());
    let checked = check(&mem, &fsck_opts(Mode::No));
    assert!(mem.snapshot() == img, "{name}: fsck -n wrote");
    if fatal {
        let fixed = MemoryDevice::from_vec(img.clone());
        if let Ok(r) = check(&fixed, &fsck_opts(Mode::Yes)) {
            assert!(r.exit_code() & 8 != 0, "{name}: fsck -y: {:?}", r.problems);
        }
        assert!(fixed.snapshot() == img, "{name}: fsck -y changed it");
        return true;
    }
    let r = checked.unwrap_or_else(|e| panic!("{name}: fsck -n: {e}"));
    let file = to_file(&img, "named-damage");
    let e = common::e2fsck(&file.path);
    assert_eq!(
        r.exit_code() == 0,
        e.success(),
        "{name}: fsck -n (exit {}, {:?}) and e2fsck -fn disagree:\n{}",
        r.exit_code(),
        r.problems,
        e.describe()
    );
    let fixed = MemoryDevice::from_vec(img.clone());
    let r = check(&fixed, &fsck_opts(Mode::Yes)).unwrap_or_else(|e| panic!("{name}: fsck -y: {e}"));
    assert_eq!(r.unfixed, 0, "{name}: fsck -y left {:?}", r.problems);
    common::assert_bytes_clean(&fixed.snapshot(), &format!("{name}, after fsck -y"));
    let again = check(&fixed, &fsck_opts(Mode::No)).unwrap();
    assert_eq!(
        again.exit_code(),
        0,
        "{name}: second fsck -n: {:?}",
        again.problems
    );
    // The mount path: refused or served, never a panic or a hang.
    let _ = walk_with_timeout(img, name);
    !e.success()
}

/// Reads inode `ino` of the image.
fn read_inode(img: &[u8], ino: InodeNo) -> Inode {
    let mut copy = img.to_vec();
    let mut out = None;
    edit_inode(&mut copy, ino, |i| out = Some(i.clone()));
    out.unwrap()
}

/// The first block of group 0's inode table.
fn inode_table_0(img: &[u8]) -> u32 {
    let at = SUPERBLOCK_OFFSET as usize;
    let sb = Superblock::parse(&img[at..at + SUPERBLOCK_SIZE]).unwrap();
    let bs = sb.block_size() as usize;
    let (db, doff) = sb.group_desc_location(sb.inode_group(1).0);
    let gd_at = db.0 as usize * bs + doff;
    GroupDesc::parse(&img[gd_at..gd_at + GROUP_DESC_SIZE])
        .unwrap()
        .bg_inode_table
}

/// The recipes, by the script's names, applied to copies of `base`.
fn named_damage(base: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    let mem = Arc::new(jbdfs::device::MemoryDevice::from_vec(base.to_vec()));
    let fs = mount_mem(&mem);
    let ino = |path: &str| {
        path.split('/')
            .fold(ROOT, |dir, name| fs.lookup(dir, name.as_bytes()).unwrap().0)
    };
    // file-3: 5000 bytes in /, file-4: 20 000 in a, file-5: 300 000 in a/b
    // (indirect blocks); a/fast is a fast symlink.
    let (small, mid, big, dir, fast) = (
        ino("file-3"),
        ino("a/file-4"),
        ino("a/b/file-5"),
        ino("a"),
        ino("a/fast"),
    );
    fs.unmount().unwrap();
    let big_blocks = read_inode(base, big).i_block;
    let itable = inode_table_0(base);
    type Edit = Box<dyn Fn(&mut Inode)>;
    let sif: Vec<(&'static str, InodeNo, Edit)> = vec![
        ("sif-links-high", small, Box::new(|i| i.i_links_count = 5)),
        ("sif-links-zero", small, Box::new(|i| i.i_links_count = 0)),
        (
            "sif-illegal-block",
            big,
            Box::new(|i| i.i_block[2] = 99_999_999),
        ),
        (
            "sif-illegal-ind",
            big,
            Box::new(|i| i.i_block[12] = 99_999_999),
        ),
        (
            "sif-dup-block",
            small,
            Box::new(move |i| i.i_block[1] = big_blocks[3]),
        ),
        (
            "sif-dup-metadata",
            small,
            Box::new(move |i| i.i_block[0] = itable),
        ),
        ("sif-size-small", big, Box::new(|i| i.i_size = 100)),
        ("sif-dir-size", dir, Box::new(|i| i.i_size = 123)),
        ("sif-blocks", mid, Box::new(|i| i.i_blocks = 2)),
        ("sif-dtime", mid, Box::new(|i| i.i_dtime = 1_600_000_000)),
        ("sif-bad-mode", small, Box::new(|i| i.i_mode = 0o170644)),
        ("sif-index-flag", dir, Box::new(|i| i.i_flags = 0x1000)),
        ("sif-bad-fastlink", fast, Box::new(|i| i.i_size = 200)),
        (
            "sif-bad-acl",
            small,
            Box::new(|i| i.i_file_acl = 99_999_999),
        ),
        ("sif-extra-isize", mid, Box::new(|i| i.i_extra_isize = 3)),
        (
            "sif-journal-mode",
            InodeNo(8),
            Box::new(|i| i.i_mode = 0o040755),
        ),
        (
            "sif-journal-ind",
            InodeNo(8),
            Box::new(|i| i.i_block[12] = 0),
        ),
    ];
    let mut out = Vec::new();
    for (name, ino, edit) in sif {
        let mut img = base.to_vec();
        edit_inode(&mut img, ino, |i| edit(i));
        out.push((name, img));
    }
    for (name, ino) in [
        ("clri-file", small),
        ("clri-dir", dir),
        ("clri-root", ROOT),
        ("clri-lostfound", InodeNo(11)),
        ("clri-journal", InodeNo(8)),
    ] {
        let mut img = base.to_vec();
        edit_inode(&mut img, ino, |i| {
            *i = Inode::parse(&vec![0u8; i.to_bytes().len()]).unwrap();
        });
        out.push((name, img));
    }
    out.push(("truncated", base[..base.len() / 2].to_vec()));
    let mut rng = common::Rng::new(0xc0ffee);
    out.push(("not-ext3", rng.bytes(4 << 20)));
    out
}
