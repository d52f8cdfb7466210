//! Pass 4 (e2fsck's pass4.c): every inode in use must be referenced; an
//! unreferenced one is cleared when empty or reconnected to /lost+found;
//! then each link count must equal the references counted.

use std::io;

use crate::format::inode::ino::EXT2_ROOT_INO;

use super::context::Ctx;

/// `EXT2_LINK_MAX`: the most links e2fsck lets an inode count.
const EXT2_LINK_MAX: u32 = 65000;

pub fn run(ctx: &mut Ctx) -> io::Result<()> {
    ctx.problems.say("Pass 4: Checking reference counts");
    let first = ctx.sb.first_ino();
    let total = ctx.sb.s_inodes_count;
    for ino in 1..=total {
        if ino % ctx.ipg() == 0 {
            ctx.progress(4, u64::from(ino), u64::from(total));
        }
        if (ino < first && ino != EXT2_ROOT_INO)
            || !ctx.info[ino as usize].used
            || super::badblocks::inode_is_bad(ctx, ino)
        {
            continue;
        }
        if ctx.info[ino as usize].counted == 0 && !disconnected(ctx, ino)? {
            continue;
        }
        let info = ctx.info[ino as usize];
        let Some(counted) = expected_links(ctx, ino, &info) else {
            continue;
        };
        if info.is_dir() && info.links == 1 && counted > 1 && dir_nlink(ctx) {
            // Overflowed once; e2fsck offers the exact count back.
            let msg = format!(
                "Directory inode {ino} ref count set to overflow but could be exact value {counted}.  "
            );
            let indexed = ctx.inode(ino).i_flags & crate::format::inode::flags::EXT2_INDEX_FL != 0;
            if indexed && ctx.problems.mode() != super::Mode::No {
                if ctx.problems.ask_safe(&msg, "Fix") {
                    let mut inode = ctx.inode(ino);
                    inode.i_links_count = counted;
                    ctx.write_inode(ino, &inode);
                }
                continue;
            }
        }
        if info.links != counted {
            let msg = format!(
                "Inode {ino} ref count is {}, should be {counted}.  ",
                info.links
            );
            if ctx.problems.ask_safe(&msg, "Fix") {
                let mut inode = ctx.inode(ino);
                inode.i_links_count = counted;
                ctx.write_inode(ino, &inode);
            }
        }
    }
    Ok(())
}

fn dir_nlink(ctx: &Ctx) -> bool {
    ctx.sb
        .has_ro_compat(crate::format::superblock::feature::RO_COMPAT_DIR_NLINK)
}

/// The link count inode `ino` should have: its references, or 1 for a
/// directory past EXT2_LINK_MAX, which needs dir_nlink (set as e2fsck
/// sets it). `None` when the count cannot be written.
fn expected_links(ctx: &mut Ctx, ino: u32, info: &super::context::InodeInfo) -> Option<u16> {
    if info.counted <= EXT2_LINK_MAX {
        return Some(info.counted as u16);
    }
    if !info.is_dir() {
        ctx.problems.unfixable(&format!(
            "Inode {ino} has {} links, more than a link count holds.",
            info.counted
        ));
        return None;
    }
    if !dir_nlink(ctx) {
        let msg = "Directory exceeds max links, but no DIR_NLINK feature in superblock.\n";
        if !ctx.problems.ask(msg, "Fix") {
            return None;
        }
        ctx.sb.s_feature_ro_compat |= crate::format::superblock::feature::RO_COMPAT_DIR_NLINK;
        ctx.sb_dirty = true;
    }
    Some(1)
}

/// e2fsck's `disconnect_inode`. Returns whether the inode is still in use
/// (and so needs its link count checked).
fn disconnected(ctx: &mut Ctx, ino: u32) -> io::Result<bool> {
    let inode = ctx.inode(ino);
    if inode.i_blocks == 0 && (inode.is_reg() || inode.is_dir()) {
        let msg = format!("Unattached zero-length inode {ino}.  ");
        if ctx.problems.ask_safe(&msg, "Clear") {
            ctx.clear_inode(ino)?;
            return Ok(false);
        }
    } else {
        let msg = format!("Unattached inode {ino}\n");
        if ctx.problems.ask(&msg, "Connect to /lost+found") && super::pass3::reconnect(ctx, ino)? {
            return Ok(true);
        }
    }
    Ok(false)
}
