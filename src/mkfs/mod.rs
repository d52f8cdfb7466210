//! mkfs.jbdfs: lay out a fresh ext3 filesystem on a block device.
//!
//! Here: what the caller asks for ([`MkfsOptions`], [`Request`]), the
//! target (a file, a block device or an NBD export) and the steps of
//! [`format()`]. The numbers are worked out in `geometry`, the groups and
//! first directories written in `layout`, the journal sized and written in
//! `journal`.

mod extended;
mod geometry;
mod journal;
mod layout;
mod populate;
pub mod profile;

use std::io;

use crate::device::BlockDevice;
use crate::format::superblock::{self as sbm, feature, Superblock};
use crate::util::Progress;

pub use extended::{parse_extended, EXTENDED_OPTIONS};
pub use geometry::{
    backup_blocks, group_of, plan, resolve_features, Geometry, GroupLayout, MAX_BLOCK_SIZE,
    MIN_BLOCK_SIZE,
};
use journal::{build_journal, JournalMap};
use layout::{build_superblock, lost_found_blocks, Allocator, Writer};
pub use populate::PopulateError;

/// What the user asked for, in mke2fs's terms.
#[derive(Clone, Debug)]
pub struct MkfsOptions {
    /// `-b`: a power of two from 1024 to 65536; `None` picks by size as
    /// mke2fs does (never above 4096).
    pub block_size: Option<u32>,
    /// `-N`: the number of inodes wanted.
    pub inodes_count: Option<u64>,
    /// `-i`: bytes per inode.
    pub inode_ratio: Option<u64>,
    /// `-I`: 128 or 256.
    pub inode_size: u16,
    /// `-J size=`: the journal size in MiB.
    pub journal_mib: Option<u64>,
    /// `-L`
    pub label: String,
    /// `-U`
    pub uuid: Option<[u8; 16]>,
    /// `-m`: percentage of blocks reserved for root.
    pub reserved_percent: f64,
    /// `-O`: features to set ("name") or clear ("^name"), in order.
    pub features: Vec<String>,
    /// `-E root_owner[=uid:gid]`: the root directory's owner (root's by
    /// default, as mke2fs).
    pub root_owner: Option<(u32, u32)>,
    /// `-E lazy_itable_init`: accepted; without uninit_bg (not ext3) mke2fs
    /// zeroes the inode tables all the same, and so does jbdfs.
    pub lazy_itable_init: bool,
    /// `-E stride=`: `s_raid_stride`.
    pub stride: Option<u16>,
    /// `-E stripe_width=`: `s_raid_stripe_width`.
    pub stripe_width: Option<u32>,
    /// `-E hash_seed=`: the directory hash seed (random by default).
    pub hash_seed: Option<[u8; 16]>,
    /// `-E discard|nodiscard`: discard the target first (a hole punched in
    /// an image file, BLKDISCARD on a device), as mke2fs does by default.
    pub discard: bool,
    /// `-g`: blocks per group, a multiple of 8 from 256 to 8 x block size.
    pub blocks_per_group: Option<u32>,
    /// `-e`: `s_errors` (continue by default).
    pub errors: u16,
    /// `-M`: the last-mounted directory recorded in the superblock.
    pub last_mounted: String,
    /// `-o`: `s_creator_os` ([`creator_os`]).
    pub creator_os: u32,
    /// `-S`: write the superblock and group descriptors only, for recovery:
    /// bitmaps, inode tables, directories and journal stay as they are,
    /// and the filesystem is marked for e2fsck.
    pub super_only: bool,
}

/// `s_creator_os` for `-o NAME`, as mke2fs spells them.
pub fn creator_os(name: &str) -> Option<u32> {
    Some(match name.to_ascii_lowercase().as_str() {
        "linux" => sbm::EXT2_OS_LINUX,
        "gnu" | "hurd" => sbm::EXT2_OS_HURD,
        "masix" => sbm::EXT2_OS_MASIX,
        "freebsd" => sbm::EXT2_OS_FREEBSD,
        "lites" => sbm::EXT2_OS_LITES,
        _ => return None,
    })
}

