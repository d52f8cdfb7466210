//! Checking one crash state: journal replay, fsck-jbdfs -fn, e2fsck -fn,
//! then the tree compared with the model states the program could have
//! left (see docs/CRASH.md for the rules and why they hold for ext3/jbd).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use jbdfs::device::{BlockDevice, MemoryDevice};
use jbdfs::fs::{Filesystem, MountConfig};
use jbdfs::journal::recovery::{recover, RecoverOptions};

use crate::exec::{Mode, ROOT};
use crate::model::{Id, Meta, Model, Op, View};

/// The model after each prefix of the workload: index 0 before any
/// operation, K after operation K.
pub(crate) struct Expected {
    pub views: Vec<View>,
    pub data: Vec<BTreeMap<Id, Vec<u8>>>,
    /// Whether operation K (index K-1) is a durability point.
    pub syncs: Vec<bool>,
    /// For each durability point, the file whose data it makes durable, or
    /// [`ALL`] for sync(2); `None` for other operations.
    pub covers: Vec<Option<Id>>,
}

/// `covers` of sync(2): every file. Model ids start at 1.
pub(crate) const ALL: Id = 0;

impl Expected {
    /// The last durability point at or before `lo` that covers file `id`'s
    /// data: data=writeback promises a file's data only through its own
    /// fsync (or sync), while every fsync still commits all metadata.
    pub(crate) fn last_sync_of(&self, id: Id, lo: usize) -> usize {
        (1..=lo)
            .rev()
            .find(|&k| matches!(self.covers[k - 1], Some(c) if c == ALL || c == id))
            .unwrap_or(0)
    }
}

impl Expected {
    /// Fails if an operation does not apply to the model (a log whose
    /// description does not rebuild the workload it recorded).
    pub(crate) fn build(ops: &[Op]) -> anyhow::Result<Expected> {
        let mut m = Model::default();
        let snap = |m: &Model| {
            let data = m
                .nodes
                .iter()
                .map(|(id, n)| (*id, n.data.clone()))
                .collect();
            (m.view(), data)
        };
        let (v, d) = snap(&m);
        let mut e = Expected {
            views: vec![v],
            data: vec![d],
            syncs: ops.iter().map(Op::is_sync).collect(),
            covers: Vec::new(),
        };
        for op in ops {
            e.covers.push(match op {
                Op::Sync => Some(ALL),
                Op::Fsync(p) | Op::Fdatasync(p) => Some(m.names.get(p).copied().unwrap_or(Id::MAX)),
                _ => None,
            });
            m.apply(op).map_err(|e| {
                anyhow::anyhow!("operation {op:?} does not apply to the model: {e}")
            })?;
            let (v, d) = snap(&m);
            e.views.push(v);
            e.data.push(d);
        }
        Ok(e)
    }
}

/// What failed, by class (for the campaign's tallies) and in words.
#[derive(Debug)]
pub(crate) struct Failure {
    pub class: &'static str,
    pub detail: String,
}

fn fail(class: &'static str, detail: String) -> Failure {
    Failure { class, detail }
}

/// Damage done to a crash state before it is checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Damage {
    /// The state as the crash left it; recovery is the mount's replay.
    #[default]
    None,
    /// The journal inode zeroed: recovery is `fsck -y`, which must find
    /// the log through the superblock's backup of the inode's block map
    /// and lose nothing fsync'd.
    JournalInode,
}

impl Damage {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Damage::None => "none",
            Damage::JournalInode => "journal-inode",
        }
    }
}

