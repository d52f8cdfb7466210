//! What every FUSE test of daemon/tests shares:
//!
//! - the transport the tests mount with ([`transport`]), chosen by
//!   `JBDFS_TEST_TRANSPORT` (`dev_fuse`, the default, or `io_uring`), as
//!   the in-process [`Transport`] value and as the `-o` option (`noio_uring`
//!   or `io_uring`: the daemon's own default follows enable_uring), with the
//!   `transport:` line it must leave in a `-o stats=PATH` file, and the
//!   turn ([`TestTransport::turn`]) an io_uring mount holds so that no test
//!   turns the kernel's switch off under it;
//! - the real jbdfs daemon as a child process (`jbdfs -f IMAGE DIR -o ...`),
//!   for tests that must go through the kernel: started with a timeout,
//!   stopped by unmounting, its exit status and stderr kept.
//!
//! The daemon is the `jbdfs` binary, found by [`jbdfs_bin`]: this crate
//! does not link the daemon (nor fuser). The in-process transport value
//! (`jbdfs_daemon::fuse::Transport`) is the daemon tests' to make from
//! [`TestTransport`].

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The kernel's switch for FUSE over io_uring (Y or N; root writes 1 or 0).
pub const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// The daemon's default depth of an io_uring queue
/// (`jbdfs_daemon::fuse::uring::DEFAULT_DEPTH`; daemon/tests/fuse_mount.rs
/// checks at compile time that the two agree).
pub const URING_DEPTH: u32 = 8;
/// The daemon's default `-o io_uring_poll_us`.
pub const URING_POLL_US: u32 = 50;

/// The environment variable that picks the transport of a test run.
pub const TRANSPORT_ENV: &str = "JBDFS_TEST_TRANSPORT";

/// The transport the FUSE tests of this run mount with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestTransport {
    /// read and writev on /dev/fuse (`JBDFS_TEST_TRANSPORT=dev_fuse`, the
    /// default).
    DevFuse,
    /// FUSE over io_uring at the default depth
    /// (`JBDFS_TEST_TRANSPORT=io_uring`, with enable_uring on).
    IoUring,
}

impl TestTransport {
    /// The `-o` option that asks the daemon for it. Explicit both ways:
    /// without either, the daemon picks io_uring whenever enable_uring is
    /// on.
    pub fn option(self) -> &'static str {
        match self {
            TestTransport::DevFuse => "noio_uring",
            TestTransport::IoUring => "io_uring",
        }
    }

    /// `opts` (a `-o` list, maybe empty) with [`TestTransport::option`] added.
    pub fn with(self, opts: &str) -> String {
        match opts {
            "" => self.option().to_string(),
            o => format!("{o},{}", self.option()),
        }
    }

    /// The last line of a `-o stats=PATH` file of a mount served this way,
    /// `workers` being its `threads=`.
    pub fn stats_line(self, workers: usize) -> String {
        match self {
            TestTransport::DevFuse => format!("transport: /dev/fuse, {workers} workers"),
            TestTransport::IoUring => format!(
                "transport: io_uring, {} queues, depth {}, poll {}us",
                possible_cpus(),
                URING_DEPTH,
                URING_POLL_US
            ),
        }
    }

    /// What a mount over this transport holds while it is up: under
    /// io_uring, a shared lock that [`uring_switched_off`] waits for, so
    /// that no test turns enable_uring off while another is mounting
    /// (in this process or another).
    pub fn turn(self) -> Option<SwitchTurn> {
        match self {
            TestTransport::DevFuse => None,
            TestTransport::IoUring => Some(switch_turn()),
        }
    }
}

/// A shared turn on the enable_uring switch (see [`TestTransport::turn`]),
/// for a mount that depends on the switch in some other way (the daemon's
/// default, io_uring when the switch is on).
pub fn switch_turn() -> SwitchTurn {
    SwitchTurn::take(libc::LOCK_SH)
}

/// The transport of this run: `JBDFS_TEST_TRANSPORT`, checked against the
/// kernel once per test binary. Asked for io_uring where enable_uring is
/// not on, it fails the test under CI (env `CI` set) and elsewhere says so
/// loudly once and gives /dev/fuse.
pub fn transport() -> TestTransport {
    static CHOSEN: OnceLock<TestTransport> = OnceLock::new();
    *CHOSEN.get_or_init(|| {
        let asked = std::env::var(TRANSPORT_ENV).unwrap_or_default();
        match asked.as_str() {
            "" | "dev_fuse" => TestTransport::DevFuse,
            "io_uring" => {
                // Read under the switch lock: a test that turns the switch
                // off for a moment must not decide this run's transport.
                let state = {
                    let _turn = SwitchTurn::take(libc::LOCK_SH);
                    uring_switch()
                };
                if state.as_deref() == Some("Y") {
                    return TestTransport::IoUring;
                }
                let state = state.map_or_else(|| "missing".to_string(), |v| format!("{v:?}"));
                let why = format!(
                    "{TRANSPORT_ENV}=io_uring, but {ENABLE_URING} is {state}: \
                     the kernel will not serve FUSE over io_uring \
                     (as root: echo 1 > {ENABLE_URING}; scripts/test.sh does that)"
                );
                if std::env::var_os("CI").is_some() {
                    panic!("{why}; CI is set, so this is a failure, not a fallback");
                }
                // Straight to stderr: libtest captures eprintln! of passing tests.
                let _ = writeln!(
                    std::io::stderr(),
                    "\n!!!!!!!! {why}.\n!!!!!!!! These FUSE tests run on /dev/fuse instead.\n"
                );
                TestTransport::DevFuse
            }
            other => panic!("{TRANSPORT_ENV}={other:?}: expected dev_fuse or io_uring"),
        }
    })
}

