//! Revoke (Linux: fs/jbd2/revoke.c), both halves of it.
//!
//! A revoke record for block B in transaction T means that B was freed (and
//! may have been reused for data that is not journaled) in T, so no copy of B
//! logged in T or any earlier transaction may be written back. Copies logged
//! in transactions after T are newer than the revoke and do replay.
//!
//! - While the filesystem runs, [`Journal::revoke`] records a freed block in
//!   the running transaction, and the block may not be allocated again
//!   until that transaction commits ([`Journal::is_pending_free`]); commit
//!   writes the transaction's revokes to the log as revoke blocks
//!   ([`revoke_records`]).
//! - At mount, recovery's PASS_REVOKE fills a [`RevokeTable`] from those
//!   blocks: which home blocks must not be replayed from which
//!   transactions.

use std::io;

use super::commit::to_io;
use super::journal::Journal;
use super::Tid;
use crate::format::{jbd, BlockNo};
use crate::util::inthash::IntMap;

impl Journal {
    /// Records that `block` was freed: its logged copies must never be
    /// replayed or checkpointed over its next owner.
    pub fn revoke(&self, block: u32) {
        if !self.logging() {
            return;
        }
        let mut st = self.state.lock();
        // Only a block with a copy in the log (or on its way there) needs a
        // revoke record; a data block that never was logged needs none, as
        // in ext3, and a big truncate then costs no log space for its data.
        let logged = st.holds_copy(block);
        if st.running.members.remove(&block) {
            if let Some(i) = st.running.buffers.iter().position(|b| b.block().0 == block) {
                let b = st.running.buffers.swap_remove(i);
                b.set_joined_serial(0);
                self.cache.unpin(&b);
            }
        }
        // A committed copy waiting for checkpoint (or one committing now)
        // stays until this transaction commits, as jbd's forget list keeps
        // it: until then a crash recovers the state before the free, which
        // needs that copy home if checkpoint empties the log meanwhile.
        // finish_commit drops it, before the block can be allocated again.
        if logged {
            st.running.revokes.push(block);
        }
        st.running.freed.push(block);
        drop(st);
        self.pending_free.lock().insert(block);
    }

    /// Whether `block` was freed by a transaction that has not committed,
    /// and so must not be allocated yet.
    pub fn is_pending_free(&self, block: u32) -> bool {
        self.logging() && self.pending_free.lock().contains(&block)
    }

    /// Whether any freed block still waits for its transaction to commit:
    /// an allocation that failed may then succeed after a commit.
    pub fn has_pending_frees(&self) -> bool {
        self.logging() && !self.pending_free.lock().is_empty()
    }

    /// `freed`, a committed transaction's frees, may be allocated again.
    pub(super) fn release_freed(&self, freed: &[u32]) {
        let mut pending = self.pending_free.lock();
        for b in freed {
            pending.remove(b);
        }
    }
}

/// The revoke blocks that log `revokes` for transaction `tid`, as many as
/// they fill (jbd's journal_write_revoke_records).
pub(super) fn revoke_records(bs: usize, tid: Tid, mut revokes: &[u32]) -> io::Result<Vec<Vec<u8>>> {
    let mut blocks = Vec::new();
    while !revokes.is_empty() {
        let (b, n) = jbd::build_revoke(bs, tid.0, revokes).map_err(to_io)?;
        blocks.push(b);
        revokes = &revokes[n.max(1).min(revokes.len())..];
    }
    Ok(blocks)
}

/// Home block number -> the latest transaction that revoked it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RevokeTable {
    records: IntMap<BlockNo, Tid>,
}

impl RevokeTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that transaction `seq` revoked `block`. Only the latest
    /// revoke matters: it hides every copy an earlier one would hide.
    pub fn set(&mut self, block: BlockNo, seq: Tid) {
        let entry = self.records.entry(block).or_insert(seq);
        if seq.gt(*entry) {
            *entry = seq;
        }
    }

    /// Whether a copy of `block` logged in transaction `seq` must be skipped.
    pub fn is_revoked(&self, block: BlockNo, seq: Tid) -> bool {
        self.records
            .get(&block)
            .is_some_and(|&revoked_in| revoked_in.geq(seq))
    }

    /// The revoke sequence recorded for `block`, if any.
    pub fn get(&self, block: BlockNo) -> Option<Tid> {
        self.records.get(&block).copied()
    }

    /// Distinct blocks with a revoke record.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_table_revokes_nothing() {
        let t = RevokeTable::new();
        assert!(t.is_empty());
        assert!(!t.is_revoked(BlockNo(5), Tid(1)));
    }

    #[test]
    fn revoke_hides_its_own_and_earlier_transactions() {
        let mut t = RevokeTable::new();
        t.set(BlockNo(100), Tid(7));
        assert!(t.is_revoked(BlockNo(100), Tid(7)));
        assert!(t.is_revoked(BlockNo(100), Tid(3)));
        assert!(!t.is_revoked(BlockNo(100), Tid(8)));
        assert!(!t.is_revoked(BlockNo(101), Tid(7)));
    }

    #[test]
    fn highest_sequence_wins_in_any_order() {
        let mut t = RevokeTable::new();
        t.set(BlockNo(9), Tid(10));
        t.set(BlockNo(9), Tid(4));
        assert_eq!(t.get(BlockNo(9)), Some(Tid(10)));
        t.set(BlockNo(9), Tid(12));
        assert_eq!(t.get(BlockNo(9)), Some(Tid(12)));
        assert!(t.is_revoked(BlockNo(9), Tid(11)));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn sequences_compare_across_wraparound() {
        let mut t = RevokeTable::new();
        t.set(BlockNo(1), Tid(u32::MAX));
        t.set(BlockNo(1), Tid(2));
        assert_eq!(t.get(BlockNo(1)), Some(Tid(2)));
        assert!(t.is_revoked(BlockNo(1), Tid(u32::MAX - 1)));
        assert!(t.is_revoked(BlockNo(1), Tid(0)));
        assert!(!t.is_revoked(BlockNo(1), Tid(3)));
    }
}
