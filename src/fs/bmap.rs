//! Block mapping (Linux: ext3_get_blocks in fs/ext3/inode.c): translate a
//! file's logical blocks to disk blocks through the direct pointers and the
//! single, double and triple indirect blocks, allocating on write.
//!
//! A call maps a run of up to `max` blocks that are contiguous on disk and
//! live under the same last-level pointer block, and says whether the run
//! ends at that block's edge (`boundary`): the next logical block then
//! lives under a different indirect block. The boundary is judged on the
//! count mapped in this call, not only on the first block, which is the
//! ext3 bug (flagging only when the first block sat at the edge) that cost
//! Linux a fifth of its sequential read speed.

use std::sync::Arc;

use super::inode::InodeState;
use super::{Filesystem, FsError, Result};
use crate::cache::Buffer;
use crate::format::inode::EXT2_N_BLOCKS;
use crate::format::{BlockNo, Corruption, FormatError, InodeNo, Location};
use crate::journal::Handle;

pub use crate::format::indirect::EXT3_NDIR_BLOCKS;
use crate::format::indirect::{block_to_path, BlockPath};

/// The path of `logical` for this block size, or EFBIG past the map's reach.
fn path_of(block_size: u32, logical: u32) -> Result<BlockPath> {
    block_to_path(block_size, logical as u64).map_err(|_| FsError::FileTooBig)
}

/// A mapped run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// The first disk block, or `None` for a hole.
    pub physical: Option<BlockNo>,
    pub count: u32,
    /// The next logical block after the run lives under another pointer block.
    pub boundary: bool,
    /// The blocks were allocated by this call (their contents are garbage).
    pub new: bool,
    /// The pointer block holding the run's pointers (`None` for direct).
    pub leaf: Option<BlockNo>,
}

fn slot(buf: &[u8], i: u32) -> u32 {
    let o = i as usize * 4;
    u32::from_le_bytes([buf[o], buf[o + 1], buf[o + 2], buf[o + 3]])
}

fn set_slot(buf: &mut [u8], i: u32, v: u32) {
    let o = i as usize * 4;
    buf[o..o + 4].copy_from_slice(&v.to_le_bytes());
}

/// The pointers of the last level: either the inode's `i_block` or an
/// indirect block's buffer.
enum Leaf {
    Inode,
    Block(Arc<Buffer>),
}

impl Filesystem {
    /// Checks a block pointer read from disk before it is followed.
    pub(crate) fn check_block_ptr(&self, ino: InodeNo, b: u32) -> Result<BlockNo> {
        self.check_ptr(ino, b)
    }

    fn check_ptr(&self, ino: InodeNo, b: u32) -> Result<BlockNo> {
        let sb = self.sb.lock();
        if b < sb.s_first_data_block || b >= sb.s_blocks_count {
            let err = FormatError::bad_field(
                "inode",
                "i_block",
                b,
                "block pointer outside the filesystem",
            );
            return Err(Corruption::new(Location::Inode(ino), err).into());
        }
        Ok(BlockNo(b))
    }

    /// Maps up to `max` blocks from `logical` without allocating.
    pub fn map_blocks(
        &self,
        ino: InodeNo,
        st: &InodeState,
        logical: u32,
        max: u32,
    ) -> Result<Mapping> {
        let path = path_of(self.block_size, logical)?;
        let (leaf, _) = self.walk(ino, st, &path, None)?;
        let max = max.clamp(1, path.blocks_to_boundary + 1);
        let Some(leaf) = leaf else {
            return Ok(hole_mapping(max, &path));
        };
        let last = path.offsets()[path.depth - 1];
        let read = |i: u32| match &leaf {
            Leaf::Inode => st.disk.i_block[i as usize],
            Leaf::Block(b) => slot(&b.read(), i),
        };
        let first = read(last);
        let mut count = 1;
        while count < max {
            let next = read(last + count);
            let contiguous = if first == 0 {
                next == 0
            } else {
                next == first + count
            };
            if !contiguous {
                break;
            }
            count += 1;
        }
        let leaf_block = match &leaf {
            Leaf::Inode => None,
            Leaf::Block(b) => Some(b.block()),
        };
        if first == 0 {
            return Ok(Mapping {
                leaf: leaf_block,
                ..hole_mapping(count, &path)
            });
        }
        let physical = self.check_ptr(ino, first)?;
        if first as u64 + count as u64 > self.sb.lock().s_blocks_count as u64 {
            return Err(FsError::CorruptInode(
                ino,
                format!("block run at {first} runs off the filesystem"),
            ));
        }
        Ok(Mapping {
            physical: Some(physical),
            count,
            boundary: count > path.blocks_to_boundary,
            new: false,
            leaf: leaf_block,
        })
    }

