//! Pass 5 (e2fsck's pass5.c): compare the block and inode bitmaps on disk
//! with what passes 1-4 found in use, check the bitmaps' padding, and the
//! free block, free inode and directory counts of every group and of the
//! superblock; when fixing, write the bitmaps and counts as found.

use std::io;

use crate::format::GroupNo;

use super::context::Ctx;
use super::problem::Severity;

pub fn run(ctx: &mut Ctx) -> io::Result<()> {
    ctx.problems
        .say("Pass 5: Checking group summary information");
    check_bitmaps(ctx, Kind::Blocks)?;
    check_bitmaps(ctx, Kind::Inodes)?;
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Blocks,
    Inodes,
}

impl Kind {
    fn noun(self) -> &'static str {
        match self {
            Kind::Blocks => "block",
            Kind::Inodes => "inode",
        }
    }
}

/// One group's bitmap: where it is, what is on disk and what should be.
struct GroupMap {
    at: u32,
    disk: Vec<u8>,
    want: Vec<u8>,
    /// Items (blocks or inodes) in this group.
    items: u32,
    /// Bits the orphan list released (already cleared in `disk`).
    released: bool,
}

fn group_map(ctx: &mut Ctx, kind: Kind, g: u32) -> io::Result<GroupMap> {
    let d = ctx.descs[g as usize];
    let (at, items, first) = match kind {
        Kind::Blocks => (
            d.bg_block_bitmap,
            ctx.sb.blocks_in_group(GroupNo(g)),
            u64::from(ctx.sb.group_first_block(GroupNo(g)).0),
        ),
        Kind::Inodes => (
            d.bg_inode_bitmap,
            ctx.ipg(),
            u64::from(g) * u64::from(ctx.ipg()) + 1,
        ),
    };
    let mut disk = if ctx.block_ok(at) {
        ctx.read_block(at)?
    } else {
        vec![0u8; ctx.bs as usize]
    };
    let freed = free_released(ctx, kind, g, (first, items), &mut disk);
    let mut want = vec![0u8; ctx.bs as usize];
    for i in 0..items {
        let used = match kind {
            Kind::Blocks => ctx.found.get(first + u64::from(i)),
            Kind::Inodes => ctx.info[(first + u64::from(i)) as usize].used,
        };
        if used {
            want[(i / 8) as usize] |= 1 << (i % 8);
        }
    }
    for i in items..ctx.bs * 8 {
        want[(i / 8) as usize] |= 1 << (i % 8);
    }
    Ok(GroupMap {
        at,
        disk,
        want,
        items,
        released: freed > 0,
    })
}

/// Clears in group `g`'s bitmap `disk` the items the orphan list released,
/// and counts them free in the descriptor and superblock.
fn free_released(
    ctx: &mut Ctx,
    kind: Kind,
    g: u32,
    (first, items): (u64, u32),
    disk: &mut [u8],
) -> u16 {
    let released = match kind {
        Kind::Blocks => &ctx.released_blocks,
        Kind::Inodes => &ctx.released_inodes,
    };
    let mut freed = 0u16;
    for &x in released {
        let x = u64::from(x);
        if x >= first && x < first + u64::from(items) {
            let i = (x - first) as u32;
            if bit(disk, i) {
                disk[(i / 8) as usize] &= !(1 << (i % 8));
                freed += 1;
            }
        }
    }
    if freed > 0 {
        let d = &mut ctx.descs[g as usize];
        match kind {
            Kind::Blocks => {
                d.bg_free_blocks_count = d.bg_free_blocks_count.saturating_add(freed);
                ctx.sb.s_free_blocks_count =
                    ctx.sb.s_free_blocks_count.saturating_add(u32::from(freed));
            }
            Kind::Inodes => {
                d.bg_free_inodes_count = d.bg_free_inodes_count.saturating_add(freed);
                ctx.sb.s_free_inodes_count =
                    ctx.sb.s_free_inodes_count.saturating_add(u32::from(freed));
            }
        }
        ctx.descs_dirty = true;
        ctx.sb_dirty = true;
    }
    freed
}

/// Frees what the orphan list released when the passes do not run (a clean
/// filesystem, not forced: e2fsck still processes the list first).
pub fn write_released(ctx: &mut Ctx) -> io::Result<()> {
    for kind in [Kind::Blocks, Kind::Inodes] {
        for g in 0..ctx.groups() {
            let d = ctx.descs[g as usize];
            let (at, range) = match kind {
                Kind::Blocks => (
                    d.bg_block_bitmap,
                    (
                        u64::from(ctx.sb.group_first_block(GroupNo(g)).0),
                        ctx.sb.blocks_in_group(GroupNo(g)),
                    ),
                ),
                Kind::Inodes => (
                    d.bg_inode_bitmap,
                    (u64::from(g) * u64::from(ctx.ipg()) + 1, ctx.ipg()),
                ),
            };
            if !ctx.block_ok(at) {
                continue;
            }
            let mut disk = ctx.read_block(at)?;
            if free_released(ctx, kind, g, range, &mut disk) > 0 {
                ctx.write_block(at, &disk)?;
            }
        }
    }
    Ok(())
}

fn bit(map: &[u8], i: u32) -> bool {
    map[(i / 8) as usize] & (1 << (i % 8)) != 0
}

