//! The bad-blocks inode (inode 1, e2fsck's `EXT2_BAD_INO`): the list of
//! blocks known to be unreadable, and what e2fsck does with it. Before
//! pass 1 the list is read as libext2fs's `ext2fs_read_bb_inode` does;
//! pass 1 checks the inode and every entry (e2fsck's `process_bad_block`):
//! illegal entries, the primary superblock or descriptors on the list,
//! bitmaps on it (given new blocks at the end of pass 1, as
//! `handle_fs_bad_blocks`). Inodes whose inode-table block is on the list
//! are treated as in use but unreadable (e2fsck's `inode_bb_map`): pass 2
//! clears the entries naming them, pass 4 skips them. A file that shares a
//! block with the list goes through passes 1B-1D like any shared block,
//! the list keeping the original.

use std::collections::BTreeSet;
use std::io;

use crate::format::inode::{flags, ino::EXT2_BAD_INO, Inode};
use crate::format::GroupNo;

use super::context::{Ctx, Table};
use super::walk::{walk, Act, Claim};

/// What the bad-block list holds, and what pass 1 made of it.
#[derive(Clone, Debug, Default)]
pub struct BadBlocks {
    /// The legal entries of the list as read before pass 1 (e2fsck's
    /// `fs->badblocks`): which inode-table blocks cannot be read.
    list: BTreeSet<u32>,
    /// Inodes whose inode-table block is on the list.
    inodes: BTreeSet<u32>,
    /// Bitmaps found on the list, to be given new blocks after pass 1.
    relocate: BTreeSet<(u32, Table)>,
}

/// Whether inode `ino` lies in a block of the bad-block list (pass 1 has
/// marked it in use and read it as zero).
pub fn inode_is_bad(ctx: &Ctx, ino: u32) -> bool {
    ctx.bad_blocks.inodes.contains(&ino)
}

/// Pass 1, before anything else is done with inode `ino`: deals with an
/// inode whose table block is on the list. Returns whether pass 1 must
/// skip the inode.
pub fn skip_inode(ctx: &mut Ctx, ino: u32) -> bool {
    if !in_bad_block(ctx, ino) {
        return false;
    }
    if ino == EXT2_BAD_INO {
        let msg = "Bad block list says the bad block list inode is bad.  ";
        if ctx.problems.ask(msg, "Clear inode") {
            ctx.write_inode(EXT2_BAD_INO, &Inode::new(ctx.isz, 0));
            ctx.bad_blocks.list.clear();
            ctx.info[EXT2_BAD_INO as usize].used = true;
            // e2fsck starts over with the empty list; nothing else has
            // been looked at yet, so going on is the same.
            ctx.problems.say("Restarting e2fsck from the beginning...");
            ctx.problems
                .say("Pass 1: Checking inodes, blocks, and sizes");
            return true;
        }
    }
    // As libext2fs's inode scan: the inode reads as zero, and is in use.
    let (g, idx) = ctx.sb.inode_group(ino);
    let off = idx as usize * ctx.isz;
    if let Some(slot) = ctx
        .itable
        .get_mut(g.0 as usize)
        .and_then(|t| t.get_mut(off..off + ctx.isz))
    {
        slot.fill(0);
    }
    let info = &mut ctx.info[ino as usize];
    info.used = true;
    info.mode = 0;
    info.links = 0;
    ctx.bad_blocks.inodes.insert(ino);
    true
}

/// Whether the inode-table block holding `ino` is on the list.
fn in_bad_block(ctx: &Ctx, ino: u32) -> bool {
    if ctx.bad_blocks.list.is_empty() {
        return false;
    }
    let (g, idx) = ctx.sb.inode_group(ino);
    if ctx.bad_itable.contains(&g.0) {
        return false;
    }
    let Some(d) = ctx.descs.get(g.0 as usize) else {
        return false;
    };
    let byte = u64::from(idx) * ctx.isz as u64;
    let blk = u64::from(d.bg_inode_table) + byte / u64::from(ctx.bs);
    u32::try_from(blk).is_ok_and(|b| ctx.bad_blocks.list.contains(&b))
}

