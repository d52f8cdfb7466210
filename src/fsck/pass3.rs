//! Pass 3 (e2fsck's pass3.c): the root must exist; every directory must
//! reach it through its parents, or be reconnected to /lost+found; each
//! directory's ".." must name its parent. Also the directory editing the
//! repairs need: making a directory, linking a name, fixing "..".

use std::collections::HashSet;
use std::io;

use crate::format::dirent::{self as de, Insert};
use crate::format::inode::{flags, ino::EXT2_ROOT_INO, Inode, S_IFDIR};
use crate::format::InodeNo;

use super::context::{Bitmap, Ctx, DirBlock};
use super::pass2::file_type_of;
use super::Mode;

pub fn run(ctx: &mut Ctx) -> io::Result<()> {
    ctx.problems.say("Pass 3: Checking directory connectivity");
    if !check_root(ctx)? {
        return Ok(());
    }
    let count = ctx.sb.s_inodes_count;
    let mut done = Bitmap::new(u64::from(count) + 1);
    done.set(u64::from(EXT2_ROOT_INO));
    for ino in 1..=count {
        if ino != EXT2_ROOT_INO && ctx.info[ino as usize].is_dir() {
            check_directory(ctx, ino, &mut done)?;
        }
    }
    if ctx.problems.mode() != Mode::No && ctx.lost_found == 0 {
        get_lost_found(ctx, true)?;
    }
    Ok(())
}

/// Whether there is a root directory (made anew if missing).
fn check_root(ctx: &mut Ctx) -> io::Result<bool> {
    if ctx.info[EXT2_ROOT_INO as usize].is_dir() {
        return Ok(true);
    }
    if !ctx.problems.ask("Root inode not allocated.  ", "Allocate") {
        ctx.problems
            .unfixable("Cannot proceed without a root inode.");
        return Ok(false);
    }
    ctx.info[EXT2_ROOT_INO as usize].used = true;
    make_dir(ctx, EXT2_ROOT_INO, EXT2_ROOT_INO, 0o755)?;
    Ok(true)
}

fn check_directory(ctx: &mut Ctx, dir: u32, done: &mut Bitmap) -> io::Result<()> {
    let mut seen = HashSet::new();
    let mut ino = dir;
    while !done.set(u64::from(ino)) {
        seen.insert(ino);
        let parent = ctx.info[ino as usize].parent;
        let looped = seen.contains(&parent);
        if parent == 0 || looped {
            let was = ctx.info[ino as usize].dotdot;
            let msg = if looped {
                format!("Directory inode {ino} is in a loop of directories (parent {parent})\n")
            } else {
                format!("Unconnected directory inode {ino} (was in {was})\n")
            };
            if ctx.problems.ask(&msg, "Connect to /lost+found") && reconnect(ctx, ino)? {
                let lf = ctx.lost_found;
                fix_dotdot(ctx, ino, lf)?;
                ctx.info[ino as usize].parent = lf;
            }
            break;
        }
        ino = parent;
    }
    let (dotdot, parent) = (ctx.info[dir as usize].dotdot, ctx.info[dir as usize].parent);
    if dotdot != parent && parent != 0 {
        let msg = format!(
            "'..' in inode {dir} ({dir}) is {dotdot} ({dotdot}), should be {parent} ({parent}).\n"
        );
        if ctx.problems.ask(&msg, "Fix") {
            fix_dotdot(ctx, dir, parent)?;
        }
    }
    Ok(())
}

