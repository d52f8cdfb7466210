//! Lookups: read-through, hits and misses, new blocks, runs, range errors.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{put_on_disk, setup, BS};
use crate::cache::BufferCache;
use crate::device::MemoryDevice;
use crate::format::BlockNo;

#[test]
fn get_reads_through_then_hits() {
    let (dev, cache) = setup(16, 64);
    put_on_disk(&dev, 3, 0xab);
    let b = cache.get(BlockNo(3)).unwrap();
    assert_eq!(b.block(), BlockNo(3));
    assert!(b.read().iter().all(|&x| x == 0xab));
    assert_eq!(b.read().len(), BS);
    let again = cache.get(BlockNo(3)).unwrap();
    assert!(Arc::ptr_eq(&b, &again));
    let st = cache.stats();
    assert_eq!((st.hits, st.misses, st.reads), (1, 1, 1));
    assert_eq!(dev.reads(), 1);
    assert_eq!(st.cached_bytes, BS as u64);
}

#[test]
fn get_new_does_not_read() {
    let (dev, cache) = setup(16, 64);
    put_on_disk(&dev, 5, 0xff);
    let b = cache.get_new(BlockNo(5)).unwrap();
    assert!(b.is_uptodate() && !b.is_dirty());
    assert!(b.read().iter().all(|&x| x == 0));
    cache.get(BlockNo(5)).unwrap();
    assert_eq!(dev.reads(), 0);
    assert_eq!(cache.stats().hits, 1);
}

#[test]
fn get_new_zeroes_a_cached_block_in_place() {
    let (dev, cache) = setup(16, 64);
    put_on_disk(&dev, 2, 7);
    let old = cache.get(BlockNo(2)).unwrap();
    let new = cache.get_new(BlockNo(2)).unwrap();
    assert!(Arc::ptr_eq(&old, &new));
    assert!(old.read().iter().all(|&x| x == 0));
}

#[test]
fn read_run_reads_each_missing_run_once() {
    let (dev, cache) = setup(16, 64);
    for b in 0..8 {
        put_on_disk(&dev, b, b as u8 + 1);
    }
    cache.get(BlockNo(2)).unwrap();
    cache.get(BlockNo(5)).unwrap();
    let before = dev.reads();
    let bufs = cache.read_run(BlockNo(0), 8).unwrap();
    // Missing: 0-1, 3-4, 6-7.
    assert_eq!(dev.reads() - before, 3);
    for (i, b) in bufs.iter().enumerate() {
        assert_eq!(b.block(), BlockNo(i as u32));
        assert!(b.read().iter().all(|&x| x == i as u8 + 1));
    }
    assert_eq!(cache.read_run(BlockNo(0), 8).unwrap().len(), 8);
    assert_eq!(dev.reads() - before, 3);
    assert!(cache.read_run(BlockNo(3), 0).unwrap().is_empty());
}

#[test]
fn out_of_range_is_invalid_input_naming_the_block() {
    let (_dev, cache) = setup(16, 64);
    let e = cache.get(BlockNo(16)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("block 16"), "{e}");
    let e = cache.get_new(BlockNo(u32::MAX)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let e = cache.read_run(BlockNo(10), u32::MAX).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("blocks 10.."), "{e}");
    assert!(cache.peek(BlockNo(99)).is_none());
    cache.forget(BlockNo(99));
    cache.write_dirty(&[BlockNo(99)]).unwrap();
    assert_eq!(cache.stats().cached_bytes, 0);
}

#[test]
fn degenerate_geometry_does_not_panic() {
    let dev = Arc::new(MemoryDevice::new(4096).unwrap());
    let cache = BufferCache::new(dev.clone(), 0, 0);
    assert!(cache.get(BlockNo(0)).is_err());
    let cache = BufferCache::new(dev, 1024, 0);
    cache.get(BlockNo(0)).unwrap();
    cache.get(BlockNo(1)).unwrap();
    assert_eq!(cache.stats().cached_bytes, 1024);
}

#[test]
fn read_errors_pass_through_and_can_be_retried() {
    let (dev, cache) = setup(16, 64);
    put_on_disk(&dev, 1, 9);
    dev.fail_reads.store(true, Ordering::SeqCst);
    let e = cache.get(BlockNo(1)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::Other);
    assert!(cache.peek(BlockNo(1)).is_none());
    assert!(cache.read_run(BlockNo(0), 4).is_err());
    dev.fail_reads.store(false, Ordering::SeqCst);
    assert_eq!(cache.get(BlockNo(1)).unwrap().read()[0], 9);
}

#[test]
fn peek_does_no_io() {
    let (dev, cache) = setup(16, 64);
    assert!(cache.peek(BlockNo(4)).is_none());
    let b = cache.get(BlockNo(4)).unwrap();
    let p = cache.peek(BlockNo(4)).unwrap();
    assert!(Arc::ptr_eq(&b, &p));
    assert_eq!(dev.reads(), 1);
    let st = cache.stats();
    assert_eq!((st.hits, st.misses), (0, 1));
}

