//! The floor of a FUSE filesystem on this machine: names and sizes in
//! memory, no storage, no journal, every request answered at once, with the
//! init flags jbdfs negotiates. fs_mark and the source-tree workload on it
//! (`scripts/bench-fsmark.sh --floor`, `scripts/bench-tree.sh --floor`)
//! measure what the kernel's FUSE round trips alone cost: the part of
//! jbdfs's gap to Linux ext3 that any filesystem under fuser 0.18 pays.
//!
//!     cargo run --release --example fuse_floor -- MOUNTPOINT [THREADS]
//!
//! Serves until unmounted (fusermount3 -u MOUNTPOINT). Regular files and
//! directories only; data is counted, not kept (reads return zeros).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use fuser::{
    BsdFileFlags, Config, Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, MountOption, OpenFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use parking_lot::Mutex;

thread_local! {
    static ZEROS: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

const TTL: Duration = Duration::from_secs(1);
const ROOT: u64 = 1;

#[derive(Default)]
struct Tree {
    names: HashMap<(u64, OsString), u64>,
    attrs: HashMap<u64, FileAttr>,
}

struct Floor {
    tree: Mutex<Tree>,
    next_ino: AtomicU64,
}

fn attr(ino: u64, kind: FileType, perm: u16, req: &Request) -> FileAttr {
    let now = SystemTime::now();
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: now,
        mtime: now,
        ctime: now,
        crtime: now,
        kind,
        perm,
        nlink: if kind == FileType::Directory { 2 } else { 1 },
        uid: req.uid(),
        gid: req.gid(),
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl Floor {
    fn add(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        kind: FileType,
        mode: u32,
    ) -> Result<FileAttr, Errno> {
        let mut t = self.tree.lock();
        let key = (parent.0, name.to_os_string());
        if t.names.contains_key(&key) {
            return Err(Errno::EEXIST);
        }
        let ino = self.next_ino.fetch_add(1, Ordering::Relaxed);
        let a = attr(ino, kind, (mode & 0o7777) as u16, req);
        t.names.insert(key, ino);
        t.attrs.insert(ino, a);
        Ok(a)
    }

    /// The directory's entries by name; offsets are positions in that order.
    fn entries(&self, dir: INodeNo) -> Vec<(OsString, FileAttr)> {
        let t = self.tree.lock();
        let mut out: Vec<(OsString, FileAttr)> = t
            .names
            .iter()
            .filter(|((parent, _), _)| *parent == dir.0)
            .map(|((_, name), child)| (name.clone(), t.attrs[child]))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

impl fuser::Filesystem for Floor {
    fn init(&mut self, req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let wanted = jbdfs_daemon::fuse::WANTED_INIT_FLAGS;
        let offered = config.capabilities();
        let _ = config.add_capabilities(wanted & offered);
        let root = attr(ROOT, FileType::Directory, 0o755, req);
        self.tree.lock().attrs.insert(ROOT, root);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let t = self.tree.lock();
        match t.names.get(&(parent.0, name.to_os_string())) {
            Some(ino) => reply.entry(&TTL, &t.attrs[ino], Generation(0)),
            None => {
                let mut neg = t.attrs[&ROOT];
                neg.ino = INodeNo(0);
                reply.entry(&TTL, &neg, Generation(0))
            }
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.tree.lock().attrs.get(&ino.0) {
            Some(a) => reply.attr(&TTL, a),
            None => reply.error(Errno::ENOENT),
        }
    }

    /// Sizes, and the times the kernel flushes under the writeback cache.
    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        match self.tree.lock().attrs.get_mut(&ino.0) {
            Some(a) => {
                if let Some(size) = size {
                    a.size = size;
                }
                reply.attr(&TTL, a)
            }
            None => reply.error(Errno::ENOENT),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        match self.add(req, parent, name, FileType::Directory, mode) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut t = self.tree.lock();
        match t.names.remove(&(parent.0, name.to_os_string())) {
            Some(ino) => {
                t.attrs.remove(&ino);
                reply.ok()
            }
            None => reply.error(Errno::ENOENT),
        }
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.unlink(req, parent, name, reply)
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        for (i, (name, a)) in self.entries(ino).iter().enumerate().skip(offset as usize) {
            if reply.add(a.ino, i as u64 + 1, a.kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        for (i, (name, a)) in self.entries(ino).iter().enumerate().skip(offset as usize) {
            if reply.add(a.ino, i as u64 + 1, name, &TTL, a, Generation(0)) {
                break;
            }
        }
        reply.ok();
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        match self.add(req, parent, name, FileType::RegularFile, mode) {
            Ok(a) => reply.created(
                &TTL,
                &a,
                Generation(0),
                FileHandle(0),
                FopenFlags::FOPEN_KEEP_CACHE,
            ),
            Err(e) => reply.error(e),
        }
    }

    /// Zeros up to the file's size: the floor keeps no data.
    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let len = match self.tree.lock().attrs.get(&ino.0) {
            Some(a) => a.size.saturating_sub(offset).min(size as u64) as usize,
            None => return reply.error(Errno::ENOENT),
        };
        ZEROS.with(|z| {
            let mut z = z.borrow_mut();
            if z.len() < len {
                z.resize(len, 0);
            }
            reply.data(&z[..len]);
        });
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _wflags: WriteFlags,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if let Some(a) = self.tree.lock().attrs.get_mut(&ino.0) {
            a.size = a.size.max(offset + data.len() as u64);
        }
        reply.written(data.len() as u32);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        reply.error(Errno::ENODATA);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(1 << 20, 1 << 19, 1 << 19, 1 << 20, 1 << 19, 4096, 255, 4096);
    }
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args_os().skip(1);
    const USAGE: &str = "usage: fuse_floor MOUNTPOINT [THREADS]\n\
        Serves an in-memory filesystem with no storage (the FUSE floor of\n\
        scripts/bench-fsmark.sh --floor) until unmounted; THREADS FUSE workers (8).";
    let Some(mountpoint) = args.next() else {
        eprintln!("{USAGE}");
        std::process::exit(2);
    };
    if mountpoint == "-h" || mountpoint == "--help" {
        println!("{USAGE}");
        return Ok(());
    }
    let threads = args
        .next()
        .and_then(|t| t.to_str().and_then(|t| t.parse().ok()))
        .unwrap_or(8);
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("fuse_floor".into()),
        MountOption::DefaultPermissions,
        MountOption::RW,
    ];
    config.n_threads = Some(threads);
    config.clone_fd = true;
    let floor = Floor {
        tree: Mutex::new(Tree::default()),
        next_ino: AtomicU64::new(ROOT + 1),
    };
    fuser::Session::new(floor, &mountpoint, &config)?.run()
}
