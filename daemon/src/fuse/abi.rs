//! The Linux FUSE kernel ABI, as FUSE-over-io_uring carries it.
//!
//! Decodes raw kernel requests into [`Op`]s and encodes [`Answer`]s into
//! reply bytes. The layouts are those of `include/uapi/linux/fuse.h` at
//! protocol 7.40 (what fuser 0.18 negotiates): little-endian, naturally
//! aligned C structs. FUSE_SETXATTR_EXT and FUSE_SECURITY_CTX are not
//! negotiated, so `fuse_setxattr_in` is its 8-byte compat form and requests
//! carry no extension headers (trailing extensions are skipped anyway).
//!
//! # The ring entry's buffers
//!
//! Each ring entry has a header buffer (`struct fuse_uring_req_header`,
//! [`HEADER_BUF_SIZE`] bytes) and a payload buffer. For a request the kernel
//! (fs/fuse/dev_uring.c, `fuse_uring_args_to_ring`) writes:
//!
//! - `in_out` (offset 0): `struct fuse_in_header` ([`InHeader`]);
//! - `op_in` ([`OP_IN_OFFSET`]): the request's first in-argument, the
//!   per-op struct (`fuse_write_in`, ...), when that argument is non-empty;
//! - the payload: every other in-argument, concatenated (names with their
//!   NUL, write data, xattr values); `ring_ent_in_out.payload_sz` says how
//!   many bytes ([`ring_payload_size`]).
//!
//! Operations whose first argument was a name get a zero-size first
//! argument instead (`fuse_set_zero_arg0`, kernel 6.14): LOOKUP, SYMLINK,
//! UNLINK, RMDIR and REMOVEXATTR have an empty `op_in` and their names in
//! the payload. READLINK and STATFS have no arguments at all.
//!
//! For a reply the daemon writes `struct fuse_out_header` into `in_out`,
//! every out-argument concatenated into the payload, and their total size
//! into `ring_ent_in_out.payload_sz` ([`write_reply_header`], [`encode`]).
//! The kernel (`fuse_copy_out_args`) rejects a payload whose size differs
//! from the fixed out-arguments; only the last argument of a variable-size
//! reply (data, directory listings) may be shorter than asked.

use thiserror::Error;

use super::request::{
    dirent_size, direntplus_size, Answer, Attr, Ctx, DirEntry, DirPlusEntry, EntryOut, Errno, Op,
    OpenOut, SetattrIn, StatfsOut, TimeSet, TTL,
};

// ---------------------------------------------------------------- opcodes

/// `enum fuse_opcode`.
pub const FUSE_LOOKUP: u32 = 1;
pub const FUSE_FORGET: u32 = 2;
pub const FUSE_GETATTR: u32 = 3;
pub const FUSE_SETATTR: u32 = 4;
pub const FUSE_READLINK: u32 = 5;
pub const FUSE_SYMLINK: u32 = 6;
pub const FUSE_MKNOD: u32 = 8;
pub const FUSE_MKDIR: u32 = 9;
pub const FUSE_UNLINK: u32 = 10;
pub const FUSE_RMDIR: u32 = 11;
pub const FUSE_RENAME: u32 = 12;
pub const FUSE_LINK: u32 = 13;
pub const FUSE_OPEN: u32 = 14;
pub const FUSE_READ: u32 = 15;
pub const FUSE_WRITE: u32 = 16;
pub const FUSE_STATFS: u32 = 17;
pub const FUSE_RELEASE: u32 = 18;
pub const FUSE_FSYNC: u32 = 20;
pub const FUSE_SETXATTR: u32 = 21;
pub const FUSE_GETXATTR: u32 = 22;
pub const FUSE_LISTXATTR: u32 = 23;
pub const FUSE_REMOVEXATTR: u32 = 24;
pub const FUSE_FLUSH: u32 = 25;
pub const FUSE_INIT: u32 = 26;
pub const FUSE_OPENDIR: u32 = 27;
pub const FUSE_READDIR: u32 = 28;
pub const FUSE_RELEASEDIR: u32 = 29;
pub const FUSE_FSYNCDIR: u32 = 30;
pub const FUSE_GETLK: u32 = 31;
pub const FUSE_SETLK: u32 = 32;
pub const FUSE_SETLKW: u32 = 33;
pub const FUSE_ACCESS: u32 = 34;
pub const FUSE_CREATE: u32 = 35;
pub const FUSE_INTERRUPT: u32 = 36;
pub const FUSE_BMAP: u32 = 37;
pub const FUSE_DESTROY: u32 = 38;
pub const FUSE_IOCTL: u32 = 39;
pub const FUSE_POLL: u32 = 40;
pub const FUSE_NOTIFY_REPLY: u32 = 41;
pub const FUSE_BATCH_FORGET: u32 = 42;
pub const FUSE_FALLOCATE: u32 = 43;
pub const FUSE_READDIRPLUS: u32 = 44;
pub const FUSE_RENAME2: u32 = 45;
pub const FUSE_LSEEK: u32 = 46;
pub const FUSE_COPY_FILE_RANGE: u32 = 47;
pub const FUSE_SETUPMAPPING: u32 = 48;
pub const FUSE_REMOVEMAPPING: u32 = 49;
pub const FUSE_SYNCFS: u32 = 50;
pub const FUSE_TMPFILE: u32 = 51;
pub const FUSE_STATX: u32 = 52;

/// `enum fuse_uring_cmd`: the `cmd_op` of an IORING_OP_URING_CMD SQE.
/// REGISTER hands the kernel an entry's two buffers (iovecs in `sqe->addr`,
/// `sqe->len` = 2) and waits for a request.
pub const FUSE_IO_URING_CMD_REGISTER: u32 = 1;
/// Commits the reply in the entry's buffers and waits for the next request.
pub const FUSE_IO_URING_CMD_COMMIT_AND_FETCH: u32 = 2;

// ---------------------------------------------------------------- sizes

/// `sizeof(struct fuse_uring_req_header)`: in_out, op_in, ring_ent_in_out.
pub const HEADER_BUF_SIZE: usize = 288;
/// Where `op_in` starts in the header buffer (after the 128-byte in_out).
pub const OP_IN_OFFSET: usize = 128;
/// `FUSE_URING_OP_IN_OUT_SZ`.
pub const OP_IN_SIZE: usize = 128;
/// Where `struct fuse_uring_ent_in_out` starts in the header buffer.
pub const ENT_IN_OUT_OFFSET: usize = 256;
/// The SQE128 command area that holds `struct fuse_uring_cmd_req`.
pub const URING_CMD_SIZE: usize = 80;
/// The smallest payload buffer the kernel accepts is
/// max(this, max_write, max_pages * page size).
pub const FUSE_MIN_READ_BUFFER: usize = 8192;

/// `sizeof(struct fuse_in_header)`.
pub const IN_HEADER_SIZE: usize = 40;
/// `sizeof(struct fuse_out_header)`.
pub const OUT_HEADER_SIZE: usize = 16;
/// `sizeof(struct fuse_attr)`.
pub const ATTR_SIZE: usize = 88;
/// `sizeof(struct fuse_entry_out)`.
pub const ENTRY_OUT_SIZE: usize = 128;
/// `sizeof(struct fuse_attr_out)`.
pub const ATTR_OUT_SIZE: usize = 104;
/// `sizeof(struct fuse_open_out)`.
pub const OPEN_OUT_SIZE: usize = 16;
/// `sizeof(struct fuse_statfs_out)`.
pub const STATFS_OUT_SIZE: usize = 80;
/// `sizeof(struct fuse_ioctl_out)`.
pub const IOCTL_OUT_SIZE: usize = 16;

// The in-argument structs, by size.
const SETATTR_IN_SIZE: usize = 88;
const MKNOD_IN_SIZE: usize = 16;
const MKDIR_IN_SIZE: usize = 8;
const RENAME_IN_SIZE: usize = 8;
const RENAME2_IN_SIZE: usize = 16;
const LINK_IN_SIZE: usize = 8;
const OPEN_IN_SIZE: usize = 8;
const READ_IN_SIZE: usize = 40;
const WRITE_IN_SIZE: usize = 40;
/// `fuse_write_in.write_flags`: a delayed write from the page cache.
const FUSE_WRITE_CACHE: u32 = 1 << 0;
/// `fuse_write_in.write_flags`: the writer lacks CAP_FSETID (sent under
/// FUSE_HANDLE_KILLPRIV_V2).
const FUSE_WRITE_KILL_SUIDGID: u32 = 1 << 2;
const FSYNC_IN_SIZE: usize = 16;
const SETXATTR_IN_SIZE: usize = 8;
const GETXATTR_IN_SIZE: usize = 8;
const ACCESS_IN_SIZE: usize = 8;
const CREATE_IN_SIZE: usize = 16;
const IOCTL_IN_SIZE: usize = 32;
const FALLOCATE_IN_SIZE: usize = 32;
const LSEEK_IN_SIZE: usize = 24;
const STATX_IN_SIZE: usize = 24;
const COPY_FILE_RANGE_IN_SIZE: usize = 56;

