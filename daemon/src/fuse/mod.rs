//! The FUSE adapter: the only code that knows fuser. It converts types,
//! maps [`FsError`] to errno in one place ([`errno`]), opens a tracing span
//! per request, and calls into [`jbdfs::fs`]; it holds no filesystem logic.

mod attr;
mod runners;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::Duration;

use fuser::{
    AccessFlags, CopyFileRangeFlags, Errno, FileHandle, FopenFlags, Generation, INodeNo, InitFlags,
    IoctlFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags as FuseRename, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use jbdfs::format::inode::Inode;
use jbdfs::format::InodeNo;
use jbdfs::fs::namei::{Caller, RenameFlags, SetAttr};
use jbdfs::fs::xattr::SetMode;
use jbdfs::fs::{Filesystem, FsError};

pub use attr::file_attr;

/// How long the kernel may cache entries and attributes. Every change goes
/// through this daemon, so the cache can only be stale for changes made
/// behind the mount's back, which ext3 does not allow either.
const TTL: Duration = Duration::from_secs(1);

/// Opened files keep the kernel's page cache: every change to a file's
/// data passes through this mount, so cached pages are never stale, and
/// dropping them at each open would send every read of a file opened again
/// back to the daemon.
const OPEN_FLAGS: FopenFlags = FopenFlags::FOPEN_KEEP_CACHE;

/// `-o direct_io`: reads and writes bypass the page cache and reach the
/// daemon as the caller made them. mmap still goes through the page cache,
/// which the kernel (6.6 and later) allows when FUSE_DIRECT_IO_ALLOW_MMAP
/// is negotiated; older kernels refuse shared writable maps of such files.
const DIRECT_OPEN_FLAGS: FopenFlags = FopenFlags::FOPEN_DIRECT_IO;

/// What the adapter asks the kernel for at FUSE_INIT (and gets where the
/// kernel offers it). Public for examples/fuse_floor.rs, which negotiates
/// the same so that it measures the same protocol.
pub const WANTED_INIT_FLAGS: InitFlags = InitFlags::FUSE_ASYNC_READ
    .union(InitFlags::FUSE_BIG_WRITES)
    .union(InitFlags::FUSE_WRITEBACK_CACHE)
    .union(InitFlags::FUSE_PARALLEL_DIROPS)
    .union(InitFlags::FUSE_DO_READDIRPLUS)
    .union(InitFlags::FUSE_READDIRPLUS_AUTO)
    .union(InitFlags::FUSE_MAX_PAGES);

thread_local! {
    /// Each worker's read buffer, kept across requests (see
    /// `Filesystem::read_buf`): a fresh zeroed buffer per read cost about
    /// 5% of a sequential read's daemon time.
    static READ_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Writes the kernel may send in one request.
pub const MAX_WRITE: u32 = 1 << 20;

/// The errno for an error: the one place where errors become numbers.
pub fn errno(e: &FsError) -> Errno {
    if let FsError::Corrupt(_) | FsError::Io(_) = e {
        tracing::error!("{e}");
    }
    Errno::from_i32(e.errno())
}

/// ext3's root is inode 2; FUSE's is 1.
fn to_ext3(ino: INodeNo) -> InodeNo {
    if ino.0 == 1 {
        InodeNo(2)
    } else {
        InodeNo(ino.0.min(u32::MAX as u64) as u32)
    }
}

fn to_fuse(ino: InodeNo) -> INodeNo {
    if ino.0 == 2 {
        INodeNo(1)
    } else {
        INodeNo(ino.0 as u64)
    }
}

fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
    }
}

fn time(t: TimeOrNow) -> jbdfs::format::inode::Timestamp {
    match t {
        TimeOrNow::SpecificTime(s) => attr::to_timestamp(s),
        TimeOrNow::Now => {
            let (sec, nsec) = jbdfs::util::now();
            jbdfs::format::inode::Timestamp { sec, nsec }
        }
    }
}

/// The FUSE face of a mounted filesystem.
pub struct JbdFuse {
    fs: Arc<Filesystem>,
    /// Where fsyncs wait when the device is slow (see runners.rs).
    fsync_runners: Arc<runners::Runners>,
    /// What every open and create answers: [`OPEN_FLAGS`] or
    /// [`DIRECT_OPEN_FLAGS`].
    open_flags: FopenFlags,
}

/// At most this many fsyncs wait on runners side by side; past it they
/// queue for the first runner to come free.
const MAX_FSYNC_RUNNERS: usize = 256;

impl JbdFuse {
    /// The errno for a failed request, after the errors= policy has seen
    /// the error (corruption found while serving it).
    fn fail(&self, e: &FsError) -> Errno {
        self.fs.report_error(e, "jbdfs_fuse_request");
        errno(e)
    }

