// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! The filesystem served through FUSE in this process: real system calls on
//! the mount point, then e2fsck and a Linux loop mount as the oracles.
//! Needs root and /dev/fuse; skipped with a message otherwise.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use jbdfs::fs::MountConfig;
use jbdfs::mkfs::{make_filesystem, MkfsOptions, Request};
use jbdfs_daemon::daemon::{is_mounted, serve, DaemonConfig};

use jbdfs_testkit as common;
use jbdfs_testkit::daemon as daemon_common;

use daemon_common::{transport, SwitchTurn};
use jbdfs_daemon::fuse::Transport;

// The kit's copy of the daemon's io_uring depth (for stats lines) is right.
const _: () =
    assert!(jbdfs_testkit::daemon::URING_DEPTH == jbdfs_daemon::fuse::uring::DEFAULT_DEPTH);
const _: () = assert!(
    jbdfs_testkit::daemon::URING_POLL_US as u128
        == jbdfs_daemon::fuse::uring::DEFAULT_POLL.as_micros()
);

/// The in-process transport value of this run's [`transport`].
fn run_transport() -> Transport {
    match transport() {
        daemon_common::TestTransport::DevFuse => Transport::DevFuse,
        daemon_common::TestTransport::IoUring => {
            Transport::IoUring(jbdfs_daemon::fuse::uring::RingConfig::default())
        }
    }
}

struct Mounted {
    image: PathBuf,
    dir: PathBuf,
    server: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
    /// Held while served over io_uring (daemon_common's TestTransport::turn).
    turn: Option<SwitchTurn>,
}

impl Mounted {
    fn new(size: u64, block_size: u32) -> Mounted {
        let m = Self::image_only(size, block_size);
        let image = m.image.clone();
        m.serve(&image, false)
    }

    /// A fresh image and mount point, not yet mounted.
    fn image_only(size: u64, block_size: u32) -> Mounted {
        Self::image_only_in(&std::env::temp_dir(), size, block_size)
    }

    /// [`Mounted::image_only`] with the image and mount point under `dir`.
    fn image_only_in(dir: &Path, size: u64, block_size: u32) -> Mounted {
        let base = dir.join(format!(
            "jbdfs-fuse-{}-{}",
            std::process::id(),
            jbdfs::util::unique_suffix()
        ));
        std::fs::create_dir_all(&base).unwrap();
        let image = base.join("fs.img");
        let dir = base.join("mnt");
        std::fs::create_dir_all(&dir).unwrap();
        let req = Request {
            options: MkfsOptions {
                block_size: Some(block_size),
                ..Default::default()
            },
            size: Some(size),
            quiet: true,
            ..Default::default()
        };
        make_filesystem(&image, &req).unwrap();
        Mounted {
            image,
            dir,
            server: None,
            turn: None,
        }
    }

    /// Serves `source` (the image or a device over it) on the mount point.
    fn serve(self, source: &Path, read_only: bool) -> Mounted {
        self.serve_with(source, read_only, |_| {})
    }

