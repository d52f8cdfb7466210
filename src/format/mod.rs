//! Parse and serialize the ext3 and JBD on-disk structures: bytes in, typed
//! values out, with no I/O and no locks.
//!
//! ext3 structures are little-endian; JBD structures are big-endian. Every
//! parser checks the buffer length first and validates what it reads, returning
//! a [`FormatError`] that names the structure and field instead of panicking.
//!
//! Nothing here may panic on what it reads, so indexing and slicing, which
//! panic when out of bounds, are refused throughout src/format: reads go
//! through `get`, `chunks_exact`, fixed-size arrays or [`bytes`]' checked
//! helpers.
#![deny(clippy::indexing_slicing)]

pub mod acl;
pub mod bytes;
pub mod dirent;
pub mod dirhash;
pub mod extent;
pub mod group_desc;
pub mod htree;
pub mod indirect;
pub mod inode;
pub mod jbd;
pub mod superblock;
pub mod xattr;

use std::fmt;

/// A filesystem block number (ext3 uses 32 bits).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockNo(pub u32);

/// An inode number; inode 1 is the first, 0 means "none".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InodeNo(pub u32);

/// A block group number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupNo(pub u32);

impl fmt::Display for BlockNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for InodeNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for GroupNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What is wrong with a structure read from disk.
///
/// `structure` names the on-disk structure ("superblock", "inode", "dirent",
/// "journal superblock", ...) and `field` the kernel's field name, so that the
/// message points at the exact bytes. Callers that know the location wrap this
/// in a [`Corruption`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("{structure}: buffer of {len} bytes is shorter than the {need} bytes needed")]
    Short {
        structure: &'static str,
        len: usize,
        need: usize,
    },
    #[error("{structure}: bad magic {found:#x}, expected {expected:#x}")]
    BadMagic {
        structure: &'static str,
        found: u32,
        expected: u32,
    },
    #[error("{structure}: {field} = {value} is invalid: {reason}")]
    BadField {
        structure: &'static str,
        field: &'static str,
        value: u64,
        reason: &'static str,
    },
}

impl FormatError {
    pub fn bad_field(
        structure: &'static str,
        field: &'static str,
        value: impl Into<u64>,
        reason: &'static str,
    ) -> Self {
        FormatError::BadField {
            structure,
            field,
            value: value.into(),
            reason,
        }
    }
}

/// Where a corrupt structure was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    Superblock,
    GroupDesc(GroupNo),
    Inode(InodeNo),
    Block(BlockNo),
    /// A block of the journal, by its index inside the journal.
    JournalBlock(u32),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Superblock => write!(f, "superblock"),
            Location::GroupDesc(g) => write!(f, "group descriptor {g}"),
            Location::Inode(i) => write!(f, "inode {i}"),
            Location::Block(b) => write!(f, "block {b}"),
            Location::JournalBlock(b) => write!(f, "journal block {b}"),
        }
    }
}

/// A structured corruption error: what was wrong, and where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("corrupt {at}: {error}")]
pub struct Corruption {
    pub at: Location,
    #[source]
    pub error: FormatError,
}

impl Corruption {
    pub fn new(at: Location, error: FormatError) -> Self {
        Corruption { at, error }
    }
}
