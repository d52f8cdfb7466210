//! The buffer cache: block-sized buffers between the filesystem and journal
//! layers and the device, like Linux's buffer heads over the page cache.
//!
//! Blocks are spread over up to [`MAX_SHARDS`] shards by a hash of the block
//! number; each shard has its own mutex, map, CLOCK ring and an equal share of
//! the memory budget, so threads working on different blocks rarely meet on a
//! lock and eviction never needs a global view. A [`Buffer`] is shared as
//! `Arc<Buffer>`; holding one keeps it cached (it is never evicted while
//! anyone else holds it), and the journal pins buffers of a transaction so the
//! cache neither writes them home nor evicts them.
//!
//! # Lock order
//!
//! 1. a buffer's writeback lock (taken by writeback and by [`Buffer::pin`]),
//!    held across that buffer's own device write. Writeback holds several at
//!    once (ascending block order) but, while it holds more than one, only
//!    try-locks data locks; it waits for a data lock only while holding that
//!    buffer's writeback lock alone.
//! 2. a buffer's data lock (the [`Buffer::read`] / [`Buffer::write`] guards),
//!    held for write across a device read only while that buffer is being
//!    read in. The cache waits for at most one data lock at a time and
//!    try-locks any others (a `read_run` span), so it imposes no order on
//!    the guards callers take.
//! 3. a shard mutex: one at a time, never held across I/O, and no buffer
//!    lock is taken under it (buffer state is read through atomics).
//! 4. device-internal locks.
//!
//! Two rules follow for callers: pin a buffer before taking its own write
//! guard (pin may wait for that buffer's in-flight writeback, which may be
//! waiting for the guard), and call [`BufferCache::write_dirty`] /
//! [`BufferCache::sync_all`] with no buffer guard held. `get`, `get_new`,
//! `read_run` and the writeback done by eviction wait only for the buffers
//! they were asked for, so they may be called while holding guards.

mod buffer;
mod pool;
mod shard;
mod writeback;

#[cfg(test)]
mod tests;

use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

pub use buffer::{Buffer, BufferReadGuard, BufferWriteGuard};
use pool::BlockPool;
use shard::Shard;

use crate::device::BlockDevice;
use crate::format::BlockNo;

/// Upper bound on the number of shards.
pub const MAX_SHARDS: usize = 64;
/// Fewer shards for small caches, so that each shard's budget still leaves
/// CLOCK some choice.
const MIN_BUFFERS_PER_SHARD: usize = 16;
/// Dirty buffers written back at once when eviction finds nothing clean.
const EVICT_WRITEBACK_BATCH: usize = 16;

/// Counters and gauges reported by [`BufferCache::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups that found the block cached and uptodate.
    pub hits: u64,
    /// Lookups that had to read (or wait for a read of) the block.
    pub misses: u64,
    /// Device read calls.
    pub reads: u64,
    /// Device write calls (one per coalesced run).
    pub writes: u64,
    pub evictions: u64,
    pub cached_bytes: u64,
    pub capacity_bytes: u64,
    pub dirty_buffers: u64,
    pub pinned_buffers: u64,
}

impl CacheStats {
    /// True when pinned or held buffers pushed the cache past its bound.
    pub fn over_capacity(&self) -> bool {
        self.cached_bytes > self.capacity_bytes
    }
}

/// Keeps neighbouring shards' mutexes on different cache lines.
#[repr(align(64))]
struct PaddedShard(Mutex<Shard>);

/// How a lookup that inserts a new buffer creates it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Contents wanted: a new buffer must be read in.
    Read,
    /// Freshly allocated block: a new buffer starts zeroed and uptodate.
    New,
}

struct Lookup {
    buf: Arc<Buffer>,
    found: bool,
    /// Dirty buffers to write back so the shard can shrink to its budget.
    writeback: Vec<Arc<Buffer>>,
}

