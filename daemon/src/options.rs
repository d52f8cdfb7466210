//! Mount options for the jbdfs daemon: the typed model and the `-o` parser.
//!
//! Pure and free of I/O so that every form `mount(8)`, `mount.fuse3`, fstab and
//! systemd can hand us is unit-tested here, away from FUSE. Options fall into
//! three kinds:
//! - jbdfs's own (journal and daemon tuning), parsed into typed fields;
//! - generic FUSE/VFS mount options, kept verbatim in order for the FUSE
//!   adapter to hand to the kernel ([`MountOptions::fuse_generic`]);
//! - options meant for mount(8), fstab, systemd or SELinux, or ext3 options
//!   jbdfs does not act on: accepted so an ext3 fstab line works unchanged,
//!   and recorded in [`MountOptions::ignored`] only so the daemon can log them.
//!
//! As with mount(8), a later option overrides an earlier one.

use std::fmt;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use jbdfs::device::DevSimParams;
use jbdfs::fs::atime::AtimeMode;
use jbdfs::fs::mount::Tunables;
use jbdfs::fs::MountConfig;
use jbdfs::journal::{Batching, JournalConfig};

/// `data=` and `errors=`: the types belong to the filesystem, which acts
/// on them.
pub use jbdfs::fs::{error::ErrorsPolicy, DataMode};
/// The filesystem's defaults for the options it acts on, in the units of
/// the options.
pub use jbdfs::journal::{DEFAULT_MAX_BATCH_TIME_US, DEFAULT_MIN_BATCH_TIME_US};

/// The default `bdelay`: auto, which commits at once on fast devices (as
/// bdelay=0) and batches only where a commit costs a positioning delay
/// (docs/ARCHITECTURE.md, batch.rs; figures in docs/PERFORMANCE.md).
pub const DEFAULT_BDELAY: Bdelay = Bdelay::Auto;
/// Jiffies per second for `bdelay=N`; 250 matches the kernel config the
/// original bdelay measurements were taken with (4 ms per jiffy).
pub const DEFAULT_HZ: u32 = 250;
/// Bounds on `hz`: beyond these a jiffy stops meaning anything useful.
pub const HZ_RANGE: RangeInclusive<u32> = 1..=10_000;
/// ext3's default commit interval; `commit=0` also selects it, as in the kernel.
pub const DEFAULT_COMMIT_SECS: u32 = jbdfs::journal::DEFAULT_COMMIT_INTERVAL.as_secs() as u32;
pub const DEFAULT_CACHE_SIZE: u64 = jbdfs::fs::mount::DEFAULT_CACHE_SIZE as u64;
/// FUSE workers. Few, because a worker still awake picks up the next
/// request faster than one the kernel must wake (fs_mark on a ramdisk:
/// 10-20% more files/s with 8 than with 32 from 4 threads up); enough,
/// because a worker blocked reading a slow device serves nothing else.
/// fsyncs on a slow device wait on their own threads (daemon/src/fuse/runners.rs),
/// so batching does not need a worker per concurrent fsync.
pub const DEFAULT_THREADS: usize = 8;
pub const THREADS_RANGE: RangeInclusive<usize> = 1..=1024;
/// Ring entries per CPU with `-o io_uring` (libfuse's default): each holds
/// a 1 MiB payload buffer, touched only as far as requests fill it.
pub const DEFAULT_IO_URING_Q_DEPTH: u32 = 8;
pub const IO_URING_Q_DEPTH_RANGE: RangeInclusive<u32> = 1..=1024;
/// Microseconds a ring keeps looking for its next request after answering
/// (`Queue::poll_for_requests` in daemon/src/fuse/uring.rs says why).
pub const DEFAULT_IO_URING_POLL_US: u32 = 50;
pub const IO_URING_POLL_US_RANGE: RangeInclusive<u32> = 0..=10_000;
/// How long an NBD source's client retries a lost connection (seconds;
/// the kernel nbd client's default timeout is 30 s too).
pub const DEFAULT_NBD_TIMEOUT_SECS: u32 = 30;
pub const NBD_TIMEOUT_RANGE: RangeInclusive<u32> = 1..=86_400;
/// Connections to an NBD server that allows several (CAN_MULTI_CONN).
pub const NBD_CONNECTIONS_RANGE: RangeInclusive<usize> = 1..=16;

/// How a synchronous handle waits for others to join its transaction
/// (`bdelay=`; see DESIGN.md "Commit batching: bdelay").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bdelay {
    /// `0`: no wait; commit at once.
    Off,
    /// `yield`: jbd's loop, but yielding the CPU instead of sleeping.
    Yield,
    /// `N` (N > 0): jbd's 2008 loop, sleeping N jiffies of 1/`hz` second.
    Jiffies(u32),
    /// `jbd2`: one sleep of the average commit time, clamped to
    /// `min_batch_time..=max_batch_time`.
    Jbd2,
    /// `auto`: wait only while the previous journal write is in flight (XFS).
    Auto,
}

impl Default for Bdelay {
    fn default() -> Self {
        DEFAULT_BDELAY
    }
}

impl Bdelay {
    const EXPECTED: &'static str = "0, yield, a number of jiffies, jbd2 or auto";

    fn from_option(value: &str) -> Option<Self> {
        match value {
            "yield" => Some(Self::Yield),
            "jbd2" => Some(Self::Jbd2),
            "auto" => Some(Self::Auto),
            _ => match value.parse::<u32>().ok()? {
                0 => Some(Self::Off),
                n => Some(Self::Jiffies(n)),
            },
        }
    }
}

impl fmt::Display for Bdelay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Off => f.write_str("0"),
            Self::Yield => f.write_str("yield"),
            Self::Jiffies(n) => write!(f, "{n}"),
            Self::Jbd2 => f.write_str("jbd2"),
            Self::Auto => f.write_str("auto"),
        }
    }
}