/// Before pass 1, reads the list as `ext2fs_read_bb_inode`: the data
/// blocks of inode 1 inside the filesystem; an illegal indirect block is
/// reported and the rest read anyway.
pub fn load(ctx: &mut Ctx) -> io::Result<()> {
    ctx.bad_blocks = BadBlocks::default();
    let mut inode = ctx.inode(EXT2_BAD_INO);
    if inode.i_flags & (flags::EXT4_EXTENTS_FL | flags::EXT4_INLINE_DATA_FL) != 0 {
        return Ok(());
    }
    let mut list = BTreeSet::new();
    let mut illegal = None;
    walk(ctx, &mut inode.i_block, false, &mut |ctx, blk, claim| {
        match claim {
            Claim::Data(_) if ctx.block_ok(blk) => {
                list.insert(blk);
            }
            Claim::Ind(level) if !ctx.block_ok(blk) => illegal = Some(level),
            _ => {}
        }
        Act::Keep
    })?;
    ctx.bad_blocks.list = list;
    if let Some(level) = illegal {
        let what = match level {
            1 => "indirect",
            2 => "doubly indirect",
            _ => "triply indirect",
        };
        let msg =
            format!("fsck.jbdfs: Illegal {what} block found while reading bad blocks inode\n");
        if ctx.problems.mode() == super::Mode::Preen {
            ctx.problems.ask(&msg, "");
        } else {
            ctx.problems.say(&format!(
                "{msg}This doesn't bode well, but we'll try to go on..."
            ));
        }
    }
    Ok(())
}

/// What walking the list found, for the questions that follow it.
#[derive(Default)]
struct Scan {
    /// The answer to "Bad block inode has illegal block(s)", once asked
    /// (e2fsck's latch: one question for all such problems).
    latch: Option<bool>,
    /// Blocks the list itself claimed (the found map held only metadata
    /// before inode 1).
    claimed: BTreeSet<u32>,
    /// Inode 1's own indirect blocks.
    ind: [u32; 3],
    /// Its indirect blocks conflict with something (e2fsck's `bbcheck`).
    suspect: bool,
}

impl Scan {
    /// A problem under the latch: the question is asked once, then each
    /// message is followed by the answer.
    fn latched(&mut self, ctx: &mut Ctx, msg: &str) -> bool {
        let yes = match self.latch {
            Some(yes) => yes,
            None => {
                let yes = ctx
                    .problems
                    .ask("Bad block inode has illegal block(s).  ", "Clear");
                self.latch = Some(yes);
                yes
            }
        };
        ctx.problems.messages.push(msg.trim_end().to_string());
        if !ctx.problems.halted {
            let answer = if yes { "CLEARED." } else { "IGNORED." };
            ctx.problems.say(&format!("{msg}{answer}"));
        }
        yes
    }
}

