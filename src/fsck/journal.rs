//! Journal first: replay the log into the overlay before any pass looks at
//! the image (e2fsck's `e2fsck_check_ext3_journal` and
//! `e2fsck_run_ext3_journal`). With -n the overlay is never written back,
//! so the check sees the image as if replayed while the disk keeps its log.

use crate::device::BlockDevice;
use crate::format::jbd::JournalSuperblock;
use crate::format::superblock::{feature, Superblock};
use crate::format::superblock::{EXT3_JNL_BACKUP_BLOCKS, SUPERBLOCK_OFFSET};
use crate::journal::jmap::backup_inode;
use crate::journal::jmap::JournalMap;
use crate::journal::recovery::{
    read_journal_superblock, recover_with_map, RecoverOptions, RecoveryError,
};
use crate::journal::JournalBlock;

use super::context::Ctx;
use super::problem::Problems;
use super::{FsckError, Mode};

/// What happened to the journal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JournalOutcome {
    /// A log was replayed (into the overlay).
    pub replayed: bool,
    /// The journal superblock was rewritten empty.
    pub reset: bool,
    /// The journal inode was unusable and has been deleted: make a new
    /// journal once pass 4 is done.
    pub recreate: bool,
    /// The superblock was changed (journal fields, feature flags).
    pub sb_changed: bool,
}

/// Replays the journal of the filesystem on `dev` (an overlay).
///
/// A damaged journal inode is not a reason to drop the log: as e2fsck
/// does, the superblock's backup of the inode's block map (`s_jnl_blocks`)
/// is tried first, and the inode is rewritten from it.
pub fn replay(
    dev: &dyn BlockDevice,
    sb: &Superblock,
    name: &str,
    problems: &mut Problems,
) -> Result<JournalOutcome, FsckError> {
    if !sb.has_compat(feature::COMPAT_HAS_JOURNAL) {
        return journal_without_flag(dev, sb, problems);
    }
    let map = match JournalMap::load(dev, sb) {
        Ok(map) => map,
        Err(RecoveryError::Corrupt(c)) => match usable_backup(dev, sb) {
            Some(map) => {
                restore_journal_inode(dev, sb, problems)?;
                map
            }
            None => return delete_journal(dev, sb, problems, &c.to_string()),
        },
        Err(e) => return Err(recovery_error(e)),
    };
    match recover_with_map(dev, RecoverOptions { write: true }, &map) {
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
                ..Default::default()
            })
        }
        Ok(_) => Ok(JournalOutcome::default()),
        Err(RecoveryError::Corrupt(c)) => {
            problems.say(&format!("({c})"));
            repair_bad_journal(dev, sb, &map, problems)
        }
        Err(e) => Err(recovery_error(e)),
    }
}

fn recovery_error(e: RecoveryError) -> FsckError {
    match e {
        RecoveryError::Unsupported(what) => FsckError::Unsupported(what),
        RecoveryError::Io(e) => FsckError::Io(e),
        RecoveryError::Corrupt(c) => FsckError::Corrupt(c),
    }
}

/// The superblock's backup of the journal's block map, when it names a
/// journal whose superblock reads as one.
fn usable_backup(dev: &dyn BlockDevice, sb: &Superblock) -> Option<JournalMap> {
    let map = JournalMap::load_backup(dev, sb)?.ok()?;
    read_journal_superblock(dev, &map, sb).ok()?;
    Some(map)
}

/// Rewrites the journal inode from the superblock's backup (e2fsck does
/// the same before replay); the replay may then bring back the rest of
/// the inode table around it.
fn restore_journal_inode(
    dev: &dyn BlockDevice,
    sb: &Superblock,
    problems: &mut Problems,
) -> Result<(), FsckError> {
    let ino = sb.s_journal_inum;
    let Some(inode) = backup_inode(sb) else {
        return Ok(());
    };
    problems.say(&format!(
        "Journal inode {ino} cannot be read as a journal; using the superblock's backup of its block map."
    ));
    if let Some(at) = inode_offset(dev, sb, ino)? {
        let mut bytes = inode.to_bytes();
        bytes.truncate(sb.inode_size() as usize);
        dev.write_at(&bytes, at)?;
    }
    Ok(())
}

