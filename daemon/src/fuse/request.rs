//! The transport-neutral shape of a FUSE request and its answer.
//!
//! Two transports carry requests: fuser's /dev/fuse session
//! ([`super::fuser_adapter`]) and the io_uring rings ([`super::uring`]).
//! Each turns what the kernel sent into an [`Op`], hands it to a
//! [`Handler`] with a [`Responder`], and turns the [`Answer`] back into the
//! kernel's bytes. What an operation *does* lives once, in the handler.

use std::sync::Arc;
use std::time::Duration;

pub use fuser::Errno;

/// How long the kernel may cache entries (positive and negative) and
/// attributes: a day, as virtiofs's cache=always does. One image has one
/// writer (the daemon holds its lock), and every change to a name or an
/// inode either goes through the kernel, which updates or invalidates its
/// own copy (fs/fuse/dir.c: fuse_dir_changed, fuse_entry_unlinked,
/// fuse_invalidate_attr after link, rename, setxattr), or is made by the
/// daemon on its own (atime at an access, set-ID bits dropped, an ioctl's
/// ctime, blocks allocated by fallocate), and then the daemon tells the
/// kernel at once ([`KernelCache::attributes_changed`]). At 1 s every
/// path walk and stat of a tree older than a second went back to the
/// daemon (a LOOKUP and a GETATTR per file read).
pub const TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// A FUSE node id: 1 is the root.
pub type NodeId = u64;

/// Who sent a request.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ctx {
    pub unique: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    /// The request is served on a thread that serves every request from
    /// its CPU (an io_uring queue): work that may sleep goes elsewhere.
    pub must_not_block: bool,
    /// The transport serves requests in batches and calls
    /// [`Handler::batch_done`] after each: work that gains from company
    /// (an fsync's commit) may wait for the batch's end.
    pub serves_batches: bool,
}

/// A time in a SETATTR: a given time, or the daemon's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeSet {
    At { sec: i64, nsec: u32 },
    Now,
}

/// The attribute changes of a SETATTR (`fuse_setattr_in`, by `valid` bit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetattrIn {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeSet>,
    pub mtime: Option<TimeSet>,
    /// (sec, nsec)
    pub ctime: Option<(i64, u32)>,
}

