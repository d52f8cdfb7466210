//! The buffer cache: block-sized metadata buffers between the filesystem
//! and journal layers and the device (Linux's buffer heads).
//!
//! Sharded by block number so that threads working on different blocks do
//! not contend. A buffer is dirty when it must be written home; it is
//! pinned while a journal transaction owns it, and then neither written home
//! by the cache nor evicted.
//!
//! Lock order: a shard lock is never held while a buffer's data lock is
//! taken for I/O; a buffer's data lock may be held across the device read
//! that fills it (so two readers of one missing block cause one read).

use std::collections::HashMap;
use std::io::{self, IoSlice};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::device::BlockDevice;
use crate::format::BlockNo;

const SHARDS: usize = 64;

/// One cached block.
pub struct Buffer {
    block: BlockNo,
    data: RwLock<Vec<u8>>,
    uptodate: AtomicBool,
    dirty: AtomicBool,
    /// Bumped on every `mark_dirty`, so writeback can tell whether the
    /// buffer changed while it was being written.
    generation: AtomicU64,
    pins: AtomicU32,
    referenced: AtomicBool,
}

impl Buffer {
    fn new(block: BlockNo, size: usize, uptodate: bool) -> Self {
        Buffer {
            block,
            data: RwLock::new(vec![0; size]),
            uptodate: AtomicBool::new(uptodate),
            dirty: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            pins: AtomicU32::new(0),
            referenced: AtomicBool::new(true),
        }
    }

    pub fn block(&self) -> BlockNo {
        self.block
    }

    pub fn read(&self) -> RwLockReadGuard<'_, Vec<u8>> {
        self.data.read()
    }

    pub fn write(&self) -> RwLockWriteGuard<'_, Vec<u8>> {
        self.data.write()
    }

    pub fn is_dirty(&self) -> bool {
        self.dirty.load(Ordering::Acquire)
    }

    pub fn mark_dirty(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.dirty.store(true, Ordering::Release);
    }

    pub fn clear_dirty(&self) {
        self.dirty.store(false, Ordering::Release);
    }

    pub fn pin(&self) {
        self.pins.fetch_add(1, Ordering::AcqRel);
    }

    pub fn unpin(&self) {
        let _ = self
            .pins
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| p.checked_sub(1));
    }

    pub fn is_pinned(&self) -> bool {
        self.pins.load(Ordering::Acquire) > 0
    }
}

#[derive(Default)]
struct Shard {
    map: HashMap<u32, Arc<Buffer>>,
}

/// Counters for tests and statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub reads: u64,
    pub writes: u64,
    pub evictions: u64,
    pub cached_bytes: u64,
}

pub struct BufferCache {
    dev: Arc<dyn BlockDevice>,
    block_size: usize,
    capacity: usize,
    shards: Vec<Mutex<Shard>>,
    cached: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    reads: AtomicU64,
    writes: AtomicU64,
    evictions: AtomicU64,
    /// Round-robin start for eviction scans.
    clock: AtomicU64,
}

impl BufferCache {
    pub fn new(dev: Arc<dyn BlockDevice>, block_size: usize, capacity_bytes: usize) -> Self {
        BufferCache {
            dev,
            block_size,
            capacity: capacity_bytes.max(block_size * SHARDS),
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            cached: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            clock: AtomicU64::new(0),
        }
    }