/// A mount option that could not be accepted, named so the user can find it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OptionError {
    #[error("unknown mount option \"{0}\"")]
    Unknown(String),
    #[error("{}", describe_bad_value(.option, .value, .expected))]
    BadValue {
        option: String,
        /// What was given; empty when the option needed a value and had none.
        value: String,
        expected: String,
    },
}

fn describe_bad_value(option: &str, value: &str, expected: &str) -> String {
    if value.is_empty() {
        format!("mount option \"{option}\" needs a value: expected {expected}")
    } else {
        format!("invalid value \"{value}\" for mount option \"{option}\": expected {expected}")
    }
}

/// Everything `-o` can say, parsed and validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountOptions {
    pub read_only: bool,
    pub data: DataMode,
    pub bdelay: Bdelay,
    pub hz: u32,
    /// Microseconds.
    pub min_batch_time: u32,
    /// Microseconds; 0 disables jbd2-style batching.
    pub max_batch_time: u32,
    /// Seconds between periodic commits; never 0 (0 on input means default).
    pub commit: u32,
    pub barrier: bool,
    pub errors: ErrorsPolicy,
    /// Buffer cache size in bytes.
    pub cache_size: u64,
    /// FUSE worker threads.
    pub threads: usize,
    pub max_map: Option<u32>,
    /// Device latency model to simulate, for the slow-storage half of an A/B.
    pub devsim: Option<DevSimParams>,
    /// Where to write statistics.
    pub stats: Option<PathBuf>,
    /// Where to record every block write and flush, for crash testing.
    pub record: Option<PathBuf>,
    /// Log FUSE requests (`-o debug`, `-d`).
    pub debug: bool,
    /// `-o remount`: change the running mount (see remount.rs), do not
    /// start a daemon.
    pub remount: bool,
    /// Open the backing store with O_DIRECT (`-o direct`).
    pub direct_io: bool,
    /// Bypass the kernel's page cache for every open file (`-o direct_io`,
    /// libfuse's name): each read and write is a request to the daemon.
    pub fuse_direct_io: bool,
    /// Serve requests over io_uring: `Some(true)` with `-o io_uring`
    /// (libfuse's name; a warning if the kernel cannot), `Some(false)` with
    /// `-o noio_uring`, `None` by default: io_uring when the kernel offers
    /// it, quietly /dev/fuse when not.
    pub io_uring: Option<bool>,
    /// Ring entries per CPU queue (`-o io_uring_q_depth=N`).
    pub io_uring_q_depth: u32,
    /// Microseconds a queue keeps looking for requests after answering,
    /// before it sleeps (`-o io_uring_poll_us=N`; 0 sleeps at once).
    pub io_uring_poll_us: u32,
    /// Directory changes are synchronous.
    pub dirsync: bool,
    /// All writes are synchronous.
    pub sync: bool,
    /// POSIX ACLs: `Some(true)` with `-o acl`, `Some(false)` with
    /// `-o noacl`, `None` to follow the superblock's default mount options
    /// (mke2fs sets `acl` there), as ext3 does.
    pub acl: Option<bool>,
    /// `-o noload` (ext3's name) or `-o norecovery` (ext4's): a read-only
    /// mount shows the image as it is, without replaying its journal.
    pub noload: bool,
    /// Seconds an NBD source may stay unreachable before I/O fails
    /// (`-o nbd_timeout=SECONDS`).
    pub nbd_timeout: u32,
    /// Connections to an NBD source whose server offers CAN_MULTI_CONN
    /// (`-o nbd_connections=N`, default 1).
    pub nbd_connections: usize,
    /// TLS credentials for an NBD source (`-o tls-certificates=DIR`,
    /// `tls-psk-file=FILE`, `tls-username=`, `tls-hostname=`).
    pub tls: jbdfs::device::nbd::TlsSettings,
    /// Generic FUSE/VFS options in the order given, with overridden ones removed.
    pub generic: Vec<String>,
    /// Accepted options that have no effect here (fstab, systemd, SELinux, ext3
    /// options jbdfs does not implement), kept only so they can be logged.
    pub ignored: Vec<String>,
}

/// The options `mount -o remount` changes on the fly, as ext3_remount
/// does (jbdfs's own; the atime words are generic ones).
pub const REMOUNT_TUNABLE: &[&str] = &[
    "commit",
    "barrier",
    "nobarrier",
    "bdelay",
    "hz",
    "min_batch_time",
    "max_batch_time",
    "errors",
];

/// The atime words, whose last of each group wins.
pub const ATIME_WORDS: &[&str] = &[
    "noatime",
    "atime",
    "relatime",
    "strictatime",
    "nodiratime",
    "diratime",
];

impl MountOptions {
    /// The journal's batching policy from bdelay= and its parameters.
    pub fn batching(&self) -> Batching {
        match self.bdelay {
            Bdelay::Off => Batching::Off,
            Bdelay::Yield => Batching::Yield,
            Bdelay::Jiffies(n) => Batching::Jiffies { n, hz: self.hz },
            Bdelay::Jbd2 => Batching::Jbd2 {
                min_us: self.min_batch_time,
                max_us: self.max_batch_time,
            },
            Bdelay::Auto => Batching::Auto {
                max_us: self.max_batch_time,
            },
        }
    }

    /// The options a remount may change, as these options set them.
    pub fn tunables(&self) -> Tunables {
        Tunables {
            journal: JournalConfig {
                barrier: self.barrier,
                commit_interval: Duration::from_secs(self.commit.max(1) as u64),
                batching: self.batching(),
            },
            errors: self.errors,
            atime: self.atime_policy(),
        }
    }

