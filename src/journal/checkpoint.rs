//! Checkpoint (Linux: fs/jbd2/checkpoint.c): write committed buffers to
//! their home blocks, flush, then mark the log empty in the journal
//! superblock so its space can be reused. Also the memory bound of
//! data=journal: a writer about to pin more journaled buffers than the cache
//! can hold first commits and checkpoints, as jbd does when the log is short
//! of space.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::journal::{JState, Journal, LogArea};
use super::parallel::{write_runs, Run};
use super::JournalBlock;
use crate::cache::{Buffer, BufferReadGuard};

/// A committed buffer not yet written home, and the copy that committed if
/// a later transaction has joined the buffer (else the buffer's own bytes
/// are the committed ones).
/// An entry of `JState::checkpoint`: under `Journal::state` like the map.
pub(super) struct Checkpointed {
    /// [immutable]
    pub buf: Arc<Buffer>,
    /// [state]
    pub copy: Option<Box<[u8]>>,
}

impl JState {
    /// Whether the log holds, or is about to hold, a copy of `block`, or a
    /// checkpoint is writing one home.
    pub(super) fn holds_copy(&self, block: u32) -> bool {
        self.running.members.contains(&block)
            || self.committing.contains(&block)
            || self.checkpoint.contains_key(&block)
            || self.checkpointing.contains(&block)
    }

    /// Files a committed buffer for checkpoint, returning the entry it
    /// replaces; keeps `kept_copies` in step.
    pub(super) fn file_checkpoint(&mut self, block: u32, c: Checkpointed) -> Option<Checkpointed> {
        self.kept_copies += usize::from(c.copy.is_some());
        let old = self.checkpoint.insert(block, c);
        self.kept_copies -= old.as_ref().map_or(0, |o| usize::from(o.copy.is_some()));
        old
    }

    /// Takes `block` off the checkpoint list.
    pub(super) fn unfile_checkpoint(&mut self, block: u32) -> Option<Checkpointed> {
        let old = self.checkpoint.remove(&block);
        self.kept_copies -= old.as_ref().map_or(0, |o| usize::from(o.copy.is_some()));
        old
    }
}

impl Journal {
    /// Makes sure `need` log blocks are free after the head, checkpointing
    /// everything when they are not.
    pub(super) fn make_room(&self, log: &LogArea, need: u32) -> io::Result<()> {
        let head = self.state.lock().head;
        if need > log.maxlen.saturating_sub(log.first.0) {
            return Err(io::Error::other(format!(
                "a transaction of {need} blocks does not fit in a journal of {} blocks",
                log.maxlen
            )));
        }
        if head.0 + need <= log.maxlen {
            return Ok(());
        }
        self.checkpoint_all_locked(log)
    }

