//! Listing a directory, and the cookies that resume a listing (Linux:
//! fs/ext3/dir.c, ext3_readdir and ext3_dx_readdir).
//!
//! A cookie must keep meaning the same place while names come and go,
//! or a listing that runs beside creates and unlinks (`rm -r`, a backup of
//! a live tree) returns a name twice or misses one. A byte position does
//! that only as long as entries never move, and in an indexed directory
//! they move: a leaf split sends half of a block to a new one, and indexing
//! a full one-block directory moves every name out of block 0. So, as
//! ext3 does, directories that are indexed, or could become so (one block
//! on a `dir_index` filesystem), list in hash order, and their cookies are
//! hash positions, which no split or indexing changes. Other directories
//! never move an entry and list by position.
//!
//! Cookies stay below 2^63: the kernel keeps them in a signed `loff_t`,
//! and `seekdir` rejects a negative one. Hash cookies set bit 62, which
//! no byte position (directories are below 4 GiB) reaches.

use std::collections::BTreeMap;

use super::htree::{DxHash, LeafWalk};
use super::inode::InodeState;
use super::{Filesystem, FsError, Result};
use crate::format::dirent;
use crate::format::inode::flags::EXT2_INDEX_FL;
use crate::format::InodeNo;

/// One listed entry, with the cookie that resumes after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedEntry {
    pub ino: InodeNo,
    pub file_type: u8,
    pub name: Vec<u8>,
    /// Pass this as the offset to continue after this entry.
    pub next: u64,
}

/// Marks a cookie as a place in hash order.
const HASH_ORDER: u64 = 1 << 62;

/// A name's place in hash order: "." is 0, ".." 1, and the other names
/// follow by major hash (even, so bit 0 carries nothing) and minor hash,
/// of which the low two bits are dropped to stay below [`HASH_ORDER`].
/// Names whose places tie are listed together (see `take_sorted`).
fn rank(major: u32, minor: u32) -> u64 {
    2 + ((u64::from(major >> 1) << 30) | u64::from(minor >> 2))
}

/// The major hash where the names at `rank` and later begin.
fn major_of(rank: u64) -> u32 {
    (((rank.saturating_sub(2) >> 30) as u32) << 1) & !1
}

/// The cookie that resumes after the name at `rank`.
fn after(rank: u64) -> u64 {
    HASH_ORDER | (rank + 1)
}

/// A name found in a leaf, with its place.
struct Ranked {
    rank: u64,
    ino: InodeNo,
    file_type: u8,
    name: Vec<u8>,
}

impl Filesystem {
    /// Lists entries from the cookie `offset` on (0 starts at the
    /// beginning), at most `limit` of them, each with the cookie that
    /// resumes after it.
    pub fn readdir(&self, dir: InodeNo, offset: u64, limit: usize) -> Result<Vec<ListedEntry>> {
        let inode = self.iget(dir)?;
        let st = inode.state.read();
        if !st.disk.is_dir() {
            return Err(FsError::NotDir);
        }
        match self.hash_order(dir, &st)? {
            Some(order) if offset == 0 || offset & HASH_ORDER != 0 => {
                self.readdir_hashed(dir, &st, order, offset & !HASH_ORDER, limit)
            }
            // A position cookie from before the directory was indexed can
            // only be in the one block it had then, whose names were
            // listed from there in hash order; so nothing in the listing
            // moved, and it goes on in hash order from the start. This
            // cannot arise: one-block directories list in hash order too.
            Some(order) => self.readdir_hashed(dir, &st, order, 0, limit),
            None if offset & HASH_ORDER != 0 => {
                // The index was dropped (found damaged) during the listing.
                tracing::warn!(inode = dir.0, "directory listing restarted: index unusable");
                self.readdir_linear(dir, &st, 0, limit)
            }
            None => self.readdir_linear(dir, &st, offset, limit),
        }
    }

    /// How `dir` lists in hash order: its index walk, or for a one-block
    /// directory the block alone; `None` to list by position.
    fn hash_order(&self, dir: InodeNo, st: &InodeState) -> Result<Option<HashOrder>> {
        if !self.has_dir_index() {
            return Ok(None);
        }
        if st.disk.i_flags & EXT2_INDEX_FL != 0 {
            // The walk is started where the listing resumes.
            return Ok(self.dx_leaves_from(dir, st, 0)?.map(|_| HashOrder::Indexed));
        }
        if st.disk.i_size != self.block_size as u64 {
            return Ok(None);
        }
        Ok(self.default_dx_hash().map(HashOrder::OneBlock))
    }

    /// The listing by position: cookies are byte positions plus one.
    fn readdir_linear(
        &self,
        dir: InodeNo,
        st: &InodeState,
        offset: u64,
        limit: usize,
    ) -> Result<Vec<ListedEntry>> {
        let bs = self.block_size as u64;
        let start = offset.saturating_sub(1);
        let mut out = Vec::new();
        for b in (start / bs) as u32..(st.disk.i_size / bs) as u32 {
            let buf = self.dir_block(dir, st, b)?;
            let data = buf.read();
            for e in dirent::iter_block(&data, None) {
                let e = e.map_err(|e| self.corrupt_listing(dir, e))?;
                let pos = b as u64 * bs + e.offset as u64;
                if pos < start || e.inode.0 == 0 {
                    continue;
                }
                out.push(ListedEntry {
                    ino: e.inode,
                    file_type: e.file_type,
                    name: e.name.to_vec(),
                    next: pos + e.rec_len as u64 + 1,
                });
                if out.len() >= limit {
                    return Ok(out);
                }
            }
        }
        Ok(out)
    }

