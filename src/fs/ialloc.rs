//! Inode allocation (Linux: fs/ext3/ialloc.c): new top-level directories
//! spread across groups, other directories and every other inode stay near
//! their parent, as ext3's find_group_orlov and find_group_other do.

use std::sync::atomic::Ordering;

use super::balloc::{clear_bit, find_zero, set_bit, test_bit};
use super::{Filesystem, FsError, Result};
use crate::format::group_desc::GroupDesc;
use crate::format::{GroupNo, InodeNo};
use crate::journal::Handle;

impl Filesystem {
    /// Allocates an inode for a child of `parent`. `topdir`: the parent is
    /// the root or carries the TOPDIR flag, so a new directory in it starts
    /// a tree of its own.
    pub(crate) fn alloc_inode(
        &self,
        h: &mut Handle<'_>,
        parent: InodeNo,
        is_dir: bool,
        topdir: bool,
    ) -> Result<InodeNo> {
        if self.is_read_only() {
            return Err(FsError::ReadOnly);
        }
        let parent_group = self.sb.lock().inode_group(parent.0).0;
        let order: Box<dyn Iterator<Item = GroupNo>> = if is_dir {
            Box::new(self.dir_group_order(parent_group, topdir)?)
        } else {
            Box::new(file_group_order(parent_group, self.groups))
        };
        for g in order {
            if let Some(ino) = self.alloc_inode_in_group(h, g, is_dir)? {
                return Ok(ino);
            }
        }
        Err(FsError::NoSpace)
    }

    /// Groups for a new directory, tried in order (ext3's Orlov allocator,
    /// find_group_orlov). A top-level directory goes to the group with the
    /// fewest directories among those with at least the average free inodes
    /// and blocks, searched from a random group, so that separate trees
    /// spread over the disk. Any other directory stays with its parent's
    /// tree: the first group from the parent's on that is neither crowded
    /// with directories nor well short of the average free inodes and
    /// blocks. Either falls back to the first group from the parent's with
    /// the average free inodes, and then to any group.
    fn dir_group_order(
        &self,
        parent_group: GroupNo,
        topdir: bool,
    ) -> Result<impl Iterator<Item = GroupNo>> {
        let n = self.groups.max(1);
        let stats = (0..n)
            .map(|g| self.group_desc(GroupNo(g)).map(|d| GroupStats::of(&d)))
            .collect::<Result<Vec<_>>>()?;
        let at = |g: u32| &stats[g as usize];
        let (ipg, bpg) = {
            let sb = self.sb.lock();
            (sb.s_inodes_per_group as i64, sb.s_blocks_per_group as i64)
        };
        let groups = n as i64;
        let avg_inodes = self.free_inodes.load(Ordering::Relaxed).max(0) / groups;
        let avg_blocks = self.free_blocks.load(Ordering::Relaxed).max(0) / groups;
        let from = move |start: u32| (0..n).map(move |i| (start + i) % n);
        let first = if topdir {
            let start = (random_u64() % n as u64) as u32;
            from(start)
                .filter(|&g| {
                    let s = at(g);
                    s.free_inodes > 0 && s.free_inodes >= avg_inodes && s.free_blocks >= avg_blocks
                })
                .min_by_key(|&g| at(g).dirs)
        } else {
            let dirs: i64 = stats.iter().map(|s| s.dirs).sum();
            let max_dirs = dirs / groups + ipg / 16;
            let min_inodes = avg_inodes - ipg / 4;
            let min_blocks = avg_blocks - bpg / 4;
            from(parent_group.0).find(|&g| {
                let s = at(g);
                s.free_inodes > 0
                    && s.dirs < max_dirs
                    && s.free_inodes >= min_inodes
                    && s.free_blocks >= min_blocks
            })
        };
        let roomy_inodes = avg_inodes.max(1);
        let roomy =
            from(parent_group.0).filter(move |&g| stats[g as usize].free_inodes >= roomy_inodes);
        Ok(first
            .into_iter()
            .chain(roomy)
            .chain(from(parent_group.0))
            .map(GroupNo))
    }

    fn alloc_inode_in_group(
        &self,
        h: &mut Handle<'_>,
        g: GroupNo,
        is_dir: bool,
    ) -> Result<Option<InodeNo>> {
        let _lock = self.group_locks[g.0 as usize].lock();
        let desc = self.group_desc(g)?;
        if desc.bg_free_inodes_count == 0 {
            return Ok(None);
        }
        let (ipg, first_ino) = {
            let sb = self.sb.lock();
            (sb.s_inodes_per_group, sb.first_ino())
        };
        let buf = self.cache.get(desc.inode_bitmap())?;
        // Reserved inodes are never handed out, even if their bits are clear.
        let from = if g.0 == 0 {
            first_ino.saturating_sub(1)
        } else {
            0
        };
        let Some(bit) = find_zero(&buf.read(), from, ipg) else {
            return Ok(None);
        };
        set_bit(&mut h.modify(&buf)?, bit);
        self.update_group_desc(h, g, |d| {
            d.bg_free_inodes_count = d.bg_free_inodes_count.saturating_sub(1);
            if is_dir {
                d.bg_used_dirs_count = d.bg_used_dirs_count.saturating_add(1);
            }
        })?;
        self.free_inodes.fetch_sub(1, Ordering::Relaxed);
        Ok(Some(InodeNo(g.0 * ipg + bit + 1)))
    }