/// `fuse_setattr_in.valid` bits.
pub const FATTR_MODE: u32 = 1 << 0;
pub const FATTR_UID: u32 = 1 << 1;
pub const FATTR_GID: u32 = 1 << 2;
pub const FATTR_SIZE: u32 = 1 << 3;
pub const FATTR_ATIME: u32 = 1 << 4;
pub const FATTR_MTIME: u32 = 1 << 5;
pub const FATTR_FH: u32 = 1 << 6;
pub const FATTR_ATIME_NOW: u32 = 1 << 7;
pub const FATTR_MTIME_NOW: u32 = 1 << 8;
pub const FATTR_LOCKOWNER: u32 = 1 << 9;
pub const FATTR_CTIME: u32 = 1 << 10;

/// `fuse_fsync_in.fsync_flags`: sync data only.
pub const FUSE_FSYNC_FDATASYNC: u32 = 1;

// ---------------------------------------------------------------- errors

/// A request the codec cannot make sense of. The kernel never sends one;
/// the transport answers EIO.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum DecodeError {
    #[error("fuse_in_header needs {IN_HEADER_SIZE} bytes, got {0}")]
    ShortHeader(usize),
    #[error("opcode {opcode}: {what} needs {need} bytes, got {got}")]
    Short {
        opcode: u32,
        what: &'static str,
        need: usize,
        got: usize,
    },
    #[error("opcode {opcode}: {what} has no terminating NUL")]
    NoNul { opcode: u32, what: &'static str },
    #[error("opcode {opcode}: {ext} bytes of extensions in a {got}-byte payload")]
    Extensions { opcode: u32, ext: usize, got: usize },
    #[error("ring payload_sz {size} exceeds the {buf}-byte payload buffer")]
    PayloadSize { size: u32, buf: usize },
}

// ---------------------------------------------------------------- bytes

/// `N` bytes of `b` at `off`; zeros where `b` is short (callers check
/// lengths first, so that never happens, but nothing here can panic).
fn le<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    off.checked_add(N)
        .and_then(|end| b.get(off..end))
        .and_then(|s| s.try_into().ok())
        .unwrap_or([0; N])
}

fn le_u16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes(le(b, off))
}

fn le_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(le(b, off))
}

fn le_u64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(le(b, off))
}

/// A kernel size as a length (saturating, for 32-bit hosts).
fn len_of(v: u32) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

// ---------------------------------------------------------------- headers

/// `struct fuse_in_header`: the first 40 bytes of `in_out`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InHeader {
    /// 40 + all in-arguments (including any extensions).
    pub len: u32,
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    /// Extension bytes at the end of the arguments, in units of 8.
    pub total_extlen: u16,
}

impl InHeader {
    /// Reads the header from the start of `buf` (the header buffer).
    pub fn parse(buf: &[u8]) -> Result<InHeader, DecodeError> {
        if buf.len() < IN_HEADER_SIZE {
            return Err(DecodeError::ShortHeader(buf.len()));
        }
        Ok(InHeader {
            len: le_u32(buf, 0),
            opcode: le_u32(buf, 4),
            unique: le_u64(buf, 8),
            nodeid: le_u64(buf, 16),
            uid: le_u32(buf, 24),
            gid: le_u32(buf, 28),
            pid: le_u32(buf, 32),
            total_extlen: le_u16(buf, 36),
        })
    }

    /// Who sent the request. Fields the header does not carry (how the
    /// transport serves it) keep their defaults for the transport to set.
    pub fn ctx(&self) -> Ctx {
        Ctx {
            unique: self.unique,
            uid: self.uid,
            gid: self.gid,
            pid: self.pid,
            ..Ctx::default()
        }
    }
}

/// `op_in` of a header buffer (empty if the buffer is short).
pub fn op_in(header_buf: &[u8]) -> &[u8] {
    header_buf
        .get(OP_IN_OFFSET..OP_IN_OFFSET + OP_IN_SIZE)
        .unwrap_or(&[])
}

/// `ring_ent_in_out.payload_sz`: the payload bytes of the request the
/// kernel just delivered (0 if the buffer is short).
pub fn ring_payload_size(header_buf: &[u8]) -> u32 {
    header_buf
        .get(ENT_IN_OUT_OFFSET..HEADER_BUF_SIZE)
        .map_or(0, |ent| le_u32(ent, 16))
}

/// The request's payload: the first [`ring_payload_size`] bytes of
/// `payload_buf`, refused if the kernel claims more than the buffer holds.
pub fn ring_payload<'a>(header_buf: &[u8], payload_buf: &'a [u8]) -> Result<&'a [u8], DecodeError> {
    let size = ring_payload_size(header_buf);
    payload_buf
        .get(..len_of(size))
        .ok_or(DecodeError::PayloadSize {
            size,
            buf: payload_buf.len(),
        })
}

/// Writes a reply's headers: `struct fuse_out_header` into `in_out` (len =
/// 16 + `payload_sz`, `error` = 0 or -errno, the request's `unique`) and
/// `payload_sz` into `ring_ent_in_out` (its flags and commit_id zeroed).
///
/// # Panics
///
/// If `header_buf` is shorter than [`HEADER_BUF_SIZE`]: the transport
/// allocates these buffers, so that is a bug, not bad input.
pub fn write_reply_header(header_buf: &mut [u8], unique: u64, error: i32, payload_sz: u32) {
    assert!(
        header_buf.len() >= HEADER_BUF_SIZE,
        "short ring header buffer"
    );
    let len = payload_sz.saturating_add(OUT_HEADER_SIZE as u32);
    header_buf[0..4].copy_from_slice(&len.to_le_bytes());
    header_buf[4..8].copy_from_slice(&error.to_le_bytes());
    header_buf[8..16].copy_from_slice(&unique.to_le_bytes());
    let ent = &mut header_buf[ENT_IN_OUT_OFFSET..HEADER_BUF_SIZE];
    ent[0..16].fill(0);
    ent[16..20].copy_from_slice(&payload_sz.to_le_bytes());
}

/// `struct fuse_uring_cmd_req` in an SQE128 command area: flags 0, the
/// commit id (the request's unique; 0 for REGISTER), the queue id.
pub fn uring_cmd(qid: u16, commit_id: u64) -> [u8; URING_CMD_SIZE] {
    let mut cmd = [0u8; URING_CMD_SIZE];
    cmd[8..16].copy_from_slice(&commit_id.to_le_bytes());
    cmd[16..18].copy_from_slice(&qid.to_le_bytes());
    cmd
}

// ---------------------------------------------------------------- decode

/// One request's arguments, with the checks that name what went wrong.
struct Args<'a> {
    opcode: u32,
    op_in: &'a [u8],
    payload: &'a [u8],
}

impl<'a> Args<'a> {
    /// The per-op struct in `op_in`, at least `size` bytes of it.
    fn arg(&self, size: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        self.op_in.get(..size).ok_or(DecodeError::Short {
            opcode: self.opcode,
            what,
            need: size,
            got: self.op_in.len(),
        })
    }

    /// A NUL-terminated string at the start of `buf`, and what follows.
    fn name(&self, buf: &'a [u8], what: &'static str) -> Result<(&'a [u8], &'a [u8]), DecodeError> {
        let nul = buf.iter().position(|&b| b == 0).ok_or(DecodeError::NoNul {
            opcode: self.opcode,
            what,
        })?;
        Ok((&buf[..nul], &buf[nul + 1..]))
    }

    /// The payload's first name.
    fn first_name(&self, what: &'static str) -> Result<&'a [u8], DecodeError> {
        Ok(self.name(self.payload, what)?.0)
    }

    /// `size` bytes at the start of `buf`.
    fn data(&self, buf: &'a [u8], size: u32, what: &'static str) -> Result<&'a [u8], DecodeError> {
        buf.get(..len_of(size)).ok_or(DecodeError::Short {
            opcode: self.opcode,
            what,
            need: len_of(size),
            got: buf.len(),
        })
    }
}

/// The payload without the `total_extlen * 8` extension bytes at its end.
fn strip_extensions<'a>(h: &InHeader, payload: &'a [u8]) -> Result<&'a [u8], DecodeError> {
    let ext = usize::from(h.total_extlen) * 8;
    payload
        .len()
        .checked_sub(ext)
        .map(|keep| &payload[..keep])
        .ok_or(DecodeError::Extensions {
            opcode: h.opcode,
            ext,
            got: payload.len(),
        })
}

