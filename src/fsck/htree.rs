//! e2fsck's checks of htree (indexed, dir_index) directories and their
//! repair. Pass 1 looks at each index root (`handle_htree`); pass 2 notes
//! the hash range of every leaf block and reads every index block
//! (`parse_int_node`), then checks each tree (the dx_dir loop at the end of
//! `e2fsck_pass2`); a bad index is cleared (`clear_htree`), which leaves a
//! valid linear directory, and pass 3A rebuilds it (rehash.c).
//!
//! The passes call in through a few hooks: [`check_root`] from pass 1,
//! [`pass2_start`], [`block_begin`], [`block_end`] and [`pass2_end`] from
//! pass 2, and [`pass3a`] after pass 3. What they learn lives in
//! [`Htree`], in the context.

use std::collections::{BTreeMap, BTreeSet};
use std::io;

use crate::format::dirent::{self as de, dx_hash, effective_hash_version, rec_len_for};
use crate::format::dirhash::DX_HASH_SIPHASH;
use crate::format::htree::{
    dx_countlimit, dx_entry, dx_limit, set_dx_countlimit, set_dx_entry, set_dx_entry_block,
    DxCountLimit, DxRootInfo, DX_NODE_ENTRIES_OFFSET, EXT4_DX_BLOCK_MASK, EXT4_HTREE_LEVEL,
    EXT4_HTREE_LEVEL_COMPAT,
};
use crate::format::indirect;
use crate::format::inode::flags::EXT2_INDEX_FL;
use crate::format::inode::ino::EXT2_ROOT_INO;
use crate::format::inode::Inode;
use crate::format::superblock::{feature, EXT2_FLAGS_UNSIGNED_HASH};
use crate::format::BlockNo;

use super::context::{Ctx, DirBlock};
use super::walk::{walk, Act, Claim};
use super::Mode;

const CLEAR_HTREE: &str = "Clear HTree index";

/// What a block of an indexed directory turned out to be (`DX_DIRBLOCK_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Kind {
    /// Not read in pass 2 (a hole).
    #[default]
    Unseen,
    Root,
    Leaf,
    Node,
}

// `DX_FLAG_*`.
const REFERENCED: u8 = 1;
const DUP_REF: u8 = 2;
const FIRST: u8 = 4;
const LAST: u8 = 8;

/// e2fsck's `dx_dirblock_info`: one block of an indexed directory.
#[derive(Clone, Copy, Debug, Default)]
struct DxBlock {
    kind: Kind,
    flags: u8,
    /// The index block that points here.
    parent: u32,
    /// The block the previous entry of the parent's table points at.
    previous: u32,
    /// The hashes of what the block holds (for an index block: of what it
    /// points at).
    min_hash: u32,
    max_hash: u32,
    /// The range the parent's table gives the block.
    node_min_hash: u32,
    node_max_hash: u32,
}

/// e2fsck's `dx_dir_info`: one indexed directory.
#[derive(Debug, Default)]
struct DxDir {
    /// Blocks that may be in the tree (0 once the index is cleared).
    numblocks: u32,
    /// Levels from the root to the leaves (indirect_levels + 1).
    depth: u32,
    /// The hash the names are checked with (unsigned twin applied).
    hash_version: u8,
    blocks: Vec<DxBlock>,
}

/// What the htree checks carry from pass to pass.
#[derive(Debug, Default)]
pub struct Htree {
    dirs: BTreeMap<u32, DxDir>,
    /// e2fsck's `dirs_to_hash`: directories pass 3A rebuilds. It exists
    /// (`Some`) from the start when the filesystem has dir_index and the
    /// check may write, else only once something needs a rebuild.
    rehash: Option<BTreeSet<u32>>,
    /// The directory and block pass 2 is reading, when it is indexed.
    current: Option<(u32, u32)>,
}

/// A problem with no question (e2fsck's PROMPT_NONE): printed and
/// recorded, neither fixed nor left in error.
fn note(ctx: &mut Ctx, msg: &str) {
    let msg = msg.trim_end();
    ctx.problems.messages.push(msg.to_string());
    if !ctx.problems.halted {
        ctx.problems.say(msg);
    }
}

fn list_exists(ctx: &Ctx) -> bool {
    ctx.htree.rehash.is_some()
        || ctx.sb.has_compat(feature::COMPAT_DIR_INDEX) && ctx.problems.mode() != Mode::No
}

/// Adds `ino` to the directories to rebuild if that list exists.
fn rehash_if_listed(ctx: &mut Ctx, ino: u32) {
    if list_exists(ctx) {
        ctx.htree
            .rehash
            .get_or_insert_with(BTreeSet::new)
            .insert(ino);
    }
}

/// e2fsck's `e2fsck_rehash_dir_later`.
fn rehash_later(ctx: &mut Ctx, ino: u32) {
    ctx.htree
        .rehash
        .get_or_insert_with(BTreeSet::new)
        .insert(ino);
}

/// e2fsck's `e2fsck_dir_will_be_rehashed`: every directory with -D.
fn will_be_rehashed(ctx: &Ctx, ino: u32) -> bool {
    ctx.opts.compress_dirs || ctx.htree.rehash.as_ref().is_some_and(|l| l.contains(&ino))
}

/// e2fsck's `clear_htree`: drops EXT2_INDEX_FL (the blocks already read as
/// a valid linear directory: index blocks hold one empty entry spanning
/// the block, and the root's ".." spans the index) and queues a rebuild.
fn clear_htree(ctx: &mut Ctx, ino: u32) {
    let mut inode = ctx.inode(ino);
    inode.i_flags &= !EXT2_INDEX_FL;
    ctx.write_inode(ino, &inode);
    rehash_if_listed(ctx, ino);
}

// ---------------------------------------------------------------------------
// Pass 1
// ---------------------------------------------------------------------------

/// Pass 1's look at an indexed directory's root (e2fsck's `handle_htree`),
/// after its blocks were walked. Clears EXT2_INDEX_FL when the root is
/// unusable; returns whether the inode changed.
pub fn check_root(ctx: &mut Ctx, ino: u32, inode: &mut Inode) -> io::Result<bool> {
    if inode.i_flags & EXT2_INDEX_FL == 0 || !inode.is_dir() {
        return Ok(false);
    }
    if !handle_htree(ctx, ino, inode) {
        return Ok(false);
    }
    inode.i_flags &= !EXT2_INDEX_FL;
    // e2fsck then rebuilds any unindexed directory of 3 blocks or more.
    if inode.i_size / u64::from(ctx.bs) >= 3 {
        rehash_if_listed(ctx, ino);
    }
    Ok(true)
}

