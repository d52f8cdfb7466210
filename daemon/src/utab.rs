//! The daemon's line in libmount's utab (/run/mount/utab), which is what
//! makes `umount DIR` wait for the daemon. When root unmounts a target
//! with no utab line, libmount skips the mount table and takes the type
//! from statfs(2), which says only "fuse"; umount.fuse.jbdfs is never run
//! and umount returns while the daemon is still writing the image back.
//! With a line, libmount reads the type from mountinfo (fuse.jbdfs) and
//! runs the helper, which finds the daemon's pid in the line's options.

use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// The userspace mount option carrying the daemon's pid.
pub const PID_OPTION: &str = "x-jbdfs.pid";

/// Where libmount keeps utab; LIBMOUNT_UTAB overrides it, as it does for
/// libmount itself.
pub fn utab_path() -> PathBuf {
    std::env::var_os("LIBMOUNT_UTAB")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/run/mount/utab"))
}

/// This daemon's utab line, removed when dropped.
#[derive(Debug)]
pub struct UtabEntry {
    utab: PathBuf,
    target: String,
    pid: u32,
}

impl UtabEntry {
    /// Adds `SRC=source TARGET=target ROOT=/ OPTS=x-jbdfs.pid=PID`, both
    /// paths canonical (libmount matches them against mountinfo), after
    /// dropping the lines of daemons killed before they could remove theirs.
    pub fn add(utab: &Path, source: &Path, target: &Path) -> io::Result<UtabEntry> {
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let entry = UtabEntry {
            utab: utab.to_path_buf(),
            target: mangle(&canon(target).to_string_lossy()),
            pid: std::process::id(),
        };
        let line = format!(
            "SRC={} TARGET={} ROOT=/ OPTS={}={}",
            mangle(&canon(source).to_string_lossy()),
            entry.target,
            PID_OPTION,
            entry.pid
        );
        update(utab, |lines| {
            lines.retain(|l| match pid_of(l) {
                Some(p) if p == entry.pid => field(l, "TARGET") != Some(&entry.target),
                Some(p) => process_exists(p),
                None => true,
            });
            lines.push(line.clone());
        })?;
        Ok(entry)
    }
}

impl Drop for UtabEntry {
    fn drop(&mut self) {
        // umount(8) has usually removed the line already; only ours goes,
        // never a line a newer daemon on the same target wrote.
        let res = update(&self.utab, |lines| {
            lines.retain(|l| {
                !(field(l, "TARGET") == Some(&self.target) && pid_of(l) == Some(self.pid))
            })
        });
        if let Err(e) = res {
            tracing::debug!(utab = %self.utab.display(), "cannot remove the utab line: {e}");
        }
    }
}

/// The value of `KEY=` in a utab line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split(' ')
        .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))
}

/// The daemon pid a utab line names, if it is one of ours.
pub fn pid_of(line: &str) -> Option<u32> {
    field(line, "OPTS")?
        .split(',')
        .find_map(|o| o.strip_prefix(PID_OPTION)?.strip_prefix('=')?.parse().ok())
}

fn process_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Rewrites utab through `edit` under libmount's lock: flock on
/// `utab.lock`, a new file renamed over the old, as libmount does, so a
/// reader never sees half a table.
fn update(utab: &Path, edit: impl FnOnce(&mut Vec<String>)) -> io::Result<()> {
    let dir = utab.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir)?;
    let mut lock_name = utab.as_os_str().to_owned();
    lock_name.push(".lock");
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(&lock_name)?;
    loop {
        // SAFETY: flock only takes the descriptor, owned by `lock`, which
        // outlives the call; closing it releases the lock.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } == 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    let old = match std::fs::read_to_string(utab) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    let mut lines: Vec<String> = old
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    let before = lines.clone();
    edit(&mut lines);
    if lines == before {
        return Ok(());
    }
    let mut tmp_name = utab.as_os_str().to_owned();
    tmp_name.push(format!(".jbdfs-{}", std::process::id()));
    let tmp = PathBuf::from(tmp_name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(&tmp)?;
    let mut text = lines.join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    let written = f
        .write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .and_then(|()| std::fs::rename(&tmp, utab));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    drop(lock);
    written
}

/// libmount's mangle(): space, tab, newline and backslash as octal escapes.
pub fn mangle(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            ' ' | '\t' | '\n' | '\\' => out.push_str(&format!("\\{:03o}", c as u32)),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "jbdfs-utab-{}-{}",
            std::process::id(),
            jbdfs::util::unique_suffix()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_line_is_added_and_only_ours_is_removed() {
        let d = temp_dir();
        let utab = d.join("utab");
        let other = "SRC=/dev/sda1 TARGET=/boot ROOT=/ OPTS=x-systemd.automount";
        // A line for this target from a daemon that is long gone.
        let stale = format!(
            "SRC=/x TARGET={} ROOT=/ OPTS={PID_OPTION}={}",
            mangle(&d.join("mnt dir").to_string_lossy()),
            u32::MAX - 1
        );
        std::fs::write(&utab, format!("{other}\n{stale}\n")).unwrap();
        std::fs::create_dir_all(d.join("mnt dir")).unwrap();
        let e = UtabEntry::add(&utab, &d.join("img"), &d.join("mnt dir")).unwrap();
        let text = std::fs::read_to_string(&utab).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0], other);
        assert!(lines[1].contains("\\040dir ROOT=/ OPTS="), "{text}");
        assert_eq!(pid_of(lines[1]), Some(std::process::id()));
        // A newer daemon's line on the same target survives our exit.
        let newer = format!("SRC=/y TARGET={} ROOT=/ OPTS={PID_OPTION}=1", e.target);
        std::fs::write(&utab, format!("{text}{newer}\n")).unwrap();
        drop(e);
        let text = std::fs::read_to_string(&utab).unwrap();
        assert_eq!(text, format!("{other}\n{newer}\n"));
        assert!(d.join("utab.lock").exists());
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn mangling_matches_libmount() {
        assert_eq!(mangle("/a b\\c\td"), "/a\\040b\\134c\\011d");
        assert_eq!(field("SRC=a TARGET=b OPTS=c", "TARGET"), Some("b"));
        assert_eq!(pid_of("SRC=a OPTS=ro,x-jbdfs.pid=77"), Some(77));
        assert_eq!(pid_of("SRC=a OPTS=x-jbdfs.pidx=77"), None);
    }
}