    /// [`Mounted::serve`] with the daemon's configuration adjusted first.
    fn serve_with(
        mut self,
        source: &Path,
        read_only: bool,
        adjust: impl FnOnce(&mut DaemonConfig),
    ) -> Mounted {
        let dir = self.dir.clone();
        let mut cfg = DaemonConfig {
            source: source.to_path_buf(),
            mountpoint: dir.clone(),
            mount: MountConfig {
                read_only,
                cache_size: 64 << 20,
                ..Default::default()
            },
            threads: 8,
            direct_io: false,
            fuse_direct_io: false,
            transport: run_transport(),
            allow_other: false,
            generic: Vec::new(),
            stats: None,
            record: None,
            devsim: None,
            noload: false,
            nbd_timeout: Duration::from_secs(30),
            nbd_connections: 1,
            mount_options: Default::default(),
        };
        adjust(&mut cfg);
        let transport_used = cfg.transport;
        // io_uring, asked for or automatic, depends on the kernel's switch.
        self.turn = match cfg.transport {
            Transport::DevFuse => None,
            _ => Some(daemon_common::switch_turn()),
        };
        let server = std::thread::spawn(move || serve(&cfg));
        let deadline = Instant::now() + Duration::from_secs(20);
        let canon = std::fs::canonicalize(&dir).unwrap();
        while !is_mounted(&canon) {
            if server.is_finished() {
                let res = server.join();
                panic!("serve over {transport_used:?} ended before the mount came up: {res:?}");
            }
            assert!(Instant::now() < deadline, "mount did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        self.server = Some(server);
        self
    }

    fn unmount(&mut self) {
        if let Some(s) = self.server.take() {
            let st = Command::new("fusermount3")
                .arg("-u")
                .arg(&self.dir)
                .status();
            if !st.map(|s| s.success()).unwrap_or(false) {
                let ok = Command::new("umount")
                    .arg(&self.dir)
                    .status()
                    .map(|s| s.success());
                if !ok.unwrap_or(false) {
                    // Never leave the server thread waiting forever.
                    let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
                }
            }
            s.join().unwrap().unwrap();
        }
        self.turn = None;
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.server.is_some() {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
        if let Some(base) = self.image.parent() {
            let _ = std::fs::remove_dir_all(base);
        }
    }
}

fn e2fsck_clean(image: &Path) {
    let out = Command::new("e2fsck")
        .arg("-fn")
        .arg(image)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "e2fsck -fn failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn posix_basics_through_the_kernel() {
    jbdfs_testkit::require!(fuse);
    let mut m = Mounted::new(128 << 20, 4096);
    let d = &m.dir;
    let data: Vec<u8> = (0..5_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(d.join("big"), &data).unwrap();
    assert_eq!(std::fs::read(d.join("big")).unwrap(), data);
    std::fs::create_dir_all(d.join("a/b/c")).unwrap();
    for i in 0..500 {
        std::fs::write(d.join(format!("a/f{i}")), format!("file {i}")).unwrap();
    }
    let names = std::fs::read_dir(d.join("a")).unwrap().count();
    assert_eq!(names, 501);
    std::fs::rename(d.join("a/f1"), d.join("a/b/moved")).unwrap();
    std::fs::hard_link(d.join("a/f2"), d.join("link")).unwrap();
    assert_eq!(std::fs::metadata(d.join("link")).unwrap().nlink(), 2);
    std::os::unix::fs::symlink("a/b/moved", d.join("sym")).unwrap();
    assert_eq!(std::fs::read_to_string(d.join("sym")).unwrap(), "file 1");
    std::fs::set_permissions(d.join("a/f3"), std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        std::fs::metadata(d.join("a/f3")).unwrap().mode() & 0o777,
        0o600
    );
    std::fs::remove_file(d.join("a/f4")).unwrap();
    assert!(std::fs::remove_dir(d.join("a")).is_err());
    std::fs::remove_dir(d.join("a/b/c")).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(d.join("big"))
        .unwrap();
    f.set_len(1000).unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(std::fs::metadata(d.join("big")).unwrap().len(), 1000);
    let st = Command::new("mkfifo").arg(d.join("fifo")).status().unwrap();
    assert!(st.success());
    names_come_and_go_through_cached_negative_entries(d);
    files_reopened_keep_what_was_written(d);
    m.unmount();
    e2fsck_clean(&m.image);
}

/// 64 KiB blocks (issue 29), which the kernel's own ext3 cannot mount on
/// x86: served through FUSE, with the block size as st_blksize and in
/// statfs, and e2fsck clean afterwards.
#[test]
fn sixty_four_kib_blocks_through_the_kernel() {
    jbdfs_testkit::require!(fuse);
    let mut m = Mounted::new(256 << 20, 65536);
    let d = &m.dir;
    let data: Vec<u8> = (0..5_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(d.join("big"), &data).unwrap();
    assert_eq!(std::fs::read(d.join("big")).unwrap(), data);
    assert_eq!(std::fs::metadata(d.join("big")).unwrap().blksize(), 65536);
    let statfs = Command::new("stat")
        .args(["-f", "-c", "%S"])
        .arg(d)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&statfs.stdout).trim(), "65536");
    std::fs::create_dir_all(d.join("a/b")).unwrap();
    for i in 0..800 {
        let name = format!("a/{i:04}-{}", "x".repeat(200));
        std::fs::write(d.join(name), format!("file {i}")).unwrap();
    }
    for i in (0..800).step_by(2) {
        std::fs::remove_file(d.join(format!("a/{i:04}-{}", "x".repeat(200)))).unwrap();
    }
    assert_eq!(std::fs::read_dir(d.join("a")).unwrap().count(), 401);
    std::fs::rename(d.join("big"), d.join("a/b/big")).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(d.join("a/b/big"))
        .unwrap();
    f.set_len(70_000).unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(std::fs::read(d.join("a/b/big")).unwrap(), data[..70_000]);
    files_reopened_keep_what_was_written(d);
    m.unmount();
    e2fsck_clean(&m.image);
}

/// Lookups of missing names are cached by the kernel as negative entries:
/// a name must still appear when created, through any call, and vanish
/// when removed.
fn names_come_and_go_through_cached_negative_entries(d: &Path) {
    let p = d.join("ghost");
    for round in 0..3 {
        assert!(
            std::fs::metadata(&p).is_err(),
            "round {round}: not there yet"
        );
        assert!(std::fs::metadata(&p).is_err(), "round {round}: asked twice");
        match round {
            0 => std::fs::write(&p, b"x").unwrap(),
            1 => std::fs::create_dir(&p).unwrap(),
            _ => std::os::unix::fs::symlink("big", &p).unwrap(),
        }
        assert!(
            std::fs::symlink_metadata(&p).is_ok(),
            "round {round}: created"
        );
        if round == 1 {
            std::fs::remove_dir(&p).unwrap();
        } else {
            std::fs::remove_file(&p).unwrap();
        }
    }
    assert!(std::fs::metadata(&p).is_err());
    std::fs::write(d.join("src"), b"renamed in").unwrap();
    assert!(std::fs::metadata(&p).is_err());
    std::fs::rename(d.join("src"), &p).unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"renamed in");
    std::fs::remove_file(&p).unwrap();
}

/// Files keep their page cache across opens (FOPEN_KEEP_CACHE): what a
/// second open reads must still be the newest data, including after a
/// truncate and rewrite through another descriptor.
fn files_reopened_keep_what_was_written(d: &Path) {
    let p = d.join("reopened");
    std::fs::write(&p, vec![1u8; 100_000]).unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), vec![1u8; 100_000]);
    std::fs::write(&p, vec![2u8; 5_000]).unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), vec![2u8; 5_000]);
    let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
    f.write_all(&[3u8; 10]).unwrap();
    drop(f);
    let got = std::fs::read(&p).unwrap();
    assert_eq!(got.len(), 5_010);
    assert_eq!(&got[5_000..], &[3u8; 10]);
}