/// Pass 1 for inode 1 (in place of the checks other reserved inodes get):
/// the inode must look like a bad-block inode, and each entry of its list
/// is checked and claimed.
pub fn check_bad_inode(ctx: &mut Ctx) -> io::Result<()> {
    ctx.info[EXT2_BAD_INO as usize].used = true;
    let mut inode = ctx.inode(EXT2_BAD_INO);
    // The flags pass 1 checks on every inode in use, in its order.
    const CASEFOLD_FL: u32 = 0x4000_0000;
    for (flag, msg) in [
        (
            CASEFOLD_FL,
            "Inode 1 has the casefold flag set but is not a directory.  ",
        ),
        (
            flags::EXT4_EA_INODE_FL,
            "Inode 1 has the ea_inode flag set but is not a regular file.  ",
        ),
    ] {
        if inode.i_flags & flag != 0 && ctx.problems.ask(msg, "Clear flag") {
            inode.i_flags &= !flag;
            ctx.write_inode(EXT2_BAD_INO, &inode);
        }
    }
    if inode.i_flags & flags::EXT4_EXTENTS_FL != 0 {
        // e2fsck offers to set the extents feature when the header is
        // valid; jbdfs has no extents, so only clearing is left.
        let msg = "Inode 1 has EXTENTS_FL flag set on filesystem without extents support.\n";
        if ctx.problems.ask(msg, "Clear") {
            clear(ctx);
        }
        return Ok(());
    }
    let raw = ctx.raw_inode(EXT2_BAD_INO);
    let low16 = |at: usize| u16::from_le_bytes([raw[at], raw[at + 1]]);
    // e2fsck looks at the fields of the 128-byte inode: i_uid and i_gid
    // without their high halves, i_file_acl without its.
    let invalid = inode.i_mode != 0
        || low16(2) != 0
        || low16(24) != 0
        || inode.i_links_count != 0
        || inode.i_flags & flags::EXT4_INLINE_DATA_FL != 0
        || inode.i_file_acl != 0;
    if invalid {
        if ctx
            .problems
            .ask("The bad block inode looks invalid.  ", "Clear")
        {
            clear(ctx);
            return Ok(());
        }
        if inode.i_flags & flags::EXT4_INLINE_DATA_FL != 0 {
            return Ok(());
        }
    }
    let mut scan = Scan {
        ind: [inode.i_block[12], inode.i_block[13], inode.i_block[14]],
        ..Default::default()
    };
    let mut err = None;
    let changed = walk(
        ctx,
        &mut inode.i_block,
        false,
        &mut |ctx, blk, claim| match entry(ctx, &mut scan, blk, claim) {
            Ok(act) => act,
            Err(e) => {
                err = Some(e);
                Act::Keep
            }
        },
    )?;
    if let Some(e) = err {
        return Err(e);
    }
    if changed {
        ctx.write_inode(EXT2_BAD_INO, &inode);
    }
    if scan.suspect {
        let msg = "\nThe bad block inode has probably been corrupted.  You probably\nshould stop now and run e2fsck -c to scan for bad blocks\nin the filesystem.\n";
        if !ctx.problems.ask(msg, "Continue") {
            return Err(io::Error::other("fsck.jbdfs: aborted"));
        }
    }
    Ok(())
}

/// Empties inode 1 and so the list (e2fsck zeroes the inode).
fn clear(ctx: &mut Ctx) {
    ctx.write_inode(EXT2_BAD_INO, &Inode::new(ctx.isz, 0));
    ctx.bad_blocks.list.clear();
}

/// One pointer of inode 1 (e2fsck's `process_bad_block`).
fn entry(ctx: &mut Ctx, scan: &mut Scan, blk: u32, claim: Claim) -> io::Result<Act> {
    if !ctx.block_ok(blk) {
        let which = match claim {
            Claim::Data(l) => format!("block #{l}"),
            Claim::Ind(1) => "indirect block".to_string(),
            Claim::Ind(2) => "double indirect block".to_string(),
            Claim::Ind(_) => "triple indirect block".to_string(),
        };
        let msg = format!("Illegal {which} ({blk}) in bad block inode.  ");
        return Ok(clear_if(scan.latched(ctx, &msg)));
    }
    let found = ctx.found.get(u64::from(blk));
    if let Claim::Ind(_) = claim {
        if found && !scan.claimed.contains(&blk) {
            scan.suspect = true;
            let msg = format!(
                "Bad block inode has an indirect block ({blk}) that conflicts with\nfilesystem metadata.  "
            );
            return Ok(clear_if(scan.latched(ctx, &msg)));
        }
        if found {
            scan.suspect = true;
            let msg = format!("Bad block {blk} used as bad block inode indirect block.  ");
            return Ok(clear_if(scan.latched(ctx, &msg)));
        }
        claim_block(ctx, scan, blk);
        return Ok(Act::Keep);
    }
    if !found {
        claim_block(ctx, scan, blk);
        return Ok(Act::Keep);
    }
    metadata_on_list(ctx, scan, blk)
}

fn clear_if(yes: bool) -> Act {
    if yes {
        Act::Clear
    } else {
        Act::Keep
    }
}

fn claim_block(ctx: &mut Ctx, scan: &mut Scan, blk: u32) {
    ctx.found.set(u64::from(blk));
    scan.claimed.insert(blk);
}