/// Decodes a request: `op_in` is the header buffer's op_in area (or just
/// the op struct), `payload` the request's payload bytes. Node ids come
/// from the header. Opcodes without an [`Op`] give [`Op::Unsupported`].
pub fn decode<'a>(h: &InHeader, op_in: &'a [u8], payload: &'a [u8]) -> Result<Op<'a>, DecodeError> {
    let a = Args {
        opcode: h.opcode,
        op_in,
        payload: strip_extensions(h, payload)?,
    };
    let ino = h.nodeid;
    Ok(match h.opcode {
        FUSE_LOOKUP => Op::Lookup {
            parent: ino,
            name: a.first_name("name")?,
        },
        FUSE_GETATTR => Op::Getattr { ino },
        // The handle and the mask asked for do not change the answer: every
        // field is known from the inode, so all of them are given.
        FUSE_STATX => {
            a.arg(STATX_IN_SIZE, "fuse_statx_in")?;
            Op::Statx { ino }
        }
        FUSE_SETATTR => Op::Setattr {
            ino,
            set: setattr(a.arg(SETATTR_IN_SIZE, "fuse_setattr_in")?),
        },
        FUSE_READLINK => Op::Readlink { ino },
        FUSE_SYMLINK => symlink(&a, ino)?,
        FUSE_MKNOD => mknod(&a, ino)?,
        FUSE_MKDIR => mkdir(&a, ino)?,
        FUSE_UNLINK => Op::Unlink {
            parent: ino,
            name: a.first_name("name")?,
        },
        FUSE_RMDIR => Op::Rmdir {
            parent: ino,
            name: a.first_name("name")?,
        },
        FUSE_RENAME => rename(&a, ino, RENAME_IN_SIZE)?,
        FUSE_RENAME2 => rename(&a, ino, RENAME2_IN_SIZE)?,
        FUSE_LINK => link(&a, ino)?,
        FUSE_OPEN => Op::Open {
            ino,
            flags: le_u32(a.arg(OPEN_IN_SIZE, "fuse_open_in")?, 0) as i32,
        },
        FUSE_READ => read(&a, ino)?,
        FUSE_WRITE => write(&a, ino)?,
        FUSE_STATFS => Op::Statfs,
        FUSE_RELEASE => Op::Release { ino },
        FUSE_FSYNC => Op::Fsync {
            ino,
            datasync: datasync(&a)?,
        },
        FUSE_SETXATTR => setxattr(&a, ino)?,
        FUSE_GETXATTR => getxattr(&a, ino)?,
        FUSE_LISTXATTR => Op::Listxattr {
            ino,
            size: le_u32(a.arg(GETXATTR_IN_SIZE, "fuse_getxattr_in")?, 0),
        },
        FUSE_REMOVEXATTR => Op::Removexattr {
            ino,
            name: a.first_name("name")?,
        },
        FUSE_FLUSH => Op::Flush { ino },
        FUSE_OPENDIR => Op::Opendir { ino },
        FUSE_READDIR | FUSE_READDIRPLUS => readdir(&a, ino)?,
        FUSE_RELEASEDIR => Op::Releasedir { ino },
        FUSE_FSYNCDIR => Op::Fsyncdir {
            ino,
            datasync: datasync(&a)?,
        },
        FUSE_ACCESS => Op::Access {
            ino,
            mask: le_u32(a.arg(ACCESS_IN_SIZE, "fuse_access_in")?, 0) as i32,
        },
        FUSE_CREATE => create(&a, ino)?,
        FUSE_TMPFILE => tmpfile(&a, ino)?,
        FUSE_IOCTL => ioctl(&a, ino)?,
        FUSE_FALLOCATE => fallocate(&a, ino)?,
        FUSE_LSEEK => lseek(&a, ino)?,
        FUSE_COPY_FILE_RANGE => copy_file_range(&a, ino)?,
        opcode => Op::Unsupported { opcode },
    })
}

/// `struct fuse_setattr_in`, by its `valid` bits.
fn setattr(s: &[u8]) -> SetattrIn {
    let valid = le_u32(s, 0);
    let has = |bit: u32| valid & bit != 0;
    let time = |set: u32, now: u32, sec_off: usize, nsec_off: usize| {
        if has(now) {
            Some(TimeSet::Now)
        } else if has(set) {
            Some(TimeSet::At {
                sec: le_u64(s, sec_off) as i64,
                nsec: le_u32(s, nsec_off),
            })
        } else {
            None
        }
    };
    SetattrIn {
        mode: has(FATTR_MODE).then(|| le_u32(s, 68)),
        uid: has(FATTR_UID).then(|| le_u32(s, 76)),
        gid: has(FATTR_GID).then(|| le_u32(s, 80)),
        size: has(FATTR_SIZE).then(|| le_u64(s, 16)),
        atime: time(FATTR_ATIME, FATTR_ATIME_NOW, 32, 56),
        mtime: time(FATTR_MTIME, FATTR_MTIME_NOW, 40, 60),
        ctime: has(FATTR_CTIME).then(|| (le_u64(s, 48) as i64, le_u32(s, 64))),
    }
}

/// SYMLINK: zero-size arg0; the payload is name\0 target\0.
fn symlink<'a>(a: &Args<'a>, parent: u64) -> Result<Op<'a>, DecodeError> {
    let (name, rest) = a.name(a.payload, "name")?;
    let (target, _) = a.name(rest, "target")?;
    Ok(Op::Symlink {
        parent,
        name,
        target,
    })
}

/// `struct fuse_mknod_in { mode, rdev, umask, padding }`, then the name.
fn mknod<'a>(a: &Args<'a>, parent: u64) -> Result<Op<'a>, DecodeError> {
    let s = a.arg(MKNOD_IN_SIZE, "fuse_mknod_in")?;
    let name = a.first_name("name")?;
    Ok(Op::Mknod {
        parent,
        name,
        mode: le_u32(s, 0),
        rdev: le_u32(s, 4),
        umask: le_u32(s, 8),
    })
}

/// `struct fuse_mkdir_in { mode, umask }`, then the name.
fn mkdir<'a>(a: &Args<'a>, parent: u64) -> Result<Op<'a>, DecodeError> {
    let s = a.arg(MKDIR_IN_SIZE, "fuse_mkdir_in")?;
    let name = a.first_name("name")?;
    Ok(Op::Mkdir {
        parent,
        name,
        mode: le_u32(s, 0),
        umask: le_u32(s, 4),
    })
}

/// `fuse_rename_in { newdir }` or `fuse_rename2_in { newdir, flags, pad }`,
/// then oldname\0 newname\0.
fn rename<'a>(a: &Args<'a>, parent: u64, size: usize) -> Result<Op<'a>, DecodeError> {
    let s = a.arg(size, "fuse_rename_in")?;
    let (name, rest) = a.name(a.payload, "old name")?;
    let (newname, _) = a.name(rest, "new name")?;
    let flags = if size == RENAME2_IN_SIZE {
        le_u32(s, 8)
    } else {
        0
    };
    Ok(Op::Rename {
        parent,
        name,
        newparent: le_u64(s, 0),
        newname,
        flags,
    })
}

/// `struct fuse_link_in { oldnodeid }`, then the new name; the header's
/// node is the new parent.
fn link<'a>(a: &Args<'a>, newparent: u64) -> Result<Op<'a>, DecodeError> {
    let s = a.arg(LINK_IN_SIZE, "fuse_link_in")?;
    let newname = a.first_name("name")?;
    Ok(Op::Link {
        ino: le_u64(s, 0),
        newparent,
        newname,
    })
}

/// `struct fuse_read_in { fh, offset, size, read_flags, lock_owner, ... }`.
fn read<'a>(a: &Args<'a>, ino: u64) -> Result<Op<'a>, DecodeError> {
    let s = a.arg(READ_IN_SIZE, "fuse_read_in")?;
    Ok(Op::Read {
        ino,
        fh: le_u64(s, 0),
        offset: le_u64(s, 8),
        size: le_u32(s, 16),
    })
}

/// `struct fuse_write_in { fh, offset, size, ... }`; the payload is the data.
fn write<'a>(a: &Args<'a>, ino: u64) -> Result<Op<'a>, DecodeError> {
    let s = a.arg(WRITE_IN_SIZE, "fuse_write_in")?;
    let data = a.data(a.payload, le_u32(s, 16), "write data")?;
    Ok(Op::Write {
        ino,
        offset: le_u64(s, 8),
        data,
        from_cache: le_u32(s, 20) & FUSE_WRITE_CACHE != 0,
        kill_suidgid: le_u32(s, 20) & FUSE_WRITE_KILL_SUIDGID != 0,
    })
}

