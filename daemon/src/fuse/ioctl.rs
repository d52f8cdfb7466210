//! The ioctls jbdfs serves, as bytes: ext3's inode flag and version ioctls
//! (chattr, lsattr), the fsxattr pair the VFS maps onto the same flags, and
//! ext4's forced shutdown, label pair and FITRIM. What they do is the
//! handler's ([`super::handler`]); this decodes a FUSE_IOCTL's command and
//! input and encodes its output.
//!
//! How the kernel sends them (fs/fuse/ioctl.c): FS_IOC_GETFLAGS/SETFLAGS
//! and FS_IOC_FSGETXATTR/FSSETXATTR never reach a FUSE file's ioctl; the
//! VFS turns them into fileattr_get/set, which FUSE sends as its own
//! FUSE_IOCTL on a file it opens O_RDONLY for the purpose (OPENDIR for a
//! directory, with FUSE_IOCTL_DIR), with exactly 4 bytes (an int) in or
//! out for the flags and a `struct fsxattr` for the fsxattr pair; the
//! reply must carry exactly that many bytes. The VFS has already checked
//! ownership and CAP_LINUX_IMMUTABLE by then (vfs_fileattr_set), after a
//! GETFLAGS of its own; jbdfs checks again, as ext3 does. The version
//! ioctls arrive as "restricted" ioctls: the kernel copies `_IOC_SIZE(cmd)`
//! bytes (a long) in or offers them out, and ext3 reads or writes an int.
//!
//! EXT4_IOC_SHUTDOWN is declared `_IOR` although the filesystem *reads*
//! its flags from the caller, so FUSE (which copies in only for `_IOW`)
//! carries no input at all, only the caller's pointer in `fuse_ioctl_in`'s
//! `arg`, which fuser 0.18 does not pass on. The flags are read from the
//! caller's memory instead ([`caller_u32`]): the pointer from the request
//! or, where the transport lacks it, from `/proc/PID/syscall` (the caller
//! is blocked in that ioctl(2) until the answer), the value from
//! `/proc/PID/mem`. Both need the daemon to be allowed to ptrace the
//! caller, which a root daemon is, and the caller must hold
//! CAP_SYS_ADMIN anyway.

/// `_IOR('f', 1, long)` and the rest, as on a 64-bit kernel; the `32`
/// forms are what 32-bit programs send (the VFS maps the flag pair to the
/// 64-bit numbers itself, the version pair arrives as sent).
pub const FS_IOC_GETFLAGS: u32 = 0x8008_6601;
pub const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
pub const FS_IOC_GETVERSION: u32 = 0x8008_7601;
pub const FS_IOC_SETVERSION: u32 = 0x4008_7602;
pub const FS_IOC32_GETFLAGS: u32 = 0x8004_6601;
pub const FS_IOC32_SETFLAGS: u32 = 0x4004_6602;
pub const FS_IOC32_GETVERSION: u32 = 0x8004_7601;
pub const FS_IOC32_SETVERSION: u32 = 0x4004_7602;
/// `_IOR('X', 31, struct fsxattr)` and `_IOW('X', 32, struct fsxattr)`.
pub const FS_IOC_FSGETXATTR: u32 = 0x801c_581f;
pub const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;

/// `_IOR('X', 125, __u32)`: ext4's forced shutdown (XFS_IOC_GOINGDOWN has
/// the same number), what fstests' godown and `xfs_io -c shutdown` send.
pub const EXT4_IOC_SHUTDOWN: u32 = 0x8004_587d;
/// Its flags (fs/ext4/ext4.h).
pub const EXT4_GOING_FLAGS_DEFAULT: u32 = 0;
pub const EXT4_GOING_FLAGS_LOGFLUSH: u32 = 1;
pub const EXT4_GOING_FLAGS_NOLOGFLUSH: u32 = 2;