/// A request, decoded. Names and data borrow from the transport's buffer.
#[derive(Debug)]
pub enum Op<'a> {
    Lookup {
        parent: NodeId,
        name: &'a [u8],
    },
    Getattr {
        ino: NodeId,
    },
    /// FUSE_STATX: the attributes and the creation time. Only the io_uring
    /// transport decodes it; fuser 0.18 answers ENOSYS itself, and the
    /// kernel then asks GETATTR and reports no btime.
    Statx {
        ino: NodeId,
    },
    Setattr {
        ino: NodeId,
        set: SetattrIn,
    },
    Readlink {
        ino: NodeId,
    },
    Symlink {
        parent: NodeId,
        name: &'a [u8],
        target: &'a [u8],
    },
    Mknod {
        parent: NodeId,
        name: &'a [u8],
        mode: u32,
        umask: u32,
        rdev: u32,
    },
    Mkdir {
        parent: NodeId,
        name: &'a [u8],
        mode: u32,
        umask: u32,
    },
    Unlink {
        parent: NodeId,
        name: &'a [u8],
    },
    Rmdir {
        parent: NodeId,
        name: &'a [u8],
    },
    /// RENAME and RENAME2; `flags` are renameat2's.
    Rename {
        parent: NodeId,
        name: &'a [u8],
        newparent: NodeId,
        newname: &'a [u8],
        flags: u32,
    },
    Link {
        ino: NodeId,
        newparent: NodeId,
        newname: &'a [u8],
    },
    Open {
        ino: NodeId,
        flags: i32,
    },
    Read {
        ino: NodeId,
        /// The handle OPEN answered (see handler.rs, `FH_ATIME_ON_READ`).
        fh: u64,
        offset: u64,
        size: u32,
    },
    Write {
        ino: NodeId,
        offset: u64,
        data: &'a [u8],
        /// FUSE_WRITE_CACHE: a write-back from the page cache, whose
        /// mtime and ctime the kernel sends itself.
        from_cache: bool,
        /// FUSE_WRITE_KILL_SUIDGID: the caller lacks CAP_FSETID, so the
        /// write drops the set-ID bits (FUSE_HANDLE_KILLPRIV_V2).
        kill_suidgid: bool,
    },
    Statfs,
    Release {
        ino: NodeId,
    },
    Fsync {
        ino: NodeId,
        datasync: bool,
    },
    Setxattr {
        ino: NodeId,
        name: &'a [u8],
        value: &'a [u8],
        flags: i32,
    },
    Getxattr {
        ino: NodeId,
        name: &'a [u8],
        size: u32,
    },
    Listxattr {
        ino: NodeId,
        size: u32,
    },
    Removexattr {
        ino: NodeId,
        name: &'a [u8],
    },
    Flush {
        ino: NodeId,
    },
    Opendir {
        ino: NodeId,
    },
    /// `size` is the kernel's buffer, when the transport knows it.
    Readdir {
        ino: NodeId,
        offset: u64,
        size: Option<u32>,
    },
    Readdirplus {
        ino: NodeId,
        offset: u64,
        size: Option<u32>,
    },
    Releasedir {
        ino: NodeId,
    },
    Fsyncdir {
        ino: NodeId,
        datasync: bool,
    },
    Access {
        ino: NodeId,
        mask: i32,
    },
    Create {
        parent: NodeId,
        name: &'a [u8],
        mode: u32,
        umask: u32,
        flags: i32,
    },
    /// open(O_TMPFILE) in `parent` (io_uring only: fuser 0.18 does not
    /// know the opcode, so over /dev/fuse the kernel is told ENOSYS).
    Tmpfile {
        parent: NodeId,
        mode: u32,
        umask: u32,
    },
    Ioctl {
        ino: NodeId,
        cmd: u32,
        /// The caller's argument (a pointer into its memory); 0 where the
        /// transport does not carry it (fuser's /dev/fuse session).
        arg: u64,
        in_data: &'a [u8],
        out_size: u32,
    },
    Fallocate {
        ino: NodeId,
        offset: u64,
        length: u64,
        mode: i32,
    },
    CopyFileRange {
        ino_in: NodeId,
        offset_in: u64,
        ino_out: NodeId,
        offset_out: u64,
        len: u64,
        flags: u64,
    },
    Lseek {
        ino: NodeId,
        offset: u64,
        whence: i32,
    },
    /// An opcode the transport decoded but no handler serves.
    Unsupported {
        opcode: u32,
    },
}

