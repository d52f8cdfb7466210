//! `mkfs.jbdfs -d ROOTDIR`: the new filesystem filled from a directory
//! tree, as `mke2fs -d` does it. The image is mounted in process and the
//! tree copied through the filesystem's own operations (mknod, mkdir,
//! symlink, link, write, setxattr, setattr), so that directories (htree
//! included), block maps, xattr blocks, ACLs and the allocator's placement
//! are the ones the daemon writes, with no second encoder of them here;
//! then it is unmounted cleanly.
//!
//! Entries are copied in name order and directories' times set after their
//! contents, so that with a fixed clock (SOURCE_DATE_EPOCH) the same tree
//! gives the same image.

use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::device::BlockDevice;
use crate::format::inode::{Timestamp, S_IFBLK, S_IFCHR, S_IFIFO, S_IFREG, S_IFSOCK};
use crate::format::InodeNo;
use crate::fs::namei::{Caller, SetAttr};
use crate::fs::xattr::SetMode;
use crate::fs::{FsError, MountConfig};

/// Why the tree could not be copied; each names the source path.
#[derive(Debug, thiserror::Error)]
pub enum PopulateError {
    #[error("{path}: cannot read: {error}")]
    Read { path: PathBuf, error: io::Error },
    #[error("{path}: does not fit in the new filesystem")]
    NoSpace { path: PathBuf },
    #[error("{path}: {error}")]
    Fs { path: PathBuf, error: FsError },
    #[error("cannot mount the new filesystem to fill it: {0}")]
    Mount(FsError),
    #[error("cannot unmount the filled filesystem: {0}")]
    Unmount(FsError),
}

/// Copying reads this much of a file at a time.
const CHUNK: usize = 1 << 20;

/// Copies the tree under `root` into the filesystem on `dev`.
pub(super) fn populate(dev: Arc<dyn BlockDevice>, root: &Path) -> Result<(), PopulateError> {
    let fs =
        crate::fs::Filesystem::mount(dev, &MountConfig::default()).map_err(PopulateError::Mount)?;
    let mut c = Copier {
        fs: &fs,
        links: HashMap::new(),
    };
    let res = c.dir(root, InodeNo(crate::format::inode::ino::EXT2_ROOT_INO));
    let unmounted = fs.unmount().map_err(PopulateError::Unmount);
    res?;
    unmounted
}

struct Copier<'a> {
    fs: &'a crate::fs::Filesystem,
    /// Hard links: the source's (device, inode) to the copy's inode.
    links: HashMap<(u64, u64), InodeNo>,
}

fn read_err(path: &Path) -> impl FnOnce(io::Error) -> PopulateError + '_ {
    move |error| PopulateError::Read {
        path: path.to_path_buf(),
        error,
    }
}

fn fs_err(path: &Path) -> impl FnOnce(FsError) -> PopulateError + '_ {
    move |error| match error {
        FsError::NoSpace => PopulateError::NoSpace {
            path: path.to_path_buf(),
        },
        error => PopulateError::Fs {
            path: path.to_path_buf(),
            error,
        },
    }
}

