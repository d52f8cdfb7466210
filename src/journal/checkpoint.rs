//! Checkpoint (Linux: fs/jbd2/checkpoint.c): write committed copies to
//! their home blocks, flush, then mark the log empty in the journal
//! superblock so its space can be reused.

use std::io;

use super::transaction::{Journal, LogArea};
use crate::format::jbd::{self, JournalSuperblock};

impl Journal {
    /// Makes sure `need` log blocks are free after the head, checkpointing
    /// everything when they are not.
    pub(super) fn make_room(&self, log: &LogArea, need: u32) -> io::Result<()> {
        let head = self.state.lock().head;
        if need > log.maxlen.saturating_sub(log.first) {
            return Err(io::Error::other(format!(
                "a transaction of {need} blocks does not fit in a journal of {} blocks",
                log.maxlen
            )));
        }
        if head + need <= log.maxlen {
            return Ok(());
        }
        self.checkpoint_all_locked(log)
    }

    /// Writes every committed copy home and empties the log. The caller
    /// holds the commit lock.
    pub(super) fn checkpoint_all_locked(&self, log: &LogArea) -> io::Result<()> {
        if self.is_aborted() {
            // The log stays as it is, for recovery to replay.
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        let mut entries: Vec<_> = self.state.lock().checkpoint.drain().collect();
        entries.sort_by_key(|(b, _)| *b);
        let bs = log.block_size as u64;
        let mut i = 0;
        while i < entries.len() {
            let mut n = 1;
            while i + n < entries.len() && entries[i + n].0 == entries[i].0 + n as u32 {
                n += 1;
            }
            let slices: Vec<io::IoSlice<'_>> = entries[i..i + n]
                .iter()
                .map(|(_, c)| io::IoSlice::new(&c.copy))
                .collect();
            if let Err(e) = self
                .dev
                .write_vectored_at(&slices, entries[i].0 as u64 * bs)
            {
                // Put them back: they are still only in the log.
                let mut st = self.state.lock();
                for (b, c) in entries {
                    st.checkpoint.insert(b, c);
                }
                return Err(e);
            }
            i += n;
        }
        self.barrier(log)?;
        let next = self.state.lock().running.tid;
        self.write_journal_superblock(log, 0, next)?;
        self.barrier(log)?;
        {
            let mut st = self.state.lock();
            st.head = log.first;
            st.log_empty = true;
        }
        for (_, c) in entries {
            c.buf.unpin();
        }
        Ok(())
    }

    /// Checkpoints everything committed so far.
    pub fn checkpoint_all(&self) -> io::Result<()> {
        let _one = self.commit_lock.lock();
        match self.log.get() {
            Some(log) => self.checkpoint_all_locked(log),
            None => Ok(()),
        }
    }

    /// Rewrites the journal superblock with the log's start and sequence
    /// (`start == 0`: the log is empty).
    pub(super) fn write_journal_superblock(
        &self,
        log: &LogArea,
        start: u32,
        sequence: u32,
    ) -> io::Result<()> {
        let bs = log.block_size;
        let at = log.map[0] as u64 * bs as u64;
        let mut buf = vec![0u8; jbd::JOURNAL_SUPERBLOCK_LEN];
        self.dev.read_at(&mut buf, at)?;
        let mut jsb = JournalSuperblock::parse(&buf)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        jsb.s_start = start;
        jsb.s_sequence = sequence;
        jsb.s_feature_incompat |= jbd::JBD2_FEATURE_INCOMPAT_REVOKE;
        self.dev.write_at(&jsb.to_bytes(), at)
    }
}