/// `s_errors` for `-e NAME`.
pub fn errors_behaviour(name: &str) -> Option<u16> {
    Some(match name {
        "continue" => sbm::EXT2_ERRORS_CONTINUE,
        "remount-ro" => sbm::EXT2_ERRORS_RO,
        "panic" => sbm::EXT2_ERRORS_PANIC,
        _ => return None,
    })
}

impl Default for MkfsOptions {
    fn default() -> Self {
        MkfsOptions {
            block_size: None,
            inodes_count: None,
            inode_ratio: None,
            inode_size: 256,
            journal_mib: None,
            label: String::new(),
            uuid: None,
            reserved_percent: 5.0,
            features: Vec::new(),
            root_owner: None,
            lazy_itable_init: false,
            stride: None,
            stripe_width: None,
            hash_seed: None,
            discard: true,
            blocks_per_group: None,
            errors: sbm::EXT2_ERRORS_CONTINUE,
            last_mounted: String::new(),
            creator_os: sbm::EXT2_OS_LINUX,
            super_only: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MkfsError {
    #[error("invalid block size {0}: must be a power of two from 1024 to 65536")]
    BadBlockSize(u64),
    #[error("invalid inode size {0}: must be 128 or 256")]
    BadInodeSize(u64),
    #[error("filesystem too small: {size} bytes; jbdfs needs at least {min} bytes")]
    TooSmall { size: u64, min: u64 },
    #[error("filesystem too large: {blocks} blocks of {block_size} bytes; ext3 without 64bit allows 2^32 - 1 blocks")]
    TooLarge { blocks: u64, block_size: u32 },
    #[error("unknown feature '{0}'")]
    UnknownFeature(String),
    #[error("feature '{0}' is not supported by jbdfs (ext3 format only)")]
    UnsupportedFeature(String),
    #[error("feature 'has_journal' cannot be cleared: jbdfs is a journaling filesystem")]
    JournalRequired,
    #[error("invalid journal size {0} MiB: must give between 1024 and 10,240,000 blocks and at most half the filesystem")]
    BadJournalSize(u64),
    #[error("invalid reserved blocks percentage {0}: must be between 0 and 50")]
    BadReserved(f64),
    #[error("too many inodes ({0}); ext3 allows at most 2^32 - 1")]
    TooManyInodes(u64),
    #[error("invalid label '{0}': at most 16 bytes")]
    BadLabel(String),
    #[error("unknown extended option '{0}'; -E takes {EXTENDED_OPTIONS}")]
    UnknownExtended(String),
    #[error("invalid extended option '{option}': {why}")]
    BadExtended { option: String, why: String },
    #[error("usage type '{name}' is not defined in {profile}")]
    UnknownUsageType { name: String, profile: String },
    #[error("{path}: {why}")]
    BadProfile { path: String, why: String },
    #[error("invalid blocks per group {0}: must be a multiple of 8 from 256 to {1} (8 x the block size)")]
    BadBlocksPerGroup(u32, u32),
    #[error("invalid last-mounted directory: at most 64 bytes")]
    BadLastMounted,
    #[error(transparent)]
    Populate(#[from] PopulateError),
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

pub type Result<T> = std::result::Result<T, MkfsError>;

/// What mkfs made, for the summary.
#[derive(Clone, Debug)]
pub struct Summary {
    pub geometry: Geometry,
    pub uuid: [u8; 16],
    pub backups: Vec<u32>,
}

/// How much of the device already reads as zeros.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Zeroed {
    /// Everything reads as zeros (a fresh or hole-punched file): skip
    /// writing zero blocks.
    All,
    /// Unknown contents: write every block that must read as zeros.
    Nothing,
}

/// A fresh image of `size` bytes in memory, formatted with `opts`, for
/// in-process tests and tools.
pub fn memory_image(opts: &MkfsOptions, size: u64) -> Result<crate::device::MemoryDevice> {
    let dev = crate::device::MemoryDevice::new(size)?;
    let g = plan(opts, size)?;
    format(&dev, opts, &g, Zeroed::All, &mut Progress::quiet())?;
    Ok(dev)
}

/// Lays out the filesystem of `geometry` on `dev`.
pub fn format(
    dev: &dyn BlockDevice,
    opts: &MkfsOptions,
    geometry: &Geometry,
    zeroed: Zeroed,
    progress: &mut Progress,
) -> Result<Summary> {
    format_keeping_journal(dev, opts, geometry, zeroed, progress).map(|(s, _)| s)
}

/// [`format()`], also giving the journal's block map (for `-d`, which
/// empties the log again once the tree is in).
fn format_keeping_journal(
    dev: &dyn BlockDevice,
    opts: &MkfsOptions,
    geometry: &Geometry,
    zeroed: Zeroed,
    progress: &mut Progress,
) -> Result<(Summary, JournalMap)> {
    let uuid = match opts.uuid {
        Some(u) => u,
        None => crate::util::random_uuid()?,
    };
    let w = Writer::new(dev, geometry, zeroed);
    let mut alloc = Allocator::new(geometry);
    let now = crate::util::now().0 as u32;

    if opts.super_only {
        return write_super_only(&w, opts, &uuid, now, progress).map(|s| (s, JournalMap::none()));
    }
    w.zero_inode_tables(progress)?;
    let root_blk = alloc.next(geometry.group(0).data_start);
    let lpf_blocks: Vec<u32> = (0..lost_found_blocks(geometry.block_size))
        .map(|_| alloc.next(root_blk))
        .collect();
    let journal = build_journal(geometry, &mut alloc);
    progress.message(&format!(
        "Creating journal ({} blocks): ",
        geometry.journal_blocks
    ));
    w.write_journal(&journal, &uuid, progress)?;
    progress.message("done\n");

    w.write_directories(
        root_blk,
        &lpf_blocks,
        opts.root_owner.unwrap_or((0, 0)),
        now,
    )?;
    w.write_reserved_inodes(&journal, &lpf_blocks, now)?;
    let descs = w.write_bitmaps(&alloc, progress)?;
    let sb = build_superblock(geometry, opts, &uuid, &descs, &journal, now)?;
    progress.message("Writing superblocks and filesystem accounting information: ");
    w.write_superblocks(&sb, &descs)?;
    dev.flush()?;
    progress.message("done\n");
    let summary = Summary {
        geometry: geometry.clone(),
        uuid,
        backups: backup_blocks(geometry),
    };
    Ok((summary, journal))
}

/// `-d`: copies `root` into the filesystem just made, then leaves the
/// image as mkfs would have: the log empty and new (what the copy's
/// commits left in it depends on their timing), no mount counted, the
/// superblock's times mkfs's.
fn fill(
    dev: &std::sync::Arc<dyn BlockDevice>,
    opts: &MkfsOptions,
    summary: &Summary,
    journal: &JournalMap,
    root: &std::path::Path,
    progress: &mut Progress,
) -> Result<()> {
    progress.message("Copying files into the device: ");
    populate::populate(dev.clone(), root)?;
    let g = &summary.geometry;
    let w = Writer::new(&**dev, g, Zeroed::Nothing);
    w.write_journal(journal, &summary.uuid, progress)?;
    let mut buf = vec![0u8; sbm::SUPERBLOCK_SIZE];
    dev.read_at(&mut buf, sbm::SUPERBLOCK_OFFSET)?;
    let mut sb = Superblock::parse(&buf)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
    let now = crate::util::now().0 as u32;
    sb.s_mnt_count = 0;
    sb.s_mtime = 0;
    sb.s_wtime = now;
    sb.s_kbytes_written = 0;
    sb.s_last_mounted = [0; 64];
    let last = opts.last_mounted.as_bytes();
    sb.s_last_mounted[..last.len()].copy_from_slice(last);
    dev.write_at(&sb.to_bytes(), sbm::SUPERBLOCK_OFFSET)?;
    dev.flush()?;
    progress.message("done\n");
    Ok(())
}

/// `-S`: the superblocks and descriptor tables of the filesystem the
/// options describe, and nothing else; marked with errors, so that e2fsck
/// rebuilds the bitmaps and counts from the inode tables left in place.
fn write_super_only(
    w: &Writer,
    opts: &MkfsOptions,
    uuid: &[u8; 16],
    now: u32,
    progress: &mut Progress,
) -> Result<Summary> {
    let g = w.g;
    let alloc = Allocator::new(g);
    let descs = w.bare_descriptors(&alloc);
    let journal = journal::JournalMap::none();
    let mut sb = build_superblock(g, opts, uuid, &descs, &journal, now)?;
    sb.s_state |= sbm::EXT2_ERROR_FS;
    sb.s_jnl_backup_type = 0;
    sb.s_jnl_blocks = [0; 17];
    progress.message("Skipping journal creation in super-only mode\n");
    progress.message("Writing superblocks and filesystem accounting information: ");
    w.write_superblocks(&sb, &descs)?;
    w.dev.flush()?;
    progress.message("done\n");
    Ok(Summary {
        geometry: g.clone(),
        uuid: *uuid,
        backups: backup_blocks(g),
    })
}

/// Detects an existing ext2/3/4 filesystem, so that mkfs can refuse to
/// overwrite it without `-F`.
pub fn existing_filesystem(dev: &dyn BlockDevice) -> io::Result<Option<String>> {
    if dev.size() < sbm::SUPERBLOCK_OFFSET + sbm::SUPERBLOCK_SIZE as u64 {
        return Ok(None);
    }
    let mut buf = vec![0u8; sbm::SUPERBLOCK_SIZE];
    dev.read_at(&mut buf, sbm::SUPERBLOCK_OFFSET)?;
    let magic = u16::from_le_bytes([buf[0x38], buf[0x39]]);
    if magic != sbm::EXT2_SUPER_MAGIC {
        return Ok(None);
    }
    let desc = match Superblock::parse(&buf) {
        Ok(sb) => {
            let kind = if sb.has_compat(feature::COMPAT_HAS_JOURNAL) {
                "ext3"
            } else {
                "ext2"
            };
            let label = sb.volume_name();
            let label = if label.is_empty() {
                String::new()
            } else {
                format!(" labelled '{label}'")
            };
            format!(
                "an {kind} filesystem{label} of {} blocks",
                sb.s_blocks_count
            )
        }
        Err(_) => "a damaged ext2/3/4 superblock".to_string(),
    };
    Ok(Some(desc))
}

/// The backup superblock locations, as mke2fs lists them.
pub fn describe(s: &Summary) -> String {
    let g = &s.geometry;
    let kib = g.block_size / 1024;
    let mut out = format!(
        "Creating filesystem with {} {}k blocks and {} inodes\nFilesystem UUID: {}\n",
        g.blocks_count,
        kib,
        g.inodes_count(),
        crate::util::format_uuid(&s.uuid)
    );
    if !s.backups.is_empty() {
        let list: Vec<String> = s.backups.iter().map(|b| b.to_string()).collect();
        out.push_str("Superblock backups stored on blocks: \n\t");
        out.push_str(&list.join(", "));
        out.push('\n');
    }
    out
}

/// A request to make a filesystem on a file or block device, as the
/// command line gives it.
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub options: MkfsOptions,
    /// The filesystem size in bytes; `None` uses the whole device.
    pub size: Option<u64>,
    /// `-F`: overwrite an existing filesystem.
    pub force: bool,
    /// `-n`: work out the layout and print it, write nothing.
    pub dry_run: bool,
    pub quiet: bool,
    /// `-d`: copy this directory tree in.
    pub root_dir: Option<std::path::PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum MakeError {
    #[error("{path}: {error}")]
    Mkfs { path: String, error: MkfsError },
    #[error("{path}: {error}")]
    Io { path: String, error: io::Error },
    #[error("{0} does not exist and no size was given")]
    NoSize(String),
    #[error("{path} contains {what}; use -F to overwrite it")]
    Exists { path: String, what: String },
    #[error("{0} is not a regular file or block device")]
    NotAFile(String),
    #[error("{path}: size {size} is larger than the device ({device} bytes)")]
    LargerThanDevice {
        path: String,
        size: u64,
        device: u64,
    },
    /// `-d` failed: the target holds no filesystem (an image mkfs created
    /// is removed).
    #[error("{0}; no filesystem was made")]
    Unmade(Box<MakeError>),
    #[error("{0} does not exist: -S rewrites the superblocks of an existing filesystem")]
    SuperOnlyNeedsFilesystem(String),
    /// Mounted or opened by another program (mke2fs's wording).
    #[error("{0}; will not make a filesystem here!")]
    InUse(crate::device::lock::InUse),
}

/// Parses a size the way mke2fs does: a number with an optional K, M, G or T
/// suffix is bytes; a bare number counts `block_size` blocks when `-b` was
/// given and KiB otherwise.
pub fn parse_size(s: &str, block_size: Option<u32>) -> Option<u64> {
    let s = s.trim();
    let (digits, mult) = match s.char_indices().last()? {
        (i, c) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                's' | 'S' => 9,
                _ => return None,
            };
            (&s[..i], 1u64 << shift)
        }
        _ => (s, block_size.map(u64::from).unwrap_or(1024)),
    };
    digits.parse::<u64>().ok()?.checked_mul(mult)
}

/// Makes a filesystem as `mkfs.jbdfs` does and returns what it made.
/// `path` may be an NBD URI (see [`crate::device::Source`]).
pub fn make_filesystem(
    path: &std::path::Path,
    req: &Request,
) -> std::result::Result<Summary, MakeError> {
    let name = path.display().to_string();
    let io_err = |error| MakeError::Io {
        path: name.clone(),
        error,
    };
    let source = crate::device::Source::parse(path.as_os_str()).map_err(io_err)?;
    if source.is_nbd() {
        return make_on_export(&source, req);
    }
    let meta = match std::fs::metadata(path) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err(e)),
    };
    let target = Target::inspect(path, meta.as_ref(), req).map_err(|e| match e {
        TargetError::Io(e) => io_err(e),
        TargetError::Make(m) => m,
    })?;
    let made = lay_out(&name, req, target.fs_bytes, |len| {
        let dev = target.open(path).map_err(|e| match e {
            TargetError::Io(e) => io_err(e),
            TargetError::Make(m) => m,
        })?;
        let zeroed = target.prepare(&dev, len).map_err(io_err)?;
        Ok((std::sync::Arc::new(dev), zeroed))
    });
    if matches!(made, Err(MakeError::Unmade(_))) && !target.exists {
        let _ = std::fs::remove_file(path);
    }
    made
}

