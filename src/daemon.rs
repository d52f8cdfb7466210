//! The daemon's life: open the backing store, mount the filesystem, serve
//! it over FUSE until unmounted or signalled, and leave the image clean.
//! Daemonizing re-executes the binary in the foreground as a child in its
//! own process group, and returns once the mount is live.

use std::io::{self, BufRead};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fuser::{Config, MountOption, SessionACL};

use crate::device::{BlockDevice, FileDevice, OpenOptions, RecordingDevice, SimDevice};
use crate::fs::{Filesystem, MountConfig};

/// What the daemon needs, resolved from the command line and -o options.
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    pub source: PathBuf,
    pub mountpoint: PathBuf,
    pub read_only: bool,
    pub threads: usize,
    pub cache_size: usize,
    pub direct_io: bool,
    /// -o direct_io: no kernel page cache for open files.
    pub fuse_direct_io: bool,
    pub allow_other: bool,
    /// Generic mount options passed on to the kernel (dev, nosuid, ...).
    pub generic: Vec<String>,
    /// barrier=1: flush around commit blocks.
    pub barrier: bool,
    /// commit=N seconds.
    pub commit_secs: u32,
    /// bdelay= and its parameters.
    pub batching: crate::journal::Batching,
    /// -o stats=PATH: journal statistics, refreshed every second.
    pub stats: Option<PathBuf>,
    /// -o dirsync or -o sync.
    pub dirsync: bool,
    /// -o data=journal.
    pub data_journal: bool,
    /// -o data=writeback.
    pub data_writeback: bool,
    /// -o errors=continue|remount-ro|panic.
    pub errors: crate::options::ErrorsPolicy,
    /// -o record=PATH: log every write, flush and mark for crash testing.
    pub record: Option<PathBuf>,
    /// -o devsim=: a latency model over the backing store.
    pub devsim: Option<crate::device::DevSimParams>,
    /// -o max_map=N (`u32::MAX` when not given).
    pub max_map: u32,
}

/// Opens the backing store and mounts the filesystem in-process.
pub fn open_filesystem(cfg: &DaemonConfig) -> anyhow::Result<Arc<Filesystem>> {
    Ok(open_recorded(cfg)?.0)
}

/// Opens and mounts; with `-o record=PATH` the device is wrapped in a
/// recorder streaming to PATH (the image as it stands now saved as
/// PATH.base), which is returned too, for marks.
pub fn open_recorded(
    cfg: &DaemonConfig,
) -> anyhow::Result<(Arc<Filesystem>, Option<Arc<RecordingDevice>>)> {
    let opts = OpenOptions {
        read_only: cfg.read_only,
        direct: cfg.direct_io,
        exclusive: true,
    };
    let dev = FileDevice::open(&cfg.source, opts)
        .map_err(|e| anyhow::anyhow!("{}: {e}", cfg.source.display()))?;
    let mut dev: Arc<dyn BlockDevice> = Arc::new(dev);
    // The latency model sits next to the backing store; the recorder, if
    // any, above it sees the same writes in the same order.
    if let Some(params) = &cfg.devsim {
        tracing::info!(model = %params, "emulating a device");
        dev = Arc::new(SimDevice::new(dev, params.clone()));
    }
    let mut recorder = None;
    if cfg.record.is_some() && cfg.read_only {
        tracing::warn!("record= ignored: a read-only mount writes nothing to record");
    }
    if let Some(log) = cfg.record.as_ref().filter(|_| !cfg.read_only) {
        let what = format!("jbdfs daemon on {}", cfg.source.display());
        let rec = Arc::new(
            RecordingDevice::to_file(dev.clone(), log, &what)
                .map_err(|e| anyhow::anyhow!("record={}: {e}", log.display()))?,
        );
        dev = rec.clone();
        recorder = Some(rec);
    }
    let mount_cfg = MountConfig {
        read_only: cfg.read_only,
        cache_size: cfg.cache_size,
        journal: crate::journal::JournalConfig {
            barrier: cfg.barrier,
            commit_interval: std::time::Duration::from_secs(cfg.commit_secs.max(1) as u64),
            batching: cfg.batching,
        },
        dirsync: cfg.dirsync,
        data_journal: cfg.data_journal,
        data_writeback: cfg.data_writeback,
        errors: cfg.errors,
        // A daemon told errors=panic stops as a crashed machine would.
        panic_action: crate::fs::error::PanicAction::ExitProcess,
        max_map: cfg.max_map,
    };
    let fs = Filesystem::mount(dev.clone(), &mount_cfg).map_err(|e| {
        let why = crate::fs::mount::refusal_reason(&*dev).unwrap_or_else(|| e.to_string());
        anyhow::anyhow!("{}: cannot mount: {why}", cfg.source.display())
    })?;
    Ok((fs, recorder))
}

