//! Block allocation (Linux: fs/ext3/balloc.c): find free blocks near a goal
//! in the block bitmaps, keep descriptors and counters in step, and honour
//! the blocks reserved for root.
//!
//! Files being written own in-memory reservation windows (ext3's block
//! reservation, simplified): a range of blocks ahead of the file's last
//! allocation that other files' allocations step over, so that files
//! written side by side do not interleave block by block. A window doubles
//! each time its file fills it; a large file whose next window would land
//! in another file's moves to the middle of the largest stretch free of
//! windows, so concurrent sequential writers end up far apart. Windows are
//! never on disk, expire when idle, and are ignored when only the blocks
//! inside them are left. Beside them are the large files' layout pins
//! (where a file's in-line layout starts and where it had to move on),
//! which goal.rs counts every goal from.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{Filesystem, FsError, Result};
use crate::format::{BlockNo, GroupNo, InodeNo};
use crate::journal::Handle;

/// The smallest window, in blocks.
const MIN_WINDOW: u32 = 64;
/// A file's first window: at least this, or four times the request.
const FIRST_WINDOW: u32 = 1024;
/// A window never grows past this many blocks.
const MAX_WINDOW: u32 = 32768;
/// A window not used for this long no longer holds other files off.
const WINDOW_IDLE: Duration = Duration::from_secs(2);
/// Files smaller than this many blocks (with the request) take no window.
const WINDOW_MIN_FILE: u64 = 64;
/// Inodes whose layout pins are remembered, before starting afresh.
const MAX_TRACKED: usize = 4096;
/// Pins kept per file; past this the oldest but the origin are dropped
/// (a file displaced this often is fragmented whatever its goals).
const MAX_PINS: usize = 64;
/// Files with fewer blocks than this never move away from their goal:
/// small files stay near their directory.
const SPREAD_MIN_BLOCKS: u64 = 2048;
/// Commits an operation may force to free up blocks after an ENOSPC
/// (ext3_should_retry_alloc's three).
const ALLOC_RETRIES: u32 = 3;

#[derive(Clone, Copy, Debug)]
struct Window {
    end: u32,
    ino: u32,
    used: Instant,
}

/// Every live window, keyed by first block, and each inode's window.
#[derive(Default)]
struct Windows {
    by_start: BTreeMap<u32, Window>,
    by_ino: HashMap<u32, u32>,
    /// Each large file's layout pins, logical block to disk block (see
    /// goal.rs `alloc_goal`): where its in-line layout starts and where it
    /// had to move on.
    layouts: HashMap<u32, BTreeMap<u32, u64>>,
}

impl Windows {
    fn live(w: &Window, now: Instant) -> bool {
        now.duration_since(w.used) < WINDOW_IDLE
    }

    /// The live window of another inode that holds `block`, by its end.
    fn foreign_at(&self, ino: u32, block: u32, now: Instant) -> Option<u32> {
        // Windows do not overlap, so only the last one starting at or
        // before `block` can hold it.
        let (_, w) = self.by_start.range(..=block).next_back()?;
        (w.ino != ino && w.end > block && Self::live(w, now)).then_some(w.end)
    }

    /// The first block at or after `block` (and below `limit`) where a live
    /// window of another inode starts.
    fn next_foreign(&self, ino: u32, block: u32, limit: u32, now: Instant) -> u32 {
        self.by_start
            .range(block..limit)
            .find(|(_, w)| w.ino != ino && Self::live(w, now))
            .map_or(limit, |(&s, _)| s)
    }

    fn remove(&mut self, ino: u32) {
        if let Some(start) = self.by_ino.remove(&ino) {
            self.by_start.remove(&start);
        }
    }

    /// Whether an inode other than `ino` holds a live window.
    fn others_live(&self, ino: u32, now: Instant) -> bool {
        self.by_start
            .values()
            .any(|w| w.ino != ino && Self::live(w, now))
    }

    fn own(&self, ino: u32) -> Option<(u32, &Window)> {
        let start = *self.by_ino.get(&ino)?;
        Some((start, self.by_start.get(&start)?))
    }

    fn prune(&mut self, now: Instant) {
        if self.layouts.len() > MAX_TRACKED {
            self.layouts.clear();
        }
        let dead: Vec<u32> = self
            .by_start
            .values()
            .filter(|w| !Self::live(w, now))
            .map(|w| w.ino)
            .collect();
        for ino in dead {
            self.remove(ino);
        }
    }