/// mkfs on an NBD export: its size unless one is given, and, as on a
/// block device, nothing assumed about what it holds.
fn make_on_export(
    source: &crate::device::Source,
    req: &Request,
) -> std::result::Result<Summary, MakeError> {
    let name = source.to_string();
    let io_err = |error| MakeError::Io {
        path: name.clone(),
        error,
    };
    let opts = crate::device::SourceOptions::default();
    let dev = crate::device::open_writable(source, &opts).map_err(io_err)?;
    let fs_bytes = match req.size {
        Some(s) if s > dev.size() => {
            return Err(MakeError::LargerThanDevice {
                path: name,
                size: s,
                device: dev.size(),
            })
        }
        Some(s) => s,
        None => dev.size(),
    };
    if !req.force && !req.options.super_only {
        if let Some(what) = existing_filesystem(&*dev).map_err(io_err)? {
            return Err(MakeError::Exists { path: name, what });
        }
    }
    lay_out(&name, req, fs_bytes, |_| Ok((dev, Zeroed::Nothing)))
}

/// Plans, then (unless a dry run) opens the target through `open` (given
/// the filesystem's length in bytes) and formats it.
fn lay_out(
    name: &str,
    req: &Request,
    fs_bytes: u64,
    open: impl FnOnce(u64) -> std::result::Result<(std::sync::Arc<dyn BlockDevice>, Zeroed), MakeError>,
) -> std::result::Result<Summary, MakeError> {
    let io_err = |error| MakeError::Io {
        path: name.to_string(),
        error,
    };
    let geometry = plan(&req.options, fs_bytes).map_err(|error| MakeError::Mkfs {
        path: name.to_string(),
        error,
    })?;
    let mut progress = Progress::stdout(!req.quiet);
    if req.dry_run {
        let summary = Summary {
            geometry: geometry.clone(),
            uuid: req.options.uuid.unwrap_or_default(),
            backups: backup_blocks(&geometry),
        };
        progress.message(&describe(&summary));
        return Ok(summary);
    }
    let (dev, zeroed) = open(geometry.blocks_count as u64 * geometry.block_size as u64)?;
    let mut options = req.options.clone();
    let uuid = match options.uuid {
        Some(u) => u,
        None => crate::util::random_uuid().map_err(io_err)?,
    };
    options.uuid = Some(uuid);
    progress.message(&describe(&Summary {
        geometry: geometry.clone(),
        uuid,
        backups: backup_blocks(&geometry),
    }));
    let mk_err = |error| MakeError::Mkfs {
        path: name.to_string(),
        error,
    };
    let (summary, journal) =
        format_keeping_journal(&*dev, &options, &geometry, zeroed, &mut progress)
            .map_err(mk_err)?;
    if let Some(root) = &req.root_dir {
        if let Err(e) = fill(&dev, &options, &summary, &journal, root, &mut progress) {
            // Not half-made: what is there is no filesystem.
            let _ = dev.write_at(&[0u8; sbm::SUPERBLOCK_SIZE], sbm::SUPERBLOCK_OFFSET);
            let _ = dev.flush();
            return Err(MakeError::Unmade(Box::new(mk_err(e))));
        }
    }
    Ok(summary)
}