    fn empty(&self, reply: ReplyEmpty, res: Result<(), FsError>) {
        match res {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    /// An fsync whose reply is sent by the thread that finishes the
    /// commit: this worker goes back to the kernel for the next request
    /// instead of sleeping until the commit ends and being woken only to
    /// reply. On a device whose commits are slow, the data write, the
    /// batching wait and the commit also run on a runner instead of this
    /// worker, so that a few workers can keep any number of fsyncs waiting
    /// together.
    fn fsync_then_reply(&self, req: &Request, ino: INodeNo, datasync: bool, reply: ReplyEmpty) {
        let fs = self.fs.clone();
        let pid = req.pid();
        let job = move || {
            jbdfs::fs::set_caller(pid);
            let reporter = fs.clone();
            let done = move |res: Result<(), FsError>| match res {
                Ok(()) => reply.ok(),
                Err(e) => {
                    reporter.report_error(&e, "jbdfs_fsync");
                    reply.error(errno(&e));
                }
            };
            fs.fsync_then(to_ext3(ino), datasync, Box::new(done));
        };
        if !self.fs.journal().commits_are_slow() {
            return job();
        }
        let span = tracing::Span::current();
        self.fsync_runners.run(Box::new(move || {
            let _s = span.entered();
            job();
        }));
    }

    pub fn new(fs: Arc<Filesystem>) -> Self {
        JbdFuse {
            fs,
            fsync_runners: runners::Runners::new("jbdfs-fsync", MAX_FSYNC_RUNNERS),
            open_flags: OPEN_FLAGS,
        }
    }

    /// `-o direct_io`: open files bypass the kernel's page cache.
    pub fn with_direct_io(mut self, on: bool) -> Self {
        self.open_flags = if on { DIRECT_OPEN_FLAGS } else { OPEN_FLAGS };
        self
    }

    fn attr(&self, ino: InodeNo, inode: &Inode) -> fuser::FileAttr {
        file_attr(to_fuse(ino), inode, self.fs.block_size())
    }

    fn reply_entry(&self, reply: ReplyEntry, res: Result<(InodeNo, Inode), FsError>) {
        match res {
            Ok((ino, inode)) => {
                self.fs.remember(ino);
                let attr = self.attr(ino, &inode);
                reply.entry(&TTL, &attr, Generation(inode.i_generation as u64));
            }
            Err(e) => reply.error(self.fail(&e)),
        }
    }
}

/// getxattr/listxattr: the size when asked for it, ERANGE when the
/// caller's buffer is too small.
fn sized(reply: ReplyXattr, data: &[u8], size: u32) {
    if size == 0 {
        reply.size(data.len() as u32);
    } else if (size as usize) < data.len() {
        reply.error(Errno::from_i32(libc::ERANGE));
    } else {
        reply.data(data);
    }
}

impl fuser::Filesystem for JbdFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let mut wanted = WANTED_INIT_FLAGS;
        if self.open_flags.contains(FopenFlags::FOPEN_DIRECT_IO) {
            wanted |= InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP;
        }
        let offered = config.capabilities();
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
        tracing::info!(
            capabilities = ?(wanted & offered),
            max_write = MAX_WRITE,
            max_readahead = readahead,
            "FUSE session initialised"
        );
        Ok(())
    }

