//! Where a file's new blocks should go (Linux: ext3_find_goal and
//! ext3_find_near in fs/ext3/inode.c): the goal bmap.rs hands the block
//! allocator. Goals are chosen so that a file lies on disk in logical
//! order with its pointer blocks in line, whatever order its writes arrive
//! in, and apart from other files being written at the same time. The
//! reservation windows and the layout pins themselves are balloc.rs's.

use super::bmap::{path_of, slot, Leaf};
use super::inode::InodeState;
use super::Filesystem;
use crate::format::{BlockNo, InodeNo};

impl Filesystem {
    /// Where the goal for logical block `logical` is counted from
    /// (ext3_find_goal and ext3_find_near, in short). The goal is where
    /// the block belongs if the file lies on disk in logical order with its
    /// pointer blocks in line, stepping over each group's metadata: its
    /// distance in that layout on from a known point. For a large file the
    /// point is its nearest layout pin at or before the block (the origin,
    /// or where an allocation that missed its goal landed), so every block
    /// has the same goal whatever order the writes come in: the kernel
    /// flushes a file's pages from several FUSE threads at once. Otherwise
    /// (small files, or a file whose pins were forgotten) it is the nearest
    /// mapped block before it, else the file's origin.
    pub(super) fn alloc_goal(
        &self,
        ino: InodeNo,
        st: &InodeState,
        logical: u32,
        count: u32,
    ) -> Basis {
        if let Some((l, p)) = self.reservations.pin_at_or_before(ino, logical) {
            return Basis {
                logical: l,
                physical: p,
                stored: true,
            };
        }
        if let Some((k, pk)) = self.mapped_before(ino, st, logical) {
            return Basis {
                logical: k,
                physical: pk as u64,
                stored: false,
            };
        }
        self.file_origin(ino, st, logical, count)
    }

    /// Remembers a large file's layout: the point its goal was counted
    /// from, if not a pin yet, and where an allocation that missed its goal
    /// (taken, or in another file's window) landed, for the blocks after it
    /// to lay out from there.
    pub(super) fn record_layout(
        &self,
        ino: InodeNo,
        basis: Basis,
        logical: u32,
        goal: BlockNo,
        first: BlockNo,
    ) {
        if !basis.stored {
            self.reservations
                .add_pin(ino, basis.logical, basis.physical);
        }
        if first != goal {
            self.reservations.add_pin(ino, logical, first.0 as u64);
        }
    }

    /// The disk block for in-line `position`, counted from `pin`: forward
    /// over group metadata, backward plainly (a short way, inside a group).
    pub(super) fn goal_from(&self, pin: Pin, position: u64) -> BlockNo {
        let b = match position.checked_sub(pin.position) {
            Some(ahead) => self.advance(pin.physical, ahead),
            None => pin.physical.saturating_sub(pin.position - position),
        };
        goal_at(b)
    }

    /// The nearest mapped block before `logical` under its own pointer
    /// block or the one before: its logical and disk block numbers.
    fn mapped_before(&self, ino: InodeNo, st: &InodeState, logical: u32) -> Option<(u32, u32)> {
        match self.scan_back(ino, st, logical)? {
            Ok(found) => Some(found),
            Err(leaf_start) => self.scan_back(ino, st, leaf_start)?.ok(),
        }
    }

    /// Looks back from `logical - 1` to the first block under the same
    /// pointer block, over at most [`NEAR_SCAN`] slots. `Err` carries that
    /// first block when nothing there is mapped (or the pointer block is
    /// missing); `None` when `logical` is 0.
    fn scan_back(
        &self,
        ino: InodeNo,
        st: &InodeState,
        logical: u32,
    ) -> Option<std::result::Result<(u32, u32), u32>> {
        let before = logical.checked_sub(1)?;
        let path = path_of(self.block_size, before).ok()?;
        let at = path.offsets()[path.depth - 1];
        let leaf_start = before - at;
        let (leaf, _) = self.walk(ino, st, &path, None).ok()?;
        let lo = at.saturating_sub(NEAR_SCAN);
        let found = match leaf {
            None => None,
            Some(Leaf::Inode) => (lo..=at)
                .rev()
                .map(|i| (i, st.disk.i_block[i as usize]))
                .find(|&(_, p)| p != 0),
            Some(Leaf::Block(b)) => {
                let data = b.read();
                (lo..=at)
                    .rev()
                    .map(|i| (i, slot(b.block(), &data, i).unwrap_or(0)))
                    .find(|&(_, p)| p != 0)
            }
        };
        Some(match found {
            Some((i, p)) => Ok((leaf_start + i, p)),
            None => Err(leaf_start),
        })
    }

