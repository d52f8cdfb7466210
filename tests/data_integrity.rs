// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! File data that must read back as last written, in-process: the
//! interleavings fsx found (issue "Data integrity") replayed step by step,
//! deterministically, on a memory device.

use jbdfs_testkit as common;

use std::sync::Arc;

use jbdfs::device::{BlockDevice, MemoryDevice};
use jbdfs::format::InodeNo;
use jbdfs::fs::namei::{Caller, SetAttr};
use jbdfs::fs::{DataMode, Filesystem, MountConfig};
use jbdfs::mkfs::{format, plan, MkfsOptions, Zeroed};
use jbdfs::util::Progress;

const ROOT: InodeNo = InodeNo(2);
const ME: Caller = Caller { uid: 0, gid: 0 };

fn truncate(fs: &Filesystem, f: InodeNo, size: u64) {
    let t = SetAttr {
        size: Some(size),
        ..Default::default()
    };
    fs.setattr(f, &t, ME).unwrap();
}

/// fsx seed 11 (default configuration, 4 KiB blocks), reduced. A shrinking
/// truncate logs the new last block (the zeroed tail, fs/tail.rs), so the
/// cache holds that block, pinned until checkpoint. A second truncate frees
/// it while it is pinned, so the cache keeps the buffer for the journal.
/// When checkpoint, not the free's commit, let go of the last pin, the
/// buffer stayed cached with the dead bytes. A write then took the same
/// disk block as file data, through the data queue, and a read took the
/// dead buffer over the new data, since another logged tail (block 3) made
/// reads look in the cache.
#[test]
fn a_freed_logged_tail_never_shadows_the_data_of_the_blocks_next_owner() {
    for data in [DataMode::Ordered, DataMode::Writeback] {
        let bs = 4096u64;
        let mem = common::mem_image_bs(64 << 20, bs as u32);
        let fs = common::mount_mem_data(&mem, data);
        let (f, _) = fs.mknod(ROOT, b"f", 0o100644, 0, ME).unwrap();
        let old = vec![0x67u8; 0x13000];
        fs.write(f, 0, &old, true).unwrap();
        truncate(&fs, f, 4 * bs + 0x133); // block 4 becomes a logged tail
        fs.write(f, 4 * bs, &old[..0x133], true).unwrap();
        let before = block_of(&fs, f, 4);
        fs.journal().force_commit().unwrap(); // its copy now waits for checkpoint, pinned
        truncate(&fs, f, 3 * bs + 0x4d); // frees block 4; block 3 is a logged tail
                                         // Checkpoint writes the old copy home before the free commits (the
                                         // log needed room), and so unpins the buffer behind the free's back.
        fs.journal().checkpoint_all().unwrap();
        fs.journal().force_commit().unwrap(); // the free commits: the block may be reused
        let new = vec![0x96u8; 0xe000];
        fs.write(f, 3 * bs, &new, true).unwrap();
        assert_eq!(
            block_of(&fs, f, 4),
            before,
            "the test needs the freed block to be allocated again"
        );
        let got = fs.read(f, 4 * bs, bs as u32).unwrap();
        assert!(
            got.iter().all(|&b| b == 0x96),
            "data={data}: block 4 reads {:#x} (the freed block's old contents), not the new data",
            got[0]
        );
        fs.unmount().unwrap();
        common::assert_mem_clean(&mem, "after the reused block");
    }
}

/// The disk block that holds logical block `logical` of `f`.
fn block_of(fs: &Filesystem, f: InodeNo, logical: u32) -> u32 {
    fs.bmap(f, logical).unwrap().expect("mapped").0
}

