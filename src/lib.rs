//! jbdfs: a userspace journaling filesystem that keeps the ext3 on-disk format.
//!
//! Layers, bottom up (see docs/ARCHITECTURE.md):
//! - [`format`]: pure bytes <-> structs for ext3 and JBD, no I/O;
//! - [`device`]: the `BlockDevice` trait and its implementations;
//! - [`cache`]: the buffer cache over a device, with its write-back;
//! - [`journal`]: JBD: handles, commit, checkpoint, revoke, recovery;
//! - [`fs`]: ext3's semantics (inodes, directories, files, orphans, ACLs)
//!   on the journal;
//! - [`mkfs`], [`fsck`]: the library code behind the two thin binaries.
//!
//! This crate is the filesystem only: it has no FUSE, command-line or
//! signal code. The daemon (the `-o` parser, the FUSE adapter, the `jbdfs`
//! binary) is the `jbdfs-daemon` crate in daemon/.
//!
//! # Lock order
//!
//! Locks are always taken in this order, never the reverse:
//! 1. `Filesystem::rename_lock`, only by renames across directories, before
//!    any inode lock (it keeps the ancestry check of rename stable).
//! 2. Inode state locks (`InodeRef::state`): a directory before the inodes
//!    it names; two directories in ascending inode number; two children of
//!    one operation in ascending inode number; on the orphan list, an
//!    orphan's lock before the lock of the orphan added after it. Nothing
//!    waits for an inode lock while holding an inode-cache shard lock
//!    (eviction only try-locks).
//!    All inode locks an operation needs are taken before its journal
//!    handle starts; none is taken while a handle is open (commit waits for
//!    open handles, so that would deadlock against a thread holding the
//!    inode and waiting to start a handle).
//! 3. Journal, in its own order (src/journal/mod.rs): the commit lock
//!    (`Journal::commit_lock`, held by commit and checkpoint across log
//!    I/O; only try-locked under the state lock), a handle's transaction
//!    (`Journal::state`, briefly), `Journal::pending_free` (a leaf).
//!    Checkpoint takes read guards of committed buffers under
//!    `Journal::state` (rule 6 below
//!    comes after it); nobody waits for the state lock holding the write
//!    guard of a buffer outside the running transaction, and nobody queues
//!    for the write guard of an uptodate buffer outside it (the cache's
//!    read-in paths check uptodate before locking). A data=journal
//!    writer that must make room (`Journal::make_room_for_pins`) commits and
//!    checkpoints holding its inode lock but no handle, which is safe
//!    because no handle ever waits for an inode lock. Commit callbacks
//!    (`Journal::force_commit_then`: fsync replies) run with no journal
//!    lock but possibly the commit lock held, so they may take only what
//!    comes after it here (the superblock's error record, a device flush)
//!    and must never start a handle or wait for a commit.
//! 4. `Filesystem::orphans`, then `Filesystem::sb`. Each is held only to
//!    change its fields and, while still held, copy them into a buffer the
//!    handle has already joined (an orphan's inode slot, the superblock), so
//!    two writers cannot leave an older copy in the buffer; nothing else is
//!    taken under them but buffer data locks.
//! 5. A group lock (`Filesystem::group_locks`), one at a time, taken by
//!    allocation and freeing while inode locks are held. The reservation
//!    windows (`Filesystem::reservations`) and read patterns
//!    (`Filesystem::readahead`) are leaves below it: nothing is taken while
//!    they are held.
//! 6. Buffer cache locks, in the cache's own order (src/cache/mod.rs): a
//!    buffer's writeback lock, a buffer's data lock, a shard mutex. Callers
//!    hold no buffer guard when they commit (`Journal::force_commit` writes
//!    back through the cache).
//! 7. Inode-cache shard locks (`InodeCache`): leaves, held only for map
//!    lookups and inserts.
//! 8. The data queue's state lock (`fs::data::DataQueue`): held only to
//!    move blocks in and out of the queue, never across device I/O. Its
//!    waits (throttle, drain, cancel, begin_direct) wait for a batch or a
//!    claimed direct write to reach the device. A batch's write takes no
//!    lock; a claim is written by a thread that holds its inode's lock and
//!    has already stopped its handle (it only needs `Journal::state`
//!    briefly for that stop), so the waits are safe under any lock above
//!    but the claimed inode's. Throttle is called before a handle starts,
//!    so a full queue never holds a commit.
//! 9. Device-internal locks (memory device contents): leaves, never held
//!    while calling out of the device.
//! 10. What a remount retunes (`Journal::config`, `ErrorState::policy`,
//!     `Filesystem::atime`): leaves, each held only to copy its value in or
//!     out, so they may be taken under any lock above.

pub mod cache;
pub mod device;
pub mod format;
pub mod fs;
pub mod fsck;
pub mod journal;
pub mod mkfs;
#[cfg(test)]
mod testing;
pub mod util;