/// `_IOR(0x94, 49, char[FSLABEL_MAX])` and `_IOW(0x94, 50, ...)`: the
/// volume label (e2label's), in a 256-byte buffer.
pub const FS_IOC_GETFSLABEL: u32 = 0x8100_9431;
pub const FS_IOC_SETFSLABEL: u32 = 0x4100_9432;
pub const FSLABEL_MAX: usize = 256;
/// ext3's label field holds 16 bytes (EXT4_LABEL_MAX).
const EXT3_LABEL_MAX: usize = 16;

/// `_IOWR('X', 121, struct fstrim_range)`: discard free blocks (fstrim).
pub const FITRIM: u32 = 0xc018_5879;
/// `struct fstrim_range { __u64 start, len, minlen; }`.
pub const FSTRIM_RANGE_SIZE: usize = 24;

/// `sizeof(struct fsxattr)`: xflags, extsize, nextents, projid,
/// cowextsize, 8 bytes of padding.
pub const FSXATTR_SIZE: usize = 28;

/// The fsxattr flags that stand for inode flags (fileattr_fill_flags).
pub const FS_XFLAG_IMMUTABLE: u32 = 0x0000_0008;
pub const FS_XFLAG_APPEND: u32 = 0x0000_0010;
pub const FS_XFLAG_SYNC: u32 = 0x0000_0020;
pub const FS_XFLAG_NOATIME: u32 = 0x0000_0040;
pub const FS_XFLAG_NODUMP: u32 = 0x0000_0080;
/// Set by the kernel on the way out when the inode has xattrs; ignored in.
pub const FS_XFLAG_HASATTR: u32 = 0x8000_0000;

use std::io;
use std::os::unix::fs::FileExt;

use jbdfs::format::inode::flags::*;
use jbdfs::fs::error::ShutdownMode;

/// The inode flags and their fsxattr flags.
const XFLAG_MAP: [(u32, u32); 5] = [
    (EXT2_SYNC_FL, FS_XFLAG_SYNC),
    (EXT2_IMMUTABLE_FL, FS_XFLAG_IMMUTABLE),
    (EXT2_APPEND_FL, FS_XFLAG_APPEND),
    (EXT2_NODUMP_FL, FS_XFLAG_NODUMP),
    (EXT2_NOATIME_FL, FS_XFLAG_NOATIME),
];

/// `struct fsxattr` as FS_IOC_FSSETXATTR gives it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsXattr {
    pub xflags: u32,
    pub extsize: u32,
    pub nextents: u32,
    pub projid: u32,
    pub cowextsize: u32,
}

/// A decoded flag or version ioctl.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsIoctl {
    GetFlags,
    SetFlags(u32),
    GetVersion,
    SetVersion(u32),
    FsGetXattr,
    FsSetXattr(FsXattr),
    /// EXT4_IOC_SHUTDOWN, with its flags when the request carried them
    /// (FUSE never does: see the module's notes).
    Shutdown(Option<u32>),
    GetLabel,
    /// The new label: its length and bytes (at most 16).
    SetLabel(usize, [u8; EXT3_LABEL_MAX]),
    /// FITRIM's range: start, len, minlen, in bytes.
    Trim {
        start: u64,
        len: u64,
        minlen: u64,
    },
}