/// Finds /lost+found, making it when `create` (e2fsck's
/// `e2fsck_get_lost_and_found`).
pub fn get_lost_found(ctx: &mut Ctx, create: bool) -> io::Result<u32> {
    if ctx.lost_found != 0 {
        return Ok(ctx.lost_found);
    }
    if let Some(ino) = lookup(ctx, EXT2_ROOT_INO, b"lost+found")? {
        if ctx.ino_ok(ino) && ctx.info[ino as usize].is_dir() {
            ctx.lost_found = ino;
            return Ok(ino);
        }
        let msg = format!("/lost+found is not a directory (ino={ino})\n");
        if !ctx.problems.ask(&msg, "Unlink") {
            return Ok(0);
        }
        unlink(ctx, EXT2_ROOT_INO, b"lost+found")?;
        if ctx.ino_ok(ino) {
            let i = &mut ctx.info[ino as usize];
            i.counted = i.counted.saturating_sub(1);
        }
    }
    if !create || !ctx.problems.ask_safe("/lost+found not found.  ", "Create") {
        return Ok(0);
    }
    let Some(ino) = ctx.alloc_inode() else {
        ctx.problems
            .unfixable("Could not create /lost+found: no free inodes");
        return Ok(0);
    };
    if !make_dir(ctx, ino, EXT2_ROOT_INO, 0o700)? {
        return Ok(0);
    }
    if !link_entry(ctx, EXT2_ROOT_INO, b"lost+found", ino, de::EXT2_FT_DIR)? {
        ctx.problems
            .unfixable("Could not link /lost+found into the root directory");
        return Ok(0);
    }
    ctx.info[ino as usize].counted += 1;
    ctx.info[ino as usize].parent = EXT2_ROOT_INO;
    ctx.lost_found = ino;
    Ok(ino)
}

/// Writes directory inode `ino` with one block holding "." and "..".
fn make_dir(ctx: &mut Ctx, ino: u32, parent: u32, perm: u16) -> io::Result<bool> {
    let (g, _) = ctx.sb.inode_group(parent);
    let Some(blk) = ctx.alloc_block(g.0) else {
        ctx.problems.unfixable(&format!(
            "Could not allocate a block for directory inode {ino}"
        ));
        return Ok(false);
    };
    let block = ctx.new_dir_block(ino, parent)?;
    ctx.write_block(blk, &block)?;
    let extra = if ctx.isz > 128 { 32 } else { 0 };
    let mut inode = Inode::new(ctx.isz, extra);
    let (sec, nsec) = crate::util::now();
    let t = crate::format::inode::Timestamp { sec, nsec };
    inode.i_atime = t;
    inode.i_ctime = t;
    inode.i_mtime = t;
    inode.i_mode = S_IFDIR | perm;
    inode.i_links_count = 2;
    inode.i_size = u64::from(ctx.bs);
    inode.i_blocks = u64::from(ctx.bs / 512);
    inode.i_block[0] = blk;
    ctx.write_inode(ino, &inode);
    let info = &mut ctx.info[ino as usize];
    info.used = true;
    info.has_data = true;
    info.dotdot = parent;
    info.parent = parent;
    // "." here, and ".." names the parent.
    info.counted += 1;
    ctx.info[parent as usize].counted += 1;
    if parent != ino {
        adjust_links(ctx, parent, 1);
    }
    ctx.dir_blocks.push(DirBlock { blk, ino, lblk: 0 });
    Ok(true)
}

/// Changes a directory's on-disk link count.
fn adjust_links(ctx: &mut Ctx, ino: u32, by: i32) {
    let mut inode = ctx.inode(ino);
    let links = i32::from(inode.i_links_count) + by;
    inode.i_links_count = links.clamp(0, i32::from(u16::MAX)) as u16;
    ctx.write_inode(ino, &inode);
}

fn dir_blocks_of(ctx: &Ctx, dir: u32) -> Vec<DirBlock> {
    let mut v: Vec<DirBlock> = ctx
        .dir_blocks
        .iter()
        .filter(|d| d.ino == dir)
        .copied()
        .collect();
    v.sort_by_key(|d| d.lblk);
    v
}

/// The inode `name` names in `dir`.
fn lookup(ctx: &Ctx, dir: u32, name: &[u8]) -> io::Result<Option<u32>> {
    for d in dir_blocks_of(ctx, dir) {
        let block = ctx.read_block(d.blk)?;
        if let Ok(Some(e)) = de::find_entry(&block, name) {
            return Ok(Some(e.inode.0));
        }
    }
    Ok(None)
}

