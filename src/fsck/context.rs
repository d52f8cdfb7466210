//! What the passes share: the filesystem's geometry, the inode tables held
//! in memory, the maps pass 1 builds (blocks in use, inodes in use, link
//! counts, directory parents) and the helpers that allocate and write.

use std::collections::{BTreeSet, HashMap};
use std::io;

use crate::device::BlockDevice;
use crate::format::group_desc::GroupDesc;
use crate::format::inode::{raw, Inode};
use crate::format::superblock::Superblock;
use crate::format::{GroupNo, InodeNo};

use super::problem::Problems;
use super::FsckOptions;

/// A fixed-size set of bits.
#[derive(Clone, Debug, Default)]
pub struct Bitmap {
    words: Vec<u64>,
    len: u64,
}

impl Bitmap {
    pub fn new(len: u64) -> Self {
        Bitmap {
            words: vec![0; len.div_ceil(64) as usize],
            len,
        }
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, i: u64) -> bool {
        i < self.len && self.words[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    /// Sets bit `i`; returns whether it was already set.
    pub fn set(&mut self, i: u64) -> bool {
        if i >= self.len {
            return false;
        }
        let w = &mut self.words[(i / 64) as usize];
        let was = *w & (1 << (i % 64)) != 0;
        *w |= 1 << (i % 64);
        was
    }

    pub fn clear(&mut self, i: u64) {
        if i < self.len {
            self.words[(i / 64) as usize] &= !(1 << (i % 64));
        }
    }

    /// The first clear bit at or after `from`, wrapping round once.
    pub fn first_clear_from(&self, from: u64) -> Option<u64> {
        let scan = |lo: u64, hi: u64| (lo..hi).find(|&i| !self.get(i));
        scan(from.min(self.len), self.len).or_else(|| scan(0, from.min(self.len)))
    }
}

/// What pass 1 learns about one inode.
#[derive(Clone, Copy, Debug, Default)]
pub struct InodeInfo {
    /// In use: a link count, or a reserved inode.
    pub used: bool,
    pub mode: u16,
    /// The on-disk link count (as fixed so far).
    pub links: u16,
    /// References found in directories (pass 2, 3).
    pub counted: u32,
    /// Directories: the directory whose entry names it (0: none yet).
    pub parent: u32,
    /// Directories: what its ".." entry says.
    pub dotdot: u32,
    /// Holds data blocks or a nonzero size (for "zero-length" in pass 4).
    pub has_data: bool,
}

impl InodeInfo {
    pub fn is_dir(&self) -> bool {
        self.used && self.mode & crate::format::inode::S_IFMT == crate::format::inode::S_IFDIR
    }
}

/// A per-group table a descriptor points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Table {
    BlockBitmap,
    InodeBitmap,
    InodeTable,
}

/// One block of a directory, for pass 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct DirBlock {
    pub blk: u32,
    pub ino: u32,
    pub lblk: u32,
}

pub struct Ctx<'a> {
    pub dev: &'a dyn BlockDevice,
    pub name: String,
    pub opts: FsckOptions,
    pub sb: Superblock,
    pub descs: Vec<GroupDesc>,
    pub bs: u32,
    pub isz: usize,
    pub now: u32,
    pub problems: Problems,
    /// Each group's inode table, as read (and as repaired so far).
    pub itable: Vec<Vec<u8>>,
    pub dirty_inodes: BTreeSet<u32>,
    /// Groups whose inode table pointer is unusable (their inodes read as zero).
    pub bad_itable: BTreeSet<u32>,
    /// Group tables that must be given new blocks after pass 1.
    pub relocate: BTreeSet<(u32, Table)>,
    /// Blocks claimed by metadata or by a file.
    pub found: Bitmap,
    /// Blocks claimed more than once.
    pub dups: BTreeSet<u32>,
    pub info: Vec<InodeInfo>,
    pub dir_blocks: Vec<DirBlock>,
    /// Unmapped blocks inside directories: (inode, logical block).
    pub dir_holes: Vec<(u32, u32)>,
    /// Extended attribute blocks and how many inodes refer to them.
    pub ea_refs: HashMap<u32, u32>,
    pub lost_found: u32,
    pub sb_dirty: bool,
    pub descs_dirty: bool,
    /// Files whose blocks are not contiguous, for the summary line.
    pub fragmented: u64,
    /// Regular files of 2 GiB or more (e2fsck's `large_files`).
    pub large_files: u64,
    /// Why the check must stop with nothing written: something on the
    /// image that fsck.jbdfs cannot read and must not destroy.
    pub unsupported: Option<String>,
    /// Blocks and inodes the orphan list released: pass 5 frees them in the
    /// bitmaps and counts without calling it a difference, as e2fsck's
    /// release does at once.
    pub released_blocks: Vec<u32>,
    pub released_inodes: Vec<u32>,
    /// The bad-block list (inode 1) and what pass 1 made of it.
    pub bad_blocks: super::badblocks::BadBlocks,
    /// The htree checks' findings (htree.rs).
    pub htree: super::htree::Htree,
}

