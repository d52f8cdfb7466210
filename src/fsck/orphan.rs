//! The orphan list (e2fsck's `release_orphan_inodes`): inodes unlinked or
//! being truncated when the filesystem went down, chained from
//! `s_last_orphan` through `i_dtime`. Only run when the check may write;
//! with -n, e2fsck (and so fsck.jbdfs) leaves the list to pass 1.

use std::collections::HashSet;
use std::io;

use super::context::Ctx;
use super::walk::{walk, Act, Claim};

pub fn release(ctx: &mut Ctx) -> io::Result<()> {
    let mut ino = ctx.sb.s_last_orphan;
    if ino == 0 {
        return Ok(());
    }
    ctx.sb.s_last_orphan = 0;
    ctx.sb_dirty = true;
    if ctx.sb.s_state & crate::format::superblock::EXT2_ERROR_FS != 0 {
        return Ok(());
    }
    let first = ctx.sb.first_ino();
    let mut seen = HashSet::new();
    while ino != 0 {
        if ino < first || ino > ctx.sb.s_inodes_count || !seen.insert(ino) {
            ctx.problems
                .fixed_note(&format!("Illegal inode {ino} in orphaned inode list."));
            return Ok(());
        }
        let mut inode = ctx.inode(ino);
        let next = inode.i_dtime;
        let verb = if inode.i_links_count != 0 {
            "Truncating"
        } else {
            "Clearing"
        };
        ctx.problems.say(&format!(
            "{verb} orphaned inode {ino} (uid={}, gid={}, mode=0{:o}, size={})",
            inode.i_uid, inode.i_gid, inode.i_mode, inode.i_size
        ));
        let before = blocks_of(ctx, &mut inode)?;
        if inode.i_links_count == 0 {
            inode.i_dtime = ctx.now;
            ctx.released_inodes.push(ino);
            if inode.is_dir() {
                let (g, _) = ctx.sb.inode_group(ino);
                let d = &mut ctx.descs[g.0 as usize];
                d.bg_used_dirs_count = d.bg_used_dirs_count.saturating_sub(1);
                ctx.descs_dirty = true;
            }
            ctx.released_blocks.extend(before);
        } else {
            truncate(ctx, &mut inode)?;
            inode.i_dtime = 0;
            let after: std::collections::HashSet<u32> =
                blocks_of(ctx, &mut inode)?.into_iter().collect();
            ctx.released_blocks
                .extend(before.into_iter().filter(|b| !after.contains(b)));
        }
        ctx.write_inode(ino, &inode);
        ino = next;
    }
    Ok(())
}

/// The blocks an inode holds (indirect and attribute blocks included).
fn blocks_of(ctx: &mut Ctx, inode: &mut crate::format::inode::Inode) -> io::Result<Vec<u32>> {
    let mut out = Vec::new();
    if inode.i_file_acl != 0 && inode.i_links_count == 0 && ctx.block_ok(inode.i_file_acl) {
        out.push(inode.i_file_acl);
    }
    if ctx.maps_blocks(inode) {
        walk(ctx, &mut inode.i_block, false, &mut |ctx, blk, _| {
            if ctx.block_ok(blk) {
                out.push(blk);
            }
            Act::Keep
        })?;
    }
    Ok(out)
}

/// Drops the blocks past i_size and recounts i_blocks.
fn truncate(ctx: &mut Ctx, inode: &mut crate::format::inode::Inode) -> io::Result<()> {
    if !ctx.maps_blocks(inode) {
        return Ok(());
    }
    let keep = inode.i_size.div_ceil(u64::from(ctx.bs));
    walk(
        ctx,
        &mut inode.i_block,
        true,
        &mut |ctx, blk, claim| match claim {
            Claim::Data(l) if l >= keep || !ctx.block_ok(blk) => Act::Clear,
            _ => Act::Keep,
        },
    )?;
    let mut count = u64::from(inode.i_file_acl != 0);
    walk(ctx, &mut inode.i_block, false, &mut |_, _, _| {
        count += 1;
        Act::Keep
    })?;
    inode.i_blocks = count * u64::from(ctx.bs / 512);
    Ok(())
}