    pub fn device(&self) -> &Arc<dyn BlockDevice> {
        &self.dev
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    fn shard(&self, block: BlockNo) -> &Mutex<Shard> {
        &self.shards[block.0 as usize % SHARDS]
    }

    fn check_range(&self, block: BlockNo) -> io::Result<()> {
        let end = (block.0 as u64 + 1) * self.block_size as u64;
        if end > self.dev.size() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("block {} is past the end of the device", block.0),
            ));
        }
        Ok(())
    }

    /// The cached buffer for `block`, inserted (not yet read) if missing.
    fn lookup_or_insert(&self, block: BlockNo, uptodate: bool) -> (Arc<Buffer>, bool) {
        let mut shard = self.shard(block).lock();
        if let Some(b) = shard.map.get(&block.0) {
            b.referenced.store(true, Ordering::Relaxed);
            return (b.clone(), true);
        }
        let b = Arc::new(Buffer::new(block, self.block_size, uptodate));
        shard.map.insert(block.0, b.clone());
        self.cached
            .fetch_add(self.block_size as u64, Ordering::Relaxed);
        (b, false)
    }

    /// The buffer for `block`, read from the device if needed.
    pub fn get(&self, block: BlockNo) -> io::Result<Arc<Buffer>> {
        self.check_range(block)?;
        let (buf, hit) = self.lookup_or_insert(block, false);
        if hit && buf.uptodate.load(Ordering::Acquire) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(buf);
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        {
            let mut data = buf.write();
            if !buf.uptodate.load(Ordering::Acquire) {
                self.reads.fetch_add(1, Ordering::Relaxed);
                self.dev
                    .read_at(&mut data, block.0 as u64 * self.block_size as u64)?;
                buf.uptodate.store(true, Ordering::Release);
            }
        }
        self.maybe_evict();
        Ok(buf)
    }

    /// A zero-filled buffer for a freshly allocated block, without reading.
    pub fn get_new(&self, block: BlockNo) -> io::Result<Arc<Buffer>> {
        self.check_range(block)?;
        let (buf, _) = self.lookup_or_insert(block, true);
        {
            let mut data = buf.write();
            data.fill(0);
            buf.uptodate.store(true, Ordering::Release);
        }
        self.maybe_evict();
        Ok(buf)
    }

    /// The buffer for `block` if cached, with no I/O.
    pub fn peek(&self, block: BlockNo) -> Option<Arc<Buffer>> {
        self.shard(block).lock().map.get(&block.0).cloned()
    }

    /// Drops `block` from the cache: its contents are dead (freed block).
    pub fn forget(&self, block: BlockNo) {
        let removed = self.shard(block).lock().map.remove(&block.0);
        if let Some(b) = removed {
            b.clear_dirty();
            self.cached
                .fetch_sub(self.block_size as u64, Ordering::Relaxed);
        }
    }

    /// Writes every dirty, unpinned buffer home, then flushes the device.
    pub fn sync_all(&self) -> io::Result<()> {
        let mut dirty: Vec<Arc<Buffer>> = self
            .shards
            .iter()
            .flat_map(|s| {
                s.lock()
                    .map
                    .values()
                    .filter(|b| b.is_dirty() && !b.is_pinned())
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect();
        dirty.sort_by_key(|b| b.block.0);
        self.write_buffers(&dirty)?;
        self.dev.flush()
    }

    /// Writes `bufs` (sorted by block) home, one device write per run of
    /// adjacent blocks, and clears the dirty flag of those not re-dirtied.
    pub fn write_buffers(&self, bufs: &[Arc<Buffer>]) -> io::Result<()> {
        let mut start = 0;
        while start < bufs.len() {
            let mut end = start + 1;
            while end < bufs.len() && bufs[end].block.0 == bufs[end - 1].block.0 + 1 {
                end += 1;
            }
            self.write_run(&bufs[start..end])?;
            start = end;
        }
        Ok(())
    }

    fn write_run(&self, run: &[Arc<Buffer>]) -> io::Result<()> {
        let gens: Vec<u64> = run
            .iter()
            .map(|b| b.generation.load(Ordering::Acquire))
            .collect();
        let copies: Vec<Vec<u8>> = run.iter().map(|b| b.read().clone()).collect();
        let slices: Vec<IoSlice<'_>> = copies.iter().map(|c| IoSlice::new(c)).collect();
        let offset = run[0].block.0 as u64 * self.block_size as u64;
        self.dev.write_vectored_at(&slices, offset)?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        for (b, g) in run.iter().zip(gens) {
            // Compare-and-clear: a buffer changed during the write stays dirty.
            if b.generation.load(Ordering::Acquire) == g {
                b.clear_dirty();
            }
        }
        Ok(())
    }

    /// Evicts clean, unpinned, unreferenced buffers while over capacity,
    /// giving recently used ones a second chance (CLOCK).
    fn maybe_evict(&self) {
        let bs = self.block_size as u64;
        let mut scanned = 0;
        while self.cached.load(Ordering::Relaxed) > self.capacity as u64 && scanned < 2 * SHARDS {
            let i = self.clock.fetch_add(1, Ordering::Relaxed) as usize % SHARDS;
            scanned += 1;
            let mut shard = self.shards[i].lock();
            let victims: Vec<u32> = shard
                .map
                .iter()
                .filter(|(_, b)| {
                    let idle = Arc::strong_count(b) == 1 && !b.is_dirty() && !b.is_pinned();
                    idle && !b.referenced.swap(false, Ordering::Relaxed)
                })
                .map(|(k, _)| *k)
                .take(64)
                .collect();
            for k in victims {
                shard.map.remove(&k);
                self.cached.fetch_sub(bs, Ordering::Relaxed);
                self.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            reads: self.reads.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            cached_bytes: self.cached.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemoryDevice;

    fn cache(blocks: u64, capacity: usize) -> (Arc<MemoryDevice>, BufferCache) {
        let dev = Arc::new(MemoryDevice::new(blocks * 1024).unwrap());
        let c = BufferCache::new(dev.clone(), 1024, capacity);
        (dev, c)
    }

    #[test]
    fn read_through_and_write_back() {
        let (dev, c) = cache(128, 1 << 20);
        dev.write_at(&[7u8; 1024], 5 * 1024).unwrap();
        let b = c.get(BlockNo(5)).unwrap();
        assert_eq!(b.read()[0], 7);
        let _ = c.get(BlockNo(5)).unwrap();
        assert_eq!(c.stats().reads, 1);
        for i in 10..13 {
            let n = c.get_new(BlockNo(i)).unwrap();
            n.write()[0] = i as u8;
            n.mark_dirty();
        }
        c.sync_all().unwrap();
        assert_eq!(c.stats().writes, 1, "adjacent blocks are coalesced");
        let mut out = [0u8; 1];
        dev.read_at(&mut out, 11 * 1024).unwrap();
        assert_eq!(out[0], 11);
        assert!(c.get(BlockNo(128)).is_err());
    }

    #[test]
    fn pinned_buffers_stay_put() {
        let (dev, c) = cache(128, 1 << 20);
        let b = c.get_new(BlockNo(3)).unwrap();
        b.write()[0] = 1;
        b.mark_dirty();
        b.pin();
        c.sync_all().unwrap();
        let mut out = [0u8; 1];
        dev.read_at(&mut out, 3 * 1024).unwrap();
        assert_eq!(out[0], 0);
        b.unpin();
        c.sync_all().unwrap();
        dev.read_at(&mut out, 3 * 1024).unwrap();
        assert_eq!(out[0], 1);
    }

    #[test]
    fn capacity_is_bounded() {
        let (_dev, c) = cache(4096, 64 * 1024 * 2);
        for i in 0..4096 {
            let _ = c.get(BlockNo(i)).unwrap();
        }
        assert!(c.stats().cached_bytes <= 64 * 1024 * 2 + 64 * 1024);
        assert!(c.stats().evictions > 0);
    }

    #[test]
    fn concurrent_writers() {
        let (dev, c) = cache(256, 1 << 20);
        let c = Arc::new(c);
        let threads: Vec<_> = (0..16u8)
            .map(|t| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for round in 0..200u32 {
                        let b = c.get(BlockNo(round % 64)).unwrap();
                        b.write()[t as usize] = t + 1;
                        b.mark_dirty();
                        if round % 50 == 0 {
                            c.sync_all().unwrap();
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        c.sync_all().unwrap();
        let mut out = [0u8; 16];
        dev.read_at(&mut out, 0).unwrap();
        assert_eq!(out.to_vec(), (1..=16).collect::<Vec<u8>>());
    }
}
