//! Regular file data: read, write and size changes. Reads go to the device
//! one request per contiguous run; writes go home through the data queue
//! (data.rs), or through the journal in data=journal. Only the block map's
//! metadata passes through the buffer cache.

use super::bmap::NewBlocks;
use super::inode::InodeState;
use super::now;
use super::{Filesystem, FsError, Result};
use crate::format::inode::Inode;
use crate::format::{BlockNo, InodeNo};
use crate::journal::{CommitStart, Handle};

use super::data::DirectWrite;

/// Journal credits to map one run of new blocks, beyond its pointer
/// blocks: bitmaps and descriptors for the data and its pointer blocks
/// (either may cross a group), the superblock, the inode, and the pointer
/// chain above the run.
const RUN_BASE_CREDITS: u32 = 16;

/// Blocks of file data one handle logs in data=journal.
const JOURNALED_CHUNK_BLOCKS: usize = 64;

/// Blocks one handle maps otherwise. Credits would allow more; the bound
/// keeps handles short and lets the data queue throttle a huge write
/// (an in-process caller may pass any length) every few MiB.
const MAPPED_CHUNK_BLOCKS: usize = 1024;

/// Whole-block stretches at least this long go straight from the caller's
/// buffer to the device (`DataQueue::begin_direct`) instead of through the
/// queue: for the kernel's writeback of a large file, the copy into the
/// queue and the hand-off to its writer would cost more than they save.
/// Shorter writes are queued, so that they return at once and adjacent
/// ones coalesce.
const DIRECT_MIN_BLOCKS: u64 = 16;

/// A direct write claimed inside a handle, to be written once it stops.
type Deferred<'q, 'd> = (DirectWrite<'q>, &'d [u8]);

/// What one handle's share of a write did.
pub(super) struct RunsDone<'q, 'd> {
    /// Bytes written (or claimed) from the start of the share.
    pub(super) bytes: usize,
    /// What stopped it short.
    pub(super) err: Option<FsError>,
    /// Claimed direct writes, for after the handle stops.
    pub(super) direct: Vec<Deferred<'q, 'd>>,
}

impl RunsDone<'_, '_> {
    fn stopped(mut self, e: FsError) -> Self {
        self.err = Some(e);
        self
    }
}

/// What an fsync runs when it is done (see `Filesystem::fsync_then`).
pub type FsyncCallback = Box<dyn FnOnce(Result<()>) + Send>;

/// One block's share of a byte range inside a run of contiguous blocks.
struct Piece {
    /// The disk block.
    block: u32,
    /// Where the share starts in the block, and in the range.
    in_block: usize,
    at: usize,
    len: usize,
}

/// The pieces of `len` bytes at file offset `pos`, in a run of blocks that
/// starts at disk block `first` and file offset `run_start`.
struct RunPieces {
    bs: u64,
    first: u32,
    run_start: u64,
    pos: u64,
    next: u64,
    end: u64,
}

impl RunPieces {
    fn new(block_size: u32, first: u32, run_start: u64, pos: u64, len: usize) -> Self {
        RunPieces {
            bs: block_size as u64,
            first,
            run_start,
            pos,
            next: pos,
            end: pos + len as u64,
        }
    }
}

impl Iterator for RunPieces {
    type Item = Piece;

    fn next(&mut self) -> Option<Piece> {
        if self.next >= self.end {
            return None;
        }
        let at = self.next;
        let len = (self.bs - at % self.bs).min(self.end - at);
        self.next += len;
        Some(Piece {
            block: self.first + ((at - self.run_start) / self.bs) as u32,
            in_block: (at % self.bs) as usize,
            at: (at - self.pos) as usize,
            len: len as usize,
        })
    }
}

impl Filesystem {
    /// The largest file size ext3 allows for this block size: the block map
    /// limit, and `i_blocks` counting 2^32 sectors (no huge_file).
    pub fn max_file_size(&self) -> u64 {
        crate::format::indirect::ext3_max_size(self.block_size).unwrap_or(0)
    }

