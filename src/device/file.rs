//! A block device backed by a regular file or a block device node, through
//! pread/pwrite and fdatasync, with O_DIRECT as an option.

use std::fs::File;
use std::io::{self, IoSlice, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

use super::lock::{self, LockKind};
use super::BlockDevice;

/// Alignment O_DIRECT needs for buffers, offsets and lengths on every device
/// we care about.
const DIRECT_ALIGN: usize = 4096;

/// How to open the backing store.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenOptions {
    pub read_only: bool,
    /// Bypass the page cache. Unaligned requests go through a bounce buffer.
    pub direct: bool,
    /// Open block devices with O_EXCL, so that a mounted device cannot be
    /// opened a second time.
    pub exclusive: bool,
    /// Take no lock on an image file (`fsck -n`, which may look at an
    /// image in use). Otherwise an image file is locked for as long as the
    /// device is open: shared when read-only, exclusive when read-write, and
    /// the open fails with [`lock::InUse`] when someone else holds it.
    pub no_lock: bool,
    /// Open for writing but take the shared lock, as a read-only user
    /// would: a read-only mount that may later be remounted read-write.
    /// Its owner writes nothing until it holds the exclusive lock
    /// ([`FileDevice::claim_writer`]).
    pub shared_lock: bool,
}

pub struct FileDevice {
    file: File,
    size: u64,
    direct: bool,
    is_block_device: bool,
}

impl FileDevice {
    pub fn open(path: &Path, opts: OpenOptions) -> io::Result<Self> {
        let meta = std::fs::metadata(path)?;
        let is_block_device = meta.file_type().is_block_device();
        if !is_block_device && !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: not a regular file or block device", path.display()),
            ));
        }
        let mut flags = 0;
        if opts.direct {
            flags |= libc::O_DIRECT;
        }
        if opts.exclusive && is_block_device {
            flags |= libc::O_EXCL;
        }
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(!opts.read_only)
            .custom_flags(flags)
            .open(path)?;
        // Block devices have O_EXCL; an OFD lock on a device node would
        // only cover that one node, not the device.
        if !is_block_device && !opts.no_lock {
            let kind = if opts.read_only || opts.shared_lock {
                LockKind::Read
            } else {
                LockKind::Write
            };
            lock_soon(path, &file, kind)?;
        }
        // Seeking to the end gives the size of block devices and files alike.
        let size = file.seek(SeekFrom::End(0))?;
        Ok(FileDevice {
            file,
            size,
            direct: opts.direct,
            is_block_device,
        })
    }

    pub fn is_block_device(&self) -> bool {
        self.is_block_device
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// A handle through which the owner of a device opened with
    /// [`OpenOptions::shared_lock`] takes the exclusive lock later.
    pub fn writer_claim(&self) -> io::Result<WriterClaim> {
        Ok(WriterClaim {
            file: self.file.try_clone()?,
            is_block_device: self.is_block_device,
        })
    }

    /// Extends an image file to `len` bytes (never shrinks it), for mkfs,
    /// which must lock the image before changing it.
    pub fn grow_to(&mut self, len: u64) -> io::Result<()> {
        if self.is_block_device || len <= self.size {
            return Ok(());
        }
        self.file.set_len(len)?;
        self.size = len;
        Ok(())
    }

    fn aligned(&self, len: usize, offset: u64) -> bool {
        !self.direct || (len % DIRECT_ALIGN == 0 && offset % DIRECT_ALIGN as u64 == 0)
    }

    fn check_range(&self, len: usize, offset: u64) -> io::Result<()> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "access of {len} bytes at {offset} is past the end of a {}-byte device",
                    self.size
                ),
            )),
        }
    }
}

/// The right to become the image's one writer, for a device opened with
/// [`OpenOptions::shared_lock`]. It shares the device's open file
/// description, and so its lock: taking the exclusive lock converts the
/// shared one in place, with no moment unlocked.
pub struct WriterClaim {
    file: File,
    is_block_device: bool,
}

impl WriterClaim {
    /// Takes the exclusive lock, or fails with who else holds the image
    /// (another read-only mount, or fsck). A block device is already
    /// exclusive (O_EXCL).
    pub fn claim(&self, path: &Path) -> io::Result<()> {
        if self.is_block_device || lock::try_lock(&self.file, LockKind::Write)? {
            return Ok(());
        }
        Err(lock::shared_with_error(path, &self.file))
    }

    /// Goes back to the shared lock, when what the claim was for failed.
    pub fn release(&self) {
        if !self.is_block_device {
            let _ = lock::try_lock(&self.file, LockKind::Read);
        }
    }
}