impl Op<'_> {
    /// The operation's name, for logs and spans.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Lookup { .. } => "lookup",
            Op::Getattr { .. } => "getattr",
            Op::Statx { .. } => "statx",
            Op::Setattr { .. } => "setattr",
            Op::Readlink { .. } => "readlink",
            Op::Symlink { .. } => "symlink",
            Op::Mknod { .. } => "mknod",
            Op::Mkdir { .. } => "mkdir",
            Op::Unlink { .. } => "unlink",
            Op::Rmdir { .. } => "rmdir",
            Op::Rename { .. } => "rename",
            Op::Link { .. } => "link",
            Op::Open { .. } => "open",
            Op::Read { .. } => "read",
            Op::Write { .. } => "write",
            Op::Statfs => "statfs",
            Op::Release { .. } => "release",
            Op::Fsync { .. } => "fsync",
            Op::Setxattr { .. } => "setxattr",
            Op::Getxattr { .. } => "getxattr",
            Op::Listxattr { .. } => "listxattr",
            Op::Removexattr { .. } => "removexattr",
            Op::Flush { .. } => "flush",
            Op::Opendir { .. } => "opendir",
            Op::Readdir { .. } => "readdir",
            Op::Readdirplus { .. } => "readdirplus",
            Op::Releasedir { .. } => "releasedir",
            Op::Fsyncdir { .. } => "fsyncdir",
            Op::Access { .. } => "access",
            Op::Create { .. } => "create",
            Op::Tmpfile { .. } => "tmpfile",
            Op::Ioctl { .. } => "ioctl",
            Op::Fallocate { .. } => "fallocate",
            Op::CopyFileRange { .. } => "copy_file_range",
            Op::Lseek { .. } => "lseek",
            Op::Unsupported { .. } => "unsupported",
        }
    }

    /// The node the operation is on (the parent for name operations).
    pub fn node(&self) -> NodeId {
        match *self {
            Op::Lookup { parent, .. }
            | Op::Symlink { parent, .. }
            | Op::Mknod { parent, .. }
            | Op::Mkdir { parent, .. }
            | Op::Unlink { parent, .. }
            | Op::Rmdir { parent, .. }
            | Op::Rename { parent, .. }
            | Op::Create { parent, .. }
            | Op::Tmpfile { parent, .. } => parent,
            Op::Getattr { ino }
            | Op::Statx { ino }
            | Op::Setattr { ino, .. }
            | Op::Readlink { ino }
            | Op::Link { ino, .. }
            | Op::Open { ino, .. }
            | Op::Read { ino, .. }
            | Op::Write { ino, .. }
            | Op::Release { ino }
            | Op::Fsync { ino, .. }
            | Op::Setxattr { ino, .. }
            | Op::Getxattr { ino, .. }
            | Op::Listxattr { ino, .. }
            | Op::Removexattr { ino, .. }
            | Op::Flush { ino }
            | Op::Opendir { ino }
            | Op::Readdir { ino, .. }
            | Op::Readdirplus { ino, .. }
            | Op::Releasedir { ino }
            | Op::Fsyncdir { ino, .. }
            | Op::Access { ino, .. }
            | Op::Ioctl { ino, .. }
            | Op::Fallocate { ino, .. }
            | Op::Lseek { ino, .. } => ino,
            Op::CopyFileRange { ino_in, .. } => ino_in,
            Op::Statfs | Op::Unsupported { .. } => 0,
        }
    }
}

/// An inode's attributes as FUSE carries them (`struct fuse_attr`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attr {
    pub ino: NodeId,
    pub size: u64,
    pub blocks: u64,
    pub atime: (i64, u32),
    pub mtime: (i64, u32),
    pub ctime: (i64, u32),
    /// st_mode: type and permission bits.
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub blksize: u32,
}

/// A LOOKUP-style answer (`struct fuse_entry_out`). Node 0 is a negative
/// entry: the name does not exist, and the kernel may remember that.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EntryOut {
    pub attr: Attr,
    pub generation: u64,
}

impl EntryOut {
    pub fn negative() -> EntryOut {
        EntryOut::default()
    }
}

/// OPEN, OPENDIR and the open half of CREATE (`struct fuse_open_out`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenOut {
    pub fh: u64,
    /// FOPEN_* flags.
    pub flags: u32,
}

/// STATFS (`struct fuse_kstatfs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatfsOut {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}

/// One READDIR entry (`struct fuse_dirent`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub ino: NodeId,
    /// The offset of the entry after this one.
    pub next: u64,
    /// DT_* type.
    pub kind: u32,
    pub name: Vec<u8>,
}

/// One READDIRPLUS entry (`struct fuse_direntplus`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirPlusEntry {
    pub entry: EntryOut,
    pub dirent: DirEntry,
}

/// What a READDIRPLUS handler does with the entries the kernel received.
pub type OnSent = Box<dyn FnOnce(&[DirPlusEntry]) + Send>;

/// A READDIRPLUS answer. The kernel takes a lookup reference on every
/// entry it receives but `.` and `..`, so the handler must learn which
/// entries fit in the reply: the transport calls [`DirPlus::sent`].
pub struct DirPlus {
    pub entries: Vec<DirPlusEntry>,
    pub on_sent: Option<OnSent>,
}

impl DirPlus {
    /// Tells the handler that the first `n` entries went to the kernel.
    pub fn sent(mut self, n: usize) {
        if let Some(f) = self.on_sent.take() {
            f(&self.entries[..n.min(self.entries.len())]);
        }
    }
}

