//! Helpers shared by the in-process crash tests: a fresh small image and
//! the device rebuilt from a recorded log.

use std::sync::Arc;

use jbdfs::device::{Event, MemoryDevice};
use jbdfs::mkfs::MkfsOptions;

/// A fresh jbdfs image of `size` bytes with 1 KiB blocks, in memory.
pub fn fresh_image(size: u64) -> Arc<MemoryDevice> {
    let opts = MkfsOptions {
        block_size: Some(1024),
        ..Default::default()
    };
    crate::images::mem_image(size, &opts)
}

/// Applies the writes among `events` to `img`.
pub fn apply_writes(img: &mut [u8], events: &[Event]) {
    for e in events {
        if let Event::Write { offset, data } = e {
            let o = *offset as usize;
            img[o..o + data.len()].copy_from_slice(data);
        }
    }
}

/// The device as it stood after the first `upto` events.
pub fn image_after(base: &[u8], events: &[Event], upto: usize) -> Vec<u8> {
    let mut img = base.to_vec();
    apply_writes(&mut img, &events[..upto]);
    img
}