    /// The filesystem's configuration as these options set it. The
    /// device's own read-only state and what errors=panic does are left at
    /// their defaults: the daemon decides them when it opens the device.
    pub fn mount_config(&self) -> MountConfig {
        let Tunables {
            journal,
            errors,
            atime,
        } = self.tunables();
        MountConfig {
            read_only: self.read_only,
            cache_size: usize::try_from(self.cache_size).unwrap_or(usize::MAX),
            journal,
            // A sync mount's directory changes are synchronous too.
            dirsync: self.dirsync || self.sync,
            data: self.data,
            errors,
            // max_map=0 sets no limit, as leaving it out does.
            max_map: self.max_map.filter(|&n| n > 0).unwrap_or(u32::MAX),
            acl: self.acl,
            atime,
            ..MountConfig::default()
        }
    }

    /// Options that say what `t` says (the inverse of
    /// [`MountOptions::tunables`]), for a remount to change some of.
    pub fn from_tunables(t: &Tunables) -> MountOptions {
        let mut o = MountOptions {
            commit: t
                .journal
                .commit_interval
                .as_secs()
                .clamp(1, u32::MAX as u64) as u32,
            barrier: t.journal.barrier,
            errors: t.errors,
            ..Default::default()
        };
        match t.journal.batching {
            Batching::Off => o.bdelay = Bdelay::Off,
            Batching::Yield => o.bdelay = Bdelay::Yield,
            Batching::Jiffies { n, hz } => (o.bdelay, o.hz) = (Bdelay::Jiffies(n), hz),
            Batching::Jbd2 { min_us, max_us } => {
                (o.bdelay, o.min_batch_time, o.max_batch_time) = (Bdelay::Jbd2, min_us, max_us)
            }
            Batching::Auto { max_us } => (o.bdelay, o.max_batch_time) = (Bdelay::Auto, max_us),
        }
        let mode = match t.atime.mode {
            AtimeMode::Never => "noatime",
            AtimeMode::Relatime => "relatime",
            AtimeMode::Strict => "strictatime",
        };
        o.generic.push(mode.to_string());
        if t.atime.nodiratime {
            o.generic.push("nodiratime".to_string());
        }
        o
    }

    /// What a remount may change, as `-o` would say it: for the stats
    /// file, where /proc/mounts would show an ext3 mount's options.
    pub fn describe_tunables(t: &Tunables) -> String {
        let o = MountOptions::from_tunables(t);
        let mut words = vec![
            format!("commit={}", o.commit),
            format!("barrier={}", u8::from(o.barrier)),
            format!("errors={}", o.errors),
            format!("bdelay={}", o.bdelay),
        ];
        match o.bdelay {
            Bdelay::Jiffies(_) => words.push(format!("hz={}", o.hz)),
            Bdelay::Jbd2 => words.push(format!(
                "min_batch_time={},max_batch_time={}",
                o.min_batch_time, o.max_batch_time
            )),
            Bdelay::Auto => words.push(format!("max_batch_time={}", o.max_batch_time)),
            Bdelay::Off | Bdelay::Yield => {}
        }
        words.extend(o.generic);
        words.join(",")
    }

    /// Applies one more `-o` word, as if it came last.
    pub fn apply_word(&mut self, word: &str) -> Result<(), OptionError> {
        self.apply(word)
    }

    /// The atime policy the generic options ask for, the last word of each
    /// group winning as for the kernel: relatime unless noatime or
    /// strictatime is given; nodiratime on its own.
    pub fn atime_policy(&self) -> jbdfs::fs::atime::AtimePolicy {
        use jbdfs::fs::atime::AtimePolicy;
        let mut p = AtimePolicy::default();
        for o in &self.generic {
            match o.as_str() {
                "noatime" => p.mode = AtimeMode::Never,
                "atime" | "relatime" => p.mode = AtimeMode::Relatime,
                "strictatime" => p.mode = AtimeMode::Strict,
                "nodiratime" => p.nodiratime = true,
                "diratime" => p.nodiratime = false,
                _ => {}
            }
        }
        p
    }
}

impl Default for MountOptions {
    fn default() -> Self {
        Self {
            read_only: false,
            data: DataMode::default(),
            bdelay: DEFAULT_BDELAY,
            hz: DEFAULT_HZ,
            min_batch_time: DEFAULT_MIN_BATCH_TIME_US,
            max_batch_time: DEFAULT_MAX_BATCH_TIME_US,
            commit: DEFAULT_COMMIT_SECS,
            barrier: JournalConfig::default().barrier,
            errors: ErrorsPolicy::default(),
            cache_size: DEFAULT_CACHE_SIZE,
            threads: DEFAULT_THREADS,
            max_map: None,
            devsim: None,
            stats: None,
            record: None,
            debug: false,
            remount: false,
            direct_io: false,
            fuse_direct_io: false,
            io_uring: None,
            io_uring_q_depth: DEFAULT_IO_URING_Q_DEPTH,
            io_uring_poll_us: DEFAULT_IO_URING_POLL_US,
            dirsync: false,
            sync: false,
            acl: None,
            noload: false,
            nbd_timeout: DEFAULT_NBD_TIMEOUT_SECS,
            nbd_connections: 1,
            tls: Default::default(),
            generic: Vec::new(),
            ignored: Vec::new(),
        }
    }
}

/// Generic options the FUSE kernel module or fuser act on. Options in one
/// group override each other; the first member names the group.
const GENERIC_FLAG_GROUPS: &[&[&str]] = &[
    &["ro", "rw"],
    &["sync", "async"],
    &["dirsync"],
    &["dev", "nodev"],
    &["suid", "nosuid"],
    &["exec", "noexec"],
    &["atime", "noatime", "relatime", "strictatime"],
    &["diratime", "nodiratime"],
    // libfuse refuses both at once, so the later one wins.
    &["allow_other", "allow_root"],
    &["default_permissions"],
    &["auto_unmount"],
];