    /// Where a file with no pin and no mapped block before `logical`
    /// starts its layout: after its last allocation if it has blocks, else
    /// logical block 0 at the first free block of the inode's group or, for
    /// a large first write while other files are being written, in the
    /// middle of the widest stretch free of their windows.
    fn file_origin(&self, ino: InodeNo, st: &InodeState, logical: u32, count: u32) -> Basis {
        let (l, p) = match st.last_alloc {
            Some(last) if st.disk.i_blocks > 0 => (logical, last.0 as u64 + 1),
            _ => {
                let group = self.sb.lock().inode_group(ino.0).0;
                let start = self.first_free_in_group(group);
                let big = count >= BIG_FIRST_WRITE || logical >= BIG_FIRST_WRITE;
                let start = if big {
                    self.spread_start(ino, start)
                } else {
                    start
                };
                (0, start.0 as u64)
            }
        };
        Basis {
            logical: l,
            physical: p,
            stored: false,
        }
    }
}

/// The point a goal is counted from: logical block `logical` lies (or is
/// to lie) at `physical`; `stored` when that is one of the file's pins.
#[derive(Clone, Copy, Debug)]
pub(super) struct Basis {
    logical: u32,
    physical: u64,
    stored: bool,
}

impl Basis {
    pub(super) fn pin(&self, block_size: u32) -> Pin {
        Pin {
            position: inline_position(block_size, self.logical),
            physical: self.physical,
        }
    }
}

/// A known point of a file's in-line layout: the block at `position`
/// (see [`inline_position`]) lies at `physical`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pin {
    position: u64,
    physical: u64,
}

/// A first write this many blocks long (or this far in) marks a file that
/// is worth placing apart from other files being written.
const BIG_FIRST_WRITE: u32 = 256;
/// Files reaching this many blocks keep layout pins (smaller ones, such as
/// fs_mark's, keep no bookkeeping: their nearest mapped block serves).
pub(super) const LAYOUT_MIN_FILE: u64 = 64;

fn goal_at(b: u64) -> BlockNo {
    BlockNo(b.min(u32::MAX as u64) as u32)
}

/// Where data block `logical` lies, counted from the file's first block,
/// when every pointer block sits just before the first data block it maps
/// (ext3's in-line layout): 12 direct blocks, the single indirect block and
/// its data, the double indirect block, its first leaf and data, the next
/// leaf and data, and so on.
pub(crate) fn inline_position(block_size: u32, logical: u32) -> u64 {
    let (p, l) = ((block_size / 4) as u64, logical as u64);
    let (d, t) = (12 + p, 12 + p + p * p);
    let pointers = if l < 12 {
        0
    } else if l < d {
        1
    } else if l < t {
        1 + 1 + (l - d) / p + 1
    } else {
        let i = l - t;
        (1 + 1 + p) + 1 + i / (p * p) + 1 + i / p + 1
    };
    l + pointers
}

/// The first logical block mapped through the pointer block at `level`
/// (1 = the one in i_block) of `logical`'s path.
pub(super) fn first_under(block_size: u32, logical: u32, level: usize) -> u32 {
    let p = block_size / 4;
    let (d, t) = (12 + p, 12 + p + p * p);
    match (logical, level) {
        (l, _) if l < d => 12,
        (l, 1) if l < t => d,
        (l, _) if l < t => d + (l - d) / p * p,
        (_, 1) => t,
        (l, 2) => t + (l - t) / (p * p) * (p * p),
        (l, _) => t + (l - t) / p * p,
    }
}

/// Slots looked back over for a goal.
const NEAR_SCAN: u32 = 1024;

#[cfg(test)]
mod tests {
    //! Where get_blocks puts a file's blocks: in ext3's in-line layout,
    //! written in order or not, beside other files being written.