    /// The middle of the largest stretch of `lo..hi` that holds no live
    /// window of an inode other than `ino`.
    fn widest_gap_middle(&self, ino: u32, lo: u32, hi: u32, now: Instant) -> u32 {
        let mut best = (0u32, lo);
        let mut from = lo;
        for (&s, w) in &self.by_start {
            if w.ino == ino || !Self::live(w, now) {
                continue;
            }
            if s > from && s - from > best.0 {
                best = (s - from, from);
            }
            from = from.max(w.end);
        }
        if hi > from && hi - from > best.0 {
            best = (hi - from, from);
        }
        best.1 + best.0 / 2
    }
}

/// The reservation windows of files being written (see the module comment).
#[derive(Default)]
pub(crate) struct Reservations {
    windows: Mutex<Windows>,
}

impl Reservations {
    /// `ino`'s window if it is live and holds `goal`: its end.
    fn own_holding(&self, ino: u32, goal: u32) -> Option<u32> {
        let now = Instant::now();
        let mut ws = self.windows.lock();
        let start = *ws.by_ino.get(&ino)?;
        let w = ws.by_start.get_mut(&start)?;
        if start <= goal && goal < w.end && Windows::live(w, now) {
            w.used = now;
            return Some(w.end);
        }
        None
    }

    /// `ino`'s window, live or not: its first block and size.
    fn own(&self, ino: u32) -> Option<(u32, u32)> {
        let ws = self.windows.lock();
        ws.own(ino).map(|(s, w)| (s, w.end - s))
    }

    /// Gives `ino` the window `start..start+size`, cut short where another
    /// inode's window begins.
    fn claim(&self, ino: u32, start: u32, size: u32) {
        let now = Instant::now();
        let mut ws = self.windows.lock();
        ws.remove(ino);
        ws.prune(now);
        let end = ws.next_foreign(ino, start, start.saturating_add(size), now);
        if end > start {
            ws.by_start.insert(
                start,
                Window {
                    end,
                    ino,
                    used: now,
                },
            );
            ws.by_ino.insert(ino, start);
        }
    }

    /// Drops `ino`'s window (its file was truncated or deleted).
    pub(crate) fn release(&self, ino: InodeNo) {
        let mut ws = self.windows.lock();
        ws.remove(ino.0);
        ws.layouts.remove(&ino.0);
    }

    /// `ino`'s layout pin at or before `logical`: the nearest one, so
    /// that a goal is always counted forward from a fixed point whatever
    /// order the writes came in.
    pub(crate) fn pin_at_or_before(&self, ino: InodeNo, logical: u32) -> Option<(u32, u64)> {
        let ws = self.windows.lock();
        let pins = ws.layouts.get(&ino.0)?;
        pins.range(..=logical).next_back().map(|(&l, &p)| (l, p))
    }

    /// Pins `ino`'s logical block `logical` at disk block `physical`.
    pub(crate) fn add_pin(&self, ino: InodeNo, logical: u32, physical: u64) {
        let mut ws = self.windows.lock();
        let pins = ws.layouts.entry(ino.0).or_default();
        pins.insert(logical, physical);
        if pins.len() > MAX_PINS {
            let second = pins.keys().nth(1).copied();
            second.map(|k| pins.remove(&k));
        }
    }
}

/// Whose windows an allocation must step over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Respect {
    /// Every window but this inode's (0: every window).
    AllBut(u32),
    /// None: the last resort when only reserved blocks are left.
    Nothing,
}

/// The first clear bit in `map` at or after `from` and before `limit`.
pub(crate) fn find_zero(map: &[u8], from: u32, limit: u32) -> Option<u32> {
    let limit = limit.min(map.len() as u32 * 8);
    let mut i = from;
    while i < limit {
        // A group's used blocks come first: whole words of them are
        // skipped 64 at a time, not bit by bit.
        if i % 64 == 0 && i + 64 <= limit {
            let at = (i / 8) as usize;
            if let Some(word) = map
                .get(at..at + 8)
                .and_then(|w| <[u8; 8]>::try_from(w).ok())
            {
                let word = u64::from_le_bytes(word);
                if word != u64::MAX {
                    return Some(i + word.trailing_ones());
                }
                i += 64;
                continue;
            }
        }
        if map[(i / 8) as usize] & (1 << (i % 8)) == 0 {
            return Some(i);
        }
        i += 1;
    }
    None
}

