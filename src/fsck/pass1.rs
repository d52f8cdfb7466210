//! Pass 1 (e2fsck's pass1.c): scan every inode from the in-memory tables;
//! decide which are in use; walk their block maps, clearing illegal
//! pointers and noting blocks claimed twice; check extended attribute
//! blocks, symlinks and device inodes; fix i_size and i_blocks; list the
//! directory blocks for pass 2.

use std::io;

use crate::format::inode::{self as fi, flags, ino as rsv, Inode};
use crate::format::superblock::feature;
use crate::format::xattr::{h_refcount, set_h_refcount};

use super::context::{Ctx, DirBlock};
use super::walk::{walk, Act, Claim};

pub fn run(ctx: &mut Ctx) -> io::Result<()> {
    ctx.problems
        .say("Pass 1: Checking inodes, blocks, and sizes");
    let total = ctx.sb.s_inodes_count;
    for ino in 1..=total {
        if ino % ctx.ipg() == 0 {
            ctx.progress(1, u64::from(ino), u64::from(total));
        }
        check_inode(ctx, ino)?;
        if ctx.unsupported.is_some() {
            return Ok(());
        }
    }
    check_ea_refcounts(ctx)?;
    Ok(())
}

fn check_inode(ctx: &mut Ctx, ino: u32) -> io::Result<()> {
    if super::badblocks::skip_inode(ctx, ino) {
        return Ok(());
    }
    let links = ctx.raw_links(ino);
    let mode = ctx.raw_mode(ino);
    let dtime = ctx.raw_dtime(ino);
    let first = ctx.sb.first_ino();
    ctx.info[ino as usize].mode = mode;
    ctx.info[ino as usize].links = links;
    if ino == rsv::EXT2_ROOT_INO && links != 0 && mode & fi::S_IFMT != fi::S_IFDIR {
        if ctx
            .problems
            .ask("Root inode is not a directory.  ", "Clear")
        {
            ctx.clear_inode(ino)?;
        }
        return Ok(());
    }
    // A small dtime is an orphan list link that was never processed.
    let low_dtime = dtime != 0 && dtime < ctx.sb.s_inodes_count && low_dtime_check(ctx);
    if low_dtime {
        let msg = format!("Inode {ino} was part of the orphaned inode list.  ");
        if ctx.problems.ask_safe(&msg, "Fix") {
            let mut inode = ctx.inode(ino);
            inode.i_dtime = if links != 0 { 0 } else { ctx.now };
            ctx.write_inode(ino, &inode);
        }
    }
    if (links != 0 || ino < first) && check_feature_flags(ctx, ino)? {
        return Ok(());
    }
    if ino < first && ino != rsv::EXT2_ROOT_INO {
        return check_reserved(ctx, ino, mode);
    }
    if low_dtime {
        if links != 0 {
            return check_in_use(ctx, ino, ctx.raw_dtime(ino));
        }
        return Ok(());
    }
    if links == 0 {
        if ino >= first && mode != 0 && dtime == 0 {
            let msg = format!("Deleted inode {ino} has zero dtime.  ");
            if ctx.problems.ask_safe(&msg, "Fix") {
                let mut inode = ctx.inode(ino);
                inode.i_dtime = ctx.now;
                ctx.write_inode(ino, &inode);
            }
        }
        return Ok(());
    }
    check_in_use(ctx, ino, dtime)
}

/// e2fsck takes small dtimes for orphan links unless the filesystem was
/// made at a time that small itself.
fn low_dtime_check(ctx: &Ctx) -> bool {
    let sb = &ctx.sb;
    !(sb.s_mkfs_time != 0 && sb.s_mkfs_time < sb.s_inodes_count)
}