    /// Reads up to `size` bytes at `offset`; holes read as zeros.
    pub fn read(&self, ino: InodeNo, offset: u64, size: u32) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        let n = self.read_buf(ino, offset, size, &mut out)?;
        out.truncate(n);
        Ok(out)
    }

    /// Reads up to `size` bytes at `offset` into the front of `buf` and
    /// returns how many there are. `buf` grows as needed and is never
    /// cleared: every returned byte is overwritten (data, or zeros for
    /// holes), so a buffer kept across reads costs no zeroing per request.
    pub fn read_buf(
        &self,
        ino: InodeNo,
        offset: u64,
        size: u32,
        buf: &mut Vec<u8>,
    ) -> Result<usize> {
        let inode = self.iget(ino)?;
        let st = inode.state.read();
        if st.disk.is_dir() {
            return Err(FsError::IsDir);
        }
        let end = offset.saturating_add(size as u64).min(st.disk.i_size);
        if offset >= end {
            return Ok(0);
        }
        let n = (end - offset) as usize;
        if buf.len() < n {
            buf.resize(n, 0);
        }
        self.read_into(ino, &st, offset, &mut buf[..n])?;
        self.read_ahead(ino, &st, offset, end);
        Ok(n)
    }

    /// While a file is read sequentially, asks for the pointer blocks of
    /// the readahead window past `end` to be read in the background.
    fn read_ahead(&self, ino: InodeNo, st: &InodeState, offset: u64, end: u64) {
        let window = self.readahead.observe(ino, offset, end - offset);
        let bs = self.block_size as u64;
        let to = (end + window).min(st.disk.i_size).div_ceil(bs);
        let from = end.div_ceil(bs);
        if window > 0 && to > from && to <= u32::MAX as u64 {
            self.readahead.request(ino, from as u32, to as u32);
        }
    }

    /// Reads the pointer blocks that map logical blocks `from..to` into the
    /// cache, one per last-level pointer block (see readahead.rs).
    pub(crate) fn load_leaves(
        &self,
        ino: InodeNo,
        st: &InodeState,
        from: u32,
        to: u32,
    ) -> Result<()> {
        let mut logical = from;
        while logical < to {
            let path = crate::format::indirect::block_to_path(self.block_size, logical as u64)
                .map_err(|_| FsError::FileTooBig)?;
            if let Some(leaf) = self.leaf_location(ino, st, logical)? {
                if self.cache.peek(leaf).is_none() {
                    self.cache.get(leaf)?;
                }
            }
            logical = logical.saturating_add(path.blocks_to_boundary + 1);
        }
        Ok(())
    }

    /// One device read per contiguous run. Where a run ends at a pointer
    /// block boundary and the next pointer block lies just after it on
    /// disk (as ext3 allocates it, in line), that block is read in the
    /// same request and put in the cache.
    fn read_into(&self, ino: InodeNo, st: &InodeState, offset: u64, out: &mut [u8]) -> Result<()> {
        let bs = self.block_size as u64;
        let mut pos = offset;
        let end = offset + out.len() as u64;
        while pos < end {
            let logical = (pos / bs) as u32;
            let want = ((end - 1) / bs - pos / bs + 1) as u32;
            let m = self.map_blocks(ino, st, logical, want)?;
            let run_end = ((logical as u64 + m.count as u64) * bs).min(end);
            let (a, b) = ((pos - offset) as usize, (run_end - offset) as usize);
            let Some(p) = m.physical else {
                out[a..b].fill(0);
                pos = run_end;
                continue;
            };
            let disk = p.0 as u64 * bs + pos % bs;
            let next = logical + m.count;
            let beside = match m.boundary {
                true => self.leaf_beside(ino, st, p.0 + m.count, next)?,
                false => None,
            };
            match beside {
                Some((leaf, extra)) if (end - run_end) >= extra as u64 * bs => {
                    let with = b + extra as usize * bs as usize;
                    self.data.read(&mut out[a..with], disk)?;
                    let at = with - bs as usize;
                    self.cache.fill_read(leaf, &out[at..with])?;
                }
                _ => {
                    self.data.read(&mut out[a..b], disk)?;
                    if m.boundary && run_end == end {
                        self.readahead.request(ino, next, next.saturating_add(1));
                    }
                }
            }
            if self.data_journal || self.has_logged_tails() {
                self.overlay_cached(p.0, logical as u64 * bs, pos, &mut out[a..b]);
            }
            pos = run_end;
        }
        Ok(())
    }

    /// The uncached pointer block for logical block `next`, when it lies
    /// within the three blocks from `after` (the block after a run ends):
    /// the block and how many blocks from `after` reach it.
    fn leaf_beside(
        &self,
        ino: InodeNo,
        st: &InodeState,
        after: u32,
        next: u32,
    ) -> Result<Option<(BlockNo, u32)>> {
        let leaf = match self.leaf_location(ino, st, next) {
            Ok(Some(leaf)) => leaf,
            // No pointer block there, or the run ends at the map's reach.
            Ok(None) | Err(FsError::FileTooBig) => return Ok(None),
            Err(e) => return Err(e),
        };
        if leaf.0 < after || leaf.0 - after >= 3 || self.cache.peek(leaf).is_some() {
            return Ok(None);
        }
        Ok(Some((leaf, leaf.0 - after + 1)))
    }

    /// data=journal, or a logged truncate tail (tail.rs): the newest copy of
    /// a data block may be in the cache (logged, not yet home), so cached
    /// blocks win over the device.
    fn overlay_cached(&self, first: u32, run_start: u64, pos: u64, dst: &mut [u8]) {
        let run = RunPieces::new(self.block_size, first, run_start, pos, dst.len());
        for p in run {
            if let Some(buf) = self.cache.peek(BlockNo(p.block)) {
                dst[p.at..p.at + p.len]
                    .copy_from_slice(&buf.read()[p.in_block..p.in_block + p.len]);
            }
        }
    }

    /// Writes `data` at `offset`, allocating blocks as needed; mtime and
    /// ctime move.
    pub fn write(&self, ino: InodeNo, offset: u64, data: &[u8], privileged: bool) -> Result<usize> {
        self.write_times(ino, offset, data, privileged, true)
    }

    /// A write-back from the kernel's page cache (FUSE_WRITE_CACHE). Under
    /// FUSE's writeback cache the kernel owns a file's mtime and ctime: it
    /// sends them in a SETATTR of its own, which may arrive before this
    /// write (write-back requests are sent in the background), so the
    /// write leaves them as they are.
    pub fn write_back(
        &self,
        ino: InodeNo,
        offset: u64,
        data: &[u8],
        privileged: bool,
    ) -> Result<usize> {
        self.write_times(ino, offset, data, privileged, false)
    }

    fn write_times(
        &self,
        ino: InodeNo,
        offset: u64,
        data: &[u8],
        privileged: bool,
        touch_times: bool,
    ) -> Result<usize> {
        if self.mounted_read_only() {
            return Err(FsError::ReadOnly);
        }
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or(FsError::FileTooBig)?;
        if end > self.max_file_size() {
            return Err(FsError::FileTooBig);
        }
        let inode = self.iget(ino)?;
        let mut st = inode.state.write();
        if !st.disk.is_reg() {
            return Err(FsError::Invalid("write to a non-regular file"));
        }
        super::flags::may_write(&st.disk)?;
        // A large write is split into handles the log can hold: in
        // data=journal for its data, otherwise for its pointer blocks.
        let chunk = if self.data_journal {
            JOURNALED_CHUNK_BLOCKS * self.block_size as usize
        } else {
            MAPPED_CHUNK_BLOCKS * self.block_size as usize
        };
        let mut written = 0;
        let mut retries = 0;
        while written < data.len() {
            let piece = &data[written..(written + chunk).min(data.len())];
            if self.data_journal {
                // Before the handle opens: making room may commit.
                let room = self
                    .journal
                    .make_room_for_pins(self.write_credits(piece.len()));
                match room {
                    Err(_) if written > 0 => break,
                    Err(e) => return Err(e.into()),
                    Ok(()) => {}
                }
            } else {
                self.data.throttle();
            }
            let at = offset + written as u64;
            match self.write_handle(ino, &mut st, at, piece, (privileged, touch_times)) {
                Ok(0) => break,
                Ok(n) => written += n,
                Err(FsError::NoSpace) if self.should_retry_alloc(&mut retries) => {}
                // What was written stays written, as on Linux.
                Err(_) if written > 0 => break,
                Err(e) => return Err(e),
            }
        }
        // A synchronous inode (chattr +S) commits each write before it
        // returns, as ext3's generic_write_sync does for IS_SYNC.
        let sync = super::flags::is_sync(&st.disk);
        drop(st);
        if sync && written > 0 {
            self.fsync(ino, false)?;
        }
        Ok(written)
    }

    /// Credits for a run of `n` blocks: its pointer blocks (new ones and
    /// the ones they hang from), the fixed part, and in data=journal the
    /// data blocks themselves.
    fn run_credits(&self, n: u32) -> u32 {
        let per_pointer_block = self.block_size / 4;
        let logged = if self.data_journal { n } else { 0 };
        2 * (n / per_pointer_block + 1) + RUN_BASE_CREDITS + logged
    }

    /// How many of `want` blocks the handle's credits can map in one run,
    /// extending the handle where the transaction has room; at least one
    /// credit is kept for the inode. Zero means: end this handle.
    fn fit_run(&self, h: &mut Handle<'_>, want: u32) -> u32 {
        let need = self.run_credits(want) + 1;
        if h.credits() >= need || h.extend(need - h.credits()) {
            return want;
        }
        let mut n = want / 2;
        while n > 0 && self.run_credits(n) + 1 > h.credits() {
            n /= 2;
        }
        n
    }

    /// Credits to start a handle that writes `len` bytes.
    pub(super) fn write_credits(&self, len: usize) -> u32 {
        let blocks = (len as u64).div_ceil(self.block_size as u64) + 1;
        let want = self.run_credits(blocks.min(u32::MAX as u64) as u32) + 1;
        want.min(self.journal.max_transaction_credits())
    }

    /// One handle's worth of a write: map, write, update the inode.
    fn write_handle(
        &self,
        ino: InodeNo,
        st: &mut InodeState,
        offset: u64,
        data: &[u8],
        (privileged, touch_times): (bool, bool),
    ) -> Result<usize> {
        let mut h = self.journal.start(self.write_credits(data.len()))?;
        let done = self.write_runs(&mut h, ino, st, offset, data, privileged);
        let written = done.bytes;
        if written > 0 {
            let end = offset + written as u64;
            if end > st.disk.i_size {
                st.disk.i_size = end;
            }
            if touch_times {
                let t = now();
                st.disk.i_mtime = t;
                st.disk.i_ctime = t;
            }
        }
        let wrote_inode = self.write_inode(&mut h, ino, &st.disk);
        let stopped = h.stop();
        // After the stop, so that no commit waits for these device writes
        // while the handle is open; before the next start, which may wait
        // for a commit that (in data=ordered) waits for them.
        let direct: std::io::Result<()> = done
            .direct
            .into_iter()
            .try_for_each(|(claim, src)| claim.write(src));
        match done.err {
            // A short write is success for what was written, as on Linux.
            Some(FsError::NoSpace) if written > 0 => {}
            Some(e) => return Err(e),
            None => {}
        }
        wrote_inode?;
        stopped?;
        direct?;
        Ok(written)
    }

    /// Writes run by run: the bytes written from the start of `data`, the
    /// error that stopped it, if any, and the direct writes still to do.
    pub(super) fn write_runs<'d>(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        st: &mut InodeState,
        offset: u64,
        data: &'d [u8],
        privileged: bool,
    ) -> RunsDone<'_, 'd> {
        let bs = self.block_size as u64;
        let end = offset + data.len() as u64;
        let mut done = RunsDone {
            bytes: 0,
            err: None,
            direct: Vec::new(),
        };
        let mut pos = offset;
        while pos < end {
            done.bytes = (pos - offset) as usize;
            let logical = (pos / bs) as u32;
            let want = self.fit_run(h, ((end - 1) / bs - pos / bs + 1) as u32);
            if want == 0 {
                // Out of credits: the caller goes on in a new handle.
                return done;
            }
            let m = match self.get_blocks(h, ino, st, logical, want, privileged) {
                Ok(m) => m,
                Err(e) => return done.stopped(e),
            };
            let Some(p) = m.physical else {
                return done.stopped(FsError::Invalid("allocation returned a hole"));
            };
            let run_start = logical as u64 * bs;
            // A logged truncate tail is written through the log too.
            let (count, logged) = match self.data_journal {
                true => (m.count, true),
                false => match self.plain_data_prefix(p.0, m.count) {
                    0 if h.extend(1) || h.credits() > 1 => (1, true),
                    0 => return done,
                    n => (n, false),
                },
            };
            let chunk_end = (run_start + count as u64 * bs).min(end);
            let src = &data[(pos - offset) as usize..(chunk_end - offset) as usize];
            let res = if logged {
                self.write_run_journaled(h, p.0, run_start, pos, src, m.new)
            } else {
                self.write_run(ino, p.0 as u64 * bs, run_start, pos, src, m.new)
                    .map(|claim| done.direct.extend(claim))
            };
            if let Err(e) = res {
                return done.stopped(e);
            }
            pos = chunk_end;
        }
        done.bytes = data.len();
        done
    }

    /// Writes `src` at file offset `pos` inside a run of blocks that starts
    /// at disk byte `disk` (file offset `run_start`). Partial blocks at the
    /// edges keep their old bytes, or read as zeros when newly allocated.
    /// A long whole-block stretch is only claimed here, and returned to be
    /// written once the handle has stopped.
    fn write_run<'d>(
        &self,
        ino: InodeNo,
        disk: u64,
        run_start: u64,
        pos: u64,
        src: &'d [u8],
        new: bool,
    ) -> Result<Option<Deferred<'_, 'd>>> {
        let bs = self.block_size as u64;
        let end = pos + src.len() as u64;
        let lo = pos / bs * bs;
        let hi = end.div_ceil(bs) * bs;
        let disk_lo = disk + (lo - run_start);
        let first = (disk_lo / bs) as u32;
        if lo == pos && hi == end {
            let blocks = (hi - lo) / bs;
            if blocks >= DIRECT_MIN_BLOCKS {
                let claim = self.data.begin_direct(ino.0, first, blocks as u32);
                return Ok(Some((claim, src)));
            }
            self.data.write(ino.0, first, src);
            return Ok(None);
        }
        let mut buf = vec![0u8; (hi - lo) as usize];
        let last = buf.len() - bs as usize;
        if !new {
            if pos > lo {
                self.data.read(&mut buf[..bs as usize], disk_lo)?;
            }
            if end < hi && (last > 0 || pos == lo) {
                self.data.read(&mut buf[last..], disk_lo + last as u64)?;
            }
        }
        let at = (pos - lo) as usize;
        buf[at..at + src.len()].copy_from_slice(src);
        self.data.write(ino.0, first, &buf);
        Ok(None)
    }

    /// data=journal: the run's blocks go through the cache and the journal,
    /// like metadata, and reach home only at checkpoint.
    fn write_run_journaled(
        &self,
        h: &mut Handle<'_>,
        first: u32,
        run_start: u64,
        pos: u64,
        src: &[u8],
        new: bool,
    ) -> Result<()> {
        for p in RunPieces::new(self.block_size, first, run_start, pos, src.len()) {
            let buf = if new {
                self.cache.get_new(BlockNo(p.block))?
            } else {
                self.cache.get(BlockNo(p.block))?
            };
            h.modify(&buf)?[p.in_block..p.in_block + p.len]
                .copy_from_slice(&src[p.at..p.at + p.len]);
        }
        Ok(())
    }

    /// Changes a file's size: shrinking frees the blocks past the end and
    /// zeroes the tail of the last block; growing leaves a hole.
    pub(crate) fn set_size(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        st: &mut InodeState,
        size: u64,
    ) -> Result<()> {
        if size > self.max_file_size() {
            return Err(FsError::FileTooBig);
        }
        let bs = self.block_size as u64;
        if size < st.disk.i_size {
            self.reservations.release(ino);
            let tail = size % bs;
            if tail != 0 {
                let m = self.map_blocks(ino, st, (size / bs) as u32, 1)?;
                if let Some(p) = m.physical {
                    if self.data_journal {
                        let buf = self.cache.get(p)?;
                        h.modify(&buf)?[tail as usize..].fill(0);
                    } else {
                        self.zero_tail_logged(h, p, tail as usize)?;
                    }
                }
            }
        }
        if size < st.disk.i_size || size == 0 {
            self.free_blocks_from(h, ino, st, size.div_ceil(bs))?;
        }
        st.disk.i_size = size;
        Ok(())
    }
}

