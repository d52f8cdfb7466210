//! Ordering at the device, from the write sequence a recording device sees:
//! in data=ordered, a file's data blocks reach the device, and a flush, before
//! the commit block of the transaction that maps them; metadata reaches its
//! home block only after the commit that logged it.

use std::sync::Arc;

use jbdfs::device::{BlockDevice, Event, MemoryDevice, RecordingDevice};
use jbdfs::format::InodeNo;
use jbdfs::fs::namei::Caller;
use jbdfs::fs::{Filesystem, MountConfig};
use jbdfs::mkfs::{format, plan, MkfsOptions, Zeroed};
use jbdfs::util::Progress;

const ROOT: InodeNo = InodeNo(2);
const ME: Caller = Caller { uid: 0, gid: 0 };
const JBD_MAGIC: [u8; 4] = [0xC0, 0x3B, 0x39, 0x98];

fn is_commit_block(data: &[u8]) -> bool {
    data.len() >= 8 && data[..4] == JBD_MAGIC && data[4..8] == [0, 0, 0, 2]
}

#[test]
fn ordered_data_precedes_the_commit_that_maps_it() {
    let opts = MkfsOptions {
        block_size: Some(4096),
        ..Default::default()
    };
    let size = 64 << 20;
    let mem = Arc::new(MemoryDevice::new(size).unwrap());
    let g = plan(&opts, size).unwrap();
    format(&*mem, &opts, &g, Zeroed::All, &mut Progress::quiet()).unwrap();
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
    let opts = MkfsOptions {
        block_size: Some(4096),
        ..Default::default()
    };
    let size = 64 << 20;
    let mem = Arc::new(MemoryDevice::new(size).unwrap());
    let g = plan(&opts, size).unwrap();
    format(&*mem, &opts, &g, Zeroed::All, &mut Progress::quiet()).unwrap();
    let sb = jbdfs::fs::mount::read_superblock(&*mem).unwrap();
    let jmap = jbdfs::journal::jmap::JournalMap::load(&*mem, &sb).unwrap();
    let log: std::collections::HashSet<u64> =
        jmap.blocks().iter().map(|&b| b as u64 * 4096).collect();
    let rec = Arc::new(RecordingDevice::new(mem.clone()));
    let dev: Arc<dyn BlockDevice> = rec.clone();
    let cfg = MountConfig {
        data_journal: true,
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