fn check_in_use(ctx: &mut Ctx, ino: u32, dtime: u32) -> io::Result<()> {
    let mut inode = ctx.inode(ino);
    let mut dirty = fix_extra_isize(ctx, ino, &mut inode);
    if dtime != 0 {
        let msg = format!("Inode {ino} is in use, but has dtime set.  ");
        if ctx.problems.ask_safe(&msg, "Fix") {
            inode.i_dtime = 0;
            dirty = true;
        }
    }
    ctx.info[ino as usize].used = true;
    dirty |= check_is_really_dir(ctx, ino, &mut inode);
    if let Some(why) = bad_inode(ctx, &inode) {
        let msg = format!("Inode {ino} ({why}) is invalid.\n");
        if ctx.problems.ask(&msg, "Clear") {
            ctx.info[ino as usize].used = false;
            inode.i_links_count = 0;
            inode.i_dtime = ctx.now;
            ctx.write_inode(ino, &inode);
            return Ok(());
        }
    }
    if check_flags(ctx, ino, &mut inode, &mut dirty)? {
        return Ok(());
    }
    dirty |= check_ibody_xattrs(ctx, ino, &mut inode);
    dirty |= check_zero_fields(ctx, ino, &mut inode);
    dirty |= check_special(ctx, ino, &mut inode);
    dirty |= check_blocks(ctx, ino, &mut inode)?;
    if dirty {
        ctx.write_inode(ino, &inode);
    }
    Ok(())
}

/// Flags of features ext3 lacks, in e2fsck's order and with its answers
/// (casefold, ea_inode, inline data, extents), for every inode in use and
/// every reserved one. Returns whether the inode was cleared (or the check
/// must stop: an extent tree is ext4's data, not damage to clear).
fn check_feature_flags(ctx: &mut Ctx, ino: u32) -> io::Result<bool> {
    const CASEFOLD_FL: u32 = 0x4000_0000;
    let mut inode = ctx.inode(ino);
    let mut dirty = false;
    let mut drop_flag = |ctx: &mut Ctx, inode: &mut Inode, flag: u32, msg: String| {
        if inode.i_flags & flag != 0 && ctx.problems.ask_safe(&msg, "Clear flag") {
            inode.i_flags &= !flag;
            dirty = true;
        }
    };
    if inode.is_dir() {
        let msg = format!(
            "Directory inode {ino} has the casefold flag, but the\ncasefold feature is not enabled.  "
        );
        drop_flag(ctx, &mut inode, CASEFOLD_FL, msg);
    } else {
        let msg = format!("Inode {ino} has the casefold flag set but is not a directory.  ");
        drop_flag(ctx, &mut inode, CASEFOLD_FL, msg);
    }
    // A regular file marked as an xattr value inode keeps its data: only
    // the flag goes (e2fsck tracks it as an EA inode, which ext3 lacks).
    let msg = if inode.is_reg() {
        format!("Inode {ino} has EA_INODE flag set on a filesystem without ea_inode.  ")
    } else {
        format!("Inode {ino} has the ea_inode flag set but is not a regular file.  ")
    };
    drop_flag(ctx, &mut inode, flags::EXT4_EA_INODE_FL, msg);
    if dirty {
        ctx.write_inode(ino, &inode);
    }
    let first = ctx.sb.first_ino();
    if inode.i_flags & flags::EXT4_INLINE_DATA_FL != 0 && ino >= first {
        let msg = format!(
            "Inode {ino} has INLINE_DATA_FL flag on filesystem without inline data support.\n"
        );
        if ctx.problems.ask(&msg, "Clear") {
            ctx.clear_inode(ino)?;
            return Ok(true);
        }
    }
    let counted = inode.i_links_count != 0
        || matches!(
            ino,
            rsv::EXT2_BAD_INO | rsv::EXT2_ROOT_INO | rsv::EXT2_JOURNAL_INO
        );
    if inode.i_flags & flags::EXT4_EXTENTS_FL == 0 || !counted {
        return Ok(false);
    }
    if crate::format::extent::header_is_valid(&inode.i_block_bytes()) {
        ctx.unsupported = Some(format!(
            "extents (inode {ino} holds a valid extent tree, but the superblock lacks the extents feature: e2fsck would set it, making this an ext4 filesystem; fsck.jbdfs changed nothing)"
        ));
        return Ok(true);
    }
    let msg =
        format!("Inode {ino} has EXTENTS_FL flag set on filesystem without extents support.\n");
    if ctx.problems.ask(&msg, "Clear") {
        ctx.clear_inode(ino)?;
        if ino == rsv::EXT2_BAD_INO {
            ctx.info[ino as usize].used = true;
        }
        return Ok(true);
    }
    Ok(false)
}