/// A block of the list that is already in use: find the metadata it is.
fn metadata_on_list(ctx: &mut Ctx, scan: &mut Scan, blk: u32) -> io::Result<Act> {
    let gdt = ctx.sb.gdt_blocks();
    let itb = ctx.sb.inode_table_blocks();
    const TAIL: &str = "\nIf the block is really bad, the filesystem can not be fixed.\nYou can remove this block from the bad block list and hope\nthat the block is really OK.  But there are no guarantees.\n\n";
    for g in 0..ctx.groups() {
        let first = ctx.sb.group_first_block(GroupNo(g)).0;
        if ctx.sb.group_has_super(GroupNo(g)) {
            let what = if blk == first {
                Some(("superblock", "superblock"))
            } else if blk > first && blk - first <= gdt {
                Some((
                    "group descriptors",
                    "copy of the group descriptors has a bad block",
                ))
            } else {
                None
            };
            if let Some((primary, backup)) = what {
                if g != 0 {
                    let msg = if blk == first {
                        format!("Warning: Group {g}'s {backup} ({blk}) is bad.")
                    } else {
                        format!("Warning: Group {g}'s {backup} ({blk}).")
                    };
                    if ctx.problems.mode() != super::Mode::Preen {
                        ctx.problems.say(&msg);
                    }
                    return Ok(Act::Keep);
                }
                let msg = if blk == first {
                    format!("The primary {primary} ({blk}) is on the bad block list.\n{TAIL}")
                } else {
                    format!("Block {blk} in the primary {primary} is on the bad block list\n{TAIL}")
                };
                return Ok(clear_if(ctx.problems.ask(&msg, "Clear")));
            }
        }
        let d = ctx.descs[g as usize];
        for (at, table, noun) in [
            (d.bg_block_bitmap, Table::BlockBitmap, "block"),
            (d.bg_inode_bitmap, Table::InodeBitmap, "inode"),
        ] {
            if blk == at {
                let msg = format!("Group {g}'s {noun} bitmap ({blk}) is bad.  ");
                if ctx.problems.ask(&msg, "Relocate") && !ctx.relocate.contains(&(g, table)) {
                    ctx.bad_blocks.relocate.insert((g, table));
                }
                return Ok(Act::Keep);
            }
        }
        if blk >= d.bg_inode_table && blk - d.bg_inode_table < itb {
            // Inodes in it are read as zero by the inode scan.
            return Ok(Act::Keep);
        }
    }
    if scan.ind.contains(&blk) {
        scan.suspect = true;
        let msg = format!("Bad block {blk} used as bad block inode indirect block.  ");
        return Ok(clear_if(scan.latched(ctx, &msg)));
    }
    let msg =
        format!("Programming error?  block #{blk} claimed for no reason in process_bad_block.");
    ctx.problems.messages.push(msg.clone());
    ctx.problems.say(&msg);
    Ok(Act::Keep)
}

