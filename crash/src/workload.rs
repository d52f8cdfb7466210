//! The workloads: each a deterministic list of operations made from a seed
//! and a size, valid by construction (the generator consults the model), so
//! that the same list can be rebuilt from a log's description to check it.

use crate::model::{Model, Op};
use jbdfs::util::rng::Rng;

/// The workloads, by the names the command line and the logs use.
pub(crate) const WORKLOADS: &[&str] = &[
    "fs_mark",
    "fsx",
    "rename_link",
    "truncate_append",
    "punch",
    "dirtree",
    "ace",
];

/// Builds workload `name`'s operations; `size` scales its length.
pub(crate) fn generate(name: &str, seed: u64, size: usize) -> anyhow::Result<Vec<Op>> {
    let mut g = Gen {
        rng: Rng::new(seed),
        model: Model::default(),
        ops: Vec::new(),
        seeds: seed << 20,
    };
    match name {
        "fs_mark" => g.fs_mark(size),
        "fsx" => g.fsx(size),
        "rename_link" => g.rename_link(size),
        "truncate_append" => g.truncate_append(size),
        "punch" => g.punch(size),
        "dirtree" => g.dirtree(size),
        "ace" => g.ace(),
        _ => anyhow::bail!(
            "unknown workload {name:?} (known: {})",
            WORKLOADS.join(", ")
        ),
    }
    Ok(g.ops)
}

struct Gen {
    rng: Rng,
    model: Model,
    ops: Vec<Op>,
    /// Write seeds are unique across the workload.
    seeds: u64,
}

/// Small enough that one write is one journal handle in every data mode.
const MAX_WRITE: u64 = 24 << 10;

impl Gen {
    fn push(&mut self, op: Op) {
        self.model
            .apply(&op)
            .unwrap_or_else(|e| panic!("workload generator made an invalid op {op:?}: {e}"));
        self.ops.push(op);
    }

    fn write(&mut self, path: &str, off: u64, len: u64) {
        self.seeds += 1;
        let op = Op::Write {
            path: path.into(),
            off,
            len: len.clamp(1, MAX_WRITE) as u32,
            seed: self.seeds,
        };
        self.push(op);
    }

    fn files(&self) -> Vec<String> {
        let m = &self.model;
        m.names.keys().filter(|p| m.is_file(p)).cloned().collect()
    }

    fn dirs(&self) -> Vec<String> {
        let m = &self.model;
        let mut d: Vec<String> = m.names.keys().filter(|p| m.is_dir(p)).cloned().collect();
        d.push(String::new());
        d
    }

    fn join(dir: &str, name: &str) -> String {
        if dir.is_empty() {
            name.to_string()
        } else {
            format!("{dir}/{name}")
        }
    }

    /// A name not yet used in `dir`.
    fn fresh(&mut self, dir: &str, stem: &str) -> String {
        loop {
            let p = Self::join(dir, &format!("{stem}{}", self.rng.below(1000)));
            if !self.model.names.contains_key(&p) {
                return p;
            }
        }
    }

    /// fsync or fdatasync of `path`, as fsx and fs_mark use them.
    fn sync_file(&mut self, path: &str) {
        let op = if self.rng.chance(50) {
            Op::Fsync(path.into())
        } else {
            Op::Fdatasync(path.into())
        };
        self.push(op);
    }

    /// fs_mark -S 1: in a few directories, create, write, fsync, close; and
    /// as fs_mark -L loops do, delete some of an earlier round.
    fn fs_mark(&mut self, size: usize) {
        for d in 0..3 {
            self.push(Op::Mkdir(format!("d{d}")));
        }
        self.push(Op::Sync);
        for i in 0..size {
            let dir = format!("d{}", i % 3);
            let p = self.fresh(&dir, "f");
            self.push(Op::Create(p.clone()));
            let len = 1 + self.rng.below(12 << 10);
            self.write(&p, 0, len);
            self.push(Op::Fsync(p));
            if i % 7 == 6 {
                if let Some(victim) = self.rng.pick(&self.files()).cloned() {
                    self.push(Op::Unlink(victim));
                }
            }
        }
    }