/// Generic options that take a value.
const GENERIC_VALUED: &[&str] = &["fsname", "subtype"];

/// Options for mount(8), fstab and systemd, which the kernel must not see.
const USERSPACE_ONLY: &[&str] = &[
    "defaults", "_netdev", "nofail", "auto", "noauto", "user", "nouser", "users", "comment",
];

/// The FUSE kernel's own mount options, which mount(8) repeats from
/// mountinfo on `-o remount`; the kernel sets them, not the daemon.
const FUSE_KERNEL: &[&str] = &[
    "user_id", "group_id", "rootmode", "blksize", "max_read", "fd",
];

/// SELinux labels: FUSE cannot apply them, and ext3 fstab lines carry them.
const SELINUX: &[&str] = &[
    "context",
    "fscontext",
    "defcontext",
    "rootcontext",
    "seclabel",
];

/// ext3 options accepted so ext3 fstab lines mount: jbdfs does not
/// distinguish user xattrs, and it logs a timestamp change with the
/// inode at once, which lazytime allows (it only lets a filesystem keep
/// timestamps in memory longer; the FUSE kernel module refuses the word).
const EXT3_NO_EFFECT: &[&str] = &["user_xattr", "nouser_xattr", "lazytime", "nolazytime"];

impl MountOptions {
    /// Parses the arguments of one or more `-o` flags, each comma-separated.
    pub fn parse(opts: &[&str]) -> Result<MountOptions, OptionError> {
        let mut parsed = MountOptions::default();
        for token in opts.iter().flat_map(|s| split_options(s)) {
            parsed.apply(token)?;
        }
        Ok(parsed)
    }

    /// The generic FUSE/VFS options, in order, for the FUSE adapter.
    pub fn fuse_generic(&self) -> &[String] {
        &self.generic
    }