    use super::*;
    use crate::fs::bmap::tests::{
        allocate, dense_ranges, device, device_of, mount, new_file, unmount_and_fsck, SIZES,
    };

    /// A file written sequentially has its pointer blocks in line, each
    /// just before the data it maps, as ext3 lays it out.
    #[test]
    fn sequential_allocation_puts_pointer_blocks_in_line() {
        for bs in SIZES {
            let dev = device(bs);
            let fs = mount(&dev, u32::MAX);
            let p = bs / 4;
            let (lo, hi) = dense_ranges(bs)[0];
            let f = new_file(&fs, "f");
            let data = vec![0x5Au8; 64 << 10];
            let mut at = 0u64;
            while at < hi as u64 * bs as u64 {
                fs.write(f, at, &data, true).unwrap();
                at += data.len() as u64;
            }
            let inode = fs.iget(f).unwrap();
            let st = inode.state.read();
            let phys = |l: u32| fs.map_blocks(f, &st, l, 1).unwrap().physical.unwrap().0;
            let leaf = |l: u32| fs.leaf_location(f, &st, l).unwrap().unwrap().0;
            for l in lo + 1..hi {
                let gap = match l {
                    12 => 1,               // the single indirect block
                    l if l == 12 + p => 2, // the double indirect and its first leaf
                    l if l > 12 + p && (l - 12 - p) % p == 0 => 1,
                    _ => 0,
                };
                assert_eq!(
                    phys(l),
                    phys(l - 1) + 1 + gap,
                    "block {l}, {bs}-byte blocks"
                );
                if gap > 0 {
                    assert_eq!(leaf(l), phys(l) - 1);
                }
            }
            drop(st);
            unmount_and_fsck(fs, &dev, &format!("sequential file, {bs}-byte blocks"));
        }
    }

    /// Breaks in a file's layout over `0..n`: places where the next block
    /// is not where ext3's in-line layout puts it after the previous one.
    fn layout_breaks(fs: &Filesystem, ino: InodeNo, n: u32) -> usize {
        breaks_at(fs, ino, n).len()
    }

    /// The breaks themselves: the logical block, where the in-line layout
    /// puts it after the previous one, and where it lies.
    fn breaks_at(fs: &Filesystem, ino: InodeNo, n: u32) -> Vec<(u32, u64, u64)> {
        let inode = fs.iget(ino).unwrap();
        let st = inode.state.read();
        let bs = fs.block_size;
        let phys = |l: u32| fs.map_blocks(ino, &st, l, 1).unwrap().physical.unwrap().0 as u64;
        (1..n)
            .filter_map(|l| {
                let step = inline_position(bs, l) - inline_position(bs, l - 1);
                let want = phys(l - 1) + step;
                (phys(l) != want).then(|| (l, want, phys(l)))
            })
            .collect()
    }

    /// Writes reaching the daemon out of order (as the kernel's writeback
    /// through several FUSE threads delivers them) still lay a file out in
    /// logical order, pointer blocks in line.
    #[test]
    fn out_of_order_writes_land_in_order() {
        let dev = device(4096);
        let fs = mount(&dev, u32::MAX);
        let f = new_file(&fs, "f");
        let chunk = 64;
        let order: Vec<u32> = (0..64u32).map(|i| i ^ 1).chain([67, 64, 66, 65]).collect();
        for c in order {
            allocate(&fs, f, c * chunk, (c + 1) * chunk, chunk);
        }
        assert_eq!(layout_breaks(&fs, f, 68 * chunk), 0);
        unmount_and_fsck(fs, &dev, "out-of-order writes");
    }

    /// Two files written side by side, a chunk each in turn, do not
    /// interleave: each keeps its blocks together, apart from the one move
    /// a large file makes away from the other.
    #[test]
    fn side_by_side_writers_do_not_interleave() {
        let dev = device(4096);
        let fs = mount(&dev, u32::MAX);
        let (a, b) = (new_file(&fs, "a"), new_file(&fs, "b"));
        let chunk = 256;
        for c in 0..24 {
            for f in [a, b] {
                allocate(&fs, f, c * chunk, (c + 1) * chunk, chunk);
            }
        }
        let breaks = [
            layout_breaks(&fs, a, 24 * chunk),
            layout_breaks(&fs, b, 24 * chunk),
        ];
        assert!(
            breaks.iter().all(|&n| n <= 3),
            "breaks per file: {breaks:?}"
        );
        unmount_and_fsck(fs, &dev, "side-by-side writers");
    }

