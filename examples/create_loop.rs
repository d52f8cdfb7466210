//! A profiling workload without FUSE: THREADS threads each create, write
//! (4 KiB), fsync and close FILES files in their own directory, straight
//! through the library, on an image made by mkfs-jbdfs. What the daemon's
//! handlers cost per file, without the transport's round trips, so that a
//! change to the create, write or commit path can be measured with
//! `valgrind --tool=callgrind` or `perf stat` instead of fs_mark's noise.
//!
//! ```sh
//! mkfs-jbdfs -q -F -b 4096 /dev/shm/loop.img 2G
//! cargo run --release --example create_loop -- /dev/shm/loop.img 2 2000
//! ```

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use jbdfs::device::file::{FileDevice, OpenOptions};
use jbdfs::device::BlockDevice;
use jbdfs::format::InodeNo;
use jbdfs::fs::namei::Caller;
use jbdfs::fs::{Filesystem, MountConfig};

const ROOT: InodeNo = InodeNo(2);
const ROOT_CALLER: Caller = Caller { uid: 0, gid: 0 };

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, image, threads, files] = args.as_slice() else {
        bail!("usage: create_loop IMAGE THREADS FILES_PER_THREAD");
    };
    let threads: usize = threads.parse().context("THREADS")?;
    let files: usize = files.parse().context("FILES_PER_THREAD")?;
    let dev: Arc<dyn BlockDevice> =
        Arc::new(FileDevice::open(Path::new(image), OpenOptions::default())?);
    let fs = Filesystem::mount(dev, &MountConfig::default())?;
    let started = Instant::now();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let fs = &fs;
                s.spawn(move || one_thread(fs, t, files))
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().unwrap_or_else(|_| bail!("a thread panicked")))
    })?;
    let secs = started.elapsed().as_secs_f64();
    fs.unmount()?;
    let total = threads * files;
    println!(
        "{total} files in {secs:.3} s: {:.0} files/s, {:.1} us per file",
        total as f64 / secs,
        secs * 1e6 / total as f64
    );
    Ok(())
}

/// fs_mark's loop for one thread: a fresh directory, then per file a
/// create, one 4 KiB write, an fsync and the close.
fn one_thread(fs: &Filesystem, thread: usize, files: usize) -> Result<()> {
    let dir_name = format!("t{thread}-{}", std::process::id());
    let (dir, _) = fs.mkdir(ROOT, dir_name.as_bytes(), 0o755, ROOT_CALLER)?;
    let body = vec![thread as u8; 4096];
    for i in 0..files {
        let name = format!("f{i:08}");
        let (ino, _) = fs.mknod_umask(dir, name.as_bytes(), 0o100644, 0, ROOT_CALLER, 0o022)?;
        fs.open(ino)?;
        fs.write_back(ino, 0, &body, true)?;
        fs.fsync(ino, false)?;
        fs.release(ino)?;
        fs.forget(ino, 1);
    }
    Ok(())
}