enum TargetError {
    Io(io::Error),
    Make(MakeError),
}

impl From<io::Error> for TargetError {
    fn from(e: io::Error) -> Self {
        match crate::device::lock::in_use(&e) {
            Some(busy) => TargetError::Make(MakeError::InUse(busy.clone())),
            None => TargetError::Io(e),
        }
    }
}

/// The file or block device being formatted, before anything is written.
struct Target {
    exists: bool,
    is_block_device: bool,
    fs_bytes: u64,
    /// `-E discard` (the default): punch the image out, or BLKDISCARD the
    /// device, before writing.
    discard: bool,
}

impl Target {
    fn inspect(
        path: &std::path::Path,
        meta: Option<&std::fs::Metadata>,
        req: &Request,
    ) -> std::result::Result<Self, TargetError> {
        use std::os::unix::fs::FileTypeExt;
        let name = path.display().to_string();
        let Some(meta) = meta else {
            if req.options.super_only {
                return Err(TargetError::Make(MakeError::SuperOnlyNeedsFilesystem(name)));
            }
            let size = req
                .size
                .ok_or_else(|| TargetError::Make(MakeError::NoSize(name.clone())))?;
            return Ok(Target {
                exists: false,
                is_block_device: false,
                fs_bytes: size,
                discard: false,
            });
        };
        let is_block_device = meta.file_type().is_block_device();
        if !is_block_device && !meta.is_file() {
            return Err(TargetError::Make(MakeError::NotAFile(name)));
        }
        let current = if is_block_device {
            crate::device::FileDevice::open(
                path,
                crate::device::OpenOptions {
                    read_only: true,
                    ..Default::default()
                },
            )?
            .size()
        } else {
            meta.len()
        };
        let fs_bytes = match req.size {
            Some(s) if is_block_device && s > current => {
                return Err(TargetError::Make(MakeError::LargerThanDevice {
                    path: name,
                    size: s,
                    device: current,
                }))
            }
            Some(s) => s,
            None => current,
        };
        // -S rewrites the superblocks of the filesystem that is there.
        if !req.force && !req.options.super_only {
            check_not_formatted(path, &name)?;
        }
        Ok(Target {
            exists: true,
            is_block_device,
            fs_bytes,
            discard: req.options.discard && !req.options.super_only,
        })
    }

