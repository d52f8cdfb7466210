//! Mounting jbdfs in process (no FUSE): over an in-memory image, over a
//! fault device, over an image file; and small helpers for what the tests
//! do through the filesystem's API.

use std::path::Path;
use std::sync::Arc;

use jbdfs::device::{BlockDevice, FaultDevice, FileDevice, MemoryDevice, OpenOptions};
use jbdfs::format::InodeNo;
use jbdfs::fs::namei::Caller;
use jbdfs::fs::{DataMode, Filesystem, FsError, MountConfig};

/// The root directory's inode.
pub const ROOT: InodeNo = InodeNo(2);
/// Root as the caller of an operation.
pub const ME: Caller = Caller { uid: 0, gid: 0 };

/// Mounts an in-memory image with `cfg`.
pub fn mount_mem_cfg(mem: &Arc<MemoryDevice>, cfg: &MountConfig) -> Arc<Filesystem> {
    let dev: Arc<dyn BlockDevice> = mem.clone();
    Filesystem::mount(dev, cfg).expect("mount the in-memory image")
}

/// Mounts an in-memory image with the default options.
pub fn mount_mem(mem: &Arc<MemoryDevice>) -> Arc<Filesystem> {
    mount_mem_cfg(mem, &MountConfig::default())
}

/// Mounts an in-memory image in data mode `data`.
pub fn mount_mem_data(mem: &Arc<MemoryDevice>, data: DataMode) -> Arc<Filesystem> {
    mount_mem_cfg(
        mem,
        &MountConfig {
            data,
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
    let fs = Filesystem::mount(dev, cfg).expect("mount over the fault device");
    (fault, fs)
}

/// Mounts an image file with `cfg`.
pub fn mount_file_cfg(image: &Path, cfg: &MountConfig) -> Arc<Filesystem> {
    let dev = FileDevice::open(image, OpenOptions::default()).expect("open the image file");
    Filesystem::mount(Arc::new(dev), cfg).expect("mount the image file")
}

/// Mounts an image file with the default options.
pub fn mount_file(image: &Path) -> Arc<Filesystem> {
    mount_file_cfg(image, &MountConfig::default())
}

/// The errno of a failed operation, panicking if it succeeded.
pub fn errno_of<T: std::fmt::Debug>(r: Result<T, FsError>) -> i32 {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.errno(),
    }
}

/// A file's whole content.
pub fn read_all(fs: &Filesystem, ino: InodeNo) -> Vec<u8> {
    let size = fs.getattr(ino).expect("getattr").i_size;
    fs.read(ino, 0, size as u32).expect("read")
}

/// A file named `name` in `dir` holding `data`.
pub fn make_file(fs: &Filesystem, dir: InodeNo, name: &str, data: &[u8]) -> InodeNo {
    let (f, _) = fs
        .mknod(dir, name.as_bytes(), 0o100644, 0, ME)
        .expect("mknod");
    assert_eq!(fs.write(f, 0, data, true).expect("write"), data.len());
    f
}

/// Deterministic bytes for file contents.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed) >> 13) as u8)
        .collect()
}
