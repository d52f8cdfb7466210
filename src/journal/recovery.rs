//! Journal recovery (Linux: fs/jbd2/recovery.c).
//!
//! After a crash the journal may hold committed transactions whose blocks
//! never reached their home locations. Recovery walks the log three times,
//! as jbd2's `do_one_pass` does:
//! - PASS_SCAN finds where the log ends: the last transaction with a commit
//!   block whose sequence follows on from the one before;
//! - PASS_REVOKE collects the revoke records of the complete transactions;
//! - PASS_REPLAY writes every logged block that no later revoke hides to its
//!   home block, oldest transaction first, so newer copies win.
//!
//! Only once every home write is flushed is the journal marked empty, and
//! only then is `needs_recovery` cleared: a crash at any point leaves a
//! journal that replays to the same image again.

use std::collections::HashSet;
use std::io;

use crate::device::BlockDevice;
use crate::format::jbd::{self, CommitBlock, JournalHeader, JournalSuperblock, JournalTag};
use crate::format::superblock::{self as sbm, feature, Superblock};
use crate::format::{BlockNo, Corruption, FormatError, Location};

use super::jmap::JournalMap;
use super::revoke::RevokeTable;
use super::{JournalBlock, Tid};

/// Why recovery could not run.
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    #[error("journal recovery: I/O error: {0}")]
    Io(#[from] io::Error),
    #[error("journal recovery: {0}")]
    Corrupt(#[from] Corruption),
    #[error("journal recovery: unsupported: {0}")]
    Unsupported(String),
}

/// How to recover.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoverOptions {
    /// Write the replayed blocks and reset the journal. Without it, recovery
    /// only works out what it would do (for `fsck -n`).
    pub write: bool,
}

/// What recovery found and did (or, without `write`, would do).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The journal held a log to replay (`s_start != 0`).
    pub needed: bool,
    /// Complete transactions replayed.
    pub transactions: u32,
    /// The journal superblock's `s_sequence`: the first transaction looked for.
    pub first_seq: Tid,
    /// The last complete transaction; `first_seq - 1` (wrapping) when none.
    pub last_seq: Tid,
    /// Logged blocks written home.
    pub blocks_replayed: u64,
    /// Logged blocks skipped because a later (or the same) transaction
    /// revoked them.
    pub blocks_revoked: u64,
    /// Replayed blocks whose magic number had been escaped in the log.
    pub escaped_blocks: u64,
    /// Logged blocks skipped because their home block number is outside
    /// the filesystem (below `s_first_data_block` or not below
    /// `s_blocks_count`) or inside the journal itself.
    pub bad_blocks: u64,
    /// Revoke records read from complete transactions.
    pub revoke_records: u64,
    /// The superblock had `needs_recovery` set when recovery started.
    pub recover_flag: bool,
    /// The journal superblock's `s_errno`, left for the mount to report.
    pub journal_errno: i32,
}

/// Replays the internal journal of the ext3 filesystem on `dev`.
pub fn recover(
    dev: &dyn BlockDevice,
    opts: RecoverOptions,
) -> Result<RecoveryReport, RecoveryError> {
    let sb = read_fs_superblock(dev)?;
    if !sb.has_compat(feature::COMPAT_HAS_JOURNAL) {
        return Ok(RecoveryReport::default());
    }
    check_fs_supported(&sb)?;
    let map = JournalMap::load(dev, &sb)?;
    recover_from(dev, opts, sb, &map)
}

/// Replays through a journal map the caller found, as fsck does when the
/// journal inode is damaged and the superblock's backup of its block map
/// is used instead.
pub fn recover_with_map(
    dev: &dyn BlockDevice,
    opts: RecoverOptions,
    map: &JournalMap,
) -> Result<RecoveryReport, RecoveryError> {
    let sb = read_fs_superblock(dev)?;
    if !sb.has_compat(feature::COMPAT_HAS_JOURNAL) {
        return Ok(RecoveryReport::default());
    }
    check_fs_supported(&sb)?;
    recover_from(dev, opts, sb, map)
}