/// The request `cmd` makes with `input`, offering `out_size` bytes back:
/// None for a command jbdfs does not serve (ENOTTY), an errno when the
/// sizes do not fit the command.
pub fn decode(cmd: u32, input: &[u8], out_size: u32) -> Result<Option<FsIoctl>, i32> {
    let int_in = || read_u32(input, 0).ok_or(libc::EINVAL);
    let room = |n: usize| {
        if (out_size as usize) < n {
            Err(libc::EINVAL)
        } else {
            Ok(())
        }
    };
    let op = match cmd {
        FS_IOC_GETFLAGS | FS_IOC32_GETFLAGS => room(4).map(|()| FsIoctl::GetFlags),
        FS_IOC_SETFLAGS | FS_IOC32_SETFLAGS => int_in().map(FsIoctl::SetFlags),
        FS_IOC_GETVERSION | FS_IOC32_GETVERSION => room(4).map(|()| FsIoctl::GetVersion),
        FS_IOC_SETVERSION | FS_IOC32_SETVERSION => int_in().map(FsIoctl::SetVersion),
        FS_IOC_FSGETXATTR => room(FSXATTR_SIZE).map(|()| FsIoctl::FsGetXattr),
        FS_IOC_FSSETXATTR => {
            let field = |i: usize| read_u32(input, 4 * i).ok_or(libc::EINVAL);
            if input.len() < FSXATTR_SIZE {
                return Err(libc::EINVAL);
            }
            Ok(FsIoctl::FsSetXattr(FsXattr {
                xflags: field(0)?,
                extsize: field(1)?,
                nextents: field(2)?,
                projid: field(3)?,
                cowextsize: field(4)?,
            }))
        }
        EXT4_IOC_SHUTDOWN => Ok(FsIoctl::Shutdown(read_u32(input, 0))),
        FS_IOC_GETFSLABEL => room(FSLABEL_MAX).map(|()| FsIoctl::GetLabel),
        FS_IOC_SETFSLABEL => set_label(input),
        FITRIM => {
            let field = |i: usize| read_u64(input, 8 * i).ok_or(libc::EINVAL);
            room(FSTRIM_RANGE_SIZE)?;
            Ok(FsIoctl::Trim {
                start: field(0)?,
                len: field(1)?,
                minlen: field(2)?,
            })
        }
        _ => return Ok(None),
    };
    op.map(Some)
}

/// FS_IOC_SETFSLABEL's buffer: a string of at most FSLABEL_MAX bytes,
/// of which ext3 keeps 16 (EINVAL past that, as ext4_ioctl_setlabel).
fn set_label(input: &[u8]) -> Result<FsIoctl, i32> {
    if input.len() < FSLABEL_MAX {
        return Err(libc::EINVAL);
    }
    let len = input[..FSLABEL_MAX]
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(FSLABEL_MAX);
    if len > EXT3_LABEL_MAX {
        return Err(libc::EINVAL);
    }
    let mut label = [0u8; EXT3_LABEL_MAX];
    label[..len].copy_from_slice(&input[..len]);
    Ok(FsIoctl::SetLabel(len, label))
}

/// FS_IOC_GETFSLABEL's answer: the label in a zeroed FSLABEL_MAX buffer.
pub fn label_out(name: &[u8; 16]) -> Vec<u8> {
    let mut out = vec![0u8; FSLABEL_MAX];
    out[..name.len()].copy_from_slice(name);
    out
}

/// FITRIM's answer: the range given back with `len` the bytes trimmed, as
/// ext4 reports them.
pub fn trim_out(start: u64, trimmed: u64, minlen: u64) -> Vec<u8> {
    [start, trimmed, minlen]
        .iter()
        .flat_map(|v| v.to_ne_bytes())
        .collect()
}

/// What EXT4_IOC_SHUTDOWN's flags ask for; None (EINVAL) for others.
pub fn shutdown_mode(flags: u32) -> Option<ShutdownMode> {
    match flags {
        EXT4_GOING_FLAGS_DEFAULT => Some(ShutdownMode::Sync),
        EXT4_GOING_FLAGS_LOGFLUSH => Some(ShutdownMode::FlushLog),
        EXT4_GOING_FLAGS_NOLOGFLUSH => Some(ShutdownMode::NoFlush),
        _ => None,
    }
}

