//! mkfs.jbdfs (built as mkfs-jbdfs): the command line over `jbdfs::mkfs`.
//! Flags follow mke2fs; all the work happens in the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use jbdfs::mkfs::{self, MkfsOptions, Request};

#[derive(Parser, Debug)]
#[command(
    name = "mkfs.jbdfs",
    version,
    about = "Make an ext3 filesystem for jbdfs (mke2fs-compatible flags)",
    after_help = "SIZE takes a K, M, G or T suffix; a bare number counts blocks of -b, or KiB without -b.\nDEVICE may be a regular file (created or extended to SIZE) or a block device.\nAn image in use (mounted by jbdfs, or open in fsck) is refused, even with -F, and left untouched."
)]
struct Args {
    /// Block size in bytes: a power of two from 1024 to 65536 (default by
    /// size: 1024 below 512 MiB, else 4096). Linux on x86 mounts at most
    /// 4096 (the page size); jbdfs mounts them all.
    #[arg(short = 'b', value_name = "BLOCK-SIZE")]
    block_size: Option<u32>,
    /// Number of inodes.
    #[arg(short = 'N', value_name = "NUMBER-OF-INODES")]
    inodes: Option<u64>,
    /// Bytes per inode.
    #[arg(short = 'i', value_name = "BYTES-PER-INODE")]
    inode_ratio: Option<u64>,
    /// Inode size in bytes: 128 or 256 (default 256, or the usage type's).
    #[arg(short = 'I', value_name = "INODE-SIZE")]
    inode_size: Option<u16>,
    /// Journal options; only size=MiB is supported.
    #[arg(short = 'J', value_name = "size=MIB")]
    journal: Option<String>,
    /// Volume label (at most 16 bytes).
    #[arg(short = 'L', value_name = "LABEL", default_value = "")]
    label: String,
    /// Filesystem UUID.
    #[arg(short = 'U', value_name = "UUID")]
    uuid: Option<String>,
    /// Percentage of blocks reserved for the super-user (default 5).
    #[arg(short = 'm', value_name = "PERCENT")]
    reserved: Option<f64>,
    /// Features to set, or to clear with a leading ^ (comma-separated).
    #[arg(short = 'O', value_name = "FEATURES")]
    features: Vec<String>,
    /// Extended options, comma-separated: root_owner[=UID:GID] (the root
    /// directory's owner; the caller's without a value), lazy_itable_init[=0|1]
    /// (accepted: ext3's inode tables are always zeroed), stride=BLOCKS,
    /// stripe_width=BLOCKS, hash_seed=UUID, discard (the default), nodiscard.
    #[arg(short = 'E', value_name = "EXTENDED-OPTIONS")]
    extended: Vec<String>,
    /// Usage types from mke2fs.conf (news, largefile, largefile4, small,
    /// floppy, big, huge, hurd, ...), comma-separated: their blocksize,
    /// inode_ratio, inode_size and reserved_ratio are the defaults. Read from
    /// $MKE2FS_CONFIG or /etc/mke2fs.conf, else mke2fs's built-in profile.
    #[arg(short = 'T', value_name = "USAGE-TYPES")]
    usage_types: Option<String>,
    /// Create a journal (always: jbdfs is ext3).
    #[arg(short = 'j')]
    journal_flag: bool,
    /// Filesystem revision: only 1 (revision 0 has no features, so no journal).
    #[arg(short = 'r', value_name = "REVISION")]
    revision: Option<u32>,
    /// Blocks per group: a multiple of 8 from 256 to 8 x the block size.
    #[arg(short = 'g', value_name = "BLOCKS-PER-GROUP")]
    blocks_per_group: Option<u32>,
    /// What the kernel does on an error: continue, remount-ro or panic.
    #[arg(short = 'e', value_name = "ERRORS-BEHAVIOUR")]
    errors: Option<String>,
    /// The last-mounted directory to record.
    #[arg(short = 'M', value_name = "LAST-MOUNTED-DIR")]
    last_mounted: Option<String>,
    /// Creator OS: Linux, GNU (hurd), FreeBSD, Masix or Lites.
    #[arg(short = 'o', value_name = "CREATOR-OS")]
    creator_os: Option<String>,
    /// Write the superblock and group descriptors only, leaving everything
    /// else in place, to recover a filesystem whose superblock and backups
    /// are all damaged; then run fsck.jbdfs (or e2fsck). The other options
    /// must be those the filesystem was made with.
    #[arg(short = 'S')]
    super_only: bool,
    /// Copy this directory tree into the new filesystem, as mke2fs -d:
    /// files (holes kept), directories, hard links, symlinks, devices,
    /// fifos, sockets, owners, modes, times and extended attributes (ACLs
    /// and security labels among them). With SOURCE_DATE_EPOCH (or
    /// E2FSPROGS_FAKE_TIME) set, -U and -E hash_seed=, the same tree gives
    /// a byte-identical image.
    #[arg(short = 'd', value_name = "ROOT-DIRECTORY")]
    root_dir: Option<PathBuf>,
    /// Filesystem type; only ext3 (and jbdfs) are accepted.
    #[arg(short = 't', value_name = "TYPE")]
    fs_type: Option<String>,
    /// Quiet: print nothing but errors.
    #[arg(short = 'q')]
    quiet: bool,
    /// Force: overwrite an existing filesystem.
    #[arg(short = 'F', action = clap::ArgAction::Count)]
    force: u8,
    /// Dry run: show what would be made, write nothing.
    #[arg(short = 'n')]
    dry_run: bool,
    /// The file or block device to format.
    device: PathBuf,
    /// The filesystem size (default: the whole device).
    size: Option<String>,
}