/// The sharded block cache over one device.
pub struct BufferCache {
    dev: Arc<dyn BlockDevice>,
    block_size: usize,
    nblocks: u64,
    capacity_bytes: usize,
    shards: Box<[PaddedShard]>,
    reads: AtomicU64,
    writes: AtomicU64,
    /// Pinned buffers (counted by the buffers themselves) and the pool
    /// their bytes come from.
    shared: Arc<buffer::Shared>,
    /// Buffers cached right now, and the most there ever were after an
    /// insert had evicted what it could: what the cache really held, pinned
    /// buffers included.
    resident: AtomicUsize,
    peak: AtomicUsize,
}

impl BufferCache {
    /// A cache of at most `capacity_bytes` of `block_size` buffers (at least
    /// one buffer) over `dev`.
    pub fn new(dev: Arc<dyn BlockDevice>, block_size: usize, capacity_bytes: usize) -> Self {
        let nblocks = dev.size().checked_div(block_size as u64).unwrap_or(0);
        let cap_blocks = capacity_bytes.checked_div(block_size).unwrap_or(0).max(1);
        let n = (cap_blocks / MIN_BUFFERS_PER_SHARD).clamp(1, MAX_SHARDS);
        let shards = (0..n)
            .map(|i| {
                let budget = cap_blocks / n + usize::from(i < cap_blocks % n);
                PaddedShard(Mutex::new(Shard::new(budget)))
            })
            .collect();
        BufferCache {
            dev,
            block_size,
            nblocks,
            capacity_bytes,
            shards,
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            shared: Arc::new(buffer::Shared {
                pinned: AtomicUsize::new(0),
                pool: BlockPool::new(block_size, pool_blocks(cap_blocks)),
            }),
            resident: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
        }
    }

    /// The memory budget the cache was given.
    pub fn capacity_bytes(&self) -> usize {
        self.capacity_bytes
    }

    /// Bytes of pinned buffers: journaled blocks the cache can neither
    /// evict nor write home until the journal lets go of them.
    pub fn pinned_bytes(&self) -> usize {
        self.shared.pinned.load(Ordering::Acquire) * self.block_size
    }

    /// The most bytes the cache has held at once, pinned buffers included.
    pub fn peak_cached_bytes(&self) -> usize {
        self.peak.load(Ordering::Relaxed) * self.block_size
    }

    /// Undoes one [`Buffer::pin`] and, once the buffer is no longer pinned,
    /// puts it back where eviction can see it. The journal unpins this way;
    /// a bare [`Buffer::unpin`] leaves it parked until [`Self::shrink`].
    /// A buffer forgotten while pinned leaves the cache here instead: its
    /// bytes belong to a freed block, and the block's next owner must
    /// neither read them (a data read that looks in the cache, a `get`)
    /// nor write them home.
    pub fn unpin(&self, buf: &Buffer) {
        buf.unpin();
        if buf.is_pinned() {
            return;
        }
        let removed = {
            let mut shard = self.shard(buf.block()).lock();
            match buf.is_forgotten() {
                true => shard.remove_if(buf.block(), |b| std::ptr::eq(&**b, buf)),
                false => {
                    shard.unpark(buf.block());
                    None
                }
            }
        };
        if removed.is_some() {
            self.released(1);
        }
    }

    /// A copy of `src`, one block, in memory recycled with the buffers' own
    /// (the journal's frozen copies). Give it back with [`Self::recycle`].
    pub fn block_copy(&self, src: &[u8]) -> Box<[u8]> {
        self.shared.pool.copy_of(src)
    }

    /// Takes back a block from [`Self::block_copy`] for reuse.
    pub fn recycle(&self, block: Box<[u8]>) {
        self.shared.pool.put(block);
    }

    /// Counts buffers that left the cache.
    fn released(&self, n: usize) {
        if n > 0 {
            self.resident.fetch_sub(n, Ordering::Relaxed);
        }
    }

