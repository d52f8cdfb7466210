//! Helpers shared by the robustness tests (tests/robust_*.rs): small images
//! made in memory, mounting over a fault device, and the fsck oracle
//! "e2fsck -fy repairs, then e2fsck -fn finds nothing".
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use jbdfs::device::{BlockDevice, FaultDevice, MemoryDevice};
use jbdfs::fs::namei::Caller;
use jbdfs::fs::{Filesystem, FsError, MountConfig};
use jbdfs::mkfs::{format, plan, MkfsOptions, Zeroed};
use jbdfs::util::Progress;

use crate::common::{run, Out, TempImage};

pub const ROOT: jbdfs::format::InodeNo = jbdfs::format::InodeNo(2);
pub const ME: Caller = Caller { uid: 0, gid: 0 };

/// A fresh ext3 image of `size` bytes in memory, made by jbdfs's mkfs.
pub fn mem_image(size: u64, opts: &MkfsOptions) -> Arc<MemoryDevice> {
    let mem = Arc::new(MemoryDevice::new(size).unwrap());
    let g = plan(opts, size).unwrap();
    format(&*mem, opts, &g, Zeroed::All, &mut Progress::quiet()).unwrap();
    mem
}

/// A small image with 1 KiB blocks (many groups, quick to check).
pub fn small_image(size: u64) -> Arc<MemoryDevice> {
    mem_image(
        size,
        &MkfsOptions {
            block_size: Some(1024),
            ..Default::default()
        },
    )
}

/// Mounts `mem` with a fault device in between.
pub fn mount_faulty(
    mem: &Arc<MemoryDevice>,
    cfg: &MountConfig,
) -> (Arc<FaultDevice>, Arc<Filesystem>) {
    let fault = Arc::new(FaultDevice::new(mem.clone()));
    let dev: Arc<dyn BlockDevice> = fault.clone();
    let fs = Filesystem::mount(dev, cfg).unwrap();
    (fault, fs)
}

pub fn mount_mem(mem: &Arc<MemoryDevice>) -> Arc<Filesystem> {
    let dev: Arc<dyn BlockDevice> = mem.clone();
    Filesystem::mount(dev, &MountConfig::default()).unwrap()
}

/// The errno of a failed operation, panicking if it succeeded.
pub fn errno_of<T: std::fmt::Debug>(r: Result<T, FsError>) -> i32 {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.errno(),
    }
}

/// Writes `bytes` to a temporary image file.
pub fn to_file(bytes: &[u8], tag: &str) -> TempImage {
    let img = TempImage::new(tag);
    std::fs::write(&img.path, bytes).unwrap();
    img
}

pub fn e2fsck_fy(image: &Path) -> Out {
    run("e2fsck", [std::ffi::OsStr::new("-fy"), image.as_os_str()])
}

/// e2fsck -fy may repair (exit 0, 1 or 2); afterwards -fn must be clean.
pub fn assert_repairs_to_clean(image: &Path, what: &str) -> Out {
    let fixed = e2fsck_fy(image);
    assert!(
        matches!(fixed.code, Some(0..=2)),
        "e2fsck -fy could not repair {what}:\n{}",
        fixed.describe()
    );
    crate::common::assert_e2fsck_clean(image, &format!("{what}, after e2fsck -fy"));
    fixed
}

/// A file's whole content.
pub fn read_all(fs: &Filesystem, ino: jbdfs::format::InodeNo) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().i_size;
    fs.read(ino, 0, size as u32).unwrap()
}

/// A file named `name` in `dir` holding `data`.
pub fn make_file(
    fs: &Filesystem,
    dir: jbdfs::format::InodeNo,
    name: &str,
    data: &[u8],
) -> jbdfs::format::InodeNo {
    let (f, _) = fs.mknod(dir, name.as_bytes(), 0o100644, 0, ME).unwrap();
    assert_eq!(fs.write(f, 0, data, true).unwrap(), data.len());
    f
}

/// Deterministic bytes for file contents.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed) >> 13) as u8)
        .collect()
}
