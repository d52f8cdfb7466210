//! The daemon's life: open the backing store, mount the filesystem, serve
//! it over FUSE until unmounted or signalled, and leave the image clean.
//! Daemonizing re-executes the binary in the foreground as a child in its
//! own process group, and returns once the mount is live.

use std::io::{self, BufRead};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use fuser::{Config, MountOption, SessionACL};

use jbdfs::device::lock::{self, LockKind};
use jbdfs::device::{
    BlockDevice, FileDevice, OpenOptions, RecordingDevice, SimDevice, Source, SourceOptions,
    WriterClaim,
};
use jbdfs::fs::{Filesystem, MountConfig};

use crate::fuse::JbdFuse;

/// What a remount request needs: where the request comes, and the
/// options the mount was made with (a remount may repeat, not change, the
/// fixed ones).
pub(crate) struct RemountContext {
    pub(crate) mountpoint: PathBuf,
    pub(crate) mounted: crate::options::MountOptions,
    /// A read-only mount of a writable image: the exclusive lock a remount
    /// read-write must take first. See [`WriterClaim`].
    pub(crate) writer: Option<crate::remount::ImageWriter>,
}

/// What the daemon needs, resolved from the command line and -o options.
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    pub source: PathBuf,
    pub mountpoint: PathBuf,
    /// The filesystem's configuration, from
    /// [`MountOptions::mount_config`](crate::options::MountOptions::mount_config).
    /// Whether the device can be written and what errors=panic does are
    /// settled when the device is opened (`open_locked`).
    pub mount: MountConfig,
    pub threads: usize,
    pub direct_io: bool,
    /// -o direct_io: no kernel page cache for open files.
    pub fuse_direct_io: bool,
    /// -o io_uring[,io_uring_q_depth=N,io_uring_poll_us=N]: how requests
    /// reach the daemon.
    pub transport: crate::fuse::Transport,
    pub allow_other: bool,
    /// Generic mount options passed on to the kernel (dev, nosuid, ...).
    pub generic: Vec<String>,
    /// -o stats=PATH: journal statistics, refreshed every second.
    pub stats: Option<PathBuf>,
    /// -o record=PATH: log every write, flush and mark for crash testing.
    pub record: Option<PathBuf>,
    /// -o devsim=: a latency model over the backing store.
    pub devsim: Option<jbdfs::device::DevSimParams>,
    /// -o noload / norecovery: a read-only mount does not replay the
    /// journal (ext3's noload); refused without -o ro.
    pub noload: bool,
    /// The options as parsed, for a remount to compare its own with.
    pub mount_options: crate::options::MountOptions,
    /// -o nbd_timeout=SECONDS: how long an NBD source's client retries a
    /// lost connection before I/O fails.
    pub nbd_timeout: Duration,
    /// -o nbd_connections=N: connections to an NBD source whose server
    /// allows several.
    pub nbd_connections: usize,
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
    let (fs, recorder, _, _) = open_locked(cfg)?;
    Ok((fs, recorder))
}