/// The u32 that the caller of ioctl `cmd`, thread `pid`, points at with
/// `arg` (0: the transport did not carry the pointer, so it is taken from
/// the ioctl(2) the caller is blocked in). Read from `/proc/PID/mem`,
/// which needs ptrace access to the caller.
pub fn caller_u32(pid: u32, cmd: u32, arg: u64) -> io::Result<u32> {
    let arg = match arg {
        0 => {
            let text = std::fs::read_to_string(format!("/proc/{pid}/syscall"))?;
            ioctl_arg_in(&text, cmd).ok_or_else(|| {
                io::Error::other(format!(
                    "thread {pid} is not in ioctl {cmd:#x} (/proc/{pid}/syscall: {})",
                    text.trim()
                ))
            })?
        }
        a => a,
    };
    let mut b = [0u8; 4];
    std::fs::File::open(format!("/proc/{pid}/mem"))?.read_exact_at(&mut b, arg)?;
    Ok(u32::from_ne_bytes(b))
}

/// The third argument of ioctl `cmd` in a `/proc/PID/syscall` line
/// (`NR ARG1 .. ARG6 SP PC`, arguments in hex), if the line is that ioctl.
/// The command is compared as the kernel takes it, as an unsigned int: a
/// caller passing an int (xfs_io) shows it sign-extended.
pub fn ioctl_arg_in(syscall: &str, cmd: u32) -> Option<u64> {
    let mut f = syscall.split_whitespace();
    let nr: i64 = f.next()?.parse().ok()?;
    if nr != libc::SYS_ioctl {
        return None;
    }
    let hex = |s: &str| u64::from_str_radix(s.strip_prefix("0x")?, 16).ok();
    let _fd = f.next()?;
    if hex(f.next()?)? as u32 != cmd {
        return None;
    }
    hex(f.next()?)
}

/// An int for the caller's memory (the caller runs on this machine, so in
/// its byte order).
pub fn int_out(v: u32) -> Vec<u8> {
    v.to_ne_bytes().to_vec()
}

/// FS_IOC_FSGETXATTR's answer for an inode with `flags`.
pub fn fsxattr_out(flags: u32) -> Vec<u8> {
    let xflags = XFLAG_MAP
        .iter()
        .filter(|(f, _)| flags & f != 0)
        .fold(0, |acc, (_, x)| acc | x);
    let mut out = vec![0u8; FSXATTR_SIZE];
    out[..4].copy_from_slice(&xflags.to_ne_bytes());
    out
}

/// The inode flags FS_IOC_FSSETXATTR asks for, given the inode's visible
/// flags now: those the fsxattr flags stand for are set from them, the
/// others kept. EOPNOTSUPP for fsxattr flags ext3 has no inode flag for
/// and for a project id (ext3 has no project quota), as ext4 answers
/// without the project feature.
pub fn flags_from_fsxattr(current: u32, x: &FsXattr) -> Result<u32, i32> {
    let known = XFLAG_MAP
        .iter()
        .fold(FS_XFLAG_HASATTR, |acc, (_, x)| acc | x);
    if x.xflags & !known != 0 || x.projid != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let common = XFLAG_MAP.iter().fold(0, |acc, (f, _)| acc | f);
    let from_x = XFLAG_MAP
        .iter()
        .filter(|(_, xf)| x.xflags & xf != 0)
        .fold(0, |acc, (f, _)| acc | f);
    Ok((current & !common) | from_x)
}

fn read_u64(b: &[u8], at: usize) -> Option<u64> {
    let bytes: [u8; 8] = b.get(at..at + 8)?.try_into().ok()?;
    Some(u64::from_ne_bytes(bytes))
}

