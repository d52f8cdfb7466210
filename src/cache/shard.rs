//! One shard of the buffer cache: a block -> buffer map, a CLOCK ring for
//! approximate-LRU eviction, and the shard's share of the memory budget.
//!
//! Pinned buffers cannot be evicted, so the sweep parks each pinned buffer
//! it meets off the ring, and the cache puts it back when the journal unpins
//! it ([`Shard::unpark`]): a shard full of journaled buffers then costs an
//! insert nothing, instead of a sweep over the whole shard every time.
//!
//! Everything here runs under the shard's mutex and does no I/O and takes no
//! other lock: buffer state is read through atomics only.

use std::sync::Arc;

use super::buffer::Buffer;
use crate::format::BlockNo;
use crate::util::inthash::IntMap;

struct Slot {
    buf: Arc<Buffer>,
    referenced: bool,
}

pub(super) struct Shard {
    /// Buffers on the ring: block -> index in `slots`.
    map: IntMap<BlockNo, usize>,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    /// Pinned buffers taken off the ring (CLOCK has nothing to do with them).
    parked: IntMap<BlockNo, Arc<Buffer>>,
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
            map: IntMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            parked: IntMap::default(),
            hand: 0,
            budget,
            hits: 0,
            misses: 0,
            evictions: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.map.len() + self.parked.len()
    }

    pub(super) fn over_budget(&self) -> bool {
        self.len() > self.budget
    }

    /// Looks `block` up as an access: CLOCK will spare it on the next sweep.
    pub(super) fn lookup(&mut self, block: BlockNo) -> Option<&Arc<Buffer>> {
        let Some(&i) = self.map.get(&block) else {
            return self.parked.get(&block);
        };
        let slot = self.slots.get_mut(i)?.as_mut()?;
        slot.referenced = true;
        Some(&slot.buf)
    }

    /// Looks `block` up without counting it as an access.
    pub(super) fn peek(&self, block: BlockNo) -> Option<&Arc<Buffer>> {
        let Some(&i) = self.map.get(&block) else {
            return self.parked.get(&block);
        };
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
        let Some(i) = self.map.remove(&block) else {
            return self.parked.remove(&block);
        };
        self.free.push(i);
        Some(self.slots.get_mut(i)?.take()?.buf)
    }

    /// Removes `block`'s buffer if `pred` holds for it.
    pub(super) fn remove_if(
        &mut self,
        block: BlockNo,
        pred: impl FnOnce(&Arc<Buffer>) -> bool,
    ) -> Option<Arc<Buffer>> {
        match self.peek(block) {
            Some(b) if pred(b) => self.remove(block),
            _ => None,
        }
    }

    /// Every buffer of the shard, on the ring or parked.
    pub(super) fn buffers(&self) -> impl Iterator<Item = &Arc<Buffer>> {
        self.ring().chain(self.parked.values())
    }

    fn ring(&self) -> impl Iterator<Item = &Arc<Buffer>> {
        self.slots.iter().flatten().map(|s| &s.buf)
    }

    /// Puts `block` back on the ring if it is parked and no longer pinned.
    pub(super) fn unpark(&mut self, block: BlockNo) {
        if self.parked.get(&block).is_some_and(|b| !b.is_pinned()) {
            if let Some(buf) = self.parked.remove(&block) {
                self.insert(buf);
            }
        }
    }

    /// Puts every parked buffer that is no longer pinned back on the ring
    /// (for buffers unpinned behind the cache's back, e.g. by tests).
    pub(super) fn unpark_all(&mut self) {
        let unpinned: Vec<BlockNo> = self
            .parked
            .values()
            .filter(|b| !b.is_pinned())
            .map(|b| b.block())
            .collect();
        for b in unpinned {
            self.unpark(b);
        }
    }

    /// Moves the pinned buffer in slot `i` off the ring.
    fn park(&mut self, i: usize) {
        let Some(slot) = self.slots.get_mut(i).and_then(Option::take) else {
            return;
        };
        let block = slot.buf.block();
        self.map.remove(&block);
        self.free.push(i);
        self.parked.insert(block, slot.buf);
    }

    /// Rebuilds the ring without holes once parking left more holes than
    /// buffers, so that a sweep's steps go to buffers.
    fn compact(&mut self) {
        if self.free.len() <= self.map.len() + 16 {
            return;
        }
        let live: Vec<Slot> = self.slots.drain(..).flatten().collect();
        self.free.clear();
        self.map.clear();
        for (i, slot) in live.into_iter().enumerate() {
            self.map.insert(slot.buf.block(), i);
            self.slots.push(Some(slot));
        }
        self.hand = 0;
    }

    /// Evicts clean, unpinned, unshared buffers in CLOCK order until the shard
    /// is within budget or two sweeps (enough to clear every referenced bit)
    /// found nothing more; pinned buffers met on the way are parked. Victims
    /// go to `out` so the caller can drop them after releasing the lock.
    pub(super) fn evict_clean(&mut self, out: &mut Vec<Arc<Buffer>>) {
        if !self.over_budget() {
            return;
        }
        self.compact();
        let mut steps = 2 * self.slots.len();
        while self.over_budget() && steps > 0 && !self.map.is_empty() {
            steps -= 1;
            self.hand = (self.hand + 1) % self.slots.len();
            let Some(Some(slot)) = self.slots.get_mut(self.hand) else {
                continue;
            };
            if slot.buf.is_pinned() {
                self.park(self.hand);
            } else if slot.referenced {
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
        self.ring()
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
