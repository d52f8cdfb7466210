//! Scratch files and directories that remove themselves.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

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
        Self::new_in(&std::env::temp_dir(), tag)
    }

    /// A new directory in `dir` ([`scratch_dir`] for big sparse images).
    pub fn new_in(dir: &Path, tag: &str) -> Self {
        let path = dir.join(unique_name(tag, ".d"));
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir { path }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
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

/// Where the shared file `name` (e.g. `e2fsprogs/e2fsprogs-tests-....tar.gz`)
/// is, as scripts/lib.sh's `shared_file` finds it: `../shared/NAME` beside
/// the checkout (the project's machines and CI), else /work/shared/NAME.
/// It may not exist.
pub fn shared_file(name: &str) -> PathBuf {
    let beside = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared")
        .join(name);
    if beside.is_file() {
        beside
    } else {
        Path::new("/work/shared").join(name)
    }
}
