//! Writeback: exactly-once, coalescing, pins, races with modification, errors.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{on_disk, setup, BS};
use crate::cache::Buffer;
use crate::format::BlockNo;

fn dirty(buf: &Buffer, byte: u8) {
    buf.write().fill(byte);
    buf.mark_dirty();
}

#[test]
fn sync_all_writes_once_and_coalesces_adjacent_blocks() {
    let (dev, cache) = setup(16, 64);
    for b in [1, 2, 3, 7] {
        dirty(&cache.get_new(BlockNo(b)).unwrap(), b as u8);
    }
    assert_eq!(cache.stats().dirty_buffers, 4);
    cache.sync_all().unwrap();
    let bs = BS as u64;
    assert_eq!(dev.take_extents(), vec![(bs, 3 * BS), (7 * bs, BS)]);
    assert_eq!(cache.stats().writes, 2);
    assert_eq!(dev.mem.flush_count(), 1);
    for b in [1, 2, 3, 7] {
        assert_eq!(on_disk(&dev, b), vec![b as u8; BS]);
        assert!(!cache.peek(BlockNo(b)).unwrap().is_dirty());
    }
    cache.sync_all().unwrap();
    assert_eq!(dev.writes(), 2);
    assert_eq!(cache.stats().dirty_buffers, 0);
}

#[test]
fn pinned_buffers_are_not_written_home() {
    let (dev, cache) = setup(16, 64);
    let bufs: Vec<_> = (1..4).map(|b| cache.get_new(BlockNo(b)).unwrap()).collect();
    bufs[1].pin();
    for (i, b) in bufs.iter().enumerate() {
        dirty(b, i as u8 + 1);
    }
    cache.sync_all().unwrap();
    let bs = BS as u64;
    assert_eq!(dev.take_extents(), vec![(bs, BS), (3 * bs, BS)]);
    assert!(bufs[1].is_dirty());
    assert_eq!(on_disk(&dev, 2), vec![0; BS]);
    assert_eq!(cache.stats().pinned_buffers, 1);
    bufs[1].unpin();
    cache.write_dirty(&[BlockNo(2)]).unwrap();
    assert_eq!(dev.take_extents(), vec![(2 * bs, BS)]);
    assert_eq!(on_disk(&dev, 2), vec![2; BS]);
}

#[test]
fn write_dirty_writes_only_the_named_blocks() {
    let (dev, cache) = setup(16, 64);
    for b in 0..6 {
        dirty(&cache.get_new(BlockNo(b)).unwrap(), 0x55);
    }
    cache
        .write_dirty(&[BlockNo(4), BlockNo(1), BlockNo(0), BlockNo(1), BlockNo(9)])
        .unwrap();
    let bs = BS as u64;
    assert_eq!(dev.take_extents(), vec![(0, 2 * BS), (4 * bs, BS)]);
    assert_eq!(cache.stats().dirty_buffers, 3);
    assert_eq!(dev.mem.flush_count(), 0);
}

#[test]
fn a_buffer_redirtied_during_writeback_stays_dirty() {
    let (dev, cache) = setup(16, 64);
    let buf = cache.get_new(BlockNo(3)).unwrap();
    dirty(&buf, 1);
    let racer = Arc::clone(&buf);
    *dev.on_write.lock() = Some(Box::new(move || dirty(&racer, 2)));
    cache.sync_all().unwrap();
    assert!(
        buf.is_dirty(),
        "modified while its old copy was being written"
    );
    assert_eq!(on_disk(&dev, 3), vec![1; BS]);
    cache.sync_all().unwrap();
    assert!(!buf.is_dirty());
    assert_eq!(on_disk(&dev, 3), vec![2; BS]);
}

#[test]
fn write_errors_are_returned_and_buffers_stay_dirty() {
    let (dev, cache) = setup(16, 64);
    for b in [2, 5] {
        dirty(&cache.get_new(BlockNo(b)).unwrap(), 9);
    }
    dev.fail_writes.store(true, Ordering::SeqCst);
    let e = cache.sync_all().unwrap_err();
    assert!(e.to_string().contains("injected"), "{e}");
    assert_eq!(cache.stats().dirty_buffers, 2);
    assert_eq!(dev.mem.flush_count(), 0);
    dev.fail_writes.store(false, Ordering::SeqCst);
    cache.sync_all().unwrap();
    assert_eq!(cache.stats().dirty_buffers, 0);
    assert_eq!(on_disk(&dev, 5), vec![9; BS]);
}

#[test]
fn clear_dirty_drops_the_write() {
    let (dev, cache) = setup(16, 64);
    let buf = cache.get_new(BlockNo(1)).unwrap();
    dirty(&buf, 4);
    buf.clear_dirty();
    cache.sync_all().unwrap();
    assert_eq!(dev.writes(), 0);
}

#[test]
fn pin_waits_for_a_writeback_already_in_flight() {
    use std::sync::atomic::AtomicBool;
    let (dev, cache) = setup(16, 64);
    let buf = cache.get_new(BlockNo(2)).unwrap();
    dirty(&buf, 3);
    let write_done = Arc::new(AtomicBool::new(false));
    let (pinner, done) = (Arc::clone(&buf), Arc::clone(&write_done));
    let (tx, rx) = crossbeam_channel::bounded(1);
    *dev.on_write.lock() = Some(Box::new(move || {
        let t = std::thread::spawn(move || {
            pinner.pin();
            done.load(Ordering::SeqCst)
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        write_done.store(true, Ordering::SeqCst);
        let _ = tx.send(t);
    }));
    cache.sync_all().unwrap();
    let pinned_after_write = rx.recv().unwrap().join().unwrap();
    assert!(
        pinned_after_write,
        "pin returned while the write was in flight"
    );
    assert!(buf.is_pinned());
}
