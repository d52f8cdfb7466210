// A test crate: tests panic on failure, and its helpers are pub for sibling modules.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! Hostile names and paths, in-process and through the kernel: 255-byte
//! names work and longer ones get ENAMETOOLONG; names made of every byte
//! but '/' and NUL; very deep nesting; renaming a directory into its own
//! subtree gets EINVAL; hard links to directories get EPERM. Afterwards
//! e2fsck -fn is clean and a Linux loop mount sees the same names.

use jbdfs_testkit as common;
use jbdfs_testkit as robust_common;
use jbdfs_testkit::daemon as daemon_common;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use daemon_common::Daemon;
use jbdfs::format::InodeNo;
use jbdfs::fs::Filesystem;
use robust_common::*;

const DEPTH_IN_PROCESS: usize = 3000;
/// "d/" per level keeps the deepest path under PATH_MAX (4096).
const DEPTH_THROUGH_FUSE: usize = 1500;

/// The hostile names: 255 bytes, every byte but '/' and NUL in one name,
/// and each such byte alone (except '.', which is the directory itself).
fn hostile_names() -> Vec<Vec<u8>> {
    let mut names = vec![
        vec![b'n'; 255],
        (1..=255u8).filter(|&b| b != b'/').collect(),
    ];
    for b in 1..=255u8 {
        if b != b'/' && b != b'.' {
            names.push(vec![b]);
        }
    }
    names.push(b"...".to_vec());
    names.push(b".hidden\n\t\x1b[0m".to_vec());
    names.push("名前-ñ-\u{1F600}".as_bytes().to_vec());
    names
}

fn root_names(fs: &Filesystem) -> BTreeSet<Vec<u8>> {
    let mut out = BTreeSet::new();
    let mut cookie = 0;
    loop {
        let batch = fs.readdir(ROOT, cookie, 256).unwrap();
        let Some(last) = batch.last() else { break };
        cookie = last.next;
        out.extend(batch.into_iter().map(|e| e.name));
    }
    out.remove(&b"."[..]);
    out.remove(&b".."[..]);
    out.remove(&b"lost+found"[..]);
    out
}

fn deep_chain_in_process(fs: &Filesystem, top: InodeNo, depth: usize) {
    let mut d = top;
    for _ in 0..depth {
        d = fs.mkdir(d, b"d", 0o755, ME).unwrap().0;
    }
    make_file(fs, d, "bottom", b"deep");
    let mut d = top;
    for _ in 0..depth {
        d = fs.lookup(d, b"d").unwrap().0;
    }
    let (f, _) = fs.lookup(d, b"bottom").unwrap();
    assert_eq!(read_all(fs, f), b"deep");
}

#[test]
fn hostile_names_in_process() {
    let mem = small_image(32 << 20);
    let fs = mount_mem(&mem);
    let names = hostile_names();
    for n in &names {
        fs.mknod(ROOT, n, 0o100644, 0, ME)
            .unwrap_or_else(|e| panic!("create {n:?}: {e}"));
    }
    assert_eq!(root_names(&fs), names.iter().cloned().collect());
    for n in &names {
        fs.lookup(ROOT, n).unwrap();
    }
    let long = vec![b'L'; 256];
    let (f, _) = fs.lookup(ROOT, &names[0]).unwrap();
    assert_eq!(
        errno_of(fs.mknod(ROOT, &long, 0o100644, 0, ME)),
        libc::ENAMETOOLONG
    );
    assert_eq!(
        errno_of(fs.mkdir(ROOT, &long, 0o755, ME)),
        libc::ENAMETOOLONG
    );
    assert_eq!(
        errno_of(fs.symlink(ROOT, &long, b"t", ME)),
        libc::ENAMETOOLONG
    );
    assert_eq!(errno_of(fs.lookup(ROOT, &long)), libc::ENAMETOOLONG);
    assert_eq!(errno_of(fs.link(f, ROOT, &long)), libc::ENAMETOOLONG);
    assert_eq!(
        errno_of(fs.rename(ROOT, &names[0], ROOT, &long, Default::default())),
        libc::ENAMETOOLONG
    );
    assert_eq!(
        errno_of(fs.mknod(ROOT, b"a/b", 0o100644, 0, ME)),
        libc::EINVAL
    );
    assert_eq!(
        errno_of(fs.mknod(ROOT, b"a\0b", 0o100644, 0, ME)),
        libc::EINVAL
    );
    assert_eq!(errno_of(fs.mknod(ROOT, b"", 0o100644, 0, ME)), libc::EINVAL);
    // A 255-byte symlink target and directory name are fine too.
    let (d255, _) = fs.mkdir(ROOT, &[b'D'; 255], 0o755, ME).unwrap();
    fs.symlink(d255, &[b'S'; 255], &[b'T'; 255], ME).unwrap();

    // Directories: into their own subtree, and hard links.
    let (a, _) = fs.mkdir(ROOT, b"tree", 0o755, ME).unwrap();
    let (b, _) = fs.mkdir(a, b"b", 0o755, ME).unwrap();
    let (c, _) = fs.mkdir(b, b"c", 0o755, ME).unwrap();
    for (into, what) in [(c, "a grandchild"), (b, "a child"), (a, "itself")] {
        assert_eq!(
            errno_of(fs.rename(ROOT, b"tree", into, b"moved", Default::default())),
            libc::EINVAL,
            "rename into {what}"
        );
    }
    assert_eq!(
        errno_of(fs.rename(a, b"b", c, b"moved", Default::default())),
        libc::EINVAL
    );
    assert_eq!(errno_of(fs.link(a, ROOT, b"dirlink")), libc::EPERM);
    assert_eq!(errno_of(fs.link(b, c, b"loop")), libc::EPERM);
    deep_chain_in_process(&fs, c, DEPTH_IN_PROCESS);
    fs.unmount().unwrap();
    drop(fs);
    let img = to_file(&mem.snapshot(), "names");
    common::assert_e2fsck_clean(&img.path, "hostile names in-process");
    linux_sees(&img.path, &names, &["tree", "b", "c"], DEPTH_IN_PROCESS);
}