fn unlink(ctx: &mut Ctx, dir: u32, name: &[u8]) -> io::Result<()> {
    for d in dir_blocks_of(ctx, dir) {
        let mut block = ctx.read_block(d.blk)?;
        if let Ok(Some(_)) = de::remove_entry(&mut block, name) {
            ctx.write_block(d.blk, &block)?;
            return Ok(());
        }
    }
    Ok(())
}

/// Adds `name` to `dir`, growing it by a block when full. The htree index,
/// if any, is dropped (a linear directory is valid).
pub fn link_entry(ctx: &mut Ctx, dir: u32, name: &[u8], ino: u32, ft: u8) -> io::Result<bool> {
    let ft = ctx.entry_type(ft);
    let blocks = dir_blocks_of(ctx, dir);
    let mut linked = false;
    for d in &blocks {
        let mut block = ctx.read_block(d.blk)?;
        match de::insert_entry(&mut block, InodeNo(ino), name, ft) {
            Ok(Insert::Inserted(_)) => {
                ctx.write_block(d.blk, &block)?;
                linked = true;
                break;
            }
            Ok(Insert::Exists(_)) => return Ok(false),
            _ => {}
        }
    }
    if !linked {
        linked = expand_dir(ctx, dir, &blocks, name, ino, ft)?;
    }
    if linked {
        let mut inode = ctx.inode(dir);
        if inode.i_flags & flags::EXT2_INDEX_FL != 0 {
            inode.i_flags &= !flags::EXT2_INDEX_FL;
            ctx.write_inode(dir, &inode);
        }
    }
    Ok(linked)
}

fn expand_dir(
    ctx: &mut Ctx,
    dir: u32,
    blocks: &[DirBlock],
    name: &[u8],
    ino: u32,
    ft: u8,
) -> io::Result<bool> {
    let lblk = blocks.iter().map(|d| d.lblk + 1).max().unwrap_or(0);
    let msg = if dir == ctx.lost_found {
        "No room in lost+found directory.  ".to_string()
    } else {
        format!("No room in directory inode {dir}.  ")
    };
    if !ctx.problems.ask(&msg, "Expand") {
        return Ok(false);
    }
    let (g, _) = ctx.sb.inode_group(dir);
    let Some(blk) = ctx.alloc_block(g.0) else {
        return Ok(false);
    };
    let mut block = de::init_block(ctx.bs as usize).map_err(|e| io::Error::other(e.to_string()))?;
    if !matches!(
        de::insert_entry(&mut block, InodeNo(ino), name, ft),
        Ok(Insert::Inserted(_))
    ) {
        return Ok(false);
    }
    let mut inode = ctx.inode(dir);
    if !map_new_block(ctx, &mut inode, (lblk, blk), g.0)? {
        return Ok(false);
    }
    ctx.write_block(blk, &block)?;
    inode.i_size = u64::from(lblk + 1) * u64::from(ctx.bs);
    inode.i_blocks += u64::from(ctx.bs / 512);
    ctx.write_inode(dir, &inode);
    ctx.dir_blocks.push(DirBlock {
        blk,
        ino: dir,
        lblk,
    });
    Ok(true)
}

