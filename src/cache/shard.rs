//! One shard of the buffer cache: a block -> buffer map, a CLOCK ring for
//! approximate-LRU eviction, and the shard's share of the memory budget.
//!
//! Everything here runs under the shard's mutex and does no I/O and takes no
//! other lock: buffer state is read through atomics only.

use std::collections::HashMap;
use std::sync::Arc;

use super::buffer::Buffer;
use crate::format::BlockNo;

struct Slot {
    buf: Arc<Buffer>,
    referenced: bool,
}

pub(super) struct Shard {
    map: HashMap<BlockNo, usize>,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    hand: usize,
    /// Buffers this shard may hold before it starts evicting.
    budget: usize,
    pub(super) hits: u64,
    pub(super) misses: u64,
    pub(super) evictions: u64,
}

/// Whether the cache may drop `buf` without losing anything: nobody else
/// holds it (the map's reference is the only one, and a new one can only be
/// made under the shard lock we hold), it is clean, and the journal has not
/// pinned it.
pub(super) fn evictable(buf: &Arc<Buffer>) -> bool {
    Arc::strong_count(buf) == 1 && !buf.is_pinned() && !buf.is_dirty()
}

impl Shard {
    pub(super) fn new(budget: usize) -> Self {
        Shard {
            map: HashMap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            hand: 0,
            budget,
            hits: 0,
            misses: 0,
            evictions: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    pub(super) fn over_budget(&self) -> bool {
        self.len() > self.budget
    }

    /// Looks `block` up as an access: CLOCK will spare it on the next sweep.
    pub(super) fn lookup(&mut self, block: BlockNo) -> Option<&Arc<Buffer>> {
        let i = *self.map.get(&block)?;
        let slot = self.slots.get_mut(i)?.as_mut()?;
        slot.referenced = true;
        Some(&slot.buf)
    }

    /// Looks `block` up without counting it as an access.
    pub(super) fn peek(&self, block: BlockNo) -> Option<&Arc<Buffer>> {
        let i = *self.map.get(&block)?;
        Some(&self.slots.get(i)?.as_ref()?.buf)
    }

    /// Adds a buffer, unreferenced: a block touched only once (a scan) is
    /// the first to go, and one hit is enough to earn it a second chance.
    pub(super) fn insert(&mut self, buf: Arc<Buffer>) {
        let block = buf.block();
        let slot = Some(Slot {
            buf,
            referenced: false,
        });
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        if let Some(s) = self.slots.get_mut(i) {
            *s = slot;
        }
        self.map.insert(block, i);
    }

    pub(super) fn remove(&mut self, block: BlockNo) -> Option<Arc<Buffer>> {
        let i = self.map.remove(&block)?;
        self.free.push(i);
        Some(self.slots.get_mut(i)?.take()?.buf)
    }

    pub(super) fn buffers(&self) -> impl Iterator<Item = &Arc<Buffer>> {
        self.slots.iter().flatten().map(|s| &s.buf)
    }

    /// Evicts clean, unpinned, unshared buffers in CLOCK order until the shard
    /// is within budget or two sweeps (enough to clear every referenced bit)
    /// found nothing more. Victims go to `out` so the caller can drop them
    /// after releasing the lock.
    pub(super) fn evict_clean(&mut self, out: &mut Vec<Arc<Buffer>>) {
        let mut steps = 2 * self.slots.len();
        while self.over_budget() && steps > 0 {
            steps -= 1;
            self.hand = (self.hand + 1) % self.slots.len();
            let Some(Some(slot)) = self.slots.get_mut(self.hand) else {
                continue;
            };
            if slot.referenced {
                slot.referenced = false;
            } else if evictable(&slot.buf) {
                let block = slot.buf.block();
                out.extend(self.remove(block));
                self.evictions += 1;
            }
        }
    }

    /// Dirty buffers that would be evictable once written back, for when
    /// clean victims ran out.
    pub(super) fn dirty_candidates(&self, max: usize) -> Vec<Arc<Buffer>> {
        self.buffers()
            .filter(|b| Arc::strong_count(b) == 1 && !b.is_pinned() && b.is_dirty())
            .take(max)
            .cloned()
            .collect()
    }

    /// Removes every buffer for which `drop_it` holds, returning them so the
    /// caller can release them outside the lock.
    pub(super) fn remove_where(
        &mut self,
        mut drop_it: impl FnMut(&Arc<Buffer>) -> bool,
    ) -> Vec<Arc<Buffer>> {
        let doomed: Vec<BlockNo> = self
            .buffers()
            .filter(|b| drop_it(b))
            .map(|b| b.block())
            .collect();
        doomed.into_iter().filter_map(|b| self.remove(b)).collect()
    }
}
