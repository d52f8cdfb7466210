//! One cached block: its bytes, its state (uptodate, dirty, pins) and the two
//! per-buffer locks that order I/O on it.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{
    MappedRwLockReadGuard, MappedRwLockWriteGuard, Mutex, MutexGuard, RwLock, RwLockReadGuard,
    RwLockWriteGuard,
};

use super::pool::BlockPool;
use crate::format::BlockNo;

/// State shared by every buffer of one cache.
pub(super) struct Shared {
    pub pinned: AtomicUsize,
    pub pool: BlockPool,
}

/// Shared access to a buffer's bytes.
pub type BufferReadGuard<'a> = MappedRwLockReadGuard<'a, [u8]>;
/// Exclusive access to a buffer's bytes; follow a change with
/// [`Buffer::mark_dirty`] or hand the buffer to the journal.
pub type BufferWriteGuard<'a> = MappedRwLockWriteGuard<'a, [u8]>;

/// Bit 0 of [`Buffer::state`]; the other 63 bits count `mark_dirty` calls.
const DIRTY: u64 = 1;

/// A block's cached contents.
///
/// The dirty bit and a modification generation share one atomic word so that
/// writeback can clear "dirty" only if nobody re-dirtied the buffer while its
/// copy was on the way to the device (a compare-and-swap on the whole word).
pub struct Buffer {
    block: BlockNo,
    data: RwLock<Box<[u8]>>,
    state: AtomicU64,
    uptodate: AtomicBool,
    /// The block was freed while the journal still pinned this buffer
    /// (`BufferCache::forget`): its bytes are only the journal's now, and
    /// the buffer leaves the cache with its last pin.
    forgotten: AtomicBool,
    pins: AtomicU32,
    /// The serial of the running transaction this buffer has joined, 0 for
    /// none: the journal's marker, as jbd2's `b_transaction`. Set and
    /// cleared under the journal's state lock; read without it by handles
    /// of that transaction, which find it already joined.
    joined: AtomicU64,
    /// What the buffers of one cache share: the count of pinned buffers
    /// (kept by the buffers, so that every pin and unpin, whoever makes it,
    /// keeps it exact) and the pool the bytes come from and go back to.
    shared: Arc<Shared>,
    /// Held across this buffer's own device write, so that two writebacks of
    /// one buffer cannot land out of order, and so that `pin` can wait out a
    /// write that began before the pin.
    writeback: Mutex<()>,
}

impl Buffer {
    pub(super) fn new(block: BlockNo, uptodate: bool, shared: Arc<Shared>) -> Self {
        Buffer {
            block,
            data: RwLock::new(shared.pool.zeroed()),
            state: AtomicU64::new(0),
            joined: AtomicU64::new(0),
            uptodate: AtomicBool::new(uptodate),
            forgotten: AtomicBool::new(false),
            pins: AtomicU32::new(0),
            shared,
            writeback: Mutex::new(()),
        }
    }

    /// See the field `joined`.
    pub fn joined_serial(&self) -> u64 {
        self.joined.load(Ordering::Acquire)
    }

    pub fn set_joined_serial(&self, serial: u64) {
        self.joined.store(serial, Ordering::Release);
    }

    pub fn block(&self) -> BlockNo {
        self.block
    }

