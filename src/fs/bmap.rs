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
//!
//! Where newly allocated blocks should go is goal.rs's to say.

use std::sync::Arc;

use super::goal::{first_under, inline_position, Basis, Pin, LAYOUT_MIN_FILE};
use super::inode::InodeState;
use super::{Filesystem, FsError, Result};
use crate::cache::Buffer;
use crate::format::indirect;
use crate::format::inode::EXT2_N_BLOCKS;
use crate::format::{BlockNo, Corruption, FormatError, InodeNo, Location};
use crate::journal::Handle;

pub use crate::format::indirect::EXT3_NDIR_BLOCKS;
use crate::format::indirect::{block_to_path, BlockPath};

/// The path of `logical` for this block size, or EFBIG past the map's reach.
pub(super) fn path_of(block_size: u32, logical: u32) -> Result<BlockPath> {
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

/// Pointer `i` of indirect block `b`, whose bytes are `data`.
pub(super) fn slot(b: BlockNo, data: &[u8], i: u32) -> Result<u32> {
    indirect::get_ptr(data, i)
        .map(|p| p.0)
        .map_err(|e| Corruption::new(Location::Block(b), e).into())
}

/// Sets pointer `i` of indirect block `b`, whose bytes are `data`.
fn set_slot(b: BlockNo, data: &mut [u8], i: u32, v: u32) -> Result<()> {
    indirect::set_ptr(data, i, BlockNo(v))
        .map_err(|e| Corruption::new(Location::Block(b), e).into())
}

/// The pointers of the last level: either the inode's `i_block` or an
/// indirect block's buffer.
pub(super) enum Leaf {
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

    /// The disk block holding logical block `logical` of `ino`, or `None`
    /// for a hole (FIBMAP's answer).
    pub fn bmap(&self, ino: InodeNo, logical: u32) -> Result<Option<BlockNo>> {
        let inode = self.iget(ino)?;
        let st = inode.state.read();
        Ok(self.map_blocks(ino, &st, logical, 1)?.physical)
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
        let max = max.min(self.max_map).clamp(1, path.blocks_to_boundary + 1);
        let Some(leaf) = leaf else {
            return Ok(hole_mapping(max, &path));
        };
        let last = path.offsets()[path.depth - 1];
        let read = |i: u32| match &leaf {
            Leaf::Inode => Ok(st.disk.i_block[i as usize]),
            Leaf::Block(b) => slot(b.block(), &b.read(), i),
        };
        let first = read(last)?;
        let mut count = 1;
        while count < max {
            let next = read(last + count)?;
            // A corrupt pointer near u32::MAX must end the run, not wrap.
            let contiguous = if first == 0 {
                next == 0
            } else {
                first.checked_add(count) == Some(next)
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
            return Err(FsError::corrupt(
                Location::Inode(ino),
                "inode",
                "i_block",
                first,
                "a run of contiguous block pointers from it passes the end of the filesystem",
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
    pub(super) fn walk(
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
                ptr = self.alloc_pointer_block(h, ctx, path, level)?.0;
                match &parent {
                    None => {
                        ctx.set_i_block(path.offsets()[0] as usize, ptr);
                        changed_inode = true;
                    }
                    Some(p) => {
                        let mut data = h.modify(p)?;
                        set_slot(p.block(), &mut data, path.offsets()[level - 1], ptr)?;
                    }
                }
            }
            let b = self.check_ptr(ino, ptr)?;
            let buf = self.cache.get(b)?;
            let next = if level + 1 < path.depth {
                slot(b, &buf.read(), path.offsets()[level])?
            } else {
                0
            };
            parent = Some(buf);
            ptr = next;
        }
        Ok((parent.map(Leaf::Block), changed_inode))
    }

    /// The pointer block that holds `logical`'s pointer: `None` for a
    /// direct block or when a level of the path is missing. The levels
    /// above it are read (through the cache); the block itself is not.
    pub(crate) fn leaf_location(
        &self,
        ino: InodeNo,
        st: &InodeState,
        logical: u32,
    ) -> Result<Option<BlockNo>> {
        let path = path_of(self.block_size, logical)?;
        if path.depth == 1 {
            return Ok(None);
        }
        let mut ptr = st.disk.i_block[path.offsets()[0] as usize];
        for level in 1..path.depth - 1 {
            if ptr == 0 {
                return Ok(None);
            }
            let b = self.check_ptr(ino, ptr)?;
            let buf = self.cache.get(b)?;
            ptr = slot(b, &buf.read(), path.offsets()[level])?;
        }
        if ptr == 0 {
            return Ok(None);
        }
        self.check_ptr(ino, ptr).map(Some)
    }

    /// Allocates the pointer block at `level` of `path`, in line: just
    /// before the first data block it maps, after the pointer blocks above.
    fn alloc_pointer_block(
        &self,
        h: &mut Handle<'_>,
        ctx: &mut AllocCtx,
        path: &BlockPath,
        level: usize,
    ) -> Result<BlockNo> {
        let bs = self.block_size;
        let first = first_under(bs, ctx.logical, level);
        let ahead = (path.depth - level) as u64;
        let goal = self.goal_from(ctx.pin, inline_position(bs, first) - ahead);
        let (b, _) = self.alloc_for_inode(h, ctx.ino, goal, 1, ctx.privileged, ctx.blocks)?;
        // Noted before anything else can fail, so that an undo frees it.
        ctx.pointers.push((level, b.0));
        let buf = self.cache.get_new(b)?;
        // Zeroed, it joins the transaction as it is.
        h.modify(&buf)?;
        Ok(b)
    }

    /// Maps up to `max` blocks from `logical`, allocating a contiguous run
    /// for a hole. Updates `st.disk.i_block` and `i_blocks`; the caller
    /// writes the inode. On failure (ENOSPC for the data after its pointer
    /// blocks were allocated) nothing is left allocated and the block map
    /// is as it was.
    pub fn get_blocks(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        st: &mut InodeState,
        logical: u32,
        max: u32,
        privileged: bool,
    ) -> Result<Mapping> {
        let mut new = NewBlocks::default();
        self.get_blocks_noting(h, ino, st, logical, max, privileged, &mut new)
    }

    /// [`Self::get_blocks`], adding what it allocated to `new`, for a
    /// caller that may have to undo a series of calls
    /// ([`Self::unmap_new`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn get_blocks_noting(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        st: &mut InodeState,
        logical: u32,
        max: u32,
        privileged: bool,
        new: &mut NewBlocks,
    ) -> Result<Mapping> {
        let existing = self.map_blocks(ino, st, logical, max)?;
        if existing.physical.is_some() {
            return Ok(existing);
        }
        let sectors = (self.block_size / 512) as u64;
        // The whole request, not only the part under this pointer block,
        // tells how large the file is about to be: a 1 MiB write from
        // block 0 is a large file from its first direct block on.
        let size = (st.disk.i_blocks / sectors).max(logical as u64 + max as u64);
        let basis = self.alloc_goal(ino, st, logical, max);
        let pin = basis.pin(self.block_size);
        let mut ctx = AllocCtx {
            pin,
            logical,
            ino,
            blocks: size,
            privileged,
            pointers: Vec::new(),
            data: None,
            i_block: st.disk.i_block,
        };
        let res = self.allocate_run(h, st, &mut ctx, existing.count, basis);
        let mine = NewBlocks {
            data: ctx
                .data
                .map(|(first, n)| (logical, first, n))
                .into_iter()
                .collect(),
            pointers: ctx.pointers.iter().map(|&(l, b)| (logical, l, b)).collect(),
        };
        match res {
            Ok(m) => {
                st.disk.i_block = ctx.i_block;
                st.disk.i_blocks += mine.total() * sectors;
                st.last_alloc = ctx.data.map(|(first, n)| BlockNo(first + n - 1));
                new.data.extend(mine.data);
                new.pointers.extend(mine.pointers);
                Ok(m)
            }
            Err(e) => {
                // `st` never saw ctx's copy of i_block: only pointers set in
                // existing pointer blocks need clearing.
                if let Err(u) = self.unmap_new(h, ino, st, &mine) {
                    tracing::error!(inode = ino.0, "undoing a failed block allocation: {u}");
                }
                Err(e)
            }
        }
    }

    /// The allocating part of [`Self::get_blocks_noting`]: everything it
    /// allocates is noted in `ctx` as soon as it is allocated.
    fn allocate_run(
        &self,
        h: &mut Handle<'_>,
        st: &InodeState,
        ctx: &mut AllocCtx,
        hole: u32,
        basis: Basis,
    ) -> Result<Mapping> {
        let (ino, logical, pin) = (ctx.ino, ctx.logical, ctx.pin);
        let path = path_of(self.block_size, logical)?;
        let (leaf, _) = self.walk(ino, st, &path, Some((&mut *h, &mut *ctx)))?;
        let leaf = leaf.ok_or(FsError::Invalid("block map walk found no leaf"))?;
        let want = hole.clamp(1, path.blocks_to_boundary + 1);
        let goal = self.goal_from(pin, inline_position(self.block_size, logical));
        let (first, n) = self.alloc_for_inode(h, ino, goal, want, ctx.privileged, ctx.blocks)?;
        ctx.data = Some((first.0, n));
        if ctx.blocks >= LAYOUT_MIN_FILE {
            self.record_layout(ino, basis, logical, goal, first);
        }
        let last = path.offsets()[path.depth - 1];
        match &leaf {
            Leaf::Inode => {
                for i in 0..n {
                    ctx.i_block[(last + i) as usize] = first.0 + i;
                }
            }
            Leaf::Block(buf) => {
                let mut data = h.modify(buf)?;
                for i in 0..n {
                    set_slot(buf.block(), &mut data, last + i, first.0 + i)?;
                }
            }
        }
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

    /// Gives back blocks that get_blocks calls allocated: clears every
    /// pointer to them that `st` or a pointer block holds (deepest first,
    /// while the levels above are still there to be followed) and frees
    /// them. `i_blocks` is the caller's to restore.
    pub(crate) fn unmap_new(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        st: &mut InodeState,
        new: &NewBlocks,
    ) -> Result<()> {
        for &(logical, first, n) in new.data.iter().rev() {
            let path = path_of(self.block_size, logical)?;
            let last = path.offsets()[path.depth - 1];
            let holder = match path.depth {
                1 => None,
                d => match self.pointer_block_at(ino, st, &path, d - 1)? {
                    Some(buf) => Some(buf),
                    None => continue,
                },
            };
            self.clear_slots(h, st, holder.as_ref(), last, first, n)?;
        }
        for &(logical, level, b) in new.pointers.iter().rev() {
            let path = path_of(self.block_size, logical)?;
            let at = path.offsets()[level - 1];
            let holder = match level {
                1 => None,
                l => match self.pointer_block_at(ino, st, &path, l - 1)? {
                    Some(buf) => Some(buf),
                    None => continue,
                },
            };
            self.clear_slots(h, st, holder.as_ref(), at, b, 1)?;
        }
        for &(_, first, n) in &new.data {
            self.free_blocks(h, BlockNo(first), n)?;
        }
        for &(_, _, b) in &new.pointers {
            self.free_blocks(h, BlockNo(b), 1)?;
        }
        Ok(())
    }

    /// Zeroes slots `at..at + n` of `holder` (the inode's i_block when
    /// `None`) where they point at `first..first + n`: a slot holding
    /// anything else was never set to the block being given back.
    fn clear_slots(
        &self,
        h: &mut Handle<'_>,
        st: &mut InodeState,
        holder: Option<&Arc<Buffer>>,
        at: u32,
        first: u32,
        n: u32,
    ) -> Result<()> {
        let Some(buf) = holder else {
            for i in 0..n {
                let s = &mut st.disk.i_block[(at + i) as usize];
                if *s == first + i {
                    *s = 0;
                }
            }
            return Ok(());
        };
        let b = buf.block();
        let hit = |data: &[u8], i: u32| Ok::<_, FsError>(slot(b, data, at + i)? == first + i);
        let mut any = false;
        for i in 0..n {
            if hit(&buf.read(), i)? {
                any = true;
                break;
            }
        }
        if !any {
            return Ok(());
        }
        let mut data = h.modify(buf)?;
        for i in 0..n {
            if hit(&data, i)? {
                set_slot(b, &mut data, at + i, 0)?;
            }
        }
        Ok(())
    }

    /// The pointer block at `level` of `path` (1: the one i_block points
    /// at), or `None` where the path is missing above it.
    fn pointer_block_at(
        &self,
        ino: InodeNo,
        st: &InodeState,
        path: &BlockPath,
        level: usize,
    ) -> Result<Option<Arc<Buffer>>> {
        let mut ptr = st.disk.i_block[path.offsets()[0] as usize];
        for l in 1..=level {
            if ptr == 0 {
                return Ok(None);
            }
            let b = self.check_ptr(ino, ptr)?;
            let buf = self.cache.get(b)?;
            if l == level {
                return Ok(Some(buf));
            }
            ptr = slot(b, &buf.read(), path.offsets()[l])?;
        }
        Ok(None)
    }
}

/// Blocks allocated by get_blocks calls, so that an operation failing part
/// way can give them back ([`Filesystem::unmap_new`]).
#[derive(Debug, Default)]
pub(crate) struct NewBlocks {
    /// Data runs: first logical block, first disk block, length.
    data: Vec<(u32, u32, u32)>,
    /// Pointer blocks: a logical block mapped through them, their level
    /// (1: pointed at from i_block), the block.
    pointers: Vec<(u32, usize, u32)>,
}

impl NewBlocks {
    /// Runs and pointer blocks noted: each costs a pointer block, a bitmap
    /// and a descriptor to give back.
    pub(crate) fn pieces(&self) -> usize {
        self.data.len() + self.pointers.len()
    }

    /// Blocks noted, data and pointer blocks.
    pub(crate) fn total(&self) -> u64 {
        let data: u64 = self.data.iter().map(|&(_, _, n)| n as u64).sum();
        data + self.pointers.len() as u64
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
pub(super) struct AllocCtx {
    /// Where goals are counted from (pointer blocks go in line before the
    /// data they map).
    pin: Pin,
    /// The data block being mapped.
    logical: u32,
    ino: InodeNo,
    /// The blocks the file has or is about to have with this request
    /// (they decide its window, see balloc.rs).
    blocks: u64,
    privileged: bool,
    /// Pointer blocks allocated so far: level and block.
    pointers: Vec<(usize, u32)>,
    /// The data run allocated: first block and length.
    data: Option<(u32, u32)>,
    i_block: [u32; EXT2_N_BLOCKS],
}

impl AllocCtx {
    fn set_i_block(&mut self, i: usize, v: u32) {
        self.i_block[i] = v;
    }
}

#[cfg(test)]
pub(super) mod tests {
    //! get_blocks and its boundary flag at every edge of every indirection
    //! level, for every block size. The oracle for "which pointer block
    //! holds this block" is ext3's layout worked out by hand below, not
    //! `block_to_path`; e2fsck checks each image afterwards. goal.rs's
    //! tests use the helpers.

    use super::*;
    use crate::device::{BlockDevice, MemoryDevice};
    use crate::fs::namei::Caller;
    use crate::fs::MountConfig;
    use crate::mkfs::{format, plan, MkfsOptions, Zeroed};
    use parking_lot::Mutex;

    const ROOT: InodeNo = InodeNo(2);
    const ME: Caller = Caller { uid: 0, gid: 0 };
    pub(crate) const SIZES: [u32; 3] = [1024, 2048, 4096];

    /// A memory device that logs every read, to count device requests.
    pub(crate) struct Logged {
        mem: MemoryDevice,
        reads: Mutex<Vec<(u64, usize)>>,
    }

    impl BlockDevice for Logged {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
            self.reads.lock().push((offset, buf.len()));
            self.mem.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
            self.mem.write_at(buf, offset)
        }
        fn flush(&self) -> std::io::Result<()> {
            self.mem.flush()
        }
        fn size(&self) -> u64 {
            self.mem.size()
        }
    }

    pub(crate) fn device(bs: u32) -> Arc<Logged> {
        device_of(bs, 96 << 20)
    }

    pub(crate) fn device_of(bs: u32, size: u64) -> Arc<Logged> {
        let opts = MkfsOptions {
            block_size: Some(bs),
            ..Default::default()
        };
        let mem = MemoryDevice::new(size).unwrap();
        let g = plan(&opts, size).unwrap();
        let mut quiet = crate::util::Progress::quiet();
        format(&mem, &opts, &g, Zeroed::All, &mut quiet).unwrap();
        Arc::new(Logged {
            mem,
            reads: Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn mount(dev: &Arc<Logged>, max_map: u32) -> Arc<Filesystem> {
        let cfg = MountConfig {
            max_map,
            cache_size: 8 << 20,
            ..Default::default()
        };
        let dev: Arc<dyn BlockDevice> = dev.clone();
        Filesystem::mount(dev, &cfg).unwrap()
    }

    /// Which pointer block holds logical block `l`'s pointer: its level
    /// (0 for the inode itself) and its index among that level's blocks.
    fn holder(bs: u32, l: u32) -> (u32, u64) {
        let (p, l) = (bs as u64 / 4, l as u64);
        let (d, t) = (12 + p, 12 + p + p * p);
        match l {
            l if l < 12 => (0, 0),
            l if l < d => (1, 0),
            l if l < t => (2, (l - d) / p),
            l => (3, (l - t) / p),
        }
    }

    fn boundary_after(bs: u32, last: u32) -> bool {
        holder(bs, last) != holder(bs, last + 1)
    }

    /// The last block under a pointer block, at each edge worth testing:
    /// direct to single, single to double, two changes of leaf inside the
    /// double tree, double to triple, two leaf changes inside the triple
    /// tree and a change of its middle level.
    fn edges(bs: u32) -> Vec<u32> {
        let p = bs / 4;
        let (d, t) = (12 + p, 12 + p + p * p);
        vec![
            11,
            d - 1,
            d + p - 1,
            d + 2 * p - 1,
            t - 1,
            t + p - 1,
            t + 2 * p - 1,
            t + p * p - 1,
        ]
    }

    /// Dense ranges that together cross every edge.
    pub(crate) fn dense_ranges(bs: u32) -> Vec<(u32, u32)> {
        let p = bs / 4;
        let (d, t) = (12 + p, 12 + p + p * p);
        vec![
            (0, d + 2 * p + 3),
            (t - 3, t + 2 * p + 3),
            (t + p * p - 3, t + p * p + 3),
        ]
    }

    pub(crate) fn new_file(fs: &Filesystem, name: &str) -> InodeNo {
        fs.mknod(ROOT, name.as_bytes(), 0o100644, 0, ME).unwrap().0
    }

    /// Allocates `lo..hi` with get_blocks (create=true), `max` blocks a
    /// call, checking each returned run's boundary flag.
    pub(crate) fn allocate(fs: &Filesystem, ino: InodeNo, lo: u32, hi: u32, max: u32) {
        let inode = fs.iget(ino).unwrap();
        let mut st = inode.state.write();
        let mut pos = lo;
        while pos < hi {
            let mut h = fs.journal.start(64).unwrap();
            let m = fs
                .get_blocks(&mut h, ino, &mut st, pos, max.min(hi - pos), true)
                .unwrap();
            assert!(m.physical.is_some() && m.count >= 1 && pos + m.count <= hi);
            assert!(m.count <= fs.max_map);
            let last = pos + m.count - 1;
            assert_eq!(m.boundary, boundary_after(fs.block_size, last), "at {pos}");
            pos += m.count;
            let size = (pos as u64 * fs.block_size as u64).max(st.disk.i_size);
            st.disk.i_size = size;
            fs.write_inode(&mut h, ino, &st.disk).unwrap();
            h.stop().unwrap();
        }
    }

    /// Checks every mapping from every start in `lo..hi` against the
    /// single-block mappings: a run is their concatenation, it is maximal,
    /// and its boundary is set exactly where the next block has another
    /// holder. get_blocks (create=true) over mapped blocks agrees.
    fn check_runs(fs: &Filesystem, ino: InodeNo, lo: u32, hi: u32) {
        let bs = fs.block_size;
        let inode = fs.iget(ino).unwrap();
        let mut st = inode.state.write();
        let single: Vec<Option<u32>> = (lo..hi)
            .map(|l| {
                let m = fs.map_blocks(ino, &st, l, 1).unwrap();
                assert_eq!((m.count, m.boundary), (1, boundary_after(bs, l)));
                m.physical.map(|p| p.0)
            })
            .collect();
        let at = |l: u32| single[(l - lo) as usize];
        for s in lo..hi {
            let m = fs.map_blocks(ino, &st, s, hi - s).unwrap();
            let end = s + m.count;
            assert!(m.count >= 1 && end <= hi);
            let first = m.physical.map(|p| p.0);
            for i in 0..m.count {
                assert_eq!(at(s + i), first.map(|p| p + i), "run from {s}, block {i}");
            }
            let last = end - 1;
            assert_eq!(m.boundary, boundary_after(bs, last), "run {s}..{end}");
            if end < hi && !m.boundary && fs.max_map > m.count {
                let continues = at(end) == first.map(|p| p + m.count);
                assert!(!continues, "run {s}..{end} stopped early");
            }
            if first.is_some() {
                let mut h = fs.journal.start(64).unwrap();
                let g = fs.get_blocks(&mut h, ino, &mut st, s, hi - s, true);
                h.stop().unwrap();
                assert_eq!(g.unwrap(), m, "get_blocks from {s}");
            }
        }
        let mut flat = Vec::new();
        let mut pos = lo;
        while pos < hi {
            let m = fs.map_blocks(ino, &st, pos, hi - pos).unwrap();
            flat.extend((0..m.count).map(|i| m.physical.map(|p| p.0 + i)));
            pos += m.count;
        }
        assert_eq!(flat, single);
    }

    pub(crate) fn unmount_and_fsck(fs: Arc<Filesystem>, dev: &Logged, what: &str) {
        fs.unmount().unwrap();
        drop(fs);
        if std::process::Command::new("e2fsck")
            .arg("-V")
            .output()
            .is_err()
        {
            eprintln!("skipping e2fsck of {what}: e2fsck is not installed");
            return;
        }
        let path = std::env::temp_dir().join(format!(
            "jbdfs-bmap-{}-{}.img",
            std::process::id(),
            crate::util::unique_suffix()
        ));
        std::fs::write(&path, dev.mem.snapshot()).unwrap();
        let out = std::process::Command::new("e2fsck")
            .arg("-fn")
            .arg(&path)
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(
            out.status.success(),
            "e2fsck on {what}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn dense_files_map_in_runs_with_exact_boundaries() {
        for bs in SIZES {
            let dev = device(bs);
            let fs = mount(&dev, u32::MAX);
            for (i, &(lo, hi)) in dense_ranges(bs).iter().enumerate() {
                let multi = new_file(&fs, &format!("multi{i}"));
                allocate(&fs, multi, lo, hi, u32::MAX);
                check_runs(&fs, multi, lo, hi);
                let single = new_file(&fs, &format!("single{i}"));
                allocate(&fs, single, lo, hi, 1);
                check_runs(&fs, single, lo, hi);
            }
            unmount_and_fsck(fs, &dev, &format!("dense files, {bs}-byte blocks"));
        }
    }

    #[test]
    fn sparse_files_map_in_runs_with_exact_boundaries() {
        for bs in SIZES {
            let dev = device(bs);
            let fs = mount(&dev, u32::MAX);
            // Around each edge e: a hole at e-1 and e+3, blocks elsewhere,
            // and one file with the edge itself a hole.
            let mapped = new_file(&fs, "mapped-edges");
            let holed = new_file(&fs, "holed-edges");
            for e in edges(bs) {
                for l in [e - 2, e, e + 1, e + 2] {
                    allocate(&fs, mapped, l, l + 1, 1);
                }
                for l in [e - 1, e + 1] {
                    allocate(&fs, holed, l, l + 1, 1);
                }
            }
            for e in edges(bs) {
                check_runs(&fs, mapped, e - 3, e + 4);
                check_runs(&fs, holed, e - 3, e + 4);
            }
            unmount_and_fsck(fs, &dev, &format!("sparse files, {bs}-byte blocks"));
        }
    }

    #[test]
    fn max_map_one_maps_block_by_block() {
        for bs in SIZES {
            let dev = device(bs);
            let fs = mount(&dev, 1);
            let (lo, hi) = dense_ranges(bs)[0];
            let f = new_file(&fs, "f");
            allocate(&fs, f, lo, hi, u32::MAX);
            check_runs(&fs, f, lo, hi);
            let inode = fs.iget(f).unwrap();
            let st = inode.state.read();
            for l in lo..hi {
                assert_eq!(fs.map_blocks(f, &st, l, hi - l).unwrap().count, 1);
            }
            drop(st);
            unmount_and_fsck(fs, &dev, &format!("max_map=1, {bs}-byte blocks"));
        }
    }

    /// The read path: data read back is what was written, across every
    /// edge, in one request or in odd pieces; a cold sequential read makes
    /// one device read per run and never a separate read for a leaf
    /// pointer block that lies beside the data.
    #[test]
    fn reads_cross_edges_with_one_device_read_per_run() {
        for bs in SIZES {
            let dev = device(bs);
            let fs = mount(&dev, u32::MAX);
            let (lo, hi) = dense_ranges(bs)[0];
            let f = new_file(&fs, "f");
            let len = (hi - lo) as usize * bs as usize;
            let pattern: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            fs.write(f, 0, &pattern, true).unwrap();
            fs.unmount().unwrap();
            drop(fs);
            let fs = mount(&dev, u32::MAX);
            let leaves: Vec<u32> = {
                let inode = fs.iget(f).unwrap();
                let st = inode.state.read();
                (lo..hi)
                    .filter_map(|l| fs.leaf_location(f, &st, l).unwrap())
                    .map(|b| b.0)
                    .collect()
            };
            fs.cache.invalidate_all();
            dev.reads.lock().clear();
            assert_eq!(fs.read(f, 0, len as u32).unwrap(), pattern);
            let reads = dev.reads.lock().clone();
            for (off, n) in &reads {
                let one_leaf = *n == bs as usize && leaves.contains(&((off / bs as u64) as u32));
                assert!(!one_leaf, "separate read of leaf block {}", off / bs as u64);
            }
            let mut piece = 0;
            let mut at = 0;
            while at < len {
                let n = [1, 4095, 4096, 70_000, 1 << 20][piece % 5].min(len - at);
                let got = fs.read(f, at as u64, n as u32).unwrap();
                assert_eq!(got, pattern[at..at + n], "{n} bytes at {at}");
                at += n;
                piece += 1;
            }
            unmount_and_fsck(fs, &dev, &format!("read test, {bs}-byte blocks"));
        }
    }
}