/// e2fsck's " +(a--b) -c" list of differences.
fn differences(ctx: &Ctx, kind: Kind, maps: &[GroupMap]) -> String {
    let mut out = String::new();
    let mut run: Option<(bool, u64, u64)> = None;
    let flush = |out: &mut String, r: (bool, u64, u64)| {
        let sign = if r.0 { '+' } else { '-' };
        if r.1 == r.2 {
            out.push_str(&format!(" {sign}{}", r.1));
        } else {
            out.push_str(&format!(" {sign}({}--{})", r.1, r.2));
        }
    };
    for (g, m) in maps.iter().enumerate() {
        let base = match kind {
            Kind::Blocks => u64::from(ctx.sb.group_first_block(GroupNo(g as u32)).0),
            Kind::Inodes => g as u64 * u64::from(ctx.ipg()) + 1,
        };
        for i in 0..m.items {
            let (want, have) = (bit(&m.want, i), bit(&m.disk, i));
            if want == have {
                continue;
            }
            let n = base + u64::from(i);
            match run {
                Some((s, a, b)) if s == want && b + 1 == n => run = Some((s, a, n)),
                Some(r) => {
                    flush(&mut out, r);
                    run = Some((want, n, n));
                }
                None => run = Some((want, n, n)),
            }
        }
    }
    if let Some(r) = run {
        flush(&mut out, r);
    }
    out
}

fn check_bitmaps(ctx: &mut Ctx, kind: Kind) -> io::Result<()> {
    let groups = ctx.groups();
    let mut maps = Vec::with_capacity(groups as usize);
    for g in 0..groups {
        let half = if kind == Kind::Blocks { 0 } else { groups };
        ctx.progress(5, u64::from(half + g), 2 * u64::from(groups));
        maps.push(group_map(ctx, kind, g)?);
    }
    let noun = kind.noun();
    let diffs = differences(ctx, kind, &maps);
    let mut write = false;
    if !diffs.is_empty() {
        let title = if kind == Kind::Blocks {
            "Block"
        } else {
            "Inode"
        };
        write |= ctx
            .problems
            .ask_safe(&format!("{title} bitmap differences: {diffs}\n"), "Fix");
    }
    for (g, m) in maps.iter().enumerate() {
        let pad_ok = (m.items..ctx.bs * 8).all(|i| bit(&m.disk, i));
        if !pad_ok {
            let msg = format!("Padding at end of {noun} bitmap is not set. ");
            write |= ctx.problems.ask_safe(&msg, "Fix");
            let _ = g;
            break;
        }
    }
    for m in &mut maps {
        if !ctx.block_ok(m.at) {
            continue;
        }
        if write && m.disk != m.want {
            ctx.write_block(m.at, &m.want)?;
            m.disk = m.want.clone();
        } else if m.released {
            ctx.write_block(m.at, &m.disk)?;
        }
    }
    check_counts(ctx, kind, &maps, write)
}

/// Free counts per group and in total, from the bitmap as it now stands.
fn check_counts(ctx: &mut Ctx, kind: Kind, maps: &[GroupMap], fixed: bool) -> io::Result<()> {
    let mut total_free = 0u64;
    for (g, m) in maps.iter().enumerate() {
        let map = if fixed { &m.want } else { &m.disk };
        let free = (0..m.items).filter(|&i| !bit(map, i)).count() as u32;
        total_free += u64::from(free);
        let d = ctx.descs[g];
        let have = match kind {
            Kind::Blocks => d.bg_free_blocks_count,
            Kind::Inodes => d.bg_free_inodes_count,
        };
        let noun = if kind == Kind::Blocks {
            "blocks"
        } else {
            "inodes"
        };
        if u32::from(have) != free {
            let msg = format!("Free {noun} count wrong for group #{g} ({have}, counted={free}).\n");
            if ctx.problems.ask_safe(&msg, "Fix") {
                let d = &mut ctx.descs[g];
                match kind {
                    Kind::Blocks => d.bg_free_blocks_count = free as u16,
                    Kind::Inodes => d.bg_free_inodes_count = free as u16,
                }
                ctx.descs_dirty = true;
            }
        }
        if kind == Kind::Inodes {
            check_dirs_count(ctx, g as u32, map);
        }
    }
    let have = match kind {
        Kind::Blocks => ctx.sb.s_free_blocks_count,
        Kind::Inodes => ctx.sb.s_free_inodes_count,
    };
    if u64::from(have) != total_free {
        let noun = if kind == Kind::Blocks {
            "blocks"
        } else {
            "inodes"
        };
        let msg = format!("Free {noun} count wrong ({have}, counted={total_free}).\n");
        if ctx.problems.ask_with(&msg, "Fix", Severity::NoOk) {
            match kind {
                Kind::Blocks => ctx.sb.s_free_blocks_count = total_free as u32,
                Kind::Inodes => ctx.sb.s_free_inodes_count = total_free as u32,
            }
            ctx.sb_dirty = true;
        }
    }
    Ok(())
}

fn check_dirs_count(ctx: &mut Ctx, g: u32, map: &[u8]) {
    let base = g * ctx.ipg() + 1;
    let dirs = (0..ctx.ipg())
        .filter(|&i| bit(map, i) && ctx.info[(base + i) as usize].is_dir())
        .count() as u32;
    let have = ctx.descs[g as usize].bg_used_dirs_count;
    if u32::from(have) != dirs {
        let msg = format!("Directories count wrong for group #{g} ({have}, counted={dirs}).\n");
        if ctx.problems.ask_safe(&msg, "Fix") {
            ctx.descs[g as usize].bg_used_dirs_count = dirs as u16;
            ctx.descs_dirty = true;
        }
    }
}
