// An example: it stops with a message on any failure.
#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]
//! The floor of a FUSE filesystem on this machine: names and sizes in
//! memory, no storage, no journal, every request answered at once, with the
//! init flags, mount and transports jbdfs uses. It is a [`Handler`] served
//! by the daemon's own session ([`session::mount`]), over /dev/fuse or FUSE
//! over io_uring, so fs_mark and the source-tree workload on it
//! (`scripts/bench-fsmark.sh --floor`, `scripts/bench-tree.sh --floor`)
//! measure what the kernel's FUSE round trips alone cost on each transport:
//! the part of jbdfs's gap to Linux ext3 that any FUSE filesystem pays.
//!
//!     cargo run --release --example fuse_floor -- MOUNTPOINT [THREADS] [--io-uring] [--depth N] [--poll-us N]
//!
//! THREADS /dev/fuse workers (8); --io-uring serves by io_uring queues of
//! depth N that poll for --poll-us microseconds after answering (the
//! daemon's defaults) when the kernel grants it, and says so on stderr
//! either way. Serves until unmounted (fusermount3 -u MOUNTPOINT).
//! Regular files and directories only; data is counted, not kept (reads
//! return zeros); rename and the other operations `Floor::answer` does not
//! list get ENOSYS, symlink and link EPERM (what fuser's defaults answer).

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use fuser::{Config, MountOption};
use jbdfs_daemon::fuse::request::{
    dirent_size, direntplus_size, Attr, DirEntry, DirPlus, DirPlusEntry, EntryOut, Errno, NodeId,
    OpenOut, StatfsOut,
};
use jbdfs_daemon::fuse::{session, uring, Answer, Ctx, Handler, Op, Outcome, Responder, Transport};
use parking_lot::Mutex;

const ROOT: NodeId = 1;
/// FOPEN_KEEP_CACHE (`include/uapi/linux/fuse.h`): what create answers.
const FOPEN_KEEP_CACHE: u32 = 1 << 1;
const S_IFDIR: u32 = libc::S_IFDIR;
const S_IFREG: u32 = libc::S_IFREG;

#[derive(Default)]
struct Tree {
    names: HashMap<(NodeId, Vec<u8>), NodeId>,
    attrs: HashMap<NodeId, Attr>,
}

struct Floor {
    tree: Mutex<Tree>,
    next_ino: AtomicU64,
}

fn now() -> (i64, u32) {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_secs() as i64, d.subsec_nanos())
}

/// `kind` is S_IFDIR or S_IFREG.
fn attr(ino: NodeId, kind: u32, perm: u32, uid: u32, gid: u32) -> Attr {
    let t = now();
    Attr {
        ino,
        size: 0,
        blocks: 0,
        atime: t,
        mtime: t,
        ctime: t,
        mode: kind | (perm & 0o7777),
        nlink: if kind == S_IFDIR { 2 } else { 1 },
        uid,
        gid,
        rdev: 0,
        blksize: 4096,
    }
}

fn entry(attr: Attr) -> EntryOut {
    EntryOut {
        attr,
        generation: 0,
    }
}

fn dtype(a: &Attr) -> u32 {
    if a.mode & libc::S_IFMT == S_IFDIR {
        libc::DT_DIR as u32
    } else {
        libc::DT_REG as u32
    }
}

fn err(e: i32) -> Outcome {
    Err(Errno::from_i32(e))
}

impl Floor {
    fn new() -> Floor {
        // The root is the mounter's, as FUSE_INIT's caller was before.
        // SAFETY: geteuid and getegid cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let mut tree = Tree::default();
        tree.attrs
            .insert(ROOT, attr(ROOT, S_IFDIR, 0o755, uid, gid));
        Floor {
            tree: Mutex::new(tree),
            next_ino: AtomicU64::new(ROOT + 1),
        }
    }

    fn add(&self, ctx: &Ctx, parent: NodeId, name: &[u8], kind: u32, mode: u32) -> Outcome {
        let mut t = self.tree.lock();
        let key = (parent, name.to_vec());
        if t.names.contains_key(&key) {
            return err(libc::EEXIST);
        }
        let ino = self.next_ino.fetch_add(1, Ordering::Relaxed);
        let a = attr(ino, kind, mode, ctx.uid, ctx.gid);
        t.names.insert(key, ino);
        t.attrs.insert(ino, a);
        Ok(Answer::Entry(entry(a)))
    }

    /// The directory's entries by name from `offset` (offsets are
    /// positions in that order), as many as fit in `size` bytes when the
    /// transport says how many the kernel takes (`each` is an entry's
    /// size), else all: the transport stops where the kernel's buffer does.
    fn entries(
        &self,
        dir: NodeId,
        offset: u64,
        size: Option<u32>,
        each: fn(usize) -> usize,
    ) -> Vec<(u64, Vec<u8>, Attr)> {
        let t = self.tree.lock();
        let mut all: Vec<(&[u8], &Attr)> = t
            .names
            .iter()
            .filter(|((parent, _), _)| *parent == dir)
            .map(|((_, name), child)| (name.as_slice(), &t.attrs[child]))
            .collect();
        all.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let mut room = size.map_or(usize::MAX, |s| s as usize);
        let mut out = Vec::new();
        for (i, (name, a)) in all.into_iter().enumerate().skip(offset as usize) {
            let need = each(name.len());
            if need > room {
                break;
            }
            room -= need;
            out.push((i as u64 + 1, name.to_vec(), *a));
        }
        out
    }

