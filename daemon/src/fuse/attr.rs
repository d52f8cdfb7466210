//! Conversions between ext3 inodes, the transport-neutral [`Attr`] and
//! fuser's attribute types.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType, INodeNo};

use jbdfs::format::dirent as de;
use jbdfs::format::inode::{self as fi, Inode, Timestamp};

use super::request::{Attr, NodeId};

pub(super) fn to_system_time((sec, nsec): (i64, u32)) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec)
    } else {
        UNIX_EPOCH - Duration::from_secs(sec.unsigned_abs()) + Duration::from_nanos(nsec as u64)
    }
}

/// (seconds, nanoseconds) since the epoch, nanoseconds always positive.
pub(super) fn from_system_time(t: SystemTime) -> (i64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            let (mut sec, mut nsec) = (-(d.as_secs() as i64), d.subsec_nanos());
            if nsec > 0 {
                sec -= 1;
                nsec = 1_000_000_000 - nsec;
            }
            (sec, nsec)
        }
    }
}

fn pair(t: Timestamp) -> (i64, u32) {
    (t.sec, t.nsec)
}

pub(super) fn kind_of_mode(mode: u32) -> FileType {
    match (mode as u16) & fi::S_IFMT {
        fi::S_IFDIR => FileType::Directory,
        fi::S_IFLNK => FileType::Symlink,
        fi::S_IFCHR => FileType::CharDevice,
        fi::S_IFBLK => FileType::BlockDevice,
        fi::S_IFIFO => FileType::NamedPipe,
        fi::S_IFSOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

/// The DT_* type of an ext3 directory entry's file type.
pub(super) fn dtype_of_dirent(ft: u8) -> u32 {
    let dt = match ft {
        de::EXT2_FT_DIR => libc::DT_DIR,
        de::EXT2_FT_SYMLINK => libc::DT_LNK,
        de::EXT2_FT_CHRDEV => libc::DT_CHR,
        de::EXT2_FT_BLKDEV => libc::DT_BLK,
        de::EXT2_FT_FIFO => libc::DT_FIFO,
        de::EXT2_FT_SOCK => libc::DT_SOCK,
        _ => libc::DT_REG,
    };
    dt as u32
}

/// fuser's file type for a DT_* type.
pub(super) fn kind_of_dtype(dt: u32) -> FileType {
    match dt as u8 {
        libc::DT_DIR => FileType::Directory,
        libc::DT_LNK => FileType::Symlink,
        libc::DT_CHR => FileType::CharDevice,
        libc::DT_BLK => FileType::BlockDevice,
        libc::DT_FIFO => FileType::NamedPipe,
        libc::DT_SOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

pub(super) fn file_attr(ino: NodeId, i: &Inode, block_size: u32) -> Attr {
    let rdev = if i.is_device() {
        let (major, minor) = i.rdev();
        libc::makedev(major, minor) as u32
    } else {
        0
    };
    Attr {
        ino,
        size: i.i_size,
        blocks: i.i_blocks,
        atime: pair(i.i_atime),
        mtime: pair(i.i_mtime),
        ctime: pair(i.i_ctime),
        mode: i.i_mode as u32,
        nlink: i.i_links_count as u32,
        uid: i.i_uid,
        gid: i.i_gid,
        rdev,
        blksize: block_size,
    }
}

/// fuser's form of an [`Attr`].
pub(super) fn to_fuser(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: to_system_time(a.atime),
        mtime: to_system_time(a.mtime),
        ctime: to_system_time(a.ctime),
        crtime: to_system_time(a.ctime),
        kind: kind_of_mode(a.mode),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
        flags: 0,
    }
}