fn recover_from(
    dev: &dyn BlockDevice,
    opts: RecoverOptions,
    sb: Superblock,
    map: &JournalMap,
) -> Result<RecoveryReport, RecoveryError> {
    let jsb = read_journal_superblock(dev, map, &sb)?;
    let mut report = RecoveryReport {
        first_seq: Tid(jsb.s_sequence),
        last_seq: Tid(jsb.s_sequence).prev(),
        recover_flag: sb.has_incompat(feature::INCOMPAT_RECOVER),
        journal_errno: jsb.s_errno,
        ..Default::default()
    };
    if jsb.s_start == 0 {
        if opts.write && report.recover_flag {
            clear_recover_flag(dev, sb)?;
            dev.flush()?;
        }
        return Ok(report);
    }
    report.needed = true;
    let log = Log::new(dev, map, &jsb);
    let end = log.scan()?;
    report.transactions = end.0.wrapping_sub(jsb.s_sequence);
    report.last_seq = end.prev();
    let revokes = log.collect_revokes(end, &mut report)?;
    let home = Home::new(dev, &sb, map, opts.write);
    log.replay(end, &revokes, &home, &mut report)?;
    if opts.write {
        finish(dev, map, jsb, end)?;
    }
    Ok(report)
}

fn read_fs_superblock(dev: &dyn BlockDevice) -> Result<Superblock, RecoveryError> {
    let need = sbm::SUPERBLOCK_OFFSET + sbm::SUPERBLOCK_SIZE as u64;
    if dev.size() < need {
        let err = FormatError::Short {
            structure: "superblock",
            len: dev.size().saturating_sub(sbm::SUPERBLOCK_OFFSET) as usize,
            need: sbm::SUPERBLOCK_SIZE,
        };
        return Err(Corruption::new(Location::Superblock, err).into());
    }
    let mut buf = vec![0u8; sbm::SUPERBLOCK_SIZE];
    dev.read_at(&mut buf, sbm::SUPERBLOCK_OFFSET)?;
    Superblock::parse(&buf).map_err(|e| Corruption::new(Location::Superblock, e).into())
}

/// Features that change where group descriptors or block maps are, or put
/// the journal elsewhere, would make replay write to the wrong blocks.
fn check_fs_supported(sb: &Superblock) -> Result<(), RecoveryError> {
    let (incompat, _) = sb.unsupported_features();
    if !incompat.is_empty() {
        return Err(RecoveryError::Unsupported(format!(
            "filesystem features {}",
            incompat.join(", ")
        )));
    }
    if sb.s_journal_inum == 0 {
        return Err(RecoveryError::Unsupported(format!(
            "external journal (device {:#x})",
            sb.s_journal_dev
        )));
    }
    Ok(())
}

fn journal_corrupt(field: &'static str, value: u32, reason: &'static str) -> RecoveryError {
    let err = FormatError::bad_field("journal superblock", field, value, reason);
    Corruption::new(Location::JournalBlock(0), err).into()
}

/// Reads journal block 0 and checks what `journal_get_superblock` and
/// `journal_load` check before trusting the log.
pub fn read_journal_superblock(
    dev: &dyn BlockDevice,
    map: &JournalMap,
    sb: &Superblock,
) -> Result<JournalSuperblock, RecoveryError> {
    let buf = read_journal_block(dev, map, sb.block_size(), JournalBlock(0))?;
    let jsb = JournalSuperblock::parse(&buf)
        .map_err(|e| Corruption::new(Location::JournalBlock(0), e))?;
    if jsb.s_blocksize != sb.block_size() {
        return Err(journal_corrupt(
            "s_blocksize",
            jsb.s_blocksize,
            "differs from the filesystem block size",
        ));
    }
    if jsb.s_maxlen > map.len() {
        return Err(journal_corrupt(
            "s_maxlen",
            jsb.s_maxlen,
            "larger than the journal inode",
        ));
    }
    check_journal_features(&jsb)?;
    Ok(jsb)
}

fn check_journal_features(jsb: &JournalSuperblock) -> Result<(), RecoveryError> {
    let incompat = jsb.unsupported_incompat();
    if incompat != 0 {
        return Err(RecoveryError::Unsupported(format!(
            "journal incompatible features {}",
            journal_incompat_names(incompat).join(", ")
        )));
    }
    if jsb.is_v2() && jsb.s_feature_ro_compat != 0 {
        return Err(RecoveryError::Unsupported(format!(
            "journal read-only-compatible features {:#x}",
            jsb.s_feature_ro_compat
        )));
    }
    Ok(())
}