/// Where inode `ino` lives on `dev`, from its group descriptor.
fn inode_offset(
    dev: &dyn BlockDevice,
    sb: &Superblock,
    ino: u32,
) -> Result<Option<u64>, FsckError> {
    if ino == 0 || ino > sb.s_inodes_count {
        return Ok(None);
    }
    let descs = super::super_check::read_descs(dev, sb, sb.s_first_data_block)?;
    let (g, idx) = sb.inode_group(ino);
    let Some(table) = descs.get(g.0 as usize).map(|d| d.bg_inode_table) else {
        return Ok(None);
    };
    // A descriptor pointing outside the filesystem is pass 1's to repair;
    // writing through it would land anywhere.
    let end = u64::from(table) + u64::from(sb.inode_table_blocks());
    if table < sb.s_first_data_block || end > u64::from(sb.s_blocks_count) {
        return Ok(None);
    }
    let isz = u64::from(sb.inode_size());
    Ok(Some(
        u64::from(table) * u64::from(sb.block_size()) + u64::from(idx) * isz,
    ))
}

/// e2fsck's PR_0_JOURNAL_HAS_JOURNAL: the superblock names a journal but
/// lacks the has_journal flag. e2fsck clears the journal fields; when the
/// journal still holds committed transactions that would lose them, so
/// fsck.jbdfs says so and offers to set the flag and replay instead.
fn journal_without_flag(
    dev: &dyn BlockDevice,
    sb: &Superblock,
    problems: &mut Problems,
) -> Result<JournalOutcome, FsckError> {
    if sb.s_journal_inum == 0 {
        return Ok(JournalOutcome::default());
    }
    let Ok(map) = JournalMap::load(dev, sb) else {
        return Ok(JournalOutcome::default());
    };
    let Ok(jsb) = read_journal_superblock(dev, &map, sb) else {
        return Ok(JournalOutcome::default());
    };
    let mut fixed = sb.clone();
    if jsb.s_start != 0 {
        let msg = format!(
            "Superblock has_journal flag is clear, but a journal holding committed transactions (from sequence {}) is present.\n",
            jsb.s_sequence
        );
        if problems.ask_safe(&msg, "Set the flag and replay it") {
            fixed.s_feature_compat |= feature::COMPAT_HAS_JOURNAL;
            dev.write_at(&fixed.to_bytes(), SUPERBLOCK_OFFSET)?;
            let mut outcome = replay(dev, &fixed, "", problems)?;
            outcome.sb_changed = true;
            return Ok(outcome);
        }
        return Ok(JournalOutcome::default());
    }
    let msg = "Superblock has_journal flag is clear, but a journal is present.\n";
    if !problems.ask_safe(msg, "Clear") {
        return Ok(JournalOutcome::default());
    }
    fixed.s_journal_inum = 0;
    fixed.s_journal_dev = 0;
    fixed.s_journal_uuid = [0; 16];
    fixed.s_feature_incompat &= !feature::INCOMPAT_RECOVER;
    dev.write_at(&fixed.to_bytes(), SUPERBLOCK_OFFSET)?;
    Ok(JournalOutcome {
        sb_changed: true,
        ..Default::default()
    })
}

/// A journal whose superblock cannot be trusted: e2fsck offers to reset
/// the journal superblock (keeping the journal inode) and drops the log.
fn repair_bad_journal(
    dev: &dyn BlockDevice,
    sb: &Superblock,
    map: &JournalMap,
    problems: &mut Problems,
) -> Result<JournalOutcome, FsckError> {
    if let Some(backup) = usable_backup(dev, sb).filter(|b| b != map) {
        // The inode points at the wrong blocks, its backup at a journal.
        restore_journal_inode(dev, sb, problems)?;
        return match recover_with_map(dev, RecoverOptions { write: true }, &backup) {
            Ok(r) => Ok(JournalOutcome {
                replayed: r.needed,
                ..Default::default()
            }),
            Err(e) => Err(recovery_error(e)),
        };
    }
    let msg = format!(
        "Superblock has an invalid journal (inode {}).\n",
        sb.s_journal_inum
    );
    if !problems.ask_safe(&msg, "Clear") {
        return Ok(JournalOutcome::default());
    }
    let bs = sb.block_size();
    let Some(first) = map.disk_block(JournalBlock(0)) else {
        return Ok(JournalOutcome::default());
    };
    let mut jsb = JournalSuperblock::new(bs, map.len(), [0; 16])
        .map_err(|e| FsckError::Io(std::io::Error::other(e.to_string())))?;
    jsb.s_nr_users = 0;
    // A new sequence makes old transactions in the log unreachable.
    jsb.s_sequence = crate::util::unique_suffix() as u32 | 1;
    let mut block = vec![0u8; bs as usize];
    block[..jsb.to_bytes().len()].copy_from_slice(&jsb.to_bytes());
    dev.write_at(&block, u64::from(first.0) * u64::from(bs))?;
    Ok(JournalOutcome {
        reset: true,
        ..Default::default()
    })
}

