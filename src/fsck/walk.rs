//! The block-map walker (e2fsprogs' `ext2fs_block_iterate`): visits every
//! nonzero pointer of an inode's block tree, indirect blocks before their
//! children, and lets the visitor keep, clear or move each pointer. Changed
//! indirect blocks are written back (to their new home when moved).

use std::io;

use crate::format::indirect::{self, EXT3_IND_BLOCK, EXT3_NDIR_BLOCKS};
use crate::format::BlockNo;

use super::context::Ctx;

/// What a pointer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// A data block, by its logical block number in the file.
    Data(u64),
    /// An indirect block of this depth (1 single, 2 double, 3 triple).
    Ind(u8),
}

/// What the visitor wants done with a pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    Keep,
    Clear,
    /// Point at this block instead (its contents already copied, for data).
    Move(u32),
}

pub type Visitor<'v, 'a> = dyn FnMut(&mut Ctx<'a>, u32, Claim) -> Act + 'v;

/// Walks `i_block`. With `prune`, indirect blocks left with no pointers are
/// cleared too. Returns whether any pointer changed.
pub fn walk<'a>(
    ctx: &mut Ctx<'a>,
    i_block: &mut [u32; 15],
    prune: bool,
    visit: &mut Visitor<'_, 'a>,
) -> io::Result<bool> {
    let mut changed = false;
    for (i, ptr) in i_block.iter_mut().take(EXT3_NDIR_BLOCKS).enumerate() {
        if *ptr != 0 {
            changed |= apply(ptr, visit(ctx, *ptr, Claim::Data(i as u64)));
        }
    }
    let per = u64::from(ctx.bs / 4);
    let mut base = EXT3_NDIR_BLOCKS as u64;
    for level in 1..=3u8 {
        let slot = &mut i_block[EXT3_IND_BLOCK + level as usize - 1];
        if *slot != 0 {
            changed |= tree(ctx, slot, level, base, prune, visit)?;
        }
        base += per.pow(u32::from(level));
    }
    Ok(changed)
}

fn apply(ptr: &mut u32, act: Act) -> bool {
    match act {
        Act::Keep => false,
        Act::Clear => {
            *ptr = 0;
            true
        }
        Act::Move(b) => {
            *ptr = b;
            true
        }
    }
}

fn tree<'a>(
    ctx: &mut Ctx<'a>,
    ptr: &mut u32,
    level: u8,
    base: u64,
    prune: bool,
    visit: &mut Visitor<'_, 'a>,
) -> io::Result<bool> {
    let blk = *ptr;
    let act = visit(ctx, blk, Claim::Ind(level));
    if act == Act::Clear {
        *ptr = 0;
        return Ok(true);
    }
    if !ctx.block_ok(blk) {
        return Ok(false);
    }
    let mut buf = ctx.read_block(blk)?;
    let per = ctx.bs as usize / 4;
    let span = (per as u64).pow(u32::from(level) - 1);
    let mut modified = false;
    for j in 0..per {
        let mut child = indirect::get_ptr(&buf, j as u32)
            .map_err(io::Error::other)?
            .0;
        if child == 0 {
            continue;
        }
        let lblk = base + j as u64 * span;
        let child_changed = if level == 1 {
            let act = visit(ctx, child, Claim::Data(lblk));
            apply(&mut child, act)
        } else {
            tree(ctx, &mut child, level - 1, lblk, prune, visit)?
        };
        if child_changed {
            indirect::set_ptr(&mut buf, j as u32, BlockNo(child)).map_err(io::Error::other)?;
            modified = true;
        }
    }
    if prune && modified && buf.iter().all(|&b| b == 0) {
        *ptr = 0;
        return Ok(true);
    }
    let target = match act {
        Act::Move(b) => b,
        _ => blk,
    };
    if modified || target != blk {
        ctx.write_block(target, &buf)?;
    }
    *ptr = target;
    Ok(modified || target != blk)
}