/// [`open_recorded`], with a handle on the backing store that tells when
/// everything holding it (and so its lock) has let go.
fn open_locked(cfg: &DaemonConfig) -> anyhow::Result<Mounted> {
    if cfg.mount.read_only && !cfg.noload {
        recover_for_read_only(cfg)?;
    }
    // A read-only mount of an image that can be written opens it for
    // writing with the shared lock, so that a remount can make it
    // read-write (Linux checks the device only then, too).
    let writable_later = cfg.mount.read_only && can_write(cfg);
    let opts = OpenOptions {
        read_only: cfg.mount.read_only && !writable_later,
        shared_lock: writable_later,
        direct: cfg.direct_io,
        exclusive: true,
        ..Default::default()
    };
    let (opened, claim) = open_source(cfg, opts)?;
    if opened.read_only && !cfg.noload {
        refuse_unreplayable(cfg, &*opened.device)?;
    }
    let writer = claim.map(|claim| crate::remount::ImageWriter {
        claim,
        path: cfg.source.clone(),
    });
    if opened.read_only && !cfg.mount.read_only {
        // check_mountable saw it writable a moment ago.
        anyhow::bail!(
            "{}: the NBD server now exports it read-only; mount with -o ro",
            cfg.source.display()
        );
    }
    let mut dev: Arc<dyn BlockDevice> = opened.device;
    let backing = Arc::downgrade(&dev);
    // The latency model sits next to the backing store; the recorder, if
    // any, above it sees the same writes in the same order.
    if let Some(params) = &cfg.devsim {
        tracing::info!(model = %params, "emulating a device");
        dev = Arc::new(SimDevice::new(dev, params.clone()));
    }
    let mut recorder = None;
    if cfg.record.is_some() && cfg.mount.read_only {
        tracing::warn!("record= ignored: a read-only mount writes nothing to record");
    }
    if let Some(log) = cfg.record.as_ref().filter(|_| !cfg.mount.read_only) {
        let what = format!("jbdfs daemon on {}", cfg.source.display());
        let rec = Arc::new(
            RecordingDevice::to_file(dev.clone(), log, &what)
                .map_err(|e| anyhow::anyhow!("record={}: {e}", log.display()))?,
        );
        dev = rec.clone();
        recorder = Some(rec);
    }
    let mount_cfg = MountConfig {
        read_only_device: opened.read_only,
        // A daemon told errors=panic stops as a crashed machine would.
        panic_action: jbdfs::fs::error::PanicAction::ExitProcess,
        ..cfg.mount.clone()
    };
    let fs = Filesystem::mount(dev.clone(), &mount_cfg).map_err(|e| {
        let src = cfg.source.display();
        match jbdfs::fs::mount::refusal_reason(&*dev) {
            Some(why) => anyhow::anyhow!("{src}: cannot mount: {why}"),
            // As the kernel, the mount does not repair: fsck does, and
            // finds a damaged journal inode's log through s_jnl_blocks.
            None if matches!(e, jbdfs::fs::FsError::Corrupt(_)) => {
                anyhow::anyhow!("{src}: cannot mount: {e}\nRun fsck.jbdfs on it: it can repair this, and replays the journal first.")
            }
            None => anyhow::anyhow!("{src}: cannot mount: {e}"),
        }
    })?;
    Ok((fs, recorder, backing, writer))
}

/// Whether the source could be opened for writing: an image file or
/// device the caller may write, on a filesystem mounted read-write, or an
/// NBD export (whose server says whether it takes writes when connected).
fn can_write(cfg: &DaemonConfig) -> bool {
    match Source::parse(cfg.source.as_os_str()) {
        Ok(Source::Path(path)) => jbdfs::device::file::write_protected(&path).is_none(),
        Ok(Source::Nbd(_)) => true,
        Err(_) => false,
    }
}

/// A journal that needs recovery on a device that cannot be written (a
/// write-protected device or image, a read-only NBD export): Linux refuses
/// the mount ("write access unavailable, cannot proceed (try mounting with
/// noload)"), where showing the state before the crash would hide what was
/// fsync'd.
fn refuse_unreplayable(cfg: &DaemonConfig, dev: &dyn BlockDevice) -> anyhow::Result<()> {
    let sb = jbdfs::fs::mount::read_superblock(dev)
        .map_err(|e| anyhow::anyhow!("{}: cannot mount: {e}", cfg.source.display()))?;
    if sb.has_incompat(jbdfs::format::superblock::feature::INCOMPAT_RECOVER) {
        anyhow::bail!(
            "{}: cannot mount: the journal needs recovery and the device cannot be written; \
             make it writable, or mount with -o ro,noload to see the filesystem without \
             what only the journal holds",
            cfg.source.display()
        );
    }
    Ok(())
}