/// `struct fuse_fsync_in { fh, fsync_flags, padding }`.
fn datasync(a: &Args<'_>) -> Result<bool, DecodeError> {
    let s = a.arg(FSYNC_IN_SIZE, "fuse_fsync_in")?;
    Ok(le_u32(s, 8) & FUSE_FSYNC_FDATASYNC != 0)
}

/// `struct fuse_setxattr_in { size, flags }` (the compat size), then
/// name\0 and `size` bytes of value.
fn setxattr<'a>(a: &Args<'a>, ino: u64) -> Result<Op<'a>, DecodeError> {
    let s = a.arg(SETXATTR_IN_SIZE, "fuse_setxattr_in")?;
    let (name, rest) = a.name(a.payload, "name")?;
    let value = a.data(rest, le_u32(s, 0), "xattr value")?;
    Ok(Op::Setxattr {
        ino,
        name,
        value,
        flags: le_u32(s, 4) as i32,
    })
}

/// `struct fuse_getxattr_in { size, padding }`, then the name.
fn getxattr<'a>(a: &Args<'a>, ino: u64) -> Result<Op<'a>, DecodeError> {
    let s = a.arg(GETXATTR_IN_SIZE, "fuse_getxattr_in")?;
    let name = a.first_name("name")?;
    Ok(Op::Getxattr {
        ino,
        name,
        size: le_u32(s, 0),
    })
}

/// READDIR and READDIRPLUS: a `fuse_read_in`; its size is the buffer.
fn readdir<'a>(a: &Args<'a>, ino: u64) -> Result<Op<'a>, DecodeError> {
    let s = a.arg(READ_IN_SIZE, "fuse_read_in")?;
    let (offset, size) = (le_u64(s, 8), Some(le_u32(s, 16)));
    Ok(if a.opcode == FUSE_READDIRPLUS {
        Op::Readdirplus { ino, offset, size }
    } else {
        Op::Readdir { ino, offset, size }
    })
}

/// `struct fuse_create_in { flags, mode, umask, open_flags }`, then the name.
fn create<'a>(a: &Args<'a>, parent: u64) -> Result<Op<'a>, DecodeError> {
    let s = a.arg(CREATE_IN_SIZE, "fuse_create_in")?;
    let name = a.first_name("name")?;
    Ok(Op::Create {
        parent,
        name,
        mode: le_u32(s, 4),
        umask: le_u32(s, 8),
        flags: le_u32(s, 0) as i32,
    })
}

/// O_TMPFILE: a `fuse_create_in` as for CREATE; the name that follows
/// is the kernel's placeholder for a nameless dentry, and is not used.
fn tmpfile<'a>(a: &Args<'a>, parent: u64) -> Result<Op<'a>, DecodeError> {
    let s = a.arg(CREATE_IN_SIZE, "fuse_create_in")?;
    Ok(Op::Tmpfile {
        parent,
        mode: le_u32(s, 4),
        umask: le_u32(s, 8),
    })
}

/// `struct fuse_ioctl_in { fh, flags, cmd, arg, in_size, out_size }`, then
/// `in_size` bytes of input.
fn ioctl<'a>(a: &Args<'a>, ino: u64) -> Result<Op<'a>, DecodeError> {
    let s = a.arg(IOCTL_IN_SIZE, "fuse_ioctl_in")?;
    let in_data = a.data(a.payload, le_u32(s, 24), "ioctl input")?;
    Ok(Op::Ioctl {
        ino,
        cmd: le_u32(s, 12),
        arg: le_u64(s, 16),
        in_data,
        out_size: le_u32(s, 28),
    })
}

/// `struct fuse_fallocate_in { fh, offset, length, mode, padding }`.
fn fallocate<'a>(a: &Args<'a>, ino: u64) -> Result<Op<'a>, DecodeError> {
    let s = a.arg(FALLOCATE_IN_SIZE, "fuse_fallocate_in")?;
    Ok(Op::Fallocate {
        ino,
        offset: le_u64(s, 8),
        length: le_u64(s, 16),
        mode: le_u32(s, 24) as i32,
    })
}

/// `struct fuse_lseek_in { fh, offset, whence, padding }`.
fn lseek<'a>(a: &Args<'a>, ino: u64) -> Result<Op<'a>, DecodeError> {
    let s = a.arg(LSEEK_IN_SIZE, "fuse_lseek_in")?;
    Ok(Op::Lseek {
        ino,
        offset: le_u64(s, 8),
        whence: le_u32(s, 16) as i32,
    })
}

/// `struct fuse_copy_file_range_in { fh_in, off_in, nodeid_out, fh_out,
/// off_out, len, flags }`.
fn copy_file_range<'a>(a: &Args<'a>, ino_in: u64) -> Result<Op<'a>, DecodeError> {
    let s = a.arg(COPY_FILE_RANGE_IN_SIZE, "fuse_copy_file_range_in")?;
    Ok(Op::CopyFileRange {
        ino_in,
        offset_in: le_u64(s, 8),
        ino_out: le_u64(s, 16),
        offset_out: le_u64(s, 32),
        len: le_u64(s, 40),
        flags: le_u64(s, 48),
    })
}

// ---------------------------------------------------------------- encode

/// Appends little-endian fields to a reply buffer; EIO when it is full.
struct Writer<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl Writer<'_> {
    fn bytes(&mut self, b: &[u8]) -> Result<(), Errno> {
        let end = self.len.checked_add(b.len()).ok_or(Errno::EIO)?;
        self.buf
            .get_mut(self.len..end)
            .ok_or(Errno::EIO)?
            .copy_from_slice(b);
        self.len = end;
        Ok(())
    }

    fn zeros(&mut self, n: usize) -> Result<(), Errno> {
        let end = self.len.checked_add(n).ok_or(Errno::EIO)?;
        self.buf.get_mut(self.len..end).ok_or(Errno::EIO)?.fill(0);
        self.len = end;
        Ok(())
    }

    fn u64(&mut self, v: u64) -> Result<(), Errno> {
        self.bytes(&v.to_le_bytes())
    }

    fn u32(&mut self, v: u32) -> Result<(), Errno> {
        self.bytes(&v.to_le_bytes())
    }
}

/// Writes the reply arguments for `answer` into `out` and returns their
/// size, the ring's `payload_sz`. `limit` is the size the kernel asked for
/// (READ, READDIR, READDIRPLUS, GETXATTR, LISTXATTR); pass `out.len()`
/// when there is none.
///
/// Directory listings take whole entries while the total stays within
/// `limit` (and `out`); a READDIRPLUS answer learns how many through
/// [`DirPlus::sent`](super::request::DirPlus::sent), called exactly once.
/// Fixed-size replies or data that do not fit `out` are EIO; data longer
/// than `limit` is ERANGE (the kernel would refuse it; for xattrs that is
/// what the caller must hear).
pub fn encode(answer: Answer, limit: usize, out: &mut [u8]) -> Result<usize, Errno> {
    let mut w = Writer { buf: out, len: 0 };
    match answer {
        Answer::Empty => {}
        Answer::Entry(e) => put_entry(&mut w, &e)?,
        Answer::Attr(attr) => put_attr_out(&mut w, &attr)?,
        Answer::Statx(attr, btime) => put_statx_out(&mut w, &attr, btime)?,
        Answer::Data(data) => put_data(&mut w, &data, limit)?,
        Answer::Written(n) | Answer::XattrSize(n) => {
            w.u32(n)?;
            w.u32(0)?;
        }
        Answer::Open(o) => put_open(&mut w, &o)?,
        Answer::Create(e, o) => {
            put_entry(&mut w, &e)?;
            put_open(&mut w, &o)?;
        }
        Answer::Statfs(s) => put_statfs(&mut w, &s)?,
        Answer::Dir(entries) => {
            put_entries(
                &mut w,
                &entries,
                limit,
                |e| dirent_size(e.name.len()),
                put_dirent,
            );
        }
        Answer::DirPlus(plus) => {
            let n = put_entries(
                &mut w,
                &plus.entries,
                limit,
                |e| direntplus_size(e.dirent.name.len()),
                put_direntplus,
            );
            plus.sent(n);
        }
        Answer::Ioctl { result, data } => put_ioctl(&mut w, result, &data)?,
        Answer::Lseek(offset) => w.u64(offset)?,
    }
    Ok(w.len)
}