/// Runs every check on the crash image `img`; `lo..=hi` are the model
/// states it may show. `scratch` is a file e2fsck can read.
pub(crate) fn check_state(
    mut img: Vec<u8>,
    exp: &Expected,
    (lo, hi): (usize, usize),
    (mode, damage): (Mode, Damage),
    scratch: &Path,
) -> Result<(), Failure> {
    if damage == Damage::JournalInode {
        zero_journal_inode(&mut img)?;
    }
    let mem = Arc::new(MemoryDevice::from_vec(img));
    match damage {
        Damage::None => recover(&*mem, RecoverOptions { write: true })
            .map(drop)
            .map_err(|e| fail("recovery", format!("journal replay failed: {e}")))?,
        Damage::JournalInode => repair(&*mem)?,
    }
    let write_scratch = || {
        std::fs::write(scratch, mem.snapshot())
            .map_err(|e| fail("tool", format!("{}: {e}", scratch.display())))
    };
    write_scratch()?;
    if let Err(f) = e2fsck(scratch) {
        // Something else on the machine may sweep temporary files: a
        // scratch image gone under e2fsck is not the filesystem's fault.
        if scratch.exists() {
            return Err(f);
        }
        write_scratch()?;
        e2fsck(scratch)?;
    }
    jbdfs_fsck(&*mem)?;
    let dev: Arc<dyn BlockDevice> = mem;
    let cfg = MountConfig {
        read_only: true,
        ..Default::default()
    };
    let fs = Filesystem::mount(dev, &cfg)
        .map_err(|e| fail("mount", format!("mount after replay: {e}")))?;
    let (got, data) = observe(&fs).map_err(|e| fail("read", format!("reading the tree: {e}")))?;
    compare(exp, (lo, hi), mode, &got, &data)
}