    /// fsx: one file, random writes, truncates and fallocates, with fsync
    /// and fdatasync between them.
    fn fsx(&mut self, size: usize) {
        let f = "fsx".to_string();
        self.push(Op::Create(f.clone()));
        let max_len: u64 = 256 << 10;
        for _ in 0..size {
            let cur = self.model.lookup(&f).map_or(0, |n| n.data.len() as u64);
            match self.rng.below(10) {
                0..=4 => {
                    let off = self.rng.below(max_len);
                    let len = 1 + self.rng.below(MAX_WRITE);
                    self.write(&f, off, len.min(max_len - off).max(1));
                }
                5 => {
                    let size = self.rng.below(max_len);
                    self.push(Op::Truncate {
                        path: f.clone(),
                        size,
                    });
                }
                6 => {
                    let off = self.rng.below(max_len);
                    let len = 1 + self.rng.below((max_len - off).min(MAX_WRITE));
                    let keep_size = self.rng.chance(50);
                    self.push(Op::Fallocate {
                        path: f.clone(),
                        off,
                        len,
                        keep_size,
                    });
                }
                7 => {
                    let len = 1 + self.rng.below(8 << 10);
                    self.write(&f, cur, len);
                }
                _ => self.sync_file(&f),
            }
        }
        self.push(Op::Fsync(f));
    }

    /// Renames (over existing files, across directories, of directories)
    /// and hard links made and removed, with fsyncs of what was moved.
    fn rename_link(&mut self, size: usize) {
        for d in ["a", "b", "a/c"] {
            self.push(Op::Mkdir(d.into()));
        }
        for i in 0..6 {
            let p = format!("{}/f{i}", ["a", "b", "a/c"][i % 3]);
            self.push(Op::Create(p.clone()));
            let len = 100 + self.rng.below(6000);
            self.write(&p, 0, len);
        }
        self.push(Op::Sync);
        for _ in 0..size {
            let files = self.files();
            let dirs = self.dirs();
            let (Some(src), Some(dst_dir)) = (
                self.rng.pick(&files).cloned(),
                self.rng.pick(&dirs).cloned(),
            ) else {
                break;
            };
            match self.rng.below(8) {
                0..=2 => {
                    // Over an existing file half of the time.
                    let to = match self.rng.pick(&files).cloned() {
                        Some(t) if self.rng.chance(50) => t,
                        _ => self.fresh(&dst_dir, "r"),
                    };
                    self.push(Op::Rename {
                        from: src,
                        to: to.clone(),
                    });
                    if self.rng.chance(50) {
                        self.push(Op::Fsync(to));
                    }
                }
                3 | 4 => {
                    let to = self.fresh(&dst_dir, "l");
                    self.push(Op::Link { from: src, to });
                }
                5 => {
                    if files.len() > 3 {
                        self.push(Op::Unlink(src));
                    }
                }
                6 => {
                    let p = self.fresh(&dst_dir, "n");
                    self.push(Op::Create(p.clone()));
                    let len = 1 + self.rng.below(4000);
                    self.write(&p, 0, len);
                    self.push(Op::Fsync(p));
                }
                _ => self.push(Op::Sync),
            }
        }
        self.push(Op::Sync);
    }

    /// Appends and truncates (down, up, to zero) on a few files, each
    /// followed at random by fsync or fdatasync: ordered mode must never
    /// show another file's old blocks in appended ranges.
    fn truncate_append(&mut self, size: usize) {
        let names: Vec<String> = (0..4).map(|i| format!("t{i}")).collect();
        for n in &names {
            self.push(Op::Create(n.clone()));
        }
        for _ in 0..size {
            let f = self.rng.pick(&names).cloned().unwrap_or_default();
            let cur = self.model.lookup(&f).map_or(0, |n| n.data.len() as u64);
            match self.rng.below(6) {
                0..=2 => {
                    let len = 1 + self.rng.below(MAX_WRITE);
                    self.write(&f, cur, len);
                }
                3 => {
                    let size = self.rng.below(cur + 1);
                    self.push(Op::Truncate {
                        path: f.clone(),
                        size,
                    });
                }
                4 => {
                    let size = if self.rng.chance(50) {
                        0
                    } else {
                        cur + self.rng.below(20000)
                    };
                    self.push(Op::Truncate {
                        path: f.clone(),
                        size,
                    });
                }
                _ => {}
            }
            if self.rng.chance(40) {
                self.sync_file(&f);
            }
        }
        self.push(Op::Sync);
    }

