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
    /// Inode size in bytes: 128 or 256.
    #[arg(short = 'I', value_name = "INODE-SIZE", default_value_t = 256)]
    inode_size: u16,
    /// Journal options; only size=MiB is supported.
    #[arg(short = 'J', value_name = "size=MIB")]
    journal: Option<String>,
    /// Volume label (at most 16 bytes).
    #[arg(short = 'L', value_name = "LABEL", default_value = "")]
    label: String,
    /// Filesystem UUID.
    #[arg(short = 'U', value_name = "UUID")]
    uuid: Option<String>,
    /// Percentage of blocks reserved for the super-user.
    #[arg(short = 'm', value_name = "PERCENT", default_value_t = 5.0)]
    reserved: f64,
    /// Features to set, or to clear with a leading ^ (comma-separated).
    #[arg(short = 'O', value_name = "FEATURES")]
    features: Vec<String>,
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
    let req = Request {
        options: MkfsOptions {
            block_size: args.block_size,
            inodes_count: args.inodes,
            inode_ratio: args.inode_ratio,
            inode_size: args.inode_size,
            journal_mib,
            label: args.label,
            uuid,
            reserved_percent: args.reserved,
            features: args.features,
        },
        size,
        force: args.force > 0,
        dry_run: args.dry_run,
        quiet: args.quiet,
    };
    mkfs::make_filesystem(&args.device, &req)?;
    Ok(())
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