    /// Follows `path` to its last level. With a handle, missing pointer
    /// blocks are allocated; without one, a missing level yields `None`.
    fn walk(
        &self,
        ino: InodeNo,
        st: &InodeState,
        path: &BlockPath,
        mut alloc: Option<(&mut Handle<'_>, &mut AllocCtx)>,
    ) -> Result<(Option<Leaf>, bool)> {
        if path.depth == 1 {
            return Ok((Some(Leaf::Inode), false));
        }
        let mut ptr = st.disk.i_block[path.offsets()[0] as usize];
        let mut parent: Option<Arc<Buffer>> = None;
        let mut changed_inode = false;
        for level in 1..path.depth {
            if ptr == 0 {
                let Some((h, ctx)) = alloc.as_mut() else {
                    return Ok((None, false));
                };
                ptr = self.alloc_pointer_block(h, ctx)?.0;
                match &parent {
                    None => {
                        ctx.set_i_block(path.offsets()[0] as usize, ptr);
                        changed_inode = true;
                    }
                    Some(p) => {
                        h.get_write_access(p)?;
                        set_slot(&mut p.write(), path.offsets()[level - 1], ptr);
                        h.dirty_metadata(p)?;
                    }
                }
            }
            let b = self.check_ptr(ino, ptr)?;
            let buf = self.cache.get(b)?;
            let next = if level + 1 < path.depth {
                slot(&buf.read(), path.offsets()[level])
            } else {
                0
            };
            parent = Some(buf);
            ptr = next;
        }
        Ok((parent.map(Leaf::Block), changed_inode))
    }

    fn alloc_pointer_block(&self, h: &mut Handle<'_>, ctx: &mut AllocCtx) -> Result<BlockNo> {
        let (b, _) = self.alloc_blocks(h, ctx.goal, 1, ctx.privileged)?;
        ctx.goal = BlockNo(b.0 + 1);
        ctx.allocated += 1;
        let buf = self.cache.get_new(b)?;
        h.get_write_access(&buf)?;
        h.dirty_metadata(&buf)?;
        Ok(b)
    }

    /// Maps up to `max` blocks from `logical`, allocating a contiguous run
    /// for a hole. Updates `st.disk.i_block` and `i_blocks`; the caller
    /// writes the inode.
    pub fn get_blocks(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        st: &mut InodeState,
        logical: u32,
        max: u32,
        privileged: bool,
    ) -> Result<Mapping> {
        let existing = self.map_blocks(ino, st, logical, max)?;
        if existing.physical.is_some() {
            return Ok(existing);
        }
        let path = path_of(self.block_size, logical)?;
        let mut ctx = AllocCtx {
            goal: self.alloc_goal(ino, st, logical),
            privileged,
            allocated: 0,
            i_block: st.disk.i_block,
        };
        let (leaf, _) = self.walk(ino, st, &path, Some((h, &mut ctx)))?;
        let leaf = leaf.ok_or(FsError::Invalid("block map walk found no leaf"))?;
        let want = existing.count.clamp(1, path.blocks_to_boundary + 1);
        let (first, n) = self.alloc_blocks(h, ctx.goal, want, privileged)?;
        let last = path.offsets()[path.depth - 1];
        match &leaf {
            Leaf::Inode => {
                for i in 0..n {
                    ctx.i_block[(last + i) as usize] = first.0 + i;
                }
            }
            Leaf::Block(buf) => {
                h.get_write_access(buf)?;
                let mut data = buf.write();
                for i in 0..n {
                    set_slot(&mut data, last + i, first.0 + i);
                }
                drop(data);
                h.dirty_metadata(buf)?;
            }
        }
        st.disk.i_block = ctx.i_block;
        let sectors = (self.block_size / 512) as u64;
        st.disk.i_blocks += (ctx.allocated + n) as u64 * sectors;
        st.last_alloc = Some(BlockNo(first.0 + n - 1));
        Ok(Mapping {
            physical: Some(first),
            count: n,
            boundary: n > path.blocks_to_boundary,
            new: true,
            leaf: match &leaf {
                Leaf::Inode => None,
                Leaf::Block(b) => Some(b.block()),
            },
        })
    }

    /// The goal for a new block: after the file's last allocation, after
    /// the block mapped just before, or the start of the inode's group.
    fn alloc_goal(&self, ino: InodeNo, st: &InodeState, logical: u32) -> BlockNo {
        if let Some(last) = st.last_alloc {
            return BlockNo(last.0 + 1);
        }
        if logical > 0 {
            if let Ok(m) = self.map_blocks(ino, st, logical - 1, 1) {
                if let Some(p) = m.physical {
                    return BlockNo(p.0 + 1);
                }
            }
        }
        let sb = self.sb.lock();
        let (g, _) = sb.inode_group(ino.0);
        sb.group_first_block(g)
    }
}

fn hole_mapping(count: u32, path: &BlockPath) -> Mapping {
    Mapping {
        physical: None,
        count,
        boundary: count > path.blocks_to_boundary,
        new: false,
        leaf: None,
    }
}

/// State carried through one allocating walk.
struct AllocCtx {
    goal: BlockNo,
    privileged: bool,
    /// Pointer blocks allocated so far.
    allocated: u32,
    i_block: [u32; EXT2_N_BLOCKS],
}

impl AllocCtx {
    fn set_i_block(&mut self, i: usize, v: u32) {
        self.i_block[i] = v;
    }
}