/// copy_file_range copies what the source holds (holes as zeros), stops at
/// its end, and refuses an overlapping copy within one file.
#[test]
fn copy_range_copies_data_and_holes_and_stops_at_the_end() {
    let mem = common::mem_image_bs(64 << 20, 1024);
    let fs = common::mount_mem_data(&mem, DataMode::Ordered);
    let (a, _) = fs.mknod(ROOT, b"a", 0o100644, 0, ME).unwrap();
    let (b, _) = fs.mknod(ROOT, b"b", 0o100644, 0, ME).unwrap();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    fs.write(a, 0, &data[..1_000_000], true).unwrap();
    fs.write(a, 2_000_000, &data[2_000_000..], true).unwrap(); // a hole between
    let mut want = data.clone();
    want[1_000_000..2_000_000].fill(0);

    let n = fs.copy_range(a, 10, b, 7, 5_000_000, true).unwrap();
    assert_eq!(n, want.len() - 10, "stops at the source's end");
    let got = fs.read(b, 0, 4_000_000).unwrap();
    assert_eq!(&got[..7], &[0u8; 7]);
    assert!(got[7..] == want[10..], "the copy differs from the source");

    assert_eq!(fs.copy_range(a, 3_000_000, b, 0, 10, true).unwrap(), 0);
    assert!(fs.copy_range(a, 0, a, 100, 200, true).is_err(), "overlap");
    let n = fs.copy_range(a, 0, a, 3_000_000, 4096, true).unwrap();
    assert_eq!(n, 4096);
    assert!(fs.read(a, 3_000_000, 4096).unwrap() == want[..4096]);
    fs.unmount().unwrap();
    common::assert_mem_clean(&mem, "after the copies");
}

/// A device that holds the first write covering `held` (a byte offset)
/// until opened, once armed: a checkpoint caught in the middle.
struct GateDevice {
    inner: Arc<MemoryDevice>,
    held: u64,
    state: parking_lot::Mutex<Gate>,
    changed: parking_lot::Condvar,
}

#[derive(Default)]
struct Gate {
    armed: bool,
    holding: bool,
    open: bool,
}

impl GateDevice {
    fn wait(&self, covers: bool) {
        let mut g = self.state.lock();
        if !covers || !g.armed || g.open {
            return;
        }
        g.armed = false;
        g.holding = true;
        self.changed.notify_all();
        while !g.open {
            self.changed.wait(&mut g);
        }
    }

    fn arm(&self) {
        self.state.lock().armed = true;
    }

    fn wait_holding(&self) {
        let mut g = self.state.lock();
        while !g.holding {
            self.changed.wait(&mut g);
        }
    }

    fn open(&self) {
        self.state.lock().open = true;
        self.changed.notify_all();
    }
}