fn read_u32(b: &[u8], at: usize) -> Option<u32> {
    let bytes: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
    Some(u32::from_ne_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// _IOC(dir, type, nr, size) as asm-generic/ioctl.h builds it.
    fn ioc(dir: u32, ty: u8, nr: u32, size: u32) -> u32 {
        (dir << 30) | (size << 16) | ((ty as u32) << 8) | nr
    }

    #[test]
    fn numbers_are_the_kernels() {
        let (r, w) = (2, 1);
        assert_eq!(FS_IOC_GETFLAGS, ioc(r, b'f', 1, 8));
        assert_eq!(FS_IOC_SETFLAGS, ioc(w, b'f', 2, 8));
        assert_eq!(FS_IOC_GETVERSION, ioc(r, b'v', 1, 8));
        assert_eq!(FS_IOC_SETVERSION, ioc(w, b'v', 2, 8));
        assert_eq!(FS_IOC32_GETFLAGS, ioc(r, b'f', 1, 4));
        assert_eq!(FS_IOC32_SETVERSION, ioc(w, b'v', 2, 4));
        assert_eq!(FS_IOC_FSGETXATTR, ioc(r, b'X', 31, FSXATTR_SIZE as u32));
        assert_eq!(FS_IOC_FSSETXATTR, ioc(w, b'X', 32, FSXATTR_SIZE as u32));
        assert_eq!(EXT4_IOC_SHUTDOWN, ioc(r, b'X', 125, 4));
        assert_eq!(FS_IOC_GETFSLABEL, ioc(r, 0x94, 49, FSLABEL_MAX as u32));
        assert_eq!(FS_IOC_SETFSLABEL, ioc(w, 0x94, 50, FSLABEL_MAX as u32));
        assert_eq!(FITRIM, ioc(r | w, b'X', 121, FSTRIM_RANGE_SIZE as u32));
        assert_eq!(
            FS_IOC_GETFLAGS as libc::c_ulong,
            libc::FS_IOC_GETFLAGS as libc::c_ulong
        );
        assert_eq!(
            FS_IOC_SETFLAGS as libc::c_ulong,
            libc::FS_IOC_SETFLAGS as libc::c_ulong
        );
    }

    #[test]
    fn decodes_what_fuse_sends() {
        let imm = EXT2_IMMUTABLE_FL.to_ne_bytes();
        assert_eq!(decode(FS_IOC_GETFLAGS, &[], 4), Ok(Some(FsIoctl::GetFlags)));
        assert_eq!(decode(FS_IOC_GETFLAGS, &[], 0), Err(libc::EINVAL));
        assert_eq!(
            decode(FS_IOC_SETFLAGS, &imm, 0),
            Ok(Some(FsIoctl::SetFlags(EXT2_IMMUTABLE_FL)))
        );
        assert_eq!(decode(FS_IOC_SETFLAGS, &imm[..2], 0), Err(libc::EINVAL));
        // The version pair as a restricted ioctl: a long in, a long's room out.
        let gen = 77u64.to_ne_bytes();
        assert_eq!(
            decode(FS_IOC_SETVERSION, &gen, 0),
            Ok(Some(FsIoctl::SetVersion(77)))
        );
        assert_eq!(
            decode(FS_IOC_GETVERSION, &[], 8),
            Ok(Some(FsIoctl::GetVersion))
        );
        assert_eq!(decode(0x5401, &[], 0), Ok(None), "TCGETS is not ours");
    }

    #[test]
    fn shutdown_flags_come_from_the_caller() {
        // FUSE sends EXT4_IOC_SHUTDOWN (an _IOR) with no input.
        assert_eq!(
            decode(EXT4_IOC_SHUTDOWN, &[], 4),
            Ok(Some(FsIoctl::Shutdown(None)))
        );
        assert_eq!(shutdown_mode(0), Some(ShutdownMode::Sync));
        assert_eq!(shutdown_mode(1), Some(ShutdownMode::FlushLog));
        assert_eq!(shutdown_mode(2), Some(ShutdownMode::NoFlush));
        assert_eq!(shutdown_mode(3), None);
        let line = format!(
            "{} 0x3 0x8004587d 0x7ffd1234 0x0 0x0 0x0 0x7ffd 0x7f00\n",
            libc::SYS_ioctl
        );
        assert_eq!(ioctl_arg_in(&line, EXT4_IOC_SHUTDOWN), Some(0x7ffd_1234));
        assert_eq!(ioctl_arg_in(&line, FS_IOC_GETFLAGS), None);
        let xfs_io = format!(
            "{} 0x3 0xffffffff8004587d 0x7ffcaed326fc 0x7f0a 0x0 0x0 0x7ffc 0x7f0a",
            libc::SYS_ioctl
        );
        assert_eq!(
            ioctl_arg_in(&xfs_io, EXT4_IOC_SHUTDOWN),
            Some(0x7ffc_aed3_26fc)
        );
        assert_eq!(
            ioctl_arg_in("0 0x3 0x8004587d 0x10", EXT4_IOC_SHUTDOWN),
            None
        );
        assert_eq!(ioctl_arg_in("running", EXT4_IOC_SHUTDOWN), None);
        // This process's own memory, by pointer.
        let flags: u32 = 0x1234_5678;
        let at = &flags as *const u32 as u64;
        assert_eq!(
            caller_u32(std::process::id(), EXT4_IOC_SHUTDOWN, at).unwrap(),
            flags
        );
    }

    #[test]
    fn labels_fit_ext3s_sixteen_bytes() {
        assert_eq!(
            decode(FS_IOC_GETFSLABEL, &[], 256),
            Ok(Some(FsIoctl::GetLabel))
        );
        assert_eq!(decode(FS_IOC_GETFSLABEL, &[], 16), Err(libc::EINVAL));
        let mut buf = vec![0u8; FSLABEL_MAX];
        buf[..5].copy_from_slice(b"hello");
        let mut want = [0u8; 16];
        want[..5].copy_from_slice(b"hello");
        assert_eq!(
            decode(FS_IOC_SETFSLABEL, &buf, 0),
            Ok(Some(FsIoctl::SetLabel(5, want)))
        );
        buf[..17].copy_from_slice(b"seventeen-bytes!!");
        assert_eq!(decode(FS_IOC_SETFSLABEL, &buf, 0), Err(libc::EINVAL));
        assert_eq!(decode(FS_IOC_SETFSLABEL, &buf[..16], 0), Err(libc::EINVAL));
        let out = label_out(&want);
        assert_eq!(out.len(), FSLABEL_MAX);
        assert_eq!(&out[..6], b"hello\0");
    }

    #[test]
    fn fitrim_takes_and_gives_back_a_range() {
        let range = trim_out(4096, 1 << 30, 8192);
        assert_eq!(range.len(), FSTRIM_RANGE_SIZE);
        assert_eq!(
            decode(FITRIM, &range, 24),
            Ok(Some(FsIoctl::Trim {
                start: 4096,
                len: 1 << 30,
                minlen: 8192
            }))
        );
        assert_eq!(decode(FITRIM, &range[..16], 24), Err(libc::EINVAL));
        assert_eq!(decode(FITRIM, &range, 8), Err(libc::EINVAL));
    }

    #[test]
    fn fsxattr_maps_the_common_flags() {
        let flags = EXT2_IMMUTABLE_FL | EXT2_NOATIME_FL | EXT2_INDEX_FL;
        let out = fsxattr_out(flags);
        assert_eq!(out.len(), FSXATTR_SIZE);
        let x = FsXattr {
            xflags: u32::from_ne_bytes(out[..4].try_into().unwrap()),
            ..Default::default()
        };
        assert_eq!(x.xflags, FS_XFLAG_IMMUTABLE | FS_XFLAG_NOATIME);
        assert_eq!(flags_from_fsxattr(flags, &x), Ok(flags));
        let cleared = FsXattr::default();
        assert_eq!(flags_from_fsxattr(flags, &cleared), Ok(EXT2_INDEX_FL));
        let dax = FsXattr {
            xflags: 0x8000,
            ..Default::default()
        };
        assert_eq!(flags_from_fsxattr(0, &dax), Err(libc::EOPNOTSUPP));
        let proj = FsXattr {
            projid: 5,
            ..Default::default()
        };
        assert_eq!(flags_from_fsxattr(0, &proj), Err(libc::EOPNOTSUPP));
    }
}
