//! ext3 semantics over the buffer cache and the journal: mounting, inodes,
//! block and inode allocation, block mapping, directories and files.
//!
//! Nothing here knows FUSE. Operations take inode numbers and return
//! [`FsError`], which the FUSE adapter maps to errno in one place.

pub mod acl;
pub mod atime;
pub mod balloc;
pub mod bmap;
pub mod data;
pub mod dir;
pub mod error;
pub mod file;
pub mod flags;
pub mod goal;
pub mod htree;
pub mod ialloc;
pub mod inode;
pub mod mount;
pub mod namei;
pub mod orphan;
pub mod punch;
pub mod readahead;
pub mod readdir;
pub mod rename;
pub mod tail;
pub mod trim;
pub mod truncate;
pub mod xattr;

use std::io;

use crate::format::{Corruption, FormatError, Location};

pub use mount::{DataMode, Filesystem, MountConfig};

/// The current time as an inode timestamp, from the coarse clock the
/// kernel's ext3 stamps inodes with (util::now).
pub(crate) fn now() -> crate::format::inode::Timestamp {
    let (sec, nsec) = crate::util::now();
    crate::format::inode::Timestamp { sec, nsec }
}

/// Records the process on whose behalf this thread now works (a FUSE
/// request's pid), before it calls in: the journal's bdelay batching tells
/// a sync writer that waits for others apart from the one that came last.
pub fn set_caller(pid: u32) {
    crate::journal::set_caller(pid);
}

/// Why a filesystem operation failed.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("no space left on device")]
    NoSpace,
    #[error("file name too long")]
    NameTooLong,
    #[error("file too large")]
    FileTooBig,
    #[error("too many links")]
    TooManyLinks,
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("read-only filesystem")]
    ReadOnly,
    #[error("operation not permitted")]
    NotPermitted,
    #[error("no such attribute")]
    NoData,
    #[error("result too large for the buffer")]
    Range,
    #[error("operation not supported")]
    NotSupported,
    /// A file handle names an inode no longer in use.
    #[error("stale file handle")]
    Stale,
    #[error("{0}")]
    Corrupt(#[from] Corruption),
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

pub type Result<T> = std::result::Result<T, FsError>;

/// The errno for an error, for the FUSE adapter.
impl FsError {
    /// Corruption found at `at`: `field` of `structure` holds `value`,
    /// which is wrong for `reason`.
    pub(crate) fn corrupt(
        at: Location,
        structure: &'static str,
        field: &'static str,
        value: impl Into<u64>,
        reason: &'static str,
    ) -> Self {
        Corruption::new(at, FormatError::bad_field(structure, field, value, reason)).into()
    }

    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::Exists => libc::EEXIST,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::NotEmpty => libc::ENOTEMPTY,
            FsError::NoSpace => libc::ENOSPC,
            FsError::NameTooLong => libc::ENAMETOOLONG,
            FsError::FileTooBig => libc::EFBIG,
            FsError::TooManyLinks => libc::EMLINK,
            FsError::Invalid(_) => libc::EINVAL,
            FsError::ReadOnly => libc::EROFS,
            FsError::NotPermitted => libc::EPERM,
            FsError::NoData => libc::ENODATA,
            FsError::Range => libc::ERANGE,
            FsError::NotSupported => libc::EOPNOTSUPP,
            FsError::Stale => libc::ESTALE,
            FsError::Corrupt(_) => libc::EIO,
            FsError::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corruption_names_the_inode_field_and_value() {
        let at = Location::Inode(crate::format::InodeNo(12));
        let e = FsError::corrupt(at, "directory", "logical block", 3u32, "a hole");
        assert_eq!(
            e.to_string(),
            "corrupt inode 12: directory: logical block = 3 is invalid: a hole"
        );
        assert_eq!(e.errno(), libc::EIO);
        assert!(matches!(e, FsError::Corrupt(c) if c.at == at));
    }
}