pub(crate) fn test_bit(map: &[u8], i: u32) -> bool {
    map[(i / 8) as usize] & (1 << (i % 8)) != 0
}

pub(crate) fn set_bit(map: &mut [u8], i: u32) {
    map[(i / 8) as usize] |= 1 << (i % 8);
}

pub(crate) fn clear_bit(map: &mut [u8], i: u32) {
    map[(i / 8) as usize] &= !(1 << (i % 8));
}

impl Filesystem {
    /// Whether the caller may take `n` more blocks: ordinary users stop
    /// at the reserved blocks.
    pub(crate) fn may_allocate(&self, n: u32, privileged: bool) -> bool {
        let free = self.free_blocks.load(Ordering::Relaxed);
        let reserved = if privileged {
            0
        } else {
            self.sb.lock().s_r_blocks_count as i64
        };
        free - (n as i64) >= reserved
    }

    /// After an ENOSPC, with no handle open: whether to try again, having
    /// committed the running transaction (ext3_should_retry_alloc). Blocks
    /// freed by a transaction that has not committed count as free but
    /// cannot be allocated yet (a crash could still bring back their old
    /// owner), so a fallocate or write right after an unlink would fail
    /// although the space is there. As ext3: at most `ALLOC_RETRIES`
    /// commits per operation, and none when nothing waits to be released.
    pub(crate) fn should_retry_alloc(&self, retries: &mut u32) -> bool {
        if *retries >= ALLOC_RETRIES || !self.journal.has_pending_frees() {
            return false;
        }
        *retries += 1;
        self.journal.force_commit().is_ok()
    }

    /// Allocates a run of up to `count` contiguous blocks, starting as close
    /// after `goal` as possible. Returns the first block and the run length.
    pub(crate) fn alloc_blocks(
        &self,
        h: &mut Handle<'_>,
        goal: BlockNo,
        count: u32,
        privileged: bool,
    ) -> Result<(BlockNo, u32)> {
        self.alloc_owned(h, 0, goal, count, privileged)
    }

    /// As [`Self::alloc_blocks`], for `ino`: other files' windows are
    /// stepped over unless nothing else is free.
    fn alloc_owned(
        &self,
        h: &mut Handle<'_>,
        ino: u32,
        goal: BlockNo,
        count: u32,
        privileged: bool,
    ) -> Result<(BlockNo, u32)> {
        if self.mounted_read_only() {
            return Err(FsError::ReadOnly);
        }
        if !self.may_allocate(1, privileged) {
            return Err(FsError::NoSpace);
        }
        for respect in [Respect::AllBut(ino), Respect::Nothing] {
            if let Some(run) = self.alloc_scan(h, goal, count.max(1), respect)? {
                return Ok(run);
            }
        }
        Err(FsError::NoSpace)
    }

    /// Every group from the goal's, wrapping round, then the goal's group
    /// before the goal.
    fn alloc_scan(
        &self,
        h: &mut Handle<'_>,
        goal: BlockNo,
        count: u32,
        respect: Respect,
    ) -> Result<Option<(BlockNo, u32)>> {
        let (first_group, offset) = self.goal_position(goal);
        for i in 0..self.groups {
            let g = GroupNo((first_group + i) % self.groups);
            let from = if i == 0 { offset } else { 0 };
            if let Some(run) = self.alloc_in_group(h, g, from, u32::MAX, count, respect)? {
                return Ok(Some(run));
            }
        }
        if offset > 0 {
            let g = GroupNo(first_group);
            return self.alloc_in_group(h, g, 0, offset, count, respect);
        }
        Ok(None)
    }