    fn lookup(&self, parent: NodeId, name: &[u8]) -> Outcome {
        let t = self.tree.lock();
        // Node 0: a negative entry the kernel may cache.
        let e = match t.names.get(&(parent, name.to_vec())) {
            Some(ino) => entry(t.attrs[ino]),
            None => EntryOut::negative(),
        };
        Ok(Answer::Entry(e))
    }

    /// Sizes, and (ignored) the times the kernel flushes under the
    /// writeback cache.
    fn setattr(&self, ino: NodeId, size: Option<u64>) -> Outcome {
        match self.tree.lock().attrs.get_mut(&ino) {
            Some(a) => {
                if let Some(size) = size {
                    a.size = size;
                }
                Ok(Answer::Attr(*a))
            }
            None => err(libc::ENOENT),
        }
    }

    /// unlink and rmdir alike.
    fn remove(&self, parent: NodeId, name: &[u8]) -> Outcome {
        let mut t = self.tree.lock();
        match t.names.remove(&(parent, name.to_vec())) {
            Some(ino) => {
                t.attrs.remove(&ino);
                Ok(Answer::Empty)
            }
            None => err(libc::ENOENT),
        }
    }

    /// Zeros up to the file's size: the floor keeps no data.
    fn read(&self, ino: NodeId, offset: u64, size: u32) -> Outcome {
        let len = match self.tree.lock().attrs.get(&ino) {
            Some(a) => a.size.saturating_sub(offset).min(size as u64) as usize,
            None => return err(libc::ENOENT),
        };
        Ok(Answer::Data(vec![0; len]))
    }

    fn write(&self, ino: NodeId, offset: u64, len: usize) -> Outcome {
        if let Some(a) = self.tree.lock().attrs.get_mut(&ino) {
            a.size = a.size.max(offset + len as u64);
        }
        Ok(Answer::Written(len as u32))
    }

    fn readdir(&self, ino: NodeId, offset: u64, size: Option<u32>) -> Outcome {
        let list = self
            .entries(ino, offset, size, dirent_size)
            .into_iter()
            .map(|(next, name, a)| DirEntry {
                ino: a.ino,
                next,
                kind: dtype(&a),
                name,
            })
            .collect();
        Ok(Answer::Dir(list))
    }

    /// The floor keeps no lookup counts (it never forgets a node), so it
    /// need not learn which entries the kernel received.
    fn readdirplus(&self, ino: NodeId, offset: u64, size: Option<u32>) -> Outcome {
        let entries = self
            .entries(ino, offset, size, direntplus_size)
            .into_iter()
            .map(|(next, name, a)| DirPlusEntry {
                entry: entry(a),
                dirent: DirEntry {
                    ino: a.ino,
                    next,
                    kind: dtype(&a),
                    name,
                },
            })
            .collect();
        Ok(Answer::DirPlus(DirPlus {
            entries,
            on_sent: None,
        }))
    }

    fn answer(&self, ctx: &Ctx, op: Op<'_>) -> Outcome {
        match op {
            Op::Lookup { parent, name } => self.lookup(parent, name),
            Op::Getattr { ino } => match self.tree.lock().attrs.get(&ino) {
                Some(a) => Ok(Answer::Attr(*a)),
                None => err(libc::ENOENT),
            },
            Op::Setattr { ino, set } => self.setattr(ino, set.size),
            Op::Mkdir {
                parent, name, mode, ..
            } => self.add(ctx, parent, name, S_IFDIR, mode),
            Op::Unlink { parent, name } | Op::Rmdir { parent, name } => self.remove(parent, name),
            Op::Create {
                parent, name, mode, ..
            } => match self.add(ctx, parent, name, S_IFREG, mode)? {
                Answer::Entry(e) => Ok(Answer::Create(
                    e,
                    OpenOut {
                        fh: 0,
                        flags: FOPEN_KEEP_CACHE,
                    },
                )),
                _ => err(libc::EIO),
            },
            Op::Open { .. } => Ok(Answer::Open(OpenOut::default())),
            // As jbdfs answers it: FOPEN_CACHE_DIR | FOPEN_KEEP_CACHE.
            Op::Opendir { .. } => Ok(Answer::Open(OpenOut {
                fh: 0,
                flags: 1 << 3 | 1 << 1,
            })),
            Op::Read {
                ino, offset, size, ..
            } => self.read(ino, offset, size),
            Op::Write {
                ino, offset, data, ..
            } => self.write(ino, offset, data.len()),
            // ENOSYS: the kernel stops sending FLUSH, as it does for jbdfs.
            Op::Flush { .. } => err(libc::ENOSYS),
            Op::Fsync { .. } | Op::Release { .. } | Op::Releasedir { .. } => Ok(Answer::Empty),
            Op::Readdir { ino, offset, size } => self.readdir(ino, offset, size),
            Op::Readdirplus { ino, offset, size } => self.readdirplus(ino, offset, size),
            Op::Getxattr { .. } => err(libc::ENODATA),
            Op::Statfs => Ok(Answer::Statfs(StatfsOut {
                blocks: 1 << 20,
                bfree: 1 << 19,
                bavail: 1 << 19,
                files: 1 << 20,
                ffree: 1 << 19,
                bsize: 4096,
                namelen: 255,
                frsize: 4096,
            })),
            Op::Symlink { .. } | Op::Link { .. } => err(libc::EPERM),
            _ => err(libc::ENOSYS),
        }
    }
}

