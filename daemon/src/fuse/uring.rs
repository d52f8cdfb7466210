//! FUSE over io_uring (Linux 6.14+): one ring and one thread per possible
//! CPU, pinned to it, each with `depth` entries registered with the
//! kernel. The kernel puts a request on the queue of the CPU its caller
//! runs on, so the caller, the ring thread and the reply stay on one CPU:
//! no cross-CPU wake-up per request, which is what /dev/fuse costs.
//!
//! A ring entry is a header buffer (`struct fuse_uring_req_header`) and a
//! payload buffer. The kernel fills them and completes the entry's command;
//! the thread decodes ([`abi::decode`]), calls the [`Handler`], encodes the
//! answer into the same buffers and sends COMMIT_AND_FETCH, which both
//! answers and re-arms the entry. Answers given on another thread (fsync,
//! from the commit thread) travel back over a channel, and a byte on a pipe
//! that the ring reads wakes the thread: only the ring's own thread touches
//! its submission queue.
//!
//! The kernel holds every request until each queue has an entry
//! registered; FORGET, INTERRUPT and notifications stay on /dev/fuse.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use io_uring::{cqueue, opcode, squeue, types, IoUring};

use super::abi;
use super::handler::recycle;
use super::request::*;

/// Entries per queue unless `-o io_uring_q_depth` says otherwise.
pub const DEFAULT_DEPTH: u32 = 8;

/// How long a queue looks for its next request after answering, unless
/// `-o io_uring_poll_us` says otherwise (see [`Queue::poll_for_requests`]).
pub const DEFAULT_POLL: Duration = Duration::from_micros(50);

/// The longest `-o io_uring_poll_us` takes, in microseconds.
pub const MAX_POLL_US: u32 = 10_000;

/// How each queue is set up (`-o io_uring_q_depth`, `-o io_uring_poll_us`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingConfig {
    /// Entries registered per queue (clamped by [`clamp_depth`]).
    pub depth: u32,
    /// How long a queue keeps looking for requests after it has answered
    /// before it sleeps; zero sleeps at once.
    pub poll: Duration,
}

impl RingConfig {
    /// The setup the queues get: the depth within [`clamp_depth`]'s bounds.
    pub fn clamped(self) -> RingConfig {
        RingConfig {
            depth: clamp_depth(self.depth),
            ..self
        }
    }
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            depth: DEFAULT_DEPTH,
            poll: DEFAULT_POLL,
        }
    }
}

/// At most this many yields before a deferred commit (see `Queue::gather`).
const MAX_GATHER_ROUNDS: u32 = 256;

/// The user_data of the wake-up pipe's read; entries use their index.
const WAKE: u64 = u64::MAX;

/// The entries a queue gets for a requested depth: at least one, at most
/// 1,024 (each holds a 1 MiB payload buffer).
pub fn clamp_depth(depth: u32) -> u32 {
    depth.clamp(1, 1024)
}

/// The possible CPUs, as the kernel counts queues (`num_possible_cpus`):
/// the highest number in /sys/devices/system/cpu/possible, plus one.
pub fn possible_cpus() -> io::Result<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let highest = text
        .trim()
        .split([',', '-'])
        .filter_map(|n| n.parse::<usize>().ok())
        .max();
    highest
        .map(|h| h + 1)
        .ok_or_else(|| io::Error::other(format!("cannot parse possible CPUs {text:?}")))
}

/// Whether this process can make a ring of 128-byte entries (io_uring may
/// be disabled by sysctl, seccomp or an old kernel). Asked before FUSE_INIT:
/// once the kernel grants FUSE_OVER_IO_URING it holds every request until
/// the queues are registered, so a daemon that cannot make rings must not
/// ask for them.
pub fn rings_available() -> io::Result<()> {
    IoUring::<squeue::Entry128, cqueue::Entry>::builder()
        .build(2)
        .map(drop)
}

/// The running queue threads.
pub struct Rings {
    threads: Vec<JoinHandle<()>>,
    pub queues: usize,
    pub config: RingConfig,
}

