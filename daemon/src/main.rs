//! The jbdfs daemon's command line, in the form mount.fuse3 invokes it:
//! `jbdfs SOURCE MOUNTPOINT -o OPTIONS` (see DESIGN.md "FUSE").
//!
//! It parses and checks everything a mount needs, then serves the
//! filesystem through `jbdfs_daemon::daemon`, in the foreground with -f or as a
//! daemon that returns once the mount is live.

use std::fs;
use std::io::IsTerminal;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{ArgAction, CommandFactory, Parser};
use jbdfs_daemon::daemon::{self, DaemonConfig};
use jbdfs_daemon::fuse::uring::{self, RingConfig};
use jbdfs_daemon::fuse::Transport;
use jbdfs_daemon::options::{self as mount_opts, MountOptions};
use tracing_subscriber::EnvFilter;

#[derive(Parser, Debug)]
#[command(
    // Fixed names, so that usage and errors read the same through a symlink.
    name = "jbdfs",
    bin_name = "jbdfs",
    version,
    about = "Mount an ext3 image or block device with jbdfs, a userspace journaling filesystem",
    after_help = "\
Options may come before or after SOURCE and MOUNTPOINT, and -o may be repeated.

jbdfs options (-o):
  data=ordered|writeback|journal   how file data is ordered against the journal
  bdelay=0|yield|N|jbd2|auto       how a sync commit waits for others to join it
  hz=N                             jiffies per second for bdelay=N (1-10000)
  min_batch_time=US, max_batch_time=US   bounds on bdelay=jbd2's wait
  commit=SECS                      periodic commit interval (0: default 5)
  barrier[=0|1], nobarrier         flush around commit blocks
  errors=continue|remount-ro|panic
  acl, noacl                       POSIX ACLs on or off (default: the superblock's
                                   default mount options; mke2fs and mkfs.jbdfs set acl)
  noload, norecovery               with ro: do not replay the journal (the image as it
                                   is on disk, which may be inconsistent)
  cache_size=BYTES[K|M|G]          buffer cache size
  threads=N                        FUSE worker threads (1-1024, default 8)
  direct                           O_DIRECT on the backing store
  direct_io                        open files bypass the kernel's page cache
  io_uring, noio_uring             FUSE over io_uring rings, or /dev/fuse (default:
                                   rings when /sys/module/fuse/parameters/enable_uring
                                   is on; io_uring warns when it cannot have them)
  io_uring_q_depth=N               ring entries per CPU (1-1024, default 8)
  io_uring_poll_us=N               after answering, a ring looks for its next
                                   request this long before it sleeps (0-10000,
                                   default 50; 0 sleeps at once)
  nbd_timeout=SECS                 an NBD source may be unreachable this long
                                   before I/O fails with EIO (default 30)
  nbd_connections=N                connections to an NBD server that allows
                                   several (CAN_MULTI_CONN; 1-16, default 1)
  tls-certificates=DIR             TLS to the NBD server, verified against
                                   DIR/ca-cert.pem (client-cert.pem and
                                   client-key.pem sent when present)
  tls-psk-file=FILE                TLS with a pre-shared key (username:hexkey
                                   lines); tls-username=NAME picks the line
  tls-hostname=NAME                the name the server's certificate must bear
  debug, sync, dirsync, max_map=N, devsim=MODEL, stats=PATH, record=PATH
Generic FUSE and mount options (ro, rw, noatime, allow_other, default_permissions,
fsname=, ...) are passed on; fstab, systemd (x-*) and SELinux options, user_xattr and
lazytime (timestamps are logged at once, which lazytime allows) are accepted."
)]
struct Args {
    /// Stay in the foreground.
    #[arg(short = 'f')]
    foreground: bool,
    /// Debug output (same as -o debug); implies -f.
    #[arg(short = 'd')]
    debug: bool,
    /// Single-threaded: one FUSE worker (overrides -o threads).
    #[arg(short = 's')]
    single_threaded: bool,
    /// Mount options, comma-separated.
    #[arg(short = 'o', value_name = "OPTIONS", action = ArgAction::Append)]
    options: Vec<String>,
    /// The ext3 image file, block device, or NBD export
    /// (nbd://HOST[:PORT]/EXPORT or nbd+unix:///EXPORT?socket=PATH).
    source: PathBuf,
    /// The directory to mount on.
    mountpoint: PathBuf,
}