/// A heap buffer whose start is aligned for O_DIRECT, found inside a larger
/// allocation so that no unsafe allocation is needed.
struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize) -> Self {
        let storage = vec![0u8; len + DIRECT_ALIGN];
        let misalign = storage.as_ptr() as usize % DIRECT_ALIGN;
        let start = (DIRECT_ALIGN - misalign) % DIRECT_ALIGN;
        AlignedBuf {
            storage,
            start,
            len,
        }
    }
    fn as_slice(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

/// The aligned span covering `len` bytes at `offset`.
fn aligned_span(len: usize, offset: u64) -> (u64, usize) {
    let a = DIRECT_ALIGN as u64;
    let start = offset / a * a;
    let end = (offset + len as u64).div_ceil(a) * a;
    (start, (end - start) as usize)
}

impl BlockDevice for FileDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check_range(buf.len(), offset)?;
        if self.aligned(buf.len(), offset) && buf.as_ptr() as usize % DIRECT_ALIGN == 0
            || !self.direct
        {
            return self.file.read_exact_at(buf, offset);
        }
        let (start, span) = aligned_span(buf.len(), offset);
        let mut bounce = AlignedBuf::new(span);
        self.file.read_exact_at(bounce.as_mut_slice(), start)?;
        let skip = (offset - start) as usize;
        buf.copy_from_slice(&bounce.as_slice()[skip..skip + buf.len()]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check_range(buf.len(), offset)?;
        if !self.direct {
            return self.file.write_all_at(buf, offset);
        }
        // Read-modify-write through an aligned bounce buffer.
        let (start, span) = aligned_span(buf.len(), offset);
        let mut bounce = AlignedBuf::new(span);
        let skip = (offset - start) as usize;
        if !self.aligned(buf.len(), offset) {
            self.file.read_exact_at(bounce.as_mut_slice(), start)?;
        }
        bounce.as_mut_slice()[skip..skip + buf.len()].copy_from_slice(buf);
        self.file.write_all_at(bounce.as_slice(), start)
    }

    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<()> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        self.check_range(total, offset)?;
        if self.direct {
            let mut joined = Vec::with_capacity(total);
            for b in bufs {
                joined.extend_from_slice(b);
            }
            return self.write_at(&joined, offset);
        }
        pwritev_all(&self.file, bufs, offset)
    }

    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn size(&self) -> u64 {
        self.size
    }

    /// A hole punched in an image file (its blocks go back to the host
    /// filesystem), BLKDISCARD on a block device.
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        self.check_range(len as usize, offset)?;
        if !self.is_block_device {
            return punch_hole(&self.file, offset, len);
        }
        /// `_IO(0x12, 119)` (include/uapi/linux/fs.h).
        const BLKDISCARD: libc::c_ulong = 0x1277;
        let range: [u64; 2] = [offset, len];
        // SAFETY: BLKDISCARD reads two u64s (start, length) through the
        // pointer, which points at a live local for the call; the
        // descriptor is owned by `self.file`.
        let rc = unsafe { libc::ioctl(self.file.as_raw_fd(), BLKDISCARD, range.as_ptr()) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// Why `path` can be read but not written, if it cannot: a block device
/// set read-only (`blockdev --setro`, a write-protected disk), which the
/// kernel opens for writing and then refuses every write of with EPERM,
/// or a source that cannot be opened for writing (EROFS, EACCES, EPERM).
/// mount(8) mounts such a device read-only, with a warning.
pub fn write_protected(path: &Path) -> Option<&'static str> {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(file) => block_device_read_only(&file).then_some("a read-only block device"),
        Err(e) => match e.raw_os_error() {
            Some(libc::EROFS) => Some("on a read-only filesystem"),
            Some(libc::EACCES | libc::EPERM) => Some("not writable by this user"),
            _ => None,
        },
    }
}

/// BLKROGET: whether `file`, if a block device, is set read-only.
fn block_device_read_only(file: &File) -> bool {
    let is_block = file
        .metadata()
        .is_ok_and(|m| m.file_type().is_block_device());
    if !is_block {
        return false;
    }
    /// `_IO(0x12, 94)` (include/uapi/linux/fs.h).
    const BLKROGET: libc::c_ulong = 0x125e;
    let mut read_only: libc::c_int = 0;
    // SAFETY: BLKROGET writes one int through the pointer, which points at
    // a live local for the call; the descriptor is owned by `file`.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKROGET, &mut read_only) };
    rc == 0 && read_only != 0
}

/// Deallocates `len` bytes from `offset` of a regular file, which then read
/// as zeroes (fallocate PUNCH_HOLE, the file's size kept).
pub fn punch_hole(file: &File, offset: u64, len: u64) -> io::Result<()> {
    let off =
        |v: u64| libc::off_t::try_from(v).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput));
    let (offset, len) = (off(offset)?, off(len)?);
    // SAFETY: fallocate only reads its integer arguments; the descriptor is
    // owned by `file`, which outlives the call.
    let rc = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset,
            len,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// IOV_MAX on Linux.
const IOV_MAX: usize = 1024;

