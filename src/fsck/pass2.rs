//! Pass 2 (e2fsck's pass2.c): read every directory block, in disk order;
//! salvage corrupt entries; make the first block start with "." and "..";
//! clear entries naming bad, unused or reserved inodes, extra links to
//! directories and duplicate names; fix file types; count the links to
//! every inode and record each directory's parent and "..".

use std::collections::HashSet;
use std::io;

use crate::format::dirent::{self as de, rec_len_for};
use crate::format::inode::ino::EXT2_ROOT_INO;
use crate::format::superblock::feature;

use super::context::{Ctx, DirBlock};

pub fn run(ctx: &mut Ctx) -> io::Result<()> {
    ctx.problems.say("Pass 2: Checking directory structure");
    fill_holes(ctx)?;
    let mut blocks = std::mem::take(&mut ctx.dir_blocks);
    super::htree::pass2_start(ctx, &mut blocks);
    let total = blocks.len() as u64;
    for (i, db) in blocks.iter().enumerate() {
        if i % 1024 == 0 {
            ctx.progress(2, i as u64, total);
        }
        if ctx.info[db.ino as usize].is_dir() {
            check_dir_block(ctx, db)?;
        }
    }
    ctx.dir_blocks = blocks;
    super::htree::pass2_end(ctx);
    check_large_file_flag(ctx);
    Ok(())
}

/// e2fsck's PR_2_FEATURE_LARGE_FILES.
fn check_large_file_flag(ctx: &mut Ctx) {
    if ctx.large_files == 0 || ctx.sb.has_ro_compat(feature::RO_COMPAT_LARGE_FILE) {
        return;
    }
    let msg = "Filesystem contains large files, but lacks LARGE_FILE flag in superblock.\n";
    if ctx.problems.ask_safe(msg, "Fix") {
        ctx.set_large_file();
    }
}

/// e2fsck's `allocate_dir_block`: a new, empty block for each hole (with
/// "." and ".." for the first; pass 3 fixes "..").
fn fill_holes(ctx: &mut Ctx) -> io::Result<()> {
    for (ino, lblk) in std::mem::take(&mut ctx.dir_holes) {
        if !ctx.info[ino as usize].is_dir() {
            continue;
        }
        let msg = format!("Directory inode {ino} has an unallocated block #{lblk}.  ");
        if !ctx.problems.ask(&msg, "Allocate") {
            continue;
        }
        if lblk as usize >= crate::format::indirect::EXT3_NDIR_BLOCKS {
            ctx.problems.unfixable(&format!(
                "Cannot allocate block #{lblk} of directory inode {ino}: only direct blocks are supported"
            ));
            continue;
        }
        let (g, _) = ctx.sb.inode_group(ino);
        let Some(blk) = ctx.alloc_block(g.0) else {
            ctx.problems
                .unfixable(&format!("No free block for directory inode {ino}"));
            continue;
        };
        let bs = ctx.bs as usize;
        let block = if lblk == 0 {
            ctx.new_dir_block(ino, EXT2_ROOT_INO)?
        } else {
            de::init_block(bs).map_err(|e| io::Error::other(e.to_string()))?
        };
        ctx.write_block(blk, &block)?;
        let mut inode = ctx.inode(ino);
        inode.i_block[lblk as usize] = blk;
        inode.i_blocks += u64::from(ctx.bs / 512);
        ctx.write_inode(ino, &inode);
        ctx.dir_blocks.push(DirBlock { blk, ino, lblk });
    }
    Ok(())
}

pub use crate::format::dirent::file_type_of;

/// One entry's header fields, read without judging them.
#[derive(Clone, Copy)]
struct Head {
    ino: u32,
    rec_len: usize,
    name_len: usize,
}

fn head(buf: &[u8], off: usize) -> Head {
    if buf.len() - off < 8 {
        return Head {
            ino: 0,
            rec_len: 0,
            name_len: 0,
        };
    }
    Head {
        ino: de::inode_at(buf, off),
        rec_len: de::rec_len_at(buf, off),
        name_len: usize::from(de::name_len_at(buf, off)),
    }
}