    /// The block groups `0..n` spans, less one: the breaks no layout can
    /// avoid (ext3 without flex_bg starts every group with its bitmaps and
    /// inode table).
    fn group_crossings(fs: &Filesystem, ino: InodeNo, n: u32) -> usize {
        let inode = fs.iget(ino).unwrap();
        let st = inode.state.read();
        let groups: std::collections::BTreeSet<u32> = (0..n)
            .map(|l| {
                let b = fs.map_blocks(ino, &st, l, 1).unwrap().physical.unwrap();
                fs.sb.lock().block_group(b).0 .0
            })
            .collect();
        groups.len() - 1
    }

    /// `0..n` in a fixed pseudo-random order (the same on every run).
    fn shuffled(n: u32, seed: u64) -> Vec<u32> {
        let mut v: Vec<u32> = (0..n).collect();
        let mut x = seed;
        for i in (1..v.len()).rev() {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            v.swap(i, ((x >> 33) % (i as u64 + 1)) as usize);
        }
        v
    }

    /// `0..n` as writeback through several FUSE threads delivers it: in
    /// order overall, each run of `spread` chunks in a shuffled order.
    fn jittered(n: u32, spread: u32, seed: u64) -> Vec<u32> {
        (0..n.div_ceil(spread))
            .flat_map(|w| {
                let lo = w * spread;
                let len = spread.min(n - lo);
                shuffled(len, seed ^ w as u64)
                    .into_iter()
                    .map(move |i| lo + i)
            })
            .collect()
    }

    /// A file across many block groups (1 KiB blocks: 8 MiB a group), its
    /// 1 MiB chunks arriving out of order, locally or throughout, ends with
    /// no breaks but its group crossings and at most a couple more (the
    /// journal lies in the way).
    #[test]
    fn large_file_written_out_of_order_breaks_only_at_groups() {
        let chunk = 1024;
        let chunks = 112;
        let orders = [
            ("jittered", jittered(chunks, 6, 7)),
            ("shuffled", shuffled(chunks, 11)),
        ];
        for (what, order) in orders {
            let dev = device_of(1024, 288 << 20);
            let fs = mount(&dev, u32::MAX);
            let f = new_file(&fs, "big");
            for c in order {
                allocate(&fs, f, c * chunk, (c + 1) * chunk, chunk);
            }
            let n = chunks * chunk;
            let (breaks, crossings) = (breaks_at(&fs, f, n), group_crossings(&fs, f, n));
            assert!(crossings >= 13, "{what}: only {crossings} group crossings");
            assert!(
                breaks.len() <= crossings + 2,
                "{what}: {crossings} group crossings, breaks {breaks:?}"
            );
            unmount_and_fsck(fs, &dev, &format!("{what} large file"));
        }
    }

    /// Three large files written at once, chunks taking turns and each
    /// file's arriving out of order, stay in few pieces each.
    #[test]
    fn concurrent_out_of_order_writers_stay_in_few_pieces() {
        let dev = device_of(1024, 288 << 20);
        let fs = mount(&dev, u32::MAX);
        let chunk = 1024;
        let chunks = 32;
        let files: Vec<InodeNo> = (0..3).map(|i| new_file(&fs, &format!("w{i}"))).collect();
        let orders: Vec<Vec<u32>> = (0..3).map(|i| jittered(chunks, 4, i)).collect();
        for k in 0..chunks as usize {
            for (f, order) in files.iter().zip(&orders) {
                let c = order[k];
                allocate(&fs, *f, c * chunk, (c + 1) * chunk, chunk);
            }
        }
        let n = chunks * chunk;
        for f in files {
            let (breaks, crossings) = (breaks_at(&fs, f, n), group_crossings(&fs, f, n));
            assert!(
                breaks.len() <= crossings + 4,
                "{crossings} group crossings, breaks {breaks:?}"
            );
        }
        unmount_and_fsck(fs, &dev, "concurrent out-of-order writers");
    }
}
