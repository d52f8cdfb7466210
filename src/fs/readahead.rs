//! Read-pattern detection per inode, sizing how far ahead the block map is
//! brought into the cache.
//!
//! File data itself is read ahead by the kernel (FUSE readahead, asked
//! for at FUSE_INIT in daemon/src/fuse/fuser_adapter.rs) and, for an image file, by the host page cache under
//! it; what the daemon adds is metadata readahead: while a file is read
//! sequentially, the indirect blocks the next reads will need are read in
//! the background, so that no read waits on a pointer block. The window
//! starts small and doubles on every read that continues the last one, as
//! the kernel's own readahead window does; any other read resets it.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use parking_lot::Mutex;

use super::Filesystem;
use crate::format::InodeNo;

/// The first window, in bytes, once a read continues the previous one.
const MIN_WINDOW: u64 = 128 << 10;
/// The largest window, in bytes.
pub(crate) const MAX_WINDOW: u64 = 16 << 20;
/// Inodes tracked at once; past this the table starts afresh.
const MAX_TRACKED: usize = 4096;
/// Prefetch requests queued at once; more are dropped (they are hints).
const QUEUE_DEPTH: usize = 64;

/// Bring the pointer blocks for logical blocks `from..to` of `ino` into
/// the cache.
#[derive(Clone, Copy, Debug)]
struct Prefetch {
    ino: InodeNo,
    from: u32,
    to: u32,
}

#[derive(Clone, Copy, Debug, Default)]
struct Pattern {
    /// Where the next read starts if the access is sequential.
    next: u64,
    window: u64,
}

/// The read pattern of every inode read recently.
#[derive(Default)]
pub(crate) struct ReadPatterns {
    inodes: Mutex<HashMap<u32, Pattern>>,
    worker: OnceLock<Sender<Prefetch>>,
}

impl ReadPatterns {
    /// Starts the background thread that serves prefetch requests. It
    /// holds the filesystem weakly and ends when the filesystem is dropped.
    pub(crate) fn start(&self, fs: Weak<Filesystem>) -> std::io::Result<()> {
        let (tx, rx) = crossbeam_channel::bounded(QUEUE_DEPTH);
        std::thread::Builder::new()
            .name("jbdfs-prefetch".into())
            .spawn(move || serve(fs, rx))?;
        let _ = self.worker.set(tx);
        Ok(())
    }

    /// Asks for the pointer blocks of `from..to` to be read in the
    /// background; false when there is no worker or its queue is full.
    pub(crate) fn request(&self, ino: InodeNo, from: u32, to: u32) -> bool {
        let Some(tx) = self.worker.get() else {
            return false;
        };
        match tx.try_send(Prefetch { ino, from, to }) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
        }
    }

    /// Records a read of `len` bytes at `offset` and returns how many bytes
    /// past its end are worth preparing: 0 unless the read continues the
    /// inode's previous one.
    pub(crate) fn observe(&self, ino: InodeNo, offset: u64, len: u64) -> u64 {
        let mut map = self.inodes.lock();
        if map.len() >= MAX_TRACKED && !map.contains_key(&ino.0) {
            map.clear();
        }
        let p = map.entry(ino.0).or_default();
        p.window = if offset == p.next && offset > 0 {
            (p.window * 2).clamp(MIN_WINDOW, MAX_WINDOW)
        } else {
            0
        };
        p.next = offset + len;
        p.window
    }
}

fn serve(fs: Weak<Filesystem>, rx: Receiver<Prefetch>) {
    while let Ok(req) = rx.recv() {
        let Some(fs) = fs.upgrade() else {
            return;
        };
        prefetch(&fs, req);
    }
}

/// Reads the pointer blocks under the inode's lock, so that a truncate
/// cannot free them between finding and caching them.
fn prefetch(fs: &Arc<Filesystem>, req: Prefetch) {
    // Only inodes in memory: a prefetch never reads an inode in.
    let Some(inode) = fs.inodes.get(req.ino) else {
        return;
    };
    let st = inode.state.read();
    if st.freed {
        return;
    }
    if let Err(e) = fs.load_leaves(req.ino, &st, req.from, req.to) {
        tracing::debug!(ino = req.ino.0, "prefetch of pointer blocks failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_grows_on_sequential_reads_and_resets_on_a_seek() {
        let r = ReadPatterns::default();
        let ino = InodeNo(12);
        assert_eq!(r.observe(ino, 0, 4096), 0);
        assert_eq!(r.observe(ino, 4096, 4096), MIN_WINDOW);
        assert_eq!(r.observe(ino, 8192, 4096), 2 * MIN_WINDOW);
        let mut at = 12288;
        for _ in 0..20 {
            r.observe(ino, at, 4096);
            at += 4096;
        }
        assert_eq!(r.observe(ino, at, 4096), MAX_WINDOW);
        assert_eq!(r.observe(ino, 0, 4096), 0);
        // Another inode has its own pattern.
        assert_eq!(r.observe(InodeNo(13), 4096, 4096), 0);
    }
}
