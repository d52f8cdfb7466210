//! Block devices: the one interface through which jbdfs touches storage.
//!
//! Everything above this layer addresses storage in bytes at block-aligned
//! offsets through [`BlockDevice`]. Implementations are shared between threads
//! (`Send + Sync`, `&self` methods), so concurrent readers and writers never
//! serialise on a lock in this layer unless the backing store demands it.

pub mod devsim;
pub mod fault;
pub mod file;
pub mod lock;
pub mod memory;
pub mod nbd;
pub mod open;
pub mod overlay;
pub mod record;

use std::io::{self, IoSlice};

pub use devsim::{DevSimParams, SimDevice};
pub use fault::{FaultDevice, FaultOp, FaultPlan};
pub use file::{FileDevice, OpenOptions, WriterClaim};
pub use memory::MemoryDevice;
pub use nbd::{NbdConfig, NbdDevice};
pub use open::{open_writable, Opened, Source, SourceOptions};
pub use overlay::OverlayDevice;
pub use record::{Event, RecordingDevice};

/// Steps over `n` bytes written from `parts[*first..]` after a vectored
/// write that may have been short: whole slices are skipped, a partly
/// written one is cut.
pub(crate) fn consume(parts: &mut [&[u8]], first: &mut usize, mut n: usize) {
    while n > 0 && *first < parts.len() {
        let len = parts[*first].len();
        if n >= len {
            n -= len;
            *first += 1;
        } else {
            parts[*first] = &parts[*first][n..];
            n = 0;
        }
    }
}

/// Storage addressed by byte offset.
///
/// Reads and writes are positional and complete: a short read or write is an
/// error (`UnexpectedEof` / `WriteZero`), never a partial success. `flush`
/// makes every completed write durable, like `fdatasync` or a disk cache flush.
pub trait BlockDevice: Send + Sync {
    /// Fills `buf` from `offset`. Reading past the end is `UnexpectedEof`.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;

    /// Writes all of `buf` at `offset`. Writing past the end is an error.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;

    /// Writes `bufs` back to back starting at `offset`, as one request where
    /// the backing store allows it.
    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<()> {
        let mut pos = offset;
        for b in bufs {
            self.write_at(b, pos)?;
            pos += b.len() as u64;
        }
        Ok(())
    }

    /// Makes all completed writes durable.
    fn flush(&self) -> io::Result<()>;

    /// The size in bytes.
    fn size(&self) -> u64;

    /// Tells the storage that the `len` bytes at `offset` hold nothing worth
    /// keeping (a TRIM: FITRIM discards free blocks through it); reading
    /// them afterwards may give zeroes or the old bytes. `Unsupported`
    /// where the storage has no such request, which is the default.
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        let _ = (offset, len);
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }
}

impl<T: BlockDevice + ?Sized> BlockDevice for std::sync::Arc<T> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        (**self).read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        (**self).write_at(buf, offset)
    }
    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<()> {
        (**self).write_vectored_at(bufs, offset)
    }
    fn flush(&self) -> io::Result<()> {
        (**self).flush()
    }
    fn size(&self) -> u64 {
        (**self).size()
    }
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        (**self).discard(offset, len)
    }
}

impl<T: BlockDevice + ?Sized> BlockDevice for Box<T> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        (**self).read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        (**self).write_at(buf, offset)
    }
    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<()> {
        (**self).write_vectored_at(bufs, offset)
    }
    fn flush(&self) -> io::Result<()> {
        (**self).flush()
    }
    fn size(&self) -> u64 {
        (**self).size()
    }
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        (**self).discard(offset, len)
    }
}
