//! The journal mkfs creates in inode 8: its size, its block map and its
//! superblock. Its blocks are taken from the middle of the filesystem with
//! each indirect block in line just before the data it maps, as mke2fs
//! places them, so that the log lies in one run on disk.

use std::io;

use super::geometry::Geometry;
use super::layout::{Allocator, Writer};
use super::{MkfsError, MkfsOptions, Result, Zeroed};
use crate::format::jbd::{self, JournalSuperblock};
use crate::util::Progress;

/// The smallest journal JBD accepts.
const MIN_JOURNAL_BLOCKS: u32 = 1024;
const MAX_JOURNAL_BLOCKS: u64 = 10_240_000;

pub(super) fn journal_blocks(opts: &MkfsOptions, g: &Geometry) -> Result<u32> {
    let Some(mib) = opts.journal_mib else {
        return Ok(jbd::default_journal_blocks(g.blocks_count as u64));
    };
    let blocks = mib.saturating_mul(1 << 20) / g.block_size as u64;
    if blocks < MIN_JOURNAL_BLOCKS as u64
        || blocks > MAX_JOURNAL_BLOCKS
        || blocks > g.blocks_count as u64 / 2
    {
        return Err(MkfsError::BadJournalSize(mib));
    }
    Ok(blocks as u32)
}

/// The journal inode's block map, built in allocation order so that each
/// indirect block sits just before the data it maps.
pub(super) struct JournalMap {
    pub(super) i_block: [u32; 15],
    /// Journal data blocks in logical order.
    pub(super) data: Vec<u32>,
    /// Indirect blocks and their contents.
    pub(super) indirect: Vec<(u32, Vec<u32>)>,
}

impl JournalMap {
    /// No journal blocks (`-S` writes none).
    pub(super) fn none() -> Self {
        JournalMap {
            i_block: [0; 15],
            data: Vec::new(),
            indirect: Vec::new(),
        }
    }
}

pub(super) fn build_journal(g: &Geometry, alloc: &mut Allocator) -> JournalMap {
    let goal = g.group(g.groups / 2).data_start;
    let ptrs = (g.block_size / 4) as u64;
    let mut map = JournalMap {
        i_block: [0; 15],
        data: Vec::with_capacity(g.journal_blocks as usize),
        indirect: Vec::new(),
    };
    let mut left = g.journal_blocks as u64;
    let mut next_goal = goal;
    for slot in 0..12 {
        if left == 0 {
            break;
        }
        let b = alloc.next(next_goal);
        next_goal = b;
        map.i_block[slot] = b;
        map.data.push(b);
        left -= 1;
    }
    for depth in 1..=3u32 {
        if left == 0 {
            break;
        }
        map.i_block[11 + depth as usize] = map_tree(depth, ptrs, &mut left, alloc, &mut map);
    }
    map
}

/// Allocates an indirect block of `depth` and, under it, up to `left` blocks.
fn map_tree(
    depth: u32,
    ptrs: u64,
    left: &mut u64,
    alloc: &mut Allocator,
    map: &mut JournalMap,
) -> u32 {
    let node = alloc.next(0);
    let idx = map.indirect.len();
    map.indirect.push((node, vec![0; ptrs as usize]));
    for slot in 0..ptrs as usize {
        if *left == 0 {
            break;
        }
        let child = if depth == 1 {
            let b = alloc.next(0);
            map.data.push(b);
            *left -= 1;
            b
        } else {
            map_tree(depth - 1, ptrs, left, alloc, map)
        };
        map.indirect[idx].1[slot] = child;
    }
    node
}

impl Writer<'_> {
    pub(super) fn write_journal(
        &self,
        j: &JournalMap,
        uuid: &[u8; 16],
        progress: &mut Progress,
    ) -> io::Result<()> {
        let bs = self.g.block_size as usize;
        for (blk, ptrs) in &j.indirect {
            let mut buf = vec![0u8; bs];
            for (i, p) in ptrs.iter().enumerate() {
                buf[4 * i..4 * i + 4].copy_from_slice(&p.to_le_bytes());
            }
            self.write_block(*blk, &buf)?;
        }
        // Stale data in the log cannot be mistaken for transactions once
        // zeroed; on a zeroed device there is nothing to do.
        if self.zeroed == Zeroed::Nothing {
            for run in contiguous_runs(&j.data[1..]) {
                self.zero_range(run.0, run.1)?;
            }
        }
        let _ = progress;
        let jsb = JournalSuperblock::new(self.g.block_size, self.g.journal_blocks, *uuid)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut buf = vec![0u8; bs];
        buf[..jbd::JOURNAL_SUPERBLOCK_LEN].copy_from_slice(&jsb.to_bytes());
        self.dev.write_at(&buf, self.offset(j.data[0]))
    }
}

fn contiguous_runs(blocks: &[u32]) -> Vec<(u32, u32)> {
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for &b in blocks {
        match runs.last_mut() {
            Some((s, n)) if *s + *n == b => *n += 1,
            _ => runs.push((b, 1)),
        }
    }
    runs
}