    /// Writes every committed buffer home and empties the log. The caller
    /// holds the commit lock.
    pub(super) fn checkpoint_all_locked(&self, log: &LogArea) -> io::Result<()> {
        if self.is_aborted() {
            // The log stays as it is, for recovery to replay.
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        let mut st = self.state.lock();
        let mut entries: Vec<(u32, Checkpointed)> = st.checkpoint.drain().collect();
        st.kept_copies = 0;
        st.checkpointing = entries.iter().map(|(b, _)| *b).collect();
        entries.sort_by_key(|(b, _)| *b);
        // A buffer without a copy is in no running transaction and holds
        // its committed bytes. Its read guard is taken before the state lock
        // is let go: a handle that joins it from now on finds it off the
        // list, keeps no copy, and waits for the guard before changing it.
        let guards: Vec<Option<BufferReadGuard<'_>>> = entries
            .iter()
            .map(|(_, c)| c.copy.is_none().then(|| c.buf.read()))
            .collect();
        drop(st);
        if let Err(e) = self.write_home(log, &entries, &guards) {
            // Put them back, copied (the guards go now): they are still
            // only in the log.
            let copies: Vec<Option<Box<[u8]>>> = guards
                .iter()
                .map(|g| g.as_ref().map(|g| self.cache.block_copy(g)))
                .collect();
            drop(guards);
            let mut st = self.state.lock();
            for ((b, mut c), copy) in entries.into_iter().zip(copies) {
                c.copy = c.copy.or(copy);
                st.file_checkpoint(b, c);
            }
            st.checkpointing.clear();
            return Err(e);
        }
        drop(guards);
        let finished = self.finish_checkpoint(log, entries);
        // Home and unpinned now: a data write to one of these blocks may
        // bypass the log, and forgetting its buffer drops it at once.
        self.state.lock().checkpointing.clear();
        finished
    }

    /// After the blocks are home: empties the log and lets go of them.
    fn finish_checkpoint(
        &self,
        log: &LogArea,
        entries: Vec<(u32, Checkpointed)>,
    ) -> io::Result<()> {
        self.barrier()?;
        let next = self.state.lock().running.tid;
        self.write_journal_superblock(log, JournalBlock(0), next)?;
        self.barrier()?;
        {
            let mut st = self.state.lock();
            st.head = log.first;
            st.log_empty = true;
        }
        for (_, c) in entries {
            self.release_checkpointed(c);
        }
        Ok(())
    }

    /// Writes the sorted `entries` home, one device write per run of
    /// adjacent blocks, each block from its copy or else its read guard.
    fn write_home(
        &self,
        log: &LogArea,
        entries: &[(u32, Checkpointed)],
        guards: &[Option<BufferReadGuard<'_>>],
    ) -> io::Result<()> {
        let bs = log.block_size as u64;
        let bytes = |i: usize| -> &[u8] {
            match (&entries[i].1.copy, &guards[i]) {
                (Some(c), _) => c,
                (None, Some(g)) => g,
                (None, None) => &[],
            }
        };
        let mut runs = Vec::new();
        let mut i = 0;
        while i < entries.len() {
            let mut n = 1;
            while i + n < entries.len() && entries[i + n].0 == entries[i].0 + n as u32 {
                n += 1;
            }
            runs.push(Run {
                at: entries[i].0 as u64 * bs,
                blocks: (i..i + n).map(bytes).collect(),
            });
            i += n;
        }
        write_runs(&*self.dev, runs)
    }

    /// Checkpoints everything committed so far.
    pub fn checkpoint_all(&self) -> io::Result<()> {
        let _one = self.commit_lock.lock();
        match self.log.get() {
            Some(log) => self.checkpoint_all_locked(log),
            None => Ok(()),
        }
    }

    /// Lets go of a buffer that left the checkpoint list: its pin, and its
    /// copy back to the cache's pool.
    pub(super) fn release_checkpointed(&self, c: Checkpointed) {
        self.cache.unpin(&c.buf);
        if let Some(copy) = c.copy {
            self.cache.recycle(copy);
        }
    }
}

impl Journal {
    /// data=journal's memory bound, for a writer about to open a handle
    /// that may pin `blocks` more buffers. Journaled buffers stay pinned in
    /// the cache until checkpoint, and each commit holds a frozen copy of
    /// its transaction, so when either would outgrow its share this commits
    /// and, if need be, checkpoints first, and waits: jbd's answer to a log
    /// short of space, applied to memory. The caller holds no handle (the
    /// commit waits for open handles) and no lock a handle needs.
    pub fn make_room_for_pins(&self, blocks: u32) -> io::Result<()> {
        if !self.logging() {
            return Ok(());
        }
        let bs = self.cache.block_size();
        let need = blocks as usize * bs;
        let (running, kept) = {
            let st = self.state.lock();
            (st.running.buffers.len() * bs, st.kept_copies * bs)
        };
        let copies = self.copy_budget();
        let pinned = self.cache.pinned_bytes() + need;
        let pins = self.pin_budget();
        if pinned > pins || kept > copies / 2 {
            self.commit_running()?;
            return self.checkpoint_all();
        }
        if running + need > copies {
            return self.commit_running();
        }
        // Halfway to a limit: the commit thread starts on it now, so that
        // the writer seldom reaches the limit and waits.
        let checkpoint = pinned > pins / 2;
        if checkpoint || running + need > copies / 2 {
            self.request_room(checkpoint);
        }
        Ok(())
    }

    /// Asks the commit thread to commit and, with `checkpoint`, to
    /// checkpoint after it, without waiting for either.
    fn request_room(&self, checkpoint: bool) {
        let mut st = self.state.lock();
        st.commit_request = st.commit_request.later(st.running.tid);
        st.checkpoint_request |= checkpoint;
        drop(st);
        self.commit_wake.notify_one();
    }

    /// Pinned buffers may fill half the cache; the other half keeps the
    /// metadata the writers need, and room for the shards' uneven shares.
    fn pin_budget(&self) -> usize {
        self.cache.capacity_bytes() / 2
    }

    /// Memory for frozen copies: a committing transaction's, and those
    /// kept for checkpoint.
    fn copy_budget(&self) -> usize {
        match self.copy_budget.load(Ordering::Relaxed) {
            0 => self.cache.capacity_bytes() / 8,
            n => n,
        }
    }

    /// Sets the memory for frozen copies (data=journal, at mount): the share
    /// of cache_size that the data queue would use in the other modes.
    pub fn set_copy_budget(&self, bytes: usize) {
        self.copy_budget.store(bytes, Ordering::Relaxed);
    }
}