impl Rings {
    /// Starts one queue per possible CPU on the FUSE connection `dev` (after
    /// FUSE_INIT granted FUSE_OVER_IO_URING). Each entry gets a payload
    /// buffer of `payload_size` bytes (at least what the kernel needs:
    /// max(8 KiB, max_write, max_pages pages)).
    pub fn start<H: Handler>(
        dev: &OwnedFd,
        handler: Arc<H>,
        config: RingConfig,
        payload_size: usize,
    ) -> io::Result<Rings> {
        let queues = possible_cpus()?;
        let config = config.clamped();
        let mut threads = Vec::with_capacity(queues);
        for qid in 0..queues {
            let dev = dev.try_clone()?;
            let handler = handler.clone();
            // The ring is made on its own thread: IORING_SETUP_SINGLE_ISSUER
            // binds it to the thread that makes it.
            let (made_tx, made) = crossbeam_channel::bounded(1);
            let thread = std::thread::Builder::new()
                .name(format!("jbdfs-ring-{qid}"))
                .spawn(
                    move || match Queue::new(dev, qid as u16, config, payload_size) {
                        Ok(queue) => {
                            let _ = made_tx.send(Ok(()));
                            queue.run(&*handler);
                        }
                        Err(e) => drop(made_tx.send(Err(e))),
                    },
                )?;
            made.recv().map_err(io::Error::other)??;
            threads.push(thread);
        }
        Ok(Rings {
            threads,
            queues,
            config,
        })
    }

    /// Waits for the queue threads, which end when the kernel tears the
    /// connection's rings down (unmount or abort).
    pub fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Pins this thread to `cpu`, so that it serves the requests its CPU
/// makes without a migration. A possible CPU that is offline cannot be
/// pinned to; its queue still serves (the kernel needs it registered).
fn pin_to(cpu: usize) {
    // SAFETY: cpu_set_t is plain data, zeroed is a valid empty set, and
    // CPU_SET only writes inside it (it checks the index).
    let res = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if res != 0 {
        tracing::debug!(cpu, error = %io::Error::last_os_error(), "ring thread not pinned");
    }
}

/// One registered entry's buffers. Boxed so that their addresses, which
/// the kernel holds, never move.
struct Slot {
    header: Box<[u8]>,
    payload: Box<[u8]>,
    /// The two `struct iovec`s REGISTER points at, as (base, len) words:
    /// a pointer and a size_t are each a usize on Linux.
    iov: Box<[usize; 4]>,
    /// The unique of the request the kernel gave this entry.
    unique: u64,
    /// The most the kernel asked for (READ, READDIR and xattr sizes).
    limit: usize,
    state: SlotState,
}

/// Where a ring entry is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SlotState {
    /// Registered or committed: the kernel holds it until a request comes.
    InKernel,
    /// A request is being answered (perhaps on another thread, an fsync).
    Answering,
    /// The kernel released it (unmount, abort): the queue ends when every
    /// entry is.
    Released,
}

impl Slot {
    fn new(payload_size: usize) -> Slot {
        let mut header = vec![0u8; abi::HEADER_BUF_SIZE].into_boxed_slice();
        // calloc'd: pages the kernel never writes are never resident.
        let mut payload = vec![0u8; payload_size].into_boxed_slice();
        let iov = Box::new([
            header.as_mut_ptr() as usize,
            header.len(),
            payload.as_mut_ptr() as usize,
            payload.len(),
        ]);
        Slot {
            header,
            payload,
            iov,
            unique: 0,
            limit: 0,
            state: SlotState::Released,
        }
    }
}

/// An answer on its way back to a ring entry.
struct Completion {
    slot: usize,
    outcome: Outcome,
}

/// What answering threads share with a queue's thread.
struct Shared {
    owner: ThreadId,
    tx: Sender<Completion>,
    /// Whether a wake-up byte is already on its way (at most one is).
    wake_pending: AtomicBool,
    wake: std::io::PipeWriter,
}

thread_local! {
    /// Answers given on the queue's own thread while it handles a
    /// request: committed when the handler returns, without the channel.
    static LOCAL: RefCell<Vec<Completion>> = const { RefCell::new(Vec::new()) };
}

/// The [`Responder`] for a request that came on a ring. One dropped
/// unanswered (a bug) answers EIO, so that the entry is not lost: the
/// queue could not end at unmount while it waits for it.
pub struct RingReply {
    to: Option<(Arc<Shared>, usize)>,
}

impl RingReply {
    fn send(&mut self, outcome: Outcome) {
        let Some((shared, slot)) = self.to.take() else {
            return;
        };
        let c = Completion { slot, outcome };
        if std::thread::current().id() == shared.owner {
            return LOCAL.with_borrow_mut(|l| l.push(c));
        }
        if shared.tx.send(c).is_err() {
            return; // the queue has ended: the connection is gone
        }
        if !shared.wake_pending.swap(true, Ordering::AcqRel) {
            let _ = (&shared.wake).write_all(&[1]);
        }
    }
}