/// Whether the index is bad and is to be cleared.
fn handle_htree(ctx: &mut Ctx, ino: u32, inode: &Inode) -> bool {
    let ask = |ctx: &mut Ctx, msg: String| ctx.problems.ask_safe(&msg, CLEAR_HTREE);
    if !ctx.sb.has_compat(feature::COMPAT_DIR_INDEX)
        && ask(
            ctx,
            format!("Inode {ino} has INDEX_FL flag set on filesystem without htree support.\n"),
        )
    {
        return true;
    }
    let bad_root = format!("HTREE directory inode {ino} has an invalid root node.\n");
    let blk = if inode.has_block_map(ctx.bs) {
        inode.i_block[0]
    } else {
        0
    };
    if blk == 0 || !ctx.block_ok(blk) {
        return ask(ctx, bad_root);
    }
    let Some(root) = ctx.read_block(blk).ok().and_then(|b| DxRootInfo::read(&b)) else {
        return ask(ctx, bad_root);
    };
    if (root.reserved_zero != 0 || root.info_length < 8) && ask(ctx, bad_root) {
        return true;
    }
    let v = root.hash_version;
    let known = matches!(
        v,
        de::DX_HASH_LEGACY | de::DX_HASH_HALF_MD4 | de::DX_HASH_TEA | DX_HASH_SIPHASH
    );
    if !known
        && ask(
            ctx,
            format!("HTREE directory inode {ino} has an unsupported hash version ({v})\n"),
        )
    {
        return true;
    }
    // SipHash is only for encrypted casefolded directories, which ext3
    // does not have.
    if v == DX_HASH_SIPHASH
        && ask(
            ctx,
            format!("HTREE directory inode {ino} uses SipHash, but should not.  "),
        )
    {
        return true;
    }
    if root.unused_flags & de::EXT2_HASH_FLAG_INCOMPAT != 0
        && ask(
            ctx,
            format!("HTREE directory inode {ino} uses an incompatible htree root node flag.\n"),
        )
    {
        return true;
    }
    let levels = root.indirect_levels;
    let too_deep =
        format!("HTREE directory inode {ino} has a tree depth ({levels}) which is too big\n");
    if levels > EXT4_HTREE_LEVEL && ask(ctx, too_deep.clone()) {
        return true;
    }
    // Deeper than ext3 allows (no largedir): too deep unless the directory
    // is bigger than a two-level tree can hold.
    if levels > EXT4_HTREE_LEVEL_COMPAT {
        let bits = ctx.sb.s_log_block_size.min(6) + 10;
        let per_block = 1u64 << (bits - 3);
        let max = (per_block - 1) * (per_block - 2);
        if inode.i_size < max << bits && inode.i_blocks < max << (bits - 9) && ask(ctx, too_deep) {
            return true;
        }
    }
    false
}

// ---------------------------------------------------------------------------
// Pass 2
// ---------------------------------------------------------------------------

/// Sorts the directory blocks as pass 2 reads them and notes the indexed
/// directories. With dir_index, e2fsck reads every directory's block 0
/// first, so that each tree's hash version is known before its leaves.
pub fn pass2_start(ctx: &mut Ctx, blocks: &mut [DirBlock]) {
    if ctx.sb.has_compat(feature::COMPAT_DIR_INDEX) {
        blocks.sort_unstable_by_key(|d| (d.lblk != 0, d.blk, d.ino, d.lblk));
    } else {
        blocks.sort_unstable();
    }
    let mut last: BTreeMap<u32, u32> = BTreeMap::new();
    for d in blocks.iter() {
        let n = last.entry(d.ino).or_insert(0);
        *n = (*n).max(d.lblk.saturating_add(1));
    }
    ctx.htree.dirs.clear();
    for (ino, numblocks) in last {
        if !ctx.ino_ok(ino) || !ctx.info[ino as usize].is_dir() {
            continue;
        }
        if ctx.inode(ino).i_flags & EXT2_INDEX_FL == 0 {
            continue;
        }
        let dir = DxDir {
            numblocks,
            blocks: vec![DxBlock::default(); numblocks as usize],
            ..Default::default()
        };
        ctx.htree.dirs.insert(ino, dir);
    }
}

fn dir_mut<'c>(ctx: &'c mut Ctx, ino: u32) -> Option<&'c mut DxDir> {
    ctx.htree.dirs.get_mut(&ino).filter(|d| d.numblocks != 0)
}

/// Forgets a directory's tree (e2fsck's `dx_dir->numblocks = 0`).
fn forget(ctx: &mut Ctx, ino: u32) {
    if let Some(d) = ctx.htree.dirs.get_mut(&ino) {
        d.numblocks = 0;
        d.blocks = Vec::new();
    }
}

/// Called before pass 2 reads the entries of a directory block: what kind
/// of block of its tree this is, and whether the root is sound.
pub fn block_begin(ctx: &mut Ctx, db: &DirBlock, buf: &[u8]) {
    ctx.htree.current = None;
    let (ino, lblk) = (db.ino, db.lblk);
    let Some(numblocks) = dir_mut(ctx, ino).map(|d| d.numblocks) else {
        return;
    };
    if lblk >= numblocks {
        let msg = format!(
            "Unexpected block in HTREE directory inode {ino} ({}).\n",
            pathname(ctx, ino)
        );
        if ctx.problems.ask(&msg, CLEAR_HTREE) {
            clear_htree(ctx, ino);
        }
        forget(ctx, ino);
        return;
    }
    let bs = buf.len();
    let unsigned = ctx.sb.s_flags & EXT2_FLAGS_UNSIGNED_HASH != 0;
    let node = bs >= 12
        && de::inode_at(buf, 0) == 0
        && de::rec_len_at(buf, 0) == bs
        && de::name_len_at(buf, 0) == 0
        && dx_countlimit(buf, DX_NODE_ENTRIES_OFFSET)
            .is_some_and(|cl| usize::from(cl.limit) == dx_limit(bs, DX_NODE_ENTRIES_OFFSET));
    let info = DxRootInfo::read(buf).unwrap_or_default();
    let Some(dir) = dir_mut(ctx, ino) else {
        return;
    };
    let b = &mut dir.blocks[lblk as usize];
    b.kind = Kind::Leaf;
    b.min_hash = u32::MAX;
    b.max_hash = 0;
    if lblk == 0 {
        b.kind = Kind::Root;
        b.flags |= FIRST | LAST;
        dir.hash_version = effective_hash_version(info.hash_version, unsigned);
        dir.depth = u32::from(info.indirect_levels) + 1;
        let bad = info.reserved_zero != 0
            || info.info_length < 8
            || info.indirect_levels >= EXT4_HTREE_LEVEL_COMPAT;
        if bad {
            let msg = format!("Problem in HTREE directory inode {ino}: root node is invalid\n");
            if ctx.problems.ask_safe(&msg, CLEAR_HTREE) {
                clear_htree(ctx, ino);
                forget(ctx, ino);
                return;
            }
        }
    } else if node {
        b.kind = Kind::Node;
    }
    ctx.htree.current = Some((ino, lblk));
}

/// Called once pass 2 is done with a directory block: the hash range of
/// its entries, and for an index block, its table.
pub fn block_end(ctx: &mut Ctx, db: &DirBlock, buf: &[u8]) {
    let Some((ino, lblk)) = ctx.htree.current.take() else {
        return;
    };
    if (ino, lblk) != (db.ino, db.lblk) {
        return;
    }
    let seed = ctx.sb.s_hash_seed;
    let first_ino = ctx.sb.first_ino();
    let inodes = ctx.sb.s_inodes_count;
    let Some(dir) = dir_mut(ctx, ino) else {
        return;
    };
    let (min, max) = hash_range(buf, dir.hash_version, &seed, first_ino, inodes);
    let b = &mut dir.blocks[lblk as usize];
    b.min_hash = b.min_hash.min(min);
    b.max_hash = b.max_hash.max(max);
    let kind = b.kind;
    if matches!(kind, Kind::Root | Kind::Node) {
        parse_int_node(ctx, ino, lblk, buf);
    }
}