/// e2fsck's `check_ea_in_inode` hash check: a wrong hash means the entry
/// table is not to be trusted, and e2fsck drops the in-inode attributes
/// (their values cannot be told from garbage).
fn check_ibody_xattrs(ctx: &mut Ctx, ino: u32, inode: &mut Inode) -> bool {
    let Some(hash) = crate::format::xattr::ibody_bad_hash(inode.xattr_area()) else {
        return false;
    };
    let msg = format!("Extended attribute in inode {ino} has a hash ({hash}) which is invalid\n");
    if !ctx.problems.ask(&msg, "Clear") {
        return false;
    }
    let empty = vec![0u8; inode.xattr_area().len()];
    inode.set_xattr_area(&empty)
}

/// Flags that contradict the inode's type. Returns whether the inode was
/// cleared.
fn check_flags(ctx: &mut Ctx, ino: u32, inode: &mut Inode, dirty: &mut bool) -> io::Result<bool> {
    const IMAGIC_FL: u32 = 0x0000_2000;
    let is_dir = inode.is_dir();
    let mut drop_flag = |ctx: &mut Ctx, flag: u32, msg: String, question: &str| {
        if inode.i_flags & flag != 0 && ctx.problems.ask_safe(&msg, question) {
            inode.i_flags &= !flag;
            *dirty = true;
        }
    };
    if !is_dir {
        drop_flag(
            ctx,
            flags::EXT2_INDEX_FL,
            format!("Inode {ino} has INDEX_FL flag set but is not a directory.\n"),
            "Clear HTree index",
        );
    }
    if !ctx
        .sb
        .has_compat(crate::format::superblock::feature::COMPAT_IMAGIC_INODES)
    {
        drop_flag(
            ctx,
            IMAGIC_FL,
            format!("Inode {ino} has imagic flag set.  "),
            "Clear",
        );
    }
    Ok(false)
}

/// e2fsck's `check_is_really_dir`: a device, fifo or socket whose first
/// block holds "." (itself) and ".." is a directory with a damaged mode.
fn check_is_really_dir(ctx: &mut Ctx, ino: u32, inode: &mut Inode) -> bool {
    use crate::format::dirent as de;
    let kind = match inode.file_type() {
        fi::S_IFCHR => "character device",
        fi::S_IFBLK => "block device",
        fi::S_IFIFO => "named pipe",
        fi::S_IFSOCK => "socket",
        _ => return false,
    };
    if inode.i_block[0] == 0 {
        return false;
    }
    let mut not_device = false;
    for (i, &b) in inode.i_block.iter().enumerate().filter(|(_, &b)| b != 0) {
        not_device |= i >= 4;
        if !ctx.block_ok(b) || ctx.found.get(u64::from(b)) {
            return false;
        }
    }
    let device = matches!(inode.file_type(), fi::S_IFCHR | fi::S_IFBLK);
    if device && inode.i_links_count == 1 && !not_device {
        return false;
    }
    let Ok(block) = ctx.read_block(inode.i_block[0]) else {
        return false;
    };
    let bs = block.len();
    let dot_len = de::rec_len_at(&block, 0);
    let dot_ok = de::name_at(&block, 0) == b"."
        && de::inode_at(&block, 0) == ino
        && dot_len >= 12
        && dot_len % 4 == 0
        && dot_len < bs - 12;
    if !dot_ok {
        return false;
    }
    let dotdot_len = de::rec_len_at(&block, dot_len);
    if de::name_at(&block, dot_len) != b".." || dotdot_len < 12 || dotdot_len % 4 != 0 {
        return false;
    }
    let msg = format!("Inode {ino} is a {kind} but it looks like it is really a directory.\n");
    if !ctx.problems.ask(&msg, "Fix") {
        return false;
    }
    inode.i_mode = (inode.i_mode & 0o7777) | fi::S_IFDIR;
    ctx.info[ino as usize].mode = inode.i_mode;
    true
}