impl<'a> Ctx<'a> {
    pub fn new(
        dev: &'a dyn BlockDevice,
        name: &str,
        opts: &FsckOptions,
        sb: Superblock,
        descs: Vec<GroupDesc>,
    ) -> Self {
        let bs = sb.block_size();
        let isz = sb.inode_size() as usize;
        let inodes = sb.s_inodes_count as usize;
        Ctx {
            dev,
            name: name.to_string(),
            opts: opts.clone(),
            found: Bitmap::new(u64::from(sb.s_blocks_count)),
            info: vec![InodeInfo::default(); inodes + 1],
            problems: Problems::new(opts),
            now: crate::util::now().0.clamp(0, u32::MAX as i64) as u32,
            sb,
            descs,
            bs,
            isz,
            itable: Vec::new(),
            dirty_inodes: BTreeSet::new(),
            bad_itable: BTreeSet::new(),
            relocate: BTreeSet::new(),
            dups: BTreeSet::new(),
            dir_blocks: Vec::new(),
            dir_holes: Vec::new(),
            ea_refs: HashMap::new(),
            lost_found: 0,
            sb_dirty: false,
            descs_dirty: false,
            fragmented: 0,
            large_files: 0,
            unsupported: None,
            released_blocks: Vec::new(),
            released_inodes: Vec::new(),
            bad_blocks: Default::default(),
            htree: Default::default(),
        }
    }

    pub fn progress(&mut self, pass: u8, done: u64, total: u64) {
        self.problems.bar.update(pass, done, total);
    }

    pub fn ipg(&self) -> u32 {
        self.sb.s_inodes_per_group
    }

    pub fn groups(&self) -> u32 {
        self.sb.group_count()
    }

    /// Whether `b` may be a file's block.
    pub fn block_ok(&self, b: u32) -> bool {
        b >= self.sb.s_first_data_block && b < self.sb.s_blocks_count
    }

    /// Sets large_file, upgrading a revision 0 filesystem to dynamic
    /// first, as libext2fs's `ext2fs_inode_size_set` does for a size that
    /// needs it: revision 0 has no feature flags.
    pub fn set_large_file(&mut self) {
        use crate::format::superblock::{self as sbm, feature};
        let sb = &mut self.sb;
        if sb.s_rev_level == sbm::EXT2_GOOD_OLD_REV {
            sb.s_rev_level = sbm::EXT2_DYNAMIC_REV;
            sb.s_first_ino = sbm::EXT2_GOOD_OLD_FIRST_INO;
            sb.s_inode_size = sbm::EXT2_GOOD_OLD_INODE_SIZE;
        }
        sb.s_feature_ro_compat |= feature::RO_COMPAT_LARGE_FILE;
        self.sb_dirty = true;
    }

    /// Whether `i_block` is a block map, as e2fsck decides it: a symlink
    /// is fast by its size alone (`ext2fs_is_fast_symlink`), not by
    /// i_blocks as the kernel does, so that a wrong i_blocks never turns a
    /// symlink's target into block pointers to "fix".
    pub fn maps_blocks(&self, inode: &Inode) -> bool {
        if inode.is_symlink() {
            return !is_fast_symlink(inode);
        }
        inode.has_block_map(self.bs)
    }