    /// punch: one file written densely across the direct, single- and
    /// double-indirect edges (at 1 KiB blocks, 12 KiB and 268 KiB), then
    /// holes punched in it (partial blocks at the ends; whole pointer
    /// blocks emptied and freed), parts written again and truncated, with
    /// fsync and fdatasync between them.
    fn punch(&mut self, size: usize) {
        let f = "punch".to_string();
        self.push(Op::Create(f.clone()));
        let max_len: u64 = 300 << 10;
        for off in (0..max_len).step_by(MAX_WRITE as usize) {
            self.write(&f, off, MAX_WRITE.min(max_len - off));
        }
        self.push(Op::Fsync(f.clone()));
        for _ in 0..size {
            match self.rng.below(10) {
                0..=4 => {
                    let op = Op::PunchHole {
                        path: f.clone(),
                        off: self.rng.below(max_len),
                        len: 1 + self.rng.below(64 << 10),
                    };
                    self.push(op);
                }
                5..=7 => {
                    let off = self.rng.below(max_len);
                    let len = 1 + self.rng.below(MAX_WRITE);
                    self.write(&f, off, len.min(max_len - off).max(1));
                }
                8 => {
                    let size = max_len / 2 + self.rng.below(max_len / 2);
                    self.push(Op::Truncate {
                        path: f.clone(),
                        size,
                    });
                }
                _ => self.sync_file(&f),
            }
        }
        self.push(Op::Fsync(f));
    }

    /// Directory trees made and removed: nested mkdirs with files, rmdir of
    /// whole subtrees deepest first, directory renames.
    fn dirtree(&mut self, size: usize) {
        for round in 0..size.div_ceil(10) {
            let top = format!("t{round}");
            self.push(Op::Mkdir(top.clone()));
            let mut made = vec![top.clone()];
            for i in 0..8 {
                let parent = self.rng.pick(&made).cloned().unwrap_or_default();
                let d = Self::join(&parent, &format!("s{i}"));
                self.push(Op::Mkdir(d.clone()));
                if self.rng.chance(50) {
                    let f = Self::join(&d, "f");
                    self.push(Op::Create(f.clone()));
                    let len = 1 + self.rng.below(3000);
                    self.write(&f, 0, len);
                }
                made.push(d);
            }
            if self.rng.chance(50) {
                self.push(Op::Fsync(top.clone()));
            }
            if round % 2 == 1 {
                let old = format!("t{}", round - 1);
                let newer = format!("u{round}");
                self.push(Op::Rename {
                    from: old,
                    to: newer.clone(),
                });
                self.remove_tree(&newer);
                self.push(Op::Sync);
            }
        }
        self.push(Op::Sync);
    }

    fn remove_tree(&mut self, top: &str) {
        let prefix = format!("{top}/");
        let mut under: Vec<String> = self
            .model
            .names
            .keys()
            .filter(|p| p.starts_with(&prefix))
            .cloned()
            .collect();
        // Deepest first.
        under.sort_by_key(|p| std::cmp::Reverse(p.matches('/').count()));
        for p in under {
            let op = if self.model.is_dir(&p) {
                Op::Rmdir(p)
            } else {
                Op::Unlink(p)
            };
            self.push(op);
        }
        self.push(Op::Rmdir(top.into()));
    }