/// A loop mount of `image` lists exactly `names` (plus the tree, the
/// 255-byte directory and lost+found) in the root, and the deep chain
/// under `chain` goes `depth` levels down to its file.
fn linux_sees(image: &Path, names: &[Vec<u8>], chain: &[&str], depth: usize) {
    if !jbdfs_testkit::available!("the Linux check"; loop) {
        return;
    }
    let _g = common::LOOP_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut m = common::LoopMount::mount(image).expect("loop mount");
    let seen: BTreeSet<Vec<u8>> = std::fs::read_dir(m.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().as_bytes().to_vec())
        .collect();
    let mut want: BTreeSet<Vec<u8>> = names.iter().cloned().collect();
    want.insert(b"lost+found".to_vec());
    want.insert(vec![b'D'; 255]);
    want.insert(chain[0].as_bytes().to_vec());
    assert_eq!(seen, want, "Linux sees other names");
    let mut p: PathBuf = m.path().to_path_buf();
    for c in chain {
        p.push(c);
    }
    // Walk down relative to each directory so no path exceeds PATH_MAX.
    let mut dir = std::fs::File::open(&p).unwrap();
    for _ in 0..depth {
        let next = openat_dir(&dir, "d");
        dir = next;
    }
    let bottom = openat_file(&dir, "bottom");
    assert_eq!(bottom, b"deep");
    drop(dir);
    m.umount().expect_ok();
}

fn openat_dir(dir: &std::fs::File, name: &str) -> std::fs::File {
    open_at(dir, name, libc::O_RDONLY | libc::O_DIRECTORY)
}

fn openat_file(dir: &std::fs::File, name: &str) -> Vec<u8> {
    use std::io::Read;
    let mut f = open_at(dir, name, libc::O_RDONLY);
    let mut out = Vec::new();
    f.read_to_end(&mut out).unwrap();
    out
}

fn open_at(dir: &std::fs::File, name: &str, flags: i32) -> std::fs::File {
    use std::os::fd::{AsRawFd, FromRawFd};
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: openat with a valid directory fd and a NUL-terminated name;
    // the returned fd, if valid, is owned by the File made from it.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags | libc::O_CLOEXEC) };
    assert!(
        fd >= 0,
        "openat {name}: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: fd was just returned by openat and nothing else owns it.
    unsafe { std::fs::File::from_raw_fd(fd) }
}

fn os_errno(r: std::io::Result<impl std::fmt::Debug>) -> i32 {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.raw_os_error().unwrap_or(0),
    }
}

#[test]
fn hostile_names_through_fuse() {
    jbdfs_testkit::require!(fuse);
    let mem = small_image(32 << 20);
    let img = to_file(&mem.snapshot(), "names-fuse");
    let dir = common::TempDir::new("names-mnt");
    let d = Daemon::start(&img.path, &dir.path, "", Duration::from_secs(20)).expect("mount");
    let m = dir.path.clone();
    let names = hostile_names();
    for n in &names {
        std::fs::write(m.join(OsStr::from_bytes(n)), n).unwrap_or_else(|e| panic!("{n:?}: {e}"));
    }
    for n in &names {
        assert_eq!(&std::fs::read(m.join(OsStr::from_bytes(n))).unwrap(), n);
    }
    let long = m.join("L".repeat(256));
    assert_eq!(os_errno(std::fs::write(&long, b"x")), libc::ENAMETOOLONG);
    assert_eq!(os_errno(std::fs::create_dir(&long)), libc::ENAMETOOLONG);
    assert_eq!(os_errno(std::fs::metadata(&long)), libc::ENAMETOOLONG);
    assert_eq!(
        os_errno(std::os::unix::fs::symlink("t", &long)),
        libc::ENAMETOOLONG
    );
    std::fs::create_dir(m.join("D".repeat(255))).unwrap();
    std::fs::create_dir_all(m.join("tree/b/c")).unwrap();
    assert_eq!(
        os_errno(std::fs::rename(m.join("tree"), m.join("tree/b/c/moved"))),
        libc::EINVAL
    );
    assert_eq!(
        os_errno(std::fs::rename(m.join("tree/b"), m.join("tree/b/c/moved"))),
        libc::EINVAL
    );
    assert_eq!(
        os_errno(std::fs::hard_link(m.join("tree"), m.join("dirlink"))),
        libc::EPERM
    );
    let mut p = m.join("tree/b/c");
    for _ in 0..DEPTH_THROUGH_FUSE {
        p.push("d");
        std::fs::create_dir(&p).unwrap();
    }
    std::fs::write(p.join("bottom"), b"deep").unwrap();
    assert_eq!(std::fs::read(p.join("bottom")).unwrap(), b"deep");
    d.stop_ok();
    common::assert_e2fsck_clean(&img.path, "hostile names through FUSE");
    linux_sees(&img.path, &names, &["tree", "b", "c"], DEPTH_THROUGH_FUSE);
}