impl Responder for RingReply {
    fn respond(mut self, outcome: Outcome) {
        self.send(outcome);
    }
}

impl Drop for RingReply {
    fn drop(&mut self) {
        if self.to.is_some() {
            tracing::error!("a FUSE request was dropped unanswered");
            self.send(Err(Errno::from_i32(libc::EIO)));
        }
    }
}

/// One queue: its ring, entries and wake-up pipe.
struct Queue {
    qid: u16,
    dev: OwnedFd,
    slots: Vec<Slot>,
    wake_rx: std::io::PipeReader,
    wake_buf: Box<[u8; 64]>,
    completions: Receiver<Completion>,
    tx: Sender<Completion>,
    wake_tx: Option<std::io::PipeWriter>,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    poll: Duration,
}

impl Queue {
    fn new(dev: OwnedFd, qid: u16, config: RingConfig, payload_size: usize) -> io::Result<Queue> {
        let depth = config.depth;
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .setup_single_issuer()
            .setup_coop_taskrun()
            .setup_taskrun_flag()
            .build((depth + 1).next_power_of_two())?;
        let (wake_rx, wake_tx) = std::io::pipe()?;
        let (tx, completions) = crossbeam_channel::unbounded();
        Ok(Queue {
            qid,
            dev,
            slots: (0..depth).map(|_| Slot::new(payload_size)).collect(),
            wake_rx,
            wake_buf: Box::new([0; 64]),
            completions,
            tx,
            wake_tx: Some(wake_tx),
            ring,
            poll: config.poll,
        })
    }

    fn run(mut self, handler: &impl Handler) {
        pin_to(self.qid as usize);
        let Some(wake) = self.wake_tx.take() else {
            return self.finish();
        };
        let shared = Arc::new(Shared {
            owner: std::thread::current().id(),
            tx: self.tx.clone(),
            wake_pending: AtomicBool::new(false),
            wake,
        });
        if let Err(e) = self.register_all() {
            tracing::error!(qid = self.qid, "FUSE io_uring queue not registered: {e}");
            return self.finish();
        }
        while self.slots.iter().any(|s| s.state != SlotState::Released) {
            if let Err(e) = self.turn(handler, &shared) {
                tracing::error!(qid = self.qid, "FUSE io_uring queue failed: {e}");
                break;
            }
        }
        self.finish();
    }

    /// Registers every entry and arms the wake-up read.
    fn register_all(&mut self) -> io::Result<()> {
        for i in 0..self.slots.len() {
            let sqe = self.register_sqe(i);
            self.push(sqe)?;
            self.slots[i].state = SlotState::InKernel;
        }
        self.arm_wake()?;
        self.ring.submit()?;
        Ok(())
    }