impl Handler for Floor {
    fn dispatch(&self, ctx: &Ctx, op: Op<'_>, reply: impl Responder) {
        reply.respond(self.answer(ctx, op));
    }

    fn forget(&self, _ino: NodeId, _nlookup: u64) {}

    fn destroy(&self) {}
}

fn usage() -> String {
    format!(
        "usage: fuse_floor MOUNTPOINT [THREADS] [--io-uring] [--depth N] [--poll-us N]\n\
         Serves an in-memory filesystem with no storage (the FUSE floor of\n\
         scripts/bench-fsmark.sh --floor) until unmounted: by THREADS /dev/fuse\n\
         workers (8), or with --io-uring by FUSE over io_uring, one queue per CPU\n\
         of depth N ({}) that polls --poll-us microseconds after answering ({}),\n\
         when the kernel grants it.",
        uring::DEFAULT_DEPTH,
        uring::DEFAULT_POLL.as_micros()
    )
}

fn usage_error(msg: &str) -> ! {
    eprintln!("fuse_floor: {msg}\n{}", usage());
    std::process::exit(2);
}

fn main() -> std::io::Result<()> {
    // The session's warnings (why io_uring is not used, say); RUST_LOG for
    // more. fuser's own warning that its unmount after fusermount3's failed
    // is noise here.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new("warn,fuser::session=error")
            }),
        )
        .try_init();
    let mut mountpoint: Option<PathBuf> = None;
    let mut threads: Option<usize> = None;
    let mut io_uring = false;
    let mut ring_config = uring::RingConfig::default();
    let mut args = std::env::args_os().skip(1);
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("-h" | "--help") => {
                println!("{}", usage());
                return Ok(());
            }
            Some("--io-uring") => io_uring = true,
            Some("--depth") => {
                ring_config.depth = args
                    .next()
                    .and_then(|d| d.to_str().and_then(|d| d.parse().ok()))
                    .filter(|&d| d > 0)
                    .unwrap_or_else(|| usage_error("--depth takes a positive number"));
            }
            Some("--poll-us") => {
                let us: u64 = args
                    .next()
                    .and_then(|d| d.to_str().and_then(|d| d.parse().ok()))
                    .filter(|&d| d <= u64::from(uring::MAX_POLL_US))
                    .unwrap_or_else(|| {
                        usage_error(&format!("--poll-us takes 0-{}", uring::MAX_POLL_US))
                    });
                ring_config.poll = std::time::Duration::from_micros(us);
            }
            Some(a) if a.starts_with('-') => usage_error(&format!("unknown option {a}")),
            _ if mountpoint.is_none() => mountpoint = Some(arg.into()),
            _ if threads.is_none() => {
                threads = Some(
                    arg.to_str()
                        .and_then(|t| t.parse().ok())
                        .filter(|&t| t > 0)
                        .unwrap_or_else(|| usage_error("THREADS must be a positive number")),
                )
            }
            _ => usage_error("too many arguments"),
        }
    }
    let Some(mountpoint) = mountpoint else {
        usage_error("no MOUNTPOINT");
    };
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("fuse_floor".into()),
        MountOption::DefaultPermissions,
        MountOption::RW,
    ];
    config.n_threads = Some(threads.unwrap_or(8));
    config.clone_fd = true;
    let transport = if io_uring {
        Transport::IoUring(ring_config)
    } else {
        Transport::DevFuse
    };
    let mut mounted = session::mount(
        Arc::new(Floor::new()),
        &mountpoint,
        &config,
        false,
        transport,
    )?;
    // On failure the session is dropped, which unmounts: nothing is left
    // waiting for rings that will not come.
    let rings = mounted.start()?;
    let serving = mounted.serving();
    if io_uring && rings.is_none() {
        eprintln!(
            "fuse_floor: io_uring not granted, falling back: serving {} by {serving}",
            mountpoint.display()
        );
    } else {
        eprintln!("fuse_floor: serving {} by {serving}", mountpoint.display());
    }
    mounted.run(rings)
}