    /// Allocates up to `count` data blocks for `ino` near `goal`, inside
    /// the file's reservation window, taking a new (larger) window when the
    /// goal lies outside it. `blocks`, what the file has or is about to
    /// have with the caller's request, decides: small files take no window
    /// (they stay packed, and thousands of small files written at once cost
    /// no bookkeeping); large ones may move away from another file's window
    /// rather than interleave with it.
    pub(crate) fn alloc_for_inode(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        goal: BlockNo,
        count: u32,
        privileged: bool,
        blocks: u64,
    ) -> Result<(BlockNo, u32)> {
        let count = count.max(1);
        if blocks + (count as u64) < WINDOW_MIN_FILE {
            return self.alloc_owned(h, ino.0, goal, count, privileged);
        }
        let large = blocks >= SPREAD_MIN_BLOCKS;
        if let Some(end) = self.reservations.own_holding(ino.0, goal.0) {
            if self.mounted_read_only() {
                return Err(FsError::ReadOnly);
            }
            if !self.may_allocate(1, privileged) {
                return Err(FsError::NoSpace);
            }
            let (g, off) = self.goal_position(goal);
            let group_first = self.sb.lock().group_first_block(GroupNo(g)).0;
            let limit = end.saturating_sub(group_first);
            let want = count.min(end - goal.0);
            let respect = Respect::AllBut(ino.0);
            if let Some(run) = self.alloc_in_group(h, GroupNo(g), off, limit, want, respect)? {
                return Ok(run);
            }
        }
        let own = self.reservations.own(ino.0);
        let size = own
            .map_or(count.saturating_mul(4).max(FIRST_WINDOW), |(_, s)| {
                s.saturating_mul(2)
            })
            .clamp(count.max(MIN_WINDOW), MAX_WINDOW.max(count));
        let behind = own.is_some_and(|(start, _)| goal.0 < start);
        if behind {
            // A write that lags behind the window (the kernel flushes pages
            // from several threads): fill in behind, keep the window.
            return self.alloc_owned(h, ino.0, goal, count, privileged);
        }
        let goal = if large {
            self.spread_goal(ino, goal)
        } else {
            goal
        };
        let (first, n) = self.alloc_owned(h, ino.0, goal, count, privileged)?;
        self.reservations.claim(ino.0, first.0, size);
        Ok((first, n))
    }

    /// The block `distance` data blocks on from `from`, stepping over the
    /// metadata at the start of each group crossed (superblock backup,
    /// descriptors, bitmaps and inode table), as a file laid out in line
    /// does.
    pub(crate) fn advance(&self, from: u64, distance: u64) -> u64 {
        let (mut at, mut left) = (from, distance);
        loop {
            let (g, end) = {
                let sb = self.sb.lock();
                let b = BlockNo(at.min(u32::MAX as u64) as u32);
                let (g, _) = sb.block_group(b);
                let end = sb.group_first_block(g).0 as u64 + sb.blocks_in_group(g) as u64;
                (g, end)
            };
            if at + left < end || g.0 + 1 >= self.groups {
                return at + left;
            }
            left -= end - at;
            at = end + self.group_overhead(GroupNo(g.0 + 1)) as u64;
        }
    }

    /// Blocks of metadata at the start of group `g`: up to the end of its
    /// inode table, when that lies at the group's start (0 otherwise).
    fn group_overhead(&self, g: GroupNo) -> u32 {
        let (first, itb, len) = {
            let sb = self.sb.lock();
            let len = sb.blocks_in_group(g);
            (sb.group_first_block(g).0, sb.inode_table_blocks(), len)
        };
        let Ok(desc) = self.group_desc(g) else {
            return 0;
        };
        let end = desc.bg_inode_table.saturating_add(itb);
        match end.checked_sub(first) {
            Some(n) if desc.bg_inode_table >= first && n < len / 2 => n,
            _ => 0,
        }
    }

    /// The first free block of group `g` (its start if the bitmap cannot
    /// be read: this is only a goal).
    pub(crate) fn first_free_in_group(&self, g: GroupNo) -> BlockNo {
        let first = self.sb.lock().group_first_block(g).0;
        BlockNo(first + self.free_bit_from(g, 0).unwrap_or(0))
    }

    /// The first clear bit of group `g`'s bitmap at or after `off` (`None`
    /// as well when the bitmap cannot be read: this only steers goals).
    fn free_bit_from(&self, g: GroupNo, off: u32) -> Option<u32> {
        let len = self.sb.lock().blocks_in_group(g);
        let buf = self
            .group_desc(g)
            .and_then(|d| Ok(self.cache.get(d.block_bitmap())?))
            .ok()?;
        let bit = find_zero(&buf.read(), off, len);
        bit
    }

