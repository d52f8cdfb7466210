//! The /dev/fuse transport: fuser's session calls these methods; each one
//! only translates fuser's arguments into an [`Op`] and the [`Answer`]
//! back into fuser's reply. What the operation does is the [`Handler`]'s.
//! FUSE_INIT is negotiated here, for both transports.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use fuser::{
    AccessFlags, CopyFileRangeFlags, FileHandle, FopenFlags, Generation, INodeNo, InitFlags,
    IoctlFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use super::attr::{from_system_time, kind_of_dtype, to_fuser};
use super::handler::recycle;
use super::request::*;

/// What the daemon asks the kernel for at FUSE_INIT (and gets where the
/// kernel offers it). FUSE_EXPORT_SUPPORT: the handler answers LOOKUPs of
/// "." and ".." (file handles, NFS export). FUSE_CACHE_SYMLINKS: a
/// symlink's target never changes (ext3 has no way to rewrite one), so
/// the kernel keeps it in the page cache and READLINK is sent once per
/// inode, not once per path walk through it. FUSE_HANDLE_KILLPRIV_V2: the
/// daemon drops set-ID bits on write (FUSE_WRITE_KILL_SUIDGID), truncate
/// and chown (handler.rs, `set_id_kept`), so the kernel sends no GETATTR
/// before a chown, and marks the superblock SB_NOSEC: once a file's first
/// write finds no set-ID bit and no security.capability, its later writes
/// skip the GETXATTR of security.capability (fs/inode.c,
/// file_remove_privs).
pub const WANTED_INIT_FLAGS: InitFlags = InitFlags::FUSE_ASYNC_READ
    .union(InitFlags::FUSE_CACHE_SYMLINKS)
    .union(InitFlags::FUSE_HANDLE_KILLPRIV_V2)
    .union(InitFlags::FUSE_EXPORT_SUPPORT)
    .union(InitFlags::FUSE_BIG_WRITES)
    .union(InitFlags::FUSE_WRITEBACK_CACHE)
    .union(InitFlags::FUSE_PARALLEL_DIROPS)
    .union(InitFlags::FUSE_DO_READDIRPLUS)
    .union(InitFlags::FUSE_READDIRPLUS_AUTO)
    .union(InitFlags::FUSE_MAX_PAGES);

/// Writes the kernel may send in one request.
pub const MAX_WRITE: u32 = 1 << 20;

/// What FUSE_INIT settled, for the transport that starts after it.
#[derive(Default)]
pub struct Negotiated {
    /// The kernel offered FUSE_OVER_IO_URING and the reply took it.
    pub io_uring: AtomicBool,
    /// The kernel offered FUSE_OVER_IO_URING (enable_uring is on).
    pub io_uring_offered: AtomicBool,
    pub max_write: AtomicU32,
}

/// What to ask for at FUSE_INIT.
#[derive(Clone, Copy, Default)]
pub struct InitWants {
    /// `-o direct_io`. (FUSE_DIRECT_IO_ALLOW_MMAP, which it needs, is
    /// asked for on every mount: files with the sync flag open direct too.)
    pub direct_io: bool,
    /// `-o io_uring`: also FUSE_OVER_IO_URING.
    pub io_uring: bool,
}

/// fuser's face of a [`Handler`].
pub struct FuserAdapter<H: Handler> {
    handler: Arc<H>,
    wants: InitWants,
    negotiated: Arc<Negotiated>,
}

impl<H: Handler> FuserAdapter<H> {
    pub fn new(handler: Arc<H>, wants: InitWants) -> Self {
        FuserAdapter {
            handler,
            wants,
            negotiated: Arc::default(),
        }
    }

    /// What FUSE_INIT settled, once the session is made.
    pub fn negotiated(&self) -> Arc<Negotiated> {
        self.negotiated.clone()
    }

    fn run(&self, req: &Request, op: Op<'_>, reply: impl Responder) {
        self.handler.dispatch(&ctx(req), op, reply);
    }
}