    /// The listing in hash order from place `from`: "." and ".." first,
    /// from block 0, then the names leaf by leaf.
    fn readdir_hashed(
        &self,
        dir: InodeNo,
        st: &InodeState,
        order: HashOrder,
        from: u64,
        limit: usize,
    ) -> Result<Vec<ListedEntry>> {
        let mut out = Vec::new();
        if from < 2 {
            self.list_dots(dir, st, from, &mut out)?;
        }
        let from = from.max(2);
        match order {
            HashOrder::OneBlock(hash) => {
                let names = self.ranked_leaf(dir, st, 0, &hash, from)?;
                take_sorted(names, limit, &mut out);
            }
            HashOrder::Indexed => {
                let Some(mut walk) = self.dx_leaves_from(dir, st, major_of(from))? else {
                    return Ok(out);
                };
                while out.len() < limit {
                    let Some(names) = self.next_leaf_run(dir, st, &mut walk, from)? else {
                        break;
                    };
                    take_sorted(names, limit, &mut out);
                }
            }
        }
        Ok(out)
    }

    /// "." and ".." (places 0 and 1) from `from` on, as block 0 holds them.
    fn list_dots(
        &self,
        dir: InodeNo,
        st: &InodeState,
        from: u64,
        out: &mut Vec<ListedEntry>,
    ) -> Result<()> {
        let buf = self.dir_block(dir, st, 0)?;
        let data = buf.read();
        for (place, e) in dirent::iter_block(&data, None).take(2).enumerate() {
            let e = e.map_err(|e| self.corrupt_listing(dir, e))?;
            let place = place as u64;
            if place >= from && e.inode.0 != 0 {
                out.push(ListedEntry {
                    ino: e.inode,
                    file_type: e.file_type,
                    name: e.name.to_vec(),
                    next: after(place),
                });
            }
        }
        Ok(())
    }

    /// The names of the walk's next leaf, with the leaves after it that
    /// continue its last hash (their names may sort before its own), at
    /// places `from` and later; `None` past the last leaf.
    fn next_leaf_run(
        &self,
        dir: InodeNo,
        st: &InodeState,
        walk: &mut LeafWalk,
        from: u64,
    ) -> Result<Option<BTreeMap<u64, Vec<Ranked>>>> {
        let Some((leaf, _)) = self.dx_next_leaf(dir, st, walk)? else {
            return Ok(None);
        };
        let hash = walk.hash;
        let mut names = self.ranked_leaf(dir, st, leaf, &hash, from)?;
        loop {
            let mut ahead = LeafWalk::clone(walk);
            match self.dx_next_leaf(dir, st, &mut ahead)? {
                Some((next, true)) => {
                    *walk = ahead;
                    for (rank, mut more) in self.ranked_leaf(dir, st, next, &hash, from)? {
                        names.entry(rank).or_default().append(&mut more);
                    }
                }
                _ => return Ok(Some(names)),
            }
        }
    }

    /// The live names of directory block `block` at places `from` and
    /// later, by place ("." and ".." are listed apart).
    fn ranked_leaf(
        &self,
        dir: InodeNo,
        st: &InodeState,
        block: u32,
        hash: &DxHash,
        from: u64,
    ) -> Result<BTreeMap<u64, Vec<Ranked>>> {
        let buf = self.dir_block(dir, st, block)?;
        let data = buf.read();
        let mut names: BTreeMap<u64, Vec<Ranked>> = BTreeMap::new();
        for e in dirent::iter_block(&data, None) {
            let e = e.map_err(|e| self.corrupt_listing(dir, e))?;
            if e.inode.0 == 0 || e.name == b"." || e.name == b".." {
                continue;
            }
            let (major, minor) = hash.major_minor(e.name);
            let rank = rank(major, minor);
            if rank >= from {
                names.entry(rank).or_default().push(Ranked {
                    rank,
                    ino: e.inode,
                    file_type: e.file_type,
                    name: e.name.to_vec(),
                });
            }
        }
        Ok(names)
    }

    fn corrupt_listing(&self, dir: InodeNo, e: dirent::DirentError) -> FsError {
        crate::format::Corruption::new(crate::format::Location::Inode(dir), e.error).into()
    }
}

/// How a directory lists in hash order, and by which hash.
#[derive(Clone, Copy)]
enum HashOrder {
    OneBlock(DxHash),
    Indexed,
}

/// Moves names into `out` in place order until it holds `limit`, never
/// splitting names of one place: a cookie resumes after a whole place.
fn take_sorted(names: BTreeMap<u64, Vec<Ranked>>, limit: usize, out: &mut Vec<ListedEntry>) {
    for (_, tied) in names {
        if out.len() >= limit {
            return;
        }
        out.extend(tied.into_iter().map(|r| ListedEntry {
            ino: r.ino,
            file_type: r.file_type,
            name: r.name,
            next: after(r.rank),
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_keep_hash_order_and_stay_below_the_sign_bit() {
        assert!(rank(0, 0) >= 2);
        assert!(rank(0, u32::MAX) < rank(2, 0));
        assert!(rank(0xffff_fffc, 0) > rank(0xffff_fffa, u32::MAX));
        let last = after(rank(0xffff_fffe, u32::MAX));
        assert!(
            last < 1 << 63,
            "cookie {last:#x} reads as negative in loff_t"
        );
    }

    #[test]
    fn the_major_hash_of_a_place_is_where_its_names_begin() {
        for major in [0u32, 2, 0x1234_5678, 0xffff_fffe] {
            for minor in [0u32, 7, u32::MAX] {
                assert_eq!(major_of(rank(major, minor)), major);
            }
            // A cookie resumes one place on: within the same major hash,
            // unless it was the major hash's last place.
            assert_eq!(major_of(rank(major, 7) + 1), major);
        }
        assert_eq!(major_of(0), 0);
        assert_eq!(major_of(1), 0);
    }
}
