//! Concurrency: one read for racing lookups of a missing block, and a stress
//! run of many threads modifying shared blocks under eviction and syncs.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use super::{on_disk, setup, BS};
use crate::cache::{BufferCache, CacheStats};
use crate::format::BlockNo;

#[test]
fn racing_gets_of_a_missing_block_share_one_read() {
    let (dev, cache) = setup(16, 64);
    dev.read_delay_ms.store(50, Ordering::SeqCst);
    let cache = Arc::new(cache);
    let barrier = Arc::new(Barrier::new(2));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (cache, barrier) = (Arc::clone(&cache), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                cache.get(BlockNo(4)).unwrap()
            })
        })
        .collect();
    let bufs: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(Arc::ptr_eq(&bufs[0], &bufs[1]));
    assert_eq!(dev.reads(), 1);
    assert_eq!(cache.stats().misses, 2);
}

/// A small deterministic generator, so failures replay.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const THREADS: usize = 16;
const BLOCKS: usize = 256;
const OPS: usize = 20_000;
/// Each thread owns bytes [t * SLICE, (t + 1) * SLICE) of every block.
const SLICE: usize = BS / THREADS;

/// Random get/modify/mark_dirty (and some read_run, pin, sync) on shared
/// blocks; returns the last value written to each block's slice.
fn worker(cache: &BufferCache, t: usize) -> Vec<u8> {
    let mut rng = XorShift(0x9e37_79b9 + t as u64 * 0x1234_5678);
    let mut last = vec![0u8; BLOCKS];
    for op in 0..OPS {
        let b = rng.below(BLOCKS as u64) as u32;
        match rng.below(100) {
            0 => cache.sync_all().unwrap(),
            1..=5 => {
                let n = rng.below(8) as u32 + 1;
                let start = b.min((BLOCKS as u32) - n);
                cache.read_run(BlockNo(start), n).unwrap();
            }
            6..=8 => {
                let buf = cache.get(BlockNo(b)).unwrap();
                buf.pin();
                std::thread::yield_now();
                buf.unpin();
            }
            9..=14 => {
                // Lookups while holding another buffer's guard must not
                // deadlock, even when they trigger eviction writeback.
                let v = (op % 251) as u8 + 1;
                let buf = cache.get(BlockNo(b)).unwrap();
                let mut guard = buf.write();
                let other = rng.below(BLOCKS as u64 - 8) as u32;
                cache.get(BlockNo(other)).unwrap();
                cache.read_run(BlockNo(other), 8).unwrap();
                guard[t * SLICE..(t + 1) * SLICE].fill(v);
                drop(guard);
                buf.mark_dirty();
                last[b as usize] = v;
            }
            _ => {
                let v = (op % 251) as u8 + 1;
                let buf = cache.get(BlockNo(b)).unwrap();
                buf.write()[t * SLICE..(t + 1) * SLICE].fill(v);
                buf.mark_dirty();
                last[b as usize] = v;
            }
        }
    }
    last
}

fn run_stress(cap_blocks: usize) -> CacheStats {
    let (dev, cache) = setup(BLOCKS, cap_blocks);
    let cache = Arc::new(cache);
    let (tx, rx) = crossbeam_channel::unbounded();
    for t in 0..THREADS {
        let (cache, tx) = (Arc::clone(&cache), tx.clone());
        std::thread::spawn(move || {
            let last = worker(&cache, t);
            let _ = tx.send((t, last));
        });
    }
    let mut lasts = vec![Vec::new(); THREADS];
    for _ in 0..THREADS {
        let (t, last) = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("a worker finished in time (deadlock?)");
        lasts[t] = last;
    }
    cache.sync_all().unwrap();
    assert_eq!(cache.stats().dirty_buffers, 0);
    for b in 0..BLOCKS {
        let disk = on_disk(&dev, b as u32);
        for (t, last) in lasts.iter().enumerate() {
            let slice = &disk[t * SLICE..(t + 1) * SLICE];
            assert!(
                slice.iter().all(|&x| x == last[b]),
                "block {b}, thread {t}: want {}, disk has {slice:?}",
                last[b]
            );
        }
    }
    cache.stats()
}

#[test]
fn stress_with_a_cache_larger_than_the_working_set() {
    let st = run_stress(BLOCKS * 4);
    assert_eq!(st.evictions, 0, "{st:?}");
}

#[test]
fn stress_under_eviction_pressure() {
    let st = run_stress(BLOCKS / 4);
    assert!(st.evictions > 0, "{st:?}");
    eprintln!("{st:?}");
}