/// The journal inode itself is unusable: as e2fsck, clear it and the
/// has_journal feature ("*** journal has been deleted ***"); a new journal
/// is made after pass 4.
fn delete_journal(
    dev: &dyn BlockDevice,
    sb: &Superblock,
    problems: &mut Problems,
    why: &str,
) -> Result<JournalOutcome, FsckError> {
    let ino = sb.s_journal_inum;
    let msg = format!("Superblock has an invalid journal (inode {ino}).\n");
    if !problems.ask_safe(&msg, "Clear") {
        problems.say(&format!("({why})"));
        return Ok(JournalOutcome::default());
    }
    if ino == crate::format::inode::ino::EXT2_JOURNAL_INO {
        if let Some(at) = inode_offset(dev, sb, ino)? {
            dev.write_at(&vec![0u8; sb.inode_size() as usize], at)?;
        }
    }
    let mut sb = sb.clone();
    sb.s_feature_compat &= !feature::COMPAT_HAS_JOURNAL;
    sb.s_feature_incompat &= !feature::INCOMPAT_RECOVER;
    sb.s_journal_inum = 0;
    sb.s_jnl_blocks = [0; 17];
    dev.write_at(&sb.to_bytes(), crate::format::superblock::SUPERBLOCK_OFFSET)?;
    problems.say("*** journal has been deleted ***\n");
    Ok(JournalOutcome {
        recreate: true,
        ..Default::default()
    })
}

/// e2fsck's PR_0_BACKUP_JNL: keep the superblock's copy of the journal
/// inode's block map current, so that a later fsck can still find the log
/// when the inode is damaged. Not counted as a repair, as in e2fsck.
pub fn backup_block_map(ctx: &mut Ctx) {
    let sb = &ctx.sb;
    let ino = sb.s_journal_inum;
    if ctx.problems.mode() == Mode::No
        || !sb.has_compat(feature::COMPAT_HAS_JOURNAL)
        || !ctx.ino_ok(ino)
    {
        return;
    }
    let inode = ctx.inode(ino);
    if inode.i_links_count == 0 || !inode.is_reg() || !inode.has_block_map(ctx.bs) {
        return;
    }
    let current =
        sb.s_jnl_backup_type == EXT3_JNL_BACKUP_BLOCKS && sb.s_jnl_blocks[..15] == inode.i_block;
    if current {
        return;
    }
    ctx.problems
        .say("Backing up journal inode block information.\n");
    let sb = &mut ctx.sb;
    sb.s_jnl_backup_type = EXT3_JNL_BACKUP_BLOCKS;
    sb.s_jnl_blocks[..15].copy_from_slice(&inode.i_block);
    sb.s_jnl_blocks[15] = (inode.i_size >> 32) as u32;
    sb.s_jnl_blocks[16] = inode.i_size as u32;
    ctx.sb_dirty = true;
}