/// The file through which a workload asks the daemon for marks in a
/// `record=` log: it writes labels (one a line) to `PATH.mark`, sends
/// SIGUSR2, and waits for the daemon to remove the file, which it does
/// after appending the marks. See docs/ARCHITECTURE.md (crash testing).
pub fn mark_request_path(log: &Path) -> PathBuf {
    let mut s = log.as_os_str().to_owned();
    s.push(".mark");
    PathBuf::from(s)
}

fn take_mark_requests(rec: &RecordingDevice, log: &Path) {
    let path = mark_request_path(log);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            for label in text.lines().filter(|l| !l.is_empty()) {
                rec.mark(label);
            }
            let _ = std::fs::remove_file(&path);
        }
        Err(e) => tracing::warn!(path = %path.display(), "SIGUSR2 without a mark request: {e}"),
    }
}

/// Checks, without writing, that the source holds a filesystem this build
/// can mount, so that errors reach the user before daemonizing.
pub fn check_mountable(cfg: &DaemonConfig) -> anyhow::Result<()> {
    let opts = OpenOptions {
        read_only: true,
        ..Default::default()
    };
    let dev = FileDevice::open(&cfg.source, opts)
        .map_err(|e| anyhow::anyhow!("{}: {e}", cfg.source.display()))?;
    let cannot = |why: String| anyhow::anyhow!("{}: cannot mount: {why}", cfg.source.display());
    let sb = crate::fs::mount::read_superblock(&dev).map_err(|e| cannot(e.to_string()))?;
    // Features first: an ext4 image's descriptors would not even parse.
    if let Some(why) = crate::fs::mount::refusal_reason(&dev) {
        return Err(cannot(why));
    }
    crate::fs::mount::read_group_descs(&dev, &sb).map_err(|e| cannot(e.to_string()))?;
    Ok(())
}

fn fuse_options(cfg: &DaemonConfig) -> Vec<MountOption> {
    let mut out = vec![
        MountOption::FSName(cfg.source.display().to_string()),
        MountOption::Subtype("jbdfs".into()),
        MountOption::DefaultPermissions,
    ];
    out.push(if cfg.read_only {
        MountOption::RO
    } else {
        MountOption::RW
    });
    for o in &cfg.generic {
        let m = match o.as_str() {
            "dev" => MountOption::Dev,
            "nodev" => MountOption::NoDev,
            "suid" => MountOption::Suid,
            "nosuid" => MountOption::NoSuid,
            "exec" => MountOption::Exec,
            "noexec" => MountOption::NoExec,
            "atime" => MountOption::Atime,
            "noatime" => MountOption::NoAtime,
            "dirsync" => MountOption::DirSync,
            "sync" => MountOption::Sync,
            "async" => MountOption::Async,
            _ => continue,
        };
        out.push(m);
    }
    out
}

/// Serves the filesystem in this process until it is unmounted.
pub fn serve(cfg: &DaemonConfig) -> anyhow::Result<()> {
    let (fs, recorder) = open_recorded(cfg)?;
    let mut config = Config::default();
    config.mount_options = fuse_options(cfg);
    config.n_threads = Some(cfg.threads.max(1));
    config.clone_fd = true;
    if cfg.allow_other {
        config.acl = SessionACL::All;
    }
    let mut session = fuser::Session::new(
        crate::fuse::JbdFuse::new(fs.clone()).with_direct_io(cfg.fuse_direct_io),
        &cfg.mountpoint,
        &config,
    )
    .map_err(|e| anyhow::anyhow!("{}: cannot mount: {e}", cfg.mountpoint.display()))?;
    let unmounter = session.unmount_callable();
    let marks = recorder.zip(cfg.record.clone());
    watch_signals(unmounter, fs.clone(), marks)?;
    let stats = StatsWriter::start(fs.clone(), cfg.stats.clone());
    tracing::info!(source = %cfg.source.display(), mountpoint = %cfg.mountpoint.display(), "mounted");
    if std::env::var_os(CHILD_ENV).is_some() {
        // The parent stops relaying our stderr once the mount is live.
        DETACHED.store(true, Ordering::Relaxed);
    }
    let pidfile = PidFile::create(&cfg.mountpoint);
    let res = session.run();
    fs.unmount()
        .map_err(|e| anyhow::anyhow!("writing the filesystem back failed: {e}"))?;
    tracing::info!("unmounted cleanly");
    drop(stats);
    drop(pidfile);
    res.map_err(|e| anyhow::anyhow!("FUSE session failed: {e}"))
}