/// A data answer (READ, READLINK, xattr contents) from a borrowed buffer,
/// so that a transport can give the buffer back for the next read; the
/// same rules as [`encode`]'s `Answer::Data`.
pub fn encode_data(data: &[u8], limit: usize, out: &mut [u8]) -> Result<usize, Errno> {
    let mut w = Writer { buf: out, len: 0 };
    put_data(&mut w, data, limit)?;
    Ok(w.len)
}

/// `struct fuse_attr` (88 bytes); times are i64 seconds stored as u64.
fn put_attr(w: &mut Writer<'_>, a: &Attr) -> Result<(), Errno> {
    for v in [
        a.ino,
        a.size,
        a.blocks,
        a.atime.0 as u64,
        a.mtime.0 as u64,
        a.ctime.0 as u64,
    ] {
        w.u64(v)?;
    }
    for v in [
        a.atime.1, a.mtime.1, a.ctime.1, a.mode, a.nlink, a.uid, a.gid, a.rdev, a.blksize,
    ] {
        w.u32(v)?;
    }
    w.u32(0) // flags
}

/// `struct fuse_entry_out` (128 bytes); a negative entry has node id 0.
fn put_entry(w: &mut Writer<'_>, e: &EntryOut) -> Result<(), Errno> {
    w.u64(e.attr.ino)?; // 0 for a negative entry
    w.u64(e.generation)?;
    w.u64(TTL.as_secs())?; // entry_valid
    w.u64(TTL.as_secs())?; // attr_valid
    w.u32(TTL.subsec_nanos())?;
    w.u32(TTL.subsec_nanos())?;
    put_attr(w, &e.attr)
}

/// `struct fuse_attr_out { attr_valid, attr_valid_nsec, dummy, attr }`.
fn put_attr_out(w: &mut Writer<'_>, a: &Attr) -> Result<(), Errno> {
    w.u64(TTL.as_secs())?;
    w.u32(TTL.subsec_nanos())?;
    w.u32(0)?;
    put_attr(w, a)
}

/// `struct fuse_open_out { fh, open_flags, backing_id = 0 }`.
fn put_open(w: &mut Writer<'_>, o: &OpenOut) -> Result<(), Errno> {
    w.u64(o.fh)?;
    w.u32(o.flags)?;
    w.u32(0)
}

/// include/uapi/linux/stat.h: the statx fields an answer fills in.
const STATX_BASIC_STATS: u32 = 0x7ff;
const STATX_BTIME: u32 = 0x800;

/// `struct fuse_statx_out { attr_valid, attr_valid_nsec, flags, spare[2],
/// struct fuse_statx }` (288 bytes). The kernel takes the basic fields
/// into its cache only when the mask has all of them, and reports btime
/// when the mask has it. No `attributes`: the kernel does not pass them on.
fn put_statx_out(w: &mut Writer<'_>, a: &Attr, btime: Option<(i64, u32)>) -> Result<(), Errno> {
    w.u64(TTL.as_secs())?;
    w.u32(TTL.subsec_nanos())?;
    w.zeros(4 + 16)?; // flags, spare[2]
    let mask = STATX_BASIC_STATS | btime.map_or(0, |_| STATX_BTIME);
    w.u32(mask)?;
    w.u32(a.blksize)?;
    w.u64(0)?; // attributes
    for v in [a.nlink, a.uid, a.gid, a.mode & 0xffff] {
        w.u32(v)?; // mode is a u16 and its u16 of padding, little-endian
    }
    for v in [a.ino, a.size, a.blocks, 0] {
        w.u64(v)?; // the last is attributes_mask
    }
    for (sec, nsec) in [a.atime, btime.unwrap_or((0, 0)), a.ctime, a.mtime] {
        w.u64(sec as u64)?;
        w.u32(nsec)?;
        w.u32(0)?;
    }
    // Attr::rdev is new_encode_dev's form: the kernel's new_decode_dev.
    let (major, minor) = (
        (a.rdev & 0xfff00) >> 8,
        (a.rdev & 0xff) | ((a.rdev >> 12) & 0xfff00),
    );
    for v in [major, minor, 0, 0] {
        w.u32(v)?; // rdev, then dev (the kernel fills in its own)
    }
    w.zeros(14 * 8)
}

/// `struct fuse_statfs_out` (`fuse_kstatfs`, 80 bytes).
fn put_statfs(w: &mut Writer<'_>, s: &StatfsOut) -> Result<(), Errno> {
    for v in [s.blocks, s.bfree, s.bavail, s.files, s.ffree] {
        w.u64(v)?;
    }
    for v in [s.bsize, s.namelen, s.frsize] {
        w.u32(v)?;
    }
    w.zeros(4 + 6 * 4) // padding, spare[6]
}

/// Raw reply data: at most `limit` bytes, and it must fit `out`.
fn put_data(w: &mut Writer<'_>, data: &[u8], limit: usize) -> Result<(), Errno> {
    if data.len() > w.buf.len() {
        return Err(Errno::EIO);
    }
    if data.len() > limit {
        return Err(Errno::ERANGE);
    }
    w.bytes(data)
}

/// `struct fuse_ioctl_out { result, flags, in_iovs, out_iovs }`, then data.
fn put_ioctl(w: &mut Writer<'_>, result: i32, data: &[u8]) -> Result<(), Errno> {
    w.u32(result as u32)?;
    w.zeros(12)?;
    w.bytes(data)
}

/// `struct fuse_dirent { ino, off, namelen, type, name }`, zero-padded to 8.
fn put_dirent(w: &mut Writer<'_>, e: &DirEntry) -> Result<(), Errno> {
    w.u64(e.ino)?;
    w.u64(e.next)?;
    w.u32(u32::try_from(e.name.len()).map_err(|_| Errno::EIO)?)?;
    w.u32(e.kind)?;
    w.bytes(&e.name)?;
    w.zeros(dirent_size(e.name.len()) - 24 - e.name.len())
}

/// `struct fuse_direntplus { entry_out, dirent }`.
fn put_direntplus(w: &mut Writer<'_>, e: &DirPlusEntry) -> Result<(), Errno> {
    put_entry(w, &e.entry)?;
    put_dirent(w, &e.dirent)
}