    /// Where a new large file starts: `start`, unless other files hold
    /// live windows; then the first free block from the middle of the
    /// widest stretch free of them (the file's layout is counted from
    /// there, so it must not start inside the journal or another file).
    pub(crate) fn spread_start(&self, ino: InodeNo, start: BlockNo) -> BlockNo {
        let (lo, hi) = {
            let sb = self.sb.lock();
            (sb.s_first_data_block, sb.s_blocks_count)
        };
        let now = Instant::now();
        let middle = {
            let ws = self.reservations.windows.lock();
            if !ws.others_live(ino.0, now) {
                return start;
            }
            ws.widest_gap_middle(ino.0, lo, hi, now)
        };
        self.first_free_from(BlockNo(middle))
    }

    /// The first free block at or after `b`, in its group or a later one
    /// (`b` itself if none is found or a bitmap cannot be read: this is
    /// only a goal).
    fn first_free_from(&self, b: BlockNo) -> BlockNo {
        let (g0, mut off) = self.goal_position(b);
        for g in (g0..self.groups).map(GroupNo) {
            if let Some(bit) = self.free_bit_from(g, off) {
                return BlockNo(self.sb.lock().group_first_block(g).0 + bit);
            }
            off = 0;
        }
        b
    }

    /// Whether `b` is allocated (false when the bitmap cannot be read:
    /// this only steers a goal).
    fn block_in_use(&self, b: BlockNo) -> bool {
        let (g, off) = self.goal_position(b);
        self.group_desc(GroupNo(g))
            .and_then(|d| Ok(self.cache.get(d.block_bitmap())?))
            .is_ok_and(|buf| test_bit(&buf.read(), off))
    }

    /// `goal`, unless it is taken or another file's window holds it: then
    /// the middle of the widest stretch free of other windows.
    fn spread_goal(&self, ino: InodeNo, goal: BlockNo) -> BlockNo {
        let (lo, hi) = {
            let sb = self.sb.lock();
            (sb.s_first_data_block, sb.s_blocks_count)
        };
        let taken = self.block_in_use(goal);
        let now = Instant::now();
        let ws = self.reservations.windows.lock();
        // Alone, a file has nobody to move away from.
        if !ws.others_live(ino.0, now) || !taken && ws.foreign_at(ino.0, goal.0, now).is_none() {
            return goal;
        }
        BlockNo(ws.widest_gap_middle(ino.0, lo, hi, now))
    }

    fn goal_position(&self, goal: BlockNo) -> (u32, u32) {
        let sb = self.sb.lock();
        let b = goal.0.clamp(sb.s_first_data_block, sb.s_blocks_count - 1);
        let (g, off) = sb.block_group(BlockNo(b));
        (g.0.min(self.groups - 1), off)
    }

    /// Allocates up to `count` blocks in group `g` at the first allocatable
    /// bit in `from..limit` (bits, relative to the group's first block).
    fn alloc_in_group(
        &self,
        h: &mut Handle<'_>,
        g: GroupNo,
        from: u32,
        limit: u32,
        count: u32,
        respect: Respect,
    ) -> Result<Option<(BlockNo, u32)>> {
        let _lock = self.group_locks[g.0 as usize].lock();
        let desc = self.group_desc(g)?;
        if desc.bg_free_blocks_count == 0 {
            return Ok(None);
        }
        let (first, len) = {
            let sb = self.sb.lock();
            (sb.group_first_block(g).0, sb.blocks_in_group(g))
        };
        let len = len.min(limit);
        let buf = self.cache.get(desc.block_bitmap())?;
        let Some((start, stop)) = self.find_unreserved(&buf.read(), first, from, len, respect)
        else {
            return Ok(None);
        };
        let n = {
            let mut map = h.modify(&buf)?;
            let mut n = 0;
            while n < count
                && start + n < stop
                && !test_bit(&map, start + n)
                && !self.journal.is_pending_free(first + start + n)
            {
                set_bit(&mut map, start + n);
                n += 1;
            }
            n
        };
        self.update_group_desc(h, g, |d| {
            d.bg_free_blocks_count = d.bg_free_blocks_count.saturating_sub(n as u16)
        })?;
        self.free_blocks.fetch_sub(n as i64, Ordering::Relaxed);
        Ok(Some((BlockNo(first + start), n)))
    }

    /// The first allocatable bit at or after `from` outside the windows
    /// `respect` names, and the bit where the next such window starts.
    fn find_unreserved(
        &self,
        map: &[u8],
        first: u32,
        mut from: u32,
        len: u32,
        respect: Respect,
    ) -> Option<(u32, u32)> {
        let Respect::AllBut(ino) = respect else {
            return Some((self.find_allocatable(map, first, from, len)?, len));
        };
        let now = Instant::now();
        loop {
            let bit = self.find_allocatable(map, first, from, len)?;
            let ws = self.reservations.windows.lock();
            match ws.foreign_at(ino, first + bit, now) {
                Some(end) => from = end.saturating_sub(first),
                None => {
                    let stop = ws.next_foreign(ino, first + bit, first + len, now) - first;
                    return Some((bit, stop));
                }
            }
        }
    }