/// Linux replays a journal that needs recovery on a read-only mount too,
/// when the device can be written (ext3_load_journal), so that the mount
/// shows the recovered state and not the one before the crash. Done here
/// the same way: a read-write mount and unmount of the image (which frees
/// the orphan list as well, as ext3's read-only mount does) before the
/// read-only open. One that cannot be written is refused
/// ([`refuse_unreplayable`]), as Linux refuses it.
fn recover_for_read_only(cfg: &DaemonConfig) -> anyhow::Result<()> {
    let Ok(Source::Path(path)) = Source::parse(cfg.source.as_os_str()) else {
        return Ok(());
    };
    if jbdfs::device::file::write_protected(&path).is_some() {
        return Ok(()); // refuse_unreplayable says why it cannot be mounted
    }
    let look = OpenOptions {
        read_only: true,
        ..Default::default()
    };
    let needs = FileDevice::open(&path, look)
        .ok()
        .and_then(|dev| jbdfs::fs::mount::read_superblock(&dev).ok())
        .is_some_and(|sb| sb.has_incompat(jbdfs::format::superblock::feature::INCOMPAT_RECOVER));
    if !needs {
        return Ok(());
    }
    let rw = OpenOptions {
        exclusive: true,
        ..Default::default()
    };
    let Ok(dev) = FileDevice::open(&path, rw) else {
        return Ok(());
    };
    tracing::info!("replaying the journal before the read-only mount, as Linux does");
    let fs = Filesystem::mount(Arc::new(dev), &MountConfig::default())
        .map_err(|e| anyhow::anyhow!("{}: journal recovery: {e}", cfg.source.display()))?;
    fs.unmount()
        .map_err(|e| anyhow::anyhow!("{}: journal recovery: {e}", cfg.source.display()))?;
    Ok(())
}

type Mounted = (
    Arc<Filesystem>,
    Option<Arc<RecordingDevice>>,
    Weak<dyn BlockDevice>,
    Option<crate::remount::ImageWriter>,
);

