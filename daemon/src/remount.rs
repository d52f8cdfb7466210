//! `mount -o remount,ro|rw DIR` for a fuse.jbdfs mount.
//!
//! The kernel does not tell a FUSE daemon about a remount, and mount(8)
//! hands `-o remount` to the mount helper (mount.fuse3 runs `jbdfs SOURCE
//! DIR -o remount,...`), which must not start a second daemon. So that
//! invocation asks the daemon serving DIR to change (a request file beside
//! its pid file, then SIGUSR2), waits for its answer, and makes the
//! kernel's remount(2) itself:
//! - read-only: the kernel first (it writes dirty pages back and refuses
//!   new writes), then the daemon (commit, checkpoint, needs_recovery
//!   cleared: the image is clean while mounted, as ext3's remount,ro);
//! - read-write: the daemon first, then the kernel.
//!
//! Besides the state and the per-mount flags (nosuid, nodev, noexec), a
//! remount changes what ext3_remount lets change: commit=, barrier,
//! errors=, the batching options (bdelay=, hz=, min/max_batch_time=) and
//! the atime options, which the daemon applies itself. The daemon checks
//! them all before it changes anything. What is fixed while mounted
//! (data=, the cache, the transport, record=...) is refused by name.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use jbdfs::fs::Filesystem;

use crate::daemon::{pid_file_path, RemountContext};
use crate::options::{MountOptions, ATIME_WORDS, REMOUNT_TUNABLE};
use jbdfs::device::WriterClaim;

/// How long the helper waits for the daemon's answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// The request file of the daemon serving `mountpoint`: one line, `ro` or
/// `rw`. The daemon answers in [`answer_path`] and removes the request.
pub fn request_path(mountpoint: &Path) -> Option<PathBuf> {
    Some(pid_file_path(mountpoint)?.with_extension("remount"))
}

/// The daemon's answer: `ok`, or the reason it refused.
pub fn answer_path(mountpoint: &Path) -> Option<PathBuf> {
    Some(pid_file_path(mountpoint)?.with_extension("remount-done"))
}

/// jbdfs's own options that stay as mounted: a remount may repeat them
/// (fstab and fstests give the mount's whole option list again), and the
/// daemon, which knows what it was mounted with, refuses any that would
/// change.
const FIXED: &[&str] = &[
    "data",
    "acl",
    "noacl",
    "noload",
    "norecovery",
    "cache_size",
    "threads",
    "direct",
    "direct_io",
    "io_uring",
    "noio_uring",
    "io_uring_q_depth",
    "io_uring_poll_us",
    "record",
    "devsim",
    "stats",
    "max_map",
    "nbd_timeout",
    "nbd_connections",
    "tls-certificates",
    "tls-psk-file",
    "tls-username",
    "tls-hostname",
];

/// The words of `fixed` that would change what `mounted` says.
fn fixed_changes(fixed: &[&str], mounted: &MountOptions) -> anyhow::Result<Vec<String>> {
    let mut changed = Vec::new();
    for word in fixed {
        let mut probe = mounted.clone();
        probe.apply_word(word)?;
        if probe != *mounted {
            changed.push(word.to_string());
        }
    }
    Ok(changed)
}

/// The words of `options` for the daemon: those a remount changes on the
/// fly and those it must find unchanged, each checked here so that a bad
/// value is refused before anything changes.
fn daemon_words(options: &[String]) -> anyhow::Result<Vec<String>> {
    let mut probe = MountOptions::default();
    let mut words = Vec::new();
    for o in options {
        let key = o.split('=').next().unwrap_or_default();
        let ours = REMOUNT_TUNABLE.contains(&key) || FIXED.contains(&key);
        if ours || ATIME_WORDS.contains(&o.as_str()) {
            probe.apply_word(o)?;
            words.push(o.clone());
        }
    }
    Ok(words)
}