/// Makes the entry at `off` name `ino` as "." or "..", NUL-terminated as
/// e2fsck writes them.
fn set_entry(buf: &mut [u8], off: usize, ino: u32, name: &[u8]) {
    de::set_inode_at(buf, off, ino);
    de::set_name_len_at(buf, off, name.len() as u8);
    de::set_file_type_at(buf, off, de::EXT2_FT_UNKNOWN);
    buf[off + 8..off + 8 + name.len()].copy_from_slice(name);
    buf[off + 8 + name.len()] = 0;
}

/// "." and ".." must be followed by a NUL inside their record.
fn check_nul(ctx: &mut Ctx, b: &mut Block, off: usize, name: &[u8]) {
    let at = off + 8 + name.len();
    if b.buf[at] == 0 {
        return;
    }
    let what = String::from_utf8_lossy(name);
    let msg = format!(
        "'{what}' directory entry in directory inode {} is not NULL terminated\n",
        b.db.ino
    );
    if ctx.problems.ask(&msg, "Fix") {
        b.buf[at] = 0;
        b.modified = true;
    }
}

struct Block<'b> {
    db: &'b DirBlock,
    buf: Vec<u8>,
    modified: bool,
}

fn check_dir_block(ctx: &mut Ctx, db: &DirBlock) -> io::Result<()> {
    let mut b = Block {
        db,
        buf: ctx.read_block(db.blk)?,
        modified: false,
    };
    super::htree::block_begin(ctx, db, &b.buf);
    let bs = b.buf.len();
    let mut off = 0usize;
    let mut prev: Option<usize> = None;
    let mut position = if db.lblk == 0 { 0 } else { 2 };
    let mut names: HashSet<Vec<u8>> = HashSet::new();
    let mut guard = 0;
    while off < bs && guard <= bs {
        guard += 1;
        let h = head(&b.buf, off);
        let left = bs - off;
        let bad = left < 12
            || h.rec_len < 12
            || h.rec_len % 4 != 0
            || h.rec_len > left
            || h.name_len + 8 > h.rec_len;
        if bad {
            let msg = format!(
                "Directory inode {}, block #{}, offset {off}: directory corrupted\n",
                db.ino, db.lblk
            );
            if !ctx.problems.ask(&msg, "Salvage") {
                break;
            }
            // A broken ".." must not be absorbed by ".": leave an empty
            // entry there for check_dotdot to fill.
            let absorb = if position == 1 { None } else { prev };
            salvage(ctx, &mut b.buf, &mut off, absorb, h);
            b.modified = true;
            continue;
        }
        match position {
            0 => check_dot(ctx, &mut b, off),
            1 => check_dotdot(ctx, &mut b, off),
            _ => {}
        }
        check_entry(ctx, &mut b, off, position, &mut names);
        position += 1;
        prev = Some(off);
        off += de::rec_len_at(&b.buf, off);
    }
    super::htree::block_end(ctx, db, &b.buf);
    if b.modified {
        ctx.write_block(db.blk, &b.buf)?;
    }
    Ok(())
}

/// e2fsck's `salvage_directory`.
fn salvage(ctx: &Ctx, buf: &mut [u8], off: &mut usize, prev: Option<usize>, h: Head) {
    let bs = buf.len();
    let left = bs as isize - *off as isize - h.rec_len as isize;
    if left >= 12 && h.rec_len == 8 {
        let left = left as usize;
        buf.copy_within(*off + 8..*off + 8 + left, *off);
        buf[*off + left..*off + left + 8].fill(0);
        return;
    }
    let fits = h.rec_len as isize + left;
    if left < 0
        && fits > 8
        && rec_len_for(h.name_len) as isize <= fits
        && h.ino <= ctx.sb.s_inodes_count
        && bs - *off >= 12
    {
        de::set_rec_len_at(buf, *off, bs - *off);
        return;
    }
    if let Some(p) = prev {
        if h.rec_len != 0 && h.rec_len % 4 == 0 && *off + h.rec_len <= bs {
            let plen = de::rec_len_at(buf, p);
            de::set_rec_len_at(buf, p, plen + h.rec_len);
            *off += h.rec_len;
            return;
        }
        let plen = de::rec_len_at(buf, p);
        de::set_rec_len_at(buf, p, plen + bs - *off);
        *off = bs;
    } else if bs - *off >= 12 {
        de::set_inode_at(buf, *off, 0);
        de::set_rec_len_at(buf, *off, bs - *off);
        de::set_name_len_at(buf, *off, 0);
        de::set_file_type_at(buf, *off, 0);
    } else {
        *off = bs;
    }
}

