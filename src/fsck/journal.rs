//! Journal first: replay the log into the overlay before any pass looks at
//! the image (e2fsck's `e2fsck_check_ext3_journal` and
//! `e2fsck_run_ext3_journal`). With -n the overlay is never written back,
//! so the check sees the image as if replayed while the disk keeps its log.

use crate::device::BlockDevice;
use crate::format::jbd::JournalSuperblock;
use crate::format::superblock::{feature, Superblock};
use crate::journal::jmap::JournalMap;
use crate::journal::recovery::{recover, RecoverOptions, RecoveryError};
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
                ..Default::default()
            })
        }
        Ok(_) => Ok(JournalOutcome::default()),
        Err(RecoveryError::Unsupported(what)) => Err(FsckError::Unsupported(what)),
        Err(RecoveryError::Io(e)) => Err(FsckError::Io(e)),
        Err(RecoveryError::Corrupt(c)) => repair_bad_journal(dev, sb, problems, &c.to_string()),
    }
}

/// A journal whose superblock cannot be trusted: e2fsck offers to reset
/// the journal superblock (keeping the journal inode) and drops the log.
fn repair_bad_journal(
    dev: &dyn BlockDevice,
    sb: &Superblock,
    problems: &mut Problems,
    why: &str,
) -> Result<JournalOutcome, FsckError> {
    let map = match JournalMap::load(dev, sb) {
        Ok(m) => m,
        Err(_) => return delete_journal(dev, sb, problems, why),
    };
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
        let descs = super::super_check::read_descs(dev, sb, sb.s_first_data_block)?;
        let (g, idx) = sb.inode_group(ino);
        if let Some(d) = descs.get(g.0 as usize) {
            let isz = u64::from(sb.inode_size());
            let at =
                u64::from(d.bg_inode_table) * u64::from(sb.block_size()) + u64::from(idx) * isz;
            dev.write_at(&vec![0u8; isz as usize], at)?;
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
    sb.s_jnl_backup_type = crate::format::superblock::EXT3_JNL_BACKUP_BLOCKS;
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