    /// Shared access to the bytes (block_size of them).
    pub fn read(&self) -> BufferReadGuard<'_> {
        RwLockReadGuard::map(self.data.read(), |d| &d[..])
    }

    /// Exclusive access to the bytes. Pin first if the buffer is joining a
    /// transaction: [`Buffer::pin`] must not be called while holding this
    /// buffer's own guard. Not public: metadata changes go through the
    /// journal's `Handle::modify`, which joins the transaction first;
    /// the rest is the cache's own and a new buffer's first contents.
    pub(crate) fn write(&self) -> BufferWriteGuard<'_> {
        RwLockWriteGuard::map(self.data.write(), |d| &mut d[..])
    }

    /// Whether the bytes hold the block's contents (read in, or zero-filled
    /// for a new block).
    pub fn is_uptodate(&self) -> bool {
        self.uptodate.load(Ordering::Acquire)
    }

    pub fn is_dirty(&self) -> bool {
        self.state.load(Ordering::Acquire) & DIRTY != 0
    }

    /// Records that the bytes changed and must reach the device.
    pub fn mark_dirty(&self) {
        // `| DIRTY` then `+ 2`: set the bit and bump the generation in one step.
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                Some((s | DIRTY).wrapping_add(2))
            });
    }

    /// Drops the dirty bit unconditionally (the journal, after writing the
    /// block home itself; or a caller declaring the contents dead).
    pub fn clear_dirty(&self) {
        self.state.fetch_and(!DIRTY, Ordering::AcqRel);
    }

    /// Keeps the cache from writing this buffer home or evicting it. Waits
    /// for a cache writeback of this buffer that is already in flight, so
    /// that no stale write can land after the journal's own.
    pub fn pin(&self) {
        let _in_flight = self.writeback.lock();
        if self.pins.fetch_add(1, Ordering::AcqRel) == 0 {
            self.shared.pinned.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Undoes one [`Buffer::pin`]. An unpin without a pin is ignored (and
    /// logged) rather than wrapping the count.
    pub fn unpin(&self) {
        let r = self
            .pins
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| p.checked_sub(1));
        match r {
            Ok(1) => {
                self.shared.pinned.fetch_sub(1, Ordering::AcqRel);
            }
            Ok(_) => {}
            Err(_) => tracing::warn!(block = self.block.0, "unpin of an unpinned buffer"),
        }
    }

    /// Whether the block was freed under a pin (see the field).
    pub fn is_forgotten(&self) -> bool {
        self.forgotten.load(Ordering::Acquire)
    }

    pub(super) fn set_forgotten(&self) {
        self.forgotten.store(true, Ordering::Release);
    }

    /// The buffer lives again: its block has new contents.
    pub(super) fn clear_forgotten(&self) {
        self.forgotten.store(false, Ordering::Release);
    }

    pub fn is_pinned(&self) -> bool {
        self.pin_count() != 0
    }

    pub fn pin_count(&self) -> u32 {
        self.pins.load(Ordering::Acquire)
    }

    /// The dirty bit and generation, to hand back to [`Self::clear_dirty_if`].
    pub(super) fn dirty_state(&self) -> u64 {
        self.state.load(Ordering::Acquire)
    }

    pub(super) fn is_dirty_state(state: u64) -> bool {
        state & DIRTY != 0
    }

    /// Clears the dirty bit if the state is still `seen`; a `mark_dirty`
    /// since then changed the generation and the buffer stays dirty.
    pub(super) fn clear_dirty_if(&self, seen: u64) -> bool {
        self.state
            .compare_exchange(seen, seen & !DIRTY, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Reads the block in with `fill` unless someone else already did. The
    /// write lock is held across `fill`, so a second reader waits for the
    /// first one's I/O instead of issuing its own.
    pub(super) fn fill_with(
        &self,
        fill: impl FnOnce(&mut [u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        // Checked first without the lock as well: an uptodate buffer never
        // queues a writer on its lock, which checkpoint relies on when it
        // read-locks committed buffers under the journal's state lock.
        if self.is_uptodate() {
            return Ok(());
        }
        let mut data = self.data.write();
        if self.is_uptodate() {
            return Ok(());
        }
        fill(&mut data)?;
        self.set_uptodate();
        Ok(())
    }

    /// Zero-fills the bytes and declares them current (a freshly allocated
    /// block whose old contents are dead).
    pub(super) fn zero_fill(&self) {
        let mut data = self.data.write();
        data.fill(0);
        self.set_uptodate();
    }

    pub(super) fn set_uptodate(&self) {
        self.uptodate.store(true, Ordering::Release);
    }

    pub(super) fn lock_raw_write(&self) -> RwLockWriteGuard<'_, Box<[u8]>> {
        self.data.write()
    }

    pub(super) fn try_lock_raw_write(&self) -> Option<RwLockWriteGuard<'_, Box<[u8]>>> {
        self.data.try_write()
    }

    pub(super) fn read_now(&self, wait: bool) -> Option<RwLockReadGuard<'_, Box<[u8]>>> {
        if wait {
            Some(self.data.read())
        } else {
            self.data.try_read()
        }
    }

    pub(super) fn claim_writeback(&self, wait: bool) -> Option<MutexGuard<'_, ()>> {
        if wait {
            Some(self.writeback.lock())
        } else {
            self.writeback.try_lock()
        }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        let data = std::mem::take(self.data.get_mut());
        self.shared.pool.put(data);
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("block", &self.block.0)
            .field("uptodate", &self.is_uptodate())
            .field("dirty", &self.is_dirty())
            .field("pins", &self.pin_count())
            .field("forgotten", &self.is_forgotten())
            .finish()
    }
}
