//! What each FUSE operation does on a jbdfs filesystem: decode nothing,
//! encode nothing, call [`jbdfs::fs`] and say what to answer. Both
//! transports (fuser's /dev/fuse session and the io_uring rings) call this
//! one [`Handler`].

use std::sync::Arc;

use jbdfs::format::acl::AclType;
use jbdfs::format::inode::{Inode, Timestamp};
use jbdfs::format::InodeNo;
use jbdfs::fs::namei::{Caller, RenameFlags, SetAttr};
use jbdfs::fs::xattr::SetMode;
use jbdfs::fs::{Filesystem, FsError};
use jbdfs::journal::CommitStart;

use super::attr;
use super::ioctl::{self, FsIoctl};
use super::request::*;
use super::{caps, runners};

/// FOPEN_DIRECT_IO, FOPEN_KEEP_CACHE and FOPEN_CACHE_DIR
/// (`include/uapi/linux/fuse.h`).
const FOPEN_DIRECT_IO: u32 = 1 << 0;
const FOPEN_KEEP_CACHE: u32 = 1 << 1;
const FOPEN_CACHE_DIR: u32 = 1 << 3;

/// At most this many fsyncs wait on runners side by side; past it they
/// queue for the first runner to come free.
const MAX_FSYNC_RUNNERS: usize = 256;

/// The file handle of an open for reading and writing: its READs are the
/// accesses that move atime (such an open may only write: xfs_io's, a
/// database's), where an open for reading only counts at the open.
const FH_ATIME_ON_READ: u64 = 1;