/// Bytes one copy_file_range request copies at most: the reply counts in
/// 32 bits, and callers loop over what is left, as they must for any
/// short copy.
const COPY_RANGE_MAX: u64 = 1 << 30;

/// Bytes moved per read and write inside one copy.
const COPY_CHUNK: usize = 1 << 20;

impl Filesystem {
    /// copy_file_range: copies up to `len` bytes from `src` at `off_in` to
    /// `dst` at `off_out` and returns how many, stopping at the source's
    /// end. Each chunk is an ordinary read and write, so the copy takes the
    /// same paths (and the same data-mode ordering) as a program copying by
    /// hand; the kernel has already written back the pages of both ranges.
    pub fn copy_range(
        &self,
        src: InodeNo,
        off_in: u64,
        dst: InodeNo,
        off_out: u64,
        len: u64,
        privileged: bool,
    ) -> Result<usize> {
        let len = len.min(COPY_RANGE_MAX);
        let (in_end, out_end) = match (off_in.checked_add(len), off_out.checked_add(len)) {
            (Some(a), Some(b)) => (a, b),
            _ => return Err(FsError::Invalid("copy range past the largest offset")),
        };
        if src == dst && off_in < out_end && off_out < in_end {
            return Err(FsError::Invalid("overlapping copy within one file"));
        }
        let mut chunk = Vec::new();
        let mut done = 0u64;
        while done < len {
            let want = (len - done).min(COPY_CHUNK as u64) as u32;
            let n = self.read_buf(src, off_in + done, want, &mut chunk)?;
            if n == 0 {
                break;
            }
            let wrote = match self.write(dst, off_out + done, &chunk[..n], privileged) {
                Ok(w) => w,
                // What was copied stays copied, as with a short write.
                Err(_) if done > 0 => break,
                Err(e) => return Err(e),
            };
            done += wrote as u64;
            if wrote < n {
                break;
            }
        }
        Ok(done as usize)
    }
}

