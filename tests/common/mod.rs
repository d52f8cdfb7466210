//! Helpers shared by the integration tests that compare jbdfs with
//! e2fsprogs: running commands, temporary images that clean up after
//! themselves, loop mounts that always unmount, and parsers for
//! `dumpe2fs` and `debugfs` output.
//!
//! Each test binary uses a different subset, hence the `dead_code` allowance.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// The captured result of a command.
#[derive(Debug)]
pub struct Out {
    /// The exit code; `None` when killed by a signal (or not started).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// The command line, for messages.
    pub cmdline: String,
}

impl Out {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// Everything the command printed, with its command line and status,
    /// for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "$ {}\nexit: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.cmdline, self.code, self.stdout, self.stderr
        )
    }

    /// Panics with the full output unless the command exited 0.
    pub fn expect_ok(self) -> Self {
        assert!(self.success(), "command failed:\n{}", self.describe());
        self
    }
}

/// Runs `prog` with `args` in the C locale and captures its output. A
/// command that cannot be started gives `code: None` and the error in
/// `stderr`.
pub fn run<I, S>(prog: &str, args: I) -> Out
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(|a| a.as_ref().into()).collect();
    let cmdline = std::iter::once(prog.to_string())
        .chain(args.iter().map(|a| a.to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join(" ");
    match Command::new(prog)
        .args(&args)
        .env("LC_ALL", "C")
        .env("LANG", "C")
        .env("TZ", "UTC")
        .output()
    {
        Ok(o) => Out {
            code: o.status.code(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
            cmdline,
        },
        Err(e) => Out {
            code: None,
            stdout: String::new(),
            stderr: format!("cannot run {prog}: {e}"),
            cmdline,
        },
    }
}

/// Where test images go: /dev/shm when it exists (sparse files on tmpfs
/// cost only what is written), the system temporary directory otherwise.
pub fn scratch_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// A name unique to this process and call.
pub fn unique_name(tag: &str, ext: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("jbdfs-test-{}-{tag}-{n}-{nanos:x}{ext}", std::process::id())
}

/// A path for an image that is removed when the guard drops, whether the
/// test passed or panicked. The file is not created.
pub struct TempImage {
    pub path: PathBuf,
}

impl TempImage {
    pub fn new(tag: &str) -> Self {
        Self::new_in(&scratch_dir(), tag)
    }

    pub fn new_in(dir: &Path, tag: &str) -> Self {
        TempImage {
            path: dir.join(unique_name(tag, ".img")),
        }
    }

    /// A sparse file of `size` bytes (all holes).
    pub fn sparse(tag: &str, size: u64) -> Self {
        let img = Self::new(tag);
        let f = std::fs::File::create(&img.path).expect("create sparse image");
        f.set_len(size).expect("size sparse image");
        img
    }

    pub fn path_str(&self) -> &str {
        self.path.to_str().expect("utf-8 temp path")
    }
}

impl Drop for TempImage {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A temporary directory removed (with its contents) on drop.
pub struct TempDir {
    pub path: PathBuf,
}

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let path = std::env::temp_dir().join(unique_name(tag, ".d"));
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir { path }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Whether this process runs as root, from /proc/self/status.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// `Ok` when loop mounts can work here, or the reason they cannot.
pub fn loop_mounts_available() -> Result<(), String> {
    if !is_root() {
        return Err("not running as root".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Err("/dev/loop-control does not exist".into());
    }
    let o = run("losetup", ["-f"]);
    if !o.success() {
        return Err(format!("`losetup -f` failed: {}", o.stderr.trim()));
    }
    Ok(())
}

/// Serialises loop mounts within a test binary: concurrent loop device
/// allocation is a source of spurious failures.
pub static LOOP_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// An ext3 loop mount of an image, unmounted on drop. Declare it after the
/// image guard so that it drops first.
pub struct LoopMount {
    pub dir: TempDir,
    mounted: bool,
}

impl LoopMount {
    pub fn mount(image: &Path) -> Result<Self, Out> {
        Self::mount_with(image, "loop")
    }

    /// A mount with these `-o` options (`loop,ro`, ...).
    pub fn mount_with(image: &Path, options: &str) -> Result<Self, Out> {
        let dir = TempDir::new("mnt");
        let o = run(
            "mount",
            [
                OsStr::new("-o"),
                OsStr::new(options),
                OsStr::new("-t"),
                OsStr::new("ext3"),
                image.as_os_str(),
                dir.path.as_os_str(),
            ],
        );
        if !o.success() {
            return Err(o);
        }
        Ok(LoopMount { dir, mounted: true })
    }

    pub fn path(&self) -> &Path {
        &self.dir.path
    }

    /// Unmounts now, reporting failure. "Target is busy" is retried for a
    /// few seconds: on a shared machine another process (a scanner, a
    /// sibling test walking /tmp) may hold the tree for a moment.
    pub fn umount(&mut self) -> Out {
        let mut tries = 0;
        loop {
            let o = run("umount", [self.dir.path.as_os_str()]);
            if o.success() {
                self.mounted = false;
                return o;
            }
            tries += 1;
            if tries >= 30 || !o.stderr.contains("busy") {
                return o;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        if self.mounted {
            let o = self.umount();
            if !o.success() {
                eprintln!("umount failed, detaching lazily:\n{}", o.describe());
                let _ = run("umount", [OsStr::new("-l"), self.dir.path.as_os_str()]);
            }
        }
    }
}

/// Runs `e2fsck -fn` on an image.
pub fn e2fsck(image: &Path) -> Out {
    run("e2fsck", [OsStr::new("-fn"), image.as_os_str()])
}

/// Panics with e2fsck's output unless `e2fsck -fn` exits 0.
pub fn assert_e2fsck_clean(image: &Path, what: &str) {
    let o = e2fsck(image);
    assert!(
        o.success(),
        "e2fsck -fn found problems in {what}:\n{}",
        o.describe()
    );
}

/// `key: value` lines of a dumpe2fs header, in order.
#[derive(Clone, Debug, Default)]
pub struct Header {
    pub lines: Vec<(String, String)>,
}

impl Header {
    pub fn parse(text: &str) -> Self {
        let mut lines = Vec::new();
        for line in text.lines() {
            if line.starts_with("Group ") {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                let k = k.trim();
                if k.is_empty() || k.starts_with("dumpe2fs ") {
                    continue;
                }
                lines.push((k.to_string(), v.trim().to_string()));
            }
        }
        Header { lines }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.lines
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `key`, panicking (with the whole header) when absent.
    pub fn field(&self, key: &str) -> &str {
        self.get(key)
            .unwrap_or_else(|| panic!("dumpe2fs has no '{key}' line; header:\n{self:#?}"))
    }

    /// The leading number of `key`'s value.
    pub fn num(&self, key: &str) -> u64 {
        let v = self.field(key);
        let digits: String = v
            .trim_start_matches('-')
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        digits
            .parse()
            .unwrap_or_else(|_| panic!("'{key}: {v}' is not a number"))
    }

    pub fn features(&self) -> std::collections::BTreeSet<String> {
        self.field("Filesystem features")
            .split_whitespace()
            .map(str::to_string)
            .collect()
    }

    /// "Total journal size" in bytes (dumpe2fs prints e.g. `4096k`, `16M`).
    pub fn journal_bytes(&self) -> u64 {
        let v = self.field("Total journal size");
        let (n, unit) = v.split_at(v.len() - 1);
        let n: u64 = n.parse().unwrap_or_else(|_| panic!("journal size '{v}'"));
        match unit {
            "k" | "K" => n << 10,
            "M" => n << 20,
            "G" => n << 30,
            _ => panic!("journal size '{v}' has an unknown unit"),
        }
    }
}

/// `dumpe2fs -h` of an image, parsed; panics when dumpe2fs fails.
pub fn dumpe2fs_header(image: &Path) -> Header {
    let o = run("dumpe2fs", [OsStr::new("-h"), image.as_os_str()]).expect_ok();
    Header::parse(&o.stdout)
}

/// One group's lines of a full `dumpe2fs`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DumpGroup {
    pub group: u32,
    pub block_bitmap: u32,
    pub inode_bitmap: u32,
    pub inode_table: (u32, u32),
    pub free_blocks: u32,
    pub free_inodes: u32,
    pub directories: u32,
}

fn first_number(s: &str) -> Option<u32> {
    let d: String = s
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    d.parse().ok()
}

/// Parses the group sections of a full `dumpe2fs`.
pub fn parse_groups(text: &str) -> Vec<DumpGroup> {
    let mut groups: Vec<DumpGroup> = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if let Some(rest) = line.strip_prefix("Group ") {
            let n = first_number(rest).expect("group number");
            groups.push(DumpGroup {
                group: n,
                ..Default::default()
            });
            continue;
        }
        let Some(g) = groups.last_mut() else { continue };
        if let Some(rest) = t.strip_prefix("Block bitmap at ") {
            g.block_bitmap = first_number(rest).expect("block bitmap");
        } else if let Some(rest) = t.strip_prefix("Inode bitmap at ") {
            g.inode_bitmap = first_number(rest).expect("inode bitmap");
        } else if let Some(rest) = t.strip_prefix("Inode table at ") {
            let range = rest.split_whitespace().next().unwrap_or("");
            let (a, b) = range.split_once('-').unwrap_or((range, range));
            g.inode_table = (a.parse().expect("itable"), b.parse().expect("itable end"));
        } else if t.contains(" free blocks, ") {
            for part in t.split(',') {
                let n = first_number(part).unwrap_or(0);
                if part.contains("free blocks") {
                    g.free_blocks = n;
                } else if part.contains("free inodes") {
                    g.free_inodes = n;
                } else if part.contains("directories") {
                    g.directories = n;
                }
            }
        }
    }
    groups
}

/// Full `dumpe2fs` of an image, groups parsed.
pub fn dumpe2fs_groups(image: &Path) -> Vec<DumpGroup> {
    let o = run("dumpe2fs", [image.as_os_str()]).expect_ok();
    parse_groups(&o.stdout)
}

/// Runs one debugfs request (`-R`) read-only.
pub fn debugfs(image: &Path, request: &str) -> Out {
    run(
        "debugfs",
        [OsStr::new("-R"), OsStr::new(request), image.as_os_str()],
    )
}

/// Key/value pairs from `debugfs -R "stat ..."`: the lines hold several
/// `Key: value` pairs separated by runs of spaces.
pub fn parse_stat(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let t = line.trim();
        // Time lines: "ctime: 0x6b1032d4:00000000 -- Wed Dec  2 ...".
        for time in ["ctime", "atime", "mtime", "crtime", "dtime"] {
            if let Some(rest) = t.strip_prefix(&format!("{time}: ")) {
                let v = rest.split(" -- ").next().unwrap_or("").trim();
                out.insert(time.to_string(), v.to_string());
            }
        }
        if let Some(rest) = t.strip_prefix("Fast link dest: ") {
            out.insert("Fast link dest".into(), rest.trim_matches('"').to_string());
            continue;
        }
        if let Some(rest) = t.strip_prefix("Size of extra inode fields: ") {
            out.insert("Size of extra inode fields".into(), rest.to_string());
            continue;
        }
        // Split into tokens; a token ending in ':' starts a key whose value
        // is the next token.
        let tokens: Vec<&str> = t.split_whitespace().collect();
        let mut i = 0;
        while i < tokens.len() {
            let tok = tokens[i];
            if let Some(key) = tok.strip_suffix(':') {
                if let Some(v) = tokens.get(i + 1) {
                    if !v.ends_with(':') {
                        out.entry(key.to_string()).or_insert_with(|| v.to_string());
                        i += 2;
                        continue;
                    }
                }
            }
            i += 1;
        }
    }
    out
}

/// A debugfs time "0x5e0c89c0" or "0x6b1032d4:00000000" as (seconds,
/// nanoseconds), decoded as the kernel does (extra epoch bits included).
pub fn parse_debugfs_time(v: &str) -> (i64, u32) {
    let v = v.trim_start_matches("0x");
    let (lo, extra) = match v.split_once(':') {
        Some((a, b)) => (a, Some(b)),
        None => (v, None),
    };
    let lo = u32::from_str_radix(lo, 16).unwrap_or_else(|_| panic!("time '{v}'"));
    let sec = lo as i32 as i64;
    match extra {
        None => (sec, 0),
        Some(x) => {
            let x = u32::from_str_radix(x, 16).unwrap_or_else(|_| panic!("time '{v}'"));
            (sec + (((x & 3) as i64) << 32), x >> 2)
        }
    }
}

/// The numbers printed by `debugfs -R "blocks <N>"`.
pub fn debugfs_blocks(image: &Path, ino: u32) -> Vec<u32> {
    let o = debugfs(image, &format!("blocks <{ino}>")).expect_ok();
    o.stdout
        .split_whitespace()
        .map(|t| t.parse().unwrap_or_else(|_| panic!("block '{t}'")))
        .collect()
}

/// Reads `len` bytes at `offset` of a file.
pub fn read_bytes(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path).expect("open image");
    let mut buf = vec![0u8; len];
    f.read_exact_at(&mut buf, offset).expect("read image");
    buf
}

/// Writes `data` at `offset` of a file.
pub fn write_bytes(path: &Path, offset: u64, data: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open image for writing");
    f.write_all_at(data, offset).expect("write image");
}

/// A new image file made by jbdfs's mkfs with `options`, removed on drop.
pub fn jbdfs_image_with(tag: &str, options: jbdfs::mkfs::MkfsOptions, size: u64) -> TempImage {
    let img = TempImage::new(tag);
    let req = jbdfs::mkfs::Request {
        options,
        size: Some(size),
        quiet: true,
        ..Default::default()
    };
    jbdfs::mkfs::make_filesystem(&img.path, &req).expect("mkfs");
    img
}