/// Device, fifo and socket inodes have no size; they and symlinks may not
/// be immutable or append-only (e2fsck's `check_size`, `check_immutable`).
fn check_special(ctx: &mut Ctx, ino: u32, inode: &mut Inode) -> bool {
    let special = matches!(
        inode.file_type(),
        fi::S_IFCHR | fi::S_IFBLK | fi::S_IFIFO | fi::S_IFSOCK
    );
    let mut dirty = false;
    let sticky = flags::EXT2_IMMUTABLE_FL | flags::EXT2_APPEND_FL;
    if (special || inode.is_symlink()) && inode.i_flags & sticky != 0 {
        let msg = format!("Special (device/socket/fifo/symlink) file (inode {ino}) has immutable\nor append-only flag set.  ");
        if ctx.problems.ask_safe(&msg, "Clear") {
            inode.i_flags &= !sticky;
            dirty = true;
        }
    }
    if special && inode.i_size != 0 {
        let msg = format!("Special (device/socket/fifo) inode {ino} has non-zero size.  ");
        if ctx.problems.ask_safe(&msg, "Fix") {
            inode.i_size = 0;
            dirty = true;
        }
    }
    dirty
}

/// Fields ext3 leaves zero: i_faddr, the high half of i_file_acl, and a
/// directory's high size (no largedir).
fn check_zero_fields(ctx: &mut Ctx, ino: u32, inode: &mut Inode) -> bool {
    let raw = ctx.raw_inode(ino);
    let acl_hi = fi::raw::l_i_file_acl_high(raw);
    let mut dirty = false;
    if inode.i_faddr != 0 {
        let msg = format!(
            "i_faddr for inode {ino} is {}, should be zero.\n",
            inode.i_faddr
        );
        if ctx.problems.ask(&msg, "Clear") {
            inode.i_faddr = 0;
            dirty = true;
        }
    }
    if acl_hi != 0 {
        let msg = format!("i_file_acl_hi for inode {ino} is {acl_hi}, should be zero.\n");
        if ctx.problems.ask(&msg, "Clear") {
            let mut bytes = inode.to_bytes();
            fi::raw::set_l_i_file_acl_high(&mut bytes, 0);
            if let Ok(fixed) = Inode::parse(&bytes) {
                *inode = fixed;
                dirty = true;
            }
        }
    }
    if inode.is_dir() && inode.i_size >> 32 != 0 {
        let msg = format!(
            "i_size_high for inode {ino} is {}, should be zero.\n",
            inode.i_size >> 32
        );
        if ctx.problems.ask(&msg, "Clear") {
            inode.i_size &= 0xffff_ffff;
            dirty = true;
        }
    }
    dirty
}

/// Reserved inodes below s_first_ino: in use whatever their link count.
fn check_reserved(ctx: &mut Ctx, ino: u32, mode: u16) -> io::Result<()> {
    if ino == rsv::EXT2_BAD_INO {
        return super::badblocks::check_bad_inode(ctx);
    }
    ctx.info[ino as usize].used = true;
    let mut inode = ctx.inode(ino);
    let bad_mode = match ino {
        rsv::EXT2_BOOT_LOADER_INO => inode.is_dir(),
        rsv::EXT2_RESIZE_INO => mode != 0 && !inode.is_reg(),
        rsv::EXT2_JOURNAL_INO if ctx.sb.has_compat(feature::COMPAT_HAS_JOURNAL) => false,
        _ => mode != 0,
    };
    let mut dirty = false;
    let unused_journal =
        ino == rsv::EXT2_JOURNAL_INO && !ctx.sb.has_compat(feature::COMPAT_HAS_JOURNAL);
    let quota = matches!(ino, rsv::EXT4_USR_QUOTA_INO | rsv::EXT4_GRP_QUOTA_INO);
    let has_data = inode.i_links_count != 0 || inode.i_blocks != 0 || inode.i_block[0] != 0;
    if (unused_journal || quota) && has_data {
        let what = if quota { "Quota" } else { "Journal" };
        let msg = format!("{what} inode is not in use, but contains data.  ");
        if ctx.problems.ask_safe(&msg, "Clear") {
            ctx.write_inode(ino, &Inode::new(ctx.isz, 0));
        }
        return Ok(());
    }
    if bad_mode {
        let msg = format!("Reserved inode {ino} (<reserved inode {ino}>) has invalid mode.  ");
        if ctx.problems.ask(&msg, "Clear") {
            inode.i_mode = 0;
            dirty = true;
        }
    }
    dirty |= check_blocks(ctx, ino, &mut inode)?;
    if dirty {
        ctx.write_inode(ino, &inode);
    }
    Ok(())
}

