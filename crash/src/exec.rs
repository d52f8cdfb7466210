//! Runs a workload on jbdfs in-process: a fresh image in memory, a
//! recording device streaming to a log file, the mount in the chosen data
//! mode, and a mark `op K` in the log after operation K returns.

use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, Context};
use jbdfs::device::{BlockDevice, MemoryDevice, RecordingDevice};
use jbdfs::format::InodeNo;
use jbdfs::fs::namei::{Caller, SetAttr};
use jbdfs::fs::{Filesystem, MountConfig};
use jbdfs::mkfs::{format, plan, MkfsOptions, Zeroed};
use jbdfs::util::Progress;

use crate::model::Op;

pub(crate) const ROOT: InodeNo = InodeNo(2);
pub(crate) const ME: Caller = Caller { uid: 0, gid: 0 };
/// Small, so that e2fsck of a crash state takes milliseconds.
pub(crate) const IMAGE_SIZE: u64 = 8 << 20;
/// The images' block size (as small images get from mke2fs).
pub(crate) const BLOCK_SIZE: usize = 1024;

/// The three data modes: the filesystem's own.
pub(crate) use jbdfs::fs::DataMode as Mode;

pub(crate) const MODES: [Mode; 3] = Mode::ALL;

/// The mode a name given on the command line or in a log's description
/// names.
pub(crate) fn parse_mode(s: &str) -> anyhow::Result<Mode> {
    Mode::from_option(s).ok_or_else(|| anyhow!("unknown data mode {s:?} ({})", Mode::EXPECTED))
}

/// How the workloads mount, in `mode`.
pub(crate) fn mount_config(mode: Mode) -> MountConfig {
    MountConfig {
        data: mode,
        cache_size: 16 << 20,
        ..Default::default()
    }
}

/// A fresh jbdfs image (1 KiB blocks, as small images get from mke2fs).
pub(crate) fn fresh_image() -> anyhow::Result<MemoryDevice> {
    let opts = MkfsOptions {
        block_size: Some(BLOCK_SIZE as u32),
        ..Default::default()
    };
    let mem = MemoryDevice::new(IMAGE_SIZE)?;
    let g = plan(&opts, IMAGE_SIZE)?;
    format(&mem, &opts, &g, Zeroed::All, &mut Progress::quiet())?;
    Ok(mem)
}

/// Runs `ops` and leaves the log at `log` (with `log`.base), as if the
/// machine had crashed after the last operation: nothing is unmounted.
pub(crate) fn record(ops: &[Op], mode: Mode, log: &Path, description: &str) -> anyhow::Result<()> {
    let mem: Arc<dyn BlockDevice> = Arc::new(fresh_image()?);
    let rec = Arc::new(RecordingDevice::to_file(mem, log, description)?);
    let dev: Arc<dyn BlockDevice> = rec.clone();
    let fs = Filesystem::mount(dev, &mount_config(mode)).map_err(|e| anyhow!("mount: {e}"))?;
    rec.try_mark("op 0")?;
    for (i, op) in ops.iter().enumerate() {
        run_op(&fs, op).with_context(|| format!("operation {} ({op:?})", i + 1))?;
        rec.try_mark(&format!("op {}", i + 1))?;
    }
    rec.sync_log()?;
    Ok(())
}

/// The inode a path names, walking from the root.
pub(crate) fn resolve(fs: &Filesystem, path: &str) -> jbdfs::fs::Result<InodeNo> {
    let mut ino = ROOT;
    for part in path.split('/').filter(|p| !p.is_empty() && *p != ".") {
        ino = fs.lookup(ino, part.as_bytes())?.0;
    }
    Ok(ino)
}

/// The directory holding `path` and its last component.
fn split(fs: &Filesystem, path: &str) -> jbdfs::fs::Result<(InodeNo, Vec<u8>)> {
    let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
    Ok((resolve(fs, dir)?, name.as_bytes().to_vec()))
}

fn run_op(fs: &Filesystem, op: &Op) -> anyhow::Result<()> {
    let err = |e: jbdfs::fs::FsError| anyhow!("{e}");
    match op {
        Op::Create(p) => {
            let (d, n) = split(fs, p).map_err(err)?;
            fs.mknod(d, &n, 0o100644, 0, ME).map_err(err)?;
        }
        Op::Mkdir(p) => {
            let (d, n) = split(fs, p).map_err(err)?;
            fs.mkdir(d, &n, 0o755, ME).map_err(err)?;
        }
        Op::Symlink { path, target } => {
            let (d, n) = split(fs, path).map_err(err)?;
            fs.symlink(d, &n, target, ME).map_err(err)?;
        }
        Op::Write {
            path,
            off,
            len,
            seed,
        } => {
            let f = resolve(fs, path).map_err(err)?;
            let data = crate::model::pattern(*seed, *off, *len);
            let n = fs.write(f, *off, &data, true).map_err(err)?;
            anyhow::ensure!(n == data.len(), "short write: {n} of {}", data.len());
        }
        Op::Fallocate {
            path,
            off,
            len,
            keep_size,
        } => {
            let f = resolve(fs, path).map_err(err)?;
            match fs.fallocate(f, *off, *len, *keep_size, true) {
                // Past the last block, KEEP_SIZE is refused: ext3 cannot own
                // blocks beyond i_size (docs/CRASH.md, CRASH-2). It changes
                // no content either way, so the model needs no change.
                Err(jbdfs::fs::FsError::NotSupported) if *keep_size => {}
                r => r.map_err(err)?,
            }
        }
        Op::PunchHole { path, off, len } => {
            let f = resolve(fs, path).map_err(err)?;
            fs.punch_hole(f, *off, *len).map_err(err)?;
        }
        Op::Truncate { path, size } => {
            let f = resolve(fs, path).map_err(err)?;
            let a = SetAttr {
                size: Some(*size),
                ..Default::default()
            };
            fs.setattr(f, &a, ME).map_err(err)?;
        }
        Op::Link { from, to } => {
            let f = resolve(fs, from).map_err(err)?;
            let (d, n) = split(fs, to).map_err(err)?;
            fs.link(f, d, &n).map_err(err)?;
        }
        Op::Unlink(p) => {
            let (d, n) = split(fs, p).map_err(err)?;
            fs.unlink(d, &n).map_err(err)?;
        }
        Op::Rmdir(p) => {
            let (d, n) = split(fs, p).map_err(err)?;
            fs.rmdir(d, &n).map_err(err)?;
        }
        Op::Rename { from, to } => {
            let (od, on) = split(fs, from).map_err(err)?;
            let (nd, nn) = split(fs, to).map_err(err)?;
            fs.rename(od, &on, nd, &nn, Default::default())
                .map_err(err)?;
        }
        Op::SetXattr { path, name, value } => {
            let f = resolve(fs, path).map_err(err)?;
            fs.setxattr(f, name, value, Default::default())
                .map_err(err)?;
        }
        Op::RemoveXattr { path, name } => {
            let f = resolve(fs, path).map_err(err)?;
            fs.removexattr(f, name).map_err(err)?;
        }
        Op::Fsync(p) => fs.fsync(resolve(fs, p).map_err(err)?, false).map_err(err)?,
        Op::Fdatasync(p) => fs.fsync(resolve(fs, p).map_err(err)?, true).map_err(err)?,
        Op::Sync => fs.sync().map_err(err)?,
    }
    Ok(())
}