/// The helper's side: asks the daemon serving `mountpoint`, and remounts
/// in the kernel. `options` are the -o words, `remount` among them.
pub fn request(mountpoint: &Path, options: &[String]) -> anyhow::Result<()> {
    let target = std::fs::canonicalize(mountpoint)
        .with_context(|| format!("{}: no such mount point", mountpoint.display()))?;
    let mount = MountEntry::find(&target)?;
    let words = daemon_words(options)?;
    let read_only = match options.iter().rev().find(|o| *o == "ro" || *o == "rw") {
        Some(o) => o == "ro",
        None => mount.read_only(),
    };
    let flags = mount.remount_flags(options, read_only);
    if read_only {
        kernel_remount(&target, flags)?;
        ask_daemon(&target, "ro", &words)
    } else {
        ask_daemon(&target, "rw", &words)?;
        kernel_remount(&target, flags)
    }
}

/// Writes the request (the state on one line, the words to change on the
/// next), signals the daemon and waits for its answer.
fn ask_daemon(target: &Path, state: &str, words: &[String]) -> anyhow::Result<()> {
    let pid = daemon_pid(target)?;
    let (Some(request), Some(answer)) = (request_path(target), answer_path(target)) else {
        bail!(
            "{}: no runtime directory to ask the daemon in",
            target.display()
        );
    };
    let _ = std::fs::remove_file(&answer);
    std::fs::write(&request, format!("{state}\n{}\n", words.join(",")))
        .with_context(|| format!("{}: cannot ask the daemon", request.display()))?;
    signal_usr2(pid)?;
    let start = Instant::now();
    while start.elapsed() < ANSWER_TIMEOUT {
        if let Ok(text) = std::fs::read_to_string(&answer) {
            let _ = std::fs::remove_file(&answer);
            let text = text.trim();
            return match text {
                "ok" => Ok(()),
                why => Err(anyhow!("{}: {why}", target.display())),
            };
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = std::fs::remove_file(&request);
    bail!(
        "{}: the jbdfs daemon (pid {pid}) did not answer the remount",
        target.display()
    )
}

fn daemon_pid(target: &Path) -> anyhow::Result<i32> {
    let path = pid_file_path(target).ok_or_else(|| {
        anyhow!(
            "{}: no pid file to find the jbdfs daemon by (no runtime directory: XDG_RUNTIME_DIR is unset)",
            target.display()
        )
    })?;
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "{}: not served by a jbdfs daemon ({} is missing)",
            target.display(),
            path.display()
        )
    })?;
    text.trim()
        .parse()
        .with_context(|| format!("{}: not a pid", path.display()))
}