fn fix_extra_isize(ctx: &mut Ctx, ino: u32, inode: &mut Inode) -> bool {
    if ctx.isz <= 128 {
        return false;
    }
    let raw_extra = fi::raw::i_extra_isize(ctx.raw_inode(ino));
    if raw_extra == inode.i_extra_isize {
        return false;
    }
    let msg = format!("Inode {ino} has a extra size ({raw_extra}) which is invalid\n");
    if ctx.problems.ask_safe(&msg, "Fix") {
        inode.i_extra_isize = 32.min(ctx.isz as u16 - 128);
        return true;
    }
    false
}

/// Why e2fsck would call this in-use inode bad (`mark_inode_bad`), for the
/// cases it then clears.
fn bad_inode(ctx: &Ctx, inode: &Inode) -> Option<&'static str> {
    match inode.file_type() {
        fi::S_IFDIR | fi::S_IFREG => None,
        fi::S_IFLNK => (!symlink_ok(ctx, inode)).then_some("invalid symlink"),
        fi::S_IFCHR | fi::S_IFBLK | fi::S_IFIFO | fi::S_IFSOCK => {
            // e2fsprogs 1.47 no longer checks i_block[4..] (the Hurd
            // keeps device numbers there).
            let bad_flags = inode.i_flags & (flags::EXT2_INDEX_FL | flags::EXT4_EXTENTS_FL) != 0;
            bad_flags.then_some("invalid special file")
        }
        _ => Some("invalid mode"),
    }
}

/// e2fsck's `e2fsck_pass1_check_symlink`: a target of exactly i_size
/// bytes, NUL-free, in i_block or in the one block it names.
fn symlink_ok(ctx: &Ctx, inode: &Inode) -> bool {
    let size = inode.i_size;
    let bad_flags = flags::EXT2_INDEX_FL | flags::EXT4_EXTENTS_FL;
    if size == 0 || size >> 32 != 0 || inode.i_flags & bad_flags != 0 {
        return false;
    }
    let target_len = |buf: &[u8]| buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    if super::context::is_fast_symlink(inode) {
        let bytes = inode.i_block_bytes();
        let len = target_len(&bytes);
        return len < bytes.len() && len as u64 == size;
    }
    let blk = inode.i_block[0];
    if inode.i_block[1..].iter().any(|&b| b != 0) || !ctx.block_ok(blk) {
        return false;
    }
    match ctx.read_block(blk) {
        Ok(buf) => {
            let len = target_len(&buf);
            len < buf.len() && len as u64 == size
        }
        Err(_) => false,
    }
}

/// What walking one inode's blocks found.
#[derive(Default)]
struct Tally {
    blocks: u64,
    last: Option<u64>,
    previous: Option<u32>,
    fragmented: bool,
}

/// e2fsck's `check_blocks`: claims the inode's blocks and fixes the
/// pointers, i_size and i_blocks.
fn check_blocks(ctx: &mut Ctx, ino: u32, inode: &mut Inode) -> io::Result<bool> {
    let mut dirty = check_ea_block(ctx, ino, inode)?;
    let mut t = Tally::default();
    if inode.i_file_acl != 0 {
        t.blocks += 1;
    }
    let is_dir = inode.is_dir();
    if ctx.maps_blocks(inode) {
        let resize = ino == rsv::EXT2_RESIZE_INO;
        let mut dir_blocks = Vec::new();
        let changed = walk(ctx, &mut inode.i_block, false, &mut |ctx, blk, claim| {
            let list = if is_dir { Some(&mut dir_blocks) } else { None };
            claim_block(ctx, ino, blk, claim, resize, &mut t, list)
        })?;
        dirty |= changed;
        if is_dir {
            note_holes(ctx, ino, &dir_blocks);
            ctx.dir_blocks.extend(dir_blocks);
        }
    }
    dirty |= super::htree::check_root(ctx, ino, inode)?;
    ctx.info[ino as usize].has_data = t.last.is_some() || inode.i_size != 0;
    if t.fragmented
        && ino != rsv::EXT2_RESIZE_INO
        && t.blocks < u64::from(ctx.sb.s_blocks_per_group)
    {
        ctx.fragmented += 1;
    }
    if is_dir && t.last.is_none() && ino >= ctx.sb.first_ino() {
        let msg = format!("Inode {ino} is a zero-length directory.  ");
        if ctx.problems.ask(&msg, "Clear") {
            ctx.info[ino as usize].used = false;
            inode.i_links_count = 0;
            inode.i_dtime = ctx.now;
            return Ok(true);
        }
    }
    dirty |= check_size(ctx, ino, inode, &t);
    if inode.is_reg() && inode.i_size >= LARGE_FILE_SIZE {
        ctx.large_files += 1;
    }
    let sectors = t.blocks * u64::from(ctx.bs / 512);
    if inode.i_blocks != sectors {
        let msg = format!(
            "Inode {ino}, i_blocks is {}, should be {sectors}.  ",
            inode.i_blocks
        );
        if ctx.problems.ask_safe(&msg, "Fix") {
            inode.i_blocks = sectors;
            dirty = true;
        }
    }
    Ok(dirty)
}

