//! Journal first: replay the log into the overlay before any pass looks at
//! the image (e2fsck's `e2fsck_check_ext3_journal` and
//! `e2fsck_run_ext3_journal`). With -n the overlay is never written back,
//! so the check sees the image as if replayed while the disk keeps its log.

use crate::device::BlockDevice;
use crate::format::jbd::JournalSuperblock;
use crate::format::superblock::{feature, Superblock};
use crate::journal::jmap::JournalMap;
use crate::journal::recovery::{recover, RecoverOptions, RecoveryError};

use super::problem::Problems;
use super::{FsckError, Mode};

/// What happened to the journal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JournalOutcome {
    /// A log was replayed (into the overlay).
    pub replayed: bool,
    /// The journal superblock was rewritten empty.
    pub reset: bool,
}

/// Replays the journal of the filesystem on `dev` (an overlay).
pub fn replay(
    dev: &dyn BlockDevice,
    sb: &Superblock,
    name: &str,
    problems: &mut Problems,
) -> Result<JournalOutcome, FsckError> {
    if !sb.has_compat(feature::COMPAT_HAS_JOURNAL) {
        return Ok(JournalOutcome::default());
    }
    match recover(dev, RecoverOptions { write: true }) {
        Ok(r) if r.needed => {
            if problems.mode() == Mode::No {
                problems.say(&format!(
                    "{name}: the journal needs recovery; checking the filesystem as if it had been replayed ({} transaction(s), {} block(s)), without writing",
                    r.transactions, r.blocks_replayed
                ));
            } else {
                problems.say(&format!("{name}: recovering journal"));
            }
            Ok(JournalOutcome {
                replayed: true,
                reset: false,
            })
        }
        Ok(_) => Ok(JournalOutcome::default()),
        Err(RecoveryError::Unsupported(what)) => Err(FsckError::Unsupported(what)),
        Err(RecoveryError::Io(e)) => Err(FsckError::Io(e)),
        Err(RecoveryError::Corrupt(c)) => {
            let reset = repair_bad_journal(dev, sb, problems, &c.to_string())?;
            Ok(JournalOutcome {
                replayed: false,
                reset,
            })
        }
    }
}

/// A journal whose superblock cannot be trusted: e2fsck offers to reset
/// the journal superblock (keeping the journal inode) and drops the log.
fn repair_bad_journal(
    dev: &dyn BlockDevice,
    sb: &Superblock,
    problems: &mut Problems,
    why: &str,
) -> Result<bool, FsckError> {
    let map = match JournalMap::load(dev, sb) {
        Ok(m) => m,
        Err(_) => {
            problems.unfixable(&format!(
                "Superblock has an invalid journal (inode {}).\n({why})\nThe journal inode itself is damaged; jbdfs cannot recreate it.",
                sb.s_journal_inum
            ));
            return Ok(false);
        }
    };
    let msg = format!(
        "Superblock has an invalid journal (inode {}).\n",
        sb.s_journal_inum
    );
    if !problems.ask_safe(&msg, "Clear") {
        return Ok(false);
    }
    let bs = sb.block_size();
    let Some(first) = map.disk_block(0) else {
        return Ok(false);
    };
    let mut jsb = JournalSuperblock::new(bs, map.len(), [0; 16])
        .map_err(|e| FsckError::Io(std::io::Error::other(e.to_string())))?;
    jsb.s_nr_users = 0;
    // A new sequence makes old transactions in the log unreachable.
    jsb.s_sequence = crate::util::unique_suffix() as u32 | 1;
    let mut block = vec![0u8; bs as usize];
    block[..jsb.to_bytes().len()].copy_from_slice(&jsb.to_bytes());
    dev.write_at(&block, u64::from(first.0) * u64::from(bs))?;
    Ok(true)
}