/// The lowest and highest hash of the names in a block, as pass 2 hashes
/// them: every entry in use whose inode number is legal, up to the first
/// entry that does not parse.
fn hash_range(buf: &[u8], version: u8, seed: &[u32; 4], first_ino: u32, inodes: u32) -> (u32, u32) {
    let (mut min, mut max) = (u32::MAX, 0);
    let bs = buf.len();
    let mut off = 0;
    let mut hash = 0;
    while off + 8 <= bs {
        let rec_len = de::rec_len_at(buf, off);
        let name_len = usize::from(de::name_len_at(buf, off));
        if rec_len < 12 || rec_len % 4 != 0 || rec_len > bs - off || name_len + 8 > rec_len {
            break;
        }
        let e = de::inode_at(buf, off);
        let bad_ino = (e != EXT2_ROOT_INO && e < first_ino) || e > inodes;
        if e != 0 && !bad_ino {
            // As e2fsck, a hash that cannot be computed leaves the last one.
            if let Ok((h, _)) = dx_hash(&buf[off + 8..off + 8 + name_len], version, seed) {
                hash = h;
            }
            min = min.min(hash);
            max = max.max(hash);
        }
        off += rec_len;
    }
    (min, max)
}

/// e2fsck's `parse_int_node`: checks an index block's table and notes, for
/// each block it points at, its place in the tree.
fn parse_int_node(ctx: &mut Ctx, ino: u32, lblk: u32, buf: &[u8]) {
    let bs = buf.len();
    let off = if lblk == 0 {
        DxRootInfo::read(buf).map_or(bs, |i| i.entries_offset())
    } else {
        DX_NODE_ENTRIES_OFFSET
    };
    let Some(cl) = dx_countlimit(buf, off) else {
        return;
    };
    let expect = dx_limit(bs, off);
    let head = format!("Problem in HTREE directory inode {ino}: block #{lblk}");
    if usize::from(cl.limit) != expect {
        let msg = format!("{head} has invalid limit ({})\n", cl.limit);
        if ctx.problems.ask_safe(&msg, CLEAR_HTREE) {
            return clear_and_exit(ctx, ino);
        }
    }
    let mut count = usize::from(cl.count);
    if count > expect {
        let msg = format!("{head} has invalid count ({count})\n");
        if ctx.problems.ask_safe(&msg, CLEAR_HTREE) {
            return clear_and_exit(ctx, ino);
        }
        count = expect;
    }
    let (mut min_hash, mut max_hash) = (u32::MAX, 0u32);
    let mut hash = 0u32;
    for i in 0..count {
        let Some((raw_hash, raw_blk)) = dx_entry(buf, off, i) else {
            break;
        };
        let prev_hash = hash;
        hash = if i == 0 { 0 } else { raw_hash & !1 };
        let blk = raw_blk & EXT4_DX_BLOCK_MASK;
        let numblocks = dir_mut(ctx, ino).map_or(0, |d| d.numblocks);
        if blk >= numblocks {
            let msg = format!(
                "Problem in HTREE directory inode {ino} ({}): bad block number {blk}.\n",
                pathname(ctx, ino)
            );
            if ctx.problems.ask(&msg, CLEAR_HTREE) {
                return clear_and_exit(ctx, ino);
            }
            continue;
        }
        if hash < prev_hash {
            let msg = format!("{head} has an unordered hash table\n");
            if ctx.problems.ask_safe(&msg, CLEAR_HTREE) {
                return clear_and_exit(ctx, ino);
            }
        }
        let next_hash = dx_entry(buf, off, i + 1).map(|e| e.0 & !1);
        let previous = if i == 0 {
            0
        } else {
            dx_entry(buf, off, i - 1).map_or(0, |e| e.1 & EXT4_DX_BLOCK_MASK)
        };
        let Some(dir) = dir_mut(ctx, ino) else {
            return;
        };
        let b = &mut dir.blocks[blk as usize];
        if b.flags & REFERENCED != 0 {
            b.flags |= DUP_REF;
        } else {
            b.flags |= REFERENCED;
            b.parent = lblk;
        }
        b.previous = previous;
        min_hash = min_hash.min(hash);
        max_hash = max_hash.max(hash);
        b.node_min_hash = hash;
        if i + 1 < count {
            b.node_max_hash = next_hash.unwrap_or(0);
        } else {
            b.node_max_hash = 0xffff_fffe;
            b.flags |= LAST;
        }
        if i == 0 {
            b.flags |= FIRST;
        }
    }
    if let Some(dir) = dir_mut(ctx, ino) {
        let b = &mut dir.blocks[lblk as usize];
        b.min_hash = min_hash;
        b.max_hash = max_hash;
    }
}

fn clear_and_exit(ctx: &mut Ctx, ino: u32) {
    clear_htree(ctx, ino);
    forget(ctx, ino);
    rehash_later(ctx, ino);
}

/// The end of pass 2: each tree's hash ranges, depths and references.
pub fn pass2_end(ctx: &mut Ctx) {
    let dirs = std::mem::take(&mut ctx.htree.dirs);
    for (ino, mut dir) in dirs {
        if will_be_rehashed(ctx, ino) || dir.numblocks == 0 {
            continue;
        }
        if check_tree(ctx, ino, &mut dir) > 0 {
            let msg = format!(
                "Invalid HTREE directory inode {ino} ({}).  ",
                pathname(ctx, ino)
            );
            if ctx.problems.ask(&msg, CLEAR_HTREE) {
                clear_htree(ctx, ino);
            }
        }
    }
}

/// Reports what is wrong with one tree; returns how many problems.
fn check_tree(ctx: &mut Ctx, ino: u32, dir: &mut DxDir) -> usize {
    let blocks = &mut dir.blocks;
    let root = &mut blocks[0];
    if root.flags & REFERENCED != 0 {
        root.flags |= DUP_REF;
    } else {
        root.flags |= REFERENCED;
    }
    update_parents(blocks, Kind::Leaf);
    update_parents(blocks, Kind::Node);
    let mut bad = 0;
    for (b, d) in blocks.iter().enumerate() {
        let head = format!("Problem in HTREE directory inode {ino}: block #{b}");
        if d.flags & FIRST == 0 && d.min_hash < d.node_min_hash {
            note(ctx, &format!("{head} has bad min hash"));
            bad += 1;
        }
        if d.kind == Kind::Leaf && htree_depth(blocks, b) != dir.depth {
            note(ctx, &format!("{head} has invalid depth ({})", dir.depth));
            bad += 1;
        }
        if b != 0 && d.max_hash > d.node_max_hash {
            note(ctx, &format!("{head} has bad max hash"));
            bad += 1;
        }
        if d.flags & REFERENCED == 0 {
            note(ctx, &format!("{head} not referenced"));
            bad += 1;
        } else if d.flags & DUP_REF != 0 {
            note(ctx, &format!("{head} referenced twice"));
            bad += 1;
        }
    }
    bad
}

/// e2fsck's `update_parents`: the first and last child of each index
/// block give it its hash range, and the first child's range closes the
/// range of the block before it.
fn update_parents(blocks: &mut [DxBlock], kind: Kind) {
    let n = blocks.len();
    for b in 0..n {
        let d = blocks[b];
        let p = d.parent as usize;
        if d.kind != kind || p >= n {
            continue;
        }
        if d.flags & FIRST != 0 {
            blocks[p].min_hash = d.min_hash;
            let prev = blocks[p].previous as usize;
            if prev != 0 && prev < n {
                blocks[prev].node_max_hash = blocks[p].min_hash;
            }
        }
        if d.flags & LAST != 0 {
            blocks[p].max_hash = d.max_hash;
        }
    }
}

/// How many index blocks lead from the root to block `b` (e2fsck stops at
/// 32000, which a loop of parents reaches).
fn htree_depth(blocks: &[DxBlock], mut b: usize) -> u32 {
    let mut depth = 0;
    while blocks[b].kind != Kind::Root && depth < 32000 {
        b = (blocks[b].parent as usize).min(blocks.len() - 1);
        depth += 1;
    }
    depth
}