fn claim_block(
    ctx: &mut Ctx,
    ino: u32,
    blk: u32,
    claim: Claim,
    resize: bool,
    t: &mut Tally,
    dir_blocks: Option<&mut Vec<DirBlock>>,
) -> Act {
    if let (Some(_), Claim::Data(l)) = (&dir_blocks, claim) {
        if l > max_dir_block(ctx.bs) {
            // e2fsck's PR_1_TOOBIG_DIR: past 2 GiB a directory's block is
            // ignored (or cleared); its holes are not offered one by one.
            let msg = format!(
                "Inode {ino} is too big.  Block #{l} ({blk}) causes directory to be too big.  "
            );
            if ctx.problems.ask(&msg, "CLEARED") {
                return Act::Clear;
            }
            return Act::Keep;
        }
    }
    if !ctx.block_ok(blk) {
        let which = match claim {
            Claim::Data(l) => format!("#{l}"),
            Claim::Ind(1) => "#IND".to_string(),
            Claim::Ind(2) => "#DIND".to_string(),
            Claim::Ind(_) => "#TIND".to_string(),
        };
        let msg = format!("Illegal block {which} ({blk}) in inode {ino}.  ");
        if ctx.problems.ask(&msg, "CLEARED") {
            return Act::Clear;
        }
        return Act::Keep;
    }
    t.blocks += 1;
    if t.previous.is_some_and(|p| p.wrapping_add(1) != blk) {
        t.fragmented = true;
    }
    t.previous = Some(blk);
    if let Claim::Data(l) = claim {
        t.last = Some(t.last.map_or(l, |x| x.max(l)));
        if let (Some(list), Ok(lblk)) = (dir_blocks, u32::try_from(l)) {
            list.push(DirBlock { blk, ino, lblk });
        }
    }
    // The resize inode's other blocks are the reserved GDT blocks, already
    // claimed as metadata; only its double-indirect block is its own.
    if !resize || claim == Claim::Ind(2) {
        mark_used(ctx, blk);
    }
    Act::Keep
}

/// The last logical block a directory may have without largedir: 2 GiB,
/// e2fsck's `1 << (21 - s_log_block_size)`.
fn max_dir_block(block_size: u32) -> u64 {
    (1u64 << 31) / u64::from(block_size.max(1024))
}

/// Directory blocks below the last one that are not mapped: pass 2 offers
/// to allocate them (only direct blocks can be given one).
fn note_holes(ctx: &mut Ctx, ino: u32, blocks: &[DirBlock]) {
    let Some(last) = blocks.iter().map(|d| d.lblk).max() else {
        return;
    };
    let mut mapped = vec![false; last as usize + 1];
    for d in blocks {
        mapped[d.lblk as usize] = true;
    }
    for (lblk, m) in mapped.iter().enumerate() {
        if !m {
            ctx.dir_holes.push((ino, lblk as u32));
        }
    }
}

pub fn mark_used(ctx: &mut Ctx, blk: u32) {
    if ctx.found.set(u64::from(blk)) {
        ctx.dups.insert(blk);
    }
}