/// Points logical block `lblk` of `inode` at `blk`, allocating (and
/// counting in i_blocks) the indirect blocks on the way, as e2fsck's
/// expand_directory does through ext2fs_bmap. False when no block is free.
fn map_new_block(
    ctx: &mut Ctx,
    inode: &mut Inode,
    (lblk, blk): (u32, u32),
    near: u32,
) -> io::Result<bool> {
    use crate::format::indirect::{block_to_path, get_ptr, set_ptr};
    use crate::format::BlockNo;
    let err = |e: crate::format::FormatError| io::Error::other(e.to_string());
    let path = block_to_path(ctx.bs, u64::from(lblk)).map_err(err)?;
    let offsets = path.offsets().to_vec();
    // The slot in i_block, then a slot in each indirect block below it.
    let leaf = offsets.len() - 1;
    if leaf == 0 {
        inode.i_block[offsets[0] as usize] = blk;
        return Ok(true);
    }
    let mut node = inode.i_block[offsets[0] as usize];
    if node == 0 {
        let Some(new) = new_indirect(ctx, near)? else {
            return Ok(false);
        };
        inode.i_block[offsets[0] as usize] = new;
        inode.i_blocks += u64::from(ctx.bs / 512);
        node = new;
    }
    for (depth, &slot) in offsets.iter().enumerate().skip(1) {
        let mut buf = ctx.read_block(node)?;
        if depth == leaf {
            set_ptr(&mut buf, slot, BlockNo(blk)).map_err(err)?;
            ctx.write_block(node, &buf)?;
            return Ok(true);
        }
        let mut child = get_ptr(&buf, slot).map_err(err)?.0;
        if child == 0 {
            let Some(new) = new_indirect(ctx, near)? else {
                return Ok(false);
            };
            set_ptr(&mut buf, slot, BlockNo(new)).map_err(err)?;
            ctx.write_block(node, &buf)?;
            inode.i_blocks += u64::from(ctx.bs / 512);
            child = new;
        }
        node = child;
    }
    Ok(true)
}

/// A zeroed block for a block map.
fn new_indirect(ctx: &mut Ctx, near: u32) -> io::Result<Option<u32>> {
    let Some(b) = ctx.alloc_block(near) else {
        return Ok(None);
    };
    ctx.write_block(b, &vec![0u8; ctx.bs as usize])?;
    Ok(Some(b))
}

/// Links `ino` into /lost+found as "#ino" (e2fsck's `e2fsck_reconnect_file`).
pub fn reconnect(ctx: &mut Ctx, ino: u32) -> io::Result<bool> {
    if get_lost_found(ctx, true)? == 0 {
        ctx.problems
            .unfixable(&format!("Could not reconnect {ino}: no /lost+found"));
        return Ok(false);
    }
    let lf = ctx.lost_found;
    let name = format!("#{ino}");
    let ft = file_type_of(ctx.info[ino as usize].mode);
    if !link_entry(ctx, lf, name.as_bytes(), ino, ft)? {
        ctx.problems
            .unfixable(&format!("Could not reconnect {ino}: /lost+found is full"));
        return Ok(false);
    }
    ctx.info[ino as usize].counted += 1;
    Ok(true)
}

/// Points the ".." of `dir` at `parent`, moving the link counts with it.
pub fn fix_dotdot(ctx: &mut Ctx, dir: u32, parent: u32) -> io::Result<()> {
    let Some(first) = dir_blocks_of(ctx, dir).into_iter().find(|d| d.lblk == 0) else {
        return Ok(());
    };
    let mut block = ctx.read_block(first.blk)?;
    let bs = block.len();
    let mut off = 0;
    while off + 12 <= bs {
        let rec_len = de::rec_len_at(&block, off);
        let name_len = usize::from(de::name_len_at(&block, off));
        if name_len == 2 && &block[off + 8..off + 10] == b".." {
            let old = de::inode_at(&block, off);
            if old != 0 && ctx.ino_ok(old) && ctx.info[old as usize].used {
                let i = &mut ctx.info[old as usize];
                i.counted = i.counted.saturating_sub(1);
                adjust_links(ctx, old, -1);
            }
            de::set_inode_at(&mut block, off, parent);
            de::set_file_type_at(&mut block, off, ctx.entry_type(de::EXT2_FT_DIR));
            ctx.write_block(first.blk, &block)?;
            ctx.info[parent as usize].counted += 1;
            adjust_links(ctx, parent, 1);
            ctx.info[dir as usize].dotdot = parent;
            return Ok(());
        }
        if rec_len < 12 {
            break;
        }
        off += rec_len;
    }
    ctx.problems.unfixable(&format!(
        "Couldn't fix parent of inode {dir}: Couldn't find parent directory entry"
    ));
    Ok(())
}
