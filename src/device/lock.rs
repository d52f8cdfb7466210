//! The lock that keeps two programs from using one image file at once: two
//! daemons on the same image would both write its journal. Block devices
//! have O_EXCL for this; an image file has nothing, so every opener takes
//! an open-file-description (OFD) lock on the whole file, and a conflict
//! is reported with who holds it.
//!
//! OFD locks belong to the open file, not the process: they are not lost
//! when another descriptor of the same file is closed (as POSIX locks
//! would be), and they conflict inside one process too, so a test serving
//! an image in-process sees the same refusals as separate programs.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// Shared (readers) or exclusive (a writer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockKind {
    Read,
    Write,
}

impl LockKind {
    fn l_type(self) -> libc::c_short {
        match self {
            LockKind::Read => libc::F_RDLCK as libc::c_short,
            LockKind::Write => libc::F_WRLCK as libc::c_short,
        }
    }
}

fn whole_file(l_type: libc::c_short) -> libc::flock {
    libc::flock {
        l_type,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        // OFD locks require l_pid to be zero.
        l_pid: 0,
    }
}

/// Takes a lock of `kind` on the whole of `file`, without waiting. False
/// when another open file holds a conflicting lock. A write lock needs a
/// file opened for writing.
pub fn try_lock(file: &File, kind: LockKind) -> io::Result<bool> {
    let mut fl = whole_file(kind.l_type());
    loop {
        // SAFETY: fcntl(F_OFD_SETLK) reads one valid flock struct; the
        // descriptor is owned by `file`, which outlives the call.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &mut fl) };
        if rc == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) | Some(libc::EACCES) => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// Whether taking a lock of `kind` on `file` would conflict with a lock
/// held through another open file, without taking it.
pub fn conflicts(file: &File, kind: LockKind) -> io::Result<bool> {
    let mut fl = whole_file(kind.l_type());
    // SAFETY: fcntl(F_OFD_GETLK) reads and overwrites one valid, owned
    // flock struct; the descriptor is owned by `file`.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fl.l_type != libc::F_UNLCK as libc::c_short)
}

/// Who holds a lock on an image, as far as /proc tells.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holder {
    pub pid: Option<u32>,
    /// The holder's command name (/proc/PID/comm).
    pub command: Option<String>,
    /// Where the image is mounted, when it is.
    pub mountpoint: Option<PathBuf>,
}

/// The error of an open refused because another program holds the image:
/// carried inside an `io::Error` of kind `ResourceBusy` (see [`in_use`]).
#[derive(Clone, Debug)]
pub struct InUse {
    pub path: PathBuf,
    pub holder: Holder,
}

impl fmt::Display for InUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is in use", self.path.display())?;
        match (&self.holder.command, self.holder.pid) {
            (Some(c), Some(p)) => write!(f, " by {c} (pid {p})")?,
            (None, Some(p)) => write!(f, " by pid {p}")?,
            _ => {}
        }
        if let Some(m) = &self.holder.mountpoint {
            write!(f, ", mounted on {}", m.display())?;
        }
        Ok(())
    }
}

impl std::error::Error for InUse {}

/// The [`InUse`] inside an error from opening a device, if that is why
/// the open failed.
pub fn in_use(e: &io::Error) -> Option<&InUse> {
    e.get_ref()?.downcast_ref::<InUse>()
}

/// The error for `path` (open as `file`) being locked by someone else.
pub fn in_use_error(path: &Path, file: &File) -> io::Error {
    let busy = InUse {
        path: path.to_path_buf(),
        holder: find_holder(path, file),
    };
    io::Error::new(io::ErrorKind::ResourceBusy, busy)
}

/// The holder of a lock on `file`: the process whose descriptor shows a
/// lock on its inode in /proc/PID/fdinfo (F_OFD_GETLK reports pid -1 for
/// OFD locks), and where `path` is mounted.
pub fn find_holder(path: &Path, file: &File) -> Holder {
    let mut holder = holder_other_than(file, None);
    holder.mountpoint = mount_point_of(path);
    holder
}

/// The error for a process that holds a shared lock on `file` and cannot
/// make it exclusive: it names the other holder, not this process (nor
/// this process's mount).
pub fn shared_with_error(path: &Path, file: &File) -> io::Error {
    let busy = InUse {
        path: path.to_path_buf(),
        holder: holder_other_than(file, Some(std::process::id())),
    };
    io::Error::new(io::ErrorKind::ResourceBusy, busy)
}

/// The first process holding a lock on `file`'s inode, other than `except`.
fn holder_other_than(file: &File, except: Option<u32>) -> Holder {
    let pid = file.metadata().ok().and_then(|m| {
        let dev = m.dev();
        let key = format!("{:02x}:{:02x}:{}", major(dev), minor(dev), m.ino());
        lock_holder_pid(&key, except)
    });
    let command = pid.and_then(|p| {
        std::fs::read_to_string(format!("/proc/{p}/comm"))
            .ok()
            .map(|c| c.trim_end().to_string())
    });
    Holder {
        pid,
        command,
        mountpoint: None,
    }
}

/// glibc's gnu_dev_major / gnu_dev_minor, as /proc prints device numbers.
fn major(dev: u64) -> u64 {
    ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff)
}

