//! In-memory inodes and their on-disk slots (Linux: fs/ext3/inode.c's
//! ext3_iget and ext3_mark_inode_dirty).
//!
//! Each inode in use has one [`InodeRef`], whose lock serialises changes to
//! that inode; operations on different inodes run in parallel.

use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use super::{Filesystem, FsError, Result};
use crate::format::inode::Inode;
use crate::format::{BlockNo, Corruption, InodeNo, Location};
use crate::journal::Handle;
use crate::util::inthash::IntMap;

/// An inode's in-memory state, behind its lock.
#[derive(Debug)]
pub struct InodeState {
    pub disk: Inode,
    /// Lookups the kernel holds (FUSE's nlookup).
    pub nlookup: u64,
    pub open_count: u32,
    /// The last block allocated to this file: the goal for the next one.
    pub last_alloc: Option<BlockNo>,
    /// A directory's name index, built on first lookup.
    pub dir_index: Option<super::dir::DirIndex>,
    /// The inode was deleted; this state must not be used to free it again
    /// (its number may already belong to a new inode).
    pub freed: bool,
}

impl InodeState {
    pub fn new(disk: Inode) -> Self {
        InodeState {
            disk,
            nlookup: 0,
            open_count: 0,
            last_alloc: None,
            dir_index: None,
            freed: false,
        }
    }
}

#[derive(Debug)]
pub struct InodeRef {
    pub ino: InodeNo,
    pub state: RwLock<InodeState>,
}

const SHARDS: usize = 64;

/// The inodes currently in memory, sharded so that lookups of different
/// inodes do not contend.
pub struct InodeCache {
    shards: Vec<Mutex<IntMap<u32, Arc<InodeRef>>>>,
}

impl Default for InodeCache {
    fn default() -> Self {
        InodeCache {
            shards: (0..SHARDS).map(|_| Mutex::new(IntMap::default())).collect(),
        }
    }
}

impl InodeCache {
    fn shard(&self, ino: InodeNo) -> &Mutex<IntMap<u32, Arc<InodeRef>>> {
        &self.shards[ino.0 as usize % SHARDS]
    }

    pub fn get(&self, ino: InodeNo) -> Option<Arc<InodeRef>> {
        self.shard(ino).lock().get(&ino.0).cloned()
    }

    /// Drops an inode nobody references any more.
    pub fn evict(&self, ino: InodeNo) {
        let mut shard = self.shard(ino).lock();
        if let Some(r) = shard.get(&ino.0) {
            // Never wait for an inode lock under the shard lock: a holder of
            // that inode's lock may be waiting for this shard in iget.
            let Some(st) = r.state.try_read() else {
                return;
            };
            let unused = st.nlookup == 0 && st.open_count == 0;
            if unused && Arc::strong_count(r) == 1 {
                drop(st);
                shard.remove(&ino.0);
            }
        }
    }
}

impl Filesystem {
    /// The block and byte offset of inode `ino`'s on-disk slot.
    pub(crate) fn inode_location(&self, ino: InodeNo) -> Result<(BlockNo, usize)> {
        let (count, group) = {
            let sb = self.sb.lock();
            (sb.s_inodes_count, sb.inode_group(ino.0).0)
        };
        if ino.0 == 0 || ino.0 > count {
            return Err(FsError::NotFound);
        }
        let table = self.group_desc(group)?.bg_inode_table;
        Ok(self.sb.lock().inode_location(ino, BlockNo(table)))
    }

    fn read_inode_disk(&self, ino: InodeNo) -> Result<Inode> {
        let (block, off) = self.inode_location(ino)?;
        let size = self.sb.lock().inode_size() as usize;
        let buf = self.cache.get(block)?;
        let data = buf.read();
        Inode::parse(&data[off..off + size])
            .map_err(|e| Corruption::new(Location::Inode(ino), e).into())
    }

    /// The in-memory inode for `ino`, reading it from disk on first use.
    pub fn iget(&self, ino: InodeNo) -> Result<Arc<InodeRef>> {
        if let Some(r) = self.inodes.shard(ino).lock().get(&ino.0) {
            return Ok(r.clone());
        }
        let disk = self.read_inode_disk(ino)?;
        let mut shard = self.inodes.shard(ino).lock();
        let r = shard.entry(ino.0).or_insert_with(|| {
            Arc::new(InodeRef {
                ino,
                state: RwLock::new(InodeState::new(disk)),
            })
        });
        Ok(r.clone())
    }

    /// Installs a freshly allocated inode in the cache.
    pub(crate) fn iget_new(&self, ino: InodeNo, disk: Inode) -> Arc<InodeRef> {
        let r = Arc::new(InodeRef {
            ino,
            state: RwLock::new(InodeState::new(disk)),
        });
        self.inodes.shard(ino).lock().insert(ino.0, r.clone());
        r
    }

    /// Writes `inode` into its slot through `h` (ext3_mark_inode_dirty).
    pub(crate) fn write_inode(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        inode: &Inode,
    ) -> Result<()> {
        let (block, off) = self.inode_location(ino)?;
        let mut bytes = inode.to_bytes();
        let buf = self.cache.get(block)?;
        let access = h.get_write_access(&buf)?;
        if inode.i_links_count == 0 {
            // An orphan's i_dtime is its link in the orphan chain. The list
            // stays locked until the slot is written, so a concurrent change
            // of the chain cannot be overwritten with a link it has undone.
            let list = self.orphans.lock();
            if let Some(next) = super::orphan::next_in(&list, ino) {
                crate::format::inode::raw::set_i_dtime(&mut bytes, next);
            }
            access.write()[off..off + bytes.len()].copy_from_slice(&bytes);
        } else {
            access.write()[off..off + bytes.len()].copy_from_slice(&bytes);
        }
        Ok(())
    }

    /// Ends an operation's handle: writes the inode whether or not `res`
    /// is an error (what was done before it must be recorded), stops the
    /// handle, and returns the first error of the three.
    pub(crate) fn write_inode_and_stop(
        &self,
        mut h: Handle<'_>,
        ino: InodeNo,
        inode: &Inode,
        res: Result<()>,
    ) -> Result<()> {
        let wrote = self.write_inode(&mut h, ino, inode);
        let stopped = h.stop();
        res?;
        wrote?;
        stopped?;
        Ok(())
    }

    /// A new in-memory inode record of this filesystem's inode size.
    pub(crate) fn blank_inode(&self) -> Inode {
        let size = self.sb.lock().inode_size() as usize;
        Inode::new(size, 32)
    }
}
