//! Block-sized allocations recycled between buffers and the journal's
//! frozen copies.
//!
//! In data=journal every logged block is allocated as a buffer on a FUSE
//! thread, copied at commit and freed later on another thread. glibc keeps a
//! malloc arena per thread and a freed block goes back to the arena it came
//! from, so each thread's arena grew to the peak on its own and the daemon
//! held several times cache_size. Reusing the blocks here keeps them in one
//! place; the pool holds at most `max` idle blocks, and only blocks that
//! were in use at once, so it never holds more than that peak.

use parking_lot::Mutex;

pub(super) struct BlockPool {
    size: usize,
    max: usize,
    free: Mutex<Vec<Box<[u8]>>>,
}

impl BlockPool {
    pub(super) fn new(size: usize, max: usize) -> Self {
        BlockPool {
            size,
            max,
            free: Mutex::new(Vec::new()),
        }
    }

    /// A zero-filled block.
    pub(super) fn zeroed(&self) -> Box<[u8]> {
        match self.free.lock().pop() {
            Some(mut b) => {
                b.fill(0);
                b
            }
            None => vec![0; self.size].into_boxed_slice(),
        }
    }

    /// A block holding a copy of `src` (block_size bytes).
    pub(super) fn copy_of(&self, src: &[u8]) -> Box<[u8]> {
        let recycled = self.free.lock().pop();
        match recycled {
            Some(mut b) if b.len() == src.len() => {
                b.copy_from_slice(src);
                b
            }
            _ => src.into(),
        }
    }

    /// Takes a block back for reuse; the pool drops what it has no room for.
    pub(super) fn put(&self, b: Box<[u8]>) {
        if b.len() != self.size {
            return;
        }
        let mut free = self.free.lock();
        if free.len() < self.max {
            free.push(b);
        }
    }
}