    /// Opens the target for writing: locked (an image file) or O_EXCL (a
    /// device) before anything about it changes, so an image in use is
    /// left exactly as it was.
    fn open(
        &self,
        path: &std::path::Path,
    ) -> std::result::Result<crate::device::FileDevice, TargetError> {
        if !self.exists {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)?;
        }
        let opts = crate::device::OpenOptions {
            exclusive: true,
            ..Default::default()
        };
        let mut dev = crate::device::FileDevice::open(path, opts)?;
        dev.grow_to(self.fs_bytes)?;
        Ok(dev)
    }

    /// Makes the filesystem's range read as zeros where that is cheap.
    fn prepare(&self, dev: &crate::device::FileDevice, len: u64) -> io::Result<Zeroed> {
        if self.is_block_device {
            if self.discard {
                // As mke2fs: a device that cannot discard is written all
                // the same; what a discard leaves is not relied on.
                let _ = dev.discard(0, len);
            }
            return Ok(Zeroed::Nothing);
        }
        if !self.exists {
            return Ok(Zeroed::All);
        }
        if !self.discard {
            return Ok(Zeroed::Nothing);
        }
        Ok(match punch_hole(dev.file(), len) {
            Ok(()) => Zeroed::All,
            Err(_) => Zeroed::Nothing,
        })
    }
}

