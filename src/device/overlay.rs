//! A copy-on-write overlay over a read-only device: writes land in memory,
//! reads see them over the base. fsck replays the journal and repairs into
//! an overlay, so `-n` can check the image "as if replayed and fixed" while
//! never writing a byte, and `-y` writes everything at the end in one sweep.

use std::collections::BTreeMap;
use std::io::{self, IoSlice};

use parking_lot::RwLock;

use super::BlockDevice;

/// Writes are kept in chunks of this many bytes: the smallest block size,
/// and the superblock's size and alignment.
const CHUNK: u64 = 1024;

pub struct OverlayDevice<'a> {
    base: &'a dyn BlockDevice,
    chunks: RwLock<BTreeMap<u64, Box<[u8]>>>,
}

impl<'a> OverlayDevice<'a> {
    pub fn new(base: &'a dyn BlockDevice) -> Self {
        OverlayDevice {
            base,
            chunks: RwLock::new(BTreeMap::new()),
        }
    }

    /// Whether anything has been written.
    pub fn is_dirty(&self) -> bool {
        !self.chunks.read().is_empty()
    }

    /// Drops every pending write.
    pub fn discard(&self) {
        self.chunks.write().clear();
    }

    /// Writes every chunk that differs from the base to `target` (normally
    /// the base opened read-write), coalescing runs, then flushes. Returns
    /// how many bytes changed.
    pub fn commit(&self, target: &dyn BlockDevice) -> io::Result<u64> {
        let chunks = self.chunks.read();
        let mut changed = 0u64;
        let mut run: Vec<u8> = Vec::new();
        let mut run_start = 0u64;
        let mut old = vec![0u8; CHUNK as usize];
        for (&index, data) in chunks.iter() {
            let off = index * CHUNK;
            self.base.read_at(&mut old[..data.len()], off)?;
            if old[..data.len()] == data[..] {
                continue;
            }
            changed += data.len() as u64;
            if !run.is_empty() && run_start + run.len() as u64 != off {
                target.write_at(&run, run_start)?;
                run.clear();
            }
            if run.is_empty() {
                run_start = off;
            }
            run.extend_from_slice(data);
        }
        if !run.is_empty() {
            target.write_at(&run, run_start)?;
        }
        target.flush()?;
        Ok(changed)
    }

    fn check_range(&self, len: usize, offset: u64) -> io::Result<()> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.base.size() => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("access of {len} bytes at {offset} is past the end of the device"),
            )),
        }
    }

    /// The length of chunk `index` (the last one may be short).
    fn chunk_len(&self, index: u64) -> usize {
        (self.base.size() - index * CHUNK).min(CHUNK) as usize
    }
}

impl BlockDevice for OverlayDevice<'_> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check_range(buf.len(), offset)?;
        if buf.is_empty() {
            return Ok(());
        }
        self.base.read_at(buf, offset)?;
        let end = offset + buf.len() as u64;
        let chunks = self.chunks.read();
        for (&index, data) in chunks.range(offset / CHUNK..end.div_ceil(CHUNK)) {
            let c_start = index * CHUNK;
            let c_end = c_start + data.len() as u64;
            let from = c_start.max(offset);
            let to = c_end.min(end);
            if from >= to {
                continue;
            }
            buf[(from - offset) as usize..(to - offset) as usize]
                .copy_from_slice(&data[(from - c_start) as usize..(to - c_start) as usize]);
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check_range(buf.len(), offset)?;
        let end = offset + buf.len() as u64;
        let mut index = offset / CHUNK;
        while index * CHUNK < end {
            let c_start = index * CHUNK;
            let len = self.chunk_len(index);
            let from = c_start.max(offset);
            let to = (c_start + len as u64).min(end);
            let whole = from == c_start && to == c_start + len as u64;
            let mut chunk = if whole {
                vec![0u8; len].into_boxed_slice()
            } else {
                let mut c = vec![0u8; len].into_boxed_slice();
                self.read_at(&mut c, c_start)?;
                c
            };
            chunk[(from - c_start) as usize..(to - c_start) as usize]
                .copy_from_slice(&buf[(from - offset) as usize..(to - offset) as usize]);
            self.chunks.write().insert(index, chunk);
            index += 1;
        }
        Ok(())
    }

    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<()> {
        let mut pos = offset;
        for b in bufs {
            self.write_at(b, pos)?;
            pos += b.len() as u64;
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn size(&self) -> u64 {
        self.base.size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemoryDevice;

    #[test]
    fn writes_stay_in_memory_until_commit() {
        let base = MemoryDevice::new(4096 + 100).unwrap();
        let o = OverlayDevice::new(&base);
        o.write_at(b"abcdef", 1020).unwrap();
        o.write_at(b"zz", 4190).unwrap();
        let mut b = [0u8; 8];
        o.read_at(&mut b, 1019).unwrap();
        assert_eq!(&b, b"\0abcdef\0");
        assert!(base.snapshot().iter().all(|&x| x == 0));
        assert!(o.write_at(b"x", 4196).is_err());
        let target = MemoryDevice::from_vec(base.snapshot());
        assert_eq!(o.commit(&target).unwrap(), 1024 * 2 + 100);
        let snap = target.snapshot();
        assert_eq!(&snap[1020..1026], b"abcdef");
        assert_eq!(&snap[4190..4192], b"zz");
    }
}