    /// The file type an entry gets: none without the `filetype` feature.
    pub fn entry_type(&self, ft: u8) -> u8 {
        use crate::format::superblock::feature::INCOMPAT_FILETYPE;
        if self.sb.has_incompat(INCOMPAT_FILETYPE) {
            ft
        } else {
            0
        }
    }

    /// A new directory block holding "." and "..", typed as the
    /// filesystem's features say.
    pub fn new_dir_block(&self, ino: u32, parent: u32) -> io::Result<Vec<u8>> {
        use crate::format::dirent as de;
        use crate::format::superblock::feature::INCOMPAT_FILETYPE;
        let make = if self.sb.has_incompat(INCOMPAT_FILETYPE) {
            de::new_dir_block
        } else {
            de::new_untyped_dir_block
        };
        make(self.bs as usize, InodeNo(ino), InodeNo(parent))
            .map_err(|e| io::Error::other(e.to_string()))
    }

    pub fn ino_ok(&self, ino: u32) -> bool {
        ino >= 1 && ino <= self.sb.s_inodes_count
    }

    /// Reads every group's inode table with one request per group.
    pub fn load_inode_tables(&mut self) -> io::Result<()> {
        let len = self.ipg() as usize * self.isz;
        for g in 0..self.groups() {
            let mut buf = vec![0u8; len];
            if !self.bad_itable.contains(&g) {
                let off = u64::from(self.descs[g as usize].bg_inode_table) * u64::from(self.bs);
                self.dev.read_at(&mut buf, off)?;
            }
            self.itable.push(buf);
        }
        Ok(())
    }

    fn inode_slot(&self, ino: u32) -> (usize, usize) {
        let (g, idx) = self.sb.inode_group(ino);
        (g.0 as usize, idx as usize * self.isz)
    }

    pub fn raw_inode(&self, ino: u32) -> &[u8] {
        let (g, off) = self.inode_slot(ino);
        &self.itable[g][off..off + self.isz]
    }

    /// The inode, with an invalid `i_extra_isize` read as zero.
    pub fn inode(&self, ino: u32) -> Inode {
        let raw = self.raw_inode(ino);
        match Inode::parse(raw) {
            Ok(i) => i,
            Err(_) => {
                let mut copy = raw.to_vec();
                raw::set_i_extra_isize(&mut copy, 0);
                Inode::parse(&copy).unwrap_or_else(|_| Inode::new(self.isz, 0))
            }
        }
    }

    pub fn write_inode(&mut self, ino: u32, inode: &Inode) {
        let bytes = inode.to_bytes();
        let (g, off) = self.inode_slot(ino);
        let n = bytes.len().min(self.isz);
        self.itable[g][off..off + n].copy_from_slice(&bytes[..n]);
        self.dirty_inodes.insert(ino);
        let info = &mut self.info[ino as usize];
        info.mode = inode.i_mode;
        info.links = inode.i_links_count;
    }

    pub fn raw_links(&self, ino: u32) -> u16 {
        raw::i_links_count(self.raw_inode(ino))
    }

    pub fn raw_mode(&self, ino: u32) -> u16 {
        raw::i_mode(self.raw_inode(ino))
    }

    pub fn raw_dtime(&self, ino: u32) -> u32 {
        raw::i_dtime(self.raw_inode(ino))
    }

    /// Deallocates an inode as e2fsck's `e2fsck_clear_inode` does: the
    /// blocks it claimed are released from the found map.
    pub fn clear_inode(&mut self, ino: u32) -> io::Result<()> {
        let mut inode = self.inode(ino);
        if self.info[ino as usize].used {
            self.release_blocks(&mut inode)?;
        }
        inode.i_links_count = 0;
        inode.i_dtime = self.now;
        inode.i_flags = 0;
        // Reserved inodes are checked whatever their link count: a block
        // map left behind would be found rotten again by the next run.
        if ino < self.sb.first_ino() {
            inode.i_block = [0; 15];
        }
        // An empty bad-block list is an all-zero inode (e2fsck leaves it so).
        if ino == crate::format::inode::ino::EXT2_BAD_INO {
            inode = Inode::new(self.isz, inode.i_extra_isize);
        }
        self.write_inode(ino, &inode);
        let info = &mut self.info[ino as usize];
        info.used = false;
        Ok(())
    }

