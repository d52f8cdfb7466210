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
        if inode.i_links_count == 0 {
            // Its blocks are freed by pass 5, which rebuilds the bitmaps
            // from what is still referenced.
            inode.i_dtime = ctx.now;
        } else {
            truncate(ctx, &mut inode)?;
            inode.i_dtime = 0;
        }
        ctx.write_inode(ino, &inode);
        ino = next;
    }
    Ok(())
}

/// Drops the blocks past i_size and recounts i_blocks.
fn truncate(ctx: &mut Ctx, inode: &mut crate::format::inode::Inode) -> io::Result<()> {
    if !super::pass1::has_block_map(inode, ctx.bs) {
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
