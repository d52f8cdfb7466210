//! Fresh images: made by jbdfs's mkfs (as files or in memory) and by
//! mke2fs.

use std::ffi::OsStr;
use std::sync::Arc;

use jbdfs::device::MemoryDevice;
use jbdfs::mkfs::MkfsOptions;

use crate::cmd::{run, Out};
use crate::temp::TempImage;

/// A new image file made by jbdfs's mkfs with `options`, removed on drop.
pub fn jbdfs_image_with(tag: &str, options: jbdfs::mkfs::MkfsOptions, size: u64) -> TempImage {
    let img = TempImage::new(tag);
    let req = jbdfs::mkfs::Request {
        options,
        size: Some(size),
        quiet: true,
        ..Default::default()
    };
    jbdfs::mkfs::make_filesystem(&img.path, &req).expect("mkfs");
    img
}

/// A fresh jbdfs image file of `size` bytes with `block_size` blocks,
/// removed on drop.
pub fn jbdfs_image(tag: &str, size: u64, block_size: u32) -> TempImage {
    let opts = MkfsOptions {
        block_size: Some(block_size),
        ..Default::default()
    };
    jbdfs_image_with(tag, opts, size)
}

/// A fresh jbdfs image file of `size` bytes with 4 KiB blocks, removed on
/// drop.
pub fn image_4k(tag: &str, size: u64) -> TempImage {
    jbdfs_image(tag, size, 4096)
}

/// A fresh ext3 image of `size` bytes in memory, made by jbdfs's mkfs.
pub fn mem_image(size: u64, opts: &MkfsOptions) -> Arc<MemoryDevice> {
    Arc::new(jbdfs::mkfs::memory_image(opts, size).expect("mkfs in memory"))
}

/// A fresh in-memory image of `size` bytes with `block_size` blocks.
pub fn mem_image_bs(size: u64, block_size: u32) -> Arc<MemoryDevice> {
    mem_image(
        size,
        &MkfsOptions {
            block_size: Some(block_size),
            ..Default::default()
        },
    )
}

/// A small image with 1 KiB blocks (many groups, quick to check).
pub fn small_image(size: u64) -> Arc<MemoryDevice> {
    mem_image_bs(size, 1024)
}

/// Writes `bytes` to a temporary image file.
pub fn to_file(bytes: &[u8], tag: &str) -> TempImage {
    let img = TempImage::new(tag);
    std::fs::write(&img.path, bytes).expect("write image file");
    img
}

/// A new image file of `size` bytes made by `mke2fs -q -F -t ext3` with
/// `args` added (`-b 1024`, `-O ^dir_index`, ...), removed on drop. Err
/// is mke2fs's output when it fails (or is missing: check with
/// `require!("mke2fs")` first).
pub fn mke2fs_image(tag: &str, size: u64, args: &[&str]) -> Result<TempImage, Out> {
    let img = TempImage::sparse(tag, size);
    let mut argv: Vec<&OsStr> = vec![
        OsStr::new("-q"),
        OsStr::new("-F"),
        OsStr::new("-t"),
        OsStr::new("ext3"),
    ];
    argv.extend(args.iter().map(OsStr::new));
    argv.push(img.path.as_os_str());
    let o = run("mke2fs", argv);
    if !o.success() {
        return Err(o);
    }
    Ok(img)
}
