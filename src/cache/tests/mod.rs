//! Tests for the buffer cache, on a memory device wrapped to count and
//! perturb the I/O the cache issues.

mod basic;
mod concurrent;
mod eviction;
mod writeback;

use std::io::{self, IoSlice};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::BufferCache;
use crate::device::{BlockDevice, MemoryDevice};

type Hook = Box<dyn FnOnce() + Send>;

/// A [`MemoryDevice`] that counts calls, records each write's extent, and
/// can slow reads, fail I/O, or run a hook in the middle of a write.
pub(super) struct TestDevice {
    pub mem: MemoryDevice,
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    pub extents: Mutex<Vec<(u64, usize)>>,
    pub read_delay_ms: AtomicU64,
    pub fail_reads: AtomicBool,
    pub fail_writes: AtomicBool,
    pub on_write: Mutex<Option<Hook>>,
}

impl TestDevice {
    pub(crate) fn new(size: usize) -> Self {
        TestDevice {
            mem: MemoryDevice::from_vec(vec![0; size]),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            extents: Mutex::new(Vec::new()),
            read_delay_ms: AtomicU64::new(0),
            fail_reads: AtomicBool::new(false),
            fail_writes: AtomicBool::new(false),
            on_write: Mutex::new(None),
        }
    }

    pub(crate) fn reads(&self) -> u64 {
        self.reads.load(Ordering::SeqCst)
    }

    pub(crate) fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    pub(crate) fn take_extents(&self) -> Vec<(u64, usize)> {
        std::mem::take(&mut *self.extents.lock())
    }

    /// One write call: hook, failure injection, bookkeeping.
    fn begin_write(&self, offset: u64, len: usize) -> io::Result<()> {
        let hook = self.on_write.lock().take();
        if let Some(h) = hook {
            h();
        }
        if self.fail_writes.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected write error"));
        }
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.extents.lock().push((offset, len));
        Ok(())
    }
}

impl BlockDevice for TestDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        let delay = self.read_delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            std::thread::sleep(Duration::from_millis(delay));
        }
        if self.fail_reads.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected read error"));
        }
        self.mem.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.begin_write(offset, buf.len())?;
        self.mem.write_at(buf, offset)
    }

    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<()> {
        self.begin_write(offset, bufs.iter().map(|b| b.len()).sum())?;
        self.mem.write_vectored_at(bufs, offset)
    }

    fn flush(&self) -> io::Result<()> {
        self.mem.flush()
    }

    fn size(&self) -> u64 {
        self.mem.size()
    }
}

pub(super) const BS: usize = 1024;

/// A cache of `cap_blocks` buffers over a fresh `blocks`-block test device.
pub(super) fn setup(blocks: usize, cap_blocks: usize) -> (Arc<TestDevice>, BufferCache) {
    let dev = Arc::new(TestDevice::new(blocks * BS));
    let cache = BufferCache::new(dev.clone(), BS, cap_blocks * BS);
    (dev, cache)
}

/// The bytes of block `b` on the device itself.
pub(super) fn on_disk(dev: &TestDevice, b: u32) -> Vec<u8> {
    let mut out = vec![0; BS];
    dev.mem
        .read_at(&mut out, u64::from(b) * BS as u64)
        .expect("block on device");
    out
}

/// Fills block `b` on the device (bypassing the cache) with `byte`.
pub(super) fn put_on_disk(dev: &TestDevice, b: u32, byte: u8) {
    dev.mem
        .write_at(&[byte; BS], u64::from(b) * BS as u64)
        .expect("block on device");
}