fn ctx(req: &Request) -> Ctx {
    Ctx {
        unique: req.unique().0,
        uid: req.uid(),
        gid: req.gid(),
        pid: req.pid(),
        must_not_block: false,
        serves_batches: false,
    }
}

fn time(t: TimeOrNow) -> TimeSet {
    match t {
        TimeOrNow::SpecificTime(s) => {
            let (sec, nsec) = from_system_time(s);
            TimeSet::At { sec, nsec }
        }
        TimeOrNow::Now => TimeSet::Now,
    }
}

fn mismatch(op: &'static str, answer: &Answer) -> Errno {
    tracing::error!(op, ?answer, "handler answered with the wrong kind of reply");
    Errno::EIO
}

/// A fuser reply object as a [`Responder`].
pub struct Fuser<R>(R);

macro_rules! responder {
    ($reply:ty, |$r:ident, $a:ident| $body:expr) => {
        impl Responder for Fuser<$reply> {
            fn respond(self, outcome: Outcome) {
                let $r = self.0;
                match outcome {
                    Ok($a) => $body,
                    Err(e) => $r.error(e),
                }
            }
        }
    };
}

responder!(ReplyEntry, |r, a| match a {
    Answer::Entry(e) => r.entry(&TTL, &to_fuser(&e.attr), Generation(e.generation)),
    a => r.error(mismatch("entry", &a)),
});
responder!(ReplyAttr, |r, a| match a {
    Answer::Attr(attr) => r.attr(&TTL, &to_fuser(&attr)),
    a => r.error(mismatch("attr", &a)),
});
responder!(ReplyData, |r, a| match a {
    Answer::Data(d) => {
        r.data(&d);
        recycle(d);
    }
    a => r.error(mismatch("data", &a)),
});
responder!(ReplyEmpty, |r, a| match a {
    Answer::Empty => r.ok(),
    a => r.error(mismatch("empty", &a)),
});
responder!(ReplyWrite, |r, a| match a {
    Answer::Written(n) => r.written(n),
    a => r.error(mismatch("write", &a)),
});
responder!(ReplyOpen, |r, a| match a {
    Answer::Open(o) => r.opened(FileHandle(o.fh), FopenFlags::from_bits_retain(o.flags)),
    a => r.error(mismatch("open", &a)),
});
responder!(ReplyCreate, |r, a| match a {
    Answer::Create(e, o) => r.created(
        &TTL,
        &to_fuser(&e.attr),
        Generation(e.generation),
        FileHandle(o.fh),
        FopenFlags::from_bits_retain(o.flags),
    ),
    a => r.error(mismatch("create", &a)),
});
responder!(ReplyStatfs, |r, a| match a {
    Answer::Statfs(s) =>
        r.statfs(s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize),
    a => r.error(mismatch("statfs", &a)),
});
responder!(ReplyXattr, |r, a| match a {
    Answer::XattrSize(n) => r.size(n),
    Answer::Data(d) => r.data(&d),
    a => r.error(mismatch("xattr", &a)),
});
responder!(ReplyDirectory, |r, a| match a {
    Answer::Dir(list) => {
        let mut r = r;
        for e in list {
            let name = OsStr::from_bytes(&e.name);
            if r.add(INodeNo(e.ino), e.next, kind_of_dtype(e.kind), name) {
                break;
            }
        }
        r.ok();
    }
    a => r.error(mismatch("readdir", &a)),
});
responder!(ReplyDirectoryPlus, |r, a| match a {
    Answer::DirPlus(dp) => {
        let mut r = r;
        let mut sent = 0;
        for e in &dp.entries {
            let (attr, gen) = (to_fuser(&e.entry.attr), Generation(e.entry.generation));
            let name = OsStr::from_bytes(&e.dirent.name);
            if r.add(INodeNo(e.dirent.ino), e.dirent.next, name, &TTL, &attr, gen) {
                break;
            }
            sent += 1;
        }
        dp.sent(sent);
        r.ok();
    }
    a => r.error(mismatch("readdirplus", &a)),
});
responder!(ReplyIoctl, |r, a| match a {
    Answer::Ioctl { result, data } => r.ioctl(result, &data),
    a => r.error(mismatch("ioctl", &a)),
});
responder!(ReplyLseek, |r, a| match a {
    Answer::Lseek(off) => r.offset(off as i64),
    a => r.error(mismatch("lseek", &a)),
});