#[test]
fn forget_drops_the_block_and_its_dirtiness() {
    let (dev, cache) = setup(16, 64);
    let b = cache.get_new(BlockNo(6)).unwrap();
    b.write().fill(1);
    b.mark_dirty();
    cache.forget(BlockNo(6));
    assert!(!b.is_dirty());
    assert!(cache.peek(BlockNo(6)).is_none());
    cache.sync_all().unwrap();
    assert_eq!(dev.writes(), 0);
}

#[test]
fn forget_keeps_a_pinned_buffer_cached_but_clean_and_hidden() {
    let (_dev, cache) = setup(16, 64);
    let b = cache.get_new(BlockNo(6)).unwrap();
    b.pin();
    b.mark_dirty();
    cache.forget(BlockNo(6));
    assert!(b.is_pinned() && !b.is_dirty() && b.is_forgotten());
    assert!(
        cache.peek(BlockNo(6)).is_none(),
        "dead bytes are not offered"
    );
    assert_eq!(
        cache.stats().cached_bytes,
        BS as u64,
        "still cached for the journal"
    );
}

#[test]
fn a_forgotten_buffer_leaves_the_cache_with_its_last_pin() {
    let (dev, cache) = setup(16, 64);
    put_on_disk(&dev, 6, 5);
    let b = cache.get(BlockNo(6)).unwrap();
    b.pin();
    b.write().fill(9); // a journaled change, then the block is freed
    cache.forget(BlockNo(6));
    cache.unpin(&b);
    drop(b);
    assert_eq!(cache.stats().cached_bytes, 0);
    let again = cache.get(BlockNo(6)).unwrap();
    assert_eq!(again.read()[0], 5, "the next owner reads the device");
}

/// A block whose buffer was forgotten while the journal pinned it, then
/// given new contents before that pin went: the new contents are what
/// reads see, and they stay cached after the old pin goes.
#[test]
fn a_forgotten_pinned_buffer_given_new_contents_lives_again() {
    let (dev, cache) = setup(16, 64);
    put_on_disk(&dev, 6, 5);
    let b = cache.get(BlockNo(6)).unwrap();
    b.pin(); // the old copy, waiting for checkpoint
    cache.forget(BlockNo(6));
    let reborn = cache.get_new(BlockNo(6)).unwrap();
    assert!(Arc::ptr_eq(&reborn, &b), "one buffer per block");
    reborn.write().fill(7);
    reborn.pin(); // the new contents, logged
    let seen = cache.peek(BlockNo(6)).expect("reads see the new contents");
    assert_eq!(seen.read()[0], 7);
    cache.unpin(&b); // the old copy's pin goes
    assert_eq!(cache.peek(BlockNo(6)).unwrap().read()[0], 7);
    cache.unpin(&reborn);
    assert_eq!(cache.peek(BlockNo(6)).unwrap().read()[0], 7);
}

#[test]
fn a_forgotten_buffer_unpinned_behind_the_caches_back_is_replaced() {
    let (dev, cache) = setup(16, 64);
    put_on_disk(&dev, 6, 5);
    let b = cache.get(BlockNo(6)).unwrap();
    b.pin();
    b.write().fill(9);
    cache.forget(BlockNo(6));
    b.unpin();
    assert!(cache.peek(BlockNo(6)).is_none());
    let again = cache.get(BlockNo(6)).unwrap();
    assert!(!Arc::ptr_eq(&again, &b));
    assert_eq!(again.read()[0], 5);
}

#[test]
fn invalidate_all_keeps_dirty_pinned_and_held_buffers() {
    let (_dev, cache) = setup(16, 64);
    for b in 0..4 {
        cache.get(BlockNo(b)).unwrap();
    }
    cache.get(BlockNo(1)).unwrap().mark_dirty();
    cache.get(BlockNo(2)).unwrap().pin();
    let held = cache.get(BlockNo(3)).unwrap();
    cache.invalidate_all();
    assert!(cache.peek(BlockNo(0)).is_none());
    for b in 1..4 {
        assert!(cache.peek(BlockNo(b)).is_some(), "block {b}");
    }
    drop(held);
    let st = cache.stats();
    assert_eq!((st.dirty_buffers, st.pinned_buffers), (1, 1));
}

#[test]
fn unpin_without_pin_is_harmless() {
    let (_dev, cache) = setup(16, 64);
    let b = cache.get(BlockNo(0)).unwrap();
    b.unpin();
    assert_eq!(b.pin_count(), 0);
    b.pin();
    b.pin();
    b.unpin();
    assert_eq!(b.pin_count(), 1);
}
