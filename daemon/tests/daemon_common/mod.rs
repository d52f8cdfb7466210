//! The real jbdfs daemon as a child process (`jbdfs -f IMAGE DIR -o ...`),
//! for robustness tests that must go through the kernel: started with a
//! timeout, stopped by unmounting, its exit status and stderr kept.
#![allow(dead_code)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Why FUSE tests cannot run here, if they cannot.
pub fn cannot_fuse() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse".into());
    }
    if !crate::common::is_root() {
        return Some("not root".into());
    }
    None
}

pub struct Daemon {
    child: Option<Child>,
    pub dir: PathBuf,
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
    /// Starts the daemon in the foreground; returns once the mount is up,
    /// or how the daemon exited. Panics if neither happens in `timeout`.
    pub fn start(
        image: &Path,
        dir: &Path,
        opts: &str,
        timeout: Duration,
    ) -> Result<Daemon, Exited> {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_jbdfs"));
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
            if jbdfs_daemon::daemon::is_mounted(&canon) {
                return Ok(Daemon {
                    child: Some(child),
                    dir: dir.to_path_buf(),
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

    /// Unmounts and waits for the daemon to write back and exit.
    pub fn stop(mut self) -> Exited {
        let _ = Command::new("umount").arg(&self.dir).status();
        match self.wait_exit(Duration::from_secs(60)) {
            Some(e) => e,
            None => panic!("jbdfs did not exit after umount of {}", self.dir.display()),
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
