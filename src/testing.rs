//! Fixtures for the crate's unit tests: a jbdfs image of 1 KiB blocks in
//! memory, mounted, and a look at what reached its device.

use std::sync::Arc;

use crate::device::{BlockDevice, MemoryDevice};
use crate::format::BlockNo;
use crate::fs::{Filesystem, MountConfig};
use crate::mkfs::{memory_image, MkfsOptions};

/// The block size of [`memory_fs`]'s images.
pub(crate) const BLOCK: usize = 1024;

/// A fresh `size`-byte image of 1 KiB blocks, mounted with `cfg`.
pub(crate) fn memory_fs(size: u64, cfg: &MountConfig) -> (Arc<MemoryDevice>, Arc<Filesystem>) {
    let mem = Arc::new(unmounted(size));
    let dev: Arc<dyn BlockDevice> = mem.clone();
    (mem, Filesystem::mount(dev, cfg).unwrap())
}

/// A fresh `size`-byte image of 1 KiB blocks.
pub(crate) fn unmounted(size: u64) -> MemoryDevice {
    let opts = MkfsOptions {
        block_size: Some(BLOCK as u32),
        ..Default::default()
    };
    memory_image(&opts, size).unwrap()
}

/// The bytes of `block` on the device, as written so far.
pub(crate) fn on_device(mem: &MemoryDevice, block: BlockNo) -> Vec<u8> {
    let mut bytes = vec![0u8; BLOCK];
    mem.read_at(&mut bytes, block.0 as u64 * BLOCK as u64)
        .unwrap();
    bytes
}