/// enable_uring as the kernel shows it (Y or N), or None without one.
pub fn uring_switch() -> Option<String> {
    std::fs::read_to_string(ENABLE_URING)
        .ok()
        .map(|v| v.trim().to_string())
}

/// The possible CPUs (`num_possible_cpus()`, the kernel's count of FUSE
/// io_uring queues): the CPUs listed in /sys/devices/system/cpu/possible.
pub fn possible_cpus() -> usize {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap();
    text.trim()
        .split(',')
        .map(|range| match range.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
            None => 1,
        })
        .sum()
}

/// A lock on the enable_uring switch, for as long as it is held: shared by
/// io_uring mounts, exclusive while a test has the switch turned off.
/// flock(2), so it orders threads of one test binary and concurrent test
/// binaries alike.
pub struct SwitchTurn {
    _file: std::fs::File,
}

impl SwitchTurn {
    fn take(how: libc::c_int) -> SwitchTurn {
        use std::os::fd::AsRawFd;
        let dir = Path::new("/run/lock");
        let dir = if dir.is_dir() {
            dir.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let path = dir.join("jbdfs-test-enable_uring.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        loop {
            // SAFETY: flock on a descriptor we own; no memory is involved.
            if unsafe { libc::flock(file.as_raw_fd(), how) } == 0 {
                return SwitchTurn { _file: file };
            }
            let e = std::io::Error::last_os_error();
            assert_eq!(
                e.kind(),
                std::io::ErrorKind::Interrupted,
                "flock {}: {e}",
                path.display()
            );
        }
    }
}

/// enable_uring turned off until dropped, then back to what it was, with
/// every io_uring mount of the test runs waited for first and kept out
/// meanwhile. Err says why it cannot be done here.
pub struct UringSwitchedOff {
    was: Option<String>,
    _turn: SwitchTurn,
}

pub fn uring_switched_off() -> Result<UringSwitchedOff, String> {
    let turn = SwitchTurn::take(libc::LOCK_EX);
    let was = uring_switch();
    if matches!(was.as_deref(), None | Some("N")) {
        // Off already (or no such switch): nothing to turn or put back.
        return Ok(UringSwitchedOff {
            was: None,
            _turn: turn,
        });
    }
    std::fs::write(ENABLE_URING, "0").map_err(|e| format!("cannot write {ENABLE_URING}: {e}"))?;
    Ok(UringSwitchedOff { was, _turn: turn })
}

impl Drop for UringSwitchedOff {
    fn drop(&mut self) {
        if let Some(was) = &self.was {
            if let Err(e) = std::fs::write(ENABLE_URING, was) {
                // Loud, even while unwinding: the machine is left changed.
                let _ = writeln!(
                    std::io::stderr(),
                    "!!!!!!!! cannot put {ENABLE_URING} back to {was}: {e}"
                );
            }
        }
    }
}

/// The `jbdfs` daemon binary: `$JBDFS_BIN` when set, else the one Cargo
/// built beside this test binary (target/PROFILE/jbdfs; test binaries
/// live in target/PROFILE/deps). Cargo builds it for jbdfs-daemon's own
/// tests (they also have it as `CARGO_BIN_EXE_jbdfs`) and in any
/// workspace build.
pub fn jbdfs_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("JBDFS_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut dir = exe
        .parent()
        .expect("the test binary's directory")
        .to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let bin = dir.join("jbdfs");
    assert!(
        bin.is_file(),
        "no jbdfs binary at {} (build the workspace, or set JBDFS_BIN)",
        bin.display()
    );
    bin
}

/// Whether a FUSE filesystem is mounted on `path` (canonical), from
/// /proc/self/mountinfo, as `jbdfs_daemon::daemon::is_mounted` does.
pub fn is_fuse_mounted(path: &Path) -> bool {
    let want = path.to_string_lossy();
    std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|info| {
        // "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS... - FSTYPE SOURCE ..."
        info.lines()
            .filter_map(|l| l.split_once(" - "))
            .any(|(mount, fs)| {
                mount.split(' ').nth(4) == Some(want.as_ref()) && fs.starts_with("fuse")
            })
    })
}