impl<H: Handler> fuser::Filesystem for FuserAdapter<H> {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Shared mappings of FOPEN_DIRECT_IO files need it: every file
        // under -o direct_io, and on any mount the files with the sync
        // flag (chattr +S), which are opened that way.
        let mut wanted = WANTED_INIT_FLAGS | InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP;
        if self.handler.posix_acl() {
            // The kernel then checks permissions against the ACLs it
            // reads through GETXATTR (FUSE_POSIX_ACL implies
            // default_permissions), and sends create modes unmasked with
            // the umask beside them (FUSE_DONT_MASK): whether the umask
            // applies depends on the parent's default ACL, which only the
            // filesystem knows (fs/fuse/dir.c, posix_acl_create).
            wanted |= InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK;
        }
        let offered = config.capabilities();
        let uring_offered = offered.contains(InitFlags::FUSE_OVER_IO_URING);
        if self.wants.io_uring && uring_offered {
            wanted |= InitFlags::FUSE_OVER_IO_URING;
        }
        let _ = config.add_capabilities(wanted & offered);
        let _ = config.set_max_write(MAX_WRITE);
        // The kernel offers at most its default readahead for the mount's
        // bdi (128 KiB unless raised); ask for all it allows, up to 1 MiB.
        let readahead = match config.set_max_readahead(MAX_WRITE) {
            Ok(_) => MAX_WRITE,
            Err(nearest) => {
                let _ = config.set_max_readahead(nearest);
                nearest
            }
        };
        let n = &self.negotiated;
        n.io_uring_offered.store(uring_offered, Ordering::Release);
        let granted = (wanted & offered).contains(InitFlags::FUSE_OVER_IO_URING);
        n.io_uring.store(granted, Ordering::Release);
        n.max_write.store(MAX_WRITE, Ordering::Release);
        tracing::info!(
            capabilities = ?(wanted & offered),
            max_write = MAX_WRITE,
            max_readahead = readahead,
            "FUSE session initialised"
        );
        Ok(())
    }

    fn destroy(&mut self) {
        self.handler.destroy();
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let op = Op::Lookup {
            parent: parent.0,
            name: name.as_bytes(),
        };
        self.run(req, op, Fuser(reply));
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.handler.forget(ino.0, nlookup);
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.run(req, Op::Getattr { ino: ino.0 }, Fuser(reply));
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let set = SetattrIn {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(time),
            mtime: mtime.map(time),
            ctime: ctime.map(from_system_time),
        };
        self.run(req, Op::Setattr { ino: ino.0, set }, Fuser(reply));
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        self.run(req, Op::Readlink { ino: ino.0 }, Fuser(reply));
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let (parent, name) = (parent.0, name.as_bytes());
        let op = Op::Mknod {
            parent,
            name,
            mode,
            umask,
            rdev,
        };
        self.run(req, op, Fuser(reply));
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let (parent, name) = (parent.0, name.as_bytes());
        self.run(
            req,
            Op::Mkdir {
                parent,
                name,
                mode,
                umask,
            },
            Fuser(reply),
        );
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (parent, name) = (parent.0, name.as_bytes());
        self.run(req, Op::Unlink { parent, name }, Fuser(reply));
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (parent, name) = (parent.0, name.as_bytes());
        self.run(req, Op::Rmdir { parent, name }, Fuser(reply));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let op = Op::Symlink {
            parent: parent.0,
            name: name.as_bytes(),
            target: target.as_os_str().as_bytes(),
        };
        self.run(req, op, Fuser(reply));
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let op = Op::Rename {
            parent: parent.0,
            name: name.as_bytes(),
            newparent: newparent.0,
            newname: newname.as_bytes(),
            flags: flags.bits(),
        };
        self.run(req, op, Fuser(reply));
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let op = Op::Link {
            ino: ino.0,
            newparent: newparent.0,
            newname: newname.as_bytes(),
        };
        self.run(req, op, Fuser(reply));
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let op = Op::Open {
            ino: ino.0,
            flags: flags.0,
        };
        self.run(req, op, Fuser(reply));
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let op = Op::Read {
            ino: ino.0,
            fh: fh.0,
            offset,
            size,
        };
        self.run(req, op, Fuser(reply));
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        wflags: WriteFlags,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let op = Op::Write {
            ino: ino.0,
            offset,
            data,
            from_cache: wflags.contains(WriteFlags::FUSE_WRITE_CACHE),
            kill_suidgid: wflags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID),
        };
        self.run(req, op, Fuser(reply));
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _lock: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.run(req, Op::Flush { ino: ino.0 }, Fuser(reply));
    }

    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.run(req, Op::Release { ino: ino.0 }, Fuser(reply));
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let op = Op::Fsync {
            ino: ino.0,
            datasync,
        };
        self.run(req, op, Fuser(reply));
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.run(req, Op::Opendir { ino: ino.0 }, Fuser(reply));
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        let op = Op::Readdir {
            ino: ino.0,
            offset,
            size: None,
        };
        self.run(req, op, Fuser(reply));
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        let op = Op::Readdirplus {
            ino: ino.0,
            offset,
            size: None,
        };
        self.run(req, op, Fuser(reply));
    }

    fn releasedir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.run(req, Op::Releasedir { ino: ino.0 }, Fuser(reply));
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let op = Op::Fsyncdir {
            ino: ino.0,
            datasync,
        };
        self.run(req, op, Fuser(reply));
    }

    #[allow(clippy::too_many_arguments)]
    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        let op = Op::Ioctl {
            ino: ino.0,
            cmd,
            arg: 0,
            in_data,
            out_size,
        };
        self.run(req, op, Fuser(reply));
    }

    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.run(req, Op::Statfs, Fuser(reply));
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _pos: u32,
        reply: ReplyEmpty,
    ) {
        let op = Op::Setxattr {
            ino: ino.0,
            name: name.as_bytes(),
            value,
            flags,
        };
        self.run(req, op, Fuser(reply));
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let op = Op::Getxattr {
            ino: ino.0,
            name: name.as_bytes(),
            size,
        };
        self.run(req, op, Fuser(reply));
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.run(req, Op::Listxattr { ino: ino.0, size }, Fuser(reply));
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let op = Op::Removexattr {
            ino: ino.0,
            name: name.as_bytes(),
        };
        self.run(req, op, Fuser(reply));
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let op = Op::Access {
            ino: ino.0,
            mask: mask.bits(),
        };
        self.run(req, op, Fuser(reply));
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let (parent, name) = (parent.0, name.as_bytes());
        let op = Op::Create {
            parent,
            name,
            mode,
            umask,
            flags,
        };
        self.run(req, op, Fuser(reply));
    }

    #[allow(clippy::too_many_arguments)]
    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let op = Op::CopyFileRange {
            ino_in: ino_in.0,
            offset_in,
            ino_out: ino_out.0,
            offset_out,
            len,
            flags: flags.bits(),
        };
        self.run(req, op, Fuser(reply));
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let op = Op::Fallocate {
            ino: ino.0,
            offset,
            length,
            mode,
        };
        self.run(req, op, Fuser(reply));
    }

    fn lseek(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        let op = Op::Lseek {
            ino: ino.0,
            offset: offset as u64,
            whence,
        };
        self.run(req, op, Fuser(reply));
    }
}

/// [`KernelCache`] through fuser's notifier (FUSE_NOTIFY_INVAL_INODE with a
/// negative offset: attributes only, the page cache kept).
pub struct FuserKernelCache(pub fuser::Notifier);

impl KernelCache for FuserKernelCache {
    fn attributes_changed(&self, ino: NodeId) {
        if let Err(e) = self.0.inval_inode(INodeNo(ino), -1, 0) {
            // ENOENT: the kernel no longer has the inode, so nothing stale.
            tracing::debug!(ino, "attribute invalidation not sent: {e}");
        }
    }
}