// ---------------------------------------------------------------------------
// Path names, for messages (libext2fs's ext2fs_get_pathname)
// ---------------------------------------------------------------------------

/// The data blocks of a directory, by logical block.
fn data_blocks(ctx: &mut Ctx, ino: u32) -> io::Result<Vec<(u64, u32)>> {
    let inode = ctx.inode(ino);
    let mut out = Vec::new();
    if !inode.has_block_map(ctx.bs) {
        return Ok(out);
    }
    let mut i_block = inode.i_block;
    walk(ctx, &mut i_block, false, &mut |ctx, blk, claim| {
        if let Claim::Data(l) = claim {
            if ctx.block_ok(blk) {
                out.push((l, blk));
            }
        }
        Act::Keep
    })?;
    out.sort_unstable();
    Ok(out)
}

/// The path of directory `dir`, as e2fsck's `%q` prints it.
pub fn pathname(ctx: &mut Ctx, dir: u32) -> String {
    pathname_of(ctx, dir, 0, 32)
}

fn pathname_of(ctx: &mut Ctx, dir: u32, ino: u32, depth: i32) -> String {
    if dir == ino {
        return if dir == EXT2_ROOT_INO { "/" } else { "." }.to_string();
    }
    if dir == 0 || depth < 0 {
        return "...".to_string();
    }
    if !ctx.ino_ok(dir) || !ctx.info[dir as usize].is_dir() {
        return if ino != 0 {
            format!("<{dir}>/<{ino}>")
        } else {
            format!("<{dir}>")
        };
    }
    let (parent, name) = scan_for(ctx, dir, ino);
    let parent_name = pathname_of(ctx, parent, dir, depth - 1);
    if ino == 0 {
        return parent_name;
    }
    let mut out = if parent_name.len() > 1 {
        parent_name
    } else {
        String::new()
    };
    out.push('/');
    out.push_str(name.as_deref().unwrap_or("???"));
    out
}

/// The ".." of `dir` and the name `ino` has there.
fn scan_for(ctx: &mut Ctx, dir: u32, ino: u32) -> (u32, Option<String>) {
    let (mut parent, mut name) = (0, None);
    let Ok(blocks) = data_blocks(ctx, dir) else {
        return (0, None);
    };
    for (_, blk) in blocks {
        let Ok(buf) = ctx.read_block(blk) else {
            continue;
        };
        for e in de::iter_block(&buf, None) {
            let Ok(e) = e else {
                break;
            };
            if e.name == b".." {
                parent = e.inode.0;
            }
            if ino != 0 && e.inode.0 == ino && name.is_none() {
                name = Some(String::from_utf8_lossy(e.name).into_owned());
            }
        }
        if parent != 0 && (ino == 0 || name.is_some()) {
            break;
        }
    }
    (parent, name)
}

// ---------------------------------------------------------------------------
// Pass 3A: rebuilding (rehash.c)
// ---------------------------------------------------------------------------

/// e2fsck's `e2fsck_rehash_directories`: rebuilds each directory whose
/// index was cleared, or every directory with -D (with -n, only the header
/// is printed).
pub fn pass3a(ctx: &mut Ctx) -> io::Result<()> {
    let list = ctx.htree.rehash.take();
    let list: Vec<u32> = if ctx.opts.compress_dirs {
        (1..=ctx.sb.s_inodes_count)
            .filter(|&i| ctx.info[i as usize].is_dir())
            .collect()
    } else if let Some(list) = list {
        list.into_iter().collect()
    } else {
        return Ok(());
    };
    let mut first = true;
    for ino in list {
        if !ctx.ino_ok(ino) || !ctx.info[ino as usize].is_dir() {
            continue;
        }
        if first {
            ctx.problems.say("Pass 3A: Optimizing directories");
            first = false;
        }
        if ctx.problems.mode() != Mode::No && !ctx.problems.halted {
            rehash_dir(ctx, ino)?;
        }
    }
    Ok(())
}

/// One name of a directory being rebuilt.
#[derive(Clone, Debug)]
struct Ent {
    hash: u32,
    minor_hash: u32,
    ino: u32,
    file_type: u8,
    name: Vec<u8>,
}

/// The names of a directory, as e2fsck's `fill_dir_block` gathers them
/// (without "." and ".." unless `compress`), with the bytes they need and
/// the ".." inode. `None` if a block does not parse or a name cannot be
/// hashed.
fn gather(
    bufs: &[Vec<u8>],
    compress: bool,
    version: u8,
    seed: &[u32; 4],
) -> Option<(Vec<Ent>, usize, u32)> {
    let mut out = Vec::new();
    let (mut size, mut parent) = (0, 0);
    for buf in bufs {
        let bs = buf.len();
        let mut off = 0;
        while off < bs {
            if bs - off < 8 {
                return None;
            }
            let rec_len = de::rec_len_at(buf, off);
            let name_len = usize::from(de::name_len_at(buf, off));
            if rec_len > bs - off || rec_len < 8 || rec_len % 4 != 0 || name_len + 8 > rec_len {
                return None;
            }
            let ino = de::inode_at(buf, off);
            let name = &buf[off + 8..off + 8 + name_len];
            let file_type = de::file_type_at(buf, off);
            off += rec_len;
            if ino == 0 {
                continue;
            }
            if name.is_empty() {
                return None;
            }
            if !compress && name == b"." {
                continue;
            }
            if !compress && name == b".." {
                parent = ino;
                continue;
            }
            size += rec_len_for(name_len);
            let (hash, minor_hash) = if compress {
                (0, 0)
            } else {
                dx_hash(name, version, seed).ok()?
            };
            out.push(Ent {
                hash,
                minor_hash,
                ino,
                file_type,
                name: name.to_vec(),
            });
        }
    }
    Some((out, size, parent))
}

/// e2fsck's `hash_cmp`: by hash, minor hash, name, then inode (higher first).
fn hash_order(a: &Ent, b: &Ent) -> std::cmp::Ordering {
    a.hash
        .cmp(&b.hash)
        .then(a.minor_hash.cmp(&b.minor_hash))
        .then_with(|| a.name.cmp(&b.name))
        .then(b.ino.cmp(&a.ino))
}

