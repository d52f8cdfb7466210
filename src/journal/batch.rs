//! Commit batching: how long a synchronous handle waits, still open, for
//! other handles to join its transaction before the commit starts.
//!
//! - `bdelay=0|yield|N`: jbd's journal_stop() loop of 2008. When the
//!   synchronous caller differs from the last one, remember it, then
//!   `do { old = t_handle_count; wait } while (old != t_handle_count)`,
//!   the wait being a sched_yield or N jiffies (1/hz s, ending on a tick).
//! - `bdelay=jbd2`: Linux since 2009: sleep once, for the average commit
//!   time clamped to [min_batch_time, max_batch_time] µs, if the
//!   transaction is younger than that.
//! - `bdelay=auto` (ours): the 2008 loop, run only where it pays — on a
//!   device whose commits are slow (the fastest recent commit taking at
//!   least [`AUTO_MIN_COMMIT`]) — with a slice of a quarter of the average commit
//!   (at most [`AUTO_MAX_SLICE`]) instead of a jiffy, and never longer in
//!   all than max_batch_time. On a
//!   ramdisk or an array with a write cache a commit is cheaper than any
//!   wait, so auto commits at once, as bdelay=0; on a disk that pays a seek
//!   and a rotation per commit, fsyncs from several processes share one, as
//!   with bdelay=1. A lone fsync (same process as the last) never waits.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::journal::{add_micros, Journal};

/// Below this average commit time, bdelay=auto never waits. Measured with
/// `-o devsim=` (docs/PERFORMANCE.md): any wait loses on ram (commits of
/// ~0.1 ms) and on the array model (1-3 ms), batching wins on the sata
/// model (15 ms and more), where a commit pays a seek and a rotation.
pub const AUTO_MIN_COMMIT: Duration = Duration::from_millis(5);

/// The longest slice of auto's loop. Big transactions on a slow device
/// take tens of milliseconds to commit; slices of a quarter of that keep
/// handles waiting longer than the next fsyncs take to arrive (on the
/// sata model at 16 threads, 106 files/s against bdelay=1's 131).
pub const AUTO_MAX_SLICE: Duration = Duration::from_millis(4);

/// From this commit floor up, a synchronous caller's work (its data, the
/// batching wait, the commit) is worth moving off the thread that received
/// it (see `Journal::commits_are_slow`). On ram a commit costs ~0.1 ms and
/// a hand-off to another thread costs more than it frees; the array model
/// (1-3 ms) and the sata model (15 ms and more) keep a thread that long.
pub const SLOW_COMMIT: Duration = Duration::from_millis(1);

/// How many average commits a transport may gather for before a deferred
/// commit ([`Journal::gather_budget`]). Gathering ends sooner when a yield
/// brings no request, which is how most end (about 40 µs per transaction
/// on ram at 16 threads). Measured on ram over io_uring (docs/PERFORMANCE.md):
/// at 16 threads a budget of 4 commits gathered 2.1 files per commit, 16
/// gathered 2.4 and 64 no more, and 16 served 9% more files/s than 4.
pub const GATHER_COMMITS: u32 = 16;

/// jbd2's bounds on `bdelay=jbd2`'s wait, in microseconds (ext4's
/// EXT4_DEF_MIN_BATCH_TIME and EXT4_DEF_MAX_BATCH_TIME); the upper one
/// bounds `bdelay=auto` as well.
pub const DEFAULT_MIN_BATCH_TIME_US: u32 = 0;
pub const DEFAULT_MAX_BATCH_TIME_US: u32 = 15_000;

/// The batching policy (the `bdelay=` mount option).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Batching {
    Off,
    Yield,
    Jiffies { n: u32, hz: u32 },
    Jbd2 { min_us: u32, max_us: u32 },
    Auto { max_us: u32 },
}

impl Default for Batching {
    fn default() -> Self {
        Batching::Auto {
            max_us: DEFAULT_MAX_BATCH_TIME_US,
        }
    }
}

