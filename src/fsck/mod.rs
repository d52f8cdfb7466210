//! fsck.jbdfs: check and repair an ext3 filesystem like e2fsck, with its
//! flags, messages and exit codes.
//!
//! Everything is done against an in-memory [`OverlayDevice`] over the
//! image: the journal is replayed into it, the passes read through it and
//! write their repairs to it. With -n the overlay is dropped, so not a byte
//! changes; with -y or -p it is written back in one sweep at the end.
//!
//! The order is e2fsck's: the superblock (or a backup) and the journal;
//! the orphan list; pass 1 (inodes and block maps) and 1B-1D (blocks
//! claimed twice); pass 2 (directory entries); pass 3 (connectivity);
//! pass 4 (link counts); pass 5 (bitmaps and summary counts).

pub mod badblocks;
pub mod context;
pub mod htree;
pub mod journal;
pub mod orphan;
pub mod pass1;
pub mod pass1b;
pub mod pass2;
pub mod pass3;
pub mod pass4;
pub mod pass5;
pub mod problem;
pub mod progress;
pub mod resize;
pub mod super_check;
pub mod walk;

use std::io;

use crate::device::{BlockDevice, OverlayDevice};
use crate::format::group_desc::{table_to_bytes, GroupDesc};
use crate::format::superblock::{self as sbm, feature, Superblock};
use crate::format::Corruption;

use context::Ctx;
use problem::Problems;

/// e2fsck's exit status bits.
pub mod exit {
    pub const OK: u8 = 0;
    pub const NONDESTRUCT: u8 = 1;
    pub const DESTRUCT: u8 = 2;
    pub const UNCORRECTED: u8 = 4;
    pub const ERROR: u8 = 8;
    pub const USAGE: u8 = 16;
    pub const CANCELED: u8 = 32;
}

/// How to answer questions, as e2fsck's -n, -p/-a and -y choose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// -n: open read-only and answer no.
    #[default]
    No,
    /// -p / -a: fix what is safe without asking.
    Preen,
    /// -y: answer yes to everything.
    Yes,
}