impl std::fmt::Debug for DirPlus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirPlus")
            .field("entries", &self.entries.len())
            .finish()
    }
}

/// A successful answer. Which kind goes with which [`Op`] is the kernel's
/// protocol; a transport that is given the wrong kind answers EIO.
#[derive(Debug)]
pub enum Answer {
    /// No reply body (UNLINK, RELEASE, FSYNC, ...).
    Empty,
    Entry(EntryOut),
    Attr(Attr),
    /// STATX: the attributes and, where the inode keeps one, its creation
    /// time (ext3's large inodes: `i_crtime`).
    Statx(Attr, Option<(i64, u32)>),
    /// READ, READLINK, GETXATTR/LISTXATTR contents, IOCTL out data.
    Data(Vec<u8>),
    Written(u32),
    Open(OpenOut),
    Create(EntryOut, OpenOut),
    Statfs(StatfsOut),
    /// GETXATTR/LISTXATTR asked with size 0: the size needed.
    XattrSize(u32),
    Dir(Vec<DirEntry>),
    DirPlus(DirPlus),
    /// IOCTL: the result value and the out data.
    Ioctl {
        result: i32,
        data: Vec<u8>,
    },
    /// LSEEK: the new offset.
    Lseek(u64),
}

pub type Outcome = Result<Answer, Errno>;

/// Where an answer goes. A transport gives one per request; the handler
/// calls [`Responder::respond`] exactly once, from any thread (an fsync
/// answers from the commit thread).
pub trait Responder: Send + 'static {
    fn respond(self, outcome: Outcome);
}

/// What serves requests: jbdfs's [`super::JbdFuse`], or the no-storage
/// floor of examples/fuse_floor.rs.
/// What a handler may tell the kernel outside a reply (FUSE notifications,
/// which travel over /dev/fuse whatever the transport).
pub trait KernelCache: Send + Sync {
    /// The kernel's cached attributes of `ino` are stale (not its pages).
    fn attributes_changed(&self, ino: NodeId);
}

pub trait Handler: Send + Sync + 'static {
    fn dispatch(&self, ctx: &Ctx, op: Op<'_>, reply: impl Responder);
    /// Hands the handler the way to the kernel's caches, once mounted.
    fn set_kernel_cache(&self, _kernel: Arc<dyn KernelCache>) {}
    /// The transport has dispatched every request it had at hand and is
    /// about to wait for more: what requests deferred to this point (with
    /// `Ctx::serves_batches`) must start now.
    fn batch_done(&self) {}
    /// How long the transport may go on serving this CPU's other callers
    /// before calling [`Handler::batch_done`], so that their deferred work
    /// joins (see `Journal::gather_budget`); None to call it now.
    fn gather_budget(&self) -> Option<std::time::Duration> {
        None
    }
    /// The transport gathered this long before [`Handler::batch_done`].
    fn note_gathered(&self, _waited: std::time::Duration) {}
    /// FORGET and BATCH_FORGET: the kernel dropped `nlookup` references.
    fn forget(&self, ino: NodeId, nlookup: u64);
    /// The session ended (FUSE_DESTROY, or the device closed).
    fn destroy(&self);
    /// Whether to ask for FUSE_POSIX_ACL (and FUSE_DONT_MASK) at
    /// FUSE_INIT: the handler stores, inherits and keeps ACLs in step
    /// with modes, and applies the umask itself.
    fn posix_acl(&self) -> bool {
        false
    }
}

/// renameat2's flags.
pub const RENAME_NOREPLACE: u32 = 1;
pub const RENAME_EXCHANGE: u32 = 2;
pub const RENAME_WHITEOUT: u32 = 4;

/// `struct fuse_dirent` is 24 bytes and a name, padded to 8.
pub fn dirent_size(name_len: usize) -> usize {
    (24 + name_len + 7) & !7
}

/// `struct fuse_direntplus` is a 128-byte entry_out before the dirent.
pub fn direntplus_size(name_len: usize) -> usize {
    128 + dirent_size(name_len)
}
