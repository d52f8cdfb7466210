//! Regular file data: read, write and size changes. Reads go to the device
//! one request per contiguous run; writes go home through the data queue
//! (data.rs), or through the journal in data=journal. Only the block map's
//! metadata passes through the buffer cache.

use super::inode::InodeState;
use super::{Filesystem, FsError, Result};
use crate::format::inode::Timestamp;
use crate::format::{BlockNo, InodeNo};
use crate::journal::Handle;

/// Journal credits for one write call: a bitmap, a descriptor and the
/// inode, plus the pointer blocks a run may need.
const WRITE_CREDITS: u32 = 16;

/// Blocks of file data one handle logs in data=journal.
const JOURNALED_CHUNK_BLOCKS: usize = 64;

fn now() -> Timestamp {
    let (sec, nsec) = crate::util::now();
    Timestamp { sec, nsec }
}

impl Filesystem {
    /// The largest file size ext3 allows for this block size: the block map
    /// limit, and `i_blocks` counting 2^32 sectors (no huge_file).
    pub fn max_file_size(&self) -> u64 {
        crate::format::indirect::ext3_max_size(self.block_size).unwrap_or(0)
    }

    /// Reads up to `size` bytes at `offset`; holes read as zeros.
    pub fn read(&self, ino: InodeNo, offset: u64, size: u32) -> Result<Vec<u8>> {
        let inode = self.iget(ino)?;
        let st = inode.state.read();
        if st.disk.is_dir() {
            return Err(FsError::IsDir);
        }
        let end = (offset + size as u64).min(st.disk.i_size);
        if offset >= end {
            return Ok(Vec::new());
        }
        let mut out = vec![0u8; (end - offset) as usize];
        self.read_into(ino, &st, offset, &mut out)?;
        Ok(out)
    }

    fn read_into(&self, ino: InodeNo, st: &InodeState, offset: u64, out: &mut [u8]) -> Result<()> {
        let bs = self.block_size as u64;
        let mut pos = offset;
        let end = offset + out.len() as u64;
        while pos < end {
            let logical = (pos / bs) as u32;
            let want = ((end - 1) / bs - pos / bs + 1) as u32;
            let m = self.map_blocks(ino, st, logical, want)?;
            let run_end = ((logical as u64 + m.count as u64) * bs).min(end);
            let dst = &mut out[(pos - offset) as usize..(run_end - offset) as usize];
            match m.physical {
                None => dst.fill(0),
                Some(p) => {
                    self.data.read(dst, p.0 as u64 * bs + pos % bs)?;
                    if self.data_journal {
                        self.overlay_cached(p.0, logical as u64 * bs, pos, dst);
                    }
                }
            }
            pos = run_end;
        }
        Ok(())
    }

    /// data=journal: the newest copy of a data block may be in the cache
    /// (logged, not yet home), so cached blocks win over the device.
    fn overlay_cached(&self, first: u32, run_start: u64, pos: u64, dst: &mut [u8]) {
        let bs = self.block_size as u64;
        let end = pos + dst.len() as u64;
        let mut at = pos;
        while at < end {
            let block = first + ((at - run_start) / bs) as u32;
            let in_block = (at % bs) as usize;
            let n = ((bs - at % bs) as usize).min((end - at) as usize);
            if let Some(buf) = self.cache.peek(BlockNo(block)) {
                let from = (at - pos) as usize;
                dst[from..from + n].copy_from_slice(&buf.read()[in_block..in_block + n]);
            }
            at += n as u64;
        }
    }