#[test]
fn serves_a_block_device_and_read_only_mounts() {
    jbdfs_testkit::require!(fuse, loop);
    let m = Mounted::image_only(64 << 20, 1024);
    let loopdev =
        common::LoopDevice::attach(&m.image).unwrap_or_else(|o| panic!("{}", o.describe()));
    let image = m.image.clone();
    let mut m = m.serve(&loopdev.path, false);
    std::fs::write(m.dir.join("on-a-device"), b"block device data").unwrap();
    m.unmount();
    drop(loopdev);
    e2fsck_clean(&image);

    // Read-only: the data is there, and writes are refused with EROFS.
    let mut m = m.serve(&image, true);
    assert_eq!(
        std::fs::read(m.dir.join("on-a-device")).unwrap(),
        b"block device data"
    );
    let err = std::fs::write(m.dir.join("new"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    m.unmount();
    e2fsck_clean(&image);
}

/// Bytes of `path` in the kernel's page cache, as util-linux's fincore
/// reports them (mincore(2) over a map of the file).
fn cached_bytes(path: &Path) -> u64 {
    let out = Command::new("fincore")
        .args(["--bytes", "--noheadings", "--output", "RES"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "fincore failed");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// copy_file_range through the kernel (std::io::copy uses it between
/// files), then `-o direct_io`: reads leave nothing in the page cache,
/// while a shared mmap write still reaches the file.
#[test]
fn copy_file_range_and_direct_io_through_the_kernel() {
    jbdfs_testkit::require!(fuse);
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    let mut m = Mounted::new(64 << 20, 4096);
    std::fs::write(m.dir.join("src"), &data).unwrap();
    let mut from = std::fs::File::open(m.dir.join("src")).unwrap();
    let mut to = std::fs::File::create(m.dir.join("copy")).unwrap();
    assert_eq!(
        std::io::copy(&mut from, &mut to).unwrap(),
        data.len() as u64
    );
    drop((from, to));
    assert_eq!(std::fs::read(m.dir.join("copy")).unwrap(), data);
    assert!(
        cached_bytes(&m.dir.join("copy")) > 0,
        "the default mount caches pages"
    );
    m.unmount();
    e2fsck_clean(&m.image);

    let image = m.image.clone();
    let mut m = m.serve_with(&image, false, |cfg| cfg.fuse_direct_io = true);
    let copy = m.dir.join("copy");
    assert_eq!(std::fs::read(&copy).unwrap(), data);
    assert_eq!(
        cached_bytes(&copy),
        0,
        "direct_io reads bypass the page cache"
    );
    // A shared writable map of a direct_io file (FUSE_DIRECT_IO_ALLOW_MMAP).
    let script = "import mmap,os,sys\n\
        fd=os.open(sys.argv[1],os.O_RDWR)\n\
        m=mmap.mmap(fd,8192)\n\
        m[4096:4101]=b'mmap!'\n\
        m.flush(); m.close(); os.close(fd)\n";
    let st = Command::new("python3")
        .args(["-c", script])
        .arg(&copy)
        .status()
        .unwrap();
    assert!(st.success(), "mmap of a direct_io file failed");
    let back = std::fs::read(&copy).unwrap();
    assert_eq!(&back[4096..4101], b"mmap!");
    assert_eq!(&back[..4096], &data[..4096]);
    assert_eq!(&back[4101..], &data[4101..]);
    m.unmount();
    e2fsck_clean(&image);
}

/// Proves from the stats file's last line (`transport: ...`) that the
/// mount was served by this run's transport, with `threads` workers on
/// /dev/fuse.
fn assert_served_by_the_run_transport(stats: &Path, threads: usize) {
    let text = std::fs::read_to_string(stats).unwrap();
    let last = text.lines().last().unwrap_or_default();
    assert_eq!(
        last,
        transport().stats_line(threads),
        "{}:\n{text}",
        stats.display()
    );
}

/// The "N transactions (M requested)" line of a jbd2-style info file.
fn requested_commits(stats: &Path) -> u64 {
    let text = std::fs::read_to_string(stats).unwrap();
    let line = text.lines().next().unwrap();
    let inner = line.split('(').nth(1).unwrap();
    inner.split_whitespace().next().unwrap().parse().unwrap()
}

/// O_DSYNC and O_SYNC writes: the kernel follows each with an fsync
/// (generic_write_sync), and each becomes a requested commit.
#[test]
fn o_sync_and_o_dsync_writes_each_commit() {
    use std::os::unix::fs::OpenOptionsExt;
    jbdfs_testkit::require!(fuse);
    let m = Mounted::image_only(64 << 20, 4096);
    let image = m.image.clone();
    let stats = image.with_extension("stats");
    let stats_path = stats.clone();
    let mut m = m.serve_with(&image, false, |cfg| cfg.stats = Some(stats_path));
    let wait_stats = || std::thread::sleep(Duration::from_millis(1300));
    wait_stats();
    let before = requested_commits(&stats);
    for (name, flag) in [("dsync", libc::O_DSYNC), ("sync", libc::O_SYNC)] {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .custom_flags(flag)
            .open(m.dir.join(name))
            .unwrap();
        for _ in 0..5 {
            f.write_all(&[7u8; 4096]).unwrap();
        }
    }
    wait_stats();
    let requested = requested_commits(&stats) - before;
    assert!(
        requested >= 10,
        "10 synchronous writes asked for {requested} commits"
    );
    m.unmount();
    assert_served_by_the_run_transport(&stats, 8);
    e2fsck_clean(&image);
}

/// 16 threads create, write, rename and delete in shared directories through
/// the kernel for a minute (JBDFS_STRESS_SECS overrides): no deadlock, no
/// error other than the expected races, and e2fsck clean afterwards.
#[test]
fn sixteen_threads_for_a_minute() {
    jbdfs_testkit::require!(fuse);
    let secs: u64 = std::env::var("JBDFS_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let mut m = Mounted::new(512 << 20, 4096);
    for d in 0..4 {
        std::fs::create_dir(m.dir.join(format!("d{d}"))).unwrap();
    }
    let stop = Instant::now() + Duration::from_secs(secs);
    let ops = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let threads: Vec<_> = (0..16u64)
        .map(|t| {
            let dir = m.dir.clone();
            let ops = ops.clone();
            std::thread::spawn(move || {
                let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                while Instant::now() < stop {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let a = dir.join(format!("d{}/f{}", x % 4, (x >> 8) % 64));
                    let b = dir.join(format!("d{}/f{}", (x >> 16) % 4, (x >> 24) % 64));
                    let r = match x % 6 {
                        0 | 1 => std::fs::write(&a, vec![t as u8; ((x >> 32) % 20000) as usize]),
                        2 => std::fs::rename(&a, &b),
                        3 => std::fs::remove_file(&a),
                        4 => std::fs::read_dir(a.parent().unwrap()).map(|d| {
                            d.count();
                        }),
                        _ => std::fs::hard_link(&a, &b),
                    };
                    if let Err(e) = r {
                        let expected =
                            matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::EEXIST));
                        assert!(expected, "unexpected error {e} on {}", a.display());
                    }
                    ops.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    eprintln!(
        "{} operations in {secs} s",
        ops.load(std::sync::atomic::Ordering::Relaxed)
    );
    m.unmount();
    e2fsck_clean(&m.image);
}

/// `writers` threads each make a directory under `dir` and create, write
/// and fsync `files` files of 4 KiB in it.
fn fsync_from_writers(dir: &Path, writers: u32, files: u32) {
    let threads: Vec<_> = (0..writers)
        .map(|t| {
            let dir = dir.join(format!("w{t}"));
            std::thread::spawn(move || {
                std::fs::create_dir(&dir).unwrap();
                for i in 0..files {
                    let mut f = std::fs::File::create(dir.join(format!("f{i}"))).unwrap();
                    f.write_all(&[t as u8 ^ i as u8; 4096]).unwrap();
                    f.sync_all().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// Every file [`fsync_from_writers`] wrote, with its contents.
fn assert_fsynced_files_are_there(dir: &Path, writers: u32, files: u32) {
    for t in 0..writers {
        for i in 0..files {
            let got = std::fs::read(dir.join(format!("w{t}/f{i}"))).unwrap();
            assert_eq!(got, vec![t as u8 ^ i as u8; 4096], "w{t}/f{i}");
        }
    }
}

/// The transactions a stats file counts, and the file's text.
fn transactions(stats: &Path) -> (u32, String) {
    let text = std::fs::read_to_string(stats).unwrap();
    let n = text.split_whitespace().next().unwrap().parse().unwrap();
    (n, text)
}

/// On a slow device each fsync waits for its commit on a thread of its own
/// (src/fuse/runners.rs), not on a FUSE worker: with a single worker,
/// sixteen writers' fsyncs still share commits, every fsync'd file is there
/// after a remount, and e2fsck finds the image clean.
#[test]
fn fsyncs_on_a_slow_device_share_commits_with_one_worker() {
    jbdfs_testkit::require!(fuse);
    let m = Mounted::image_only(256 << 20, 4096);
    let image = m.image.clone();
    let stats = image.with_extension("stats");
    let stats_path = stats.clone();
    let mut m = m.serve_with(&image, false, move |cfg| {
        cfg.threads = 1;
        cfg.devsim = Some(jbdfs::device::DevSimParams::parse("sata").unwrap());
        cfg.stats = Some(stats_path);
    });
    let (writers, files) = (16u32, 8u32);
    fsync_from_writers(&m.dir, writers, files);
    m.unmount();
    assert_served_by_the_run_transport(&stats, 1);
    let (transactions, text) = transactions(&stats);
    let fsyncs = writers * files;
    eprintln!("{fsyncs} fsyncs in {transactions} transactions");
    // A worker holding each fsync through its commit would serve nothing
    // else meanwhile: about one fsync per commit.
    assert!(
        transactions * 3 < fsyncs,
        "{fsyncs} fsyncs took {transactions} transactions:\n{text}"
    );
    e2fsck_clean(&m.image);
    let m = m.serve(&image, true);
    assert_fsynced_files_are_there(&m.dir, writers, files);
}

/// Sixteen writers each create, write and fsync small files on a ram image
/// (a fast device, where bdelay=auto never sleeps): every fsync'd file is
/// there after a remount, and e2fsck finds the image clean. Over io_uring
/// the callers of one CPU take turns with its queue thread, so fsyncs
/// share a commit only because the queue gathers before committing
/// (`Queue::gather`): on a machine of a few CPUs, fewer commits than fsyncs.
#[test]
fn fsyncs_from_many_writers_share_commits_on_a_fast_device() {
    jbdfs_testkit::require!(fuse);
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let m = Mounted::image_only_in(&base, 256 << 20, 4096);
    let image = m.image.clone();
    let stats = image.with_extension("stats");
    let stats_path = stats.clone();
    let mut m = m.serve_with(&image, false, move |cfg| cfg.stats = Some(stats_path));
    let (writers, files) = (16u32, 60u32);
    fsync_from_writers(&m.dir, writers, files);
    m.unmount();
    assert_served_by_the_run_transport(&stats, 8);
    let (transactions, text) = transactions(&stats);
    let fsyncs = writers * files;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    eprintln!("{fsyncs} fsyncs in {transactions} transactions on {cpus} CPUs");
    if transport() == daemon_common::TestTransport::IoUring && cpus <= 4 {
        // On 2 CPUs: 5.5-10 fsyncs per commit, with a CPU hog beside it
        // too; 2-3 with bdelay=0, which does not gather.
        assert!(
            transactions * 4 < fsyncs,
            "{fsyncs} fsyncs took {transactions} transactions:\n{text}"
        );
    }
    e2fsck_clean(&m.image);
    let m = m.serve(&image, true);
    assert_fsynced_files_are_there(&m.dir, writers, files);
}

/// What one tree entry looks like: type and mode, size, links, device,
/// symlink target, xattrs and a content checksum.
fn snapshot(root: &Path) -> std::collections::BTreeMap<String, String> {
    use std::hash::{Hash, Hasher};
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if rel == "lost+found" {
                continue;
            }
            let m = std::fs::symlink_metadata(&p).unwrap();
            let mut desc = format!("mode={:o} nlink={} rdev={}", m.mode(), m.nlink(), m.rdev());
            if m.is_file() {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                std::fs::read(&p).unwrap().hash(&mut h);
                desc += &format!(" size={} sum={:x}", m.len(), h.finish());
            } else if m.file_type().is_symlink() {
                desc += &format!(" -> {}", std::fs::read_link(&p).unwrap().display());
            } else if m.is_dir() {
                stack.push(p.clone());
            }
            if !m.file_type().is_symlink() && which("getfattr") {
                let x = Command::new("getfattr")
                    .args(["-d", "-m", "-", "--absolute-names"])
                    .arg(&p)
                    .output()
                    .unwrap();
                let text = String::from_utf8_lossy(&x.stdout);
                let attrs: Vec<&str> = text.lines().filter(|l| l.contains('=')).collect();
                desc += &format!(" xattrs={attrs:?}");
            }
            out.insert(rel, desc);
        }
    }
    out
}

fn which(cmd: &str) -> bool {
    common::tool(cmd).is_some()
}

fn sh(cmd: &str) {
    let st = Command::new("sh").arg("-c").arg(cmd).status().unwrap();
    assert!(st.success(), "{cmd}");
}

/// A workload through the kernel, then the same tree as Linux's ext3 sees it
/// on a loop mount: names, types, modes, sizes, links, devices, symlink
/// targets, xattrs and contents.
#[test]
fn linux_sees_the_tree_jbdfs_wrote() {
    jbdfs_testkit::require!(fuse, loop, "getfattr", "setfattr");
    let mut m = Mounted::new(1 << 30, 4096);
    let d = m.dir.clone();
    let big: Vec<u8> = (0..6_500_000u32).map(|i| (i * 13 % 256) as u8).collect();
    std::fs::write(d.join("double-indirect"), &big).unwrap();
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::File::create(d.join("sparse")).unwrap();
        f.seek(SeekFrom::Start(350 << 20)).unwrap();
        f.write_all(b"far away").unwrap();
    }
    std::fs::create_dir(d.join("many")).unwrap();
    for i in 0..3000 {
        std::fs::write(d.join(format!("many/entry-{i}")), format!("{i}")).unwrap();
    }
    for i in (0..3000).step_by(7) {
        std::fs::rename(
            d.join(format!("many/entry-{i}")),
            d.join(format!("many/renamed-{i}")),
        )
        .unwrap();
    }
    std::fs::hard_link(d.join("double-indirect"), d.join("many/hardlink")).unwrap();
    std::os::unix::fs::symlink("double-indirect", d.join("fast-link")).unwrap();
    std::os::unix::fs::symlink("x".repeat(300), d.join("slow-link")).unwrap();
    sh(&format!(
        "mkfifo {0}/fifo && mknod {0}/null c 1 3 && mknod {0}/loopish b 7 200",
        d.display()
    ));
    std::fs::set_permissions(d.join("sparse"), std::fs::Permissions::from_mode(0o4751)).unwrap();
    if which("setfattr") {
        sh(&format!("setfattr -n user.colour -v blue {0}/sparse && setfattr -n trusted.big -v 0s{1} {0}/many", d.display(), "QUFB".repeat(200)));
    }
    let ours = snapshot(&d);
    m.unmount();
    e2fsck_clean(&m.image);
    let dir = m.dir.clone();
    let st = Command::new("mount")
        .args(["-o", "loop,ro", "-t", "ext3"])
        .arg(&m.image)
        .arg(&dir)
        .status()
        .unwrap();
    assert!(st.success());
    let theirs = snapshot(&dir);
    let _ = Command::new("umount").arg(&dir).status();
    assert_eq!(ours.len(), theirs.len());
    for (k, v) in &ours {
        assert_eq!(Some(v), theirs.get(k), "{k}");
    }
}
