//! Pass 0 (e2fsck's super.c): find a usable superblock (the primary, or a
//! backup when the primary is invalid), refuse what cannot be checked, and
//! check where each group's bitmaps and inode table are.

use crate::device::BlockDevice;
use crate::format::group_desc::{parse_table, GroupDesc};
use crate::format::superblock::{self as sbm, raw as sbm_raw, Superblock, SUPERBLOCK_SIZE};
use crate::format::GroupNo;

use super::context::{Ctx, Table};
use super::problem::Problems;
use super::FsckError;

/// A superblock, and where it came from.
pub struct Found {
    pub sb: Superblock,
    /// The block number of the backup used, or `None` for the primary.
    pub backup: Option<u32>,
}

/// The primary superblock, or the first valid backup (group 1) when the
/// primary is invalid, as e2fsck's "trying backup blocks".
pub fn find_superblock(
    dev: &dyn BlockDevice,
    name: &str,
    problems: &mut Problems,
) -> Result<Found, FsckError> {
    let primary = super::read_superblock(dev);
    let err = match primary {
        Ok(sb) => return Ok(Found { sb, backup: None }),
        Err(FsckError::Io(e)) if e.kind() != std::io::ErrorKind::UnexpectedEof => {
            return Err(FsckError::Io(e))
        }
        Err(e) => e,
    };
    let mut raw = vec![0u8; SUPERBLOCK_SIZE];
    if dev.read_at(&mut raw, 1024).is_ok() {
        let unsupported = sbm_raw::unsupported_feature_names(&raw);
        if !unsupported.is_empty() {
            return Err(FsckError::Unsupported(unsupported.join(", ")));
        }
    }
    for (bs, block) in backup_candidates(dev) {
        let mut buf = vec![0u8; SUPERBLOCK_SIZE];
        if dev.read_at(&mut buf, block * bs).is_err() {
            continue;
        }
        let Ok(sb) = Superblock::parse(&buf) else {
            continue;
        };
        if u64::from(sb.block_size()) != bs {
            continue;
        }
        problems.say(&format!(
            "fsck.jbdfs: {err}\nfsck.jbdfs: Superblock invalid, trying backup blocks...."
        ));
        problems.ask(
            &format!(
                "{name}: the primary superblock is invalid; using the backup at block {block}.\n"
            ),
            "Restore the primary superblock and group descriptors from it",
        );
        return Ok(Found {
            sb,
            backup: Some(block as u32),
        });
    }
    Err(err)
}

/// e2fsck's -b: the superblock at block `block` (of `size`, or of the
/// first block size whose superblock there says it has that size).
pub fn superblock_at(
    dev: &dyn BlockDevice,
    (block, size): (u64, Option<u32>),
) -> Result<Found, FsckError> {
    let sizes: Vec<u64> = match size {
        Some(bs) => vec![u64::from(bs)],
        None => (0..=6).map(|log| 1024u64 << log).collect(),
    };
    for bs in sizes {
        let mut buf = vec![0u8; SUPERBLOCK_SIZE];
        let Some(at) = block.checked_mul(bs) else {
            continue;
        };
        if dev.read_at(&mut buf, at).is_err() {
            continue;
        }
        if let Ok(sb) = Superblock::parse(&buf) {
            if u64::from(sb.block_size()) == bs {
                let backup = u32::try_from(block).ok();
                return Ok(Found { sb, backup });
            }
        }
    }
    Err(FsckError::Abort(format!(
        "fsck.jbdfs: Bad magic number in super-block while trying to open the superblock at block {block}"
    )))
}