/// Names as `dumpe2fs` prints them under "Journal features".
pub fn journal_incompat_names(bits: u32) -> Vec<String> {
    const NAMES: &[(u32, &str)] = &[
        (jbd::JBD2_FEATURE_INCOMPAT_REVOKE, "journal_incompat_revoke"),
        (jbd::JBD2_FEATURE_INCOMPAT_64BIT, "journal_64bit"),
        (
            jbd::JBD2_FEATURE_INCOMPAT_ASYNC_COMMIT,
            "journal_async_commit",
        ),
        (jbd::JBD2_FEATURE_INCOMPAT_CSUM_V2, "journal_checksum_v2"),
        (jbd::JBD2_FEATURE_INCOMPAT_CSUM_V3, "journal_checksum_v3"),
        (
            jbd::JBD2_FEATURE_INCOMPAT_FAST_COMMIT,
            "journal_fast_commit",
        ),
    ];
    (0..32)
        .map(|i| 1u32 << i)
        .filter(|bit| bits & bit != 0)
        .map(|bit| match NAMES.iter().find(|(b, _)| *b == bit) {
            Some((_, name)) => name.to_string(),
            None => format!("FEATURE_I{}", bit.trailing_zeros()),
        })
        .collect()
}

fn read_journal_block(
    dev: &dyn BlockDevice,
    map: &JournalMap,
    block_size: u32,
    journal_block: JournalBlock,
) -> Result<Vec<u8>, RecoveryError> {
    let disk = map.disk_block(journal_block).ok_or_else(|| {
        let err = FormatError::bad_field(
            "journal",
            "block",
            journal_block.0,
            "beyond the journal inode",
        );
        Corruption::new(Location::JournalBlock(journal_block.0), err)
    })?;
    let mut buf = vec![0u8; block_size as usize];
    dev.read_at(&mut buf, u64::from(disk.0) * u64::from(block_size))?;
    Ok(buf)
}

/// One metadata block of the log, as the passes see it.
enum Record {
    /// Tags for the data blocks that follow, starting at journal block `data`.
    Descriptor {
        seq: Tid,
        tags: Vec<JournalTag>,
        data: JournalBlock,
    },
    Commit,
    Revoke {
        seq: Tid,
        at: JournalBlock,
        block: Vec<u8>,
    },
}

/// Where a pass is: the next log block, the transaction expected there, and
/// how many log blocks have been consumed (so a corrupt log cannot loop).
struct Cursor {
    pos: JournalBlock,
    seq: Tid,
    used: u32,
}

/// The circular log between `s_first` and `s_maxlen`.
struct Log<'a> {
    dev: &'a dyn BlockDevice,
    map: &'a JournalMap,
    block_size: u32,
    first: JournalBlock,
    maxlen: u32,
    start: JournalBlock,
    sequence: Tid,
}

impl<'a> Log<'a> {
    fn new(dev: &'a dyn BlockDevice, map: &'a JournalMap, jsb: &JournalSuperblock) -> Self {
        Log {
            dev,
            map,
            block_size: jsb.s_blocksize,
            first: JournalBlock(jsb.s_first),
            maxlen: jsb.s_maxlen,
            start: JournalBlock(jsb.s_start),
            sequence: Tid(jsb.s_sequence),
        }
    }

    /// Validation guarantees `s_first < s_maxlen`.
    fn len(&self) -> u32 {
        self.maxlen - self.first.0
    }

    /// The log block `n` after `pos`, wrapping from the end back to s_first.
    fn wrap(&self, pos: JournalBlock, n: u32) -> JournalBlock {
        let off = u64::from(pos.0.saturating_sub(self.first.0)) + u64::from(n);
        // The remainder is below len(), a u32.
        self.first + (off % u64::from(self.len())) as u32
    }

    fn read(&self, journal_block: JournalBlock) -> Result<Vec<u8>, RecoveryError> {
        read_journal_block(self.dev, self.map, self.block_size, journal_block)
    }

    fn cursor(&self) -> Cursor {
        Cursor {
            pos: self.start,
            seq: self.sequence,
            used: 0,
        }
    }