    fn apply(&mut self, token: &str) -> Result<(), OptionError> {
        let (key, value) = match token.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (token, None),
        };
        if self.apply_journal(key, value)? || self.apply_daemon(key, value)? {
            return Ok(());
        }
        if self.apply_generic(key, value, token)? {
            return Ok(());
        }
        if is_ignored(key) {
            self.ignored.push(token.to_string());
            return Ok(());
        }
        Err(OptionError::Unknown(key.to_string()))
    }

    /// Options of the journal and filesystem layers; false if `key` is not
    /// one of them.
    fn apply_journal(&mut self, key: &str, value: Option<&str>) -> Result<bool, OptionError> {
        match key {
            "data" => self.data = choice(key, value, DataMode::from_option, DataMode::EXPECTED)?,
            "bdelay" => self.bdelay = choice(key, value, Bdelay::from_option, Bdelay::EXPECTED)?,
            "hz" => self.hz = in_range(key, value, HZ_RANGE)?,
            "min_batch_time" => self.min_batch_time = number(key, value, MICROSECONDS)?,
            "max_batch_time" => self.max_batch_time = number(key, value, MICROSECONDS)?,
            "commit" => self.commit = commit_interval(key, value)?,
            "barrier" => self.barrier = barrier(key, value)?,
            "nobarrier" => self.barrier = !flag(key, value)?,
            "acl" => self.acl = Some(flag(key, value)?),
            "noacl" => self.acl = Some(!flag(key, value)?),
            "noload" | "norecovery" => self.noload = flag(key, value)?,
            "errors" => {
                self.errors = choice(
                    key,
                    value,
                    ErrorsPolicy::from_option,
                    ErrorsPolicy::EXPECTED,
                )?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Options of the daemon itself; false if `key` is not one of them.
    fn apply_daemon(&mut self, key: &str, value: Option<&str>) -> Result<bool, OptionError> {
        match key {
            "cache_size" => self.cache_size = byte_size(key, value)?,
            "threads" => self.threads = in_range(key, value, THREADS_RANGE)?,
            "nbd_timeout" => self.nbd_timeout = in_range(key, value, NBD_TIMEOUT_RANGE)?,
            "nbd_connections" => {
                self.nbd_connections = in_range(key, value, NBD_CONNECTIONS_RANGE)?
            }
            "tls-certificates" => {
                self.tls.certificates = Some(text(key, value, "a directory")?.into())
            }
            "tls-psk-file" => self.tls.psk_file = Some(text(key, value, "a file path")?.into()),
            "tls-username" => self.tls.username = Some(text(key, value, "a user name")?.into()),
            "tls-hostname" => self.tls.hostname = Some(text(key, value, "a host name")?.into()),
            "max_map" => self.max_map = Some(number(key, value, "a non-negative integer")?),
            "devsim" => self.devsim = Some(devsim(key, value)?),
            "stats" => self.stats = Some(text(key, value, "a file path")?.into()),
            "record" => self.record = Some(text(key, value, "a file path")?.into()),
            "debug" => self.debug = flag(key, value)?,
            "remount" => self.remount = flag(key, value)?,
            "direct" => self.direct_io = flag(key, value)?,
            "direct_io" => self.fuse_direct_io = flag(key, value)?,
            "io_uring" => self.io_uring = Some(flag(key, value)?),
            "noio_uring" => self.io_uring = Some(!flag(key, value)?),
            "io_uring_q_depth" => {
                self.io_uring_q_depth = in_range(key, value, IO_URING_Q_DEPTH_RANGE)?
            }
            "io_uring_poll_us" => {
                self.io_uring_poll_us = in_range(key, value, IO_URING_POLL_US_RANGE)?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Generic options; false if `key` is not one. Those that also change
    /// jbdfs's own behaviour set a typed field as well as passing through.
    fn apply_generic(
        &mut self,
        key: &str,
        value: Option<&str>,
        token: &str,
    ) -> Result<bool, OptionError> {
        if GENERIC_VALUED.contains(&key) {
            text(key, value, "a name")?;
        } else if generic_group(key).is_some() {
            flag(key, value)?;
        } else {
            return Ok(false);
        }
        match key {
            "ro" | "rw" => self.read_only = key == "ro",
            "sync" | "async" => self.sync = key == "sync",
            "dirsync" => self.dirsync = true,
            _ => {}
        }
        self.push_generic(key, token);
        Ok(true)
    }

    /// Appends `token`, first dropping any earlier option it overrides.
    fn push_generic(&mut self, key: &str, token: &str) {
        let group = override_group(key);
        self.generic
            .retain(|old| override_group(option_key(old)) != group);
        self.generic.push(token.to_string());
    }
}

const MICROSECONDS: &str = "a number of microseconds";

/// Splits one `-o` argument at commas, except inside double quotes: SELinux
/// contexts such as `context="u:r:t:s0:c1,c2"` contain commas.
fn split_options(s: &str) -> Vec<&str> {
    let mut tokens = Vec::new();
    let (mut start, mut quoted) = (0, false);
    for (i, c) in s.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => {
                tokens.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    tokens.push(&s[start..]);
    // mount(8) tolerates empty items ("a,,b", a trailing comma).
    tokens.retain(|t| !t.is_empty());
    tokens
}

fn option_key(token: &str) -> &str {
    token.split_once('=').map_or(token, |(k, _)| k)
}

fn generic_group(key: &str) -> Option<&'static str> {
    GENERIC_FLAG_GROUPS
        .iter()
        .find(|group| group.contains(&key))
        .map(|group| group[0])
}

/// The name shared by all options that override `key`.
fn override_group(key: &str) -> &str {
    generic_group(key).unwrap_or(key)
}

fn is_ignored(key: &str) -> bool {
    key.starts_with("x-")
        || USERSPACE_ONLY.contains(&key)
        || SELINUX.contains(&key)
        || FUSE_KERNEL.contains(&key)
        || EXT3_NO_EFFECT.contains(&key)
}

fn bad_value(option: &str, value: Option<&str>, expected: &str) -> OptionError {
    OptionError::BadValue {
        option: option.to_string(),
        value: value.unwrap_or("").to_string(),
        expected: expected.to_string(),
    }
}

/// A flag takes no value; returns true so callers can assign it directly.
fn flag(key: &str, value: Option<&str>) -> Result<bool, OptionError> {
    match value {
        None => Ok(true),
        Some(_) => Err(bad_value(key, value, "no value")),
    }
}

/// A required, non-empty value.
fn text<'a>(key: &str, value: Option<&'a str>, expected: &str) -> Result<&'a str, OptionError> {
    value
        .filter(|v| !v.is_empty())
        .ok_or_else(|| bad_value(key, value, expected))
}

fn choice<T>(
    key: &str,
    value: Option<&str>,
    from_option: fn(&str) -> Option<T>,
    expected: &str,
) -> Result<T, OptionError> {
    value
        .and_then(from_option)
        .ok_or_else(|| bad_value(key, value, expected))
}

fn number<T: FromStr>(key: &str, value: Option<&str>, expected: &str) -> Result<T, OptionError> {
    value
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| bad_value(key, value, expected))
}

fn in_range<T>(key: &str, value: Option<&str>, range: RangeInclusive<T>) -> Result<T, OptionError>
where
    T: FromStr + PartialOrd + fmt::Display,
{
    let expected = format!("an integer from {} to {}", range.start(), range.end());
    let n: T = number(key, value, &expected)?;
    if range.contains(&n) {
        Ok(n)
    } else {
        Err(bad_value(key, value, &expected))
    }
}

/// A device model with optional overrides.
fn devsim(key: &str, value: Option<&str>) -> Result<DevSimParams, OptionError> {
    let spec = text(key, value, "a device model name")?;
    DevSimParams::parse(spec).map_err(|why| bad_value(key, value, &why))
}

fn commit_interval(key: &str, value: Option<&str>) -> Result<u32, OptionError> {
    match number(key, value, "a number of seconds (0 for the default)")? {
        0 => Ok(DEFAULT_COMMIT_SECS),
        n => Ok(n),
    }
}

/// `barrier` alone means `barrier=1`, as in ext3.
fn barrier(key: &str, value: Option<&str>) -> Result<bool, OptionError> {
    match value {
        None | Some("1") => Ok(true),
        Some("0") => Ok(false),
        Some(_) => Err(bad_value(key, value, "0 or 1")),
    }
}

/// Bytes, with an optional K, M or G (binary) suffix.
fn byte_size(key: &str, value: Option<&str>) -> Result<u64, OptionError> {
    let bad = || {
        bad_value(
            key,
            value,
            "a positive size in bytes, with an optional K, M or G suffix",
        )
    };
    let v = value.ok_or_else(bad)?;
    let (digits, shift) = match v.char_indices().last() {
        Some((i, 'K' | 'k')) => (&v[..i], 10),
        Some((i, 'M' | 'm')) => (&v[..i], 20),
        Some((i, 'G' | 'g')) => (&v[..i], 30),
        _ => (v, 0),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let bytes = n.checked_mul(1 << shift).ok_or_else(bad)?;
    if bytes == 0 {
        return Err(bad());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> MountOptions {
        MountOptions::parse(&[s]).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn parse_err(s: &str) -> OptionError {
        MountOptions::parse(&[s]).expect_err(s)
    }

    fn assert_bad_value(s: &str, option: &str) {
        match parse_err(s) {
            OptionError::BadValue { option: o, .. } => assert_eq!(o, option, "{s}"),
            e => panic!("{s}: expected a bad value, got {e:?}"),
        }
    }

    #[test]
    fn defaults() {
        let o = MountOptions::parse(&[]).unwrap();
        assert_eq!(o, MountOptions::default());
        assert!(!o.read_only);
        assert_eq!(o.data, DataMode::Ordered);
        assert_eq!(o.bdelay, DEFAULT_BDELAY);
        assert_eq!(o.bdelay, Bdelay::Auto);
        assert_eq!(o.hz, 250);
        assert_eq!((o.min_batch_time, o.max_batch_time), (0, 15_000));
        assert_eq!(o.commit, 5);
        assert!(o.barrier);
        assert_eq!(o.errors, ErrorsPolicy::RemountRo);
        assert_eq!(o.cache_size, 256 * 1024 * 1024);
        assert_eq!(o.threads, 8);
        assert!(o.max_map.is_none() && o.devsim.is_none());
        assert!(o.stats.is_none() && o.record.is_none());
        assert!(!o.debug && !o.direct_io && !o.fuse_direct_io && !o.dirsync && !o.sync);
        assert!(o.fuse_generic().is_empty() && o.ignored.is_empty());
    }

    #[test]
    fn defaults_are_the_filesystems() {
        assert_eq!(
            MountOptions::default().mount_config(),
            MountConfig::default()
        );
    }

    #[test]
    fn mount_config_carries_every_option() {
        let o = parse(
            "ro,cache_size=64M,nobarrier,commit=30,bdelay=jbd2,min_batch_time=10,\
             max_batch_time=20,sync,data=writeback,errors=panic,max_map=7,noacl,noatime",
        );
        let c = o.mount_config();
        assert!(c.read_only && !c.read_only_device);
        assert_eq!(c.cache_size, 64 << 20);
        assert_eq!(
            c.journal,
            JournalConfig {
                barrier: false,
                commit_interval: Duration::from_secs(30),
                batching: Batching::Jbd2 {
                    min_us: 10,
                    max_us: 20
                },
            }
        );
        assert!(c.dirsync);
        assert_eq!(c.data, DataMode::Writeback);
        assert_eq!(c.errors, ErrorsPolicy::Panic);
        assert_eq!(c.max_map, 7);
        assert_eq!(c.acl, Some(false));
        assert_eq!(c.atime, o.atime_policy());
        assert_eq!(c.atime.mode, AtimeMode::Never);
        assert!(parse("dirsync").mount_config().dirsync);
        assert_eq!(parse("max_map=0").mount_config().max_map, u32::MAX);
    }

    #[test]
    fn empty_strings_and_items_are_ignored() {
        assert_eq!(parse(""), MountOptions::default());
        assert_eq!(parse(",,"), MountOptions::default());
        assert_eq!(parse("data=journal,").data, DataMode::Journal);
    }

    #[test]
    fn read_only() {
        assert!(parse("ro").read_only);
        assert!(!parse("rw").read_only);
        assert!(!parse("ro,rw").read_only);
        assert_eq!(parse("ro").fuse_generic(), ["ro"]);
    }

    #[test]
    fn data_modes() {
        assert_eq!(parse("data=ordered").data, DataMode::Ordered);
        assert_eq!(parse("data=writeback").data, DataMode::Writeback);
        assert_eq!(parse("data=journal").data, DataMode::Journal);
        assert_bad_value("data=bogus", "data");
        assert_bad_value("data", "data");
        assert_bad_value("data=", "data");
        assert_bad_value("data=Journal", "data");
    }

    #[test]
    fn bdelay_forms() {
        assert_eq!(parse("bdelay=0").bdelay, Bdelay::Off);
        assert_eq!(parse("bdelay=yield").bdelay, Bdelay::Yield);
        assert_eq!(parse("bdelay=1").bdelay, Bdelay::Jiffies(1));
        assert_eq!(parse("bdelay=25").bdelay, Bdelay::Jiffies(25));
        assert_eq!(parse("bdelay=jbd2").bdelay, Bdelay::Jbd2);
        assert_eq!(parse("bdelay=auto").bdelay, Bdelay::Auto);
        for bad in [
            "bdelay=foo",
            "bdelay=-1",
            "bdelay=1.5",
            "bdelay",
            "bdelay=4294967296",
        ] {
            assert_bad_value(bad, "bdelay");
        }
    }

    #[test]
    fn enum_display_round_trips() {
        for s in ["0", "yield", "7", "jbd2", "auto"] {
            assert_eq!(Bdelay::from_option(s).unwrap().to_string(), s);
        }
        for s in ["ordered", "writeback", "journal"] {
            assert_eq!(DataMode::from_option(s).unwrap().to_string(), s);
        }
        for s in ["continue", "remount-ro", "panic"] {
            assert_eq!(ErrorsPolicy::from_option(s).unwrap().to_string(), s);
        }
    }

    #[test]
    fn hz_range() {
        assert_eq!(parse("hz=1").hz, 1);
        assert_eq!(parse("hz=1000").hz, 1000);
        assert_eq!(parse("hz=10000").hz, 10_000);
        for bad in ["hz=0", "hz=10001", "hz=fast", "hz"] {
            assert_bad_value(bad, "hz");
        }
    }

    #[test]
    fn batch_times() {
        let o = parse("min_batch_time=100,max_batch_time=0");
        assert_eq!((o.min_batch_time, o.max_batch_time), (100, 0));
        assert_bad_value("min_batch_time=-5", "min_batch_time");
        assert_bad_value("max_batch_time=15ms", "max_batch_time");
    }

    #[test]
    fn commit_interval_zero_means_default() {
        assert_eq!(parse("commit=30").commit, 30);
        assert_eq!(parse("commit=30,commit=0").commit, DEFAULT_COMMIT_SECS);
        assert_bad_value("commit=-1", "commit");
        assert_bad_value("commit", "commit");
    }

    #[test]
    fn barrier_forms() {
        assert!(parse("nobarrier,barrier").barrier);
        assert!(!parse("nobarrier").barrier);
        assert!(parse("barrier=0,barrier=1").barrier);
        assert!(!parse("barrier=0").barrier);
        assert_bad_value("barrier=2", "barrier");
        assert_bad_value("barrier=yes", "barrier");
        assert_bad_value("nobarrier=1", "nobarrier");
    }

    #[test]
    fn errors_policy() {
        assert_eq!(parse("errors=continue").errors, ErrorsPolicy::Continue);
        assert_eq!(parse("errors=remount-ro").errors, ErrorsPolicy::RemountRo);
        assert_eq!(parse("errors=panic").errors, ErrorsPolicy::Panic);
        assert_bad_value("errors=explode", "errors");
    }

    #[test]
    fn cache_size_suffixes() {
        assert_eq!(parse("cache_size=4096").cache_size, 4096);
        assert_eq!(parse("cache_size=64K").cache_size, 64 << 10);
        assert_eq!(parse("cache_size=64k").cache_size, 64 << 10);
        assert_eq!(parse("cache_size=512M").cache_size, 512 << 20);
        assert_eq!(parse("cache_size=2G").cache_size, 2 << 30);
        for bad in [
            "cache_size=12Q",
            "cache_size=0",
            "cache_size=M",
            "cache_size=-1M",
            "cache_size=1.5G",
            "cache_size=99999999999999999999",
            "cache_size=17179869184G",
            "cache_size",
        ] {
            assert_bad_value(bad, "cache_size");
        }
    }

    #[test]
    fn io_uring_options() {
        let o = parse("io_uring,io_uring_q_depth=16");
        assert_eq!(o.io_uring, Some(true));
        assert_eq!(o.io_uring_q_depth, 16);
        assert_eq!(parse("io_uring,noio_uring").io_uring, Some(false));
        assert_eq!(parse("rw").io_uring, None);
        assert_eq!(parse("rw").io_uring_q_depth, DEFAULT_IO_URING_Q_DEPTH);
        assert_bad_value("io_uring_q_depth=0", "io_uring_q_depth");
        assert_bad_value("io_uring_q_depth=1025", "io_uring_q_depth");
        assert_eq!(parse("rw").io_uring_poll_us, DEFAULT_IO_URING_POLL_US);
        assert_eq!(parse("io_uring_poll_us=0").io_uring_poll_us, 0);
        assert_eq!(parse("io_uring_poll_us=200").io_uring_poll_us, 200);
        assert_bad_value("io_uring_poll_us=10001", "io_uring_poll_us");
        assert_bad_value("io_uring_poll_us=-1", "io_uring_poll_us");
    }

    #[test]
    fn nbd_timeout() {
        assert_eq!(parse("").nbd_timeout, DEFAULT_NBD_TIMEOUT_SECS);
        assert_eq!(parse("nbd_timeout=5").nbd_timeout, 5);
        assert_bad_value("nbd_timeout=0", "nbd_timeout");
        assert_bad_value("nbd_timeout=x", "nbd_timeout");
        assert_eq!(parse("").nbd_connections, 1);
        assert_eq!(parse("nbd_connections=4").nbd_connections, 4);
        assert_bad_value("nbd_connections=0", "nbd_connections");
        assert_bad_value("nbd_connections=17", "nbd_connections");
        let t = parse("tls-psk-file=/etc/k.psk,tls-username=alice,tls-hostname=srv").tls;
        assert_eq!(t.psk_file, Some("/etc/k.psk".into()));
        assert_eq!(t.username.as_deref(), Some("alice"));
        assert_eq!(t.hostname.as_deref(), Some("srv"));
        assert_eq!(
            parse("tls-certificates=/etc/pki/qemu").tls.certificates,
            Some("/etc/pki/qemu".into())
        );
    }

    #[test]
    fn threads_range() {
        assert_eq!(parse("threads=1").threads, 1);
        assert_eq!(parse("threads=1024").threads, 1024);
        assert_bad_value("threads=0", "threads");
        assert_bad_value("threads=1025", "threads");
        assert_bad_value("threads=many", "threads");
    }

    #[test]
    fn daemon_options() {
        let o = parse("max_map=64,devsim=sata,stats=/tmp/s.json,record=/tmp/r.log");
        assert_eq!(o.max_map, Some(64));
        assert_eq!(o.devsim, DevSimParams::parse("sata").ok());
        assert_eq!(o.stats, Some(PathBuf::from("/tmp/s.json")));
        assert_eq!(o.record, Some(PathBuf::from("/tmp/r.log")));
        assert_bad_value("max_map=-1", "max_map");
        assert_bad_value("devsim=", "devsim");
        assert_bad_value("devsim=floppy", "devsim");
        assert_bad_value("devsim=sata:rpm=fast", "devsim");
        let o = parse("devsim=sata:flush_us=8000:seek_max_us=12000");
        let expected = DevSimParams {
            flush_us: 8000,
            seek_max_us: 12_000,
            ..DevSimParams::parse("sata").unwrap()
        };
        assert_eq!(o.devsim, Some(expected));
        assert_bad_value("stats", "stats");
        assert_bad_value("record=", "record");
    }

    #[test]
    fn flags() {
        let o = parse("debug,direct,direct_io,dirsync,sync");
        assert!(o.debug && o.direct_io && o.fuse_direct_io && o.dirsync && o.sync);
        assert!(!parse("direct").fuse_direct_io && !parse("direct_io").direct_io);
        assert_eq!(o.fuse_generic(), ["dirsync", "sync"]);
        assert!(!parse("sync,async").sync);
        assert_bad_value("debug=1", "debug");
        assert_bad_value("direct=yes", "direct");
        assert_bad_value("noatime=1", "noatime");
    }

    #[test]
    fn generic_options_pass_through_in_order() {
        let all = "rw,dev,suid,exec,noatime,nodiratime,allow_other,default_permissions,\
                   auto_unmount,fsname=/dev/sdb1,subtype=jbdfs";
        let o = parse(all);
        let expected: Vec<&str> = all.split(',').collect();
        assert_eq!(o.fuse_generic(), expected);
        for flag in [
            "nodev",
            "nosuid",
            "noexec",
            "atime",
            "relatime",
            "strictatime",
            "allow_root",
        ] {
            assert_eq!(parse(flag).fuse_generic(), [flag]);
        }
        assert_bad_value("fsname=", "fsname");
        assert_bad_value("subtype", "subtype");
    }

    #[test]
    fn later_generic_options_override_earlier() {
        let o = parse("nodev,noatime,fsname=a,allow_root,dev,relatime,fsname=b,allow_other");
        assert_eq!(
            o.fuse_generic(),
            ["dev", "relatime", "fsname=b", "allow_other"]
        );
        let o = MountOptions::parse(&["rw,noexec", "ro", "exec"]).unwrap();
        assert!(o.read_only);
        assert_eq!(o.fuse_generic(), ["ro", "exec"]);
    }

    #[test]
    fn ignored_options_are_accepted_but_not_passed_on() {
        let s = "defaults,_netdev,nofail,auto,noauto,user,nouser,users,comment=x,\
                 x-systemd.automount,x-systemd.device-timeout=10s,x-gvfs-show,\
                 user_xattr,nouser_xattr,lazytime,nolazytime,context=system_u:object_r:tmp_t:s0,\
                 fscontext=a,defcontext=b,rootcontext=c,seclabel";
        let o = parse(s);
        assert!(o.fuse_generic().is_empty());
        assert_eq!(o.ignored, s.split(',').collect::<Vec<_>>());
    }

    #[test]
    fn acl_and_noacl_as_ext3() {
        assert_eq!(parse("").acl, None);
        assert_eq!(parse("acl").acl, Some(true));
        assert_eq!(parse("noacl").acl, Some(false));
        assert_eq!(parse("noacl,acl").acl, Some(true));
        assert_eq!(parse("acl,noacl").acl, Some(false));
        let o = parse("acl");
        assert!(o.fuse_generic().is_empty() && o.ignored.is_empty());
    }

    #[test]
    fn quoted_commas_stay_in_one_option() {
        let o = parse("context=\"system_u:object_r:tmp_t:s0:c127,c456\",noatime");
        assert_eq!(
            o.ignored,
            ["context=\"system_u:object_r:tmp_t:s0:c127,c456\""]
        );
        assert_eq!(o.fuse_generic(), ["noatime"]);
    }

    #[test]
    fn unknown_option_is_named() {
        assert_eq!(parse_err("foo"), OptionError::Unknown("foo".into()));
        assert_eq!(
            parse_err("noatime,foo=3"),
            OptionError::Unknown("foo".into())
        );
        assert_eq!(parse_err("foo").to_string(), "unknown mount option \"foo\"");
        // Case matters, as in the kernel.
        assert_eq!(parse_err("NoAtime"), OptionError::Unknown("NoAtime".into()));
        // ext3 options jbdfs has no equivalent for are refused, not ignored.
        assert_eq!(
            parse_err("journal_dev=8"),
            OptionError::Unknown("journal_dev".into())
        );
    }

    #[test]
    fn noload_and_norecovery_are_one_option() {
        assert!(!parse("").noload);
        assert!(parse("noload").noload);
        assert!(parse("ro,norecovery").noload);
    }

    #[test]
    fn bad_value_messages_are_clear() {
        assert_eq!(
            parse_err("bdelay=foo").to_string(),
            "invalid value \"foo\" for mount option \"bdelay\": \
             expected 0, yield, a number of jiffies, jbd2 or auto"
        );
        assert_eq!(
            parse_err("hz=0").to_string(),
            "invalid value \"0\" for mount option \"hz\": expected an integer from 1 to 10000"
        );
        assert_eq!(
            parse_err("data").to_string(),
            "mount option \"data\" needs a value: expected ordered, writeback or journal"
        );
        assert_eq!(
            parse_err("debug=1").to_string(),
            "invalid value \"1\" for mount option \"debug\": expected no value"
        );
    }

    #[test]
    fn first_error_wins() {
        assert_eq!(parse_err("frob,hz=0"), OptionError::Unknown("frob".into()));
        assert_bad_value("hz=0,frob", "hz");
    }

    #[test]
    fn later_options_override_earlier() {
        let o = parse("data=journal,bdelay=1,hz=100,threads=4,data=writeback,bdelay=auto");
        assert_eq!(
            (o.data, o.bdelay, o.hz, o.threads),
            (DataMode::Writeback, Bdelay::Auto, 100, 4)
        );
        let o = MountOptions::parse(&["cache_size=1G,errors=panic", "cache_size=16M"]).unwrap();
        assert_eq!((o.cache_size, o.errors), (16 << 20, ErrorsPolicy::Panic));
    }

    #[test]
    fn fstab_style_line() {
        let o = parse("defaults,noatime,data=journal,bdelay=1,x-systemd.automount,_netdev");
        assert_eq!(o.data, DataMode::Journal);
        assert_eq!(o.bdelay, Bdelay::Jiffies(1));
        assert_eq!(o.fuse_generic(), ["noatime"]);
        assert_eq!(o.ignored, ["defaults", "x-systemd.automount", "_netdev"]);
    }

    #[test]
    fn mount_fuse3_style_arguments() {
        // mount.fuse3 may pass several -o flags, generic ones first.
        let o = MountOptions::parse(&["rw,nosuid,nodev", "bdelay=yield,threads=8", "allow_other"])
            .unwrap();
        assert_eq!(o.fuse_generic(), ["rw", "nosuid", "nodev", "allow_other"]);
        assert_eq!((o.bdelay, o.threads), (Bdelay::Yield, 8));
    }
}