/// Where group 1's superblock may be: from the primary's own geometry if
/// its fields are readable, else mke2fs's defaults for each block size.
fn backup_candidates(dev: &dyn BlockDevice) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut raw = vec![0u8; SUPERBLOCK_SIZE];
    if dev.read_at(&mut raw, 1024).is_ok() {
        let log = sbm_raw::s_log_block_size(&raw);
        let bpg = u64::from(sbm_raw::s_blocks_per_group(&raw));
        if log <= 6 && bpg > 0 {
            let bs = 1024u64 << log;
            if bpg <= 8 * bs {
                out.push((bs, bpg + u64::from(bs == 1024)));
            }
        }
    }
    for bs in (0..=6).map(|log| 1024u64 << log) {
        let bpg = (bs * 8).min(u64::from(sbm::EXT2_MAX_BLOCKS_PER_GROUP));
        let c = (bs, bpg + u64::from(bs == 1024));
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// The group descriptors that follow the superblock at `sb_block`.
pub fn read_descs(
    dev: &dyn BlockDevice,
    sb: &Superblock,
    sb_block: u32,
) -> Result<Vec<GroupDesc>, FsckError> {
    let bs = u64::from(sb.block_size());
    let start = (u64::from(sb_block) + 1) * bs;
    let len = u64::from(sb.gdt_blocks()) * bs;
    if start + len > dev.size() {
        return Err(FsckError::Io(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the group descriptor table lies past the end of the device",
        )));
    }
    let mut buf = vec![0u8; len as usize];
    dev.read_at(&mut buf, start)?;
    parse_table(&buf, sb.group_count()).map_err(|e| {
        FsckError::Corrupt(crate::format::Corruption::new(
            crate::format::Location::GroupDesc(GroupNo(0)),
            e,
        ))
    })
}

/// Marks the superblock and descriptor copies, the reserved GDT blocks,
/// the bitmaps and the inode tables as in use (e2fsck's
/// `mark_table_blocks`), noting descriptors that point outside their group
/// or at blocks already taken.
pub fn mark_metadata(ctx: &mut Ctx) {
    let gdt = ctx.sb.gdt_blocks() + u32::from(ctx.sb.s_reserved_gdt_blocks);
    for g in 0..ctx.groups() {
        let first = ctx.sb.group_first_block(GroupNo(g)).0;
        if ctx.sb.group_has_super(GroupNo(g)) {
            // Block 0 holds the boot block and, with 1 KiB blocks, is
            // outside the filesystem.
            for b in first..=first + gdt {
                ctx.found.set(u64::from(b));
            }
        }
    }
    if ctx.sb.s_first_data_block == 1 {
        ctx.found.set(0);
    }
    for g in 0..ctx.groups() {
        check_group_tables(ctx, g);
    }
}

fn check_group_tables(ctx: &mut Ctx, g: u32) {
    let d = ctx.descs[g as usize];
    let first = ctx.sb.group_first_block(GroupNo(g)).0;
    let end = first + ctx.sb.blocks_in_group(GroupNo(g));
    let itb = ctx.sb.inode_table_blocks();
    let inside = |b: u32, n: u32| b >= first && b.checked_add(n).is_some_and(|e| e <= end);
    let table_ok = inside(d.bg_inode_table, itb)
        && (d.bg_inode_table..d.bg_inode_table + itb).all(|b| !ctx.found.get(u64::from(b)));
    if table_ok {
        for b in d.bg_inode_table..d.bg_inode_table + itb {
            ctx.found.set(u64::from(b));
        }
    } else {
        let msg = format!(
            "Inode table for group {g} is not in group.  (block {})\nWARNING: SEVERE DATA LOSS POSSIBLE.\n",
            d.bg_inode_table
        );
        ctx.bad_itable.insert(g);
        if ctx.problems.ask(&msg, "Relocate") {
            ctx.relocate.insert((g, Table::InodeTable));
        }
    }
    for (block, what, is_block) in [
        (d.bg_block_bitmap, "Block bitmap", true),
        (d.bg_inode_bitmap, "Inode bitmap", false),
    ] {
        let ok = inside(block, 1) && !ctx.found.get(u64::from(block));
        if ok {
            ctx.found.set(u64::from(block));
            continue;
        }
        let msg = if inside(block, 1) {
            let kind = if is_block { "block" } else { "inode" };
            format!("Group {g}'s {kind} bitmap at {block} conflicts with some other fs block.\n")
        } else {
            format!("{what} for group {g} is not in group.  (block {block})\n")
        };
        if ctx.problems.ask(&msg, "Relocate") {
            let table = if is_block {
                Table::BlockBitmap
            } else {
                Table::InodeBitmap
            };
            ctx.relocate.insert((g, table));
        }
    }
}