fn check_not_formatted(path: &std::path::Path, name: &str) -> std::result::Result<(), TargetError> {
    let dev = crate::device::FileDevice::open(
        path,
        crate::device::OpenOptions {
            read_only: true,
            ..Default::default()
        },
    )?;
    match existing_filesystem(&dev)? {
        Some(what) => Err(TargetError::Make(MakeError::Exists {
            path: name.to_string(),
            what,
        })),
        None => Ok(()),
    }
}

/// Deallocates `[0, len)` of a regular file so that it reads as zeros.
fn punch_hole(file: &std::fs::File, len: u64) -> io::Result<()> {
    crate::device::file::punch_hole(file, 0, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_in_use_is_left_untouched() {
        let path = std::env::temp_dir().join(format!(
            "jbdfs-mkfs-busy-{}-{}",
            std::process::id(),
            crate::util::unique_suffix()
        ));
        std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
        let holder =
            crate::device::FileDevice::open(&path, crate::device::OpenOptions::default()).unwrap();
        let req = Request {
            size: Some(16 << 20),
            force: true,
            quiet: true,
            ..Default::default()
        };
        let err = make_filesystem(&path, &req).expect_err("refused");
        assert!(matches!(err, MakeError::InUse(_)), "{err}");
        assert!(
            err.to_string()
                .ends_with("; will not make a filesystem here!"),
            "{err}"
        );
        // Neither extended to the size asked for nor written.
        assert_eq!(std::fs::read(&path).unwrap(), vec![7u8; 1 << 20]);
        drop(holder);
        make_filesystem(&path, &req).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 16 << 20);
        std::fs::remove_file(path).unwrap();
    }
}