/// The new blocks of a directory: leaves as e2fsck's `copy_dir_entries`
/// fills them (20% slack in an index's leaves), then, for an index, the
/// root and interior nodes (`calculate_tree`). `None` if the tree would
/// need more levels than ext3 allows.
fn layout(
    bs: usize,
    entries: &[Ent],
    compress: bool,
    root: Option<(u32, u32, u8, u8)>,
) -> Option<Vec<Vec<u8>>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut hashes: Vec<u32> = Vec::new();
    if !compress {
        out.push(vec![0; bs]);
        hashes.push(0);
    }
    out.push(vec![0; bs]);
    hashes.push(0);
    let slack = if compress {
        12
    } else {
        (bs * 20 / 100).max(12)
    };
    let (mut offset, mut left, mut dirent, mut prev_rec_len, mut rec_len) = (0, bs, 0, 0, 0);
    let mut prev_hash = 1u32;
    for ent in entries {
        rec_len = rec_len_for(ent.name.len());
        if rec_len > left {
            let cur = out.last_mut()?;
            if left != 0 {
                left += prev_rec_len;
                de::set_rec_len_at(cur, dirent, left);
            }
            out.push(vec![0; bs]);
            hashes.push(0);
            offset = 0;
        }
        left = bs - offset;
        dirent = offset;
        if offset == 0 {
            let h = hashes.last_mut()?;
            *h = if ent.hash == prev_hash {
                ent.hash | 1
            } else {
                ent.hash
            };
        }
        let cur = out.last_mut()?;
        de::set_inode_at(cur, dirent, ent.ino);
        de::set_rec_len_at(cur, dirent, rec_len);
        de::set_name_len_at(cur, dirent, ent.name.len() as u8);
        de::set_file_type_at(cur, dirent, ent.file_type);
        cur[dirent + 8..dirent + 8 + ent.name.len()].copy_from_slice(&ent.name);
        prev_rec_len = rec_len;
        offset += rec_len;
        left -= rec_len;
        if left < slack {
            prev_rec_len += left;
            de::set_rec_len_at(cur, dirent, prev_rec_len);
            offset += left;
            left = 0;
        }
        prev_hash = ent.hash;
    }
    if left != 0 {
        let cur = out.last_mut()?;
        de::set_rec_len_at(cur, dirent, rec_len + left);
    }
    if let Some((ino, parent, hash_version, ft)) = root {
        calculate_tree(bs, &mut out, &hashes, ino, parent, hash_version, ft)?;
    }
    Some(out)
}

/// e2fsck's `calculate_tree` for the one- and two-level trees ext3 has.
fn calculate_tree(
    bs: usize,
    out: &mut Vec<Vec<u8>>,
    hashes: &[u32],
    ino: u32,
    parent: u32,
    hash_version: u8,
    ft: u8,
) -> Option<()> {
    let root = &mut out[0];
    root.fill(0);
    de::set_inode_at(root, 0, ino);
    de::set_rec_len_at(root, 0, 12);
    de::set_name_len_at(root, 0, 1);
    de::set_file_type_at(root, 0, ft);
    root[8] = b'.';
    de::set_inode_at(root, 12, parent);
    de::set_rec_len_at(root, 12, bs - 12);
    de::set_name_len_at(root, 12, 2);
    de::set_file_type_at(root, 12, ft);
    root[20..22].copy_from_slice(b"..");
    let mut info = DxRootInfo {
        reserved_zero: 0,
        hash_version,
        info_length: 8,
        indirect_levels: 0,
        unused_flags: 0,
    };
    let root_off = info.entries_offset();
    let root_limit = dx_limit(bs, root_off);
    let node_limit = dx_limit(bs, DX_NODE_ENTRIES_OFFSET);
    let nblks = out.len();
    let leaves = nblks - 1;
    let root_count;
    if leaves <= root_limit {
        for (i, &hash) in hashes.iter().enumerate().take(nblks).skip(1) {
            set_dx_entry(&mut out[0], root_off, i - 1, hash, i as u32);
        }
        root_count = leaves;
    } else if leaves <= root_limit * node_limit {
        info.indirect_levels = 1;
        let mut nodes = 0;
        let (mut node, mut used) = (0, node_limit);
        for (i, &hash) in hashes.iter().enumerate().take(nblks).skip(1) {
            if used == node_limit {
                if nodes == root_limit {
                    return None;
                }
                node = out.len();
                set_dx_entry(&mut out[0], root_off, nodes, hash, node as u32);
                let mut block = de::init_block(bs).ok()?;
                set_dx_countlimit(
                    &mut block,
                    DX_NODE_ENTRIES_OFFSET,
                    DxCountLimit {
                        limit: node_limit as u16,
                        count: 0,
                    },
                );
                out.push(block);
                nodes += 1;
                used = 0;
            }
            let table = &mut out[node];
            if used == 0 {
                set_dx_entry_block(table, DX_NODE_ENTRIES_OFFSET, 0, i as u32);
            } else {
                set_dx_entry(table, DX_NODE_ENTRIES_OFFSET, used, hash, i as u32);
            }
            used += 1;
            set_dx_countlimit(
                table,
                DX_NODE_ENTRIES_OFFSET,
                DxCountLimit {
                    limit: node_limit as u16,
                    count: used as u16,
                },
            );
        }
        root_count = nodes;
    } else {
        return None;
    }
    // Entry 0's hash slot holds the countlimit, written last.
    info.write(&mut out[0]);
    set_dx_countlimit(
        &mut out[0],
        root_off,
        DxCountLimit {
            limit: root_limit as u16,
            count: root_count as u16,
        },
    );
    Some(())
}

/// e2fsck's `e2fsck_rehash_dir`, for a directory whose blocks all lie
/// where its size says: gathers the names, sorts them, writes them back
/// packed (indexed when dir_index allows), and frees the blocks no longer
/// needed. A directory it cannot rebuild in its own blocks is left as it
/// is: linear, and valid.
fn rehash_dir(ctx: &mut Ctx, ino: u32) -> io::Result<()> {
    let bs = ctx.bs as usize;
    let mut inode = ctx.inode(ino);
    let blocks = data_blocks(ctx, ino)?;
    let n = blocks.len();
    let contiguous = blocks.iter().enumerate().all(|(i, &(l, _))| l == i as u64);
    if n == 0 || !contiguous || inode.i_size != (n * bs) as u64 {
        return Ok(());
    }
    let mut bufs = Vec::with_capacity(n);
    for &(_, blk) in &blocks {
        bufs.push(ctx.read_block(blk)?);
    }
    let sb = &ctx.sb;
    let def = sb.s_def_hash_version;
    let version = effective_hash_version(def, sb.s_flags & EXT2_FLAGS_UNSIGNED_HASH != 0);
    let seed = sb.s_hash_seed;
    let lost_found = ino == ctx.lost_found;
    let index_ok =
        sb.has_compat(feature::COMPAT_DIR_INDEX) && def <= de::DX_HASH_TEA && !lost_found;
    let ft = ctx.entry_type(de::EXT2_FT_DIR);
    let mut new = None;
    if index_ok && n >= 2 {
        if let Some((mut ents, size, parent)) = gather(&bufs, false, version, &seed) {
            if size >= bs - 24 {
                ents.sort_by(hash_order);
                new = layout(bs, &ents, false, Some((ino, parent, def, ft))).map(|out| (out, true));
            }
        }
    }
    if new.is_none() {
        let Some((mut ents, _, _)) = gather(&bufs, true, version, &seed) else {
            return Ok(());
        };
        if ents.len() > 2 {
            ents[2..].sort_by(|a, b| a.ino.cmp(&b.ino).then_with(|| a.name.cmp(&b.name)));
        }
        new = layout(bs, &ents, true, None).map(|out| (out, false));
    }
    let Some((mut out, mut indexed)) = new else {
        return Ok(());
    };
    let mut blocks: Vec<u32> = blocks.into_iter().map(|(_, b)| b).collect();
    let mut pad = lost_found;
    if out.len() > n {
        // e2fsck_expand_directory: the rebuilt directory needs more blocks.
        for l in n..out.len() {
            let goal = blocks.last().copied().unwrap_or(0);
            match add_block(ctx, ino, &mut inode, l as u64, goal)? {
                Some(b) => blocks.push(b),
                None => break,
            }
        }
        if blocks.len() < out.len() {
            // No room: the names stay where they were, the new blocks empty.
            out = bufs;
            indexed = false;
            pad = true;
        }
    }
    if pad {
        // e2fsck keeps every block of /lost+found.
        while out.len() < blocks.len() {
            out.push(de::init_block(bs).map_err(|e| io::Error::other(e.to_string()))?);
        }
    }
    for (buf, &blk) in out.iter().zip(&blocks) {
        ctx.write_block(blk, buf)?;
    }
    let keep = out.len() as u64;
    if indexed {
        inode.i_flags |= EXT2_INDEX_FL;
    } else {
        inode.i_flags &= !EXT2_INDEX_FL;
    }
    inode.i_size = keep * bs as u64;
    truncate(ctx, ino, &mut inode, keep)?;
    ctx.write_inode(ino, &inode);
    Ok(())
}