/// Gives the groups noted by [`mark_metadata`] new blocks for their
/// bitmaps and inode tables, once pass 1 knows which blocks are free.
pub fn relocate_tables(ctx: &mut Ctx) -> std::io::Result<()> {
    let todo: Vec<(u32, Table)> = ctx.relocate.iter().copied().collect();
    for (g, table) in todo {
        let n = match table {
            Table::InodeTable => ctx.sb.inode_table_blocks(),
            _ => 1,
        };
        let Some(b) = ctx.alloc_run(g, n) else {
            ctx.problems.unfixable(&format!(
                "Could not allocate {n} block(s) for a new {table:?} in group {g}"
            ));
            continue;
        };
        let zero = vec![0u8; ctx.bs as usize];
        for x in b..b + n {
            ctx.write_block(x, &zero)?;
        }
        let d = &mut ctx.descs[g as usize];
        match table {
            Table::BlockBitmap => d.bg_block_bitmap = b,
            Table::InodeBitmap => d.bg_inode_bitmap = b,
            Table::InodeTable => {
                d.bg_inode_table = b;
                ctx.bad_itable.remove(&g);
            }
        }
        ctx.descs_dirty = true;
    }
    ctx.relocate.clear();
    Ok(())
}

/// Whether every descriptor keeps its bitmaps and inode table inside its
/// own group.
pub fn descs_valid(sb: &Superblock, descs: &[GroupDesc]) -> bool {
    let itb = sb.inode_table_blocks();
    descs.iter().enumerate().all(|(g, d)| {
        let first = sb.group_first_block(GroupNo(g as u32)).0;
        let end = first + sb.blocks_in_group(GroupNo(g as u32));
        let inside = |b: u32, n: u32| b >= first && b.checked_add(n).is_some_and(|e| e <= end);
        inside(d.bg_block_bitmap, 1)
            && inside(d.bg_inode_bitmap, 1)
            && inside(d.bg_inode_table, itb)
    })
}

/// Group 1's copy of the descriptor table, when it is itself valid (as
/// e2fsck falls back to when the primary table looks bad).
pub fn backup_descs(dev: &dyn BlockDevice, sb: &Superblock) -> Option<Vec<GroupDesc>> {
    if sb.group_count() < 2 || !sb.group_has_super(GroupNo(1)) {
        return None;
    }
    let at = sb.group_first_block(GroupNo(1)).0;
    let descs = read_descs(dev, sb, at).ok()?;
    descs_valid(sb, &descs).then_some(descs)
}

/// e2fsck's PR_0_GDT_UNINIT: the uninit flags and `bg_itable_unused` mean
/// something only with uninit_bg (or metadata_csum), which ext3 lacks; left
/// set, a kernel with the feature's code would skip live inodes.
pub fn check_uninit_flags(ctx: &mut Ctx) {
    use crate::format::group_desc::{EXT2_BG_BLOCK_UNINIT, EXT2_BG_INODE_UNINIT};
    let uninit = EXT2_BG_BLOCK_UNINIT | EXT2_BG_INODE_UNINIT;
    for g in 0..ctx.descs.len() {
        let d = &ctx.descs[g];
        if d.bg_flags & uninit == 0 && d.bg_itable_unused == 0 {
            continue;
        }
        let msg = format!("Group descriptor {g} marked uninitialized without feature set.\n");
        if ctx.problems.ask_safe(&msg, "Fix") {
            let d = &mut ctx.descs[g];
            d.bg_flags &= !uninit;
            d.bg_itable_unused = 0;
            ctx.descs_dirty = true;
        }
    }
}

/// Group summary counts no group could have: e2fsck's check_super_block
/// then marks the filesystem invalid, so that even a "clean" one is
/// checked.
pub fn counts_impossible(sb: &Superblock, descs: &[GroupDesc]) -> bool {
    let bpg = sb.s_blocks_per_group;
    let ipg = sb.s_inodes_per_group;
    descs.iter().any(|d| {
        u32::from(d.bg_free_blocks_count) > bpg
            || u32::from(d.bg_free_inodes_count) > ipg
            || u32::from(d.bg_used_dirs_count) > ipg
    })
}