/// A running daemon, unmounted and killed on drop if the test did not
/// stop it.
pub struct Daemon {
    child: Option<Child>,
    pub dir: PathBuf,
    /// Held while mounted over io_uring ([`TestTransport::turn`]).
    _turn: Option<SwitchTurn>,
}

/// How a daemon that did not stay mounted ended.
#[derive(Debug)]
pub struct Exited {
    pub status: ExitStatus,
    pub stderr: String,
}

fn stderr_of(child: &mut Child) -> String {
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut s);
    }
    s
}

impl Daemon {
    /// Starts the daemon in the foreground, over this run's [`transport`]
    /// (its option added to `opts`); returns once the mount is up, or how
    /// the daemon exited. Panics if neither happens in `timeout`.
    pub fn start(
        image: &Path,
        dir: &Path,
        opts: &str,
        timeout: Duration,
    ) -> Result<Daemon, Exited> {
        let t = transport();
        let turn = t.turn();
        Self::spawn(image, dir, &t.with(opts), turn, timeout)
    }

    /// [`Daemon::start`] with exactly `opts`, whatever the run's transport,
    /// holding no turn: for a test that chooses the transport itself.
    pub fn start_exactly(
        image: &Path,
        dir: &Path,
        opts: &str,
        timeout: Duration,
    ) -> Result<Daemon, Exited> {
        Self::spawn(image, dir, opts, None, timeout)
    }

    fn spawn(
        image: &Path,
        dir: &Path,
        opts: &str,
        turn: Option<SwitchTurn>,
        timeout: Duration,
    ) -> Result<Daemon, Exited> {
        let mut cmd = Command::new(jbdfs_bin());
        cmd.arg("-f").arg(image).arg(dir);
        if !opts.is_empty() {
            cmd.arg("-o").arg(opts);
        }
        let mut child = cmd
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start jbdfs");
        let canon = std::fs::canonicalize(dir).unwrap();
        let deadline = Instant::now() + timeout;
        loop {
            if is_fuse_mounted(&canon) {
                return Ok(Daemon {
                    child: Some(child),
                    dir: dir.to_path_buf(),
                    _turn: turn,
                });
            }
            if let Some(status) = child.try_wait().unwrap() {
                let stderr = stderr_of(&mut child);
                return Err(Exited { status, stderr });
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("jbdfs neither mounted {} nor exited", dir.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits up to `timeout` for the daemon to exit by itself.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<Exited> {
        let deadline = Instant::now() + timeout;
        let child = self.child.as_mut()?;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let stderr = stderr_of(child);
                self.child = None;
                lazy_umount(&self.dir);
                return Some(Exited { status, stderr });
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// [`Daemon::stop`], panicking unless the daemon exited with success.
    pub fn stop_ok(self) {
        let e = self.stop();
        assert!(
            e.status.success(),
            "jbdfs exited {:?}: {}",
            e.status,
            e.stderr
        );
    }

    /// Unmounts and waits for the daemon to write back and exit.
    pub fn stop(mut self) -> Exited {
        // Busy while a child another test forks still holds this test's
        // descriptors (until it execs): retried, as umount_retrying says.
        if is_mount_point(&self.dir) {
            umount_retrying(&self.dir);
        }
        match self.wait_exit(Duration::from_secs(60)) {
            Some(e) => e,
            None => panic!("jbdfs did not exit after umount of {}", self.dir.display()),
        }
    }
}

/// Unmounts `dir`, retrying for up to 10 s while it is busy: a child
/// that another test of the binary forks inherits, until it execs, the
/// descriptors this test has open on the mount. Panics if it stays
/// mounted.
pub fn umount_retrying(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = Command::new("umount")
            .arg(dir)
            .output()
            .expect("run umount");
        if out.status.success() {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "umount {} failed: {}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether `dir` is a mount point now (a daemon that has exited on its
/// own, or was killed and detached, leaves none).
fn is_mount_point(dir: &Path) -> bool {
    Command::new("mountpoint")
        .arg("-q")
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success())
}

/// Detaches the mount on its directory when dropped, if it is still
/// there: a test that panics must not leave a mount behind (a dead
/// daemon's would answer ENOTCONN until someone unmounts it).
pub struct UnmountOnDrop(pub PathBuf);

impl Drop for UnmountOnDrop {
    fn drop(&mut self) {
        if let Ok(canon) = std::fs::canonicalize(&self.0) {
            if is_fuse_mounted(&canon) {
                lazy_umount(&self.0);
            }
        }
    }
}

/// Detaches a mount that may already be gone (a daemon that exited).
fn lazy_umount(dir: &Path) {
    let _ = Command::new("umount")
        .arg("-l")
        .arg(dir)
        .stderr(Stdio::null())
        .status();
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            lazy_umount(&self.dir);
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