/// Writes whole entries while the total stays within `limit` and the
/// buffer; returns how many went in.
fn put_entries<T>(
    w: &mut Writer<'_>,
    entries: &[T],
    limit: usize,
    size: impl Fn(&T) -> usize,
    put: impl Fn(&mut Writer<'_>, &T) -> Result<(), Errno>,
) -> usize {
    let cap = limit.min(w.buf.len());
    let mut n = 0;
    for e in entries {
        let start = w.len;
        if start.saturating_add(size(e)) > cap || put(w, e).is_err() {
            w.len = start;
            break;
        }
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::super::request::{DirPlus, RENAME_NOREPLACE};
    use super::*;
    use std::sync::{Arc, Mutex};

    // ------------------------------------------------------------ images

    /// Little-endian field writers for building request images by hand.
    fn p32(v: &mut Vec<u8>, x: u32) {
        v.extend_from_slice(&x.to_le_bytes());
    }

    fn p64(v: &mut Vec<u8>, x: u64) {
        v.extend_from_slice(&x.to_le_bytes());
    }

    fn g32(b: &[u8], off: usize) -> u32 {
        u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
    }

    fn g64(b: &[u8], off: usize) -> u64 {
        u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
    }

    /// A 40-byte `fuse_in_header` image.
    fn in_header(opcode: u32, nodeid: u64, extlen: u16) -> Vec<u8> {
        let mut v = Vec::new();
        p32(&mut v, 0x1234); // len
        p32(&mut v, opcode);
        p64(&mut v, 77); // unique
        p64(&mut v, nodeid);
        p32(&mut v, 1000); // uid
        p32(&mut v, 100); // gid
        p32(&mut v, 4242); // pid
        v.extend_from_slice(&extlen.to_le_bytes());
        v.extend_from_slice(&[0, 0]);
        assert_eq!(v.len(), 40);
        v
    }

    fn header(opcode: u32, nodeid: u64) -> InHeader {
        InHeader::parse(&in_header(opcode, nodeid, 0)).unwrap()
    }

    /// An op_in area: `fields` then zeros up to 128 bytes, as the ring has it.
    fn area(fields: &[u8]) -> Vec<u8> {
        let mut v = fields.to_vec();
        v.resize(OP_IN_SIZE, 0);
        v
    }

    // ------------------------------------------------------------ decode

    #[test]
    fn parses_in_header_and_ctx() {
        let h = InHeader::parse(&in_header(FUSE_GETATTR, 9, 3)).unwrap();
        assert_eq!(
            (h.len, h.opcode, h.unique, h.nodeid),
            (0x1234, FUSE_GETATTR, 77, 9)
        );
        assert_eq!((h.uid, h.gid, h.pid, h.total_extlen), (1000, 100, 4242, 3));
        let c = h.ctx();
        assert_eq!((c.unique, c.uid, c.gid, c.pid), (77, 1000, 100, 4242));
        assert_eq!(InHeader::parse(&[0; 39]), Err(DecodeError::ShortHeader(39)));
    }

    #[test]
    fn decodes_lookup_from_payload_with_empty_op_in() {
        let h = header(FUSE_LOOKUP, 1);
        // name, then the kernel's separate one-byte "" argument
        let op = decode(&h, &[], b"hello\0").unwrap();
        assert!(
            matches!(
                op,
                Op::Lookup {
                    parent: 1,
                    name: b"hello"
                }
            ),
            "{op:?}"
        );
        let err = decode(&h, &[], b"hello").unwrap_err();
        assert_eq!(
            err,
            DecodeError::NoNul {
                opcode: FUSE_LOOKUP,
                what: "name"
            }
        );
    }

    #[test]
    fn decodes_mknod() {
        let mut s = Vec::new();
        p32(&mut s, 0o20644); // mode
        p32(&mut s, 0x0801); // rdev
        p32(&mut s, 0o022); // umask
        p32(&mut s, 0); // padding
        let s = area(&s);
        let op = decode(&header(FUSE_MKNOD, 5), &s, b"fifo\0").unwrap();
        match op {
            Op::Mknod {
                parent,
                name,
                mode,
                umask,
                rdev,
            } => {
                assert_eq!(
                    (parent, name, mode, umask, rdev),
                    (5, &b"fifo"[..], 0o20644, 0o022, 0x0801)
                );
            }
            other => panic!("{other:?}"),
        }
        let err = decode(&header(FUSE_MKNOD, 5), &s[..8], b"fifo\0").unwrap_err();
        assert!(
            matches!(
                err,
                DecodeError::Short {
                    need: 16,
                    got: 8,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn decodes_write_data_from_payload() {
        let mut s = Vec::new();
        p64(&mut s, 3); // fh
        p64(&mut s, 4096); // offset
        p32(&mut s, 5); // size
        p32(&mut s, FUSE_WRITE_KILL_SUIDGID); // write_flags
        p64(&mut s, 0); // lock_owner
        p32(&mut s, 0); // flags
        p32(&mut s, 0); // padding
        assert_eq!(s.len(), 40);
        let s = area(&s);
        let op = decode(&header(FUSE_WRITE, 8), &s, b"abcde").unwrap();
        assert!(
            matches!(
                op,
                Op::Write {
                    ino: 8,
                    offset: 4096,
                    data: b"abcde",
                    from_cache: false,
                    kill_suidgid: true,
                }
            ),
            "{op:?}"
        );
        let err = decode(&header(FUSE_WRITE, 8), &s, b"abc").unwrap_err();
        assert!(
            matches!(
                err,
                DecodeError::Short {
                    need: 5,
                    got: 3,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn decodes_setattr_mode_size_mtime_now() {
        let mut s = vec![0u8; 88];
        let valid = FATTR_MODE | FATTR_SIZE | FATTR_MTIME | FATTR_MTIME_NOW;
        s[0..4].copy_from_slice(&valid.to_le_bytes());
        s[16..24].copy_from_slice(&12345u64.to_le_bytes()); // size
        s[40..48].copy_from_slice(&999u64.to_le_bytes()); // mtime (ignored: NOW)
        s[68..72].copy_from_slice(&0o100600u32.to_le_bytes()); // mode
        s[76..80].copy_from_slice(&55u32.to_le_bytes()); // uid, not valid
        let s = area(&s);
        let op = decode(&header(FUSE_SETATTR, 4), &s, &[]).unwrap();
        let Op::Setattr { ino: 4, set } = op else {
            panic!("{op:?}")
        };
        let want = SetattrIn {
            mode: Some(0o100600),
            size: Some(12345),
            mtime: Some(TimeSet::Now),
            ..SetattrIn::default()
        };
        assert_eq!(set, want);
    }

    #[test]
    fn decodes_setattr_given_times() {
        let mut s = vec![0u8; 88];
        let valid = FATTR_ATIME | FATTR_CTIME | FATTR_UID | FATTR_GID;
        s[0..4].copy_from_slice(&valid.to_le_bytes());
        s[32..40].copy_from_slice(&(-5i64).to_le_bytes()); // atime
        s[48..56].copy_from_slice(&7u64.to_le_bytes()); // ctime
        s[56..60].copy_from_slice(&11u32.to_le_bytes()); // atimensec
        s[64..68].copy_from_slice(&13u32.to_le_bytes()); // ctimensec
        s[76..80].copy_from_slice(&55u32.to_le_bytes()); // uid
        s[80..84].copy_from_slice(&66u32.to_le_bytes()); // gid
        let Op::Setattr { set, .. } = decode(&header(FUSE_SETATTR, 4), &s, &[]).unwrap() else {
            panic!()
        };
        assert_eq!(set.atime, Some(TimeSet::At { sec: -5, nsec: 11 }));
        assert_eq!(set.ctime, Some((7, 13)));
        assert_eq!(
            (set.uid, set.gid, set.mode, set.mtime),
            (Some(55), Some(66), None, None)
        );
    }

    #[test]
    fn decodes_rename2_and_rename() {
        let mut s = Vec::new();
        p64(&mut s, 42); // newdir
        p32(&mut s, RENAME_NOREPLACE);
        p32(&mut s, 0);
        let s = area(&s);
        let op = decode(&header(FUSE_RENAME2, 7), &s, b"old\0new\0").unwrap();
        match op {
            Op::Rename {
                parent,
                name,
                newparent,
                newname,
                flags,
            } => {
                assert_eq!(
                    (parent, name, newparent, newname, flags),
                    (7, &b"old"[..], 42, &b"new"[..], 1)
                );
            }
            other => panic!("{other:?}"),
        }
        // RENAME's struct is the 8-byte fuse_rename_in: no flags.
        let op = decode(&header(FUSE_RENAME, 7), &s[..8], b"a\0b\0").unwrap();
        assert!(
            matches!(
                op,
                Op::Rename {
                    newparent: 42,
                    flags: 0,
                    ..
                }
            ),
            "{op:?}"
        );
        assert!(decode(&header(FUSE_RENAME2, 7), &s, b"old\0new").is_err());
    }

    #[test]
    fn decodes_setxattr() {
        let mut s = Vec::new();
        p32(&mut s, 3); // size
        p32(&mut s, 1); // flags: XATTR_CREATE
        let s = area(&s);
        let op = decode(&header(FUSE_SETXATTR, 6), &s, b"user.k\0v\0z").unwrap();
        match op {
            Op::Setxattr {
                ino,
                name,
                value,
                flags,
            } => {
                assert_eq!(
                    (ino, name, value, flags),
                    (6, &b"user.k"[..], &b"v\0z"[..], 1)
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(decode(&header(FUSE_SETXATTR, 6), &s, b"user.k\0v").is_err());
    }

    /// FUSE_IOCTL as fuse_fileattr_set sends chattr's FS_IOC_SETFLAGS:
    /// `fuse_ioctl_in` with FUSE_IOCTL_DIR for a directory and in_size 4,
    /// then the int in the payload.
    #[test]
    fn decodes_ioctl_setflags_from_payload() {
        use super::super::ioctl::{self, FsIoctl, FS_IOC_SETFLAGS};
        let mut s = Vec::new();
        p64(&mut s, 0); // fh
        p32(&mut s, 1 << 4); // flags: FUSE_IOCTL_DIR
        p32(&mut s, FS_IOC_SETFLAGS);
        p64(&mut s, 0); // arg
        p32(&mut s, 4); // in_size
        p32(&mut s, 0); // out_size
        let s = area(&s);
        let flags = 0x10u32.to_ne_bytes();
        match decode(&header(FUSE_IOCTL, 9), &s, &flags).unwrap() {
            Op::Ioctl {
                ino,
                cmd,
                in_data,
                out_size,
                ..
            } => {
                assert_eq!((ino, cmd, out_size), (9, FS_IOC_SETFLAGS, 0));
                assert_eq!(
                    ioctl::decode(cmd, in_data, out_size),
                    Ok(Some(FsIoctl::SetFlags(0x10)))
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(decode(&header(FUSE_IOCTL, 9), &s, &flags[..2]).is_err());
    }

    #[test]
    fn decodes_symlink_and_name_ops_from_payload() {
        let op = decode(&header(FUSE_SYMLINK, 2), &[], b"link\0/target/x\0").unwrap();
        assert!(
            matches!(
                op,
                Op::Symlink {
                    parent: 2,
                    name: b"link",
                    target: b"/target/x"
                }
            ),
            "{op:?}"
        );
        assert!(decode(&header(FUSE_SYMLINK, 2), &[], b"link\0/target").is_err());
        let op = decode(&header(FUSE_UNLINK, 2), &[], b"f\0").unwrap();
        assert!(matches!(
            op,
            Op::Unlink {
                parent: 2,
                name: b"f"
            }
        ));
        let op = decode(&header(FUSE_RMDIR, 2), &[], b"d\0").unwrap();
        assert!(matches!(
            op,
            Op::Rmdir {
                parent: 2,
                name: b"d"
            }
        ));
        let op = decode(&header(FUSE_REMOVEXATTR, 2), &[], b"user.a\0").unwrap();
        assert!(matches!(
            op,
            Op::Removexattr {
                ino: 2,
                name: b"user.a"
            }
        ));
    }

    #[test]
    fn decodes_create() {
        let mut s = Vec::new();
        p32(&mut s, 0o1101); // flags: O_WRONLY|O_CREAT|O_EXCL... as given
        p32(&mut s, 0o100644); // mode
        p32(&mut s, 0o022); // umask
        p32(&mut s, 0); // open_flags
        let s = area(&s);
        let op = decode(&header(FUSE_CREATE, 3), &s, b"new.txt\0").unwrap();
        match op {
            Op::Create {
                parent,
                name,
                mode,
                umask,
                flags,
            } => {
                assert_eq!(
                    (parent, name, mode, umask, flags),
                    (3, &b"new.txt"[..], 0o100644, 0o022, 0o1101)
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn decodes_statx() {
        let mut s = Vec::new();
        p32(&mut s, 1); // getattr_flags: FUSE_GETATTR_FH
        p32(&mut s, 0);
        s.extend_from_slice(&7u64.to_le_bytes()); // fh
        p32(&mut s, 0); // sx_flags
        p32(&mut s, STATX_BASIC_STATS | STATX_BTIME);
        let s = area(&s);
        let op = decode(&header(FUSE_STATX, 5), &s, b"").unwrap();
        assert!(matches!(op, Op::Statx { ino: 5 }), "{op:?}");
    }

    #[test]
    fn decodes_readdirplus_and_readdir_with_size() {
        let mut s = Vec::new();
        p64(&mut s, 9); // fh
        p64(&mut s, 17); // offset
        p32(&mut s, 4096); // size
        p32(&mut s, 0);
        p64(&mut s, 0);
        p32(&mut s, 0);
        p32(&mut s, 0);
        let s = area(&s);
        let op = decode(&header(FUSE_READDIRPLUS, 1), &s, &[]).unwrap();
        assert!(
            matches!(
                op,
                Op::Readdirplus {
                    ino: 1,
                    offset: 17,
                    size: Some(4096)
                }
            ),
            "{op:?}"
        );
        let op = decode(&header(FUSE_READDIR, 1), &s, &[]).unwrap();
        assert!(
            matches!(
                op,
                Op::Readdir {
                    ino: 1,
                    offset: 17,
                    size: Some(4096)
                }
            ),
            "{op:?}"
        );
        let op = decode(&header(FUSE_READ, 1), &s, &[]).unwrap();
        assert!(
            matches!(
                op,
                Op::Read {
                    ino: 1,
                    offset: 17,
                    size: 4096,
                    ..
                }
            ),
            "{op:?}"
        );
    }

    #[test]
    fn skips_trailing_extensions_and_maps_unsupported() {
        let h = InHeader::parse(&in_header(FUSE_LOOKUP, 1, 1)).unwrap();
        let op = decode(&h, &[], b"x\0\x08\0\0\0\x20\0\0\0").unwrap();
        assert!(matches!(op, Op::Lookup { name: b"x", .. }));
        assert!(matches!(
            decode(&h, &[], b"x\0"),
            Err(DecodeError::Extensions { ext: 8, got: 2, .. })
        ));
        for opcode in [
            FUSE_INIT,
            FUSE_FORGET,
            FUSE_BATCH_FORGET,
            FUSE_INTERRUPT,
            FUSE_GETLK,
            FUSE_BMAP,
            999,
        ] {
            let op = decode(&header(opcode, 1), &[], &[]).unwrap();
            assert!(matches!(op, Op::Unsupported { opcode: o } if o == opcode));
        }
    }

    // ------------------------------------------------------------ encode

    fn sample_attr() -> Attr {
        Attr {
            ino: 0x11,
            size: 0x22,
            blocks: 0x33,
            atime: (-1, 1),
            mtime: (0x55, 2),
            ctime: (0x66, 3),
            mode: 0o100644,
            nlink: 2,
            uid: 1000,
            gid: 100,
            rdev: 7,
            blksize: 4096,
        }
    }

    /// Checks a `fuse_attr` image at `at`.
    fn check_attr(b: &[u8], at: usize) {
        assert_eq!(g64(b, at), 0x11);
        assert_eq!(g64(b, at + 8), 0x22);
        assert_eq!(g64(b, at + 16), 0x33);
        assert_eq!(g64(b, at + 24), u64::MAX); // atime -1
        assert_eq!(g64(b, at + 32), 0x55);
        assert_eq!(g64(b, at + 40), 0x66);
        assert_eq!(
            (g32(b, at + 48), g32(b, at + 52), g32(b, at + 56)),
            (1, 2, 3)
        );
        assert_eq!(g32(b, at + 60), 0o100644);
        assert_eq!(g32(b, at + 64), 2);
        assert_eq!((g32(b, at + 68), g32(b, at + 72)), (1000, 100));
        assert_eq!(
            (g32(b, at + 76), g32(b, at + 80), g32(b, at + 84)),
            (7, 4096, 0)
        );
    }

    fn enc(answer: Answer) -> Vec<u8> {
        let mut out = vec![0xAAu8; 4096];
        let n = encode(answer, 4096, &mut out).unwrap();
        out.truncate(n);
        out
    }

    #[test]
    fn encodes_entry_out() {
        let b = enc(Answer::Entry(EntryOut {
            attr: sample_attr(),
            generation: 9,
        }));
        assert_eq!(b.len(), 128);
        assert_eq!((g64(&b, 0), g64(&b, 8)), (0x11, 9));
        assert_eq!((g64(&b, 16), g64(&b, 24)), (TTL.as_secs(), TTL.as_secs()));
        assert_eq!(
            (g32(&b, 32), g32(&b, 36)),
            (TTL.subsec_nanos(), TTL.subsec_nanos())
        );
        check_attr(&b, 40);
        let neg = enc(Answer::Entry(EntryOut::negative()));
        assert_eq!((neg.len(), g64(&neg, 0)), (128, 0));
        assert_eq!(g64(&neg, 16), TTL.as_secs());
    }

    #[test]
    fn encodes_statx_out_with_and_without_btime() {
        let mut a = sample_attr();
        a.rdev = (259 << 8) | 0xff | (0xfff00 << 12); // 259:0xfffff, new_encode_dev
        let b = enc(Answer::Statx(a, Some((1_700_000_000, 42))));
        assert_eq!(b.len(), 288);
        assert_eq!(
            (g64(&b, 0), g32(&b, 8)),
            (TTL.as_secs(), TTL.subsec_nanos())
        );
        assert!(b[12..32].iter().all(|&x| x == 0), "flags and spare");
        let sx = 32; // struct fuse_statx
        assert_eq!(g32(&b, sx), STATX_BASIC_STATS | STATX_BTIME);
        assert_eq!(g32(&b, sx + 4), a.blksize);
        assert_eq!(g64(&b, sx + 8), 0, "attributes");
        assert_eq!((g32(&b, sx + 16), g32(&b, sx + 20)), (a.nlink, a.uid));
        assert_eq!(
            (g32(&b, sx + 24), g32(&b, sx + 28)),
            (a.gid, a.mode & 0xffff)
        );
        assert_eq!((g64(&b, sx + 32), g64(&b, sx + 40)), (a.ino, a.size));
        assert_eq!((g64(&b, sx + 48), g64(&b, sx + 56)), (a.blocks, 0));
        let time = |i: usize| (g64(&b, sx + 64 + 16 * i) as i64, g32(&b, sx + 72 + 16 * i));
        assert_eq!([time(0), time(2), time(3)], [a.atime, a.ctime, a.mtime]);
        assert_eq!(time(1), (1_700_000_000, 42), "btime");
        assert_eq!(
            (g32(&b, sx + 128), g32(&b, sx + 132)),
            (259, 0xfffff),
            "rdev"
        );
        assert!(b[sx + 136..].iter().all(|&x| x == 0), "dev and spare");
        let none = enc(Answer::Statx(a, None));
        assert_eq!(g32(&none, sx), STATX_BASIC_STATS, "no btime to report");
        assert_eq!((g64(&none, sx + 80), g32(&none, sx + 88)), (0, 0));
    }

    #[test]
    fn encodes_attr_out_create_and_small_replies() {
        let b = enc(Answer::Attr(sample_attr()));
        assert_eq!(b.len(), 104);
        assert_eq!(
            (g64(&b, 0), g32(&b, 8), g32(&b, 12)),
            (TTL.as_secs(), TTL.subsec_nanos(), 0)
        );
        check_attr(&b, 16);

        let open = OpenOut {
            fh: 0xF00,
            flags: 2,
        };
        let b = enc(Answer::Create(
            EntryOut {
                attr: sample_attr(),
                generation: 1,
            },
            open,
        ));
        assert_eq!(b.len(), 144);
        check_attr(&b, 40);
        assert_eq!((g64(&b, 128), g32(&b, 136), g32(&b, 140)), (0xF00, 2, 0));

        assert_eq!(enc(Answer::Open(open)).len(), 16);
        assert_eq!(enc(Answer::Written(77)), [77, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(enc(Answer::XattrSize(5)), [5, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(enc(Answer::Lseek(0x0102)), [2, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(enc(Answer::Empty).len(), 0);
        let b = enc(Answer::Ioctl {
            result: -2,
            data: b"xyz".to_vec(),
        });
        assert_eq!(
            (b.len(), g32(&b, 0) as i32, &b[4..16], &b[16..]),
            (19, -2, &[0u8; 12][..], &b"xyz"[..])
        );
    }

    #[test]
    fn encodes_statfs() {
        let s = StatfsOut {
            blocks: 1,
            bfree: 2,
            bavail: 3,
            files: 4,
            ffree: 5,
            bsize: 4096,
            namelen: 255,
            frsize: 1024,
        };
        let b = enc(Answer::Statfs(s));
        assert_eq!(b.len(), 80);
        for (i, v) in [1u64, 2, 3, 4, 5].into_iter().enumerate() {
            assert_eq!(g64(&b, i * 8), v);
        }
        assert_eq!((g32(&b, 40), g32(&b, 44), g32(&b, 48)), (4096, 255, 1024));
        assert!(b[52..80].iter().all(|&x| x == 0));
    }

    #[test]
    fn encodes_data_within_limits() {
        assert_eq!(enc(Answer::Data(b"abc".to_vec())), b"abc");
        let mut small = [0u8; 2];
        assert_eq!(
            encode(Answer::Data(b"abc".to_vec()), 2, &mut small),
            Err(Errno::EIO)
        );
        let mut out = [0u8; 16];
        assert_eq!(
            encode(Answer::Data(b"abc".to_vec()), 2, &mut out),
            Err(Errno::ERANGE)
        );
        assert_eq!(
            encode(Answer::Entry(EntryOut::default()), 16, &mut out),
            Err(Errno::EIO)
        );
    }

    fn dirent(ino: u64, name: &[u8]) -> DirEntry {
        DirEntry {
            ino,
            next: ino + 100,
            kind: 8,
            name: name.to_vec(),
        }
    }

    #[test]
    fn encodes_dirent_padding() {
        let b = enc(Answer::Dir(vec![dirent(5, b"abc"), dirent(6, b"12345678")]));
        assert_eq!(b.len(), 32 + 32);
        assert_eq!(
            (g64(&b, 0), g64(&b, 8), g32(&b, 16), g32(&b, 20)),
            (5, 105, 3, 8)
        );
        assert_eq!(&b[24..27], b"abc");
        assert_eq!(&b[27..32], &[0; 5]); // padding over 0xAA
        assert_eq!((g64(&b, 32), g32(&b, 48)), (6, 8));
        assert_eq!(&b[56..64], b"12345678"); // exactly aligned: no padding
    }

    #[test]
    fn truncates_readdir_at_limit() {
        let entries: Vec<_> = (1..=5).map(|i| dirent(i, b"name")).collect(); // 32 bytes each
        let mut out = vec![0u8; 4096];
        assert_eq!(encode(Answer::Dir(entries.clone()), 100, &mut out), Ok(96));
        assert_eq!(encode(Answer::Dir(entries.clone()), 96, &mut out), Ok(96));
        assert_eq!(encode(Answer::Dir(entries.clone()), 31, &mut out), Ok(0));
        // the buffer bounds too
        assert_eq!(encode(Answer::Dir(entries), 4096, &mut out[..70]), Ok(64));
    }

    /// A READDIRPLUS answer that records every `sent` call.
    fn dirplus(n: u64, calls: &Arc<Mutex<Vec<usize>>>) -> Answer {
        let entries = (1..=n)
            .map(|i| DirPlusEntry {
                entry: EntryOut {
                    attr: Attr {
                        ino: i,
                        ..Attr::default()
                    },
                    generation: 0,
                },
                dirent: dirent(i, b"n"),
            })
            .collect();
        let calls = calls.clone();
        Answer::DirPlus(DirPlus {
            entries,
            on_sent: Some(Box::new(move |s| calls.lock().unwrap().push(s.len()))),
        })
    }

    #[test]
    fn readdirplus_reports_what_was_sent() {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let mut out = vec![0xAAu8; 4096];
        // each entry: 128 + 32 = 160 bytes
        assert_eq!(encode(dirplus(4, &calls), 400, &mut out), Ok(320));
        assert_eq!((g64(&out, 0), g64(&out, 128), g64(&out, 160)), (1, 1, 2));
        assert_eq!(&out[128 + 25..160], &[0; 7]);
        assert_eq!(encode(dirplus(4, &calls), 159, &mut out), Ok(0));
        assert_eq!(encode(dirplus(2, &calls), 4096, &mut out), Ok(320));
        assert_eq!(*calls.lock().unwrap(), vec![2, 0, 2]);
    }

    // ------------------------------------------------------------ ring

    #[test]
    fn ring_headers_and_commands() {
        let mut hb = vec![0xAAu8; HEADER_BUF_SIZE];
        hb[ENT_IN_OUT_OFFSET + 16..ENT_IN_OUT_OFFSET + 20].copy_from_slice(&300u32.to_le_bytes());
        assert_eq!(ring_payload_size(&hb), 300);
        assert_eq!(ring_payload(&hb, &[0; 400]).map(<[u8]>::len), Ok(300));
        assert!(ring_payload(&hb, &[0; 200]).is_err());
        assert_eq!(op_in(&hb).len(), 128);

        write_reply_header(&mut hb, 77, -libc::ENOENT, 24);
        assert_eq!(
            (g32(&hb, 0), g32(&hb, 4) as i32, g64(&hb, 8)),
            (40, -libc::ENOENT, 77)
        );
        assert_eq!((g64(&hb, 256), g64(&hb, 264), g32(&hb, 272)), (0, 0, 24));
        assert_eq!(hb[16], 0xAA); // the rest of in_out is untouched

        let cmd = uring_cmd(3, 0xDEAD_BEEF);
        assert_eq!((g64(&cmd, 0), g64(&cmd, 8)), (0, 0xDEAD_BEEF));
        assert_eq!(u16::from_le_bytes([cmd[16], cmd[17]]), 3);
        assert!(cmd[18..].iter().all(|&x| x == 0));
    }

    // ------------------------------------------------------------ robustness

    /// xorshift64: a tiny deterministic generator for the no-panic test.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> usize {
            (self.next() % n) as usize
        }

        /// Random bytes, biased towards NULs and huge sizes.
        fn bytes(&mut self, max: u64) -> Vec<u8> {
            let len = self.below(max + 1);
            (0..len)
                .map(|_| match self.below(4) {
                    0 => 0,
                    1 => 0xFF,
                    _ => self.next() as u8,
                })
                .collect()
        }
    }

    #[test]
    fn random_requests_never_panic() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut decoded = 0;
        for _ in 0..20_000 {
            let mut raw = in_header(rng.below(60) as u32, rng.next(), 0);
            if rng.below(8) == 0 {
                raw[36..38].copy_from_slice(&(rng.below(4) as u16).to_le_bytes());
            }
            let h = InHeader::parse(&raw).unwrap();
            let op_max = if rng.below(2) == 0 { 128 } else { 48 };
            let op_in = rng.bytes(op_max);
            let payload_max = if rng.below(2) == 0 { 300 } else { 24 };
            let payload = rng.bytes(payload_max);
            if let Ok(op) = decode(&h, &op_in, &payload) {
                decoded += 1;
                let _ = op.name();
            }
        }
        assert!(decoded > 1000, "only {decoded} decoded");
    }
}
