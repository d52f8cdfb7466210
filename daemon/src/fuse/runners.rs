//! A pool of threads that grows on demand, for requests that would
//! otherwise hold a FUSE worker while they wait on a slow device.
//!
//! fuser serves requests from a fixed set of workers. A few workers answer
//! the kernel fastest (a worker still awake picks up the next request), but
//! on slow storage each fsync keeps its worker through the file's data
//! write, the batching wait and the commit, and a few workers then cap how
//! many fsyncs can share a commit. The adapter hands such requests here
//! instead: a runner that is idle takes the job, or a new one is started,
//! so any number of fsyncs wait side by side while the workers go back to
//! the kernel. Runners that stay idle for [`IDLE_EXIT`] end.

use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

/// A job for a runner.
pub(super) type Job = Box<dyn FnOnce() + Send + 'static>;

/// How long an idle runner waits for another job before it ends.
const IDLE_EXIT: Duration = Duration::from_secs(10);

/// The pool. Jobs run in the order given, each on one runner.
pub(super) struct Runners {
    name: &'static str,
    max: usize,
    jobs: Sender<Job>,
    queue: Receiver<Job>,
    /// Runners free for a job (idle, or started for one) less the jobs
    /// sent and not yet taken. A caller that finds none spare starts a
    /// runner; a runner leaves only by taking one away while it is
    /// positive, so every queued job has a runner coming for it.
    spare: AtomicIsize,
    live: AtomicUsize,
    idle_exit: Duration,
}

impl Runners {
    /// A pool of at most `max` runners named `name`; none start until
    /// there is a job.
    pub(super) fn new(name: &'static str, max: usize) -> Arc<Self> {
        Self::with_idle_exit(name, max, IDLE_EXIT)
    }

    fn with_idle_exit(name: &'static str, max: usize, idle_exit: Duration) -> Arc<Self> {
        let (jobs, queue) = crossbeam_channel::unbounded();
        Arc::new(Runners {
            name,
            max: max.max(1),
            jobs,
            queue,
            spare: AtomicIsize::new(0),
            live: AtomicUsize::new(0),
            idle_exit,
        })
    }

    /// Runs `job` on a runner: an idle one, or a new one while there are
    /// fewer than the maximum; past that it waits for the first free one.
    pub(super) fn run(self: &Arc<Self>, job: Job) {
        if self.spare.fetch_sub(1, Ordering::AcqRel) <= 0 {
            self.start_runner();
        }
        // The receiver lives in `self`, so the channel cannot be closed.
        let _ = self.jobs.send(job);
    }

    /// Runners alive now.
    #[cfg(test)]
    fn live(&self) -> usize {
        self.live.load(Ordering::Acquire)
    }

    fn start_runner(self: &Arc<Self>) {
        if self.live.fetch_add(1, Ordering::AcqRel) >= self.max {
            // The job waits for the first runner to come free.
            self.live.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        self.spare.fetch_add(1, Ordering::AcqRel);
        let pool = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name(self.name.into())
            .spawn(move || pool.serve());
        if let Err(e) = spawned {
            self.spare.fetch_sub(1, Ordering::AcqRel);
            self.live.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!(pool = self.name, "cannot start a runner: {e}");
        }
    }

    /// A runner's life: jobs as they come, until it has been idle for
    /// [`IDLE_EXIT`] with no job owed to it.
    fn serve(&self) {
        loop {
            match self.queue.recv_timeout(self.idle_exit) {
                Ok(job) => {
                    job();
                    self.spare.fetch_add(1, Ordering::AcqRel);
                }
                Err(RecvTimeoutError::Timeout) => {
                    let leave = self
                        .spare
                        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                            (n > 0).then(|| n - 1)
                        })
                        .is_ok();
                    if leave {
                        break;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        self.live.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;

    #[test]
    fn blocked_jobs_each_get_a_runner() {
        let pool = Runners::new("test-runner", 64);
        let n = 16;
        let all_in = Arc::new(Barrier::new(n + 1));
        for _ in 0..n {
            let all_in = all_in.clone();
            pool.run(Box::new(move || {
                all_in.wait();
            }));
        }
        // Every job waits for all the others: only runners side by side
        // get past this.
        all_in.wait();
        assert!(pool.live() <= n);
    }

    #[test]
    fn idle_runners_are_reused() {
        let pool = Runners::new("test-runner", 64);
        for _ in 0..50 {
            let (tx, rx) = crossbeam_channel::bounded(1);
            pool.run(Box::new(move || tx.send(()).unwrap()));
            rx.recv().unwrap();
            // Let the runner count itself free before the next job.
            while pool.spare.load(Ordering::Acquire) == 0 {
                std::thread::yield_now();
            }
        }
        assert_eq!(pool.live(), 1);
    }

    #[test]
    fn idle_runners_end_and_new_jobs_start_new_ones() {
        let pool = Runners::with_idle_exit("test-runner", 8, Duration::from_millis(20));
        for round in 0..3 {
            let (tx, rx) = crossbeam_channel::bounded(1);
            pool.run(Box::new(move || tx.send(round).unwrap()));
            assert_eq!(rx.recv().unwrap(), round);
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while pool.live() > 0 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "an idle runner never ended"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            assert_eq!(pool.spare.load(Ordering::Acquire), 0);
        }
    }

    #[test]
    fn past_the_maximum_jobs_queue() {
        let pool = Runners::new("test-runner", 2);
        let (tx, rx) = crossbeam_channel::unbounded();
        for i in 0..10 {
            let tx = tx.clone();
            pool.run(Box::new(move || tx.send(i).unwrap()));
        }
        let mut got: Vec<i32> = (0..10).map(|_| rx.recv().unwrap()).collect();
        got.sort();
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        assert!(pool.live() <= 2);
    }
}
