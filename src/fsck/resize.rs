//! The resize inode (inode 7), as e2fsck's check_resize_inode and
//! ext2fs_create_resize_inode treat it: with resize_inode, its only block
//! pointer is a double-indirect block whose slots name the primary
//! reserved GDT blocks, each of which lists its backups in the groups that
//! carry superblock copies. Without the feature it must be empty and
//! s_reserved_gdt_blocks zero. An inode that is not what the layout says
//! is cleared before pass 1 and made anew after it.

use std::io;

use crate::format::indirect::{get_ptr, set_ptr, EXT3_DIND_BLOCK};
use crate::format::inode::{ino::EXT2_RESIZE_INO, Inode, S_IFREG};
use crate::format::superblock::feature;
use crate::format::{BlockNo, GroupNo};

use super::context::Ctx;

/// Before pass 1: returns whether the inode must be made anew after it.
pub fn check(ctx: &mut Ctx) -> io::Result<bool> {
    let has_feature = ctx.sb.has_compat(feature::COMPAT_RESIZE_INODE);
    if !has_feature && ctx.sb.s_reserved_gdt_blocks != 0 {
        let msg = format!(
            "Resize_inode not enabled, but s_reserved_gdt_blocks is {}; should be zero.  ",
            ctx.sb.s_reserved_gdt_blocks
        );
        if ctx.problems.ask_safe(&msg, "Fix") {
            ctx.sb.s_reserved_gdt_blocks = 0;
            ctx.sb_dirty = true;
        }
    }
    let inode = ctx.inode(EXT2_RESIZE_INO);
    if !has_feature {
        let msg = "Resize_inode not enabled, but the resize inode is non-zero.  ";
        if inode.i_block.iter().any(|&b| b != 0) && ctx.problems.ask_safe(msg, "Clear") {
            ctx.write_inode(EXT2_RESIZE_INO, &Inode::new(ctx.isz, 0));
        }
        return Ok(false);
    }
    if layout_ok(ctx, &inode)? {
        return Ok(false);
    }
    if !ctx
        .problems
        .ask_safe("Resize inode not valid.  ", "Recreate")
    {
        return Ok(false);
    }
    ctx.write_inode(EXT2_RESIZE_INO, &Inode::new(ctx.isz, 0));
    Ok(true)
}

/// Whether the inode points where the layout says (e2fsck checks the
/// first quarter of the reserved blocks, and so does this).
fn layout_ok(ctx: &Ctx, inode: &Inode) -> io::Result<bool> {
    let dind = inode.i_block[EXT3_DIND_BLOCK];
    let others = inode
        .i_block
        .iter()
        .enumerate()
        .any(|(i, &b)| i != EXT3_DIND_BLOCK && b != 0);
    if others || dind == 0 || inode.i_links_count == 0 || !inode.is_reg() || !ctx.block_ok(dind) {
        return Ok(false);
    }
    let dind_buf = ctx.read_block(dind)?;
    let apb = ctx.bs / 4;
    let backups = backup_groups(ctx);
    for (i, (slot, gdt_blk)) in reserved(ctx).enumerate() {
        if i >= usize::from(ctx.sb.s_reserved_gdt_blocks / 4) {
            break;
        }
        if ptr(&dind_buf, slot % apb) != gdt_blk || !ctx.block_ok(gdt_blk) {
            return Ok(false);
        }
        let list = ctx.read_block(gdt_blk)?;
        for (k, &g) in backups.iter().enumerate() {
            if ptr(&list, k as u32) != gdt_blk + g * ctx.sb.s_blocks_per_group {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// After pass 1 (ext2fs_create_resize_inode on an empty inode).
pub fn recreate(ctx: &mut Ctx) -> io::Result<()> {
    let Some(dind) = ctx.alloc_block(0) else {
        ctx.problems
            .unfixable("Error creating resize inode: no free block");
        return Ok(());
    };
    let bs = ctx.bs as usize;
    let apb = ctx.bs / 4;
    let backups = backup_groups(ctx);
    let mut dind_buf = vec![0u8; bs];
    let mut blocks = 1u64;
    let slots: Vec<(u32, u32)> = reserved(ctx).collect();
    for (slot, gdt_blk) in slots {
        put(&mut dind_buf, slot % apb, gdt_blk)?;
        let mut list = vec![0u8; bs];
        for (k, &g) in backups.iter().enumerate() {
            put(&mut list, k as u32, gdt_blk + g * ctx.sb.s_blocks_per_group)?;
        }
        ctx.write_block(gdt_blk, &list)?;
        blocks += 1 + backups.len() as u64;
    }
    ctx.write_block(dind, &dind_buf)?;
    let extra = if ctx.isz > 128 { 32 } else { 0 };
    let mut inode = Inode::new(ctx.isz, extra);
    let t = crate::format::inode::Timestamp {
        sec: i64::from(ctx.now),
        nsec: 0,
    };
    inode.i_mode = S_IFREG | 0o600;
    inode.i_links_count = 1;
    inode.i_block[EXT3_DIND_BLOCK] = dind;
    inode.i_blocks = blocks * u64::from(ctx.bs / 512);
    inode.i_size = (u64::from(apb) * u64::from(apb) + u64::from(apb) + 12) * u64::from(ctx.bs);
    inode.i_atime = t;
    inode.i_ctime = t;
    inode.i_mtime = t;
    inode.i_crtime = t;
    ctx.write_inode(EXT2_RESIZE_INO, &inode);
    ctx.info[EXT2_RESIZE_INO as usize].used = true;
    Ok(())
}

/// (slot in the double-indirect block, primary reserved GDT block) for
/// each reserved GDT block.
fn reserved(ctx: &Ctx) -> impl Iterator<Item = (u32, u32)> {
    let desc = ctx.sb.gdt_blocks();
    let first = ctx.sb.s_first_data_block + 1 + desc;
    (0..u32::from(ctx.sb.s_reserved_gdt_blocks)).map(move |i| (desc + i, first + i))
}

/// The groups after 0 that hold superblock and descriptor backups, in
/// order.
fn backup_groups(ctx: &Ctx) -> Vec<u32> {
    (1..ctx.groups())
        .filter(|&g| ctx.sb.group_has_super(GroupNo(g)))
        .collect()
}

fn ptr(block: &[u8], slot: u32) -> u32 {
    get_ptr(block, slot).map_or(0, |b| b.0)
}

fn put(block: &mut [u8], slot: u32, b: u32) -> io::Result<()> {
    set_ptr(block, slot, BlockNo(b)).map_err(|e| io::Error::other(e.to_string()))
}