/// How long a mount waits for an image that is locked but not mounted: a
/// daemon unmounted a moment ago (by `fusermount3 -u`, which does not
/// wait) that is still writing the image back and exiting.
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// Opens the image (a file, block device or NBD export: see
/// [`jbdfs::device::Source`]). With [`OpenOptions::shared_lock`], an
/// image file or device comes with the claim to its exclusive lock.
fn open_source(
    cfg: &DaemonConfig,
    opts: OpenOptions,
) -> anyhow::Result<(jbdfs::device::Opened, Option<WriterClaim>)> {
    let src = cfg.source.display();
    let source = Source::parse(cfg.source.as_os_str()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let Source::Path(path) = &source else {
        let opts = SourceOptions {
            file: opts,
            nbd_timeout: cfg.nbd_timeout,
            nbd_connections: cfg.nbd_connections,
            tls: cfg.mount_options.tls.clone(),
        };
        let opened =
            jbdfs::device::open::open(&source, &opts).map_err(|e| anyhow::anyhow!("{src}: {e}"))?;
        return Ok((opened, None));
    };
    // As mount(8) does: a write-protected source is mounted read-only (the
    // caller says so; see check_mountable).
    let opts = match !opts.read_only && jbdfs::device::file::write_protected(path).is_some() {
        true => OpenOptions {
            read_only: true,
            shared_lock: false,
            ..opts
        },
        false => opts,
    };
    let dev = open_file(path, &cfg.mountpoint, opts)?;
    let claim = match opts.shared_lock {
        true => Some(
            dev.writer_claim()
                .map_err(|e| anyhow::anyhow!("{src}: {e}"))?,
        ),
        false => None,
    };
    let opened = jbdfs::device::Opened {
        device: Arc::new(dev),
        read_only: opts.read_only,
    };
    Ok((opened, claim))
}

/// Opens an image file or block device, or refuses with who holds it: at
/// once when it is mounted elsewhere, after [`LOCK_WAIT`] when it is only
/// locked (a block device: held) or is mounted on `mountpoint` itself (an
/// unmount of it may be under way: `umount DIR & mount IMAGE DIR`, fstests
/// generic/604).
fn open_file(source: &Path, mountpoint: &Path, opts: OpenOptions) -> anyhow::Result<FileDevice> {
    let here = std::fs::canonicalize(mountpoint).ok();
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        let err = match FileDevice::open(source, opts) {
            Ok(dev) => return Ok(dev),
            Err(e) => e,
        };
        if held_block_device(&err, source) {
            // O_EXCL, not a lock: the holder is only found by its mount.
            let on = lock::mount_point_of(source);
            if (on.is_some() && on != here) || Instant::now() >= deadline {
                let at = on.map_or(String::new(), |m| format!(", mounted on {}", m.display()));
                anyhow::bail!("{}: in use{at}: {err}", source.display());
            }
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        let Some(busy) = lock::in_use(&err) else {
            return Err(anyhow::anyhow!("{}: {err}", source.display()));
        };
        let elsewhere = busy.holder.mountpoint.is_some() && busy.holder.mountpoint != here;
        if elsewhere || Instant::now() >= deadline {
            return Err(anyhow::anyhow!("{busy}"));
        }
        tracing::debug!("{busy}: waiting for it to let go");
        let kind = if opts.read_only || opts.shared_lock {
            LockKind::Read
        } else {
            LockKind::Write
        };
        wait_unlocked(source, kind, deadline);
    }
}

/// EBUSY from opening a block device with O_EXCL: another holder, such
/// as a daemon still closing it after an unmount.
fn held_block_device(err: &io::Error, source: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    err.raw_os_error() == Some(libc::EBUSY)
        && std::fs::metadata(source).is_ok_and(|m| m.file_type().is_block_device())
}

/// Polls until a `kind` lock on `source` would be granted, or `deadline`.
/// F_OFD_GETLK is cheap, unlike finding a holder in /proc.
fn wait_unlocked(source: &Path, kind: LockKind, deadline: Instant) {
    let Ok(file) = std::fs::File::open(source) else {
        return;
    };
    while Instant::now() < deadline && lock::conflicts(&file, kind).unwrap_or(false) {
        std::thread::sleep(Duration::from_millis(5));
    }
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
/// An image in use is refused here too, with the lock the mount will take
/// (exclusive unless read-only), so a second mount fails before daemonizing.
/// Returns why the source can only be read, if it can (an NBD export
/// offered read-only, a write-protected device or image), so that the
/// caller mounts read-only.
pub fn check_mountable(cfg: &DaemonConfig) -> anyhow::Result<Option<String>> {
    let opts = OpenOptions {
        read_only: cfg.mount.read_only,
        ..Default::default()
    };
    let (opened, _) = open_source(cfg, opts)?;
    let dev = &*opened.device;
    let cannot = |why: String| anyhow::anyhow!("{}: cannot mount: {why}", cfg.source.display());
    let sb = jbdfs::fs::mount::read_superblock(dev).map_err(|e| cannot(e.to_string()))?;
    // Features first: an ext4 image's descriptors would not even parse.
    if let Some(why) = jbdfs::fs::mount::refusal_reason(dev) {
        return Err(cannot(why));
    }
    jbdfs::fs::mount::read_group_descs(dev, &sb).map_err(|e| cannot(e.to_string()))?;
    if !opened.read_only || cfg.mount.read_only {
        return Ok(None);
    }
    Ok(Some(match Source::parse(cfg.source.as_os_str()) {
        Ok(Source::Path(path)) => jbdfs::device::file::write_protected(&path)
            .map_or("write-protected".to_string(), |why| {
                format!("write-protected ({why})")
            }),
        _ => "the NBD server exports it read-only".to_string(),
    }))
}

/// The image's canonical path: the mount's source in mountinfo, which
/// the utab line must match and by which a busy image finds its mount.
/// An NBD URI is its own name.
fn canonical_source(cfg: &DaemonConfig) -> PathBuf {
    if matches!(Source::parse(cfg.source.as_os_str()), Ok(Source::Nbd(_))) {
        return cfg.source.clone();
    }
    std::fs::canonicalize(&cfg.source).unwrap_or_else(|_| cfg.source.clone())
}

fn fuse_options(cfg: &DaemonConfig) -> Vec<MountOption> {
    let mut out = vec![
        MountOption::FSName(canonical_source(cfg).display().to_string()),
        // As a kernel option, not fuser's Subtype: mounting as root, fuser
        // calls mount(2) itself and passes Subtype only to fusermount, so
        // the type would read plain `fuse` and umount(8) would never run
        // umount.fuse.jbdfs. fusermount3 takes subtype= from -o as well.
        MountOption::CUSTOM("subtype=jbdfs".into()),
        MountOption::DefaultPermissions,
    ];
    out.push(if cfg.mount.read_only {
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
///
/// Returns only once nothing holds the image any more (its lock is free),
/// the pid file and utab line are gone, and the helper threads are joined:
/// `umount.fuse.jbdfs` waits for the lock, and `umount; mount` must not
/// find this daemon's lock or files in the next one's way.
pub fn serve(cfg: &DaemonConfig) -> anyhow::Result<()> {
    let (fs, recorder, backing, writer) = open_locked(cfg)?;
    // Both before the mount goes live: umount may come the moment mount
    // returns, and it needs them to wait for us.
    let pidfile = PidFile::create(&cfg.mountpoint);
    let utab = add_utab_line(cfg);
    let mut config = Config::default();
    config.mount_options = fuse_options(cfg);
    config.n_threads = Some(cfg.threads.max(1));
    config.clone_fd = true;
    if cfg.allow_other {
        config.acl = SessionACL::All;
    }
    let handler = Arc::new(JbdFuse::new(fs.clone()).with_direct_io(cfg.fuse_direct_io));
    let session = crate::fuse::session::mount(
        handler,
        &cfg.mountpoint,
        &config,
        cfg.fuse_direct_io,
        cfg.transport,
    );
    let mut session = match session {
        Ok(s) => s,
        Err(e) => {
            let _ = fs.unmount();
            release(fs, backing);
            return Err(anyhow::anyhow!(
                "{}: cannot mount: {e}",
                cfg.mountpoint.display()
            ));
        }
    };
    let unmounter = session.unmount_callable();
    // The signal handlers come before the rings: they serve requests as
    // soon as they start, and a SIGTERM or a crash test's mark signal in
    // between would find the default action (terminate) in place.
    let serving = session.serving();
    let marks = recorder.zip(cfg.record.clone());
    let remount = RemountContext {
        mountpoint: cfg.mountpoint.clone(),
        mounted: cfg.mount_options.clone(),
        writer,
    };
    let signals = SignalWatcher::start(unmounter, fs.clone(), marks, remount)?;
    let stats = StatsWriter::start(fs.clone(), cfg.stats.clone(), serving.to_string());
    // A failure here leaves a kernel that waits for rings: dropping the
    // session unmounts, so that nothing hangs on the mount.
    let rings = session
        .start()
        .map_err(|e| anyhow::anyhow!("cannot start the io_uring queues: {e}"))?;
    tracing::info!(source = %cfg.source.display(), mountpoint = %cfg.mountpoint.display(), transport = %serving, "mounted");
    if std::env::var_os(CHILD_ENV).is_some() {
        // The parent relays our stderr until it ends, then returns: from
        // here on nothing may write to that pipe, whose reader is going.
        DETACHED.store(true, Ordering::Relaxed);
        detach_stderr()?;
    }
    // run() consumes the session: its handle on the filesystem is gone
    // when it returns.
    let res = session.run(rings);
    drop(signals);
    let written = fs.unmount();
    if written.is_ok() {
        tracing::info!("unmounted cleanly");
    }
    drop(stats);
    drop(pidfile);
    drop(utab);
    release(fs, backing);
    written.map_err(|e| anyhow::anyhow!("writing the filesystem back failed: {e}"))?;
    res.map_err(|e| anyhow::anyhow!("FUSE session failed: {e}"))
}

/// Drops the last handle on the filesystem, then waits until the backing
/// store is closed, which frees the image's lock. Background threads hold
/// the filesystem weakly, but one may be inside a call for a moment.
fn release(fs: Arc<Filesystem>, backing: Weak<dyn BlockDevice>) {
    drop(fs);
    let deadline = Instant::now() + Duration::from_secs(10);
    while backing.strong_count() > 0 {
        if Instant::now() > deadline {
            tracing::warn!("the image is still open 10 s after unmount; it is freed at exit");
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The utab line through which umount(8) runs umount.fuse.jbdfs (see
/// [`crate::utab`]); only root can write utab, as only root's umount
/// skips the mount table without one.
fn add_utab_line(cfg: &DaemonConfig) -> Option<crate::utab::UtabEntry> {
    // SAFETY: geteuid has no preconditions and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let utab = crate::utab::utab_path();
    match crate::utab::UtabEntry::add(&utab, &canonical_source(cfg), &cfg.mountpoint) {
        Ok(e) => Some(e),
        Err(e) => {
            tracing::warn!(utab = %utab.display(), "cannot add a utab line; umount will not wait for the daemon: {e}");
            None
        }
    }
}

/// Where a daemon serving `mountpoint` records its pid, so that
/// `umount.fuse.jbdfs` can wait for it to write the image back and exit:
/// a FUSE unmount returns before the daemon has finished. The directory
/// is [`pid_file_dir`]; `None` when this user has none.
pub fn pid_file_path(mountpoint: &Path) -> Option<PathBuf> {
    let canon = std::fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    let name: String = canon
        .to_string_lossy()
        .chars()
        .map(|c| if c == '/' { '_' } else { c })
        .collect();
    Some(pid_file_dir()?.join(format!("{name}.pid")))
}

/// Root's pid files, and anyone's who may write there.
const SYSTEM_PID_DIR: &str = "/run/jbdfs";

/// The directory of pid files for this user: /run/jbdfs for root (or for
/// a user who may write it); otherwise `$XDG_RUNTIME_DIR/jbdfs`, or
/// `/run/user/UID/jbdfs` when the variable is unset (mount(8) and sudo
/// clear it) and that directory is this user's. umount.fuse.jbdfs looks
/// in the same places.
pub fn pid_file_dir() -> Option<PathBuf> {
    // SAFETY: geteuid has no preconditions and touches no memory.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 || may_write(Path::new(SYSTEM_PID_DIR)) {
        return Some(PathBuf::from(SYSTEM_PID_DIR));
    }
    let runtime = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            use std::os::unix::fs::MetadataExt;
            let p = PathBuf::from(format!("/run/user/{uid}"));
            std::fs::metadata(&p)
                .is_ok_and(|m| m.is_dir() && m.uid() == uid)
                .then_some(p)
        })?;
    Some(runtime.join("jbdfs"))
}

/// Whether this process may create files in `dir` (access(2), W_OK|X_OK).
fn may_write(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

/// The pid file of a running daemon, removed when dropped.
struct PidFile(Option<PathBuf>);

impl PidFile {
    fn create(mountpoint: &Path) -> PidFile {
        let Some(path) = pid_file_path(mountpoint) else {
            // An ordinary user with no runtime directory: fusermount3 -u
            // and umount.fuse.jbdfs then cannot wait for the write-back,
            // which nothing but the helper needs.
            tracing::debug!("no runtime directory for a pid file (XDG_RUNTIME_DIR is unset)");
            return PidFile(None);
        };
        let made = path
            .parent()
            .map(|dir| {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o755)
                    .create(dir)
            })
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
        let Some(p) = &self.0 else { return };
        // Another daemon on this mount point may have replaced ours.
        let ours = format!("{}\n", std::process::id());
        if std::fs::read_to_string(p).is_ok_and(|t| t == ours) {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// SIGTERM, SIGINT and SIGHUP unmount, which ends the session; SIGUSR1
/// logs the journal statistics; SIGUSR2 takes a remount request (see
/// remount.rs) or mark requests for a `record=` log. Dropping the watcher stops its thread and joins it, so
/// that the filesystem it holds is let go.
struct SignalWatcher {
    handle: signal_hook::iterator::Handle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SignalWatcher {
    fn start(
        mut unmounter: fuser::SessionUnmounter,
        fs: Arc<Filesystem>,
        marks: Option<(Arc<RecordingDevice>, PathBuf)>,
        remount: RemountContext,
    ) -> anyhow::Result<SignalWatcher> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
        let mut signals =
            signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2])?;
        let handle = signals.handle();
        let thread = std::thread::Builder::new()
            .name("jbdfs-signals".into())
            .spawn(move || {
                for sig in signals.forever() {
                    if sig == SIGUSR1 {
                        tracing::info!("journal statistics:\n{}", fs.journal_stats());
                        continue;
                    }
                    if sig == SIGUSR2 {
                        if crate::remount::serve_request(&fs, &remount) {
                            continue;
                        }
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
        Ok(SignalWatcher {
            handle,
            thread: Some(thread),
        })
    }
}

impl Drop for SignalWatcher {
    fn drop(&mut self) {
        self.handle.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Writes the journal statistics to `-o stats=PATH` every second, and once
/// more when dropped (at unmount), after its thread is joined.
struct StatsWriter {
    path: Option<PathBuf>,
    fs: Arc<Filesystem>,
    /// The `transport:` line (io_uring queues, depth and polling, or
    /// /dev/fuse workers).
    transport: String,
    stop: Option<crossbeam_channel::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StatsWriter {
    fn start(fs: Arc<Filesystem>, path: Option<PathBuf>, transport: String) -> StatsWriter {
        let (tx, rx) = crossbeam_channel::bounded::<()>(0);
        let thread = path.clone().and_then(|p| {
            let fs = fs.clone();
            let transport = transport.clone();
            std::thread::Builder::new()
                .name("jbdfs-stats".into())
                .spawn(move || loop {
                    write_stats(&p, &fs, &transport);
                    // Ends at once when the sender is dropped.
                    if rx.recv_timeout(Duration::from_secs(1))
                        != Err(crossbeam_channel::RecvTimeoutError::Timeout)
                    {
                        return;
                    }
                })
                .ok()
        });
        StatsWriter {
            path,
            fs,
            transport,
            stop: Some(tx),
            thread,
        }
    }
}

impl Drop for StatsWriter {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(p) = &self.path {
            write_stats(p, &self.fs, &self.transport);
        }
    }
}

fn write_stats(path: &Path, fs: &Filesystem, transport: &str) {
    let tmp = path.with_extension("tmp");
    let text = format!(
        "{}options: {}\ntransport: {transport}\n",
        fs.journal_stats(),
        crate::options::MountOptions::describe_tunables(&fs.tunables())
    );
    let res = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path));
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

/// Points stderr at /dev/null, which ends the pipe the parent relays: its
/// signal that the mount is ready and that no more lines will come. A line
/// written after the parent has gone would fail with EPIPE, and reporting
/// that failure on stderr again would panic the daemon under its mount.
fn detach_stderr() -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let null = std::fs::OpenOptions::new().write(true).open("/dev/null")?;
    // SAFETY: dup2 only duplicates descriptors; `null` is open for the
    // whole call and STDERR_FILENO is this process's own stderr.
    if unsafe { libc::dup2(null.as_raw_fd(), libc::STDERR_FILENO) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The environment variable that marks the re-executed foreground child.
pub const CHILD_ENV: &str = "JBDFS_DAEMON_CHILD";

/// Re-executes this binary in the foreground as a background child and
/// waits until the mount is live and the child has let go of the stderr we
/// relay (see [`detach_stderr`]), or the child fails.
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
    let relayed = Arc::new(AtomicBool::new(false));
    if let Some(err) = child.stderr.take() {
        let relayed = relayed.clone();
        std::thread::spawn(move || {
            for line in io::BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("{line}");
            }
            relayed.store(true, Ordering::Release);
        });
    }
    let target = std::fs::canonicalize(mountpoint)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait()? {
            std::thread::sleep(Duration::from_millis(50));
            anyhow::bail!("the daemon exited before the mount was live ({status})");
        }
        if relayed.load(Ordering::Acquire) && is_mounted(&target) {
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