/// Where a daemon serving `mountpoint` records its pid, so that
/// `umount.fuse.jbdfs` can wait for it to write the image back and exit:
/// a FUSE unmount returns before the daemon has finished.
pub fn pid_file_path(mountpoint: &Path) -> PathBuf {
    let canon = std::fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    let name: String = canon
        .to_string_lossy()
        .chars()
        .map(|c| if c == '/' { '_' } else { c })
        .collect();
    PathBuf::from("/run/jbdfs").join(format!("{name}.pid"))
}

/// The pid file of a running daemon, removed when dropped.
struct PidFile(Option<PathBuf>);

impl PidFile {
    fn create(mountpoint: &Path) -> PidFile {
        let path = pid_file_path(mountpoint);
        let made = path
            .parent()
            .map(std::fs::create_dir_all)
            .unwrap_or(Ok(()))
            .and_then(|()| std::fs::write(&path, format!("{}\n", std::process::id())));
        match made {
            Ok(()) => PidFile(Some(path)),
            Err(e) => {
                tracing::warn!(path = %path.display(), "cannot write pid file: {e}");
                PidFile(None)
            }
        }
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// SIGTERM, SIGINT and SIGHUP unmount, which ends the session; SIGUSR1
/// logs the journal statistics; SIGUSR2 takes mark requests for a
/// `record=` log.
fn watch_signals(
    mut unmounter: fuser::SessionUnmounter,
    fs: Arc<Filesystem>,
    marks: Option<(Arc<RecordingDevice>, PathBuf)>,
) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
    let mut signals =
        signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2])?;
    std::thread::Builder::new()
        .name("jbdfs-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if sig == SIGUSR1 {
                    tracing::info!("journal statistics:\n{}", fs.journal_stats());
                    continue;
                }
                if sig == SIGUSR2 {
                    if let Some((rec, log)) = &marks {
                        take_mark_requests(rec, log);
                    }
                    continue;
                }
                tracing::info!(signal = sig, "unmounting on signal");
                if let Err(e) = unmounter.unmount() {
                    tracing::error!("unmount on signal failed: {e}");
                }
                return;
            }
        })?;
    Ok(())
}

/// Writes the journal statistics to `-o stats=PATH` every second, and once
/// more when dropped (at unmount).
struct StatsWriter {
    path: Option<PathBuf>,
    fs: Arc<Filesystem>,
    stop: Arc<AtomicBool>,
}

impl StatsWriter {
    fn start(fs: Arc<Filesystem>, path: Option<PathBuf>) -> StatsWriter {
        let stop = Arc::new(AtomicBool::new(false));
        if let Some(p) = path.clone() {
            let (fs, stop) = (fs.clone(), stop.clone());
            let _ = std::thread::Builder::new()
                .name("jbdfs-stats".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        write_stats(&p, &fs);
                        std::thread::sleep(Duration::from_secs(1));
                    }
                });
        }
        StatsWriter { path, fs, stop }
    }
}

impl Drop for StatsWriter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(p) = &self.path {
            write_stats(p, &self.fs);
        }
    }
}

fn write_stats(path: &Path, fs: &Filesystem) {
    let tmp = path.with_extension("tmp");
    let res = std::fs::write(&tmp, fs.journal_stats()).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = res {
        tracing::warn!(path = %path.display(), "cannot write statistics: {e}");
    }
}

/// Set once a daemonized child's stderr has nobody reading it.
static DETACHED: AtomicBool = AtomicBool::new(false);

/// Where log lines go: stderr, or nowhere once detached (as libfuse
/// daemons send theirs to /dev/null).
pub fn log_writer() -> Box<dyn io::Write> {
    if DETACHED.load(Ordering::Relaxed) {
        Box::new(io::sink())
    } else {
        Box::new(io::stderr())
    }
}

/// The environment variable that marks the re-executed foreground child.
pub const CHILD_ENV: &str = "JBDFS_DAEMON_CHILD";

/// Re-executes this binary in the foreground as a background child and
/// waits until the mount is live or the child fails.
pub fn daemonize(args: &[String], mountpoint: &Path) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .args(args)
        .arg("-f")
        .env(CHILD_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    if let Some(err) = child.stderr.take() {
        std::thread::spawn(move || {
            for line in io::BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("{line}");
            }
        });
    }
    let target = std::fs::canonicalize(mountpoint)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait()? {
            std::thread::sleep(Duration::from_millis(50));
            anyhow::bail!("the daemon exited before the mount was live ({status})");
        }
        if is_mounted(&target) {
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!("timed out waiting for the mount to come up");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a jbdfs FUSE mount sits on `path`.
pub fn is_mounted(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = path.to_string_lossy();
    info.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let sep = f.iter().position(|&x| x == "-");
        f.get(4) == Some(&want.as_ref())
            && sep
                .and_then(|s| f.get(s + 1))
                .is_some_and(|t| t.starts_with("fuse"))
    })
}