    pub fn device(&self) -> &Arc<dyn BlockDevice> {
        &self.dev
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// The number of whole blocks on the device.
    pub fn block_count(&self) -> u64 {
        self.nblocks
    }

    /// The block's buffer, read from the device unless cached and uptodate.
    pub fn get(&self, block: BlockNo) -> io::Result<Arc<Buffer>> {
        self.check_range(block, 1)?;
        let l = self.lookup_or_insert(block, Access::Read);
        let read = self.fill_one(&l.buf);
        self.relieve(block, l.writeback);
        read.map(|()| l.buf)
    }

    /// A zero-filled, uptodate buffer for a freshly allocated block, without
    /// reading it. A cached buffer for the block is zeroed in place, so that
    /// there is never more than one buffer per block.
    pub fn get_new(&self, block: BlockNo) -> io::Result<Arc<Buffer>> {
        self.check_range(block, 1)?;
        let l = self.lookup_or_insert(block, Access::New);
        if l.found {
            l.buf.zero_fill();
            // A forgotten buffer still pinned by the journal is found here
            // when its block gets new contents first (a truncate tail's
            // block written, then a new tail, while a checkpoint still
            // pins the old copy): the new contents are alive, and reads
            // must see them.
            l.buf.clear_forgotten();
        }
        self.relieve(block, l.writeback);
        Ok(l.buf)
    }

    /// Buffers for `count` blocks from `start`, reading each maximal run of
    /// blocks that are missing (or not uptodate) with one device read.
    pub fn read_run(&self, start: BlockNo, count: u32) -> io::Result<Vec<Arc<Buffer>>> {
        self.check_range(start, count)?;
        let mut bufs = Vec::with_capacity(count as usize);
        let mut writeback = Vec::new();
        for i in 0..count {
            let l = self.lookup_or_insert(BlockNo(start.0 + i), Access::Read);
            bufs.push(l.buf);
            writeback.push(l.writeback);
        }
        let read = self.fill_run(&bufs);
        for (i, wb) in writeback.into_iter().enumerate() {
            self.relieve(BlockNo(start.0 + i as u32), wb);
        }
        read.map(|()| bufs)
    }

    /// Caches `bytes`, just read from the device along with other data, as
    /// `block`'s contents, unless the block is cached uptodate already (a
    /// cached copy may be newer than the device's).
    pub fn fill_read(&self, block: BlockNo, bytes: &[u8]) -> io::Result<()> {
        self.check_range(block, 1)?;
        if bytes.len() != self.block_size {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "fill_read needs exactly one block",
            ));
        }
        let l = self.lookup_or_insert(block, Access::Read);
        let filled = l.buf.fill_with(|data| {
            data.copy_from_slice(bytes);
            Ok(())
        });
        self.relieve(block, l.writeback);
        filled
    }

    /// The cached, uptodate buffer for `block`, if any. No I/O, and not
    /// counted as an access.
    pub fn peek(&self, block: BlockNo) -> Option<Arc<Buffer>> {
        let shard = self.shard(block).lock();
        shard
            .peek(block)
            .filter(|b| b.is_uptodate() && !b.is_forgotten())
            .cloned()
    }

    /// Drops `block` from the cache and any dirtiness with it: the caller
    /// says the contents are dead (the block was freed). A pinned buffer
    /// stays cached, clean, for the journal to finish with, so that a later
    /// lookup cannot create a second buffer for the same block; it is
    /// marked forgotten, hidden from `peek`, and dropped at its last unpin
    /// ([`Self::unpin`]).
    pub fn forget(&self, block: BlockNo) {
        let removed = {
            let mut shard = self.shard(block).lock();
            match shard.peek(block) {
                Some(b) if b.is_pinned() => {
                    b.clear_dirty();
                    b.set_forgotten();
                    None
                }
                _ => shard.remove(block),
            }
        };
        if let Some(b) = removed {
            self.released(1);
            b.clear_dirty();
        }
    }

    /// Drops every clean, unpinned buffer that nobody else holds. A buffer
    /// someone holds stays, so that no block ever has two buffers.
    pub fn invalidate_all(&self) {
        for s in self.shards.iter() {
            let dropped = s.0.lock().remove_where(shard::evictable);
            self.released(dropped.len());
            drop(dropped);
        }
    }

    pub fn stats(&self) -> CacheStats {
        let mut st = CacheStats {
            reads: self.reads.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            capacity_bytes: self.capacity_bytes as u64,
            ..CacheStats::default()
        };
        for s in self.shards.iter() {
            let s = s.0.lock();
            st.hits += s.hits;
            st.misses += s.misses;
            st.evictions += s.evictions;
            st.cached_bytes += (s.len() * self.block_size) as u64;
            st.dirty_buffers += s.buffers().filter(|b| b.is_dirty()).count() as u64;
            st.pinned_buffers += s.buffers().filter(|b| b.is_pinned()).count() as u64;
        }
        st
    }

    fn shard(&self, block: BlockNo) -> &Mutex<Shard> {
        // Fibonacci hashing: strided block numbers (one bitmap per group)
        // still spread over all shards.
        let h = u64::from(block.0).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        let i = (h % self.shards.len() as u64) as usize;
        &self.shards[i].0
    }

    fn check_range(&self, start: BlockNo, count: u32) -> io::Result<()> {
        let end = u64::from(start.0) + u64::from(count);
        if end <= self.nblocks {
            return Ok(());
        }
        let what = if count == 1 {
            format!("block {start}")
        } else {
            format!("blocks {start}..{end}")
        };
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} beyond the end of a {}-block device", self.nblocks),
        ))
    }

    fn lookup_or_insert(&self, block: BlockNo, access: Access) -> Lookup {
        let mut victims = Vec::new();
        let lookup = {
            let mut shard = self.shard(block).lock();
            self.lookup_locked(&mut shard, block, access, &mut victims)
        };
        drop(victims);
        lookup
    }

    fn lookup_locked(
        &self,
        shard: &mut Shard,
        block: BlockNo,
        access: Access,
        victims: &mut Vec<Arc<Buffer>>,
    ) -> Lookup {
        if let Some(b) = shard.lookup(block).cloned() {
            if b.is_forgotten() && !b.is_pinned() {
                // Unpinned behind the cache's back (a bare `Buffer::unpin`):
                // its bytes are dead, so it makes way for a fresh buffer.
                shard.remove(block);
                self.released(1);
                return self.lookup_locked(shard, block, access, victims);
            }
            let hit = b.is_uptodate();
            count_access(shard, access, hit);
            return Lookup {
                buf: b,
                found: true,
                writeback: Vec::new(),
            };
        }
        count_access(shard, access, false);
        let new = access == Access::New;
        let buf = Arc::new(Buffer::new(block, new, Arc::clone(&self.shared)));
        shard.insert(Arc::clone(&buf));
        shard.evict_clean(victims);
        self.note_insert(victims.len());
        let writeback = if shard.over_budget() {
            shard.dirty_candidates(EVICT_WRITEBACK_BATCH)
        } else {
            Vec::new()
        };
        Lookup {
            buf,
            found: false,
            writeback,
        }
    }

    /// Counts one buffer in and `evicted` out, and keeps the high-water mark.
    fn note_insert(&self, evicted: usize) {
        let now = self.resident.fetch_add(1, Ordering::Relaxed) + 1;
        let now = now.saturating_sub(evicted);
        self.resident.fetch_sub(evicted, Ordering::Relaxed);
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    /// Writes back dirty eviction candidates of `block`'s shard (skipping any
    /// that are busy), then evicts again. Errors leave the buffers dirty for
    /// the next sync to report; the lookup that triggered this still succeeds.
    fn relieve(&self, block: BlockNo, candidates: Vec<Arc<Buffer>>) {
        if !candidates.is_empty() {
            self.relieve_shard(self.shard(block), candidates);
        }
    }

    fn relieve_shard(&self, shard: &Mutex<Shard>, candidates: Vec<Arc<Buffer>>) {
        if let Err(e) = self.write_buffers(candidates, writeback::Wait::Never) {
            tracing::warn!(error = %e, "eviction writeback failed");
        }
        let mut victims = Vec::new();
        shard.lock().evict_clean(&mut victims);
        self.released(victims.len());
        drop(victims);
    }

    /// Brings every shard back within its budget where it can, e.g. after
    /// the journal unpinned a large transaction. Dirty buffers are written
    /// back as eviction would; busy ones are skipped.
    pub fn shrink(&self) {
        for s in self.shards.iter() {
            let mut victims = Vec::new();
            let candidates = {
                let mut shard = s.0.lock();
                shard.unpark_all();
                shard.evict_clean(&mut victims);
                if shard.over_budget() {
                    shard.dirty_candidates(usize::MAX)
                } else {
                    Vec::new()
                }
            };
            self.released(victims.len());
            drop(victims);
            if !candidates.is_empty() {
                self.relieve_shard(&s.0, candidates);
            }
        }
    }

    fn fill_one(&self, buf: &Buffer) -> io::Result<()> {
        if buf.is_uptodate() {
            return Ok(());
        }
        buf.fill_with(|data| self.read_blocks(buf.block(), data))
    }

    /// Reads in every maximal run of not-uptodate buffers of `bufs`, which
    /// are consecutive blocks in ascending order.
    fn fill_run(&self, bufs: &[Arc<Buffer>]) -> io::Result<()> {
        let mut i = 0;
        while i < bufs.len() {
            i += self.fill_from(&bufs[i..])?;
        }
        Ok(())
    }

    /// Reads in the run of stale buffers at the front of `bufs` with one
    /// device read and returns how many buffers it covered (at least one).
    /// Only the first lock is waited for; the rest are try-locked, so a
    /// caller that holds one of them while waiting for the first cannot
    /// deadlock with us: the run just ends there.
    fn fill_from(&self, bufs: &[Arc<Buffer>]) -> io::Result<usize> {
        let Some(first) = bufs.first() else {
            return Ok(1);
        };
        if first.is_uptodate() {
            return Ok(1);
        }
        let mut guards = vec![first.lock_raw_write()];
        if first.is_uptodate() {
            return Ok(1);
        }
        for b in &bufs[1..] {
            match b.try_lock_raw_write() {
                Some(g) if !b.is_uptodate() => guards.push(g),
                _ => break,
            }
        }
        let mut tmp = vec![0u8; guards.len() * self.block_size];
        self.read_blocks(first.block(), &mut tmp)?;
        let chunks = tmp.chunks_exact(self.block_size);
        for ((g, b), chunk) in guards.iter_mut().zip(bufs).zip(chunks) {
            g.copy_from_slice(chunk);
            b.set_uptodate();
        }
        Ok(guards.len())
    }

    fn read_blocks(&self, start: BlockNo, buf: &mut [u8]) -> io::Result<()> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.dev.read_at(buf, self.offset(start))
    }

    fn offset(&self, block: BlockNo) -> u64 {
        // Cannot overflow: the block was range-checked against the device.
        u64::from(block.0).saturating_mul(self.block_size as u64)
    }
}

/// Idle blocks the pool may keep: as many as the cache and one commit's
/// frozen copies hold at most (data=journal gives the copies the data
/// queue's share of cache_size, an eighth, a seventh of what the cache
/// gets). Blocks that went back to malloc would come back later from some
/// other thread's arena while the first one kept them, so the pool keeps
/// them; it never holds more than the peak of what was in use.
fn pool_blocks(cap_blocks: usize) -> usize {
    cap_blocks + cap_blocks / 7 + 64
}

fn count_access(shard: &mut Shard, access: Access, hit: bool) {
    if access == Access::New {
        return;
    }
    if hit {
        shard.hits += 1;
    } else {
        shard.misses += 1;
    }
}
