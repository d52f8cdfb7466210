// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! Ordering at the device, from the write sequence a recording device sees:
//! in data=ordered, a file's data blocks reach the device, and a flush, before
//! the commit block of the transaction that maps them; metadata reaches its
//! home block only after the commit that logged it. In data=writeback only
//! metadata is ordered: a commit goes ahead while the data is held back. In
//! data=journal the data is logged before it goes home.

use std::sync::Arc;

use jbdfs::device::{BlockDevice, Event, MemoryDevice, RecordingDevice};
use jbdfs::format::InodeNo;
use jbdfs::fs::namei::Caller;
use jbdfs::fs::{DataMode, Filesystem, MountConfig};
use jbdfs::mkfs::{memory_image, MkfsOptions};

const ROOT: InodeNo = InodeNo(2);
const ME: Caller = Caller { uid: 0, gid: 0 };
const JBD_MAGIC: [u8; 4] = [0xC0, 0x3B, 0x39, 0x98];

fn is_commit_block(data: &[u8]) -> bool {
    data.len() >= 8 && data[..4] == JBD_MAGIC && data[4..8] == [0, 0, 0, 2]
}

/// A new 64 MiB filesystem with 4 KiB blocks, in memory.
fn fresh_image() -> Arc<MemoryDevice> {
    let opts = MkfsOptions {
        block_size: Some(4096),
        ..Default::default()
    };
    Arc::new(memory_image(&opts, 64 << 20).unwrap())
}

#[test]
fn ordered_data_precedes_the_commit_that_maps_it() {
    let mem = fresh_image();
    let rec = Arc::new(RecordingDevice::new(mem.clone()));
    let dev: Arc<dyn BlockDevice> = rec.clone();
    let fs = Filesystem::mount(dev, &MountConfig::default()).unwrap();
    rec.mark("mounted");

    let pattern: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8 ^ 0x5A).collect();
    let (f, _) = fs.mknod(ROOT, b"file", 0o100644, 0, ME).unwrap();
    fs.write(f, 0, &pattern, true).unwrap();
    fs.fsync(f, false).unwrap();
    rec.mark("fsync returned");
    let events = rec.events();
    let start = events
        .iter()
        .position(|e| *e == Event::Mark("mounted".into()))
        .unwrap();
    let end = events
        .iter()
        .position(|e| *e == Event::Mark("fsync returned".into()))
        .unwrap();
    let window = &events[start..end];

    let data_at = window
        .iter()
        .position(|e| matches!(e, Event::Write { data, .. } if data.windows(64).any(|w| w == &pattern[..64])))
        .expect("the file's data was written");
    let commit_at = window
        .iter()
        .rposition(|e| matches!(e, Event::Write { data, .. } if is_commit_block(data)))
        .expect("a commit block was written before fsync returned");
    assert!(
        data_at < commit_at,
        "data ({data_at}) before the commit block ({commit_at})"
    );
    assert!(
        window[data_at..commit_at].contains(&Event::Flush),
        "a flush between the data and the commit block"
    );
    assert_eq!(
        window.get(commit_at + 1),
        Some(&Event::Flush),
        "a flush after the commit block"
    );

    // Before the commit, the only writes are the file's data and the log:
    // no metadata reaches its home block before the commit that logs it.
    let sb = jbdfs::fs::mount::read_superblock(&*mem).unwrap();
    let jmap = jbdfs::journal::jmap::JournalMap::load(&*mem, &sb).unwrap();
    let log: std::collections::HashSet<u64> =
        jmap.blocks().iter().map(|&b| b as u64 * 4096).collect();
    for (i, e) in window[..commit_at].iter().enumerate() {
        if let Event::Write { offset, data } = e {
            let in_log = (0..data.len() as u64 / 4096).all(|k| log.contains(&(offset + k * 4096)));
            assert!(
                i == data_at || in_log,
                "write of {} bytes at {offset} before the commit is neither data nor log",
                data.len()
            );
        }
    }
    fs.unmount().unwrap();
    let after: Vec<Event> = rec.events()[end..].to_vec();
    assert!(
        after.iter().any(|e| matches!(e, Event::Write { .. })),
        "checkpoint wrote metadata home at unmount"
    );
}

#[test]
fn journal_mode_logs_file_data_before_it_goes_home() {
    let mem = fresh_image();
    let sb = jbdfs::fs::mount::read_superblock(&*mem).unwrap();
    let jmap = jbdfs::journal::jmap::JournalMap::load(&*mem, &sb).unwrap();
    let log: std::collections::HashSet<u64> =
        jmap.blocks().iter().map(|&b| b as u64 * 4096).collect();
    let rec = Arc::new(RecordingDevice::new(mem.clone()));
    let dev: Arc<dyn BlockDevice> = rec.clone();
    let cfg = MountConfig {
        data: DataMode::Journal,
        ..Default::default()
    };
    let fs = Filesystem::mount(dev, &cfg).unwrap();
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i % 241) as u8 ^ 0xA5).collect();
    let (f, _) = fs.mknod(ROOT, b"file", 0o100644, 0, ME).unwrap();
    fs.write(f, 0, &pattern, true).unwrap();
    fs.fsync(f, false).unwrap();
    fs.unmount().unwrap();
    let events = rec.events();
    let holds = |data: &Vec<u8>| data.windows(64).any(|w| w == &pattern[..64]);
    let writes: Vec<(usize, u64, bool)> = events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            Event::Write { offset, data } if holds(data) => {
                let in_log =
                    (0..data.len() as u64 / 4096).any(|k| log.contains(&(offset + k * 4096)));
                Some((i, *offset, in_log))
            }
            _ => None,
        })
        .collect();
    let first = writes.first().expect("the data was written");
    assert!(
        first.2,
        "data=journal: the data's first write is to the log"
    );
    // The commit that seals the logged data (the mount's own commit came
    // earlier).
    let commit_at = events
        .iter()
        .enumerate()
        .skip(first.0)
        .find(|(_, e)| matches!(e, Event::Write { data, .. } if is_commit_block(data)))
        .map(|(i, _)| i)
        .expect("a commit block after the logged data");
    let home = writes
        .iter()
        .find(|w| !w.2)
        .expect("checkpoint wrote the data home");
    assert!(home.0 > commit_at, "home only after the commit");
}

