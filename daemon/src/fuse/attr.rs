//! Conversions between ext3 inodes and fuser's attribute types.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType, INodeNo};

use jbdfs::format::dirent as de;
use jbdfs::format::inode::{self as fi, Inode, Timestamp};

pub fn to_system_time(t: Timestamp) -> SystemTime {
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::new(t.sec as u64, t.nsec)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs()) + Duration::from_nanos(t.nsec as u64)
    }
}

pub fn to_timestamp(t: SystemTime) -> Timestamp {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timestamp {
            sec: d.as_secs() as i64,
            nsec: d.subsec_nanos(),
        },
        Err(e) => {
            let d = e.duration();
            let (mut sec, mut nsec) = (-(d.as_secs() as i64), d.subsec_nanos());
            if nsec > 0 {
                sec -= 1;
                nsec = 1_000_000_000 - nsec;
            }
            Timestamp { sec, nsec }
        }
    }
}

pub fn kind_of_mode(mode: u16) -> FileType {
    match mode & fi::S_IFMT {
        fi::S_IFDIR => FileType::Directory,
        fi::S_IFLNK => FileType::Symlink,
        fi::S_IFCHR => FileType::CharDevice,
        fi::S_IFBLK => FileType::BlockDevice,
        fi::S_IFIFO => FileType::NamedPipe,
        fi::S_IFSOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

pub fn kind_of_dirent(ft: u8) -> FileType {
    match ft {
        de::EXT2_FT_DIR => FileType::Directory,
        de::EXT2_FT_SYMLINK => FileType::Symlink,
        de::EXT2_FT_CHRDEV => FileType::CharDevice,
        de::EXT2_FT_BLKDEV => FileType::BlockDevice,
        de::EXT2_FT_FIFO => FileType::NamedPipe,
        de::EXT2_FT_SOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

pub fn file_attr(ino: INodeNo, i: &Inode, block_size: u32) -> FileAttr {
    let rdev = if i.is_device() {
        let (major, minor) = i.rdev();
        libc::makedev(major, minor) as u32
    } else {
        0
    };
    FileAttr {
        ino,
        size: i.i_size,
        blocks: i.i_blocks,
        atime: to_system_time(i.i_atime),
        mtime: to_system_time(i.i_mtime),
        ctime: to_system_time(i.i_ctime),
        crtime: to_system_time(i.i_crtime),
        kind: kind_of_mode(i.i_mode),
        perm: i.i_mode & 0o7777,
        nlink: i.i_links_count as u32,
        uid: i.i_uid,
        gid: i.i_gid,
        rdev,
        blksize: block_size,
        flags: 0,
    }
}

/// The attributes of a negative entry: node 0 tells the kernel the name
/// does not exist; the rest is ignored.
pub fn negative_attr() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}