    /// Unmarks the blocks of `inode` that only it claims.
    pub fn release_blocks(&mut self, inode: &mut Inode) -> io::Result<()> {
        if inode.i_file_acl != 0 {
            let b = inode.i_file_acl;
            if let Some(r) = self.ea_refs.get_mut(&b) {
                *r = r.saturating_sub(1);
                if *r == 0 && !self.dups.contains(&b) {
                    self.found.clear(u64::from(b));
                }
            }
        }
        if !self.maps_blocks(inode) {
            return Ok(());
        }
        let mut blocks = Vec::new();
        super::walk::walk(self, &mut inode.i_block, false, &mut |ctx, blk, _| {
            if ctx.block_ok(blk) {
                blocks.push(blk);
            }
            super::walk::Act::Keep
        })?;
        for b in blocks {
            if !self.dups.contains(&b) {
                self.found.clear(u64::from(b));
            }
        }
        Ok(())
    }

    /// Allocates a free block, preferring group `near`.
    pub fn alloc_block(&mut self, near: u32) -> Option<u32> {
        let start = u64::from(self.sb.group_first_block(GroupNo(near)).0);
        let first = u64::from(self.sb.s_first_data_block);
        let b = self.found.first_clear_from(start.max(first))?;
        if b < first {
            return None;
        }
        self.found.set(b);
        u32::try_from(b).ok()
    }

    /// A run of `n` free blocks, preferring group `near`.
    pub fn alloc_run(&mut self, near: u32, n: u32) -> Option<u32> {
        let first = self.sb.s_first_data_block;
        let start = self.sb.group_first_block(GroupNo(near)).0.max(first);
        let total = self.sb.s_blocks_count;
        let try_from = |ctx: &Self, lo: u32| {
            let mut b = lo;
            while b.checked_add(n)? <= total {
                match (b..b + n).find(|&x| ctx.found.get(u64::from(x))) {
                    None => return Some(b),
                    Some(used) => b = used + 1,
                }
            }
            None
        };
        let b = try_from(self, start).or_else(|| try_from(self, first))?;
        for x in b..b + n {
            self.found.set(u64::from(x));
        }
        Some(b)
    }

    /// Allocates a free inode number at or after the first ordinary one.
    pub fn alloc_inode(&mut self) -> Option<u32> {
        let first = self.sb.first_ino();
        let ino = (first..=self.sb.s_inodes_count)
            .find(|&i| !self.info[i as usize].used && self.raw_links(i) == 0)?;
        self.info[ino as usize].used = true;
        Some(ino)
    }

    pub fn read_block(&self, blk: u32) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; self.bs as usize];
        self.dev
            .read_at(&mut buf, u64::from(blk) * u64::from(self.bs))?;
        Ok(buf)
    }

    pub fn write_block(&self, blk: u32, data: &[u8]) -> io::Result<()> {
        self.dev.write_at(data, u64::from(blk) * u64::from(self.bs))
    }

    /// Writes the inodes changed in memory back to their tables.
    pub fn flush_inodes(&mut self) -> io::Result<()> {
        for &ino in &self.dirty_inodes {
            let (g, off) = self.inode_slot(ino);
            if self.bad_itable.contains(&(g as u32)) && !self.descs_dirty {
                continue;
            }
            let table = u64::from(self.descs[g].bg_inode_table) * u64::from(self.bs);
            self.dev
                .write_at(&self.itable[g][off..off + self.isz], table + off as u64)?;
        }
        self.dirty_inodes.clear();
        Ok(())
    }
}

/// `ext2fs_is_fast_symlink`: a symlink whose target fits in `i_block`.
pub fn is_fast_symlink(inode: &Inode) -> bool {
    let size = inode.i_size;
    inode.is_symlink() && size != 0 && size < crate::format::inode::EXT2_FAST_SYMLINK_MAX as u64
}