/// Maps logical block `l` of a directory to a new block, with the indirect
/// blocks on the way, as `ext2fs_bmap2(BMAP_ALLOC)` does for e2fsck's
/// `e2fsck_expand_directory`. `None` when the filesystem is full or the
/// map is unusable.
fn add_block(
    ctx: &mut Ctx,
    ino: u32,
    inode: &mut Inode,
    l: u64,
    mut goal: u32,
) -> io::Result<Option<u32>> {
    let Ok(path) = indirect::block_to_path(ctx.bs, l) else {
        return Ok(None);
    };
    let Ok(lblk) = u32::try_from(l) else {
        return Ok(None);
    };
    let offs = path.offsets().to_vec();
    let mut holder: Option<u32> = None;
    for (level, &slot) in offs.iter().enumerate() {
        let cur = match holder {
            None => inode.i_block.get(slot as usize).copied().unwrap_or(0),
            Some(p) => {
                let buf = ctx.read_block(p)?;
                indirect::get_ptr(&buf, slot).map_or(0, |b| b.0)
            }
        };
        let last = level + 1 == offs.len();
        let blk = if cur != 0 {
            if last || !ctx.block_ok(cur) {
                return Ok(None);
            }
            cur
        } else {
            // ext2fs_new_block2: the first free block from the goal on.
            let first = u64::from(ctx.sb.s_first_data_block);
            let Some(new) = ctx
                .found
                .first_clear_from(u64::from(goal).max(first))
                .filter(|&b| b >= first)
                .and_then(|b| u32::try_from(b).ok())
            else {
                return Ok(None);
            };
            ctx.found.set(u64::from(new));
            goal = new;
            alloc_stats(ctx, new)?;
            if !last {
                ctx.write_block(new, &vec![0u8; ctx.bs as usize])?;
            }
            match holder {
                None => inode.i_block[slot as usize] = new,
                Some(p) => {
                    let mut buf = ctx.read_block(p)?;
                    indirect::set_ptr(&mut buf, slot, BlockNo(new)).map_err(io::Error::other)?;
                    ctx.write_block(p, &buf)?;
                }
            }
            inode.i_blocks += u64::from(ctx.bs / 512);
            new
        };
        if last {
            ctx.dir_blocks.push(DirBlock { blk, ino, lblk });
            return Ok(Some(blk));
        }
        holder = Some(blk);
    }
    Ok(None)
}

/// Marks a block newly allocated in the on-disk bitmap and the free
/// counts, as `ext2fs_block_alloc_stats` does (so pass 5 finds no
/// difference).
fn alloc_stats(ctx: &mut Ctx, blk: u32) -> io::Result<()> {
    let sb = &ctx.sb;
    let g = ((blk - sb.s_first_data_block) / sb.s_blocks_per_group) as usize;
    let i = (blk - sb.s_first_data_block) % sb.s_blocks_per_group;
    let Some(d) = ctx.descs.get(g).copied() else {
        return Ok(());
    };
    if ctx.block_ok(d.bg_block_bitmap) {
        let mut map = ctx.read_block(d.bg_block_bitmap)?;
        if let Some(byte) = map.get_mut((i / 8) as usize) {
            *byte |= 1 << (i % 8);
            ctx.write_block(d.bg_block_bitmap, &map)?;
        }
    }
    let d = &mut ctx.descs[g];
    d.bg_free_blocks_count = d.bg_free_blocks_count.saturating_sub(1);
    ctx.sb.s_free_blocks_count = ctx.sb.s_free_blocks_count.saturating_sub(1);
    ctx.descs_dirty = true;
    ctx.sb_dirty = true;
    Ok(())
}

