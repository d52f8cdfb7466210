//! Commit (Linux: fs/jbd2/commit.c, journal_commit_transaction): drain the
//! running transaction's handles, take frozen copies of its buffers, write
//! revoke records, descriptors and the copies to the log, flush, write the
//! commit block, flush; then the copies wait for checkpoint.
//!
//! File data goes home through the data queue (fs/data.rs). In data=ordered
//! the commit waits for that queue just before the flush ahead of the
//! commit block, so the data is on the device before the commit block that
//! references it; in data=writeback it does not wait.

use std::borrow::Cow;
use std::io;
use std::time::{Duration, Instant};

use super::checkpoint::Checkpointed;
use super::journal::{add_micros, Journal, LogArea};
use super::parallel::{write_runs, Run};
use super::revoke::revoke_records;
use super::transaction::Transaction;
use super::{JournalBlock, Tid};
use crate::format::jbd::{self, CommitBlock, LoggedBlock};
use crate::util::inthash::IntSet;

/// A transaction that no handle can join any more.
struct Drained {
    /// How long the transaction ran before commit locked it.
    ran: Duration,
    /// How long commit held new handles back: until the last open handle
    /// stopped.
    locked: Duration,
    t: Transaction,
}

/// A drained transaction and its frozen copies.
struct Frozen {
    tid: Tid,
    ran: Duration,
    locked: Duration,
    copies: Vec<(u32, Box<[u8]>)>,
    t: Transaction,
}