/// Holds back every write carrying `marker` until opened, so a test can see
/// what the filesystem does while file data is still on its way.
struct DataGate {
    inner: Arc<dyn BlockDevice>,
    marker: Vec<u8>,
    open: parking_lot::Mutex<bool>,
    opened: parking_lot::Condvar,
}

impl DataGate {
    fn hold(&self, data: &[u8]) {
        if data
            .windows(self.marker.len())
            .any(|w| w == &self.marker[..])
        {
            let mut open = self.open.lock();
            while !*open {
                self.opened.wait(&mut open);
            }
        }
    }

    fn open(&self) {
        *self.open.lock() = true;
        self.opened.notify_all();
    }
}

impl BlockDevice for DataGate {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.hold(buf);
        self.inner.write_at(buf, offset)
    }
    fn write_vectored_at(&self, bufs: &[std::io::IoSlice<'_>], offset: u64) -> std::io::Result<()> {
        let joined: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
        self.write_at(&joined, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
}

/// Writes a file while its data is held back at the device, and lets the
/// periodic commit run; returns the recording and whether a commit block
/// reached the device while the data was held.
fn commit_while_data_is_held(data: DataMode) -> (Vec<Event>, Vec<u8>, bool) {
    let mem = fresh_image();
    let rec = Arc::new(RecordingDevice::new(mem.clone()));
    let pattern: Vec<u8> = (0..8192u32).map(|i| (i % 239) as u8 ^ 0x3C).collect();
    let gate = Arc::new(DataGate {
        inner: rec.clone(),
        marker: pattern[..64].to_vec(),
        open: parking_lot::Mutex::new(false),
        opened: parking_lot::Condvar::new(),
    });
    let dev: Arc<dyn BlockDevice> = gate.clone();
    let mut cfg = MountConfig {
        data,
        ..Default::default()
    };
    cfg.journal.commit_interval = std::time::Duration::from_millis(200);
    let fs = Filesystem::mount(dev, &cfg).unwrap();
    let (f, _) = fs.mknod(ROOT, b"file", 0o100644, 0, ME).unwrap();
    rec.mark("written");
    fs.write(f, 0, &pattern, true).unwrap();
    let commit_after_write = |events: &[Event]| {
        let from = events
            .iter()
            .position(|e| *e == Event::Mark("written".into()))
            .unwrap();
        events[from..]
            .iter()
            .any(|e| matches!(e, Event::Write { data, .. } if is_commit_block(data)))
    };
    // Several commit intervals: long enough for the timer to fire, however
    // busy the machine.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let mut committed = false;
    while !committed && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        committed = commit_after_write(&rec.events());
    }
    gate.open();
    fs.fsync(f, false).unwrap();
    fs.unmount().unwrap();
    (rec.events(), pattern, committed)
}

#[test]
fn writeback_commits_metadata_without_waiting_for_data() {
    let (events, pattern, committed) = commit_while_data_is_held(DataMode::Writeback);
    assert!(
        committed,
        "data=writeback: the commit did not wait for the held file data"
    );
    let holds = |data: &Vec<u8>| data.windows(64).any(|w| w == &pattern[..64]);
    let from = events
        .iter()
        .position(|e| *e == Event::Mark("written".into()))
        .unwrap();
    let data_at = events[from..]
        .iter()
        .position(|e| matches!(e, Event::Write { data, .. } if holds(data)))
        .expect("the data reached the device once released");
    let first_commit = events[from..]
        .iter()
        .position(|e| matches!(e, Event::Write { data, .. } if is_commit_block(data)))
        .unwrap();
    assert!(
        first_commit < data_at,
        "the commit block mapping the file ({first_commit}) went before its data ({data_at})"
    );
}

#[test]
fn ordered_commit_waits_for_held_data() {
    let (events, pattern, committed) = commit_while_data_is_held(DataMode::Ordered);
    assert!(
        !committed,
        "data=ordered: a commit block reached the device while the data it maps was held"
    );
    let holds = |data: &Vec<u8>| data.windows(64).any(|w| w == &pattern[..64]);
    let data_at = events
        .iter()
        .position(|e| matches!(e, Event::Write { data, .. } if holds(data)))
        .unwrap();
    let commit_at = events
        .iter()
        .skip(data_at)
        .position(|e| matches!(e, Event::Write { data, .. } if is_commit_block(data)));
    assert!(commit_at.is_some(), "the commit followed the data");
}
