//! A recording device with dm-log-writes semantics: every write with its
//! data, every flush, and user marks, in the order the device saw them.
//! Crash tests rebuild the device as it was at any point from the log.
//!
//! The log lives in memory ([`RecordingDevice::new`]) or streams to a file
//! ([`RecordingDevice::to_file`]) in the format below, which the daemon's
//! `-o record=PATH` and the `jbdfs-crash` tool share. All integers are
//! little-endian; offsets are bytes (jbdfs devices are byte-addressed, where
//! dm-log-writes counts 512-byte sectors).
//!
//! ```text
//! header  "JBDFSLOG"  u32 version (1)  u32 reserved (0)  u64 device size
//!         u32 length + UTF-8 description (what made the log: workload, mode)
//! entry   u8 kind, then by kind:
//!         1 write   u64 offset  u32 length  data
//!         2 flush
//!         3 mark    u32 length  UTF-8 label
//! ```
//!
//! A file log does not hold the device's starting content: the image as it
//! stood when recording began is saved next to it as `PATH.base` (sparse:
//! zero runs are left as holes), and crash states are built over a copy of it.

use std::fs::File;
use std::io::{self, BufWriter, IoSlice, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
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

pub const LOG_MAGIC: &[u8; 8] = b"JBDFSLOG";
pub const LOG_VERSION: u32 = 1;
const KIND_WRITE: u8 = 1;
const KIND_FLUSH: u8 = 2;
const KIND_MARK: u8 = 3;
/// No single write or mark in a log is larger than this; a bigger length
/// field means the log is corrupt, not that we should allocate it.
const MAX_ENTRY: u32 = 1 << 30;

/// Where the log goes.
enum Sink {
    Memory(Vec<Event>),
    File(BufWriter<File>),
}

/// Passes everything through to `inner` and records it.
pub struct RecordingDevice {
    inner: Arc<dyn BlockDevice>,
    log: Mutex<Sink>,
}

/// The path of the starting image saved beside a file log.
pub fn base_image_path(log: &Path) -> PathBuf {
    let mut s = log.as_os_str().to_owned();
    s.push(".base");
    PathBuf::from(s)
}

impl RecordingDevice {
    /// Records into memory; read the log with [`RecordingDevice::events`].
    pub fn new(inner: Arc<dyn BlockDevice>) -> Self {
        RecordingDevice {
            inner,
            log: Mutex::new(Sink::Memory(Vec::new())),
        }
    }

    /// Streams the log to `path` (created or truncated), after saving the
    /// device's current content as [`base_image_path`]`(path)`.
    pub fn to_file(
        inner: Arc<dyn BlockDevice>,
        path: &Path,
        description: &str,
    ) -> io::Result<Self> {
        // Locked for as long as it is written, so that `jbdfs-crash check`
        // refuses a log whose end is not there yet (and cannot truncate one
        // being checked).
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        if !super::lock::try_lock(&file, super::lock::LockKind::Write)? {
            return Err(super::lock::in_use_error(path, &file));
        }
        file.set_len(0)?;
        save_sparse(&*inner, &base_image_path(path))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.write_all(LOG_MAGIC)?;
        out.write_all(&LOG_VERSION.to_le_bytes())?;
        out.write_all(&0u32.to_le_bytes())?;
        out.write_all(&inner.size().to_le_bytes())?;
        write_text(&mut out, description)?;
        out.flush()?;
        Ok(RecordingDevice {
            inner,
            log: Mutex::new(Sink::File(out)),
        })
    }

    /// Adds a user mark (dm-log-writes' "mark"), e.g. "fsync returned".
    /// A mark that cannot be written to a file log is logged as an error;
    /// use [`RecordingDevice::try_mark`] to see the failure.
    pub fn mark(&self, what: &str) {
        if let Err(e) = self.try_mark(what) {
            tracing::error!(mark = what, "cannot record a mark: {e}");
        }
    }

    /// Adds a user mark. A file log is pushed to the file at once, so
    /// that a mark the workload saw written survives a kill of the process.
    pub fn try_mark(&self, what: &str) -> io::Result<()> {
        let mut log = self.log.lock();
        match &mut *log {
            Sink::Memory(v) => v.push(Event::Mark(what.to_string())),
            Sink::File(f) => {
                f.write_all(&[KIND_MARK])?;
                write_text(f, what)?;
                f.flush()?;
            }
        }
        Ok(())
    }

    /// A copy of the log so far (empty for a file log: read the file).
    pub fn events(&self) -> Vec<Event> {
        match &*self.log.lock() {
            Sink::Memory(v) => v.clone(),
            Sink::File(_) => Vec::new(),
        }
    }

    /// Pushes buffered entries of a file log to the file.
    pub fn sync_log(&self) -> io::Result<()> {
        match &mut *self.log.lock() {
            Sink::Memory(_) => Ok(()),
            Sink::File(f) => f.flush(),
        }
    }

    fn record_write(sink: &mut Sink, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        match sink {
            Sink::Memory(v) => v.push(Event::Write {
                offset,
                data: bufs.concat(),
            }),
            Sink::File(f) => {
                let len: usize = bufs.iter().map(|b| b.len()).sum();
                let len = u32::try_from(len).map_err(|_| io::Error::other("write too large"))?;
                f.write_all(&[KIND_WRITE])?;
                f.write_all(&offset.to_le_bytes())?;
                f.write_all(&len.to_le_bytes())?;
                for b in bufs {
                    f.write_all(b)?;
                }
            }
        }
        Ok(())
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
        Self::record_write(&mut log, offset, &[buf])
    }

    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<()> {
        let mut log = self.log.lock();
        self.inner.write_vectored_at(bufs, offset)?;
        let parts: Vec<&[u8]> = bufs.iter().map(|b| &b[..]).collect();
        Self::record_write(&mut log, offset, &parts)
    }

    fn flush(&self) -> io::Result<()> {
        let mut log = self.log.lock();
        self.inner.flush()?;
        match &mut *log {
            Sink::Memory(v) => v.push(Event::Flush),
            // Everything the device made durable is in the file too.
            Sink::File(f) => {
                f.write_all(&[KIND_FLUSH])?;
                f.flush()?;
            }
        }
        Ok(())
    }

    fn size(&self) -> u64 {
        self.inner.size()
    }

    /// Passed through, not logged: a discard only ever touches free
    /// blocks, whose contents no crash state depends on.
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.discard(offset, len)
    }
}

