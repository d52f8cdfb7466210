//! Mount an image that may be damaged and use all of it: list every
//! directory, stat and read every file, read symlinks and attributes, then
//! (optionally) write — create, write, rename, link, unlink, rmdir — and
//! unmount. Every failure must be an error value; a panic or a hang is the
//! bug. Shared by tests/robust_damage.rs and the fuzz targets (fuzz/, which
//! includes this file by path), and the decoder of the fuzz targets'
//! "sparse image" input format lives here too.

#![allow(dead_code)]

use std::collections::HashSet;
use std::sync::Arc;

use jbdfs::device::{BlockDevice, MemoryDevice};
use jbdfs::format::InodeNo;
use jbdfs::fs::namei::Caller;
use jbdfs::fs::{Filesystem, MountConfig};

const ROOT: InodeNo = InodeNo(2);
const WHO: Caller = Caller { uid: 0, gid: 0 };

/// Bounds that keep a walk of a hostile image short.
pub const MAX_INODES: usize = 2000;
pub const MAX_ENTRIES_PER_DIR: usize = 4000;
pub const MAX_READ: u64 = 256 << 10;

/// What a walk did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WalkReport {
    pub dirs: usize,
    pub files: usize,
    pub bytes_read: u64,
    /// Requests that failed (EIO for damaged parts, and the like).
    pub errors: usize,
    pub writes_ok: usize,
    pub writes_failed: usize,
}

/// How a damaged image fared.
#[derive(Debug)]
pub enum Outcome {
    /// The mount was refused, with this message.
    Refused(String),
    Served(WalkReport),
}

/// Mounts `image` in memory, walks it (and writes, if asked), unmounts.
pub fn mount_and_walk(image: Vec<u8>, writes: bool) -> Outcome {
    let mem = Arc::new(MemoryDevice::from_vec(image));
    let dev: Arc<dyn BlockDevice> = mem;
    let cfg = MountConfig {
        cache_size: 4 << 20,
        ..Default::default()
    };
    let fs = match Filesystem::mount(dev, &cfg) {
        Ok(fs) => fs,
        Err(e) => return Outcome::Refused(e.to_string()),
    };
    let mut report = WalkReport::default();
    let dirs = walk(&fs, &mut report);
    if writes {
        scribble(&fs, &dirs, &mut report);
        walk(&fs, &mut report);
    }
    if fs.unmount().is_err() {
        report.errors += 1;
    }
    Outcome::Served(report)
}

/// Visits every inode reachable from the root once; returns the
/// directories it could list.
pub fn walk(fs: &Filesystem, report: &mut WalkReport) -> Vec<InodeNo> {
    let mut seen = HashSet::new();
    let mut queue = vec![ROOT];
    let mut dirs = Vec::new();
    seen.insert(ROOT);
    while let Some(dir) = queue.pop() {
        report.dirs += 1;
        let Some(entries) = list(fs, dir, report) else {
            continue;
        };
        dirs.push(dir);
        for (ino, name) in entries {
            if name == b"." || name == b".." {
                continue;
            }
            // A lookup of what readdir listed must not fail differently.
            if fs.lookup(dir, &name).is_err() {
                report.errors += 1;
            }
            if seen.len() >= MAX_INODES || !seen.insert(ino) {
                continue;
            }
            match fs.getattr(ino) {
                Ok(inode) if inode.is_dir() => queue.push(ino),
                Ok(inode) => visit_file(fs, ino, &inode, report),
                Err(_) => report.errors += 1,
            }
        }
    }
    dirs
}

fn list(fs: &Filesystem, dir: InodeNo, report: &mut WalkReport) -> Option<Vec<(InodeNo, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut cookie = 0;
    while out.len() < MAX_ENTRIES_PER_DIR {
        match fs.readdir(dir, cookie, 128) {
            Ok(batch) if batch.is_empty() => break,
            Ok(batch) => {
                let next = batch.last().map(|e| e.next).unwrap_or(cookie);
                if next <= cookie {
                    report.errors += 1;
                    break;
                }
                cookie = next;
                out.extend(batch.into_iter().map(|e| (e.ino, e.name)));
            }
            Err(_) => {
                report.errors += 1;
                return if out.is_empty() { None } else { Some(out) };
            }
        }
    }
    Some(out)
}

fn visit_file(
    fs: &Filesystem,
    ino: InodeNo,
    inode: &jbdfs::format::inode::Inode,
    report: &mut WalkReport,
) {
    report.files += 1;
    if fs.listxattr(ino).is_err() {
        report.errors += 1;
    }
    if inode.is_symlink() {
        if fs.readlink(ino).is_err() {
            report.errors += 1;
        }
        return;
    }
    if !inode.is_reg() {
        return;
    }
    let end = inode.i_size.min(MAX_READ);
    let mut at = 0;
    while at < end {
        match fs.read(ino, at, 64 << 10) {
            Ok(data) if data.is_empty() => break,
            Ok(data) => {
                report.bytes_read += data.len() as u64;
                at += data.len() as u64;
            }
            Err(_) => {
                report.errors += 1;
                break;
            }
        }
    }
}

/// Changes the tree in each listed directory (the first few): every
/// outcome is acceptable except a panic.
pub fn scribble(fs: &Filesystem, dirs: &[InodeNo], report: &mut WalkReport) {
    let mut tally = |ok: bool| {
        if ok {
            report.writes_ok += 1;
        } else {
            report.writes_failed += 1;
        }
    };
    for (i, &dir) in dirs.iter().take(8).enumerate() {
        let name = format!("scribble-{i}");
        let file = fs.mknod(dir, name.as_bytes(), 0o100644, 0, WHO);
        tally(file.is_ok());
        if let Ok((f, _)) = file {
            let data = vec![i as u8 ^ 0x5a; 5000 + i * 3000];
            tally(fs.write(f, 0, &data, true).is_ok());
            tally(fs.link(f, dir, b"scribble-link").is_ok());
            tally(
                fs.rename(dir, name.as_bytes(), ROOT, b"moved", Default::default())
                    .is_ok(),
            );
            tally(fs.unlink(dir, b"scribble-link").is_ok());
        }
        let sub = fs.mkdir(dir, b"scribble-dir", 0o755, WHO);
        tally(sub.is_ok());
        if let Ok((d, _)) = sub {
            tally(fs.symlink(d, b"s", b"../target", WHO).is_ok());
            tally(fs.unlink(d, b"s").is_ok());
            tally(fs.rmdir(dir, b"scribble-dir").is_ok());
        }
    }
    tally(fs.unlink(ROOT, b"moved").is_ok());
    tally(fs.fsync(ROOT, false).is_ok());
}

/// The fuzz targets' image format: records of a 2-byte little-endian block
/// number (modulo the device's blocks) and up to 1024 bytes written at that
/// 1 KiB block of an all-zero 4 MiB device. Seeds are made from real
/// images by fuzz/make-seeds.sh, keeping only their non-zero blocks.
pub const SPARSE_DEVICE: usize = 4 << 20;
pub const SPARSE_BLOCK: usize = 1024;

pub fn sparse_image(input: &[u8]) -> Vec<u8> {
    let mut img = vec![0u8; SPARSE_DEVICE];
    let blocks = SPARSE_DEVICE / SPARSE_BLOCK;
    for rec in input.chunks(2 + SPARSE_BLOCK) {
        if rec.len() < 2 {
            break;
        }
        let block = u16::from_le_bytes([rec[0], rec[1]]) as usize % blocks;
        let data = &rec[2..];
        img[block * SPARSE_BLOCK..block * SPARSE_BLOCK + data.len()].copy_from_slice(data);
    }
    img
}