/// Zeroes the journal inode's record in its inode table.
fn zero_journal_inode(img: &mut [u8]) -> Result<(), Failure> {
    use jbdfs::format::group_desc::{GroupDesc, GROUP_DESC_SIZE};
    use jbdfs::format::superblock::{Superblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
    let bad = |what: String| fail("damage", what);
    let at = SUPERBLOCK_OFFSET as usize;
    let sb = Superblock::parse(&img[at..at + SUPERBLOCK_SIZE])
        .map_err(|e| bad(format!("superblock: {e}")))?;
    let bs = sb.block_size() as usize;
    let (g, idx) = sb.inode_group(sb.s_journal_inum);
    let (block, off) = sb.group_desc_location(g);
    let desc_at = block.0 as usize * bs + off;
    let desc = img
        .get(desc_at..desc_at + GROUP_DESC_SIZE)
        .ok_or_else(|| bad("group descriptor past the image".into()))?;
    let gd = GroupDesc::parse(desc).map_err(|e| bad(format!("group descriptor: {e}")))?;
    let isz = sb.inode_size() as usize;
    let ino_at = gd.bg_inode_table as usize * bs + idx as usize * isz;
    img.get_mut(ino_at..ino_at + isz)
        .ok_or_else(|| bad("journal inode past the image".into()))?
        .fill(0);
    Ok(())
}

/// fsck -fy: the only way back for a state whose journal inode is gone.
fn repair(dev: &dyn BlockDevice) -> Result<(), Failure> {
    let opts = jbdfs::fsck::FsckOptions {
        mode: jbdfs::fsck::Mode::Yes,
        force: true,
        ..Default::default()
    };
    match jbdfs::fsck::check(dev, &opts) {
        Ok(r) if r.exit_code() & !jbdfs::fsck::exit::NONDESTRUCT == 0 => Ok(()),
        Ok(r) => Err(fail(
            "fsck-repair",
            format!(
                "fsck-jbdfs -fy exit {}: {}",
                r.exit_code(),
                r.problems.join("; ")
            ),
        )),
        Err(e) => Err(fail("fsck-repair", format!("fsck-jbdfs -fy: {e}"))),
    }
}

fn e2fsck(image: &Path) -> Result<(), Failure> {
    let out = Command::new("e2fsck")
        .arg("-fn")
        .arg(image)
        .env("LC_ALL", "C")
        .output()
        .map_err(|e| fail("tool", format!("cannot run e2fsck: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    Err(fail(
        "e2fsck",
        format!(
            "e2fsck -fn exit {:?} after replay:\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout)
        ),
    ))
}

fn jbdfs_fsck(dev: &dyn BlockDevice) -> Result<(), Failure> {
    let opts = jbdfs::fsck::FsckOptions {
        mode: jbdfs::fsck::Mode::No,
        force: true,
        ..Default::default()
    };
    match jbdfs::fsck::check(dev, &opts) {
        Ok(r) if r.exit_code() == 0 => Ok(()),
        Ok(r) => Err(fail(
            "fsck",
            format!(
                "fsck-jbdfs -fn exit {}: {}",
                r.exit_code(),
                r.problems.join("; ")
            ),
        )),
        Err(e) => Err(fail("fsck", format!("fsck-jbdfs -fn: {e}"))),
    }
}

type Observed = (BTreeMap<String, Meta>, BTreeMap<String, Vec<u8>>);

/// The recovered tree in the model's terms (lost+found left out).
pub(crate) fn observe(fs: &Filesystem) -> jbdfs::fs::Result<Observed> {
    let mut meta = BTreeMap::new();
    let mut data = BTreeMap::new();
    let mut inos: BTreeMap<String, u32> = BTreeMap::new();
    let mut todo = vec![(String::new(), ROOT)];
    while let Some((dir, ino)) = todo.pop() {
        for e in fs.readdir(ino, 0, 1 << 20)? {
            let name = String::from_utf8_lossy(&e.name).into_owned();
            if name == "." || name == ".." || (dir.is_empty() && name == "lost+found") {
                continue;
            }
            let path = if dir.is_empty() {
                name
            } else {
                format!("{dir}/{name}")
            };
            let inode = fs.getattr(e.ino)?;
            let (kind, size, target) = if inode.is_dir() {
                todo.push((path.clone(), e.ino));
                ('d', 0, Vec::new())
            } else if inode.is_symlink() {
                ('l', inode.i_size, fs.readlink(e.ino)?)
            } else {
                data.insert(path.clone(), fs.read(e.ino, 0, inode.i_size as u32)?);
                ('f', inode.i_size, Vec::new())
            };
            let names = fs.listxattr(e.ino)?;
            let mut xattrs = Vec::new();
            for n in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
                xattrs.push((n.to_vec(), fs.getxattr(e.ino, n)?));
            }
            xattrs.sort();
            inos.insert(path.clone(), e.ino.0);
            meta.insert(
                path.clone(),
                Meta {
                    kind,
                    size,
                    target,
                    nlink: inode.i_links_count as u32,
                    group: path,
                    xattrs,
                },
            );
        }
    }
    let mut first: BTreeMap<u32, String> = BTreeMap::new();
    for (p, i) in &inos {
        first.entry(*i).or_insert_with(|| p.clone());
    }
    for (p, m) in meta.iter_mut() {
        m.group = first[&inos[p]].clone();
    }
    Ok((meta, data))
}

/// The first difference between two trees, for messages.
fn first_difference(want: &BTreeMap<String, Meta>, got: &BTreeMap<String, Meta>) -> String {
    for (p, w) in want {
        match got.get(p) {
            None => return format!("{p} missing"),
            Some(g) if g != w => return format!("{p}: expected {w:?}, found {g:?}"),
            _ => {}
        }
    }
    match got.keys().find(|p| !want.contains_key(*p)) {
        Some(p) => format!("{p} should not exist"),
        None => "no difference".into(),
    }
}

fn compare(
    exp: &Expected,
    (lo, hi): (usize, usize),
    mode: Mode,
    got: &BTreeMap<String, Meta>,
    data: &BTreeMap<String, Vec<u8>>,
) -> Result<(), Failure> {
    let matching: Vec<usize> = (lo..=hi).filter(|&j| exp.views[j].meta == *got).collect();
    let Some(&first) = matching.first() else {
        return Err(fail(
            "metadata",
            format!(
                "the tree matches no state between operation {lo} (last sync) and {hi}; against {lo}: {}; against {hi}: {}",
                first_difference(&exp.views[lo].meta, got),
                first_difference(&exp.views[hi].meta, got)
            ),
        ));
    };
    if mode == Mode::Journal {
        // data=journal keeps program order: the data of one state, whole.
        let whole = |j: usize| {
            data.iter().all(|(p, d)| {
                let id = exp.views[j].ids[p];
                exp.data[j].get(&id) == Some(d)
            })
        };
        if matching.iter().any(|&j| whole(j)) {
            return Ok(());
        }
    }
    for (p, d) in data {
        check_bytes(exp, first, (lo, hi), mode, p, d)?;
    }
    if mode == Mode::Journal {
        return Err(fail(
            "order",
            format!("data=journal: file data is not that of any one state in {matching:?}"),
        ));
    }
    Ok(())
}

/// Whether the file block holding byte `o` changed between states `lo`
/// and `hi`. In data=writeback a zero the file had at its durability point
/// (a hole, or space a truncate added: written bytes are never zero) lies in
/// a block that a later write may have allocated, and that block's data may
/// land after the metadata, so the zero may read as the block's old
/// contents, as in ext3.
fn block_changed<'a>(
    o: usize,
    lo: usize,
    hi: usize,
    version: &impl Fn(usize) -> Option<&'a Vec<u8>>,
) -> bool {
    let start = o / crate::exec::BLOCK_SIZE * crate::exec::BLOCK_SIZE;
    let block = |k: usize| {
        version(k).map(|v| {
            let end = (start + crate::exec::BLOCK_SIZE).min(v.len());
            v.get(start..end).unwrap_or(&[]).to_vec()
        })
    };
    let at_lo = block(lo);
    (lo..=hi).any(|k| block(k) != at_lo)
}