fn minor(dev: u64) -> u64 {
    (dev & 0xff) | ((dev >> 12) & !0xff)
}

/// The first process with a descriptor whose fdinfo lists a lock on the
/// inode `key` (MAJ:MIN:INO, as /proc/locks prints it). fdinfo shows only
/// the locks of that open file, so readers of the same image that hold
/// no lock are not mistaken for the holder.
fn lock_holder_pid(key: &str, except: Option<u32>) -> Option<u32> {
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    pids.into_iter()
        .filter(|pid| Some(*pid) != except)
        .find(|pid| holds_lock(&format!("/proc/{pid}/fdinfo"), key))
}

fn holds_lock(fdinfo_dir: &str, key: &str) -> bool {
    let Ok(dir) = std::fs::read_dir(fdinfo_dir) else {
        return false;
    };
    dir.filter_map(Result::ok).any(|e| {
        std::fs::read_to_string(e.path()).is_ok_and(|text| {
            text.lines()
                .filter(|l| l.starts_with("lock:"))
                .any(|l| l.split_whitespace().any(|w| w == key))
        })
    })
}

/// Where `source` is mounted as a FUSE filesystem, from
/// /proc/self/mountinfo (whose source field is the image's path).
pub fn mount_point_of(source: &Path) -> Option<PathBuf> {
    let canon = std::fs::canonicalize(source).ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    find_mount(&info, &canon)
}

fn find_mount(mountinfo: &str, canon: &Path) -> Option<PathBuf> {
    mountinfo.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let sep = f.iter().position(|&x| x == "-")?;
        let fstype = f.get(sep + 1)?;
        let src = unescape(f.get(sep + 2)?);
        if !(*fstype == "fuse" || fstype.starts_with("fuse.")) {
            return None;
        }
        let same =
            Path::new(&src) == canon || std::fs::canonicalize(&src).is_ok_and(|s| s == canon);
        let target = f.get(4)?;
        same.then(|| PathBuf::from(unescape(target)))
    })
}

/// Undoes the kernel's octal escapes (`\040` for a space) in mountinfo.
pub fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = b[i + 1..i + 4]
                .iter()
                .fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'));
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_file(tag: &str) -> (PathBuf, File) {
        let path = std::env::temp_dir().join(format!(
            "jbdfs-lock-{tag}-{}-{}",
            std::process::id(),
            crate::util::unique_suffix()
        ));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        (path, f)
    }

    fn reopen(path: &Path, write: bool) -> File {
        std::fs::OpenOptions::new()
            .read(true)
            .write(write)
            .open(path)
            .unwrap()
    }

    #[test]
    fn write_lock_excludes_every_other_open_file() {
        let (path, a) = temp_file("excl");
        assert!(try_lock(&a, LockKind::Write).unwrap());
        let b = reopen(&path, true);
        assert!(!try_lock(&b, LockKind::Write).unwrap());
        assert!(!try_lock(&b, LockKind::Read).unwrap());
        assert!(conflicts(&b, LockKind::Read).unwrap());
        // The holder is this very process, found through its fdinfo.
        let h = find_holder(&path, &b);
        assert_eq!(h.pid, Some(std::process::id()), "{h:?}");
        assert!(h.mountpoint.is_none());
        drop(a);
        assert!(!conflicts(&b, LockKind::Write).unwrap());
        assert!(try_lock(&b, LockKind::Write).unwrap());
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn read_locks_share() {
        let (path, a) = temp_file("shared");
        let a_ro = reopen(&path, false);
        drop(a);
        let b = reopen(&path, false);
        assert!(try_lock(&a_ro, LockKind::Read).unwrap());
        assert!(try_lock(&b, LockKind::Read).unwrap());
        let w = reopen(&path, true);
        assert!(!try_lock(&w, LockKind::Write).unwrap());
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn in_use_names_the_holder() {
        let busy = InUse {
            path: "/img".into(),
            holder: Holder {
                pid: Some(42),
                command: Some("jbdfs".into()),
                mountpoint: Some("/mnt/a b".into()),
            },
        };
        assert_eq!(
            busy.to_string(),
            "/img is in use by jbdfs (pid 42), mounted on /mnt/a b"
        );
        let e = io::Error::new(io::ErrorKind::ResourceBusy, busy);
        assert_eq!(in_use(&e).unwrap().holder.pid, Some(42));
        assert!(in_use(&io::Error::other("x")).is_none());
    }

    #[test]
    fn mountinfo_source_matches_and_unescapes() {
        let info = "\
22 1 0:21 / /proc rw - proc proc rw
45 27 0:40 / /mnt/with\\040space rw,nosuid - fuse.jbdfs /img/a rw,user_id=0
46 27 0:41 / /mnt/other rw - ext4 /img/b rw
";
        assert_eq!(
            find_mount(info, Path::new("/img/a")),
            Some(PathBuf::from("/mnt/with space"))
        );
        assert_eq!(find_mount(info, Path::new("/img/b")), None, "not FUSE");
        assert_eq!(unescape("a\\011b\\134"), "a\tb\\");
    }

    #[test]
    fn device_numbers_split_as_glibc_does() {
        assert_eq!((major(0xfe00), minor(0xfe00)), (0xfe, 0));
        assert_eq!((major(0x0010_0305), minor(0x0010_0305)), (3, 0x100 | 5));
    }
}