    /// The next record, or `None` where the log ends: a block that is not a
    /// journal block of the expected transaction, or a full lap of the log.
    fn next(&self, c: &mut Cursor) -> Result<Option<Record>, RecoveryError> {
        if c.used >= self.len() {
            return Ok(None);
        }
        let here = c.pos;
        let block = self.read(here)?;
        let Ok(h) = JournalHeader::parse(&block) else {
            return Ok(None);
        };
        if Tid(h.h_sequence) != c.seq {
            return Ok(None);
        }
        let (record, blocks) = match h.h_blocktype {
            jbd::JBD2_DESCRIPTOR_BLOCK => match self.descriptor(&block, here, c) {
                Some(r) => r,
                None => return Ok(None),
            },
            jbd::JBD2_COMMIT_BLOCK if CommitBlock::parse(&block).is_ok() => {
                c.seq = c.seq.next();
                (Record::Commit, 1)
            }
            jbd::JBD2_REVOKE_BLOCK => {
                let seq = c.seq;
                (
                    Record::Revoke {
                        seq,
                        at: here,
                        block,
                    },
                    1,
                )
            }
            _ => return Ok(None),
        };
        c.pos = self.wrap(here, blocks);
        c.used += blocks;
        Ok(Some(record))
    }

    /// A descriptor and the log blocks it spans, if they fit in the log.
    fn descriptor(&self, block: &[u8], here: JournalBlock, c: &Cursor) -> Option<(Record, u32)> {
        let (_, tags) = jbd::parse_descriptor(block).ok()?;
        // At most block_size / 8 tags.
        let blocks = 1 + tags.len() as u32;
        if u64::from(c.used) + u64::from(blocks) > u64::from(self.len()) {
            return None;
        }
        let record = Record::Descriptor {
            seq: c.seq,
            tags,
            data: self.wrap(here, 1),
        };
        Some((record, blocks))
    }

    /// PASS_SCAN: the sequence after the last complete transaction.
    fn scan(&self) -> Result<Tid, RecoveryError> {
        let mut c = self.cursor();
        while self.next(&mut c)?.is_some() {}
        Ok(c.seq)
    }

    /// Visits the records of the complete transactions, before `end`.
    fn walk(
        &self,
        end: Tid,
        mut visit: impl FnMut(Record) -> Result<(), RecoveryError>,
    ) -> Result<(), RecoveryError> {
        let mut c = self.cursor();
        while !c.seq.geq(end) {
            match self.next(&mut c)? {
                Some(record) => visit(record)?,
                None => return Err(log_changed(c.pos)),
            }
        }
        Ok(())
    }

    /// PASS_REVOKE.
    fn collect_revokes(
        &self,
        end: Tid,
        report: &mut RecoveryReport,
    ) -> Result<RevokeTable, RecoveryError> {
        let mut table = RevokeTable::new();
        self.walk(end, |record| {
            if let Record::Revoke { seq, at, block } = record {
                let (_, blocks) = jbd::parse_revoke(&block)
                    .map_err(|e| Corruption::new(Location::JournalBlock(at.0), e))?;
                report.revoke_records += blocks.len() as u64;
                for b in blocks {
                    table.set(BlockNo(b), seq);
                }
            }
            Ok(())
        })?;
        Ok(table)
    }

    /// PASS_REPLAY.
    fn replay(
        &self,
        end: Tid,
        revokes: &RevokeTable,
        home: &Home,
        report: &mut RecoveryReport,
    ) -> Result<(), RecoveryError> {
        self.walk(end, |record| {
            if let Record::Descriptor { seq, tags, data } = record {
                for (i, tag) in tags.iter().enumerate() {
                    // i < tags.len(), which fits a u32.
                    let from = self.wrap(data, i as u32);
                    self.replay_block(tag, seq, from, revokes, home, report)?;
                }
            }
            Ok(())
        })
    }

    fn replay_block(
        &self,
        tag: &JournalTag,
        seq: Tid,
        from: JournalBlock,
        revokes: &RevokeTable,
        home: &Home,
        report: &mut RecoveryReport,
    ) -> Result<(), RecoveryError> {
        let target = BlockNo(tag.t_blocknr);
        if revokes.is_revoked(target, seq) {
            report.blocks_revoked += 1;
            return Ok(());
        }
        if !home.is_valid(target) {
            tracing::warn!(
                block = target.0,
                transaction = seq.0,
                journal_block = from.0,
                "journal tag names a block outside the filesystem or inside the journal; skipped"
            );
            report.bad_blocks += 1;
            return Ok(());
        }
        let mut block = self.read(from)?;
        if tag.t_flags & jbd::JBD2_FLAG_ESCAPE != 0 {
            jbd::unescape(&mut block);
            report.escaped_blocks += 1;
        }
        home.write(target, &block)?;
        report.blocks_replayed += 1;
        Ok(())
    }
}