#[derive(Clone, Debug, Default)]
pub struct FsckOptions {
    pub mode: Mode,
    /// -f: check even if the filesystem seems clean.
    pub force: bool,
    /// Print messages as they are found (the command line does).
    pub echo: bool,
    /// -C FD: progress on this descriptor (0: the terminal).
    pub progress_fd: Option<i32>,
    /// The name messages use for the device.
    pub name: String,
    /// -b (and -B): the backup superblock to use, at this block number
    /// (of this block size, or of whichever size reads a superblock there).
    pub superblock: Option<(u64, Option<u32>)>,
    /// -D: rebuild every directory in pass 3A (e2fsck's -D).
    pub compress_dirs: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum FsckError {
    #[error("{0}")]
    Corrupt(#[from] Corruption),
    #[error("the filesystem has unsupported features: {0}")]
    Unsupported(String),
    #[error("{0}")]
    Abort(String),
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

/// What a check found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Problems found, one message each, in e2fsck's style.
    pub problems: Vec<String>,
    pub fixed: usize,
    /// Problems left that leave the filesystem in error.
    pub unfixed: usize,
    /// Bytes written back to the device.
    pub bytes_written: u64,
    /// The journal held a log that was (or, with -n, would be) replayed.
    pub journal_replayed: bool,
    pub inodes_used: u64,
    pub inodes_count: u64,
    pub blocks_used: u64,
    pub blocks_count: u64,
    /// Files with non-contiguous blocks.
    pub fragmented: u64,
    /// Whether the check was skipped because the filesystem is clean.
    pub skipped_clean: bool,
    /// Preen stopped at a problem it may not fix alone; nothing was written
    /// but the error state.
    pub halted: bool,
    /// The filesystem was not marked clean and this run marked it so
    /// (e2fsck counts that as a change: exit 1).
    pub marked_clean: bool,
}

impl Report {
    /// The exit status e2fsck would give.
    pub fn exit_code(&self) -> u8 {
        // As e2fsck: replaying the journal and processing the orphan list
        // alone leave the status 0; any problem fixed makes it 1.
        let mut code = exit::OK;
        if (self.fixed > 0 || self.marked_clean) && !self.halted {
            code |= exit::NONDESTRUCT;
        }
        if self.unfixed > 0 {
            code |= exit::UNCORRECTED;
        }
        code
    }

    /// e2fsck's closing line: "N/M files (X% non-contiguous), N/M blocks".
    pub fn summary(&self, name: &str) -> String {
        // e2fsck rounds per ten thousand to per mille.
        let per_mille = (self.fragmented * 10000)
            .checked_div(self.inodes_used)
            .map_or(0, |x| (x + 5) / 10);
        format!(
            "{name}: {}/{} files ({}.{}% non-contiguous), {}/{} blocks",
            self.inodes_used,
            self.inodes_count,
            per_mille / 10,
            per_mille % 10,
            self.blocks_used,
            self.blocks_count
        )
    }
}

/// Reads and validates the primary superblock.
pub fn read_superblock(dev: &dyn BlockDevice) -> Result<Superblock, FsckError> {
    use crate::format::superblock::{read_primary, ReadError};
    read_primary(dev.size(), |buf, off| dev.read_at(buf, off)).map_err(|e| match e {
        ReadError::Io(e) => FsckError::Io(e),
        ReadError::Corrupt(c) => FsckError::Corrupt(c),
    })
}

/// Refuses filesystems jbdfs cannot check: any incompat or ro_compat
/// feature outside the ext3 set.
pub fn check_features(sb: &Superblock) -> Result<(), FsckError> {
    let (inc, ro) = sb.unsupported_features();
    let mut all = inc;
    all.extend(ro);
    let compat = sb.s_feature_compat & !feature::SUPP_COMPAT;
    all.extend(feature::names(feature::Kind::Compat, compat));
    if all.is_empty() {
        Ok(())
    } else {
        Err(FsckError::Unsupported(all.join(", ")))
    }
}

/// Checks (and with -y/-p repairs) the filesystem on `dev`. With -n, `dev`
/// is only read.
pub fn check(dev: &dyn BlockDevice, opts: &FsckOptions) -> Result<Report, FsckError> {
    let overlay = OverlayDevice::new(dev);
    let name = if opts.name.is_empty() {
        "filesystem".to_string()
    } else {
        opts.name.clone()
    };
    let mut problems = Problems::new(opts);
    let found = match opts.superblock {
        Some(at) => super_check::superblock_at(&overlay, at)?,
        None => super_check::find_superblock(&overlay, &name, &mut problems)?,
    };
    check_features(&found.sb)?;
    check_size(&found.sb, dev)?;
    let sb_block = found.backup.unwrap_or(found.sb.s_first_data_block);
    let mut descs = super_check::read_descs(&overlay, &found.sb, sb_block)?;
    let mut sb = found.sb;
    if found.backup.is_some() && opts.mode != Mode::No {
        write_super_and_descs(&overlay, &sb, &descs)?;
    }
    let outcome = journal::replay(&overlay, &sb, &name, &mut problems)?;
    if outcome.replayed || outcome.reset || outcome.recreate || outcome.sb_changed {
        // Replay may have rewritten the superblock and descriptors.
        sb = read_superblock(&overlay).unwrap_or(sb);
        descs = super_check::read_descs(&overlay, &sb, sb.s_first_data_block).unwrap_or(descs);
    }
    if outcome.reset && sb.has_incompat(feature::INCOMPAT_RECOVER) {
        sb.s_feature_incompat &= !feature::INCOMPAT_RECOVER;
        overlay.write_at(&sb.to_bytes(), sbm::SUPERBLOCK_OFFSET)?;
    }
    let mut clean = sb.s_state & sbm::EXT2_VALID_FS != 0 && sb.s_state & sbm::EXT2_ERROR_FS == 0;
    if clean && !opts.force && super_check::counts_impossible(&sb, &descs) {
        // As e2fsck: impossible summary counts make a "clean" filesystem
        // one with errors.
        problems.say(&format!(
            "{name} contains a file system with errors, check forced."
        ));
        clean = false;
    }
    if clean
        && !opts.force
        && !outcome.replayed
        && found.backup.is_none()
        && !problems_pending(&problems)
    {
        if sb.s_last_orphan != 0 && opts.mode != Mode::No {
            return release_orphans_only(&overlay, dev, (opts, &name), sb, descs, problems);
        }
        return Ok(skipped(&sb));
    }
    let mut use_backup_descs = false;
    if !super_check::descs_valid(&sb, &descs) {
        if let Some(backup) = super_check::backup_descs(&overlay, &sb) {
            problems.say("fsck.jbdfs: Group descriptors look bad... trying backup blocks...");
            let msg = "One or more block group descriptor checksums are invalid or point outside their group.\n";
            if problems.ask(msg, "Use the backup group descriptors from group 1") {
                descs = backup;
                use_backup_descs = true;
            }
        }
    }
    let was_valid = sb.s_state & sbm::EXT2_VALID_FS != 0;
    let mut ctx = Ctx::new(&overlay, &name, opts, sb, descs);
    ctx.problems = problems;
    ctx.descs_dirty |= use_backup_descs;
    ctx.sb_dirty |= found.backup.is_some();
    run_passes(&mut ctx, outcome.recreate)?;
    if let Some(what) = ctx.unsupported.take() {
        return Err(FsckError::Unsupported(what));
    }
    // A filesystem left not clean is marked clean once checked.
    ctx.sb_dirty |= !was_valid;
    finish(&mut ctx, overlay.is_dirty())?;
    ctx.problems.bar.clear();
    let mut report = report_of(&ctx);
    report.journal_replayed = outcome.replayed;
    report.halted = ctx.problems.halted;
    report.marked_clean = !was_valid && opts.mode != Mode::No && ctx.problems.unfixed == 0;
    if ctx.problems.halted {
        // As e2fsck -p: leave the repairs to a manual run, and mark the
        // filesystem as having errors so that it is checked.
        drop(ctx);
        overlay.discard();
        if let Ok(mut sb) = read_superblock(dev) {
            sb.s_state |= sbm::EXT2_ERROR_FS;
            dev.write_at(&sb.to_bytes(), sbm::SUPERBLOCK_OFFSET)?;
            dev.flush()?;
        }
    } else if opts.mode != Mode::No {
        report.bytes_written = overlay.commit(dev)?;
    }
    Ok(report)
}

/// A clean filesystem with an orphan list: e2fsck processes the list
/// before it decides that the passes may be skipped.
fn release_orphans_only(
    overlay: &OverlayDevice,
    dev: &dyn BlockDevice,
    (opts, name): (&FsckOptions, &str),
    sb: Superblock,
    descs: Vec<GroupDesc>,
    problems: Problems,
) -> Result<Report, FsckError> {
    let mut ctx = Ctx::new(overlay, name, opts, sb, descs);
    ctx.problems = problems;
    ctx.load_inode_tables()?;
    orphan::release(&mut ctx)?;
    ctx.flush_inodes()?;
    pass5::write_released(&mut ctx)?;
    finish(&mut ctx, true)?;
    let mut report = skipped(&ctx.sb);
    drop(ctx);
    report.bytes_written = overlay.commit(dev)?;
    Ok(report)
}

fn problems_pending(p: &Problems) -> bool {
    p.fixed + p.unfixed > 0
}

fn skipped(sb: &Superblock) -> Report {
    Report {
        inodes_count: u64::from(sb.s_inodes_count),
        blocks_count: u64::from(sb.s_blocks_count),
        inodes_used: u64::from(sb.s_inodes_count.saturating_sub(sb.s_free_inodes_count)),
        blocks_used: u64::from(sb.s_blocks_count.saturating_sub(sb.s_free_blocks_count)),
        skipped_clean: true,
        ..Default::default()
    }
}

/// A device smaller than the filesystem cannot be checked or repaired
/// (e2fsck asks to abort, and with -y does).
fn check_size(sb: &Superblock, dev: &dyn BlockDevice) -> Result<(), FsckError> {
    let bs = u64::from(sb.block_size());
    let physical = dev.size() / bs;
    if u64::from(sb.s_blocks_count) > physical {
        return Err(FsckError::Abort(format!(
            "The filesystem size (according to the superblock) is {} blocks\nThe physical size of the device is {physical} blocks\nEither the superblock or the partition table is likely to be corrupt!",
            sb.s_blocks_count
        )));
    }
    Ok(())
}

fn run_passes(ctx: &mut Ctx, new_journal: bool) -> io::Result<()> {
    super_check::check_uninit_flags(ctx);
    super_check::mark_metadata(ctx);
    ctx.load_inode_tables()?;
    journal::backup_block_map(ctx);
    if ctx.problems.mode() != Mode::No {
        orphan::release(ctx)?;
    }
    badblocks::load(ctx)?;
    let new_resize_inode = resize::check(ctx)?;
    pass1::run(ctx)?;
    if ctx.unsupported.is_some() {
        return Ok(());
    }
    if new_resize_inode {
        resize::recreate(ctx)?;
    }
    badblocks::relocate(ctx)?;
    super_check::relocate_tables(ctx)?;
    pass1b::run(ctx)?;
    pass2::run(ctx)?;
    pass3::run(ctx)?;
    htree::pass3a(ctx)?;
    pass4::run(ctx)?;
    if new_journal {
        journal::recreate(ctx)?;
    }
    ctx.flush_inodes()?;
    pass5::run(ctx)?;
    Ok(())
}

/// Writes the inodes, descriptors and superblock the passes changed.
fn finish(ctx: &mut Ctx, dev_dirty: bool) -> io::Result<()> {
    ctx.flush_inodes()?;
    if ctx.problems.mode() == Mode::No || !(ctx.sb_dirty || ctx.descs_dirty || dev_dirty) {
        return Ok(());
    }
    let sb = &mut ctx.sb;
    sb.s_state |= sbm::EXT2_VALID_FS;
    sb.s_state &= !sbm::EXT2_ERROR_FS;
    sb.s_lastcheck = ctx.now;
    sb.s_mnt_count = 0;
    write_super_and_descs(ctx.dev, &ctx.sb, &ctx.descs)
}

fn write_super_and_descs(
    dev: &dyn BlockDevice,
    sb: &Superblock,
    descs: &[GroupDesc],
) -> io::Result<()> {
    dev.write_at(&sb.to_bytes(), sbm::SUPERBLOCK_OFFSET)?;
    let bs = sb.block_size() as usize;
    let table = table_to_bytes(descs, bs, sb.gdt_blocks() as usize);
    dev.write_at(&table, (u64::from(sb.s_first_data_block) + 1) * bs as u64)
}

fn report_of(ctx: &Ctx) -> Report {
    let sb = &ctx.sb;
    Report {
        problems: ctx.problems.messages.clone(),
        fixed: ctx.problems.fixed,
        unfixed: ctx.problems.unfixed,
        inodes_count: u64::from(sb.s_inodes_count),
        blocks_count: u64::from(sb.s_blocks_count),
        inodes_used: u64::from(sb.s_inodes_count.saturating_sub(sb.s_free_inodes_count)),
        blocks_used: u64::from(sb.s_blocks_count.saturating_sub(sb.s_free_blocks_count)),
        fragmented: ctx.fragmented,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