    fn destroy(&mut self) {
        if let Err(e) = self.fs.unmount() {
            tracing::error!("unmount failed: {e}");
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let _s = tracing::debug_span!("lookup", parent = parent.0, ?name).entered();
        match self.fs.lookup(to_ext3(parent), name.as_bytes()) {
            // A name that is not there is answered with node 0 and a
            // timeout: the kernel keeps the negative dentry, so asking again
            // (a build's include search, a stat before a create) costs no
            // round trip. Every create goes through the kernel, which turns
            // the negative entry positive itself.
            Err(FsError::NotFound) => reply.entry(&TTL, &attr::negative_attr(), Generation(0)),
            res => self.reply_entry(reply, res),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.fs.forget(to_ext3(ino), nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let _s = tracing::debug_span!("getattr", ino = ino.0).entered();
        let ext = to_ext3(ino);
        match self.fs.getattr(ext) {
            Ok(inode) => reply.attr(&TTL, &self.attr(ext, &inode)),
            Err(e) => reply.error(self.fail(&e)),
        }
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
        ctime: Option<std::time::SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let _s = tracing::debug_span!("setattr", ino = ino.0, ?mode, ?size).entered();
        let changes = SetAttr {
            mode: mode.map(|m| m as u16),
            uid,
            gid,
            size,
            atime: atime.map(time),
            mtime: mtime.map(time),
            ctime: ctime.map(attr::to_timestamp),
        };
        let ext = to_ext3(ino);
        match self.fs.setattr(ext, &changes, caller(req)) {
            Ok(inode) => reply.attr(&TTL, &self.attr(ext, &inode)),
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let _s = tracing::debug_span!("readlink", ino = ino.0).entered();
        match self.fs.readlink(to_ext3(ino)) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(self.fail(&e)),
        }
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
        let _s = tracing::debug_span!("mknod", parent = parent.0, ?name, mode).entered();
        let mode = (mode & !(umask & 0o777)) as u16;
        let res = self
            .fs
            .mknod(to_ext3(parent), name.as_bytes(), mode, rdev, caller(req));
        self.reply_entry(reply, res);
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
        let _s = tracing::debug_span!("mkdir", parent = parent.0, ?name).entered();
        let mode = (mode & !(umask & 0o777)) as u16;
        let res = self
            .fs
            .mkdir(to_ext3(parent), name.as_bytes(), mode, caller(req));
        self.reply_entry(reply, res);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _s = tracing::debug_span!("unlink", parent = parent.0, ?name).entered();
        self.empty(reply, self.fs.unlink(to_ext3(parent), name.as_bytes()));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _s = tracing::debug_span!("rmdir", parent = parent.0, ?name).entered();
        self.empty(reply, self.fs.rmdir(to_ext3(parent), name.as_bytes()));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let _s = tracing::debug_span!("symlink", parent = parent.0, ?name).entered();
        let res = self.fs.symlink(
            to_ext3(parent),
            name.as_bytes(),
            target.as_os_str().as_bytes(),
            caller(req),
        );
        self.reply_entry(reply, res);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: FuseRename,
        reply: ReplyEmpty,
    ) {
        let _s = tracing::debug_span!(
            "rename",
            parent = parent.0,
            ?name,
            newparent = newparent.0,
            ?newname
        )
        .entered();
        if flags.contains(FuseRename::RENAME_WHITEOUT) {
            return reply.error(Errno::EINVAL);
        }
        let f = RenameFlags {
            noreplace: flags.contains(FuseRename::RENAME_NOREPLACE),
            exchange: flags.contains(FuseRename::RENAME_EXCHANGE),
        };
        let res = self.fs.rename(
            to_ext3(parent),
            name.as_bytes(),
            to_ext3(newparent),
            newname.as_bytes(),
            f,
        );
        self.empty(reply, res);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let _s =
            tracing::debug_span!("link", ino = ino.0, newparent = newparent.0, ?newname).entered();
        let ext = to_ext3(ino);
        let res = self
            .fs
            .link(ext, to_ext3(newparent), newname.as_bytes())
            .map(|inode| (ext, inode));
        self.reply_entry(reply, res);
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let _s = tracing::debug_span!("open", ino = ino.0).entered();
        match self.fs.open(to_ext3(ino)) {
            Ok(()) => reply.opened(FileHandle(0), self.open_flags),
            Err(e) => reply.error(self.fail(&e)),
        }
    }

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
        let _s = tracing::debug_span!("read", ino = ino.0, offset, size).entered();
        READ_BUF.with_borrow_mut(
            |buf| match self.fs.read_buf(to_ext3(ino), offset, size, buf) {
                Ok(n) => reply.data(&buf[..n]),
                Err(e) => reply.error(self.fail(&e)),
            },
        );
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _wflags: WriteFlags,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let _s = tracing::debug_span!("write", ino = ino.0, offset, len = data.len()).entered();
        match self.fs.write(to_ext3(ino), offset, data, req.uid() == 0) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    /// close(2) has nothing to do here: data reaches the daemon through
    /// the kernel's writeback (which close already waits for), and locks
    /// are the kernel's. ENOSYS tells the kernel so once, and it stops
    /// sending FLUSH: one round trip less for every close.
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

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let _s = tracing::debug_span!("release", ino = ino.0).entered();
        self.empty(reply, self.fs.release(to_ext3(ino)));
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let _s = tracing::debug_span!("fsync", ino = ino.0, datasync).entered();
        self.fsync_then_reply(_req, ino, datasync, reply);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.fs.getattr(to_ext3(ino)) {
            Ok(i) if i.is_dir() => reply.opened(FileHandle(0), FopenFlags::empty()),
            Ok(_) => reply.error(Errno::ENOTDIR),
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let _s = tracing::debug_span!("readdir", ino = ino.0, offset).entered();
        match self.fs.readdir(to_ext3(ino), offset, 256) {
            Ok(entries) => {
                for e in entries {
                    let kind = attr::kind_of_dirent(e.file_type);
                    if reply.add(to_fuse(e.ino), e.next, kind, OsStr::from_bytes(&e.name)) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let _s = tracing::debug_span!("readdirplus", ino = ino.0, offset).entered();
        let entries = match self.fs.readdir(to_ext3(ino), offset, 128) {
            Ok(e) => e,
            Err(e) => return reply.error(self.fail(&e)),
        };
        for e in entries {
            let inode = match self.fs.getattr(e.ino) {
                Ok(i) => i,
                Err(err) => return reply.error(self.fail(&err)),
            };
            let attr = self.attr(e.ino, &inode);
            let gen = Generation(inode.i_generation as u64);
            if reply.add(
                to_fuse(e.ino),
                e.next,
                OsStr::from_bytes(&e.name),
                &TTL,
                &attr,
                gen,
            ) {
                break;
            }
            // The kernel takes a lookup reference for every entry but . and ..
            if e.name != b"." && e.name != b".." {
                self.fs.remember(e.ino);
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.fsync_then_reply(_req, ino, datasync, reply);
    }

    /// No ioctls are served (ext3's flag ioctls among them): ENOTTY, what
    /// a file without the ioctl answers, and quietly, since programs probe
    /// them on every file (fuser's default warns on each call).
    #[allow(clippy::too_many_arguments)]
    fn ioctl(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        tracing::trace!(ino = ino.0, cmd, "ioctl not supported");
        reply.error(Errno::from_i32(libc::ENOTTY));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.fs.statfs() {
            Ok(s) => reply.statfs(
                s.blocks,
                s.free_blocks,
                s.available,
                s.inodes,
                s.free_inodes,
                s.block_size,
                s.name_max,
                s.block_size,
            ),
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _pos: u32,
        reply: ReplyEmpty,
    ) {
        let _s = tracing::debug_span!("setxattr", ino = ino.0, ?name, len = value.len()).entered();
        let mode = match flags {
            0 => SetMode::Either,
            libc::XATTR_CREATE => SetMode::Create,
            libc::XATTR_REPLACE => SetMode::Replace,
            _ => return reply.error(Errno::EINVAL),
        };
        self.empty(
            reply,
            self.fs.setxattr(to_ext3(ino), name.as_bytes(), value, mode),
        );
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let _s = tracing::debug_span!("getxattr", ino = ino.0, ?name, size).entered();
        match self.fs.getxattr(to_ext3(ino), name.as_bytes()) {
            Ok(v) => sized(reply, &v, size),
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let _s = tracing::debug_span!("listxattr", ino = ino.0, size).entered();
        match self.fs.listxattr(to_ext3(ino)) {
            Ok(v) => sized(reply, &v, size),
            Err(e) => reply.error(self.fail(&e)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _s = tracing::debug_span!("removexattr", ino = ino.0, ?name).entered();
        self.empty(reply, self.fs.removexattr(to_ext3(ino), name.as_bytes()));
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // Permission checks are the kernel's (default_permissions); this
        // only confirms the inode exists.
        self.empty(reply, self.fs.getattr(to_ext3(ino)).map(|_| ()));
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let _s = tracing::debug_span!("create", parent = parent.0, ?name).entered();
        let mode = (mode & !(umask & 0o777)) as u16;
        let made = self
            .fs
            .mknod(to_ext3(parent), name.as_bytes(), mode, 0, caller(req))
            .and_then(|(ino, inode)| self.fs.open(ino).map(|()| (ino, inode)));
        match made {
            Ok((ino, inode)) => {
                self.fs.remember(ino);
                let attr = self.attr(ino, &inode);
                let gen = Generation(inode.i_generation as u64);
                reply.created(&TTL, &attr, gen, FileHandle(0), self.open_flags);
            }
            Err(e) => reply.error(self.fail(&e)),
        }
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
        let _s = tracing::debug_span!(
            "copy_file_range",
            ino_in = ino_in.0,
            offset_in,
            ino_out = ino_out.0,
            offset_out,
            len
        )
        .entered();
        if !flags.is_empty() {
            return reply.error(Errno::EINVAL);
        }
        let (src, dst) = (to_ext3(ino_in), to_ext3(ino_out));
        let copied = self
            .fs
            .copy_range(src, offset_in, dst, offset_out, len, req.uid() == 0);
        match copied {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(self.fail(&e)),
        }
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
        let _s = tracing::debug_span!("fallocate", ino = ino.0, offset, length, mode).entered();
        let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
            return reply.error(Errno::from_i32(libc::EOPNOTSUPP));
        }
        let res = self
            .fs
            .fallocate(to_ext3(ino), offset, length, keep_size, req.uid() == 0);
        self.empty(reply, res);
    }
}