impl Drop for RecordingDevice {
    fn drop(&mut self) {
        let _ = self.sync_log();
    }
}

fn write_text(out: &mut impl Write, s: &str) -> io::Result<()> {
    let len = u32::try_from(s.len()).map_err(|_| io::Error::other("label too long"))?;
    out.write_all(&len.to_le_bytes())?;
    out.write_all(s.as_bytes())
}

/// Copies `dev` to a new file at `path`, leaving runs of zeroes as holes.
pub fn save_sparse(dev: &dyn BlockDevice, path: &Path) -> io::Result<()> {
    const CHUNK: u64 = 64 << 10;
    let mut out = File::create(path)?;
    let size = dev.size();
    let mut buf = vec![0u8; CHUNK as usize];
    let mut pos = 0;
    while pos < size {
        let n = CHUNK.min(size - pos) as usize;
        dev.read_at(&mut buf[..n], pos)?;
        if buf[..n].iter().any(|&b| b != 0) {
            out.seek(SeekFrom::Start(pos))?;
            out.write_all(&buf[..n])?;
        }
        pos += n as u64;
    }
    out.set_len(size)?;
    out.sync_all()
}

/// A log read back from a file.
#[derive(Clone, Debug, Default)]
pub struct RecordedLog {
    pub device_size: u64,
    pub description: String,
    pub events: Vec<Event>,
    /// The file ended inside an entry (the recorder was killed while
    /// writing it); the partial entry is dropped.
    pub torn: bool,
}

/// Reads a log written by [`RecordingDevice::to_file`]. A bad header or a
/// corrupt entry is an `InvalidData` error naming what is wrong; a file cut
/// short inside the last entry is accepted with `torn` set.
pub fn read_log(path: &Path) -> io::Result<RecordedLog> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    parse_log(&bytes)
}

fn bad(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// A cursor over log bytes: `None` means the bytes ran out.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.bytes.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }
    fn text(&mut self) -> io::Result<Option<String>> {
        let Some(len) = self.u32() else {
            return Ok(None);
        };
        if len > MAX_ENTRY {
            return Err(bad(format!("label of {len} bytes at byte {}", self.pos)));
        }
        match self.take(len as usize) {
            None => Ok(None),
            Some(b) => String::from_utf8(b.to_vec())
                .map(Some)
                .map_err(|_| bad(format!("label before byte {} is not UTF-8", self.pos))),
        }
    }
}