fn check_dot(ctx: &mut Ctx, b: &mut Block, off: usize) {
    let dir = b.db.ino;
    let h = head(&b.buf, off);
    let name = &b.buf[off + 8..off + 8 + h.name_len];
    let msg = if h.ino == 0 {
        Some(format!("Missing '.' in directory inode {dir}.\n"))
    } else if name != b"." {
        Some(format!(
            "First entry '{}' (inode={}) in directory inode {dir} should be '.'\n",
            String::from_utf8_lossy(name),
            h.ino
        ))
    } else {
        None
    };
    let mut created = false;
    if let Some(msg) = msg {
        if ctx.problems.ask(&msg, "Fix") {
            set_entry(&mut b.buf, off, dir, b".");
            b.modified = true;
            created = true;
        }
    } else {
        check_nul(ctx, b, off, b".");
        if h.ino != dir {
            let msg = format!("Bad inode number for '.' in directory inode {dir}.\n");
            if ctx.problems.ask(&msg, "Fix") {
                de::set_inode_at(&mut b.buf, off, dir);
                b.modified = true;
            }
        }
    }
    let rec_len = de::rec_len_at(&b.buf, off);
    if rec_len > 24 {
        let msg = format!("Directory entry for '.' in inode {dir} is big.\n");
        if created || ctx.problems.ask(&msg, "Split") {
            de::set_rec_len_at(&mut b.buf, off, 12);
            let next = off + 12;
            de::set_inode_at(&mut b.buf, next, 0);
            de::set_rec_len_at(&mut b.buf, next, rec_len - 12);
            de::set_name_len_at(&mut b.buf, next, 0);
            de::set_file_type_at(&mut b.buf, next, 0);
            b.modified = true;
        }
    }
}

fn check_dotdot(ctx: &mut Ctx, b: &mut Block, off: usize) {
    let dir = b.db.ino;
    let h = head(&b.buf, off);
    let name = &b.buf[off + 8..off + 8 + h.name_len];
    let msg = if h.ino == 0 {
        Some(format!("Missing '..' in directory inode {dir}.\n"))
    } else if name != b".." {
        Some(format!(
            "Second entry '{}' (inode={}) in directory inode {dir} should be '..'\n",
            String::from_utf8_lossy(name),
            h.ino
        ))
    } else {
        None
    };
    match msg {
        Some(msg) => {
            if ctx.problems.ask(&msg, "Fix") {
                // The parent is not known yet: pass 3 fixes it.
                set_entry(&mut b.buf, off, EXT2_ROOT_INO, b"..");
                b.modified = true;
            }
        }
        None => {
            check_nul(ctx, b, off, b"..");
            ctx.info[dir as usize].dotdot = h.ino;
        }
    }
}