fn signal_usr2(pid: i32) -> anyhow::Result<()> {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    let rc = unsafe { libc::kill(pid, libc::SIGUSR2) };
    if rc != 0 {
        bail!(
            "cannot signal the jbdfs daemon (pid {pid}): {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

fn kernel_remount(target: &Path, flags: libc::c_ulong) -> anyhow::Result<()> {
    let c_target = CString::new(target.as_os_str().as_encoded_bytes())
        .map_err(|_| anyhow!("{}: a NUL in the path", target.display()))?;
    // SAFETY: the target is a NUL-terminated string that outlives the
    // call; a remount takes no source, type or data (null is allowed).
    let rc = unsafe {
        libc::mount(
            std::ptr::null(),
            c_target.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        bail!(
            "{}: remount: {}",
            target.display(),
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// The mount on a target, from /proc/self/mountinfo.
struct MountEntry {
    mount_options: Vec<String>,
}

impl MountEntry {
    fn find(target: &Path) -> anyhow::Result<MountEntry> {
        let info = std::fs::read_to_string("/proc/self/mountinfo")?;
        let want = target.to_string_lossy();
        // The last line for a target is the mount on top.
        info.lines()
            .rev()
            .filter_map(parse_mountinfo_line)
            .find(|(t, fstype, _, _)| *t == want && fstype == "fuse.jbdfs")
            .map(|(_, _, mount_options, _)| MountEntry { mount_options })
            .ok_or_else(|| anyhow!("{want}: not a fuse.jbdfs mount"))
    }

    fn read_only(&self) -> bool {
        self.mount_options.iter().any(|o| o == "ro")
    }

    /// MS_REMOUNT with the per-mount flags kept unless `options` change
    /// them: a remount(2) sets the mount's flags to exactly those given.
    fn remount_flags(&self, options: &[String], read_only: bool) -> libc::c_ulong {
        let mut flags = libc::MS_REMOUNT;
        if read_only {
            flags |= libc::MS_RDONLY;
        }
        const PAIRS: &[(&str, &str, libc::c_ulong)] = &[
            ("nosuid", "suid", libc::MS_NOSUID),
            ("nodev", "dev", libc::MS_NODEV),
            ("noexec", "exec", libc::MS_NOEXEC),
            ("noatime", "atime", libc::MS_NOATIME),
            ("nodiratime", "diratime", libc::MS_NODIRATIME),
            ("relatime", "norelatime", libc::MS_RELATIME),
            ("strictatime", "nostrictatime", libc::MS_STRICTATIME),
        ];
        for &(on, off, bit) in PAIRS {
            let said = options.iter().rev().find(|o| *o == on || *o == off);
            let set = match said {
                Some(o) => o == on,
                None => self.mount_options.iter().any(|o| o == on),
            };
            if set {
                flags |= bit;
            }
        }
        flags
    }
}

/// (target, fstype, mount options, super options) of a mountinfo line.
fn parse_mountinfo_line(line: &str) -> Option<(String, String, Vec<String>, Vec<String>)> {
    let (left, right) = line.split_once(" - ")?;
    let l: Vec<&str> = left.split(' ').collect();
    let r: Vec<&str> = right.split(' ').collect();
    let split = |s: &str| s.split(',').map(String::from).collect();
    Some((
        unmangle(l.get(4)?),
        r.first()?.to_string(),
        split(l.get(5)?),
        split(r.get(2).unwrap_or(&"")),
    ))
}

/// mountinfo's octal escapes (\040 for a space, ...).
fn unmangle(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A read-only mount's right to become its image's one writer: the image
/// was opened for writing under the shared lock, and a remount read-write
/// takes the exclusive one first (refused while another read-only mount
/// or fsck holds the image).
pub struct ImageWriter {
    pub claim: WriterClaim,
    pub path: PathBuf,
}

/// The daemon's side, on SIGUSR2: serves a pending remount request, if
/// any. Returns whether there was one.
pub(crate) fn serve_request(fs: &Arc<Filesystem>, ctx: &RemountContext) -> bool {
    let mountpoint = &ctx.mountpoint;
    let (Some(request), Some(answer_path)) = (request_path(mountpoint), answer_path(mountpoint))
    else {
        return false;
    };
    let Ok(text) = std::fs::read_to_string(&request) else {
        return false;
    };
    let _ = std::fs::remove_file(&request);
    let answer = match remount(fs, &text, &ctx.mounted, ctx.writer.as_ref()) {
        Ok(()) => "ok".to_string(),
        Err(e) => {
            tracing::error!("remount failed: {e:#}");
            format!("remount failed: {e:#}")
        }
    };
    if let Err(e) = std::fs::write(&answer_path, format!("{answer}\n")) {
        tracing::error!("cannot answer the remount request: {e}");
    }
    true
}

/// Carries out a request: the new options are checked first, then the
/// state changes, and only if it did do the options.
fn remount(
    fs: &Filesystem,
    request: &str,
    mounted: &MountOptions,
    writer: Option<&ImageWriter>,
) -> anyhow::Result<()> {
    let mut lines = request.lines();
    let state = lines.next().unwrap_or_default().trim();
    let read_only = match state {
        "ro" => true,
        "rw" => false,
        other => bail!("unknown remount request {other:?}"),
    };
    let words: Vec<&str> = lines
        .flat_map(|l| l.split(','))
        .filter(|w| !w.is_empty())
        .collect();
    let (fixed, tunable): (Vec<&str>, Vec<&str>) = words
        .into_iter()
        .partition(|w| FIXED.contains(&w.split('=').next().unwrap_or_default()));
    let changed = fixed_changes(&fixed, mounted)?;
    if !changed.is_empty() {
        bail!(
            "remount cannot change {} while mounted (unmount and mount again)",
            changed.join(", ")
        );
    }
    let mut opts = MountOptions::from_tunables(&fs.tunables());
    for word in tunable {
        opts.apply_word(word)?;
    }
    change_state(fs, read_only, writer)?;
    fs.retune(opts.tunables());
    tracing::info!(
        read_only,
        options = MountOptions::describe_tunables(&fs.tunables()),
        "remounted"
    );
    Ok(())
}

/// Remounts the filesystem read-only or read-write, taking the image's
/// exclusive lock first when a read-only mount becomes its writer.
fn change_state(
    fs: &Filesystem,
    read_only: bool,
    writer: Option<&ImageWriter>,
) -> anyhow::Result<()> {
    let claim = writer.filter(|_| !read_only && fs.is_read_only());
    if let Some(w) = claim {
        w.claim
            .claim(&w.path)
            .map_err(|e| anyhow!("cannot write the image: {e}"))?;
    }
    let done = fs.remount(read_only);
    if let (Err(_), Some(w)) = (&done, claim) {
        if !fs.journal().is_logging() {
            w.claim.release();
        }
    }
    done.map_err(|e| match e {
        jbdfs::fs::FsError::ReadOnly => anyhow!(
            "the filesystem cannot go read-write (a read-only image or device, \
             a journal that needs recovery, or an earlier error: see the log)"
        ),
        e => e.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split(',').map(String::from).collect()
    }

    #[test]
    fn mountinfo_lines_parse_with_escapes() {
        let line = "36 35 0:40 / /mnt/a\\040b rw,nosuid,relatime shared:1 - fuse.jbdfs /img rw,user_id=0,group_id=0";
        let (t, ty, mo, so) = parse_mountinfo_line(line).unwrap();
        assert_eq!(t, "/mnt/a b");
        assert_eq!(ty, "fuse.jbdfs");
        assert_eq!(mo, words("rw,nosuid,relatime"));
        assert_eq!(so, words("rw,user_id=0,group_id=0"));
    }

    #[test]
    fn remount_keeps_per_mount_flags_unless_told() {
        let m = MountEntry {
            mount_options: words("rw,nosuid,nodev,relatime"),
        };
        let f = m.remount_flags(&words("remount,ro"), true);
        assert_eq!(
            f,
            libc::MS_REMOUNT
                | libc::MS_RDONLY
                | libc::MS_NOSUID
                | libc::MS_NODEV
                | libc::MS_RELATIME
        );
        let f = m.remount_flags(&words("remount,rw,suid"), false);
        assert_eq!(f, libc::MS_REMOUNT | libc::MS_NODEV | libc::MS_RELATIME);
    }

    #[test]
    fn a_remount_carries_jbdfs_options_and_checks_them() {
        let asked = words(
            "remount,ro,nosuid,commit=9,nobarrier,noatime,errors=continue,bdelay=jbd2,noio_uring",
        );
        assert_eq!(
            daemon_words(&asked).unwrap(),
            words("commit=9,nobarrier,noatime,errors=continue,bdelay=jbd2,noio_uring")
        );
        let e = daemon_words(&words("remount,commit=soon")).unwrap_err();
        assert!(e.to_string().contains("commit"), "{e}");
        assert!(daemon_words(&words("remount,errors=explode")).is_err());
    }

    #[test]
    fn fixed_options_may_be_repeated_but_not_changed() {
        let mounted = MountOptions::parse(&["noio_uring", "stats=/tmp/s"]).unwrap();
        // Repeated as mounted, or a default said aloud: nothing changes.
        let same = ["noio_uring", "stats=/tmp/s", "data=ordered"];
        assert!(fixed_changes(&same, &mounted).unwrap().is_empty());
        let changed =
            fixed_changes(&["data=journal", "io_uring", "stats=/tmp/s"], &mounted).unwrap();
        assert_eq!(changed, ["data=journal", "io_uring"]);
        // The rings' settings are the mount's too.
        assert!(fixed_changes(&["io_uring_poll_us=50"], &mounted)
            .unwrap()
            .is_empty());
        let changed = fixed_changes(&["io_uring_poll_us=0", "io_uring_q_depth=8"], &mounted);
        assert_eq!(changed.unwrap(), ["io_uring_poll_us=0"]);
    }

    #[test]
    fn tunables_survive_the_trip_through_options() {
        for o in [
            "commit=7,nobarrier,errors=panic,bdelay=3,hz=100,strictatime,nodiratime",
            "bdelay=jbd2,min_batch_time=10,max_batch_time=900,noatime",
            "bdelay=yield,barrier=1",
        ] {
            let parsed = MountOptions::parse(&o.split(',').collect::<Vec<_>>()).unwrap();
            let t = parsed.tunables();
            assert_eq!(MountOptions::from_tunables(&t).tunables(), t, "{o}");
        }
    }
}