impl Copier<'_> {
    /// Copies the contents of directory `src` into `dir`, then gives `dir`
    /// the source's attributes.
    fn dir(&mut self, src: &Path, dir: InodeNo) -> Result<(), PopulateError> {
        let mut names: Vec<_> = std::fs::read_dir(src)
            .map_err(read_err(src))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<io::Result<_>>()
            .map_err(read_err(src))?;
        names.sort();
        for name in names {
            let path = src.join(&name);
            self.entry(&path, name.as_bytes(), dir)?;
        }
        let meta = std::fs::symlink_metadata(src).map_err(read_err(src))?;
        self.attributes(src, dir, &meta)
    }

    fn entry(&mut self, path: &Path, name: &[u8], dir: InodeNo) -> Result<(), PopulateError> {
        let meta = std::fs::symlink_metadata(path).map_err(read_err(path))?;
        let ft = meta.file_type();
        let root = Caller::default();
        if !ft.is_dir() && meta.nlink() > 1 {
            if let Some(&ino) = self.links.get(&(meta.dev(), meta.ino())) {
                self.fs.link(ino, dir, name).map_err(fs_err(path))?;
                // link(2) moved the change time; the source's again.
                return self.attributes(path, ino, &meta);
            }
        }
        let ino = if ft.is_dir() {
            // mkfs made lost+found; a tree that has one fills it.
            let existing = (dir.0 == crate::format::inode::ino::EXT2_ROOT_INO
                && name == b"lost+found")
                .then(|| self.fs.lookup(dir, name).ok())
                .flatten();
            let ino = match existing {
                Some((ino, _)) => ino,
                None => {
                    self.fs
                        .mkdir(dir, name, 0o700, root)
                        .map_err(fs_err(path))?
                        .0
                }
            };
            return self.dir(path, ino);
        } else if ft.is_symlink() {
            let target = std::fs::read_link(path).map_err(read_err(path))?;
            let t = target.as_os_str().as_bytes();
            self.fs.symlink(dir, name, t, root).map_err(fs_err(path))?.0
        } else {
            let kind = if ft.is_file() {
                S_IFREG
            } else if ft.is_fifo() {
                S_IFIFO
            } else if ft.is_socket() {
                S_IFSOCK
            } else if ft.is_char_device() {
                S_IFCHR
            } else {
                S_IFBLK
            };
            let rdev = meta.rdev() as u32;
            let (ino, _) = self
                .fs
                .mknod(dir, name, kind | 0o600, rdev, root)
                .map_err(fs_err(path))?;
            if ft.is_file() {
                self.data(path, ino, meta.len())?;
            }
            ino
        };
        if !ft.is_dir() && meta.nlink() > 1 {
            self.links.insert((meta.dev(), meta.ino()), ino);
        }
        self.attributes(path, ino, &meta)
    }

    /// A regular file's data, its holes (SEEK_HOLE) left as holes.
    fn data(&self, path: &Path, ino: InodeNo, len: u64) -> Result<(), PopulateError> {
        let f = std::fs::File::open(path).map_err(read_err(path))?;
        let mut buf = vec![0u8; CHUNK];
        let mut pos = 0u64;
        while pos < len {
            let Some((start, end)) = next_data(&f, pos, len).map_err(read_err(path))? else {
                break;
            };
            let mut at = start;
            while at < end {
                let n = ((end - at) as usize).min(CHUNK);
                let got = f.read_at(&mut buf[..n], at).map_err(read_err(path))?;
                if got == 0 {
                    return Err(PopulateError::Read {
                        path: path.to_path_buf(),
                        error: io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank"),
                    });
                }
                let chunk = &buf[..got];
                // A zero block stays a hole, as mke2fs's copy leaves it.
                if chunk.iter().any(|&b| b != 0) {
                    self.fs.write(ino, at, chunk, true).map_err(fs_err(path))?;
                }
                at += got as u64;
            }
            pos = end;
        }
        // The length, where the file ends in a hole.
        let attr = SetAttr {
            size: Some(len),
            ..Default::default()
        };
        self.fs
            .setattr(ino, &attr, Caller::default())
            .map_err(fs_err(path))?;
        Ok(())
    }

    /// Extended attributes (ACLs among them), then mode, owner and times.
    fn attributes(
        &self,
        path: &Path,
        ino: InodeNo,
        meta: &std::fs::Metadata,
    ) -> Result<(), PopulateError> {
        for (name, value) in xattrs(path).map_err(read_err(path))? {
            self.fs
                .setxattr(ino, &name, &value, SetMode::Either)
                .map_err(fs_err(path))?;
        }
        let ts = |sec: i64, nsec: i64| Timestamp {
            sec,
            nsec: nsec as u32,
        };
        let symlink = meta.file_type().is_symlink();
        let attr = SetAttr {
            mode: (!symlink).then_some((meta.mode() & 0o7777) as u16),
            uid: Some(meta.uid()),
            gid: Some(meta.gid()),
            atime: Some(ts(meta.atime(), meta.atime_nsec())),
            mtime: Some(ts(meta.mtime(), meta.mtime_nsec())),
            ctime: Some(ts(meta.ctime(), meta.ctime_nsec())),
            times_set: true,
            size: None,
        };
        self.fs
            .setattr(ino, &attr, Caller::default())
            .map_err(fs_err(path))?;
        Ok(())
    }
}

/// The next data run at or after `pos` (SEEK_DATA, SEEK_HOLE), or `None`
/// past the last; a filesystem without them gives the whole file.
fn next_data(f: &std::fs::File, pos: u64, len: u64) -> io::Result<Option<(u64, u64)>> {
    use std::os::fd::AsRawFd;
    // SAFETY: lseek on a descriptor `f` owns; no memory is passed.
    let start = unsafe { libc::lseek(f.as_raw_fd(), pos as libc::off_t, libc::SEEK_DATA) };
    if start < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENXIO) => Ok(None),
            Some(libc::EINVAL) => Ok(Some((pos, len))),
            _ => Err(e),
        };
    }
    // SAFETY: as above.
    let end = unsafe { libc::lseek(f.as_raw_fd(), start, libc::SEEK_HOLE) };
    if end < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Some((start as u64, (end as u64).min(len))))
}

/// `path`'s extended attributes (not following a symlink), by name.
fn xattrs(path: &Path) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
    let names = loop {
        // SAFETY: a null buffer of size 0 asks for the list's length.
        let n = unsafe { libc::llistxattr(c.as_ptr(), std::ptr::null_mut(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENOTSUP) {
                return Ok(Vec::new());
            }
            return Err(e);
        }
        let mut buf = vec![0u8; n as usize];
        // SAFETY: `buf` is valid for `buf.len()` bytes.
        let got = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if got >= 0 {
            buf.truncate(got as usize);
            break buf;
        }
        if io::Error::last_os_error().raw_os_error() != Some(libc::ERANGE) {
            return Err(io::Error::last_os_error());
        }
    };
    let mut out = Vec::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let cname = CString::new(name)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "NUL in xattr name"))?;
        let value = loop {
            // SAFETY: as for llistxattr.
            let n = unsafe { libc::lgetxattr(c.as_ptr(), cname.as_ptr(), std::ptr::null_mut(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut v = vec![0u8; n as usize];
            // SAFETY: `v` is valid for `v.len()` bytes.
            let got = unsafe {
                libc::lgetxattr(c.as_ptr(), cname.as_ptr(), v.as_mut_ptr().cast(), v.len())
            };
            if got >= 0 {
                v.truncate(got as usize);
                break v;
            }
            if io::Error::last_os_error().raw_os_error() != Some(libc::ERANGE) {
                return Err(io::Error::last_os_error());
            }
        };
        out.push((name.to_vec(), value));
    }
    out.sort();
    Ok(out)
}
