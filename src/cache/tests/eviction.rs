//! Bounded memory: CLOCK eviction of clean buffers, writeback of dirty ones
//! under pressure, and pins that override the bound.

use super::{on_disk, put_on_disk, setup, BS};
use crate::format::BlockNo;

const CAP: usize = 32;

#[test]
fn capacity_bound_holds_while_touching_ten_times_capacity() {
    let (_dev, cache) = setup(CAP * 10, CAP);
    for round in 0..3 {
        for b in 0..(CAP * 10) as u32 {
            cache.get(BlockNo(b)).unwrap();
            let st = cache.stats();
            assert!(
                st.cached_bytes <= (CAP * BS) as u64,
                "round {round} block {b}: {st:?}"
            );
        }
    }
    let st = cache.stats();
    assert!(!st.over_capacity());
    assert!(st.evictions >= (CAP * 29) as u64, "{st:?}");
}

#[test]
fn dirty_buffers_are_written_back_to_make_room() {
    let (dev, cache) = setup(CAP * 10, CAP);
    for b in 0..(CAP * 10) as u32 {
        let buf = cache.get_new(BlockNo(b)).unwrap();
        buf.write().fill(b as u8 ^ 0x5a);
        buf.mark_dirty();
        drop(buf);
        let st = cache.stats();
        assert!(st.cached_bytes <= (CAP * BS) as u64, "block {b}: {st:?}");
    }
    assert!(dev.writes() > 0);
    cache.sync_all().unwrap();
    for b in 0..(CAP * 10) as u32 {
        assert_eq!(on_disk(&dev, b), vec![b as u8 ^ 0x5a; BS], "block {b}");
    }
}

#[test]
fn pinned_buffers_are_never_evicted() {
    let (_dev, cache) = setup(CAP * 10, CAP);
    for b in 0..4 {
        let buf = cache.get(BlockNo(b)).unwrap();
        buf.pin();
        buf.mark_dirty();
    }
    for b in 4..(CAP * 10) as u32 {
        cache.get(BlockNo(b)).unwrap();
    }
    cache.sync_all().unwrap();
    for b in 0..4 {
        let buf = cache.peek(BlockNo(b)).expect("pinned buffer still cached");
        assert!(buf.is_dirty());
    }
    assert_eq!(cache.stats().pinned_buffers, 4);
}

#[test]
fn everything_pinned_exceeds_the_bound_and_says_so() {
    let (_dev, cache) = setup(CAP * 4, CAP);
    for b in 0..(CAP * 2) as u32 {
        cache.get(BlockNo(b)).unwrap().pin();
    }
    let st = cache.stats();
    assert!(st.over_capacity(), "{st:?}");
    assert_eq!(st.pinned_buffers, (CAP * 2) as u64);
    for b in 0..(CAP * 2) as u32 {
        cache.peek(BlockNo(b)).unwrap().unpin();
    }
    cache.shrink();
    assert!(!cache.stats().over_capacity());
}

#[test]
fn a_hot_block_survives_a_scan() {
    let (dev, cache) = setup(CAP * 10, CAP);
    put_on_disk(&dev, 0, 1);
    for b in 1..(CAP * 10) as u32 {
        cache.get(BlockNo(0)).unwrap();
        cache.get(BlockNo(b)).unwrap();
    }
    let st = cache.stats();
    assert_eq!(st.hits, (CAP * 10 - 2) as u64, "{st:?}");
}

#[test]
fn pinned_buffers_are_parked_and_rejoin_eviction_when_unpinned() {
    let (_dev, cache) = setup(CAP * 8, CAP);
    let pinned: Vec<_> = (0..(CAP * 2) as u32)
        .map(|b| {
            let buf = cache.get(BlockNo(b)).unwrap();
            buf.pin();
            buf
        })
        .collect();
    assert_eq!(cache.pinned_bytes(), CAP * 2 * BS);
    // Shards full of pinned buffers still evict the unpinned ones: at
    // most the buffer just inserted (held by its caller) per shard stays.
    for b in (CAP * 2) as u32..(CAP * 4) as u32 {
        cache.get(BlockNo(b)).unwrap();
        let st = cache.stats();
        assert!(st.cached_bytes <= ((CAP * 2 + 2) * BS) as u64, "{st:?}");
    }
    for buf in &pinned {
        cache.unpin(buf);
    }
    drop(pinned);
    assert_eq!(cache.pinned_bytes(), 0);
    // No shrink: ordinary inserts find the unpinned buffers again.
    for b in (CAP * 4) as u32..(CAP * 6) as u32 {
        cache.get(BlockNo(b)).unwrap();
    }
    let st = cache.stats();
    assert!(!st.over_capacity(), "{st:?}");
    assert!(cache.peak_cached_bytes() <= (CAP * 2 + 2) * BS);
}