/// Frees a directory's blocks from logical block `keep` on, and the
/// indirect blocks left empty (e2fsck's `ext2fs_punch`), freed as
/// `ext2fs_block_alloc_stats` frees them.
fn truncate(ctx: &mut Ctx, ino: u32, inode: &mut Inode, keep: u64) -> io::Result<()> {
    let mut before = Vec::new();
    walk(ctx, &mut inode.i_block, false, &mut |ctx, blk, _| {
        if ctx.block_ok(blk) {
            before.push(blk);
        }
        Act::Keep
    })?;
    walk(
        ctx,
        &mut inode.i_block,
        true,
        &mut |ctx, blk, claim| match claim {
            Claim::Data(l) if l >= keep => Act::Clear,
            // An indirect block that maps nothing goes too.
            Claim::Ind(_) if ctx.read_block(blk).is_ok_and(|b| b.iter().all(|&x| x == 0)) => {
                Act::Clear
            }
            _ => Act::Keep,
        },
    )?;
    let mut after = BTreeSet::new();
    walk(ctx, &mut inode.i_block, false, &mut |_, blk, _| {
        after.insert(blk);
        Act::Keep
    })?;
    let held = after.len() as u64 + u64::from(inode.i_file_acl != 0);
    inode.i_blocks = held * u64::from(ctx.bs / 512);
    for blk in before.into_iter().filter(|b| !after.contains(b)) {
        if ctx.dups.contains(&blk) {
            continue;
        }
        // Pass 5 clears released blocks in the bitmap and counts them
        // free without calling it a difference.
        ctx.found.clear(u64::from(blk));
        ctx.released_blocks.push(blk);
    }
    ctx.dir_blocks
        .retain(|d| d.ino != ino || u64::from(d.lblk) < keep);
    Ok(())
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::device::{BlockDevice, MemoryDevice};
    use crate::format::InodeNo;
    use crate::fs::namei::Caller;
    use crate::fs::MountConfig;
    use crate::fsck::{check, exit, read_superblock, super_check, FsckOptions, Report};

    const WHO: Caller = Caller { uid: 0, gid: 0 };

    fn run(dev: &MemoryDevice, mode: Mode) -> Report {
        let opts = FsckOptions {
            mode,
            force: true,
            ..Default::default()
        };
        check(dev, &opts).unwrap()
    }

    /// Byte offset of inode `ino` in its table.
    fn inode_at(dev: &MemoryDevice, ino: u32) -> u64 {
        let sb = read_superblock(dev).unwrap();
        let descs = super_check::read_descs(dev, &sb, sb.s_first_data_block).unwrap();
        let (g, idx) = sb.inode_group(ino);
        u64::from(descs[g.0 as usize].bg_inode_table) * u64::from(sb.block_size())
            + u64::from(idx) * u64::from(sb.inode_size())
    }

    fn read_inode(dev: &MemoryDevice, ino: u32) -> Inode {
        let sb = read_superblock(dev).unwrap();
        let mut raw = vec![0u8; sb.inode_size() as usize];
        dev.read_at(&mut raw, inode_at(dev, ino)).unwrap();
        Inode::parse(&raw).unwrap()
    }

    fn write_inode(dev: &MemoryDevice, ino: u32, inode: &Inode) {
        dev.write_at(&inode.to_bytes(), inode_at(dev, ino)).unwrap();
    }

    fn bs(dev: &MemoryDevice) -> usize {
        read_superblock(dev).unwrap().block_size() as usize
    }

    /// The physical block of logical block `l` of `inode`.
    fn phys(dev: &MemoryDevice, inode: &Inode, l: u64) -> u32 {
        let bs = bs(dev);
        let path = indirect::block_to_path(bs as u32, l).unwrap();
        let offs = path.offsets();
        let mut blk = inode.i_block[offs[0] as usize];
        for &slot in &offs[1..] {
            let mut buf = vec![0u8; bs];
            dev.read_at(&mut buf, u64::from(blk) * bs as u64).unwrap();
            blk = indirect::get_ptr(&buf, slot).unwrap().0;
        }
        blk
    }

    fn read_dir_block(dev: &MemoryDevice, inode: &Inode, l: u64) -> (u32, Vec<u8>) {
        let bs = bs(dev);
        let blk = phys(dev, inode, l);
        let mut buf = vec![0u8; bs];
        dev.read_at(&mut buf, u64::from(blk) * bs as u64).unwrap();
        (blk, buf)
    }

    /// Every name in the directory, read as a linear directory.
    fn names(dev: &MemoryDevice, ino: u32) -> Vec<Vec<u8>> {
        let inode = read_inode(dev, ino);
        let n = inode.i_size / bs(dev) as u64;
        let mut out = Vec::new();
        for l in 0..n {
            let (_, buf) = read_dir_block(dev, &inode, l);
            for e in de::iter_block(&buf, None) {
                let e = e.unwrap();
                if e.inode.0 != 0 {
                    out.push(e.name.to_vec());
                }
            }
        }
        out.sort();
        out
    }

    /// A 1 KiB-block jbdfs image with directory "d" holding `files` names
    /// of `len` bytes (hard links to one file), written by jbdfs: linear.
    fn image_with_dir(files: u32, len: usize) -> (MemoryDevice, u32) {
        let (mem, fs) = crate::testing::memory_fs(16 << 20, &MountConfig::default());
        // jbdfs indexes a directory it grows when the filesystem has
        // dir_index: hide the feature while "d" grows, so it stays linear.
        let dir_index = crate::format::superblock::feature::COMPAT_DIR_INDEX;
        fs.sb.lock().s_feature_compat &= !dir_index;
        let root = InodeNo(EXT2_ROOT_INO);
        let (d, _) = fs.mkdir(root, b"d", 0o755, WHO).unwrap();
        let (f, _) = fs.mknod(root, b"f", 0o100_644, 0, WHO).unwrap();
        for i in 0..files {
            let name = format!("{i:0len$}");
            fs.link(f, d, name.as_bytes()).unwrap();
        }
        fs.sb.lock().s_feature_compat |= dir_index;
        fs.unmount().unwrap();
        drop(fs);
        let snap = mem.snapshot();
        (MemoryDevice::from_vec(snap), d.0)
    }

    /// Turns "d" into an indexed directory the way e2fsck would: its
    /// INDEX_FL set over a linear block 0 makes pass 1 clear the flag and
    /// pass 3A rebuild the directory with an index.
    fn indexed_dir(files: u32, len: usize) -> (MemoryDevice, u32) {
        let (dev, d) = image_with_dir(files, len);
        let mut inode = read_inode(&dev, d);
        inode.i_flags |= EXT2_INDEX_FL;
        write_inode(&dev, d, &inode);
        let r = run(&dev, Mode::Yes);
        assert_eq!(r.exit_code(), exit::NONDESTRUCT, "{:?}", r.problems);
        assert_eq!(
            r.problems,
            vec![format!(
                "HTREE directory inode {d} has an invalid root node."
            )]
        );
        (dev, d)
    }

    #[test]
    fn a_rebuilt_index_is_valid_and_holds_every_name() {
        let (dev, d) = image_with_dir(400, 20);
        let before = names(&dev, d);
        let (dev, d) = indexed_dir(400, 20);
        let inode = read_inode(&dev, d);
        assert_ne!(inode.i_flags & EXT2_INDEX_FL, 0, "indexed again");
        let (_, root) = read_dir_block(&dev, &inode, 0);
        let info = DxRootInfo::read(&root).unwrap();
        assert_eq!((info.info_length, info.indirect_levels), (8, 0));
        assert_eq!(names(&dev, d), before);
        let snap = dev.snapshot();
        let r = run(&dev, Mode::No);
        assert_eq!(r.exit_code(), 0, "{:?}", r.problems);
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        assert!(snap == dev.snapshot());
        let r = run(&dev, Mode::Yes);
        assert_eq!(r.exit_code(), 0, "{:?}", r.problems);
    }

    #[test]
    fn dash_d_indexes_a_linear_directory_without_calling_it_a_fix() {
        let (dev, d) = image_with_dir(400, 20);
        let before = names(&dev, d);
        assert_eq!(read_inode(&dev, d).i_flags & EXT2_INDEX_FL, 0);
        let opts = FsckOptions {
            mode: Mode::Yes,
            force: true,
            compress_dirs: true,
            ..Default::default()
        };
        let r = check(&dev, &opts).unwrap();
        assert_eq!(r.exit_code(), 0, "{:?}", r.problems);
        assert_ne!(read_inode(&dev, d).i_flags & EXT2_INDEX_FL, 0);
        assert_eq!(names(&dev, d), before);
        let r = run(&dev, Mode::No);
        assert!(r.problems.is_empty(), "{:?}", r.problems);
    }

    #[test]
    fn an_unordered_interior_node_is_found_and_the_directory_rebuilt() {
        // 2000 names of 60 bytes: 13 to a leaf, so two levels of index.
        let (dev, d) = indexed_dir(2000, 60);
        let before = names(&dev, d);
        assert_eq!(before.len(), 2002);
        let inode = read_inode(&dev, d);
        let (_, root) = read_dir_block(&dev, &inode, 0);
        let info = DxRootInfo::read(&root).unwrap();
        assert_eq!(info.indirect_levels, 1);
        let off = info.entries_offset();
        let node = dx_entry(&root, off, 1).unwrap().1;
        let (blk, mut buf) = read_dir_block(&dev, &inode, u64::from(node));
        let (h1, b1) = dx_entry(&buf, DX_NODE_ENTRIES_OFFSET, 1).unwrap();
        let (h2, b2) = dx_entry(&buf, DX_NODE_ENTRIES_OFFSET, 2).unwrap();
        assert!(h1 < h2);
        set_dx_entry(&mut buf, DX_NODE_ENTRIES_OFFSET, 1, h2, b1);
        set_dx_entry(&mut buf, DX_NODE_ENTRIES_OFFSET, 2, h1, b2);
        dev.write_at(&buf, u64::from(blk) * 1024).unwrap();

        let snap = dev.snapshot();
        let r = run(&dev, Mode::No);
        assert_eq!(r.exit_code(), exit::UNCORRECTED, "{:?}", r.problems);
        let want = format!(
            "Problem in HTREE directory inode {d}: block #{node} has an unordered hash table"
        );
        assert_eq!(r.problems[0], want);
        assert!(snap == dev.snapshot(), "-n changed the image");

        let r = run(&dev, Mode::Yes);
        assert_eq!(r.exit_code(), exit::NONDESTRUCT, "{:?}", r.problems);
        assert_eq!(r.problems, vec![want]);
        assert_ne!(read_inode(&dev, d).i_flags & EXT2_INDEX_FL, 0);
        assert_eq!(names(&dev, d), before);
        let r = run(&dev, Mode::No);
        assert_eq!(r.exit_code(), 0, "{:?}", r.problems);
    }

    #[test]
    fn a_leaf_out_of_its_range_is_reported_at_the_end_of_pass_2() {
        let (dev, d) = indexed_dir(400, 20);
        let inode = read_inode(&dev, d);
        let (blk, mut root) = read_dir_block(&dev, &inode, 0);
        let off = DxRootInfo::read(&root).unwrap().entries_offset();
        // Point entry 1 at the block entry 2 points at, and back.
        let (h1, b1) = dx_entry(&root, off, 1).unwrap();
        let (h2, b2) = dx_entry(&root, off, 2).unwrap();
        set_dx_entry(&mut root, off, 1, h1, b2);
        set_dx_entry(&mut root, off, 2, h2, b1);
        dev.write_at(&root, u64::from(blk) * 1024).unwrap();
        let r = run(&dev, Mode::No);
        assert_eq!(r.exit_code(), exit::UNCORRECTED, "{:?}", r.problems);
        let p = format!("Problem in HTREE directory inode {d}: block #");
        assert_eq!(
            r.problems,
            vec![
                format!("{p}{b1} has bad min hash"),
                format!("{p}{b2} has bad max hash"),
                format!("Invalid HTREE directory inode {d} (/d)."),
            ],
            "blocks {b1} and {b2} swapped"
        );
        let r = run(&dev, Mode::Yes);
        assert_eq!(r.exit_code(), exit::NONDESTRUCT, "{:?}", r.problems);
        let r = run(&dev, Mode::No);
        assert_eq!(r.exit_code(), 0, "{:?}", r.problems);
    }

    #[test]
    fn corrupt_counts_and_limits_never_panic() {
        let (dev, d) = indexed_dir(400, 20);
        let inode = read_inode(&dev, d);
        let (blk, good) = read_dir_block(&dev, &inode, 0);
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..200 {
            let mut root = good.clone();
            // Poke the root info, the countlimit and the table.
            for _ in 0..1 + round % 4 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let at = 24 + (seed as usize >> 8) % 120;
                root[at] = (seed >> 40) as u8;
            }
            let dev = MemoryDevice::from_vec(dev.snapshot());
            dev.write_at(&root, u64::from(blk) * 1024).unwrap();
            let snap = dev.snapshot();
            let _ = run(&dev, Mode::No);
            assert!(snap == dev.snapshot());
            let r = run(&dev, Mode::Yes);
            assert!(r.exit_code() <= exit::NONDESTRUCT, "{:?}", r.problems);
            let r = run(&dev, Mode::No);
            assert_eq!(r.exit_code(), 0, "round {round}: {:?}", r.problems);
        }
    }

    // With e2fsprogs at hand: e2fsck judges the trees fsck builds, and
    // fsck judges the trees e2fsck builds.

    fn tool(name: &str) -> Option<std::path::PathBuf> {
        ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
            .iter()
            .map(|d| std::path::Path::new(d).join(name))
            .find(|p| p.exists())
    }

    fn scratch(tag: &str) -> std::path::PathBuf {
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            std::path::PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        base.join(format!("jbdfs-htree-{tag}-{}.img", std::process::id()))
    }

    fn e2fsck_fn(img: &std::path::Path) -> std::process::Output {
        let e2fsck = tool("e2fsck").unwrap();
        std::process::Command::new(e2fsck)
            .args(["-fn"])
            .arg(img)
            .env("LC_ALL", "C")
            .output()
            .unwrap()
    }

    #[test]
    fn e2fsck_finds_the_rebuilt_trees_valid() {
        if tool("e2fsck").is_none() {
            eprintln!("skipped: no e2fsck");
            return;
        }
        for (files, len) in [(400, 20), (2000, 60)] {
            let (dev, _) = indexed_dir(files, len);
            let img = scratch("rebuilt");
            std::fs::write(&img, dev.snapshot()).unwrap();
            let o = e2fsck_fn(&img);
            let _ = std::fs::remove_file(&img);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
        }
    }

    #[test]
    fn an_index_e2fsck_built_is_clean_and_its_damage_repaired() {
        let (Some(mke2fs), Some(debugfs), Some(e2fsck)) =
            (tool("mke2fs"), tool("debugfs"), tool("e2fsck"))
        else {
            eprintln!("skipped: e2fsprogs missing");
            return;
        };
        let img = scratch("e2fsck-built");
        let cmds = img.with_extension("cmds");
        let sh = |prog: &std::path::Path, args: &[&std::ffi::OsStr]| {
            std::process::Command::new(prog)
                .args(args)
                .env("LC_ALL", "C")
                .env("MKE2FS_CONFIG", "/dev/null")
                .output()
                .unwrap()
        };
        std::fs::File::create(&img)
            .unwrap()
            .set_len(8 << 20)
            .unwrap();
        let o = sh(
            &mke2fs,
            &[
                "-q",
                "-F",
                "-t",
                "ext3",
                "-b",
                "1024",
                "-N",
                "2048",
                "-O",
                "dir_index",
            ]
            .map(std::ffi::OsStr::new)
            .iter()
            .copied()
            .chain([img.as_os_str()])
            .collect::<Vec<_>>(),
        );
        assert!(o.status.success(), "{o:?}");
        let mut script = String::from("mkdir d\n");
        for i in 0..1500 {
            script.push_str(&format!("write /dev/null d/name-{i:040}\n"));
        }
        std::fs::write(&cmds, script).unwrap();
        let o = sh(
            &debugfs,
            &[
                std::ffi::OsStr::new("-w"),
                std::ffi::OsStr::new("-f"),
                cmds.as_os_str(),
                img.as_os_str(),
            ],
        );
        assert!(o.status.success(), "{o:?}");
        // -D indexes every directory of more than one block.
        let o = sh(&e2fsck, &[std::ffi::OsStr::new("-fyD"), img.as_os_str()]);
        assert!(o.status.code().is_some_and(|c| c <= 1), "{o:?}");
        let dev = MemoryDevice::from_vec(std::fs::read(&img).unwrap());
        let _ = std::fs::remove_file(&img);
        let _ = std::fs::remove_file(&cmds);

        let r = run(&dev, Mode::No);
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        assert_eq!(r.exit_code(), 0);
        let root_dir = names(&dev, EXT2_ROOT_INO);
        assert!(root_dir.contains(&b"d".to_vec()));
        // Find "d": the first directory after lost+found (inode 12).
        let d = 12;
        let inode = read_inode(&dev, d);
        assert_ne!(inode.i_flags & EXT2_INDEX_FL, 0, "e2fsck -D indexed it");
        let before = names(&dev, d);
        let (blk, mut root) = read_dir_block(&dev, &inode, 0);
        let off = DxRootInfo::read(&root).unwrap().entries_offset();
        let (h1, b1) = dx_entry(&root, off, 1).unwrap();
        let (h2, b2) = dx_entry(&root, off, 2).unwrap();
        set_dx_entry(&mut root, off, 1, h2, b1);
        set_dx_entry(&mut root, off, 2, h1, b2);
        dev.write_at(&root, u64::from(blk) * 1024).unwrap();
        let r = run(&dev, Mode::Yes);
        assert_eq!(r.exit_code(), exit::NONDESTRUCT, "{:?}", r.problems);
        assert_eq!(
            r.problems,
            vec![format!(
                "Problem in HTREE directory inode {d}: block #0 has an unordered hash table"
            )]
        );
        assert_eq!(names(&dev, d), before);
        std::fs::write(&img, dev.snapshot()).unwrap();
        let o = e2fsck_fn(&img);
        let _ = std::fs::remove_file(&img);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    }
}