/// The commit floor: the fastest recent commit, rising by 1/16 per commit
/// towards slower ones. Commits slowed by the CPU (a preempted commit
/// thread on a busy machine) inflate the average, not the floor, which is
/// what the device itself costs. The first commit sets it.
fn next_floor(old: u64, commit_micros: u64) -> u64 {
    if old == 0 {
        return commit_micros.max(1);
    }
    commit_micros.min(old + old / 16 + 1).max(1)
}

thread_local! {
    static CALLER: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Records the process on whose behalf this thread now works (the FUSE
/// request's pid), for the "different sync writer" test of bdelay.
pub fn set_caller(pid: u32) {
    CALLER.with(|c| c.set(pid));
}

fn caller() -> u32 {
    CALLER.with(|c| c.get())
}

/// Sleeps `n` jiffies the way the kernel's schedule_timeout does: the first
/// one ends at the next tick.
fn sleep_jiffies(n: u32, hz: u32) {
    let jiffy = 1_000_000_000u64 / hz.max(1) as u64;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let to_tick = jiffy - now % jiffy;
    std::thread::sleep(Duration::from_nanos(
        to_tick + (n.max(1) as u64 - 1) * jiffy,
    ));
}

impl Journal {
    /// Called by a synchronous handle before it releases its transaction.
    pub(super) fn batch_wait(&self) {
        let policy = self.batching();
        if policy == Batching::Off {
            return;
        }
        let pid = caller();
        if self.last_sync_writer.swap(pid, Ordering::Relaxed) == pid {
            return;
        }
        let started = Instant::now();
        match policy {
            Batching::Off => {}
            Batching::Yield => self.handle_count_loop(std::thread::yield_now),
            Batching::Jiffies { n, hz } => self.handle_count_loop(|| sleep_jiffies(n, hz)),
            Batching::Jbd2 { min_us, max_us } => self.jbd2_wait(min_us, max_us),
            Batching::Auto { max_us } => self.auto_wait(max_us),
        }
        add_micros(&self.counters.batch_wait_micros, started.elapsed());
    }

    /// The 2008 loop: wait while other handles keep joining.
    fn handle_count_loop(&self, wait: impl Fn()) {
        self.handle_count_loop_until(wait, None);
    }

    /// The 2008 loop, ending at `deadline` if one is given.
    fn handle_count_loop_until(&self, wait: impl Fn(), deadline: Option<Instant>) {
        loop {
            let old = self.state.lock().running.handles;
            wait();
            if self.state.lock().running.handles == old {
                return;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return;
            }
        }
    }

    /// Folds one commit's duration into jbd2's running average,
    /// `avg = (t + 3 * avg) / 4`, which jbd2 and auto wait by, and into the
    /// commit floor that auto decides by.
    pub(super) fn note_commit_time(&self, took: Duration) {
        let t = took.as_micros() as u64;
        let avg = &self.counters.avg_commit_micros;
        let _ = avg.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
            Some((t + 3 * old) / 4)
        });
        let floor = &self.counters.floor_commit_micros;
        let _ = floor.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
            Some(next_floor(old, t))
        });
    }

    /// How long a server that takes requests in batches (a FUSE io_uring
    /// queue) may go on serving its CPU's other callers before it starts
    /// the commit a deferred synchronous caller of process `pid` asked for
    /// ([`CommitStart::Deferred`](super::CommitStart)); None when it
    /// should start it at once.
    ///
    /// This is the 2008 loop where the wait cannot be a sleep or a
    /// sched_yield inside the handle: the thread that would yield is the
    /// one that must serve the joiners' requests. So the server yields
    /// between batches instead, and goes on while each yield brings
    /// requests, within this budget. As in the loop, a lone caller (the
    /// same process as the last) never waits, and bdelay=0 never does.
    /// bdelay=auto and yield gather on a fast device, for at most
    /// [`GATHER_COMMITS`] average commits, never past max_batch_time nor
    /// [`SLOW_COMMIT`]: a stream of other requests on the CPU (a reader)
    /// keeps each yield bringing some, so the budget is what ends it.
    /// Slow devices never get here: their synchronous work runs off the
    /// queue (see [`Journal::batching_sleeps`]).
    pub fn gather_budget(&self, pid: u32) -> Option<Duration> {
        let max_us = match self.batching() {
            Batching::Yield => DEFAULT_MAX_BATCH_TIME_US,
            Batching::Auto { max_us } if !self.auto_waits_here() => max_us,
            _ => return None,
        };
        if max_us == 0 || self.last_sync_writer.swap(pid, Ordering::Relaxed) == pid {
            return None;
        }
        let cap = Duration::from_micros(max_us as u64);
        // Never past SLOW_COMMIT either: a device whose commits take
        // longer sends its fsyncs to runners and never gathers, so a
        // gather is never worth more than that.
        Some(
            (self.average_commit() * GATHER_COMMITS)
                .min(cap)
                .min(SLOW_COMMIT),
        )
    }

    /// Counts a batching wait spent outside the journal (a transport's
    /// gathering) in the statistics' "waiting to batch".
    pub fn note_batch_wait(&self, waited: Duration) {
        add_micros(&self.counters.batch_wait_micros, waited);
    }

    /// Whether this device's commits take long enough (the floor at
    /// least [`SLOW_COMMIT`]) that callers waiting for one should not hold
    /// a scarce thread, such as a FUSE worker, while they do.
    pub fn commits_are_slow(&self) -> bool {
        let floor = self.counters.floor_commit_micros.load(Ordering::Relaxed);
        Duration::from_micros(floor) >= SLOW_COMMIT
    }

    /// Whether a synchronous handle's batching wait may sleep. A caller
    /// that must not block (a FUSE-over-io_uring queue thread serves every
    /// request from its CPU) hands such work to a thread that may.
    pub fn batching_sleeps(&self) -> bool {
        match self.batching() {
            Batching::Off | Batching::Yield => false,
            Batching::Jiffies { n, .. } => n > 0,
            Batching::Jbd2 { max_us, .. } => max_us > 0,
            Batching::Auto { max_us } => max_us > 0 && self.auto_waits_here(),
        }
    }

    /// Whether this device's commit floor is slow enough for bdelay=auto
    /// to wait ([`AUTO_MIN_COMMIT`]).
    fn auto_waits_here(&self) -> bool {
        let floor = self.counters.floor_commit_micros.load(Ordering::Relaxed);
        Duration::from_micros(floor) >= AUTO_MIN_COMMIT
    }

    fn average_commit(&self) -> Duration {
        Duration::from_micros(self.counters.avg_commit_micros.load(Ordering::Relaxed))
    }

    fn jbd2_wait(&self, min_us: u32, max_us: u32) {
        if max_us == 0 {
            return;
        }
        let want = self.average_commit().clamp(
            Duration::from_micros(min_us as u64),
            Duration::from_micros(max_us as u64),
        );
        let age = self.state.lock().running.started.elapsed();
        if age < want {
            std::thread::sleep(want - age);
        }
    }

    fn auto_wait(&self, max_us: u32) {
        let floor = self.counters.floor_commit_micros.load(Ordering::Relaxed);
        if max_us == 0 || Duration::from_micros(floor) < AUTO_MIN_COMMIT {
            return;
        }
        let commit = self.average_commit();
        let max = Duration::from_micros(max_us as u64);
        let slice = (commit / 4).min(AUTO_MAX_SLICE).min(max);
        let deadline = Instant::now() + max;
        self.handle_count_loop_until(|| std::thread::sleep(slice), Some(deadline));
    }
}

#[cfg(test)]
mod tests {
    use super::next_floor;

    #[test]
    fn commit_floor_follows_fast_commits_and_rises_slowly() {
        let mut floor = next_floor(0, 20_000);
        assert_eq!(floor, 20_000);
        // A fast commit lowers it at once; slow outliers barely move it.
        floor = next_floor(floor, 100);
        assert_eq!(floor, 100);
        for _ in 0..3 {
            floor = next_floor(floor, 30_000);
        }
        assert!(floor < 130, "{floor}");
        // A device that really became slow is followed within ~100 commits.
        for _ in 0..120 {
            floor = next_floor(floor, 20_000);
        }
        assert_eq!(floor, 20_000);
    }
}
