//! An in-memory block device for tests: the whole image in one buffer.

use std::io;

use parking_lot::RwLock;

use super::BlockDevice;

/// A fixed-size device held in memory. Flush is a no-op; it counts flushes so
/// tests can assert that durability points were reached.
pub struct MemoryDevice {
    data: RwLock<Vec<u8>>,
    flushes: std::sync::atomic::AtomicU64,
}

impl MemoryDevice {
    pub fn new(size: u64) -> io::Result<Self> {
        let len = usize::try_from(size)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "device too large"))?;
        Ok(Self::from_vec(vec![0; len]))
    }

    pub fn from_vec(data: Vec<u8>) -> Self {
        MemoryDevice {
            data: RwLock::new(data),
            flushes: Default::default(),
        }
    }

    /// A copy of the whole image.
    pub fn snapshot(&self) -> Vec<u8> {
        self.data.read().clone()
    }

    pub fn flush_count(&self) -> u64 {
        self.flushes.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn range(&self, len: usize, offset: u64, size: usize) -> io::Result<std::ops::Range<usize>> {
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        match start.checked_add(len) {
            Some(end) if end <= size => Ok(start..end),
            _ => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "access of {len} bytes at {offset} is past the end of a {size}-byte device"
                ),
            )),
        }
    }
}

impl BlockDevice for MemoryDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let data = self.data.read();
        let r = self.range(buf.len(), offset, data.len())?;
        buf.copy_from_slice(&data[r]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut data = self.data.write();
        let r = self.range(buf.len(), offset, data.len())?;
        data[r].copy_from_slice(buf);
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        self.flushes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    fn size(&self) -> u64 {
        self.data.read().len() as u64
    }

    /// Zeroes the range, as a discard that reads back zeroes would.
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        let mut data = self.data.write();
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        let r = self.range(len, offset, data.len())?;
        data[r].fill(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::IoSlice;

    #[test]
    fn read_back_what_was_written() {
        let d = MemoryDevice::new(8192).unwrap();
        d.write_at(b"hello", 4096).unwrap();
        let mut b = [0u8; 5];
        d.read_at(&mut b, 4096).unwrap();
        assert_eq!(&b, b"hello");
        d.write_vectored_at(&[IoSlice::new(b"ab"), IoSlice::new(b"cd")], 10)
            .unwrap();
        let mut b = [0u8; 4];
        d.read_at(&mut b, 10).unwrap();
        assert_eq!(&b, b"abcd");
    }

    #[test]
    fn access_past_end_fails() {
        let d = MemoryDevice::new(1024).unwrap();
        let mut b = [0u8; 8];
        assert_eq!(
            d.read_at(&mut b, 1020).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
        assert!(d.write_at(&b, u64::MAX - 2).is_err());
        d.flush().unwrap();
        assert_eq!(d.flush_count(), 1);
    }
}