/// Between passes nothing writes the log (replay never targets journal
/// blocks), so a pass that ends early means the device changed under us.
fn log_changed(pos: JournalBlock) -> RecoveryError {
    let err = FormatError::bad_field(
        "journal",
        "log",
        pos.0,
        "log ended early in a later recovery pass: the journal changed during recovery",
    );
    Corruption::new(Location::JournalBlock(pos.0), err).into()
}

/// Where replayed blocks go.
struct Home<'a> {
    dev: &'a dyn BlockDevice,
    block_size: u32,
    /// Block 0 is the boot block with 1 KiB blocks, but holds the
    /// superblock (which jbd logs) with larger ones.
    first_block: u32,
    blocks_count: u32,
    /// Writing a journal block home would corrupt the log being replayed.
    journal: HashSet<BlockNo>,
    write: bool,
}

impl<'a> Home<'a> {
    fn new(dev: &'a dyn BlockDevice, sb: &Superblock, map: &JournalMap, write: bool) -> Self {
        Home {
            dev,
            block_size: sb.block_size(),
            first_block: sb.s_first_data_block,
            blocks_count: sb.s_blocks_count,
            journal: map.blocks().iter().map(|&b| BlockNo(b)).collect(),
            write,
        }
    }

    fn is_valid(&self, b: BlockNo) -> bool {
        b.0 >= self.first_block && b.0 < self.blocks_count && !self.journal.contains(&b)
    }

    fn write(&self, b: BlockNo, block: &[u8]) -> Result<(), RecoveryError> {
        if self.write {
            self.dev
                .write_at(block, u64::from(b.0) * u64::from(self.block_size))?;
        }
        Ok(())
    }
}

/// Marks the journal empty, then the filesystem clean, each only after what
/// it depends on is durable.
fn finish(
    dev: &dyn BlockDevice,
    map: &JournalMap,
    mut jsb: JournalSuperblock,
    end: Tid,
) -> Result<(), RecoveryError> {
    dev.flush()?;
    jsb.s_start = 0;
    // As jbd2 does, skip one sequence number past the last complete
    // transaction: blocks of the incomplete one may remain in the log and
    // must never be taken for part of the next log.
    jsb.s_sequence = end.next().0;
    write_journal_superblock(dev, map, &jsb)?;
    dev.flush()?;
    // The superblock as replay left it: the one read before replay would
    // put back what the log changed (s_last_orphan, free counts), as the
    // kernel avoids by keeping the replayed copy.
    clear_recover_flag(dev, read_fs_superblock(dev)?)?;
    dev.flush()?;
    Ok(())
}

/// Rewrites the first 1024 bytes of journal block 0, keeping the rest.
fn write_journal_superblock(
    dev: &dyn BlockDevice,
    map: &JournalMap,
    jsb: &JournalSuperblock,
) -> Result<(), RecoveryError> {
    let mut block = read_journal_block(dev, map, jsb.s_blocksize, JournalBlock(0))?;
    let bytes = jsb.to_bytes();
    block[..bytes.len()].copy_from_slice(&bytes);
    let disk = map.disk_block(JournalBlock(0)).map_or(0, |b| b.0);
    dev.write_at(&block, u64::from(disk) * u64::from(jsb.s_blocksize))?;
    Ok(())
}

/// Only the primary superblock: backups never carry needs_recovery.
fn clear_recover_flag(dev: &dyn BlockDevice, mut sb: Superblock) -> Result<(), RecoveryError> {
    if sb.has_incompat(feature::INCOMPAT_RECOVER) {
        sb.s_feature_incompat &= !feature::INCOMPAT_RECOVER;
        dev.write_at(&sb.to_bytes(), sbm::SUPERBLOCK_OFFSET)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_names_include_unknown_bits() {
        assert_eq!(
            journal_incompat_names(0x12 | 0x100),
            ["journal_64bit", "journal_checksum_v3", "FEATURE_I8"]
        );
    }
}