impl BlockDevice for GateDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.wait(offset <= self.held && self.held < offset + buf.len() as u64);
        self.inner.write_at(buf, offset)
    }
    fn write_vectored_at(&self, bufs: &[std::io::IoSlice<'_>], offset: u64) -> std::io::Result<()> {
        let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        self.wait(offset <= self.held && self.held < offset + len);
        self.inner.write_vectored_at(bufs, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
}

/// fsx seed 1 (default configuration, 4 KiB blocks, two fsx at once): a
/// write to a logged truncate tail read back as the tail's older bytes.
/// Checkpoint takes the blocks off its list and then writes them home; in
/// between, the journal said it held no copy of the tail, so a write took
/// the plain data path and its data reached the device first, and the
/// checkpoint's older copy landed over it. Here the checkpoint's write of
/// the tail is held until the write and its fsync have run.
#[test]
fn a_checkpoint_under_way_never_lands_over_a_newer_write_to_a_tail() {
    for data in [DataMode::Ordered, DataMode::Writeback] {
        let bs = 4096u64;
        let mem = common::mem_image_bs(64 << 20, bs as u32);
        let probe = common::mount_mem_data(&mem, data);
        let (f, _) = probe.mknod(ROOT, b"f", 0o100644, 0, ME).unwrap();
        probe
            .write(f, 0, &vec![0x67u8; 3 * bs as usize], true)
            .unwrap();
        let tail = block_of(&probe, f, 1);
        probe.unmount().unwrap();
        drop(probe);
        let gate = Arc::new(GateDevice {
            inner: mem.clone(),
            held: tail as u64 * bs,
            state: Default::default(),
            changed: Default::default(),
        });
        let dev: Arc<dyn BlockDevice> = gate.clone();
        let cfg = MountConfig {
            data,
            ..Default::default()
        };
        let fs = Filesystem::mount(dev, &cfg).unwrap();
        truncate(&fs, f, bs + 0x133); // block 1 becomes a logged tail
        fs.journal().force_commit().unwrap(); // its copy waits for checkpoint
        gate.arm();
        let new = vec![0x96u8; 0x133];
        std::thread::scope(|s| {
            s.spawn(|| fs.journal().checkpoint_all().unwrap());
            gate.wait_holding();
            let writer = s.spawn(|| {
                fs.write(f, bs, &new, true).unwrap();
                fs.fsync(f, false).unwrap();
            });
            // Long enough for a write that bypasses the log to reach the
            // device; one that waits for the checkpoint just waits.
            std::thread::sleep(std::time::Duration::from_millis(300));
            gate.open();
            writer.join().unwrap();
        });
        let got = fs.read(f, bs, 0x133).unwrap();
        assert!(
            got == new,
            "data={data}: the tail reads {:#x}, the checkpoint's older copy",
            got[0]
        );
        fs.unmount().unwrap();
        drop(fs);
        let fs = common::mount_mem_data(&mem, data);
        assert_eq!(fs.read(f, bs, 0x133).unwrap(), new, "after a remount");
        fs.unmount().unwrap();
        common::assert_mem_clean(&mem, "after the tail's write");
    }
}

/// fsx in-process: one file's random writes (whole pages, as the kernel's
/// writeback sends them, and partial ones), truncates down and up, reads
/// checked against a model, and fsyncs.
fn exercise(fs: &Filesystem, name: &[u8], seed: u64, ops: usize) {
    const MAX: u64 = 256 << 10;
    let (f, _) = fs.mknod(ROOT, name, 0o100644, 0, ME).unwrap();
    let mut model: Vec<u8> = Vec::new();
    let mut rng = common::Rng::new(seed);
    for step in 0..ops {
        let fill = (step % 251) as u8 + 1;
        match rng.below(10) {
            0..=3 => {
                let (off, len) = if rng.below(2) == 0 {
                    (rng.below(MAX / 4096) * 4096, 4096 * (1 + rng.below(4)))
                } else {
                    (rng.below(MAX - 1), 1 + rng.below(0x8000))
                };
                let len = len.min(MAX - off);
                let data = vec![fill; len as usize];
                fs.write(f, off, &data, true).unwrap();
                let end = (off + len) as usize;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[off as usize..end].copy_from_slice(&data);
            }
            4..=5 => {
                let size = match rng.below(3) {
                    0 => rng.below(model.len() as u64 + 1),
                    _ => rng.below(MAX),
                };
                truncate(fs, f, size);
                model.resize(size as usize, 0);
            }
            6..=8 => {
                if model.is_empty() {
                    continue;
                }
                let off = rng.below(model.len() as u64);
                let len = 1 + rng.below(model.len() as u64 - off);
                let got = fs.read(f, off, len as u32).unwrap();
                let want = &model[off as usize..(off + len) as usize];
                if got != want {
                    let bad = got.iter().zip(want).position(|(a, b)| a != b).unwrap();
                    panic!(
                        "seed {seed} step {step}: byte {:#x} reads {:#x}, wrote {:#x}",
                        off + bad as u64,
                        got[bad],
                        want[bad]
                    );
                }
            }
            _ => fs.fsync(f, false).unwrap(),
        }
    }
}

/// Two exercisers on their own files while a third thread checkpoints
/// and commits at random: the interleavings of tails, checkpoints and the
/// data queue that fsx meets only under load. A 4 MiB journal (the least
/// for 4 KiB blocks) makes the log fill and checkpoint on its own too.
#[test]
fn two_exercisers_beside_checkpoints_read_back_what_they_wrote() {
    for data in [DataMode::Ordered, DataMode::Writeback] {
        let opts = MkfsOptions {
            block_size: Some(4096),
            journal_mib: Some(4),
            ..Default::default()
        };
        let size = 64u64 << 20;
        let mem = Arc::new(MemoryDevice::new(size).unwrap());
        let g = plan(&opts, size).unwrap();
        format(&*mem, &opts, &g, Zeroed::All, &mut Progress::quiet()).unwrap();
        let fs = common::mount_mem_data(&mem, data);
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut rng = common::Rng::new(99);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    match rng.below(3) {
                        0 => fs.journal().checkpoint_all().unwrap(),
                        1 => fs.journal().force_commit().unwrap(),
                        _ => std::thread::yield_now(),
                    }
                }
            });
            let a = s.spawn(|| exercise(&fs, b"a", 11, 20_000));
            let b = s.spawn(|| exercise(&fs, b"b", 13, 20_000));
            let (ra, rb) = (a.join(), b.join());
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            if let Err(e) = ra.and(rb) {
                std::panic::resume_unwind(e);
            }
        });
        fs.unmount().unwrap();
        common::assert_mem_clean(&mem, "after the exercisers");
    }
}