/// What jbdfs(8) adds to the page made from [`Args`].
const MAN_PAGE: jbdfs_man::Page = jbdfs_man::Page {
    notes: "MOUNT OPTIONS",
    see_also: &[
        "mkfs.jbdfs(8)",
        "fsck.jbdfs(8)",
        "mount(8)",
        "mount.fuse3(8)",
        "fstab(5)",
    ],
};

fn main() -> ExitCode {
    if let Some(code) = jbdfs_man::generate_if_asked(Args::command, &MAN_PAGE) {
        return code;
    }
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("jbdfs: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(args: Args) -> anyhow::Result<()> {
    let opts = mount_options(&args)?;
    init_logging(opts.debug)?;
    if opts.remount {
        let words: Vec<String> = args
            .options
            .iter()
            .flat_map(|o| o.split(','))
            .map(String::from)
            .collect();
        return jbdfs_daemon::remount::request(&args.mountpoint, &words);
    }
    check_source(&args.source)?;
    check_mountpoint(&args.mountpoint)?;
    // libfuse's rule: debug output is only visible if we do not daemonize.
    let foreground = args.foreground || opts.debug;
    tracing::debug!(
        source = %args.source.display(),
        mountpoint = %args.mountpoint.display(),
        foreground,
        ?opts,
        "parsed mount options"
    );
    let generic = kernel_like_defaults(&opts.generic, running_as_root());
    let mut cfg = DaemonConfig {
        source: args.source.clone(),
        mountpoint: args.mountpoint.clone(),
        mount: opts.mount_config(),
        threads: opts.threads,
        direct_io: opts.direct_io,
        fuse_direct_io: opts.fuse_direct_io,
        transport: match opts.io_uring {
            Some(true) => Transport::IoUring(ring_config(&opts)),
            Some(false) => Transport::DevFuse,
            None => Transport::Auto(ring_config(&opts)),
        },
        allow_other: generic.iter().any(|o| o == "allow_other"),
        generic,
        stats: opts.stats.clone(),
        record: opts.record.clone(),
        devsim: opts.devsim.clone(),
        noload: opts.noload,
        nbd_timeout: std::time::Duration::from_secs(opts.nbd_timeout.into()),
        nbd_connections: opts.nbd_connections,
        mount_options: opts.clone(),
    };
    if let Some(why) = daemon::check_mountable(&cfg)? {
        // As mount(8) does for a write-protected device. Said once: the
        // daemonized child comes through here again.
        if std::env::var_os(daemon::CHILD_ENV).is_none() {
            eprintln!(
                "jbdfs: {}: {why}; mounting read-only",
                args.source.display()
            );
        }
        cfg.mount.read_only = true;
    }
    if cfg.noload && !cfg.mount.read_only {
        // As ext4: a read-write mount must replay what the journal holds.
        // Asked after the check, as mount(8) retries a write-protected
        // device read-only first (fstests generic/050).
        anyhow::bail!("-o noload (norecovery) needs -o ro: a read-write mount replays the journal");
    }
    if foreground {
        daemon::serve(&cfg)
    } else {
        let raw: Vec<String> = std::env::args().skip(1).collect();
        daemon::daemonize(&raw, &args.mountpoint)
    }
}

// The option model's defaults are the rings' own.
const _: () = assert!(mount_opts::DEFAULT_IO_URING_Q_DEPTH == uring::DEFAULT_DEPTH);
const _: () =
    assert!(mount_opts::DEFAULT_IO_URING_POLL_US as u128 == uring::DEFAULT_POLL.as_micros());
const _: () = assert!(*mount_opts::IO_URING_POLL_US_RANGE.end() == uring::MAX_POLL_US);

/// The rings' setup from `-o io_uring_q_depth` and `-o io_uring_poll_us`.
fn ring_config(opts: &MountOptions) -> RingConfig {
    RingConfig {
        depth: opts.io_uring_q_depth,
        poll: std::time::Duration::from_micros(opts.io_uring_poll_us.into()),
    }
}

/// Whether the effective user is root: /proc/self belongs to it.
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// A mount made by root (`mount -t fuse.jbdfs`, fstab) behaves like a
/// kernel filesystem's, as fuse2fs's kernel mode does: every user may use
/// it under the permission bits (allow_other, with default_permissions
/// always on), and setuid files and device nodes work unless nosuid or
/// nodev says otherwise. A user's own mount keeps FUSE's safer defaults.
fn kernel_like_defaults(generic: &[String], root: bool) -> Vec<String> {
    let mut out = generic.to_vec();
    if !root {
        return out;
    }
    let has = |names: &[&str]| generic.iter().any(|o| names.contains(&o.as_str()));
    if !has(&["allow_other", "allow_root"]) {
        out.push("allow_other".into());
    }
    if !has(&["suid", "nosuid"]) {
        out.push("suid".into());
    }
    if !has(&["dev", "nodev"]) {
        out.push("dev".into());
    }
    out
}

/// The `-o` options with the short flags applied on top, as libfuse does.
fn mount_options(args: &Args) -> anyhow::Result<MountOptions> {
    let strs: Vec<&str> = args.options.iter().map(String::as_str).collect();
    let mut opts = MountOptions::parse(&strs)?;
    opts.debug |= args.debug;
    if args.single_threaded {
        opts.threads = 1;
    }
    Ok(opts)
}

/// RUST_LOG, when set, says exactly what to log; otherwise debug mode decides.
fn init_logging(debug: bool) -> anyhow::Result<()> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) => {
            EnvFilter::try_new(&spec).with_context(|| format!("invalid RUST_LOG {spec:?}"))?
        }
        // A mount prints nothing unless something is wrong, as mount(8) users
        // expect; -o debug (or RUST_LOG) shows the rest. fuser warns on every
        // unmount that it could not unmount what umount(8) already had
        // (EINVAL): not something wrong.
        Err(_) => EnvFilter::new(if debug {
            "debug"
        } else {
            "warn,fuser::session=error"
        }),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(daemon::log_writer)
        // A failed log write must not turn into a second write, to a stderr
        // that may be the one failing.
        .log_internal_errors(false)
        // Colour codes would garble journald and log files.
        .with_ansi(std::io::stderr().is_terminal())
        .try_init()
        .map_err(|e| anyhow::anyhow!("cannot set up logging: {e}"))
}

fn check_source(source: &Path) -> anyhow::Result<()> {
    // An NBD URI is checked by connecting to it (check_mountable).
    if jbdfs::device::Source::parse(source.as_os_str())?.is_nbd() {
        return Ok(());
    }
    let meta = fs::metadata(source).with_context(|| format!("SOURCE {}", source.display()))?;
    let kind = meta.file_type();
    if !kind.is_file() && !kind.is_block_device() {
        bail!(
            "SOURCE {} is neither a regular file nor a block device",
            source.display()
        );
    }
    Ok(())
}

fn check_mountpoint(mountpoint: &Path) -> anyhow::Result<()> {
    let meta =
        fs::metadata(mountpoint).with_context(|| format!("MOUNTPOINT {}", mountpoint.display()))?;
    if !meta.is_dir() {
        bail!("MOUNTPOINT {} is not a directory", mountpoint.display());
    }
    Ok(())
}