    /// Writes `data` at `offset`, allocating blocks as needed.
    pub fn write(&self, ino: InodeNo, offset: u64, data: &[u8], privileged: bool) -> Result<usize> {
        if self.read_only {
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
        // data=journal logs file data, so a large write is split into
        // handles the log can hold; otherwise one handle maps it all.
        let chunk = if self.data_journal {
            JOURNALED_CHUNK_BLOCKS * self.block_size as usize
        } else {
            data.len().max(1)
        };
        let mut written = 0;
        for piece in data.chunks(chunk) {
            if !self.data_journal {
                self.data.throttle();
            }
            let at = offset + written as u64;
            let n = self.write_handle(ino, &mut st, at, piece, privileged)?;
            written += n;
            if n < piece.len() {
                break;
            }
        }
        Ok(written)
    }

    /// One handle's worth of a write: map, write, update the inode.
    fn write_handle(
        &self,
        ino: InodeNo,
        st: &mut InodeState,
        offset: u64,
        data: &[u8],
        privileged: bool,
    ) -> Result<usize> {
        let mut h = self.journal.start(WRITE_CREDITS)?;
        let (written, err) = self.write_runs(&mut h, ino, st, offset, data, privileged);
        if written > 0 {
            let end = offset + written as u64;
            if end > st.disk.i_size {
                st.disk.i_size = end;
            }
            let t = now();
            st.disk.i_mtime = t;
            st.disk.i_ctime = t;
        }
        let wrote_inode = self.write_inode(&mut h, ino, &st.disk);
        let stopped = h.stop();
        match err {
            // A short write is success for what was written, as on Linux.
            Some(FsError::NoSpace) if written > 0 => {}
            Some(e) => return Err(e),
            None => {}
        }
        wrote_inode?;
        stopped?;
        Ok(written)
    }

    /// Writes run by run; returns the bytes written from the start of
    /// `data` and the error that stopped it, if any.
    fn write_runs(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        st: &mut InodeState,
        offset: u64,
        data: &[u8],
        privileged: bool,
    ) -> (usize, Option<FsError>) {
        let bs = self.block_size as u64;
        let end = offset + data.len() as u64;
        let mut pos = offset;
        while pos < end {
            let logical = (pos / bs) as u32;
            let want = ((end - 1) / bs - pos / bs + 1) as u32;
            let m = match self.get_blocks(h, ino, st, logical, want, privileged) {
                Ok(m) => m,
                Err(e) => return ((pos - offset) as usize, Some(e)),
            };
            let Some(p) = m.physical else {
                return (
                    (pos - offset) as usize,
                    Some(FsError::Invalid("allocation returned a hole")),
                );
            };
            let run_start = logical as u64 * bs;
            let chunk_end = (run_start + m.count as u64 * bs).min(end);
            let src = &data[(pos - offset) as usize..(chunk_end - offset) as usize];
            let res = if self.data_journal {
                self.write_run_journaled(h, p.0, run_start, pos, src, m.new)
            } else {
                self.write_run(p.0 as u64 * bs, run_start, pos, src, m.new)
            };
            if let Err(e) = res {
                return ((pos - offset) as usize, Some(e));
            }
            pos = chunk_end;
        }
        (data.len(), None)
    }

    /// Writes `src` at file offset `pos` inside a run of blocks that starts
    /// at disk byte `disk` (file offset `run_start`). Partial blocks at the
    /// edges keep their old bytes, or read as zeros when newly allocated.
    fn write_run(&self, disk: u64, run_start: u64, pos: u64, src: &[u8], new: bool) -> Result<()> {
        let bs = self.block_size as u64;
        let end = pos + src.len() as u64;
        let lo = pos / bs * bs;
        let hi = end.div_ceil(bs) * bs;
        let disk_lo = disk + (lo - run_start);
        let first = (disk_lo / bs) as u32;
        if lo == pos && hi == end {
            self.data.write(first, src);
            return Ok(());
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
        self.data.write(first, &buf);
        Ok(())
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
        let bs = self.block_size as u64;
        let end = pos + src.len() as u64;
        let mut at = pos;
        while at < end {
            let block = first + ((at - run_start) / bs) as u32;
            let in_block = (at % bs) as usize;
            let n = ((bs - at % bs) as usize).min((end - at) as usize);
            let buf = if new {
                self.cache.get_new(BlockNo(block))?
            } else {
                self.cache.get(BlockNo(block))?
            };
            h.get_write_access(&buf)?;
            let from = (at - pos) as usize;
            buf.write()[in_block..in_block + n].copy_from_slice(&src[from..from + n]);
            h.dirty_metadata(&buf)?;
            at += n as u64;
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
            let tail = size % bs;
            if tail != 0 {
                let m = self.map_blocks(ino, st, (size / bs) as u32, 1)?;
                if let Some(p) = m.physical {
                    if self.data_journal {
                        let buf = self.cache.get(p)?;
                        h.get_write_access(&buf)?;
                        buf.write()[tail as usize..].fill(0);
                        h.dirty_metadata(&buf)?;
                    } else {
                        let mut block = vec![0u8; bs as usize];
                        self.data.read(&mut block, p.0 as u64 * bs)?;
                        block[tail as usize..].fill(0);
                        self.data.write(p.0, &block);
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

impl Filesystem {
    /// fsync and fdatasync: everything written so far is durable on return.
    /// File data is written out first, then the transaction holding its
    /// metadata commits; the commit's flush covers the data, and when there
    /// was nothing to commit the device is flushed here.
    pub fn fsync(&self, _ino: InodeNo, _datasync: bool) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        let written = self.data.drain();
        if let Some(e) = self.data.take_error() {
            return Err(e.into());
        }
        self.journal.force_commit()?;
        if !self.data.flushed_through(written) {
            self.dev.flush()?;
        }
        Ok(())
    }

    /// fallocate modes 0 and KEEP_SIZE. ext3 has no unwritten extents, so
    /// the holes in the range are allocated and zeroed, as
    /// posix_fallocate's fallback would do.
    pub fn fallocate(
        &self,
        ino: InodeNo,
        offset: u64,
        len: u64,
        keep_size: bool,
        privileged: bool,
    ) -> Result<()> {
        if self.read_only {
            return Err(FsError::ReadOnly);
        }
        let end = offset.checked_add(len).ok_or(FsError::FileTooBig)?;
        if len == 0 {
            return Err(FsError::Invalid("zero-length fallocate"));
        }
        if end > self.max_file_size() {
            return Err(FsError::FileTooBig);
        }
        let inode = self.iget(ino)?;
        let mut st = inode.state.write();
        if !st.disk.is_reg() {
            return Err(FsError::Invalid("fallocate of a non-regular file"));
        }
        let bs = self.block_size as u64;
        let mut logical = offset / bs;
        let last = (end - 1) / bs;
        let mut h = self.journal.start(WRITE_CREDITS)?;
        let mut res = Ok(());
        while logical <= last && res.is_ok() {
            let want = (last - logical + 1).min(u32::MAX as u64) as u32;
            res = self
                .fill_hole(&mut h, ino, &mut st, logical as u32, want, privileged)
                .map(|n| logical += n as u64);
        }
        if res.is_ok() && !keep_size && end > st.disk.i_size {
            st.disk.i_size = end;
        }
        st.disk.i_ctime = now();
        let wrote = self.write_inode(&mut h, ino, &st.disk);
        h.stop()?;
        res?;
        wrote
    }

    /// Allocates and zeroes the blocks of a hole at `logical`, or skips
    /// mapped blocks; returns how many blocks were passed over.
    fn fill_hole(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        st: &mut InodeState,
        logical: u32,
        want: u32,
        privileged: bool,
    ) -> Result<u32> {
        let m = self.get_blocks(h, ino, st, logical, want, privileged)?;
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
