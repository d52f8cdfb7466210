// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! Journal and space limits: a journal filled again and again, the
//! smallest journal (1024 blocks), single writes bigger than the whole
//! journal (data=journal and ordered), ENOSPC in the middle of a
//! multi-block write, and inode exhaustion. Each ends with e2fsck -fn.

use jbdfs_testkit as common;
use jbdfs_testkit as robust_common;

use std::sync::Arc;

use jbdfs::device::MemoryDevice;
use jbdfs::fs::DataMode;
use jbdfs::mkfs::MkfsOptions;
use robust_common::*;

fn image(
    size: u64,
    block_size: u32,
    journal_mib: Option<u64>,
    inodes: Option<u64>,
) -> Arc<MemoryDevice> {
    mem_image(
        size,
        &MkfsOptions {
            block_size: Some(block_size),
            journal_mib,
            inodes_count: inodes,
            ..Default::default()
        },
    )
}

fn journal_blocks(mem: &MemoryDevice) -> u64 {
    let img = to_file(&mem.snapshot(), "limits-journal");
    let h = common::dumpe2fs_header(&img.path);
    h.journal_bytes() / h.num("Block size")
}

/// File i's content in the journal-filling workload.
fn content(i: u32) -> Vec<u8> {
    pattern(100 + (i as usize % 7) * 900, i)
}

/// The smallest journal mke2fs makes (1024 blocks), filled many times
/// over by small transactions, in both block sizes; a crash copy taken
/// with the log in use recovers clean too.
#[test]
fn a_tiny_journal_filled_many_times() {
    for (bs, mib) in [(1024u32, 1u64), (4096, 4)] {
        let mem = image(64 << 20, bs, Some(mib), None);
        assert_eq!(journal_blocks(&mem), 1024, "block size {bs}");
        let fs = mount_mem_data(&mem, DataMode::Ordered);
        let (d, _) = fs.mkdir(ROOT, b"many", 0o755, ME).unwrap();
        for i in 0..3000u32 {
            let f = make_file(&fs, d, &format!("f{i}"), &content(i));
            if i % 3 == 0 {
                fs.unlink(d, format!("f{i}").as_bytes()).unwrap();
            }
            if i % 500 == 0 {
                fs.fsync(f, false).unwrap();
            }
        }
        let stats = fs.journal_stats();
        let crash = mem.snapshot();
        fs.unmount().unwrap();
        assert_mem_clean(&mem, &format!("a 1024-block journal, {bs}-byte blocks"));
        // The crash copy: replayed by jbdfs, then clean.
        let again = Arc::new(MemoryDevice::from_vec(crash));
        let fs = mount_mem(&again);
        let (d, _) = fs.lookup(ROOT, b"many").unwrap();
        let (f, _) = fs.lookup(d, b"f2500").unwrap();
        assert_eq!(read_all(&fs, f), content(2500), "{stats}");
        fs.unmount().unwrap();
        assert_mem_clean(&again, "the crash copy after jbdfs's replay");
    }
}

/// One write of 8 MiB in data=journal, through a 1 MiB journal: it is
/// split into handles the log can hold and lands whole.
#[test]
fn a_data_journal_write_bigger_than_the_journal_is_split() {
    let mem = image(32 << 20, 1024, Some(1), None);
    let fs = mount_mem_data(&mem, DataMode::Journal);
    let data = pattern(8 << 20, 77);
    let (f, _) = fs.mknod(ROOT, b"huge", 0o100644, 0, ME).unwrap();
    assert_eq!(fs.write(f, 0, &data, true).unwrap(), data.len());
    fs.fsync(f, false).unwrap();
    assert!(read_all(&fs, f) == data);
    fs.unmount().unwrap();
    assert_mem_clean(&mem, "an 8 MiB data=journal write through a 1 MiB journal");
    let fs = mount_mem(&mem);
    let (f, _) = fs.lookup(ROOT, b"huge").unwrap();
    assert!(read_all(&fs, f) == data);
    fs.unmount().unwrap();
}

/// One ordered write whose metadata alone (over a thousand indirect
/// blocks) is more than a 1024-block journal holds: it must land whole or
/// fail cleanly, never abort the journal.
#[test]
fn an_ordered_write_whose_metadata_outgrows_the_journal() {
    let mem = image(400 << 20, 1024, Some(1), None);
    let fs = mount_mem_data(&mem, DataMode::Ordered);
    let data = pattern(300 << 20, 5);
    let (f, _) = fs.mknod(ROOT, b"huge", 0o100644, 0, ME).unwrap();
    assert_eq!(fs.write(f, 0, &data, true).unwrap(), data.len());
    fs.fsync(f, false).unwrap();
    let more = make_file(&fs, ROOT, "after", b"the journal still works");
    fs.fsync(more, false).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    assert_mem_clean(&mem, "a 300 MiB ordered write through a 1 MiB journal");
    let fs = mount_mem(&mem);
    let (f, _) = fs.lookup(ROOT, b"huge").unwrap();
    assert!(fs.read(f, (300 << 20) - 4096, 4096).unwrap() == data[(300 << 20) - 4096..]);
    // Freeing it all is as big a change: it must commit too.
    fs.unlink(ROOT, b"huge").unwrap();
    let (g, _) = fs.mknod(ROOT, b"preallocated", 0o100644, 0, ME).unwrap();
    fs.fallocate(g, 0, 200 << 20, false, true).unwrap();
    fs.fsync(g, false).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    assert_mem_clean(&mem, "after freeing 300 MiB and a 200 MiB fallocate");
}