pub(super) fn to_io(e: crate::format::FormatError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl Journal {
    /// Commits the running transaction now, on the calling thread.
    pub(super) fn commit_running(&self) -> io::Result<()> {
        self.commit_locked(self.commit_lock.lock())
    }

    /// Commits the running transaction; `_one` is the commit lock, held
    /// to the end.
    pub(super) fn commit_locked(&self, _one: parking_lot::MutexGuard<'_, ()>) -> io::Result<()> {
        let Some(log) = self.log.get() else {
            return self.cache.sync_all();
        };
        if self.is_aborted() {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        let Some(drained) = self.drain() else {
            // An empty transaction: what waited for the one before it is done.
            self.run_commit_callbacks();
            return Ok(());
        };
        let started = Instant::now();
        let frozen = self.freeze(drained);
        let res = self.write_transaction(log, &frozen);
        match res {
            Ok(logged) => {
                self.finish_commit(frozen, logged, started);
                Ok(())
            }
            Err(e) => {
                self.abort(&e);
                Err(e)
            }
        }
    }

    /// Locks the running transaction, waits for its handles and opens the
    /// next transaction, as jbd2 does in T_LOCKED: handles wait only for
    /// the handles before them to stop. The buffers are copied later, by
    /// [`Journal::freeze`], with new handles already running; a handle
    /// that joins a buffer before its copy is taken takes it itself
    /// (`join`). On io_uring a thread that waits for this lock leaves its
    /// CPU idle, so it is kept short.
    fn drain(&self) -> Option<Drained> {
        let mut st = self.state.lock();
        if st.running.is_empty() {
            let tid = st.running.tid;
            st.set_committed(tid.prev());
            return None;
        }
        st.locked = true;
        let locked_at = Instant::now();
        while st.running.updates > 0 {
            self.drained.wait(&mut st);
        }
        let next = Transaction::new(st.running.tid.next());
        let mut t = std::mem::replace(&mut st.running, next);
        st.committing = std::mem::take(&mut t.members);
        st.locked = false;
        drop(st);
        self.wake.notify_all();
        Some(Drained {
            ran: t.started.elapsed(),
            locked: locked_at.elapsed(),
            t,
        })
    }

    /// Takes the frozen copy of each of the committing transaction's
    /// buffers: the one a joining handle took first, or else one now. Each
    /// is taken under the state lock, which a joining handle holds while
    /// it decides whether to copy, so no change of the running transaction
    /// can reach a buffer before its copy; the lock is let go between
    /// buffers so that handles are not held up behind the whole copy.
    fn freeze(&self, d: Drained) -> Frozen {
        let mut copies = Vec::with_capacity(d.t.buffers.len());
        for b in &d.t.buffers {
            let block = b.block().0;
            let mut st = self.state.lock();
            let copy = match st.frozen_early.remove(&block) {
                Some(copy) => copy,
                None => self.cache.block_copy(&b.read()),
            };
            st.frozen.insert(block);
            drop(st);
            copies.push((block, copy));
        }
        Frozen {
            tid: d.t.tid,
            ran: d.ran,
            locked: d.locked,
            copies,
            t: d.t,
        }
    }

    /// Writes the transaction to the log; returns the blocks it logged.
    fn write_transaction(&self, log: &LogArea, f: &Frozen) -> io::Result<u64> {
        let bs = log.block_size;
        // The frozen copies go to the log as they are; only the rare block
        // that must be escaped is copied again, so checkpoint still gets the
        // unescaped bytes.
        let mut blocks: Vec<Cow<'_, [u8]>> = Vec::new();
        blocks.extend(
            revoke_records(bs, f.tid, &f.t.revokes)?
                .into_iter()
                .map(Cow::Owned),
        );
        let mut rest = &f.copies[..];
        while !rest.is_empty() {
            let tags: Vec<LoggedBlock> = rest
                .iter()
                .map(|(b, data)| LoggedBlock {
                    blocknr: *b,
                    escaped: jbd::needs_escape(data),
                })
                .collect();
            let (desc, n) = jbd::build_descriptor(bs, f.tid.0, &log.uuid, &tags).map_err(to_io)?;
            let n = n.max(1).min(rest.len());
            blocks.push(Cow::Owned(desc));
            blocks.extend(rest[..n].iter().map(|(_, data)| escaped(data)));
            rest = &rest[n..];
        }
        self.make_room(log, blocks.len() as u32 + 1)?;
        let start = self.state.lock().head;
        if self.state.lock().log_empty {
            self.write_journal_superblock(log, start, f.tid)?;
        }
        self.write_log(log, start, &blocks)?;
        if let Some(hook) = self.flush_hook.get() {
            let flushing = Instant::now();
            hook.before_commit_flush();
            add_micros(&self.counters.flushing_micros, flushing.elapsed());
        }
        self.barrier()?;
        let (sec, nsec) = crate::util::now();
        let commit = CommitBlock::new(f.tid.0, sec as u64, nsec)
            .build(bs)
            .map_err(to_io)?;
        let at = start + blocks.len() as u32;
        self.write_log(log, at, std::slice::from_ref(&commit))?;
        self.barrier()?;
        let mut st = self.state.lock();
        st.head = at + 1;
        st.log_empty = false;
        Ok(blocks.len() as u64 + 1)
    }

    /// Writes `blocks` at journal block `at` onwards, one device write per
    /// run of contiguous disk blocks.
    fn write_log<B: AsRef<[u8]>>(
        &self,
        log: &LogArea,
        at: JournalBlock,
        blocks: &[B],
    ) -> io::Result<()> {
        let bs = log.block_size as u64;
        let mut runs = Vec::new();
        let mut i = 0;
        while i < blocks.len() {
            let first = log.disk_block(at + i as u32);
            let mut n = 1;
            while i + n < blocks.len() && log.disk_block(at + (i + n) as u32) == first + n as u32 {
                n += 1;
            }
            runs.push(Run {
                at: first as u64 * bs,
                blocks: blocks[i..i + n].iter().map(|b| b.as_ref()).collect(),
            });
            i += n;
        }
        write_runs(&*self.dev, runs)
    }

    pub(super) fn barrier(&self) -> io::Result<()> {
        if self.config().barrier {
            self.dev.flush()
        } else {
            Ok(())
        }
    }

    /// Hands the committed buffers to checkpoint and wakes the waiters. A
    /// frozen copy is kept only for a buffer the running transaction has
    /// joined or freed (it may change before checkpoint); the other copies
    /// go back to the pool, and checkpoint writes those buffers' own,
    /// committed, bytes.
    fn finish_commit(&self, f: Frozen, logged: u64, started: Instant) {
        let mut st = self.state.lock();
        // A buffer the running transaction joined and then freed may have
        // changed as well: it keeps its copy too.
        let revoked: IntSet<u32> = st.running.revokes.iter().copied().collect();
        let mut replaced = Vec::new();
        let mut unneeded = Vec::new();
        let blocks = f.copies.len() as u64;
        for ((block, copy), buf) in f.copies.into_iter().zip(f.t.buffers) {
            let copy = if st.running.members.contains(&block) || revoked.contains(&block) {
                Some(copy)
            } else {
                unneeded.push(copy);
                None
            };
            replaced.extend(st.file_checkpoint(block, Checkpointed { buf, copy }));
        }
        // The frees of this transaction are durable now: the old owners'
        // copies must never be checkpointed over a new owner.
        let forgotten: Vec<_> =
            f.t.revokes
                .iter()
                .filter_map(|b| st.unfile_checkpoint(*b))
                .collect();
        st.committing.clear();
        st.frozen.clear();
        st.set_committed(f.tid);
        drop(st);
        for copy in unneeded {
            self.cache.recycle(copy);
        }
        for old in replaced {
            self.release_checkpointed(old);
        }
        // Freed, so forgotten in the cache: the last unpin drops them.
        for c in forgotten {
            self.release_checkpointed(c);
        }
        self.release_freed(&f.t.freed);
        let c = &self.counters;
        use std::sync::atomic::Ordering::Relaxed;
        c.transactions.fetch_add(1, Relaxed);
        c.handles.fetch_add(f.t.handles as u64, Relaxed);
        c.blocks.fetch_add(blocks, Relaxed);
        c.logged_blocks.fetch_add(logged, Relaxed);
        add_micros(&c.commit_micros, started.elapsed());
        add_micros(&c.run_micros, f.ran);
        add_micros(&c.locked_micros, f.locked);
        self.note_commit_time(started.elapsed());
        self.wake.notify_all();
        self.run_commit_callbacks();
    }
}

/// A logged block as the log must hold it: escaped when it begins with the
/// JBD magic (a copy), else the frozen copy itself.
fn escaped(data: &[u8]) -> Cow<'_, [u8]> {
    if !jbd::needs_escape(data) {
        return Cow::Borrowed(data);
    }
    let mut copy = data.to_vec();
    jbd::escape(&mut copy);
    Cow::Owned(copy)
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use crate::format::BlockNo;
    use crate::journal::testing::{mounted, A, B};
    use crate::testing::on_device;

    /// Commit lets new handles in as soon as the old ones have stopped,
    /// before it copies the buffers it logs. A handle that changes one of
    /// them first takes the copy itself, so the log gets the bytes that
    /// committed and the next transaction its own; a buffer no handle
    /// touched is copied by the commit.
    #[test]
    fn a_handle_that_changes_a_committing_buffer_first_freezes_it() {
        let (mem, fs) = mounted();
        let j = fs.journal();
        let (a, b) = (A, B);
        let (buf_a, buf_b) = (j.cache.get(a).unwrap(), j.cache.get(b).unwrap());
        let mut h = j.start(2).unwrap();
        h.modify(&buf_a).unwrap().fill(0xa1);
        h.modify(&buf_b).unwrap().fill(0xb1);
        h.stop().unwrap();

        let one = j.commit_lock.lock();
        let drained = j.drain().unwrap();
        // The journal is open again: this handle starts and changes `a`
        // before the commit has copied it.
        let mut h = j.start(1).unwrap();
        h.modify(&buf_a).unwrap().fill(0xa2);
        h.stop().unwrap();
        assert_eq!(j.state.lock().frozen_early.len(), 1);
        let frozen = j.freeze(drained);
        let copy_of = |block: BlockNo| {
            let (_, copy) = frozen.copies.iter().find(|(n, _)| *n == block.0).unwrap();
            copy.to_vec()
        };
        assert_eq!(copy_of(a), vec![0xa1; 1024], "the committed bytes of a");
        assert_eq!(copy_of(b), vec![0xb1; 1024], "b, copied by the commit");
        assert!(j.state.lock().frozen_early.is_empty());
        let logged = j.write_transaction(j.log.get().unwrap(), &frozen).unwrap();
        j.finish_commit(frozen, logged, Instant::now());
        drop(one);

        j.force_commit().unwrap();
        j.checkpoint_all().unwrap();
        assert_eq!(on_device(&mem, a), vec![0xa2; 1024]);
        assert_eq!(on_device(&mem, b), vec![0xb1; 1024]);
        fs.unmount().unwrap();
    }
}