fn check_entry(
    ctx: &mut Ctx,
    b: &mut Block,
    off: usize,
    position: u32,
    names: &mut HashSet<Vec<u8>>,
) {
    let dir = b.db.ino;
    let h = head(&b.buf, off);
    if h.ino == 0 {
        return;
    }
    let name = b.buf[off + 8..off + 8 + h.name_len].to_vec();
    let shown = String::from_utf8_lossy(&name).into_owned();
    let entry = format!("Entry '{shown}' in inode {dir} ({dir})");
    let target = h.ino;
    let reserved = target != EXT2_ROOT_INO && target < ctx.sb.first_ino();
    let problem = if position > 1 && target == dir {
        Some(format!("{entry} is a link to '.'  "))
    } else if reserved || target > ctx.sb.s_inodes_count {
        Some(format!("{entry} has bad inode #: {target}.\n"))
    } else if super::badblocks::inode_is_bad(ctx, target) {
        Some(format!(
            "{entry} points to inode ({target}) located in a bad block.\n"
        ))
    } else if !ctx.info[target as usize].used {
        Some(format!("{entry} has deleted/unused inode {target}.  "))
    } else if position > 1 && name == b"." {
        Some(format!("{entry} is duplicate '.' entry.\n"))
    } else if position > 1 && name == b".." {
        Some(format!("{entry} is duplicate '..' entry.\n"))
    } else if position > 1 && target == EXT2_ROOT_INO {
        Some(format!("{entry} is a link to the root inode.\n"))
    } else if position > 1 && name.is_empty() {
        Some(format!("{entry} has a zero-length name.\n"))
    } else {
        None
    };
    let unused = ctx.ino_ok(target) && !reserved && !ctx.info[target as usize].used;
    if let Some(msg) = problem {
        let fix = if unused {
            ctx.problems.ask_safe(&msg, "Clear")
        } else {
            ctx.problems.ask(&msg, "Clear")
        };
        if fix {
            de::set_inode_at(&mut b.buf, off, 0);
            b.modified = true;
            if position == 1 {
                ctx.info[dir as usize].dotdot = 0;
            }
            return;
        }
        if !ctx.ino_ok(target)
            || !ctx.info[target as usize].used
            || super::badblocks::inode_is_bad(ctx, target)
        {
            return;
        }
    }
    if position > 1 && name.iter().any(|&c| c == b'/' || c == 0) {
        let msg = format!("{entry} has illegal characters in its name.\n");
        if ctx.problems.ask(&msg, "Fix") {
            for c in &mut b.buf[off + 8..off + 8 + h.name_len] {
                if *c == b'/' || *c == 0 {
                    *c = b'.';
                }
            }
            b.modified = true;
        }
    }
    check_filetype(ctx, b, off, &entry, target);
    let tinfo = ctx.info[target as usize];
    if position > 1 && tinfo.is_dir() {
        if tinfo.parent != 0 {
            let msg = format!("{entry} is a link to directory inode {target} ({target}).\n");
            if ctx.problems.ask(&msg, "Clear") {
                de::set_inode_at(&mut b.buf, off, 0);
                b.modified = true;
                return;
            }
        } else {
            ctx.info[target as usize].parent = dir;
        }
    }
    let current = b.buf[off + 8..off + 8 + h.name_len].to_vec();
    if !names.insert(current) {
        let msg = format!(
            "Duplicate entry '{shown}' found.\n\tMarking inode {dir} ({dir}) to be rebuilt.\n\n"
        );
        if ctx.problems.ask(&msg, "Clear") {
            de::set_inode_at(&mut b.buf, off, 0);
            b.modified = true;
            if tinfo.is_dir() && position > 1 && ctx.info[target as usize].parent == dir {
                ctx.info[target as usize].parent = 0;
            }
            return;
        }
    }
    ctx.info[target as usize].counted += 1;
}

fn check_filetype(ctx: &mut Ctx, b: &mut Block, off: usize, entry: &str, target: u32) {
    let have = de::file_type_at(&b.buf, off);
    let want = if ctx.sb.has_incompat(feature::INCOMPAT_FILETYPE) {
        file_type_of(ctx.info[target as usize].mode)
    } else {
        0
    };
    if have == want {
        return;
    }
    let msg = if want == 0 {
        format!("{entry} has filetype set.\n")
    } else if have == 0 {
        format!("Setting filetype for {entry} to {want}.\n")
    } else {
        format!("{entry} has an incorrect filetype (was {have}, should be {want}).\n")
    };
    if ctx.problems.ask_safe(&msg, "Fix") {
        de::set_file_type_at(&mut b.buf, off, want);
        b.modified = true;
    }
}