/// ENOSPC in the middle of a multi-block write: the write is short (or
/// fails), nothing leaks — statfs agrees with e2fsck, and deleting the
/// file gives back exactly what it took.
#[test]
fn enospc_in_the_middle_of_a_write_leaks_nothing() {
    enospc_mid_write(DataMode::Ordered);
}

#[test]
fn enospc_in_the_middle_of_a_data_journal_write_leaks_nothing() {
    enospc_mid_write(DataMode::Journal);
}

fn enospc_mid_write(data: DataMode) {
    let mem = image(8 << 20, 1024, None, None);
    let fs = mount_mem_data(&mem, data);
    let before = fs.statfs().unwrap();
    let big = pattern(before.free_blocks as usize * 1024 + (1 << 20), 3);
    let (f, _) = fs.mknod(ROOT, b"filler", 0o100644, 0, ME).unwrap();
    let wrote = match fs.write(f, 0, &big, true) {
        Ok(n) => n,
        Err(e) => {
            assert_eq!(e.errno(), libc::ENOSPC);
            0
        }
    };
    assert!(wrote < big.len());
    assert_eq!(
        errno_of(fs.write(f, wrote as u64, &big[wrote..wrote + 65536], true)),
        libc::ENOSPC
    );
    assert_eq!(fs.getattr(f).unwrap().i_size, wrote as u64);
    assert!(read_all(&fs, f) == big[..wrote]);
    let full = fs.statfs().unwrap();
    assert_eq!(full.free_blocks, 0, "{full:?}");
    fs.unmount().unwrap();
    drop(fs);
    assert_mem_clean(&mem, "a filesystem filled by a short write");
    let fs = mount_mem_data(&mem, data);
    fs.unlink(ROOT, b"filler").unwrap();
    let after = fs.statfs().unwrap();
    assert_eq!(after.free_blocks, before.free_blocks, "blocks leaked");
    assert_eq!(after.free_inodes, before.free_inodes, "inodes leaked");
    fs.unmount().unwrap();
    assert_mem_clean(&mem, "after deleting the filler");
}

/// Inode exhaustion: create gets ENOSPC (as do mkdir and symlink), the
/// image stays clean, and a freed inode can be used again.
#[test]
fn inode_exhaustion_gives_enospc() {
    let mem = image(8 << 20, 1024, None, Some(128));
    let fs = mount_mem(&mem);
    let free = fs.statfs().unwrap().free_inodes;
    assert!(free > 0 && free <= 128, "{free}");
    for i in 0..free {
        fs.mknod(ROOT, format!("i{i}").as_bytes(), 0o100644, 0, ME)
            .unwrap();
    }
    assert_eq!(fs.statfs().unwrap().free_inodes, 0);
    assert_eq!(
        errno_of(fs.mknod(ROOT, b"one-more", 0o100644, 0, ME)),
        libc::ENOSPC
    );
    assert_eq!(errno_of(fs.mkdir(ROOT, b"dir", 0o755, ME)), libc::ENOSPC);
    assert_eq!(
        errno_of(fs.symlink(ROOT, b"sym", b"target", ME)),
        libc::ENOSPC
    );
    assert!(fs.lookup(ROOT, b"one-more").is_err());
    fs.unlink(ROOT, b"i0").unwrap();
    fs.mknod(ROOT, b"one-more", 0o100644, 0, ME).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    assert_mem_clean(&mem, "a filesystem out of inodes");
}

/// data=journal: a file bigger than 250 MiB with 1 KiB blocks was logged
/// block by block; deleting it frees more blocks than a 1024-block log has
/// room for revoke records. Only blocks whose copies are still in the log
/// need one, so the delete commits and the journal keeps working.
#[test]
fn a_data_journal_delete_bigger_than_the_journal() {
    let mem = image(300 << 20, 1024, Some(1), None);
    let fs = mount_mem_data(&mem, DataMode::Journal);
    let (f, _) = fs.mknod(ROOT, b"huge", 0o100644, 0, ME).unwrap();
    let chunk = pattern(1 << 20, 9);
    for i in 0..260u64 {
        fs.write(f, i << 20, &chunk, true).unwrap();
    }
    fs.fsync(f, false).unwrap();
    fs.unlink(ROOT, b"huge").unwrap();
    let g = make_file(&fs, ROOT, "after", b"the journal still works");
    fs.fsync(g, false).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    assert_mem_clean(
        &mem,
        "a 260 MiB data=journal file deleted through a 1 MiB journal",
    );
}