/// After pass 1 (e2fsck's `handle_fs_bad_blocks`): each bitmap found on
/// the list moves to the first free block of its group, its contents
/// copied; the old block stays on the list, and in use.
pub fn relocate(ctx: &mut Ctx) -> io::Result<()> {
    let todo = std::mem::take(&mut ctx.bad_blocks.relocate);
    for (g, table) in todo {
        let d = ctx.descs[g as usize];
        let (old, name) = match table {
            Table::BlockBitmap => (d.bg_block_bitmap, "block bitmap"),
            Table::InodeBitmap => (d.bg_inode_bitmap, "inode bitmap"),
            Table::InodeTable => continue,
        };
        let first = ctx.sb.group_first_block(GroupNo(g)).0;
        let end = first.saturating_add(ctx.sb.blocks_in_group(GroupNo(g)));
        let Some(new) = (first..end).find(|&b| !ctx.found.get(u64::from(b))) else {
            let msg = format!("Error allocating 1 contiguous block(s) in block group {g} for {name}: Could not allocate block in ext2 filesystem");
            ctx.problems.unfixable(&msg);
            return Err(io::Error::other("fsck.jbdfs: aborted"));
        };
        ctx.problems.say(&format!(
            "Relocating group {g}'s {name} from {old} to {new}..."
        ));
        ctx.found.set(u64::from(new));
        let data = if ctx.block_ok(old) {
            ctx.read_block(old)?
        } else {
            vec![0u8; ctx.bs as usize]
        };
        ctx.write_block(new, &data)?;
        let d = &mut ctx.descs[g as usize];
        match table {
            Table::BlockBitmap => d.bg_block_bitmap = new,
            _ => d.bg_inode_bitmap = new,
        }
        ctx.descs_dirty = true;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{check, exit, read_superblock, super_check, FsckOptions, Mode, Report};
    use crate::device::{BlockDevice, MemoryDevice};
    use crate::format::group_desc::GroupDesc;
    use crate::format::inode::{ino::EXT2_ROOT_INO, Inode};
    use crate::mkfs::{format, plan, MkfsOptions, Zeroed};
    use crate::util::Progress;

    fn image() -> MemoryDevice {
        let o = MkfsOptions::default();
        let dev = MemoryDevice::new(32 << 20).unwrap();
        let g = plan(&o, 32 << 20).unwrap();
        format(&dev, &o, &g, Zeroed::All, &mut Progress::quiet()).unwrap();
        dev
    }

    fn run(dev: &MemoryDevice, mode: Mode) -> Report {
        let opts = FsckOptions {
            mode,
            force: true,
            ..Default::default()
        };
        check(dev, &opts).unwrap()
    }

    fn descs(dev: &MemoryDevice) -> Vec<GroupDesc> {
        let sb = read_superblock(dev).unwrap();
        super_check::read_descs(dev, &sb, sb.s_first_data_block).unwrap()
    }

    /// Byte offset of inode `ino`, and the inode size.
    fn inode_at(dev: &MemoryDevice, ino: u32) -> (u64, usize) {
        let sb = read_superblock(dev).unwrap();
        let (g, idx) = sb.inode_group(ino);
        let table = descs(dev)[g.0 as usize].bg_inode_table;
        let at = u64::from(table) * u64::from(sb.block_size())
            + u64::from(idx) * u64::from(sb.inode_size());
        (at, usize::from(sb.inode_size()))
    }

    fn read_inode(dev: &MemoryDevice, ino: u32) -> Inode {
        let (at, len) = inode_at(dev, ino);
        let mut buf = vec![0u8; len];
        dev.read_at(&mut buf, at).unwrap();
        Inode::parse(&buf).unwrap()
    }

    fn write_inode(dev: &MemoryDevice, ino: u32, inode: &Inode) {
        let (at, _) = inode_at(dev, ino);
        dev.write_at(&inode.to_bytes(), at).unwrap();
    }

    /// Makes `blocks` the bad-block list (direct blocks only).
    fn set_list(dev: &MemoryDevice, blocks: &[u32]) {
        let bs = read_superblock(dev).unwrap().block_size();
        let mut inode = read_inode(dev, 1);
        inode.i_block[..blocks.len()].copy_from_slice(blocks);
        inode.i_blocks = blocks.len() as u64 * u64::from(bs / 512);
        write_inode(dev, 1, &inode);
    }

    /// -n finds the damage and writes nothing; -y repairs it; then -n and
    /// -y find nothing.
    fn repair(dev: &MemoryDevice) -> Report {
        let before = dev.snapshot();
        let r = run(dev, Mode::No);
        assert_eq!(r.exit_code(), exit::UNCORRECTED, "{:?}", r.problems);
        assert!(before == dev.snapshot(), "-n changed the image");
        let fixed = run(dev, Mode::Yes);
        assert_eq!(fixed.exit_code(), exit::NONDESTRUCT, "{:?}", fixed.problems);
        let r = run(dev, Mode::No);
        assert_eq!(r.exit_code(), 0, "{:?}", r.problems);
        let r = run(dev, Mode::Yes);
        assert_eq!(r.exit_code(), 0, "{:?}", r.problems);
        fixed
    }

    fn said(r: &Report, text: &str) -> bool {
        r.problems.iter().any(|p| p.contains(text))
    }

    #[test]
    fn a_clean_list_is_no_problem() {
        let dev = image();
        let sb = read_superblock(&dev).unwrap();
        let free = sb.s_blocks_count - 10;
        set_list(&dev, &[free]);
        // The block is marked in use in the bitmap as the list claims it.
        let r = run(&dev, Mode::Yes);
        assert!(r.exit_code() <= exit::NONDESTRUCT, "{:?}", r.problems);
        let r = run(&dev, Mode::No);
        assert_eq!(r.exit_code(), 0, "{:?}", r.problems);
        assert_eq!(read_inode(&dev, 1).i_block[0], free, "the list is kept");
    }

    #[test]
    fn a_file_block_on_the_list_is_cloned() {
        let dev = image();
        let root = read_inode(&dev, EXT2_ROOT_INO);
        let old = root.i_block[0];
        let bs = read_superblock(&dev).unwrap().block_size() as usize;
        let mut contents = vec![0u8; bs];
        dev.read_at(&mut contents, old as u64 * bs as u64).unwrap();
        set_list(&dev, &[old]);
        let r = repair(&dev);
        assert!(
            said(&r, "shared with 1 file(s):\n\t<The bad blocks inode>"),
            "{:?}",
            r.problems
        );
        let new = read_inode(&dev, EXT2_ROOT_INO).i_block[0];
        assert_ne!(new, old, "the root directory got its own copy");
        let mut copy = vec![0u8; bs];
        dev.read_at(&mut copy, new as u64 * bs as u64).unwrap();
        assert!(copy == contents);
        assert_eq!(read_inode(&dev, 1).i_block[0], old, "the list keeps it");
    }

    #[test]
    fn bitmaps_on_the_list_are_relocated() {
        let dev = image();
        let d = descs(&dev)[0];
        set_list(&dev, &[d.bg_block_bitmap, d.bg_inode_bitmap]);
        let r = repair(&dev);
        for (noun, at) in [("block", d.bg_block_bitmap), ("inode", d.bg_inode_bitmap)] {
            let msg = format!("Group 0's {noun} bitmap ({at}) is bad.");
            assert!(said(&r, &msg), "{:?}", r.problems);
        }
        let now = descs(&dev)[0];
        assert_ne!(now.bg_block_bitmap, d.bg_block_bitmap);
        assert_ne!(now.bg_inode_bitmap, d.bg_inode_bitmap);
        let list = read_inode(&dev, 1).i_block;
        assert_eq!(list[..2], [d.bg_block_bitmap, d.bg_inode_bitmap]);
    }

    #[test]
    fn inodes_in_a_bad_table_block_are_unlinked() {
        let dev = image();
        let sb = read_superblock(&dev).unwrap();
        let lost_found = sb.first_ino();
        let (at, _) = inode_at(&dev, lost_found);
        let blk = (at / u64::from(sb.block_size())) as u32;
        set_list(&dev, &[blk]);
        let r = repair(&dev);
        let msg = format!("points to inode ({lost_found}) located in a bad block");
        assert!(said(&r, &msg), "{:?}", r.problems);
        assert!(said(&r, "/lost+found not found."), "{:?}", r.problems);
    }

    #[test]
    fn the_primary_superblock_is_taken_off_the_list() {
        let dev = image();
        let sb = read_superblock(&dev).unwrap();
        let first = sb.s_first_data_block;
        set_list(&dev, &[first + 1, first]);
        let r = repair(&dev);
        let msg = format!("The primary superblock ({first}) is on the bad block list.");
        assert!(said(&r, &msg), "{:?}", r.problems);
        let msg = format!("Block {} in the primary group descriptors", first + 1);
        assert!(said(&r, &msg), "{:?}", r.problems);
        assert_eq!(read_inode(&dev, 1).i_block[..2], [0, 0]);
    }

    #[test]
    fn an_invalid_bad_block_inode_is_cleared() {
        let dev = image();
        let mut inode = read_inode(&dev, 1);
        inode.i_mode = 0o100644;
        inode.i_links_count = 1;
        write_inode(&dev, 1, &inode);
        let r = repair(&dev);
        assert!(
            said(&r, "The bad block inode looks invalid."),
            "{:?}",
            r.problems
        );
        let inode = read_inode(&dev, 1);
        assert_eq!((inode.i_mode, inode.i_links_count), (0, 0));
    }

    #[test]
    fn illegal_entries_are_cleared_under_one_question() {
        let dev = image();
        let sb = read_superblock(&dev).unwrap();
        set_list(&dev, &[sb.s_blocks_count, u32::MAX]);
        let r = repair(&dev);
        assert!(
            said(&r, "Bad block inode has illegal block(s)."),
            "{:?}",
            r.problems
        );
        let msg = format!(
            "Illegal block #0 ({}) in bad block inode.",
            sb.s_blocks_count
        );
        assert!(said(&r, &msg), "{:?}", r.problems);
        assert_eq!(read_inode(&dev, 1).i_block[..2], [0, 0]);
    }
}