/// Writes every byte of `bufs` with pwritev, resubmitting after short writes.
fn pwritev_all(file: &File, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<()> {
    // The usual case, a few blocks written whole by one call, needs no
    // copy of the slice list.
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let mut done = 0;
    if bufs.len() <= IOV_MAX {
        done = pwritev_once(file, bufs, offset)?;
        if done == total {
            return Ok(());
        }
    }
    let mut owned: Vec<&[u8]> = bufs
        .iter()
        .map(|b| &**b)
        .filter(|b| !b.is_empty())
        .collect();
    let mut pos = offset + done as u64;
    let mut first = 0;
    super::consume(&mut owned, &mut first, done);
    while first < owned.len() {
        let batch: Vec<IoSlice<'_>> = owned[first..]
            .iter()
            .take(IOV_MAX)
            .map(|b| IoSlice::new(b))
            .collect();
        let n = pwritev_once(file, &batch, pos)?;
        pos += n as u64;
        super::consume(&mut owned, &mut first, n);
    }
    Ok(())
}

/// One pwritev of at most IOV_MAX slices, retried on EINTR; the bytes
/// written, never 0 (an error instead) unless there was nothing to write.
fn pwritev_once(file: &File, bufs: &[IoSlice<'_>], pos: u64) -> io::Result<usize> {
    if bufs.iter().all(|b| b.is_empty()) {
        return Ok(0);
    }
    let off = libc::off_t::try_from(pos)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
    loop {
        // SAFETY: IoSlice is ABI-compatible with struct iovec, the slices
        // live for the duration of the call, and the count (at most
        // IOV_MAX) matches the array.
        let n = unsafe {
            libc::pwritev(
                file.as_raw_fd(),
                bufs.as_ptr() as *const libc::iovec,
                bufs.len() as libc::c_int,
                off,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "pwritev wrote nothing",
            ));
        }
        return Ok(n as usize);
    }
}

/// Takes the image's lock, giving a holder that is about to let go a
/// moment: in a process with threads, a child forked to run a program
/// (e2fsck from a test, a helper from a daemon) holds a copy of every
/// descriptor, and so of an image's lock, until it execs, even after the
/// parent has closed its own. That lasts milliseconds; a real holder is
/// still there after a second.
fn lock_soon(path: &Path, file: &File, kind: LockKind) -> io::Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while !lock::try_lock(file, kind)? {
        if std::time::Instant::now() >= deadline {
            return Err(lock::in_use_error(path, file));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_image(len: u64) -> (std::path::PathBuf, File) {
        let path = std::env::temp_dir().join(format!(
            "jbdfs-filedev-{}-{}",
            std::process::id(),
            crate::util::unique_suffix()
        ));
        let f = File::create(&path).unwrap();
        f.set_len(len).unwrap();
        (path, f)
    }

    #[test]
    fn buffered_and_vectored_io() {
        let (path, _f) = temp_image(1 << 20);
        let d = FileDevice::open(&path, OpenOptions::default()).unwrap();
        assert_eq!(d.size(), 1 << 20);
        d.write_vectored_at(&[IoSlice::new(&[1; 3000]), IoSlice::new(&[2; 5000])], 100)
            .unwrap();
        let mut b = vec![0u8; 8000];
        d.read_at(&mut b, 100).unwrap();
        assert!(b[..3000].iter().all(|&x| x == 1));
        assert!(b[3000..].iter().all(|&x| x == 2));
        d.flush().unwrap();
        assert!(d.read_at(&mut b, (1 << 20) - 10).is_err());
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn direct_io_handles_unaligned_requests() {
        let (path, _f) = temp_image(1 << 20);
        let opts = OpenOptions {
            direct: true,
            ..Default::default()
        };
        // tmpfs refuses O_DIRECT; skip there rather than fail.
        let d = match FileDevice::open(&path, opts) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("skipping O_DIRECT test: {e}");
                return;
            }
        };
        d.write_at(b"unaligned", 4000).unwrap();
        let mut b = [0u8; 9];
        d.read_at(&mut b, 4000).unwrap();
        assert_eq!(&b, b"unaligned");
        d.write_at(&vec![7u8; 8192], 8192).unwrap();
        let mut b = vec![0u8; 8192];
        d.read_at(&mut b, 8192).unwrap();
        assert!(b.iter().all(|&x| x == 7));
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn an_image_open_for_writing_is_not_opened_again() {
        let (path, _f) = temp_image(1 << 16);
        let rw = FileDevice::open(&path, OpenOptions::default()).unwrap();
        let ro = OpenOptions {
            read_only: true,
            ..Default::default()
        };
        for opts in [OpenOptions::default(), ro] {
            let e = FileDevice::open(&path, opts).err().expect("refused");
            let busy = lock::in_use(&e).expect("an InUse error");
            assert_eq!(busy.holder.pid, Some(std::process::id()));
            assert!(e.to_string().contains("is in use"), "{e}");
        }
        let unlocked = OpenOptions {
            no_lock: true,
            ..ro
        };
        FileDevice::open(&path, unlocked).unwrap();
        drop(rw);
        let a = FileDevice::open(&path, ro).unwrap();
        let _b = FileDevice::open(&path, ro).unwrap();
        assert!(FileDevice::open(&path, OpenOptions::default()).is_err());
        drop((a, _b));
        let mut d = FileDevice::open(&path, OpenOptions::default()).unwrap();
        d.grow_to(1 << 17).unwrap();
        assert_eq!(d.size(), 1 << 17);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 17);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn rejects_directories() {
        let err = FileDevice::open(&std::env::temp_dir(), OpenOptions::default());
        assert!(err.is_err());
    }
}