    /// The first clear bit at or after `from` whose block was not freed by
    /// a transaction still uncommitted: reusing such a block for data
    /// could overwrite metadata that a crash would still need.
    fn find_allocatable(&self, map: &[u8], first: u32, mut from: u32, len: u32) -> Option<u32> {
        loop {
            let bit = find_zero(map, from, len)?;
            if !self.journal.is_pending_free(first + bit) {
                return Some(bit);
            }
            from = bit + 1;
        }
    }

    /// Frees `count` blocks from `start`, which may span groups.
    pub(crate) fn free_blocks(&self, h: &mut Handle<'_>, start: BlockNo, count: u32) -> Result<()> {
        // No queued data write may land on the blocks' next owner.
        self.data.cancel(start.0, count);
        self.logged_tails.remove(start.0, count);
        let mut b = start.0;
        let end = start.0.saturating_add(count);
        while b < end {
            let (g, off, group_len) = {
                let sb = self.sb.lock();
                if b < sb.s_first_data_block || b >= sb.s_blocks_count {
                    tracing::error!(block = b, "freeing a block outside the filesystem");
                    return Err(FsError::Invalid("block out of range"));
                }
                let (g, off) = sb.block_group(BlockNo(b));
                (g, off, sb.blocks_in_group(g))
            };
            let n = (end - b).min(group_len - off);
            self.free_in_group(h, g, off, n)?;
            b += n;
        }
        Ok(())
    }

    fn free_in_group(&self, h: &mut Handle<'_>, g: GroupNo, off: u32, n: u32) -> Result<()> {
        let _lock = self.group_locks[g.0 as usize].lock();
        let desc = self.group_desc(g)?;
        let first = self.sb.lock().group_first_block(g).0;
        let buf = self.cache.get(desc.block_bitmap())?;
        let mut freed = 0u32;
        {
            let mut map = h.modify(&buf)?;
            for i in off..off + n {
                if test_bit(&map, i) {
                    clear_bit(&mut map, i);
                    freed += 1;
                } else {
                    tracing::error!(
                        block = first + i,
                        group = g.0,
                        "freeing a block that is already free"
                    );
                }
            }
        }
        for i in off..off + n {
            // Neither a logged copy nor a stale cached copy of a freed
            // block may ever be written over its next owner.
            self.journal.revoke(first + i);
            self.cache.forget(BlockNo(first + i));
        }
        self.update_group_desc(h, g, |d| {
            d.bg_free_blocks_count = d.bg_free_blocks_count.saturating_add(freed as u16)
        })?;
        self.free_blocks.fetch_add(freed as i64, Ordering::Relaxed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_search() {
        let mut map = vec![0xFFu8; 4];
        map[2] = 0b1110_1111;
        assert_eq!(find_zero(&map, 0, 32), Some(20));
        assert_eq!(find_zero(&map, 21, 32), None);
        assert_eq!(find_zero(&map, 0, 20), None);
        // Whole words of set bits, then a partial one; a limit inside a
        // word; a start inside a word.
        let mut map = vec![0xFFu8; 64];
        map[37] = 0b1101_1111;
        assert_eq!(find_zero(&map, 0, 512), Some(37 * 8 + 5));
        assert_eq!(find_zero(&map, 37 * 8 + 6, 512), None);
        assert_eq!(find_zero(&map, 3, 37 * 8 + 5), None);
        assert_eq!(find_zero(&map, 0, 37 * 8 + 6), Some(37 * 8 + 5));
        assert_eq!(
            find_zero(&map, 0, 4096),
            Some(37 * 8 + 5),
            "limit past the map"
        );
        map[0] = 0xFE;
        assert_eq!(find_zero(&map, 0, 512), Some(0));
        assert_eq!(find_zero(&map, 1, 512), Some(37 * 8 + 5));
        clear_bit(&mut map, 3);
        assert!(!test_bit(&map, 3));
        set_bit(&mut map, 3);
        assert!(test_bit(&map, 3));
    }
}