/// Makes a new journal in inode 8, of mke2fs's default size (e2fsck's
/// "Recreate journal"), from blocks pass 1 found free.
pub fn recreate(ctx: &mut Ctx) -> std::io::Result<()> {
    use crate::format::inode::ino::EXT2_JOURNAL_INO;
    let blocks = crate::format::jbd::default_journal_blocks(u64::from(ctx.sb.s_blocks_count));
    let free = u64::from(ctx.sb.s_blocks_count)
        - (0..ctx.found.len()).filter(|&b| ctx.found.get(b)).count() as u64;
    if u64::from(blocks) * 2 > free || !ctx.problems.ask_safe("", "Recreate journal") {
        return Ok(());
    }
    ctx.problems.say(&format!(
        "Creating journal ({blocks} blocks):  Done.\n\n*** journal has been regenerated ***"
    ));
    let mut map = NewMap::default();
    let near = ctx.groups() / 2;
    let mut i_block = [0u32; 15];
    let per = u64::from(ctx.bs / 4);
    let mut left = u64::from(blocks);
    for slot in i_block.iter_mut().take(12) {
        if left == 0 {
            break;
        }
        *slot = map.data_block(ctx, near)?;
        left -= 1;
    }
    for depth in 1..=3u32 {
        if left == 0 {
            break;
        }
        i_block[11 + depth as usize] = map.tree(ctx, near, depth, per, &mut left)?;
    }
    let jsb = JournalSuperblock::new(ctx.bs, blocks, ctx.sb.s_uuid)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut block = vec![0u8; ctx.bs as usize];
    block[..jsb.to_bytes().len()].copy_from_slice(&jsb.to_bytes());
    ctx.write_block(map.first, &block)?;
    let extra = if ctx.isz > 128 { 32 } else { 0 };
    let mut inode = crate::format::inode::Inode::new(ctx.isz, extra);
    let (sec, nsec) = crate::util::now();
    let t = crate::format::inode::Timestamp { sec, nsec };
    inode.i_atime = t;
    inode.i_ctime = t;
    inode.i_mtime = t;
    inode.i_mode = crate::format::inode::S_IFREG | 0o600;
    inode.i_links_count = 1;
    inode.i_size = u64::from(blocks) * u64::from(ctx.bs);
    inode.i_blocks = map.count * u64::from(ctx.bs / 512);
    inode.i_block = i_block;
    ctx.write_inode(EXT2_JOURNAL_INO, &inode);
    ctx.info[EXT2_JOURNAL_INO as usize].used = true;
    let sb = &mut ctx.sb;
    sb.s_feature_compat |= feature::COMPAT_HAS_JOURNAL;
    sb.s_journal_inum = EXT2_JOURNAL_INO;
    sb.s_jnl_backup_type = EXT3_JNL_BACKUP_BLOCKS;
    sb.s_jnl_blocks[..15].copy_from_slice(&i_block);
    sb.s_jnl_blocks[15] = (inode.i_size >> 32) as u32;
    sb.s_jnl_blocks[16] = inode.i_size as u32;
    ctx.sb_dirty = true;
    Ok(())
}

/// Allocation state while building the new journal's block map.
#[derive(Default)]
struct NewMap {
    first: u32,
    count: u64,
}

impl NewMap {
    /// A zeroed block, the first of them being the journal superblock.
    fn data_block(&mut self, ctx: &mut Ctx, near: u32) -> std::io::Result<u32> {
        let b = self.alloc(ctx, near)?;
        if self.count == 1 {
            self.first = b;
        }
        ctx.write_block(b, &vec![0u8; ctx.bs as usize])?;
        Ok(b)
    }

    fn alloc(&mut self, ctx: &mut Ctx, near: u32) -> std::io::Result<u32> {
        let b = ctx
            .alloc_block(near)
            .ok_or_else(|| std::io::Error::other("no free block for the journal"))?;
        self.count += 1;
        Ok(b)
    }

    fn tree(
        &mut self,
        ctx: &mut Ctx,
        near: u32,
        depth: u32,
        per: u64,
        left: &mut u64,
    ) -> std::io::Result<u32> {
        let node = self.alloc(ctx, near)?;
        let mut ptrs = vec![0u8; ctx.bs as usize];
        for slot in 0..per as usize {
            if *left == 0 {
                break;
            }
            let child = if depth == 1 {
                *left -= 1;
                self.data_block(ctx, near)?
            } else {
                self.tree(ctx, near, depth - 1, per, left)?
            };
            crate::format::indirect::set_ptr(&mut ptrs, slot as u32, crate::format::BlockNo(child))
                .map_err(std::io::Error::other)?;
        }
        ctx.write_block(node, &ptrs)?;
        Ok(node)
    }
}