/// A crash with an unlinked file still open: replay brings back the
/// superblock that names it on the orphan chain, and the next mount frees
/// it. Recovery used to clear its flag in the superblock it had read
/// before replay, writing the old s_last_orphan back over the logged one:
/// the file's blocks stayed allocated to an inode nobody could reach.
#[test]
fn an_orphan_left_by_a_crash_is_freed_at_the_next_mount() {
    let mem = common::mem_image_bs(64 << 20, 4096);
    let fs = common::mount_mem_data(&mem, DataMode::Ordered);
    let free_before = fs.statfs().unwrap().free_blocks;
    let (f, _) = fs.mknod(ROOT, b"f", 0o100644, 0, ME).unwrap();
    fs.write(f, 0, &vec![5u8; 1 << 20], true).unwrap();
    fs.open(f).unwrap();
    fs.unlink(ROOT, b"f").unwrap();
    fs.fsync(f, false).unwrap(); // the orphan chain is durable
    let crashed = Arc::new(MemoryDevice::from_vec(mem.snapshot()));
    drop(fs);
    let fs = common::mount_mem_data(&crashed, DataMode::Ordered);
    assert_eq!(
        fs.statfs().unwrap().free_blocks,
        free_before,
        "the orphan's blocks are free again"
    );
    fs.unmount().unwrap();
    common::assert_mem_clean(&crashed, "after the orphan was freed");
}

/// O_TMPFILE (ext4_tmpfile): the file starts on the orphan chain with no
/// links, so a crash frees it at the next mount, and its last release
/// frees it while mounted; a link gives it a name and takes it off the
/// chain, and then it survives like any file.
#[test]
fn a_tmpfile_is_an_orphan_until_linked() {
    let mem = common::mem_image_bs(64 << 20, 4096);
    let fs = common::mount_mem_data(&mem, DataMode::Ordered);
    let free_before = fs.statfs().unwrap();
    let (t, inode) = fs.tmpfile(ROOT, 0o100600, ME, 0o022).unwrap();
    assert_eq!(inode.i_links_count, 0);
    fs.open(t).unwrap();
    fs.write(t, 0, &vec![7u8; 1 << 20], true).unwrap();
    fs.fsync(t, false).unwrap();
    let crashed = Arc::new(MemoryDevice::from_vec(mem.snapshot()));
    fs.release(t).unwrap();
    assert_eq!(
        fs.statfs().unwrap(),
        free_before,
        "released, the tmpfile's inode and blocks are free"
    );

    let (kept, _) = fs.tmpfile(ROOT, 0o100644, ME, 0).unwrap();
    fs.open(kept).unwrap();
    fs.write(kept, 0, b"named later", true).unwrap();
    let linked = fs.link(kept, ROOT, b"named").unwrap();
    assert_eq!(linked.i_links_count, 1);
    fs.release(kept).unwrap();
    fs.unmount().unwrap();
    common::assert_mem_clean(&mem, "after a tmpfile was freed and another linked");
    let fs = common::mount_mem_data(&mem, DataMode::Ordered);
    let (ino, _) = fs.lookup(ROOT, b"named").unwrap();
    assert_eq!(fs.read(ino, 0, 11).unwrap(), b"named later");
    fs.unmount().unwrap();
    drop(fs);

    let fs = common::mount_mem_data(&crashed, DataMode::Ordered);
    assert_eq!(
        fs.statfs().unwrap(),
        free_before,
        "the crashed tmpfile was freed at mount"
    );
    fs.unmount().unwrap();
    common::assert_mem_clean(&crashed, "after a crash with a tmpfile open");
}