/// Every byte of file `p` must be one the program wrote there (or a zero
/// it left) in some state from `first` (the earliest state with this tree)
/// to `hi`: never stale data from another file's old blocks, never lost
/// fsync'd bytes. data=writeback promises nothing for bytes appended since
/// the file's own last fsync (or the last sync), counting bytes a truncate
/// cut off and a later write appended again, and older bytes may be any
/// version since then.
fn check_bytes(
    exp: &Expected,
    first: usize,
    (lo, hi): (usize, usize),
    mode: Mode,
    p: &str,
    d: &[u8],
) -> Result<(), Failure> {
    let id = exp.views[first].ids[p];
    let version = |k: usize| exp.data[k].get(&id);
    if version(first).is_some_and(|v| v == d) {
        return Ok(());
    }
    let lo = match mode {
        Mode::Writeback => exp.last_sync_of(id, lo),
        _ => lo,
    };
    let from = if mode == Mode::Writeback { lo } else { first };
    // In writeback, a byte past the file's end at any point since its own
    // last durability point was appended since: a truncate below it and a
    // later write give it a new block whose data may land after the
    // metadata (another file's fsync commits the size), so it may read as
    // the block's old contents, as ext3 allows.
    let synced_len = if mode == Mode::Writeback {
        (lo..=hi)
            .map(|k| version(k).map_or(0, |v| v.len()))
            .min()
            .unwrap_or(0)
    } else {
        usize::MAX
    };
    for (o, &b) in d.iter().enumerate() {
        if o >= synced_len {
            break;
        }
        let ok = (from..=hi).any(|k| version(k).is_some_and(|v| v.get(o) == Some(&b)));
        if !ok {
            let want = version(lo).and_then(|v| v.get(o).copied());
            if mode == Mode::Writeback && want == Some(0) && block_changed(o, lo, hi, &version) {
                continue;
            }
            let class = if want.is_some() && lo > 0 {
                "lost-data"
            } else {
                "stale-data"
            };
            return Err(fail(
                class,
                format!(
                    "{p} byte {o} is {b:#04x}, which no write between operations {from} and {hi} put there (synced value {want:?}); length {}",
                    d.len()
                ),
            ));
        }
    }
    Ok(())
}