    /// ACE (CrashMonkey's generator) in small: a set-up made durable, then
    /// 1 to 3 operations over files A, B, D/C and directory D, each followed
    /// or not by fsync, fdatasync or sync.
    fn ace(&mut self) {
        self.push(Op::Mkdir("D".into()));
        self.push(Op::Create("A".into()));
        self.write("A", 0, 5000);
        self.push(Op::Create("D/C".into()));
        self.write("D/C", 0, 3000);
        self.push(Op::Sync);
        let n = 1 + self.rng.below(3);
        for _ in 0..n {
            let target = self.ace_op();
            match self.rng.below(4) {
                0 => {}
                1 => self.push(Op::Fsync(target)),
                2 => self.push(Op::Fdatasync(target)),
                _ => self.push(Op::Sync),
            }
        }
    }

    /// One ACE operation valid in the current state; returns the path a
    /// following fsync should name.
    fn ace_op(&mut self) -> String {
        const NAMES: [&str; 5] = ["A", "B", "D/C", "D/E", "F"];
        let pick = |g: &mut Gen| NAMES[g.rng.below(NAMES.len() as u64) as usize].to_string();
        for _ in 0..64 {
            let p = pick(self);
            let q = pick(self);
            let exists = self.model.names.contains_key(&p);
            let file = self.model.is_file(&p);
            let parent_ok = self.model.is_dir(crate::model::parent_of(&p));
            let op = match self.rng.below(12) {
                0 if !exists && parent_ok => Op::Create(p.clone()),
                1 if !exists && parent_ok => Op::Mkdir(p.clone()),
                2 if file => {
                    let off = self.rng.below(8192);
                    let len = 1 + self.rng.below(6000);
                    self.seeds += 1;
                    Op::Write {
                        path: p.clone(),
                        off,
                        len: len as u32,
                        seed: self.seeds,
                    }
                }
                3 if file => Op::Fallocate {
                    path: p.clone(),
                    off: self.rng.below(8192),
                    len: 1 + self.rng.below(8192),
                    keep_size: self.rng.chance(50),
                },
                4 if file
                    && !self.model.names.contains_key(&q)
                    && self.model.is_dir(crate::model::parent_of(&q)) =>
                {
                    Op::Link {
                        from: p.clone(),
                        to: q.clone(),
                    }
                }
                5 if exists && !self.model.is_dir(&p) => Op::Unlink(p.clone()),
                6 if exists
                    && self.model.is_dir(&p)
                    && self.model.children(&p).next().is_none() =>
                {
                    Op::Rmdir(p.clone())
                }
                7 if file
                    && p != q
                    && self.model.is_dir(crate::model::parent_of(&q))
                    && (!self.model.names.contains_key(&q) || self.model.is_file(&q)) =>
                {
                    Op::Rename {
                        from: p.clone(),
                        to: q.clone(),
                    }
                }
                8 if file => Op::Truncate {
                    path: p.clone(),
                    size: self.rng.below(10000),
                },
                9 if file => Op::SetXattr {
                    path: p.clone(),
                    name: format!("user.k{}", self.rng.below(3)).into_bytes(),
                    value: vec![b'v'; 1 + self.rng.below(300) as usize],
                },
                10 if file && !self.model.lookup(&p).is_some_and(|n| n.xattrs.is_empty()) => {
                    let name = self
                        .model
                        .lookup(&p)
                        .and_then(|n| n.xattrs.keys().next().cloned());
                    Op::RemoveXattr {
                        path: p.clone(),
                        name: name.unwrap_or_default(),
                    }
                }
                11 if !exists && parent_ok => Op::Symlink {
                    path: p.clone(),
                    target: q.clone().into_bytes(),
                },
                _ => continue,
            };
            let target = match &op {
                Op::Link { to, .. } | Op::Rename { to, .. } => to.clone(),
                Op::Unlink(x) | Op::Rmdir(x) => crate::model::parent_of(x).to_string(),
                _ => p,
            };
            self.push(op);
            return if target.is_empty() {
                ".".into()
            } else {
                target
            };
        }
        self.push(Op::Sync);
        ".".into()
    }
}