/// What mkfs.jbdfs(8) adds to the page made from [`Args`].
const MAN_PAGE: jbdfs_man::Page = jbdfs_man::Page {
    notes: "NOTES",
    see_also: &["jbdfs(8)", "fsck.jbdfs(8)", "mke2fs(8)"],
};

fn main() -> ExitCode {
    if let Some(code) = jbdfs_man::generate_if_asked(Args::command, &MAN_PAGE) {
        return code;
    }
    let args = Args::parse();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mkfs.jbdfs: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    if let Some(t) = &args.fs_type {
        if t != "ext3" && t != "jbdfs" {
            anyhow::bail!("filesystem type '{t}' is not supported: jbdfs makes ext3");
        }
    }
    let journal_mib = args.journal.as_deref().map(parse_journal).transpose()?;
    let uuid = args
        .uuid
        .as_deref()
        .map(|u| jbdfs::util::parse_uuid(u).ok_or_else(|| anyhow::anyhow!("invalid UUID '{u}'")))
        .transpose()?;
    let size = args
        .size
        .as_deref()
        .map(|s| {
            mkfs::parse_size(s, args.block_size)
                .ok_or_else(|| anyhow::anyhow!("invalid size '{s}'"))
        })
        .transpose()?;
    match args.revision {
        None | Some(1) => {}
        Some(0) => anyhow::bail!(
            "revision 0 filesystems have no features, so no journal: jbdfs makes revision 1"
        ),
        Some(r) => anyhow::bail!("invalid revision {r}: must be 1"),
    }
    let _ = args.journal_flag;
    let creator_os = args
        .creator_os
        .as_deref()
        .map(|os| {
            mkfs::creator_os(os).ok_or_else(|| {
                anyhow::anyhow!("invalid creator OS '{os}': Linux, GNU, FreeBSD, Masix or Lites")
            })
        })
        .transpose()?;
    let usage = match usage_types(&args, creator_os, size) {
        Some(types) => mkfs::profile::usage_defaults(&types)?,
        None => Default::default(),
    };
    let mut options = MkfsOptions {
        block_size: args.block_size.or(usage.block_size),
        inodes_count: args.inodes,
        inode_ratio: args.inode_ratio.or(usage.inode_ratio),
        inode_size: args.inode_size.or(usage.inode_size).unwrap_or(256),
        journal_mib,
        label: args.label,
        uuid,
        reserved_percent: args.reserved.or(usage.reserved_percent).unwrap_or(5.0),
        features: args.features,
        blocks_per_group: args.blocks_per_group,
        last_mounted: args.last_mounted.unwrap_or_default(),
        super_only: args.super_only,
        ..Default::default()
    };
    if let Some(e) = &args.errors {
        options.errors = mkfs::errors_behaviour(e).ok_or_else(|| {
            anyhow::anyhow!("invalid errors behaviour '{e}': continue, remount-ro or panic")
        })?;
    }
    if let Some(os) = creator_os {
        options.creator_os = os;
    }
    for e in &args.extended {
        mkfs::parse_extended(e, &mut options)?;
    }
    if let Some(sec) = fixed_time()? {
        jbdfs::util::fix_clock(sec);
    }
    let req = Request {
        root_dir: args.root_dir,
        options,
        size,
        force: args.force > 0,
        dry_run: args.dry_run,
        quiet: args.quiet,
    };
    mkfs::make_filesystem(&args.device, &req)?;
    Ok(())
}

/// The time a reproducible build fixes: SOURCE_DATE_EPOCH, else mke2fs's
/// own E2FSPROGS_FAKE_TIME.
fn fixed_time() -> anyhow::Result<Option<i64>> {
    for var in ["SOURCE_DATE_EPOCH", "E2FSPROGS_FAKE_TIME"] {
        if let Some(v) = std::env::var_os(var) {
            let v = v.to_string_lossy();
            let sec = v
                .trim()
                .parse::<i64>()
                .map_err(|_| anyhow::anyhow!("{var}={v} is not a number of seconds"))?;
            return Ok(Some(sec));
        }
    }
    Ok(None)
}

/// The usage types whose profile values apply, as mke2fs lists them: `-T`'s
/// (or, without it, the size type), then "hurd" for `-o hurd`. `None`:
/// mke2fs's built-in defaults for the size, which the library has.
fn usage_types(args: &Args, creator_os: Option<u32>, size: Option<u64>) -> Option<String> {
    let hurd = creator_os == Some(jbdfs::format::superblock::EXT2_OS_HURD);
    let first = match &args.usage_types {
        Some(t) => t.clone(),
        None if hurd => {
            let bytes = size.unwrap_or_else(|| {
                std::fs::metadata(&args.device)
                    .map(|m| m.len())
                    .unwrap_or(0)
            });
            mkfs::profile::size_type(bytes).to_string()
        }
        None => return None,
    };
    Some(if hurd { format!("{first},hurd") } else { first })
}

fn parse_journal(opts: &str) -> anyhow::Result<u64> {
    let mut size = None;
    for opt in opts.split(',') {
        match opt.split_once('=') {
            Some(("size", v)) => {
                size = Some(
                    v.parse::<u64>()
                        .map_err(|_| anyhow::anyhow!("invalid journal size '{v}'"))?,
                )
            }
            _ => anyhow::bail!("unsupported journal option '{opt}': only size=MiB is supported"),
        }
    }
    size.ok_or_else(|| anyhow::anyhow!("journal options need size=MiB"))
}