/// e2fsck's i_size rules for directories and other files.
fn check_size(ctx: &mut Ctx, ino: u32, inode: &mut Inode, t: &Tally) -> bool {
    if inode.is_symlink() || !ctx.maps_blocks(inode) && inode.i_size == 0 {
        return false;
    }
    let bs = u64::from(ctx.bs);
    let blocks_end = t.last.map_or(0, |l| (l + 1) * bs);
    let size = inode.i_size;
    let bad = if inode.is_dir() {
        size % bs != 0 || size / bs > t.last.map_or(0, |l| l + 1) || size < blocks_end
    } else {
        // e2fsck's ext2_max_sizes: what the block map reaches. The
        // kernel's lower ext3_max_size (i_blocks' limit) binds writers,
        // not what an image may hold: a sparse file may end beyond it.
        let max = crate::format::indirect::max_file_blocks(ctx.bs)
            .map_or(u64::MAX, |b| b.saturating_mul(bs));
        t.last.is_some_and(|l| size < l * bs) || size > max
    };
    if !bad || ino == rsv::EXT2_RESIZE_INO || ino == rsv::EXT2_JOURNAL_INO && size >= blocks_end {
        return false;
    }
    let msg = format!("Inode {ino}, i_size is {size}, should be {blocks_end}.  ");
    if ctx.problems.ask_safe(&msg, "Fix") {
        inode.i_size = blocks_end;
        let needs_flag = !ctx.sb.has_ro_compat(feature::RO_COMPAT_LARGE_FILE);
        if inode.is_reg() && blocks_end >= LARGE_FILE_SIZE && needs_flag {
            ctx.set_large_file();
        }
        return true;
    }
    false
}

/// `ext2fs_needs_large_file_feature`: sizes from 2 GiB need large_file.
pub const LARGE_FILE_SIZE: u64 = 0x8000_0000;

/// Checks `i_file_acl`: in range, a valid block, counted once per inode.
fn check_ea_block(ctx: &mut Ctx, ino: u32, inode: &mut Inode) -> io::Result<bool> {
    let b = inode.i_file_acl;
    if b == 0 {
        return Ok(false);
    }
    if let Some(r) = ctx.ea_refs.get_mut(&b) {
        *r += 1;
        return Ok(false);
    }
    if let Some(msg) = ea_block_problem(ctx, ino, b) {
        if ctx.problems.ask(&msg, "Clear") {
            inode.i_file_acl = 0;
            return Ok(true);
        }
        return Ok(false);
    }
    ctx.ea_refs.insert(b, 1);
    mark_used(ctx, b);
    Ok(false)
}

/// What is wrong with inode `ino`'s xattr block `b`, in e2fsck's words.
fn ea_block_problem(ctx: &Ctx, ino: u32, b: u32) -> Option<String> {
    use crate::format::xattr::{block_bad_hash, parse_block};
    if !ctx.sb.has_compat(feature::COMPAT_EXT_ATTR) {
        return Some(format!(
            "i_file_acl for inode {ino} is {b}, should be zero.\n"
        ));
    }
    if !ctx.block_ok(b) {
        return Some(format!(
            "Extended attribute block for inode {ino} is invalid ({b}).\n"
        ));
    }
    let block = ctx.read_block(b).ok();
    let Some(block) = block.filter(|blk| parse_block(blk).is_ok()) else {
        return Some(format!(
            "Inode {ino} has a bad extended attribute block {b}.  "
        ));
    };
    block_bad_hash(&block).map(|hash| {
        format!("Extended attribute in inode {ino} has a hash ({hash}) which is invalid\n")
    })
}

/// Each extended attribute block's h_refcount must match its users.
fn check_ea_refcounts(ctx: &mut Ctx) -> io::Result<()> {
    let mut refs: Vec<(u32, u32)> = ctx.ea_refs.iter().map(|(&b, &n)| (b, n)).collect();
    refs.sort_unstable();
    for (b, n) in refs {
        let mut blk = ctx.read_block(b)?;
        let have = h_refcount(&blk).map_err(io::Error::other)?;
        if have == n {
            continue;
        }
        let msg =
            format!("Extended attribute block {b} has reference count {have}, should be {n}.  ");
        if ctx.problems.ask(&msg, "Fix") {
            set_h_refcount(&mut blk, n).map_err(io::Error::other)?;
            ctx.write_block(b, &blk)?;
        }
    }
    Ok(())
}
