//! A recording device with dm-log-writes semantics: every write with its
//! data, every flush, and user marks, in the order the device saw them.
//! Crash tests rebuild the device as it was at any point from the log.

use std::io::{self, IoSlice};
use std::sync::Arc;

use parking_lot::Mutex;

use super::BlockDevice;

/// One recorded event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Write { offset: u64, data: Vec<u8> },
    Flush,
    Mark(String),
}

/// Passes everything through to `inner` and records it.
pub struct RecordingDevice {
    inner: Arc<dyn BlockDevice>,
    log: Mutex<Vec<Event>>,
}

impl RecordingDevice {
    pub fn new(inner: Arc<dyn BlockDevice>) -> Self {
        RecordingDevice {
            inner,
            log: Mutex::new(Vec::new()),
        }
    }

    /// Adds a user mark (dm-log-writes' "mark"), e.g. "fsync returned".
    pub fn mark(&self, what: &str) {
        self.log.lock().push(Event::Mark(what.to_string()));
    }

    /// A copy of the log so far.
    pub fn events(&self) -> Vec<Event> {
        self.log.lock().clone()
    }
}

impl BlockDevice for RecordingDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        // Record under the lock with the write, so the log order is the
        // order the device applied them in.
        let mut log = self.log.lock();
        self.inner.write_at(buf, offset)?;
        log.push(Event::Write {
            offset,
            data: buf.to_vec(),
        });
        Ok(())
    }

    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<()> {
        let mut log = self.log.lock();
        self.inner.write_vectored_at(bufs, offset)?;
        let data: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
        log.push(Event::Write { offset, data });
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        let mut log = self.log.lock();
        self.inner.flush()?;
        log.push(Event::Flush);
        Ok(())
    }

    fn size(&self) -> u64 {
        self.inner.size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemoryDevice;

    #[test]
    fn records_in_order() {
        let d = RecordingDevice::new(Arc::new(MemoryDevice::new(4096).unwrap()));
        d.write_at(b"ab", 0).unwrap();
        d.mark("m");
        d.flush().unwrap();
        d.write_vectored_at(&[IoSlice::new(b"c"), IoSlice::new(b"d")], 10)
            .unwrap();
        let e = d.events();
        assert_eq!(e.len(), 4);
        assert_eq!(
            e[0],
            Event::Write {
                offset: 0,
                data: b"ab".to_vec()
            }
        );
        assert_eq!(e[1], Event::Mark("m".into()));
        assert_eq!(e[2], Event::Flush);
        assert_eq!(
            e[3],
            Event::Write {
                offset: 10,
                data: b"cd".to_vec()
            }
        );
        let mut b = [0u8; 2];
        d.read_at(&mut b, 10).unwrap();
        assert_eq!(&b, b"cd");
    }
}