impl Filesystem {
    /// fsync and fdatasync: the file's data and everything the journal
    /// holds so far are durable on return. The file's queued data is written
    /// out first, then the running transaction commits (in data=ordered that
    /// commit writes every file's queued data, as ext3's does); the commit's
    /// flush covers the data, and when no commit flushed after it the
    /// device is flushed here.
    pub fn fsync(&self, ino: InodeNo, datasync: bool) -> Result<()> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.fsync_then(
            ino,
            datasync,
            CommitStart::Now,
            Box::new(move |res| {
                let _ = tx.send(res);
            }),
        );
        // A callback dropped unrun would be a bug; it reads as EIO, not a hang.
        rx.recv()
            .unwrap_or_else(|_| Err(std::io::Error::from_raw_os_error(libc::EIO).into()))
    }

    /// [`Filesystem::fsync`] without waiting for the commit: `done` gets the
    /// result on the thread that finishes it (the FUSE adapter replies from
    /// there; see `Journal::force_commit_then`). Everything before the
    /// commit (the file's data, the batching wait, a commit no one else is
    /// running) still happens on this thread; with [`CommitStart::Deferred`]
    /// the commit waits for the caller's `Journal::commit_if_requested`.
    pub fn fsync_then(
        &self,
        ino: InodeNo,
        _datasync: bool,
        start: CommitStart,
        done: FsyncCallback,
    ) {
        if self.mounted_read_only() {
            return done(Ok(()));
        }
        let written = self.data.drain_inode(ino.0);
        if let Some(e) = self.data.take_error() {
            return done(Err(e.into()));
        }
        let data = self.data.clone();
        let dev = self.dev.clone();
        self.journal.force_commit_then(
            start,
            Box::new(move |res| {
                let res = res.and_then(|()| match data.flushed_through(written) {
                    true => Ok(()),
                    false => dev.flush(),
                });
                done(res.map_err(FsError::from));
            }),
        );
    }
    /// fallocate modes 0 and KEEP_SIZE. ext3 has no unwritten extents, so
    /// the holes in the range are allocated and zeroed, as
    /// posix_fallocate's fallback would do. An ENOSPC while blocks freed
    /// by an uncommitted transaction wait is retried after a commit.
    pub fn fallocate(
        &self,
        ino: InodeNo,
        offset: u64,
        len: u64,
        keep_size: bool,
        privileged: bool,
    ) -> Result<()> {
        let (inode, end) = self.fallocate_target(ino, offset, len)?;
        let mut retries = 0;
        loop {
            let mut st = inode.state.write();
            let res = self.allocate_locked(ino, &mut st, (offset, end), keep_size, privileged);
            drop(st);
            match res {
                Err(FsError::NoSpace) if self.should_retry_alloc(&mut retries) => {}
                res => return res,
            }
        }
    }

    /// What every fallocate mode checks first, as vfs_fallocate does: a
    /// writable mount, a length, an end within the largest file. Returns
    /// the inode and the end of the range.
    pub(super) fn fallocate_target(
        &self,
        ino: InodeNo,
        offset: u64,
        len: u64,
    ) -> Result<(std::sync::Arc<super::inode::InodeRef>, u64)> {
        if self.mounted_read_only() {
            return Err(FsError::ReadOnly);
        }
        if len == 0 {
            return Err(FsError::Invalid("zero-length fallocate"));
        }
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.max_file_size())
            .ok_or(FsError::FileTooBig)?;
        Ok((self.iget(ino)?, end))
    }

    /// One attempt at allocating bytes `offset..end`: all or nothing.
    fn allocate_locked(
        &self,
        ino: InodeNo,
        st: &mut InodeState,
        (offset, end): (u64, u64),
        keep_size: bool,
        privileged: bool,
    ) -> Result<()> {
        if !st.disk.is_reg() {
            return Err(FsError::Invalid("fallocate of a non-regular file"));
        }
        super::flags::may_write(&st.disk)?;
        let bs = self.block_size as u64;
        if keep_size && end.div_ceil(bs) > st.disk.i_size.div_ceil(bs) {
            // A block-mapped file cannot own blocks past its size (ext4's
            // EOFBLOCKS flag is for extents; e2fsck rejects them here), and
            // silently allocating less would break fallocate's promise.
            // Linux refuses fallocate on such files altogether.
            return Err(FsError::NotSupported);
        }
        let first = offset / bs;
        let last = (end - 1) / bs;
        // The common ENOSPC refused before anything changes: the holes
        // alone need more blocks than are free.
        let holes = self.holes_in(ino, st, first, last)?;
        if !self.may_allocate(holes.min(u32::MAX as u64) as u32, privileged) {
            return Err(FsError::NoSpace);
        }
        let new_size = (!keep_size).then_some(end);
        self.allocate_handles(ino, st, (first, last), new_size, privileged)
    }

    /// Allocates the holes of blocks `first..=last`, handle by handle,
    /// growing i_size towards `new_size` as blocks are added; on failure
    /// gives back what every handle took.
    fn allocate_handles(
        &self,
        ino: InodeNo,
        st: &mut InodeState,
        (first, last): (u64, u64),
        new_size: Option<u64>,
        privileged: bool,
    ) -> Result<()> {
        let bs = self.block_size as u64;
        let saved = (st.disk.clone(), st.last_alloc);
        // What each handle allocated, for an undo if a later one fails
        // (another file took the blocks meanwhile, or pointer blocks).
        let mut earlier: Vec<NewBlocks> = Vec::new();
        let mut logical = first;
        loop {
            let left = (last + 1 - logical).min(u32::MAX as u64) as usize;
            let mut h = self
                .journal
                .start(self.write_credits(left.saturating_mul(bs as usize)))?;
            let mut new = NewBlocks::default();
            let mut res = Ok(());
            while logical <= last && res.is_ok() {
                let want = self.fit_run(&mut h, (last - logical + 1).min(u32::MAX as u64) as u32);
                if want == 0 {
                    break;
                }
                res = self
                    .fill_hole(&mut h, ino, st, logical as u32, want, privileged, &mut new)
                    .map(|n| logical += n as u64);
            }
            if let Err(e) = res {
                // All or nothing: what this call allocated is given back and
                // the inode is as it was.
                if let Err(u) = self.undo_fallocate(h, ino, st, new, earlier, saved) {
                    tracing::error!(inode = ino.0, "undoing a failed fallocate: {u}");
                }
                return Err(e);
            }
            let done = logical > last;
            if let Some(end) = new_size {
                // Each handle commits on its own, so i_size must cover the
                // blocks allocated so far (ext3 allows no blocks past it).
                let reached = if done { end } else { logical * bs };
                st.disk.i_size = st.disk.i_size.max(reached);
            }
            st.disk.i_ctime = now();
            let wrote = self.write_inode(&mut h, ino, &st.disk);
            h.stop()?;
            wrote?;
            earlier.push(new);
            if done {
                return Ok(());
            }
        }
    }

    /// Blocks of `first..=last` that are holes.
    fn holes_in(&self, ino: InodeNo, st: &InodeState, first: u64, last: u64) -> Result<u64> {
        let mut holes = 0;
        let mut logical = first;
        while logical <= last {
            let want = (last - logical + 1).min(u32::MAX as u64) as u32;
            let m = self.map_blocks(ino, st, logical as u32, want)?;
            if m.physical.is_none() {
                holes += m.count as u64;
            }
            logical += m.count as u64;
        }
        Ok(holes)
    }

    /// Gives back what a failed fallocate allocated: `current`, in the
    /// handle that allocated it (which holds every block that needs), then
    /// each earlier handle's share, latest first, in a handle of its own;
    /// every step leaves a consistent file. The last restores the inode.
    fn undo_fallocate<'a>(
        &'a self,
        mut h: Handle<'a>,
        ino: InodeNo,
        st: &mut InodeState,
        current: NewBlocks,
        earlier: Vec<NewBlocks>,
        (disk, last_alloc): (Inode, Option<BlockNo>),
    ) -> Result<()> {
        let sectors = (self.block_size / 512) as u64;
        let mut res = self.unmap_new(&mut h, ino, st, &current);
        st.disk.i_blocks -= current.total() * sectors;
        for set in earlier.iter().rev() {
            if res.is_err() {
                break;
            }
            let wrote = self.write_inode(&mut h, ino, &st.disk);
            let stopped = h.stop();
            wrote?;
            stopped?;
            h = self.journal.start(self.unmap_credits(set))?;
            res = self.unmap_new(&mut h, ino, st, set);
            st.disk.i_blocks -= set.total() * sectors;
        }
        if res.is_ok() {
            st.disk = disk;
            st.last_alloc = last_alloc;
        }
        self.write_inode_and_stop(h, ino, &st.disk, res)
    }

    /// Credits to give back `set`: for each run or pointer block, the
    /// pointer block that points at it, a bitmap and a descriptor; and the
    /// inode.
    fn unmap_credits(&self, set: &NewBlocks) -> u32 {
        let pieces = set.pieces().min(u32::MAX as usize / 4) as u32;
        (3 * pieces + 2).min(self.journal.max_transaction_credits())
    }

    /// Allocates and zeroes the blocks of a hole at `logical`, or skips
    /// mapped blocks; returns how many blocks were passed over.
    #[allow(clippy::too_many_arguments)]
    fn fill_hole(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        st: &mut InodeState,
        logical: u32,
        want: u32,
        privileged: bool,
        new: &mut NewBlocks,
    ) -> Result<u32> {
        let m = self.get_blocks_noting(h, ino, st, logical, want, privileged, new)?;
        if m.new {
            if let Some(p) = m.physical {
                let bs = self.block_size as u64;
                let zeros = vec![0u8; (m.count as u64 * bs) as usize];
                self.dev.write_at(&zeros, p.0 as u64 * bs)?;
            }
        }
        Ok(m.count)
    }
}