/// Parses log bytes; see [`read_log`].
pub fn parse_log(bytes: &[u8]) -> io::Result<RecordedLog> {
    let mut c = Cursor { bytes, pos: 0 };
    if c.take(8) != Some(&LOG_MAGIC[..]) {
        return Err(bad("not a jbdfs write log (bad magic)".into()));
    }
    let short = || bad("the log header is cut short".into());
    let version = c.u32().ok_or_else(short)?;
    if version != LOG_VERSION {
        return Err(bad(format!(
            "log version {version}, expected {LOG_VERSION}"
        )));
    }
    c.u32().ok_or_else(short)?;
    let device_size = c.u64().ok_or_else(short)?;
    let description = c.text()?.ok_or_else(short)?;
    let mut log = RecordedLog {
        device_size,
        description,
        ..Default::default()
    };
    while c.pos < bytes.len() {
        let at = c.pos;
        match read_entry(&mut c, device_size, at)? {
            Some(e) => log.events.push(e),
            None => {
                log.torn = true;
                break;
            }
        }
    }
    Ok(log)
}

fn read_entry(c: &mut Cursor<'_>, device_size: u64, at: usize) -> io::Result<Option<Event>> {
    let Some(kind) = c.take(1) else {
        return Ok(None);
    };
    match kind[0] {
        KIND_WRITE => {
            let (Some(offset), Some(len)) = (c.u64(), c.u32()) else {
                return Ok(None);
            };
            if len > MAX_ENTRY
                || offset
                    .checked_add(len as u64)
                    .is_none_or(|e| e > device_size)
            {
                return Err(bad(format!(
                    "entry at byte {at}: write of {len} bytes at {offset} is outside the {device_size}-byte device"
                )));
            }
            Ok(c.take(len as usize).map(|d| Event::Write {
                offset,
                data: d.to_vec(),
            }))
        }
        KIND_FLUSH => Ok(Some(Event::Flush)),
        KIND_MARK => Ok(c.text()?.map(Event::Mark)),
        k => Err(bad(format!("entry at byte {at}: unknown kind {k}"))),
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

    fn temp(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!("jbdfs-record-{}-{tag}.log", std::process::id()))
    }

    #[test]
    fn file_log_round_trips_and_keeps_the_base_image() {
        let mem = Arc::new(MemoryDevice::new(256 << 10).unwrap());
        mem.write_at(b"before", 70000).unwrap();
        let path = temp("roundtrip");
        let d = RecordingDevice::to_file(mem, &path, "test log").unwrap();
        d.write_at(b"ab", 0).unwrap();
        d.try_mark("fsync 1").unwrap();
        d.flush().unwrap();
        d.write_vectored_at(&[IoSlice::new(b"c"), IoSlice::new(b"d")], 10)
            .unwrap();
        // A second recorder cannot take over (and truncate) a log in use.
        let other = Arc::new(MemoryDevice::new(4096).unwrap());
        let busy = RecordingDevice::to_file(other, &path, "").err().unwrap();
        assert!(super::super::lock::in_use(&busy).is_some(), "{busy}");
        drop(d);
        let log = read_log(&path).unwrap();
        assert_eq!(log.description, "test log");
        assert_eq!(log.device_size, 256 << 10);
        assert!(!log.torn);
        assert_eq!(log.events.len(), 4);
        assert_eq!(log.events[1], Event::Mark("fsync 1".into()));
        assert_eq!(log.events[2], Event::Flush);
        let base = std::fs::read(base_image_path(&path)).unwrap();
        assert_eq!(base.len(), 256 << 10);
        assert_eq!(&base[70000..70006], b"before");
        assert_eq!(&base[0..2], &[0, 0]);
        let _ = std::fs::remove_file(base_image_path(&path));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn torn_and_corrupt_logs() {
        let mem = Arc::new(MemoryDevice::new(4096).unwrap());
        let path = temp("torn");
        let d = RecordingDevice::to_file(mem, &path, "").unwrap();
        d.write_at(&[7; 100], 0).unwrap();
        d.flush().unwrap();
        d.write_at(&[8; 100], 200).unwrap();
        drop(d);
        let bytes = std::fs::read(&path).unwrap();
        let cut = parse_log(&bytes[..bytes.len() - 50]).unwrap();
        assert!(cut.torn);
        assert_eq!(cut.events.len(), 2);
        for n in 0..bytes.len() {
            let _ = parse_log(&bytes[..n]);
        }
        let mut wild = bytes.clone();
        let last_entry = wild.len() - (1 + 8 + 4 + 100);
        wild[last_entry] = 9;
        assert!(parse_log(&wild).is_err(), "unknown entry kind");
        let mut err = bytes.clone();
        let hdr = 8 + 4 + 4 + 8 + 4;
        err[hdr + 1..hdr + 9].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(parse_log(&err).is_err(), "write outside the device");
        assert!(parse_log(b"garbage!").is_err());
        let _ = std::fs::remove_file(base_image_path(&path));
        let _ = std::fs::remove_file(&path);
    }
}
