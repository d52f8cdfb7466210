//! Passes 1B-1D (e2fsck's pass1b.c): when pass 1 saw blocks claimed twice,
//! find every inode that claims them, and clone the shared blocks so each
//! file gets its own copy (the last claimant keeps the original; blocks
//! shared with filesystem metadata are always copied away from it).

use std::collections::{BTreeMap, HashMap};
use std::io;

use crate::format::inode::{flags, ino::EXT2_BAD_INO};
use crate::format::GroupNo;

use super::context::Ctx;
use super::walk::{walk, Act, Claim};

pub fn run(ctx: &mut Ctx) -> io::Result<()> {
    if ctx.dups.is_empty() {
        return Ok(());
    }
    ctx.problems
        .say("\nRunning additional passes to resolve blocks claimed by more than one inode...\nPass 1B: Rescanning for multiply-claimed blocks");
    let (claims, owners) = find_claimants(ctx)?;
    ctx.problems.say("Pass 1C: Scanning directories for inodes with multiply-claimed blocks\nPass 1D: Reconciling multiply-claimed blocks");
    let mut left: HashMap<u32, u32> = claims.clone();
    for (ino, blocks) in &owners {
        if *ino == EXT2_BAD_INO {
            // The list keeps its blocks; the files sharing them are cloned.
            continue;
        }
        let others: Vec<u32> = owners
            .iter()
            .filter(|(o, b)| *o != ino && b.iter().any(|x| blocks.contains(x)))
            .map(|(o, _)| *o)
            .collect();
        let meta = blocks.iter().any(|&b| is_metadata(ctx, b));
        let mut msg = format!(
            "File inode #{ino} has {} multiply-claimed block(s), shared with {} file(s):\n",
            blocks.len(),
            others.len() + usize::from(meta)
        );
        if meta {
            msg.push_str("\t<filesystem metadata>\n");
        }
        for o in &others {
            if *o == EXT2_BAD_INO {
                msg.push_str("\t<The bad blocks inode> (inode #1)\n");
            } else {
                msg.push_str(&format!("\tinode #{o}\n"));
            }
        }
        if ctx.problems.ask(&msg, "Clone multiply-claimed blocks") {
            clone_file(ctx, *ino, &mut left)?;
        }
    }
    ctx.dups.clear();
    Ok(())
}

/// Claims on each shared block (metadata counting as one), and the shared
/// blocks of each inode.
type Claims = (HashMap<u32, u32>, BTreeMap<u32, Vec<u32>>);

fn find_claimants(ctx: &mut Ctx) -> io::Result<Claims> {
    let mut claims: HashMap<u32, u32> = HashMap::new();
    for &b in &ctx.dups {
        let base = u32::from(is_metadata(ctx, b));
        claims.insert(b, base);
    }
    let mut owners: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for ino in 1..=ctx.sb.s_inodes_count {
        if !ctx.info[ino as usize].used {
            continue;
        }
        let mut inode = ctx.inode(ino);
        let acl = inode.i_file_acl;
        if acl != 0 && ctx.dups.contains(&acl) {
            // The attribute block counts once however many inodes share it.
            let c = claims.entry(acl).or_default();
            if ctx
                .ea_refs
                .get(&acl)
                .is_some_and(|_| *c == u32::from(is_metadata(ctx, acl)))
            {
                *c += 1;
            }
        }
        // The bad-block list claims its blocks too (a zeroed inode 1, or
        // one in extent format that pass 1 left, has nothing to walk).
        let bad_list = ino == EXT2_BAD_INO
            && inode.i_flags & (flags::EXT4_EXTENTS_FL | flags::EXT4_INLINE_DATA_FL) == 0;
        if !bad_list
            && (!ctx.maps_blocks(&inode) || ino == crate::format::inode::ino::EXT2_RESIZE_INO)
        {
            continue;
        }
        let mut mine = Vec::new();
        walk(ctx, &mut inode.i_block, false, &mut |ctx, blk, _| {
            if ctx.dups.contains(&blk) {
                mine.push(blk);
            }
            Act::Keep
        })?;
        for &b in &mine {
            *claims.entry(b).or_default() += 1;
        }
        if !mine.is_empty() {
            mine.sort_unstable();
            mine.dedup();
            owners.insert(ino, mine);
        }
    }
    Ok((claims, owners))
}

/// Copies every still-shared block of `ino` to a new block.
fn clone_file(ctx: &mut Ctx, ino: u32, left: &mut HashMap<u32, u32>) -> io::Result<()> {
    let mut inode = ctx.inode(ino);
    let mut moves = Vec::new();
    let mut failed = false;
    let mut err = None;
    walk(ctx, &mut inode.i_block, false, &mut |ctx, blk, claim| {
        let Some(n) = left.get_mut(&blk) else {
            return Act::Keep;
        };
        if *n <= 1 {
            return Act::Keep;
        }
        let (g, _) = ctx.sb.block_group(crate::format::BlockNo(blk));
        let Some(new) = ctx.alloc_block(g.0) else {
            failed = true;
            return Act::Keep;
        };
        *n -= 1;
        if let Claim::Data(l) = claim {
            match ctx.read_block(blk).and_then(|d| ctx.write_block(new, &d)) {
                Ok(()) => moves.push((l, new)),
                Err(e) => {
                    err = Some(e);
                    return Act::Keep;
                }
            }
        }
        Act::Move(new)
    })?;
    if let Some(e) = err {
        return Err(e);
    }
    if failed {
        ctx.problems
            .unfixable(&format!("Couldn't clone file inode #{ino}: no free blocks"));
    }
    for (l, new) in moves {
        for d in ctx.dir_blocks.iter_mut() {
            if d.ino == ino && u64::from(d.lblk) == l {
                d.blk = new;
            }
        }
    }
    ctx.write_inode(ino, &inode);
    Ok(())
}

/// Whether `b` is a superblock or descriptor copy, a reserved GDT block,
/// a bitmap or part of an inode table.
pub fn is_metadata(ctx: &Ctx, b: u32) -> bool {
    let (g, _) = ctx.sb.block_group(crate::format::BlockNo(b));
    let first = ctx.sb.group_first_block(g).0;
    let gdt = ctx.sb.gdt_blocks() + u32::from(ctx.sb.s_reserved_gdt_blocks);
    if ctx.sb.group_has_super(GroupNo(g.0)) && b >= first && b <= first + gdt {
        return true;
    }
    let itb = ctx.sb.inode_table_blocks();
    ctx.descs.iter().any(|d| {
        b == d.bg_block_bitmap
            || b == d.bg_inode_bitmap
            || (b >= d.bg_inode_table && b < d.bg_inode_table.saturating_add(itb))
    })
}