thread_local! {
    /// Each thread's read buffer, kept across requests (see
    /// `Filesystem::read_buf`): a fresh zeroed buffer per read cost about
    /// 5% of a sequential read's daemon time. A transport gives it back
    /// with [`recycle`] once the answer is sent.
    static READ_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Returns an answer's data buffer to this thread for the next read.
pub fn recycle(buf: Vec<u8>) {
    READ_BUF.with_borrow_mut(|b| {
        if buf.capacity() > b.capacity() {
            *b = buf;
        }
    });
}

fn take_read_buf() -> Vec<u8> {
    READ_BUF.with_borrow_mut(std::mem::take)
}

/// The errno for an error: the one place where errors become numbers.
pub fn errno(e: &FsError) -> Errno {
    if let FsError::Corrupt(_) | FsError::Io(_) = e {
        tracing::error!("{e}");
    }
    Errno::from_i32(e.errno())
}

/// ext3's root is inode 2; FUSE's is 1.
pub fn to_ext3(ino: NodeId) -> InodeNo {
    if ino == 1 {
        InodeNo(2)
    } else {
        InodeNo(ino.min(u32::MAX as u64) as u32)
    }
}

pub fn to_fuse(ino: InodeNo) -> NodeId {
    if ino.0 == 2 {
        1
    } else {
        ino.0 as u64
    }
}

fn caller(ctx: &Ctx) -> Caller {
    Caller {
        uid: ctx.uid,
        gid: ctx.gid,
    }
}

fn time(t: TimeSet) -> Timestamp {
    match t {
        TimeSet::At { sec, nsec } => Timestamp { sec, nsec },
        TimeSet::Now => {
            let (sec, nsec) = jbdfs::util::now();
            Timestamp { sec, nsec }
        }
    }
}

/// Whether a SETATTR gives a time explicitly (the kernel's
/// ATTR_TIMES_SET, refused on an append-only file), as far as FUSE tells:
/// only the atime says so reliably. With the writeback cache the kernel
/// owns a regular file's mtime and sends it as an explicit time whether
/// the caller gave one or asked for "now" (`touch`), and after writes it
/// sends the mtime alone by itself (fuse_flush_times); an append must not
/// fail on either. So utimensat with an explicit mtime beside a "now" or
/// omitted atime passes on an append-only file, where ext3 refuses it.
fn times_set(set: &SetattrIn) -> bool {
    matches!(set.atime, Some(TimeSet::At { .. }))
}

fn einval() -> Errno {
    Errno::from_i32(libc::EINVAL)
}

/// getxattr/listxattr: the size when asked for it, ERANGE when the
/// caller's buffer is too small.
fn sized(data: Vec<u8>, size: u32) -> Outcome {
    if size == 0 {
        Ok(Answer::XattrSize(data.len() as u32))
    } else if (size as usize) < data.len() {
        Err(Errno::from_i32(libc::ERANGE))
    } else {
        Ok(Answer::Data(data))
    }
}

thread_local! {
    /// This thread deferred an fsync's commit to the end of its batch.
    static COMMIT_OWED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// How long this thread may gather before that commit (the longest
    /// any of its deferring fsyncs was allowed).
    static GATHER: std::cell::Cell<Option<std::time::Duration>> = const { std::cell::Cell::new(None) };
}

/// The FUSE face of a mounted filesystem.
pub struct JbdFuse {
    fs: Arc<Filesystem>,
    /// Where fsyncs wait when the device is slow (see runners.rs).
    fsync_runners: Arc<runners::Runners>,
    /// FOPEN_* flags every open and create answers: the kernel's page
    /// cache is kept (every change to a file passes through this mount,
    /// so cached pages are never stale), or bypassed with `-o direct_io`.
    open_flags: u32,
    /// Tells the kernel its cached attributes went stale. [set once, at
    /// mount]
    kernel: std::sync::OnceLock<Arc<dyn KernelCache>>,
}

impl JbdFuse {
    pub fn new(fs: Arc<Filesystem>) -> Self {
        JbdFuse {
            fs,
            fsync_runners: runners::Runners::new("jbdfs-fsync", MAX_FSYNC_RUNNERS),
            open_flags: FOPEN_KEEP_CACHE,
            kernel: std::sync::OnceLock::new(),
        }
    }

    /// An open for reading only (or an opendir), or a READ through an open
    /// for reading and writing, is the access that moves atime: the kernel
    /// leaves atime to FUSE filesystems, and reads served from the page
    /// cache never reach the daemon. Returns whether it moved; a failure to
    /// move it does not fail the request.
    fn accessed(&self, ino: InodeNo) -> bool {
        self.fs
            .touch_atime(ino, self.fs.atime_policy())
            .unwrap_or_else(|e| {
                tracing::debug!(ino = ino.0, "atime not updated: {e}");
                false
            })
    }

    /// `-o direct_io`: open files bypass the kernel's page cache.
    pub fn with_direct_io(mut self, on: bool) -> Self {
        self.open_flags = if on {
            FOPEN_DIRECT_IO
        } else {
            FOPEN_KEEP_CACHE
        };
        self
    }

    pub fn direct_io(&self) -> bool {
        self.open_flags & FOPEN_DIRECT_IO != 0
    }

    /// The errno for a failed request, after the errors= policy has seen
    /// the error (corruption found while serving it).
    fn fail(&self, e: &FsError) -> Errno {
        self.fs.report_error(e, "jbdfs_fuse_request");
        errno(e)
    }

    /// FOPEN_* flags for an open of a file: a synchronous file (chattr
    /// +S) bypasses the page cache, so that each write(2) reaches the
    /// daemon, which commits it before answering, as ext3 does for IS_SYNC.
    fn open_flags_for(&self, sync: bool) -> u32 {
        if sync {
            FOPEN_DIRECT_IO
        } else {
            self.open_flags
        }
    }

    fn done<T>(&self, res: Result<T, FsError>, answer: impl FnOnce(T) -> Answer) -> Outcome {
        res.map(answer).map_err(|e| self.fail(&e))
    }

    fn attr(&self, ino: InodeNo, inode: &Inode) -> Attr {
        attr::file_attr(to_fuse(ino), inode, self.fs.block_size())
    }

    /// The generation is the inode's `i_generation`, which file handles
    /// carry (FUSE_EXPORT_SUPPORT): a handle of an inode since freed and
    /// reused no longer matches. The kernel wants the root's to be 0.
    fn entry(&self, ino: InodeNo, inode: &Inode) -> EntryOut {
        let fuse = to_fuse(ino);
        EntryOut {
            attr: self.attr(ino, inode),
            generation: if fuse == 1 {
                0
            } else {
                inode.i_generation as u64
            },
        }
    }

    /// An entry the kernel will hold a lookup reference on.
    fn entry_answer(&self, res: Result<(InodeNo, Inode), FsError>) -> Outcome {
        self.done(res, |(ino, inode)| {
            self.fs.remember(ino);
            Answer::Entry(self.entry(ino, &inode))
        })
    }

    /// An fsync whose reply is sent by the thread that finishes the
    /// commit: the calling thread goes back to the kernel for the next
    /// request instead of sleeping until the commit ends. On a device
    /// whose commits are slow, and on a ring thread whenever batching may
    /// sleep (it serves every request from its CPU), the data write, the
    /// batching wait and the commit run on a runner instead.
    ///
    /// On a ring thread the commit itself waits for the end of the batch
    /// of requests the queue is serving ([`Handler::batch_done`]): every
    /// fsync in the batch then shares it.
    fn fsync_then_reply(&self, ctx: &Ctx, ino: NodeId, datasync: bool, reply: impl Responder) {
        let fs = self.fs.clone();
        let pid = ctx.pid;
        let job = move |start: CommitStart| {
            jbdfs::fs::set_caller(pid);
            let reporter = fs.clone();
            let done = move |res: Result<(), FsError>| match res {
                Ok(()) => reply.respond(Ok(Answer::Empty)),
                Err(e) => {
                    reporter.report_error(&e, "jbdfs_fsync");
                    reply.respond(Err(errno(&e)));
                }
            };
            fs.fsync_then(to_ext3(ino), datasync, start, Box::new(done));
        };
        let journal = self.fs.journal();
        let off_thread =
            journal.commits_are_slow() || (ctx.must_not_block && journal.batching_sleeps());
        if !off_thread {
            if !ctx.serves_batches {
                return job(CommitStart::Now);
            }
            COMMIT_OWED.set(true);
            GATHER.set(GATHER.get().max(journal.gather_budget(pid)));
            return job(CommitStart::Deferred);
        }
        let span = tracing::Span::current();
        self.fsync_runners.run(Box::new(move || {
            let _s = span.entered();
            job(CommitStart::Now);
        }));
    }

    /// LOOKUP. With FUSE_EXPORT_SUPPORT the kernel also looks up "." on a
    /// node it has forgotten, to open a file handle (any kind of inode,
    /// which must still be in use), and ".." on a directory to connect
    /// one to the tree; ".." is the directory's own entry.
    fn lookup(&self, parent: NodeId, name: &[u8]) -> Outcome {
        if name == b"." {
            let ino = to_ext3(parent);
            return self.entry_answer(self.fs.inode_for_handle(ino).map(|i| (ino, i)));
        }
        match self.fs.lookup(to_ext3(parent), name) {
            // A name that is not there is answered with node 0 and a
            // timeout: the kernel keeps the negative dentry, so asking again
            // (a build's include search, a stat before a create) costs no
            // round trip. Every create goes through the kernel, which turns
            // the negative entry positive itself.
            Err(FsError::NotFound) => Ok(Answer::Entry(EntryOut::negative())),
            res => self.entry_answer(res),
        }
    }

    fn getattr(&self, ino: NodeId) -> Outcome {
        let ext = to_ext3(ino);
        self.done(self.fs.getattr(ext), |i| Answer::Attr(self.attr(ext, &i)))
    }

    /// GETATTR with the creation time, which ext3's large inodes keep
    /// (`i_crtime`, set when the inode is made, as ext4 sets it); a
    /// 128-byte inode has none, and the answer then says so.
    fn statx(&self, ino: NodeId) -> Outcome {
        let ext = to_ext3(ino);
        self.done(self.fs.getattr(ext), |i| {
            let btime = i
                .has_extra_times()
                .then_some((i.i_crtime.sec, i.i_crtime.nsec));
            Answer::Statx(self.attr(ext, &i), btime)
        })
    }

    fn setattr(&self, ctx: &Ctx, ino: NodeId, set: &SetattrIn) -> Outcome {
        let ext = to_ext3(ino);
        let mode = match set.mode {
            Some(m) => Some(m as u16),
            None => self.set_id_kept(ctx, ext, set)?,
        };
        let changes = SetAttr {
            mode,
            uid: set.uid,
            gid: set.gid,
            size: set.size,
            atime: set.atime.map(time),
            mtime: set.mtime.map(time),
            ctime: set.ctime.map(|(sec, nsec)| Timestamp { sec, nsec }),
            times_set: times_set(set),
        };
        let res = self.fs.setattr(ext, &changes, caller(ctx));
        self.done(res, |i| Answer::Attr(self.attr(ext, &i)))
    }

    /// The mode a chown or a truncate leaves a regular file with set-ID
    /// bits, or None when it keeps its mode. Under FUSE_HANDLE_KILLPRIV_V2
    /// the kernel leaves this to the filesystem (fs/fuse/dir.c,
    /// fuse_setattr drops ATTR_KILL_SUID/SGID and the mode they implied),
    /// which spares it a GETATTR before every chown. The rules are the
    /// VFS's: a chown drops S_ISUID whoever asks, and S_ISGID where the
    /// group may execute or the caller is neither in the file's group nor
    /// capable (chown_common, setattr_should_drop_sgid); a truncate drops
    /// them only for a caller without CAP_FSETID (do_truncate,
    /// dentry_needs_remove_privs). The capability is read from /proc only
    /// for a file that has a set-ID bit to lose.
    fn set_id_kept(&self, ctx: &Ctx, ino: InodeNo, set: &SetattrIn) -> Result<Option<u16>, Errno> {
        let chown = set.uid.is_some() || set.gid.is_some();
        if !chown && set.size.is_none() {
            return Ok(None);
        }
        let inode = self.fs.getattr(ino).map_err(|e| self.fail(&e))?;
        let mode = inode.i_mode;
        let set_id = mode & (libc::S_ISUID | libc::S_ISGID) as u16;
        if set_id == 0 || !inode.is_reg() {
            return Ok(None);
        }
        let group_exec = mode & libc::S_IXGRP as u16 != 0;
        let fsetid = || caps::flags_caller(ctx).capable(caps::CAP_FSETID);
        let mut kill = 0;
        if chown {
            kill |= libc::S_ISUID as u16;
            if group_exec || (!keeps_sgid(ctx, inode.i_gid) && !fsetid()) {
                kill |= libc::S_ISGID as u16;
            }
        } else if !fsetid() {
            kill |= libc::S_ISUID as u16;
            if group_exec || !keeps_sgid(ctx, inode.i_gid) {
                kill |= libc::S_ISGID as u16;
            }
        }
        Ok((mode & kill != 0).then_some(mode & !kill & 0o7777))
    }

    /// mknod, mkdir and create: the umask's permission bits, which the
    /// filesystem applies unless the parent's default ACL decides instead
    /// (with FUSE_DONT_MASK the kernel leaves the mode to us; without it
    /// the mode comes masked already, and masking again changes nothing).
    fn umask(umask: u32) -> u16 {
        (umask & 0o777) as u16
    }

    fn rename(
        &self,
        ctx: &Ctx,
        (p, name): (NodeId, &[u8]),
        (np, newname): (NodeId, &[u8]),
        flags: u32,
    ) -> Outcome {
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT) != 0 {
            return Err(einval());
        }
        let f = RenameFlags {
            noreplace: flags & RENAME_NOREPLACE != 0,
            exchange: flags & RENAME_EXCHANGE != 0,
            whiteout: (flags & RENAME_WHITEOUT != 0).then(|| caller(ctx)),
        };
        let res = self.fs.rename(to_ext3(p), name, to_ext3(np), newname, f);
        self.done(res, |()| Answer::Empty)
    }

    fn link(&self, ino: NodeId, newparent: NodeId, newname: &[u8]) -> Outcome {
        let ext = to_ext3(ino);
        let res = self.fs.link(ext, to_ext3(newparent), newname);
        self.entry_answer(res.map(|inode| (ext, inode)))
    }

    fn read(&self, ino: NodeId, fh: u64, offset: u64, size: u32) -> Outcome {
        if fh & FH_ATIME_ON_READ != 0 {
            self.access_seen(ino);
        }
        let mut buf = take_read_buf();
        match self.fs.read_buf(to_ext3(ino), offset, size, &mut buf) {
            Ok(n) => {
                buf.truncate(n);
                Ok(Answer::Data(buf))
            }
            Err(e) => {
                recycle(buf);
                Err(self.fail(&e))
            }
        }
    }

    /// OPENDIR: the directory's listing may stay in the kernel's cache
    /// (FOPEN_CACHE_DIR, kept across opens with FOPEN_KEEP_CACHE), so a
    /// listing read before costs OPENDIR and RELEASEDIR only. The kernel
    /// drops the cache when the directory changes through it
    /// (fuse_dir_changed), the only way it can change. OPENDIR itself is
    /// answered, not ENOSYS (which would stop it for good): it is the
    /// access that moves a directory's atime, which a cached listing
    /// never reports.
    fn opendir(&self, ino: NodeId) -> Outcome {
        match self.fs.getattr(to_ext3(ino)) {
            Ok(i) if i.is_dir() => {
                self.access_seen(ino);
                Ok(Answer::Open(OpenOut {
                    fh: 0,
                    flags: FOPEN_CACHE_DIR | FOPEN_KEEP_CACHE,
                }))
            }
            Ok(_) => Err(Errno::from_i32(libc::ENOTDIR)),
            Err(e) => Err(self.fail(&e)),
        }
    }

    fn readdir(&self, ino: NodeId, offset: u64) -> Outcome {
        let res = self.fs.readdir(to_ext3(ino), offset, 256);
        self.done(res, |entries| {
            let list = entries
                .into_iter()
                .map(|e| DirEntry {
                    ino: to_fuse(e.ino),
                    next: e.next,
                    kind: attr::dtype_of_dirent(e.file_type),
                    name: e.name,
                })
                .collect();
            Answer::Dir(list)
        })
    }

    fn readdirplus(&self, ino: NodeId, offset: u64) -> Outcome {
        let listed = self
            .fs
            .readdir(to_ext3(ino), offset, 128)
            .map_err(|e| self.fail(&e))?;
        let mut entries = Vec::with_capacity(listed.len());
        for e in listed {
            let inode = self.fs.getattr(e.ino).map_err(|err| self.fail(&err))?;
            entries.push(DirPlusEntry {
                entry: self.entry(e.ino, &inode),
                dirent: DirEntry {
                    ino: to_fuse(e.ino),
                    next: e.next,
                    kind: attr::dtype_of_dirent(e.file_type),
                    name: e.name,
                },
            });
        }
        let fs = self.fs.clone();
        // The kernel takes a lookup reference for every entry but . and ..
        let on_sent = move |sent: &[DirPlusEntry]| {
            for e in sent {
                if e.dirent.name != b"." && e.dirent.name != b".." {
                    fs.remember(to_ext3(e.dirent.ino));
                }
            }
        };
        Ok(Answer::DirPlus(DirPlus {
            entries,
            on_sent: Some(Box::new(on_sent)),
        }))
    }

    fn statfs(&self) -> Outcome {
        self.done(self.fs.statfs(), |s| {
            Answer::Statfs(StatfsOut {
                blocks: s.blocks,
                bfree: s.free_blocks,
                bavail: s.available,
                files: s.inodes,
                ffree: s.free_inodes,
                bsize: s.block_size,
                namelen: s.name_max,
                frsize: s.block_size,
            })
        })
    }

    fn setxattr(&self, ctx: &Ctx, ino: NodeId, name: &[u8], value: &[u8], flags: i32) -> Outcome {
        let mode = match flags {
            0 => SetMode::Either,
            libc::XATTR_CREATE => SetMode::Create,
            libc::XATTR_REPLACE => SetMode::Replace,
            _ => return Err(einval()),
        };
        let res = match AclType::of_name(name) {
            // The kernel sends a setfacl here (fuse_set_acl) and leaves the
            // mode to us; whether the setgid bit survives depends on the
            // caller, whom only this layer knows.
            Some(kind) => {
                let keep = |gid| keeps_sgid(ctx, gid);
                self.fs
                    .set_acl(to_ext3(ino), kind, Some(value), mode, &keep)
            }
            None => self.fs.setxattr(to_ext3(ino), name, value, mode),
        };
        self.done(res, |()| Answer::Empty)
    }

    fn create(&self, ctx: &Ctx, parent: NodeId, name: &[u8], mode: u16, umask: u16) -> Outcome {
        let made = self
            .fs
            .mknod_umask(to_ext3(parent), name, mode, 0, caller(ctx), umask);
        self.open_created(made)
    }

    /// O_TMPFILE: a file with no name, on the orphan list until it is
    /// linked in (linkat with AT_EMPTY_PATH) or its last user lets go.
    fn tmpfile(&self, ctx: &Ctx, parent: NodeId, mode: u16, umask: u16) -> Outcome {
        let made = self.fs.tmpfile(to_ext3(parent), mode, caller(ctx), umask);
        self.open_created(made)
    }

    /// CREATE's and TMPFILE's answer: the new inode, open, and known to
    /// the kernel.
    fn open_created(&self, made: Result<(InodeNo, Inode), FsError>) -> Outcome {
        let opened = made.and_then(|(ino, inode)| self.fs.open(ino).map(|()| (ino, inode)));
        self.done(opened, |(ino, inode)| {
            self.fs.remember(ino);
            let open = OpenOut {
                fh: 0,
                flags: self.open_flags_for(jbdfs::fs::flags::is_sync(&inode)),
            };
            Answer::Create(self.entry(ino, &inode), open)
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn copy_file_range(
        &self,
        ctx: &Ctx,
        ino_in: NodeId,
        offset_in: u64,
        ino_out: NodeId,
        offset_out: u64,
        len: u64,
        flags: u64,
    ) -> Outcome {
        if flags != 0 {
            return Err(einval());
        }
        let (src, dst) = (to_ext3(ino_in), to_ext3(ino_out));
        let copied = self
            .fs
            .copy_range(src, offset_in, dst, offset_out, len, ctx.uid == 0);
        self.done(copied, |n| Answer::Written(n as u32))
    }

    /// FALLOCATE: allocation (modes 0 and KEEP_SIZE) and hole punching
    /// (PUNCH_HOLE, which Linux accepts only with KEEP_SIZE). Anything else,
    /// ZERO_RANGE included, is EOPNOTSUPP, as ext4 answers for a
    /// block-mapped file (docs/ARCHITECTURE.md, "fallocate").
    fn fallocate(&self, ctx: &Ctx, ino: NodeId, offset: u64, length: u64, mode: i32) -> Outcome {
        const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        let res = if mode == PUNCH {
            self.fs.punch_hole(to_ext3(ino), offset, length)
        } else if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
            return Err(Errno::from_i32(libc::EOPNOTSUPP));
        } else {
            let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
            self.fs
                .fallocate(to_ext3(ino), offset, length, keep_size, ctx.uid == 0)
        };
        let res = res.and_then(|()| self.remove_privs(ctx, ino));
        // The blocks allocated or punched out are the daemon's count, which
        // the kernel's cached i_blocks does not follow.
        if res.is_ok() {
            self.attributes_changed(ino);
        }
        self.done(res, |()| Answer::Empty)
    }

    /// Tells the kernel that its cached attributes of `ino` are stale.
    fn attributes_changed(&self, ino: NodeId) {
        if let Some(k) = self.kernel.get() {
            k.attributes_changed(ino);
        }
    }

    /// After a change to a file's contents: the set-ID bits the kernel's
    /// rule drops for this caller (root counts as holding CAP_FSETID), and
    /// the kernel told that its cached mode is stale when they changed.
    fn remove_privs(&self, ctx: &Ctx, ino: NodeId) -> Result<(), FsError> {
        if ctx.uid == 0 {
            return Ok(());
        }
        self.drop_set_id(ctx, ino)
    }

    /// Drops the set-ID bits for a caller without CAP_FSETID, as the VFS's
    /// setattr_should_drop_suidgid() would: S_ISUID always, S_ISGID where
    /// the group may execute or the caller is not in the file's group.
    fn drop_set_id(&self, ctx: &Ctx, ino: NodeId) -> Result<(), FsError> {
        let in_group = |gid| keeps_sgid(ctx, gid);
        if self.fs.remove_privs(to_ext3(ino), &in_group)? {
            self.attributes_changed(ino);
        }
        Ok(())
    }

    /// OPEN: the flags' checks (no writing open of an immutable file, no
    /// writing open of an append-only file without O_APPEND), then the
    /// open.
    fn open(&self, ino: NodeId, flags: i32) -> Outcome {
        let ext = to_ext3(ino);
        let opened = self
            .fs
            .may_open(ext, flags)
            .and_then(|how| self.fs.open(ext).map(|()| how));
        let mode = flags & libc::O_ACCMODE;
        // Under strictatime every access counts, so an open for reading
        // only counts its reads too, as an open for reading and writing
        // always does (an open that never reads moves nothing).
        let strict = self.fs.atime_policy().mode == jbdfs::fs::atime::AtimeMode::Strict;
        let on_read = mode == libc::O_RDWR || (mode == libc::O_RDONLY && strict);
        self.done(opened, |how| {
            if mode == libc::O_RDONLY && !on_read {
                self.access_seen(ino);
            }
            // Counted at its reads, an open drops the cached pages (no
            // FOPEN_KEEP_CACHE), so that its first read reaches the daemon.
            let (fh, flags) = match on_read {
                true => (
                    FH_ATIME_ON_READ,
                    self.open_flags_for(how.sync) & !FOPEN_KEEP_CACHE,
                ),
                false => (0, self.open_flags_for(how.sync)),
            };
            Answer::Open(OpenOut { fh, flags })
        })
    }

    /// An access moves atime by the mount's rules; the kernel keeps the
    /// pages, and is told that its copy of the attributes is stale when
    /// atime moved.
    fn access_seen(&self, ino: NodeId) {
        if self.accessed(to_ext3(ino)) {
            self.attributes_changed(ino);
        }
    }

    /// An ioctl's empty answer, once the kernel is told that its copy of
    /// the attributes is stale.
    fn ctime_moved(&self, ino: NodeId) -> Answer {
        self.attributes_changed(ino);
        Answer::Ioctl {
            result: 0,
            data: Vec::new(),
        }
    }

    /// IOCTL: ext3's flag and version ioctls (chattr, lsattr), the
    /// fsxattr pair, ext4's forced shutdown, the label pair and FITRIM;
    /// any other command is ENOTTY, what a file without the ioctl
    /// answers, and quietly, since programs probe them on every file.
    fn ioctl(
        &self,
        ctx: &Ctx,
        ino: NodeId,
        cmd: u32,
        arg: u64,
        input: &[u8],
        out_size: u32,
    ) -> Outcome {
        let req = match ioctl::decode(cmd, input, out_size) {
            Ok(Some(req)) => req,
            Ok(None) => return Err(Errno::from_i32(libc::ENOTTY)),
            Err(e) => return Err(Errno::from_i32(e)),
        };
        let ext = to_ext3(ino);
        let fs = &self.fs;
        let out = |data: Vec<u8>| Answer::Ioctl { result: 0, data };
        match req {
            FsIoctl::GetFlags => self.done(fs.get_flags(ext), |f| out(ioctl::int_out(f))),
            FsIoctl::GetVersion => self.done(fs.get_version(ext), |g| out(ioctl::int_out(g))),
            FsIoctl::FsGetXattr => self.done(fs.get_flags(ext), |f| out(ioctl::fsxattr_out(f))),
            // Each change moves ctime, which the kernel's copy of the
            // attributes must then forget (stat after chattr: generic/277).
            FsIoctl::SetFlags(flags) => {
                let res = fs.set_flags(ext, flags, &caps::flags_caller(ctx));
                self.done(res, |()| self.ctime_moved(ino))
            }
            FsIoctl::SetVersion(generation) => {
                let res = fs.set_version(ext, generation, &caps::flags_caller(ctx));
                self.done(res, |()| self.ctime_moved(ino))
            }
            FsIoctl::FsSetXattr(x) => {
                let current = fs.get_flags(ext).map_err(|e| self.fail(&e))?;
                let flags = ioctl::flags_from_fsxattr(current, &x).map_err(Errno::from_i32)?;
                let res = fs.set_flags(ext, flags, &caps::flags_caller(ctx));
                self.done(res, |()| self.ctime_moved(ino))
            }
            FsIoctl::Shutdown(flags) => {
                if !caps::sys_admin(ctx) {
                    return Err(Errno::from_i32(libc::EPERM));
                }
                let flags = match flags {
                    Some(f) => f,
                    None => ioctl::caller_u32(ctx.pid, cmd, arg).map_err(|e| {
                        tracing::warn!(
                            pid = ctx.pid,
                            "shutdown: cannot read the caller's flags: {e}"
                        );
                        Errno::from_i32(libc::EFAULT)
                    })?,
                };
                let mode = ioctl::shutdown_mode(flags).ok_or_else(einval)?;
                self.done(fs.shutdown(mode), |()| out(Vec::new()))
            }
            FsIoctl::GetLabel => Ok(out(ioctl::label_out(&fs.volume_name()))),
            FsIoctl::SetLabel(len, label) => {
                if !caps::sys_admin(ctx) {
                    return Err(Errno::from_i32(libc::EPERM));
                }
                self.done(fs.set_volume_name(&label[..len]), |()| out(Vec::new()))
            }
            FsIoctl::Trim { start, len, minlen } => {
                if !caps::sys_admin(ctx) {
                    return Err(Errno::from_i32(libc::EPERM));
                }
                let res = fs.trim(start, len, minlen);
                self.done(res, |n| out(ioctl::trim_out(start, n, minlen)))
            }
        }
    }

    /// Every operation that answers at once.
    fn answer(&self, ctx: &Ctx, op: Op<'_>) -> Outcome {
        let fs = &self.fs;
        let empty = |res: Result<(), FsError>| self.done(res, |()| Answer::Empty);
        match op {
            Op::Lookup { parent, name } => self.lookup(parent, name),
            Op::Getattr { ino } => self.getattr(ino),
            Op::Statx { ino } => self.statx(ino),
            Op::Setattr { ino, set } => self.setattr(ctx, ino, &set),
            Op::Readlink { ino } => self.done(fs.readlink(to_ext3(ino)), Answer::Data),
            Op::Symlink {
                parent,
                name,
                target,
            } => self.entry_answer(fs.symlink(to_ext3(parent), name, target, caller(ctx))),
            Op::Mknod {
                parent,
                name,
                mode,
                umask,
                rdev,
            } => {
                let (mode, umask) = (mode as u16, Self::umask(umask));
                let who = caller(ctx);
                self.entry_answer(fs.mknod_umask(to_ext3(parent), name, mode, rdev, who, umask))
            }
            Op::Mkdir {
                parent,
                name,
                mode,
                umask,
            } => {
                let (mode, umask) = (mode as u16, Self::umask(umask));
                self.entry_answer(fs.mkdir_umask(to_ext3(parent), name, mode, caller(ctx), umask))
            }
            Op::Unlink { parent, name } => empty(fs.unlink(to_ext3(parent), name)),
            Op::Rmdir { parent, name } => empty(fs.rmdir(to_ext3(parent), name)),
            Op::Rename {
                parent,
                name,
                newparent,
                newname,
                flags,
            } => self.rename(ctx, (parent, name), (newparent, newname), flags),
            Op::Link {
                ino,
                newparent,
                newname,
            } => self.link(ino, newparent, newname),
            Op::Open { ino, flags } => self.open(ino, flags),
            Op::Read {
                ino,
                fh,
                offset,
                size,
            } => self.read(ino, fh, offset, size),
            Op::Write {
                ino,
                offset,
                data,
                from_cache,
                kill_suidgid,
            } => {
                let res = match from_cache {
                    true => fs.write_back(to_ext3(ino), offset, data, ctx.uid == 0),
                    false => fs.write(to_ext3(ino), offset, data, ctx.uid == 0),
                };
                let res = match (res, kill_suidgid) {
                    (Ok(n), true) => self.drop_set_id(ctx, ino).map(|()| n),
                    (res, _) => res,
                };
                self.done(res, |n| Answer::Written(n as u32))
            }
            Op::Statfs => self.statfs(),
            Op::Release { ino } => empty(fs.release(to_ext3(ino))),
            Op::Setxattr {
                ino,
                name,
                value,
                flags,
            } => self.setxattr(ctx, ino, name, value, flags),
            Op::Getxattr { ino, name, size } => fs
                .getxattr(to_ext3(ino), name)
                .map_err(|e| self.fail(&e))
                .and_then(|v| sized(v, size)),
            Op::Listxattr { ino, size } => fs
                .listxattr(to_ext3(ino))
                .map_err(|e| self.fail(&e))
                .and_then(|v| sized(v, size)),
            Op::Removexattr { ino, name } => empty(fs.removexattr(to_ext3(ino), name)),
            // close(2) has nothing to do here: data reaches the daemon
            // through the kernel's writeback (which close already waits
            // for), and locks are the kernel's. ENOSYS tells the kernel so
            // once, and it stops sending FLUSH: one round trip less a close.
            Op::Flush { .. } => Err(Errno::from_i32(libc::ENOSYS)),
            Op::Opendir { ino } => self.opendir(ino),
            Op::Readdir { ino, offset, .. } => self.readdir(ino, offset),
            Op::Readdirplus { ino, offset, .. } => self.readdirplus(ino, offset),
            Op::Releasedir { .. } => Ok(Answer::Empty),
            // Permission checks are the kernel's (default_permissions);
            // this only confirms the inode exists.
            Op::Access { ino, .. } => empty(fs.getattr(to_ext3(ino)).map(|_| ())),
            Op::Create {
                parent,
                name,
                mode,
                umask,
                ..
            } => self.create(ctx, parent, name, mode as u16, Self::umask(umask)),
            Op::Tmpfile {
                parent,
                mode,
                umask,
            } => self.tmpfile(ctx, parent, mode as u16, Self::umask(umask)),
            Op::Ioctl {
                ino,
                cmd,
                arg,
                in_data,
                out_size,
            } => self.ioctl(ctx, ino, cmd, arg, in_data, out_size),
            Op::Fallocate {
                ino,
                offset,
                length,
                mode,
            } => self.fallocate(ctx, ino, offset, length, mode),
            Op::CopyFileRange {
                ino_in,
                offset_in,
                ino_out,
                offset_out,
                len,
                flags,
            } => self.copy_file_range(ctx, ino_in, offset_in, ino_out, offset_out, len, flags),
            Op::Lseek { .. } | Op::Unsupported { .. } => Err(Errno::from_i32(libc::ENOSYS)),
            // dispatch answers these later, from the commit.
            Op::Fsync { .. } | Op::Fsyncdir { .. } => Err(Errno::from_i32(libc::EIO)),
        }
    }
}

impl Handler for JbdFuse {
    fn set_kernel_cache(&self, kernel: Arc<dyn KernelCache>) {
        let _ = self.kernel.set(kernel);
    }

    fn dispatch(&self, ctx: &Ctx, op: Op<'_>, reply: impl Responder) {
        let _s = tracing::debug_span!(
            "request",
            unique = ctx.unique,
            op = op.name(),
            ino = op.node()
        )
        .entered();
        // After a forced shutdown every request fails until unmount, as
        // ext4_forced_shutdown makes each operation fail; but a stat of an
        // inode the kernel holds still answers, as ext4_getattr does (it
        // checks no shutdown). Kernel-cached attributes are invalidated
        // whenever atime moves, so failing it would make a mount's own root
        // unstat-able (mountpoint(1), umount helpers) after a shutdown.
        let stat = matches!(op, Op::Getattr { .. } | Op::Statx { .. });
        if self.fs.is_shut_down() && !stat {
            return reply.respond(Err(Errno::from_i32(libc::EIO)));
        }
        match op {
            Op::Fsync { ino, datasync } | Op::Fsyncdir { ino, datasync } => {
                self.fsync_then_reply(ctx, ino, datasync, reply)
            }
            op => reply.respond(self.answer(ctx, op)),
        }
    }

    fn gather_budget(&self) -> Option<std::time::Duration> {
        GATHER.get().filter(|_| COMMIT_OWED.get())
    }

    fn note_gathered(&self, waited: std::time::Duration) {
        self.fs.journal().note_batch_wait(waited);
    }

    fn batch_done(&self) {
        GATHER.set(None);
        if COMMIT_OWED.replace(false) {
            self.fs.journal().commit_if_requested();
        }
    }

    fn forget(&self, ino: NodeId, nlookup: u64) {
        self.fs.forget(to_ext3(ino), nlookup);
    }

    fn destroy(&self) {
        if let Err(e) = self.fs.unmount() {
            tracing::error!("unmount failed: {e}");
        }
    }

    fn posix_acl(&self) -> bool {
        self.fs.posix_acl()
    }
}

/// posix_acl_update_mode's test, for the caller of a setfacl: whether it
/// is in the file's group `gid` (its fsgid or a supplementary group, read
/// from /proc as libfuse's fuse_req_getgroups does) or is root (taken as
/// holding CAP_FSETID).
fn keeps_sgid(ctx: &Ctx, gid: u32) -> bool {
    ctx.uid == 0 || ctx.gid == gid || supplementary_groups(ctx.pid).contains(&gid)
}

/// The `Groups:` of /proc/PID/status; none when the process is gone.
fn supplementary_groups(pid: u32) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}