    /// Returns inode `ino` to its group.
    pub(crate) fn free_inode(&self, h: &mut Handle<'_>, ino: InodeNo, is_dir: bool) -> Result<()> {
        let (g, bit) = self.sb.lock().inode_group(ino.0);
        let _lock = self.group_locks[g.0 as usize].lock();
        let desc = self.group_desc(g)?;
        let buf = self.cache.get(desc.inode_bitmap())?;
        let was_set = {
            let mut map = h.modify(&buf)?;
            let was = test_bit(&map, bit);
            clear_bit(&mut map, bit);
            was
        };
        if !was_set {
            tracing::error!(inode = ino.0, "freeing an inode that is already free");
            return Ok(());
        }
        self.update_group_desc(h, g, |d| {
            d.bg_free_inodes_count = d.bg_free_inodes_count.saturating_add(1);
            if is_dir {
                d.bg_used_dirs_count = d.bg_used_dirs_count.saturating_sub(1);
            }
        })?;
        self.free_inodes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// What the Orlov allocator weighs of a group.
struct GroupStats {
    free_inodes: i64,
    free_blocks: i64,
    dirs: i64,
}

impl GroupStats {
    fn of(d: &GroupDesc) -> GroupStats {
        GroupStats {
            free_inodes: d.bg_free_inodes_count as i64,
            free_blocks: d.bg_free_blocks_count as i64,
            dirs: d.bg_used_dirs_count as i64,
        }
    }
}

/// Where a top-level directory's search starts: ext3 takes random bytes;
/// the clock's nanoseconds and a call count, mixed by the workspace's one
/// generator, serve as well and cost no system call.
fn random_u64() -> u64 {
    use std::sync::atomic::AtomicU64;
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let calls = CALLS.fetch_add(1, Ordering::Relaxed);
    crate::util::rng::mix(u64::from(crate::util::now().1) ^ calls.rotate_left(32))
}

/// Groups for a file: the parent's, then a quadratic probe (the parent's
/// plus 1, 3, 7 and so on), then all of them from the parent's on. Lazy:
/// nearly every create stops at the parent's group, and a large
/// filesystem has thousands of groups.
fn file_group_order(parent: GroupNo, groups: u32) -> impl Iterator<Item = GroupNo> {
    let n = groups as u64;
    let at = move |off: u64| GroupNo(((parent.0 as u64 + off) % n) as u32);
    let probe = (0..32)
        .map(|k| 1u64 << k)
        .take_while(move |&step| step < n)
        .map(move |step| at(2 * step - 1));
    std::iter::once(parent).chain(probe).chain((1..n).map(at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::flags::FlagsCaller;
    use crate::fs::namei::Caller;
    use crate::fs::MountConfig;
    use crate::testing::memory_fs;

    const ROOT: InodeNo = InodeNo(2);
    const ME: Caller = Caller { uid: 0, gid: 0 };

    /// ext3's Orlov allocator: directories made in the root (or in a TOPDIR
    /// directory) start trees of their own in other groups, and directories
    /// below them stay in their tree's group, beside their files, so that
    /// one transaction touching several of them logs one bitmap and few
    /// inode table blocks (fs_mark's thread directories, say).
    #[test]
    fn top_level_directories_spread_and_the_rest_stay_with_their_parent() {
        let (_mem, fs) = memory_fs(64 << 20, &MountConfig::default());
        let group = |ino: InodeNo| fs.sb.lock().inode_group(ino.0).0;
        let (a, _) = fs.mkdir(ROOT, b"a", 0o755, ME).unwrap();
        let (b, _) = fs.mkdir(ROOT, b"b", 0o755, ME).unwrap();
        assert_ne!(group(a), group(b), "two top-level trees share a group");
        assert_ne!(group(a), group(ROOT));
        for i in 0..16 {
            let (sub, _) = fs.mkdir(a, format!("t{i}").as_bytes(), 0o755, ME).unwrap();
            assert_eq!(group(sub), group(a), "a/t{i} left its parent's group");
            let (file, _) = fs.mknod(sub, b"f", 0o100644, 0, ME).unwrap();
            assert_eq!(group(file), group(a));
        }
        // TOPDIR makes a directory's children top-level trees again.
        let root_caller = FlagsCaller {
            uid: 0,
            cap_effective: u64::MAX,
        };
        let topdir = crate::format::inode::flags::EXT2_TOPDIR_FL;
        fs.set_flags(b, topdir, &root_caller).unwrap();
        let (c, _) = fs.mkdir(b, b"c", 0o755, ME).unwrap();
        let (d, _) = fs.mkdir(b, b"d", 0o755, ME).unwrap();
        assert!(
            group(c) != group(b) || group(d) != group(b),
            "children of a TOPDIR directory did not spread"
        );
        assert_ne!(group(c), group(d));
    }

    #[test]
    fn a_file_looks_in_its_parents_group_then_probes_then_tries_all() {
        let order: Vec<u32> = file_group_order(GroupNo(5), 16).map(|g| g.0).collect();
        let mut want = vec![5, 6, 8, 12, 4];
        want.extend((1..16).map(|i| (5 + i) % 16));
        assert_eq!(order, want);
        let one: Vec<u32> = file_group_order(GroupNo(0), 1).map(|g| g.0).collect();
        assert_eq!(one, vec![0]);
    }
}