    /// One wait for completions, and everything they lead to.
    fn turn(&mut self, handler: &impl Handler, shared: &Arc<Shared>) -> io::Result<()> {
        if !self.poll_for_requests() {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        self.serve_completions(handler, shared)?;
        if let Some(budget) = handler.gather_budget() {
            self.gather(handler, shared, budget)?;
        }
        handler.batch_done();
        self.commit_local()
    }

    /// After answering, sends the answers and keeps looking for the next
    /// request for up to `poll`, yielding the CPU between looks, before the
    /// queue sleeps; whether one came. The answer wakes its caller while
    /// this thread still runs, and when caller and daemon are in different
    /// task groups (the daemon in a session or cgroup of its own) the
    /// scheduler then moves the caller to an idle CPU on nearly every
    /// answer: each request wakes a sleeping CPU, and the next lands on the
    /// other queue, whose thread must be woken too (tens of microseconds a
    /// request on a VM whose idle CPUs halt; docs/PERFORMANCE.md, the
    /// eleventh session). While a queue polls, its CPU is not idle and its
    /// thread is runnable, as in a shared task group, so its callers mostly
    /// stay (migrations fell tenfold) and their next request is caught
    /// without a sleep and a wake-up. The time limit bounds what polling
    /// takes from a CPU that turns out to be wanted.
    fn poll_for_requests(&mut self) -> bool {
        if self.poll.is_zero() {
            return false;
        }
        self.send_answers_and_run_task_work();
        let started = Instant::now();
        loop {
            if self.ring.submission().taskrun() {
                self.send_answers_and_run_task_work();
            }
            if !self.ring.completion().is_empty() {
                return true;
            }
            if started.elapsed() >= self.poll {
                return false;
            }
            std::thread::yield_now();
        }
    }

    /// Serves every completion at hand: requests, and answers from other
    /// threads. Lookups and attribute reads go first, and their answers
    /// leave before the rest is served; and after each other request the
    /// queue looks again for new ones. Their callers may hold a directory's
    /// lock while they wait (a path walk's revalidation, and the LOOKUP of
    /// every mkdir that finds its name taken, which fs_mark makes before
    /// each file), and every other caller of that directory waits behind
    /// them: such a LOOKUP queued behind a CREATE or a commit cost one lock
    /// handoff per file tens of microseconds. The looking again stops after
    /// a few rounds of entries, so that a stream of requests cannot hold
    /// off the batch's commit.
    fn serve_completions(
        &mut self,
        handler: &impl Handler,
        shared: &Arc<Shared>,
    ) -> io::Result<()> {
        let mut pending: VecDeque<(u64, i32)> = VecDeque::new();
        let mut looks = 4 * self.slots.len() + 1;
        loop {
            if looks > 0 {
                looks -= 1;
                self.collect_quick_first(&mut pending, handler, shared)?;
            }
            let Some((tag, res)) = pending.pop_front() else {
                return Ok(());
            };
            if tag == WAKE {
                self.woken(shared, res)?;
            } else {
                self.request(tag as usize, res, handler, shared);
                self.commit_local()?;
            }
        }
    }

    /// Takes the completions that have arrived, serves the quick requests
    /// among them and sends their answers, and leaves the rest in
    /// `pending`. Requests sent while this thread ran in user space wait
    /// as task work until it next enters the kernel; the ring's taskrun
    /// flag says when there are some, and a submit runs them.
    fn collect_quick_first(
        &mut self,
        pending: &mut VecDeque<(u64, i32)>,
        handler: &impl Handler,
        shared: &Arc<Shared>,
    ) -> io::Result<()> {
        if self.ring.submission().taskrun() {
            self.send_answers_and_run_task_work();
        }
        let arrived: Vec<(u64, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        let mut quick = false;
        for (tag, res) in arrived {
            if res >= 0 && self.is_quick(tag) {
                self.request(tag as usize, res, handler, shared);
                self.commit_local()?;
                quick = true;
            } else {
                pending.push_back((tag, res));
            }
        }
        if quick {
            self.send_answers();
        }
        Ok(())
    }

    /// Whether entry `tag` holds a request that is answered without a
    /// journal handle: a lookup or a read of attributes.
    fn is_quick(&self, tag: u64) -> bool {
        let Some(slot) = usize::try_from(tag).ok().and_then(|i| self.slots.get(i)) else {
            return false;
        };
        abi::InHeader::parse(&slot.header).is_ok_and(|h| {
            matches!(
                h.opcode,
                abi::FUSE_LOOKUP
                    | abi::FUSE_GETATTR
                    | abi::FUSE_STATX
                    | abi::FUSE_GETXATTR
                    | abi::FUSE_LISTXATTR
                    | abi::FUSE_ACCESS
                    | abi::FUSE_READLINK
                    | abi::FUSE_STATFS
            )
        })
    }

    /// Hands the kernel the answers queued so far.
    fn send_answers(&mut self) {
        if !self.ring.submission().is_empty() {
            self.send_answers_and_run_task_work();
        }
    }

    /// Enters the kernel: submits what is queued, and (on the way back)
    /// runs the ring's task work, which posts the requests sent meanwhile.
    /// A failure (the kernel busy with a full completion queue) only leaves
    /// the answers for the queue's next wait, which handles its errors.
    fn send_answers_and_run_task_work(&mut self) {
        if let Err(e) = self.ring.submit() {
            tracing::debug!(qid = self.qid, "answers left for the next wait: {e}");
        }
    }

    /// Before a deferred commit: sends this batch's answers, yields the CPU
    /// to the callers they wake, and serves what those send, while each
    /// yield brings requests and `budget` lasts. Their fsyncs then share
    /// the commit. A caller sleeps while its request is served on this
    /// CPU, so without the yield each batch holds about one request and
    /// each fsync commits alone (see `Journal::gather_budget`).
    fn gather(
        &mut self,
        handler: &impl Handler,
        shared: &Arc<Shared>,
        budget: Duration,
    ) -> io::Result<()> {
        let started = Instant::now();
        for _ in 0..MAX_GATHER_ROUNDS {
            // A failed submit (the kernel busy with a full completion queue)
            // only ends the gathering: the answers stay queued for the
            // queue's next wait, which handles its errors.
            if let Err(e) = self.ring.submit() {
                tracing::debug!(qid = self.qid, "gathering stopped: {e}");
                break;
            }
            std::thread::yield_now();
            // The yield's return to user space ran the ring's task work,
            // which posts the requests sent meanwhile.
            if self.ring.completion().is_empty() {
                break;
            }
            self.serve_completions(handler, shared)?;
            if started.elapsed() >= budget {
                break;
            }
        }
        // The last round's answers go before the commit, not after it.
        self.send_answers();
        handler.note_gathered(started.elapsed());
        Ok(())
    }

    /// An entry came back from the kernel: a request, or the end.
    fn request(&mut self, i: usize, res: i32, handler: &impl Handler, shared: &Arc<Shared>) {
        let Some(slot) = self.slots.get_mut(i) else {
            return;
        };
        slot.state = SlotState::Released;
        if res < 0 {
            let err = io::Error::from_raw_os_error(-res);
            match -res {
                libc::ENOTCONN | libc::ECONNABORTED | libc::ECANCELED | libc::ENODEV => {
                    tracing::debug!(qid = self.qid, "ring entry released: {err}")
                }
                _ => tracing::error!(qid = self.qid, "ring entry failed: {err}"),
            }
            return;
        }
        let header = match abi::InHeader::parse(&slot.header) {
            Ok(h) => h,
            Err(e) => {
                // Without a unique the entry cannot be answered, nor re-armed.
                tracing::error!(qid = self.qid, "undecodable FUSE request header: {e}");
                return;
            }
        };
        slot.unique = header.unique;
        slot.state = SlotState::Answering;
        let mut ctx = header.ctx();
        ctx.must_not_block = true;
        ctx.serves_batches = true;
        let reply = RingReply {
            to: Some((shared.clone(), i)),
        };
        let decoded = abi::ring_payload(&slot.header, &slot.payload)
            .and_then(|payload| abi::decode(&header, abi::op_in(&slot.header), payload));
        match decoded {
            Ok(op) => {
                slot.limit = answer_limit(&op, slot.payload.len());
                // A handler that panics (a bug) must not take the queue,
                // and every caller on this CPU, with it: its reply, dropped
                // unanswered, answers EIO.
                let run = || handler.dispatch(&ctx, op, reply);
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).is_err() {
                    tracing::error!(qid = self.qid, "a FUSE request handler panicked");
                }
            }
            Err(e) => {
                tracing::warn!(qid = self.qid, "undecodable FUSE request: {e}");
                reply.respond(Err(Errno::from_i32(libc::EIO)));
            }
        }
    }

    /// Answers given on another thread: drain them, re-arm the wake-up.
    fn woken(&mut self, shared: &Shared, res: i32) -> io::Result<()> {
        if res <= 0 {
            tracing::debug!(qid = self.qid, res, "wake-up pipe closed");
        }
        shared.wake_pending.store(false, Ordering::Release);
        while let Ok(c) = self.completions.try_recv() {
            self.commit(c)?;
        }
        self.arm_wake()
    }

    fn commit_local(&mut self) -> io::Result<()> {
        let local = LOCAL.with_borrow_mut(std::mem::take);
        for c in local {
            self.commit(c)?;
        }
        Ok(())
    }

    /// Writes an answer into its entry and queues COMMIT_AND_FETCH.
    fn commit(&mut self, c: Completion) -> io::Result<()> {
        let Some(slot) = self.slots.get_mut(c.slot) else {
            return Ok(());
        };
        let encoded = match c.outcome {
            Ok(Answer::Data(data)) => {
                let res = abi::encode_data(&data, slot.limit, &mut slot.payload);
                recycle(data);
                res
            }
            Ok(answer) => abi::encode(answer, slot.limit, &mut slot.payload),
            Err(e) => Err(e),
        };
        let (error, size) = match encoded {
            Ok(n) => (0, n),
            Err(e) => (-e.code(), 0),
        };
        abi::write_reply_header(&mut slot.header, slot.unique, error, size as u32);
        let cmd = abi::uring_cmd(self.qid, slot.unique);
        let sqe = opcode::UringCmd80::new(
            types::Fd(self.dev.as_raw_fd()),
            abi::FUSE_IO_URING_CMD_COMMIT_AND_FETCH,
        )
        .cmd(cmd)
        .build()
        .user_data(c.slot as u64);
        slot.state = SlotState::InKernel;
        self.push(sqe)
    }

    fn register_sqe(&mut self, i: usize) -> squeue::Entry128 {
        let slot = &mut self.slots[i];
        let cmd = abi::uring_cmd(self.qid, 0);
        let sqe = opcode::UringCmd80::new(
            types::Fd(self.dev.as_raw_fd()),
            abi::FUSE_IO_URING_CMD_REGISTER,
        )
        .cmd(cmd)
        .addr(Some(slot.iov.as_ptr() as u64))
        .build()
        .user_data(i as u64);
        with_len(sqe, 2)
    }

    fn arm_wake(&mut self) -> io::Result<()> {
        let fd: RawFd = self.wake_rx.as_raw_fd();
        let buf = self.wake_buf.as_mut_ptr();
        let read = opcode::Read::new(types::Fd(fd), buf, self.wake_buf.len() as u32)
            .build()
            .user_data(WAKE);
        self.push(read.into())
    }

    /// Queues an entry, submitting what is queued when the ring is full.
    fn push(&mut self, sqe: squeue::Entry128) -> io::Result<()> {
        loop {
            // SAFETY: every buffer an entry points at (header, payload,
            // iovecs, the wake-up buffer) is boxed in `self` and outlives
            // the ring: `finish` leaks them if the kernel may still hold any.
            let pushed = unsafe { self.ring.submission().push(&sqe) };
            if pushed.is_ok() {
                return Ok(());
            }
            self.ring.submit()?;
        }
    }

    /// Ends the queue. If the kernel may still hold an entry (the queue
    /// failed, not the connection), its buffers are leaked rather than
    /// freed under it; the ring itself is closed first either way.
    fn finish(self) {
        let Queue {
            slots,
            wake_buf,
            ring,
            ..
        } = self;
        let held = slots.iter().any(|s| s.state == SlotState::InKernel);
        drop(ring);
        if held {
            std::mem::forget(slots);
            std::mem::forget(wake_buf);
        }
    }
}

/// What the kernel asked for at most, where the answer's size varies.
fn answer_limit(op: &Op<'_>, payload: usize) -> usize {
    let asked = match *op {
        Op::Read { size, .. } | Op::Getxattr { size, .. } | Op::Listxattr { size, .. } => size,
        Op::Readdir { size, .. } | Op::Readdirplus { size, .. } => size.unwrap_or(u32::MAX),
        _ => u32::MAX,
    };
    (asked as usize).min(payload)
}

/// Sets an SQE's `len`, which the io-uring crate's UringCmd80 does not:
/// FUSE_IO_URING_CMD_REGISTER takes its two iovecs as `addr` and `len`.
fn with_len(sqe: squeue::Entry128, len: u32) -> squeue::Entry128 {
    // SAFETY: Entry128 is repr(C): a 64-byte io_uring_sqe of plain integer
    // fields followed by 64 bytes, so it and [u8; 128] have the same size
    // and every byte pattern is a valid value of either. `len` is the u32
    // at offset 24 of struct io_uring_sqe.
    let mut bytes: [u8; 128] = unsafe { std::mem::transmute(sqe) };
    bytes[24..28].copy_from_slice(&len.to_ne_bytes());
    // SAFETY: as above.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(bytes) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn possible_cpus_is_at_least_the_online_ones() {
        let online = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!(possible_cpus().unwrap() >= online);
    }

    #[test]
    fn register_sqe_carries_two_iovecs() {
        let sqe = opcode::UringCmd80::new(types::Fd(3), abi::FUSE_IO_URING_CMD_REGISTER)
            .addr(Some(0x1234))
            .build();
        let sqe = with_len(sqe, 2);
        // SAFETY: see with_len.
        let bytes: [u8; 128] = unsafe { std::mem::transmute(sqe) };
        assert_eq!(bytes[0], io_uring::opcode::UringCmd80::CODE);
        assert_eq!(u32::from_ne_bytes(bytes[24..28].try_into().unwrap()), 2);
        assert_eq!(
            u64::from_ne_bytes(bytes[16..24].try_into().unwrap()),
            0x1234
        );
        assert_eq!(u32::from_ne_bytes(bytes[8..12].try_into().unwrap()), 1);
    }
}
