//! The model a workload is checked against: what the tree holds after each
//! operation (names, kinds, link counts, sizes, symlink targets, xattrs and
//! file contents), computed without any filesystem, so a crash state can be
//! compared with the states the program could have left.

use std::collections::BTreeMap;

/// Model inode identity: stable across renames and links.
pub(crate) type Id = u32;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
    Symlink(Vec<u8>),
}

#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub kind: Kind,
    pub data: Vec<u8>,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// One operation, on paths relative to the root ("d0/f1").
#[derive(Clone, Debug)]
pub(crate) enum Op {
    Create(String),
    Mkdir(String),
    /// `len` bytes at `off`, the bytes made from `seed` (see [`pattern`]).
    Write {
        path: String,
        off: u64,
        len: u32,
        seed: u64,
    },
    Fallocate {
        path: String,
        off: u64,
        len: u64,
        keep_size: bool,
    },
    /// fallocate(PUNCH_HOLE | KEEP_SIZE): `off..off + len` reads as zeros.
    PunchHole {
        path: String,
        off: u64,
        len: u64,
    },
    Link {
        from: String,
        to: String,
    },
    Unlink(String),
    Rmdir(String),
    /// rename(2): replaces a file at `to`.
    Rename {
        from: String,
        to: String,
    },
    Truncate {
        path: String,
        size: u64,
    },
    SetXattr {
        path: String,
        name: Vec<u8>,
        value: Vec<u8>,
    },
    RemoveXattr {
        path: String,
        name: Vec<u8>,
    },
    Symlink {
        path: String,
        target: Vec<u8>,
    },
    Fsync(String),
    Fdatasync(String),
    Sync,
}

impl Op {
    /// fsync, fdatasync and sync: durability points.
    pub(crate) fn is_sync(&self) -> bool {
        matches!(self, Op::Fsync(_) | Op::Fdatasync(_) | Op::Sync)
    }
}

/// The bytes of a write: distinct for every (seed, offset), so a byte read
/// back names the write it came from and stale data cannot pass for it.
pub(crate) fn pattern(seed: u64, off: u64, len: u32) -> Vec<u8> {
    (0..len as u64)
        .map(|i| {
            let x = jbdfs::util::rng::mix(seed ^ (off + i).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            // Never zero, so a hole or a lost block cannot look written.
            (x as u8) | 1
        })
        .collect()
}

/// The whole tree after some prefix of a workload.
#[derive(Clone, Debug, Default)]
pub(crate) struct Model {
    pub nodes: BTreeMap<Id, Node>,
    /// Every path (not the root) and the node it names.
    pub names: BTreeMap<String, Id>,
    next: Id,
}

pub(crate) fn parent_of(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(p, _)| p)
}

impl Model {
    pub(crate) fn lookup(&self, path: &str) -> Option<&Node> {
        self.names.get(path).and_then(|id| self.nodes.get(id))
    }

    pub(crate) fn is_dir(&self, path: &str) -> bool {
        path.is_empty() || self.lookup(path).is_some_and(|n| n.kind == Kind::Dir)
    }

    pub(crate) fn is_file(&self, path: &str) -> bool {
        self.lookup(path).is_some_and(|n| n.kind == Kind::File)
    }

    pub(crate) fn children<'a>(&'a self, dir: &'a str) -> impl Iterator<Item = &'a String> + 'a {
        self.names.keys().filter(move |p| {
            p.as_str() != dir && parent_of(p) == dir && (!dir.is_empty() || !p.contains('/'))
        })
    }

    fn add(&mut self, path: &str, kind: Kind) {
        self.next += 1;
        let node = Node {
            kind,
            data: Vec::new(),
            xattrs: BTreeMap::new(),
        };
        self.nodes.insert(self.next, node);
        self.names.insert(path.to_string(), self.next);
    }

    fn drop_name(&mut self, path: &str) {
        if let Some(id) = self.names.remove(path) {
            if !self.names.values().any(|&i| i == id) {
                self.nodes.remove(&id);
            }
        }
    }

    fn node_mut(&mut self, path: &str) -> Result<&mut Node, String> {
        let id = *self
            .names
            .get(path)
            .ok_or_else(|| format!("{path}: no such file"))?;
        self.nodes
            .get_mut(&id)
            .ok_or_else(|| format!("{path}: dangling"))
    }

    /// Applies `op`; an operation the model refuses is a generator bug.
    pub(crate) fn apply(&mut self, op: &Op) -> Result<(), String> {
        match op {
            Op::Create(p) => self.add(p, Kind::File),
            Op::Mkdir(p) => self.add(p, Kind::Dir),
            Op::Symlink { path, target } => self.add(path, Kind::Symlink(target.clone())),
            Op::Write {
                path,
                off,
                len,
                seed,
            } => {
                let n = self.node_mut(path)?;
                let end = (*off + *len as u64) as usize;
                if n.data.len() < end {
                    n.data.resize(end, 0);
                }
                n.data[*off as usize..end].copy_from_slice(&pattern(*seed, *off, *len));
            }
            Op::Fallocate {
                path,
                off,
                len,
                keep_size,
            } => {
                let n = self.node_mut(path)?;
                let end = (off + len) as usize;
                if !keep_size && n.data.len() < end {
                    n.data.resize(end, 0);
                }
            }
            Op::PunchHole { path, off, len } => {
                let data = &mut self.node_mut(path)?.data;
                let end = (off + len).min(data.len() as u64) as usize;
                if (*off as usize) < end {
                    data[*off as usize..end].fill(0);
                }
            }
            Op::Truncate { path, size } => self.node_mut(path)?.data.resize(*size as usize, 0),
            Op::Link { from, to } => {
                let id = *self.names.get(from).ok_or("link of a missing file")?;
                self.names.insert(to.clone(), id);
            }
            Op::Unlink(p) | Op::Rmdir(p) => self.drop_name(p),
            Op::Rename { from, to } => self.rename(from, to)?,
            Op::SetXattr { path, name, value } => {
                self.node_mut(path)?
                    .xattrs
                    .insert(name.clone(), value.clone());
            }
            Op::RemoveXattr { path, name } => {
                self.node_mut(path)?.xattrs.remove(name);
            }
            Op::Fsync(_) | Op::Fdatasync(_) | Op::Sync => {}
        }
        Ok(())
    }

    fn rename(&mut self, from: &str, to: &str) -> Result<(), String> {
        let id = *self.names.get(from).ok_or("rename of a missing name")?;
        if self.names.get(to) == Some(&id) {
            // rename(2) between two links of one inode does nothing.
            return Ok(());
        }
        self.drop_name(to);
        let prefix = format!("{from}/");
        let moved: Vec<(String, Id)> = self
            .names
            .iter()
            .filter(|(p, _)| p.as_str() == from || p.starts_with(&prefix))
            .map(|(p, &i)| (p.clone(), i))
            .collect();
        for (p, i) in moved {
            self.names.remove(&p);
            self.names.insert(format!("{to}{}", &p[from.len()..]), i);
        }
        Ok(())
    }

    /// The tree as a checker sees it.
    pub(crate) fn view(&self) -> View {
        let mut view = View::default();
        let mut groups: BTreeMap<Id, &String> = BTreeMap::new();
        for (p, id) in &self.names {
            groups.entry(*id).or_insert(p);
        }
        for (p, id) in &self.names {
            let n = &self.nodes[id];
            let (kind, size, target, nlink) = match &n.kind {
                Kind::File => {
                    let links = self.names.values().filter(|&&i| i == *id).count();
                    ('f', n.data.len() as u64, Vec::new(), links as u32)
                }
                Kind::Dir => {
                    let subdirs = self.children(p).filter(|c| self.is_dir(c)).count();
                    ('d', 0, Vec::new(), 2 + subdirs as u32)
                }
                Kind::Symlink(t) => ('l', t.len() as u64, t.clone(), 1),
            };
            view.meta.insert(
                p.clone(),
                Meta {
                    kind,
                    size,
                    target,
                    nlink,
                    group: groups[id].clone(),
                    xattrs: n
                        .xattrs
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                },
            );
            view.ids.insert(p.clone(), *id);
        }
        view
    }
}

/// What a checker compares: per path, its metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Meta {
    /// 'f' file, 'd' directory, 'l' symlink.
    pub kind: char,
    /// File length or symlink length; 0 for directories (their size is the
    /// filesystem's business).
    pub size: u64,
    pub target: Vec<u8>,
    pub nlink: u32,
    /// The smallest path naming the same inode: hard links agree on it.
    pub group: String,
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct View {
    pub meta: BTreeMap<String, Meta>,
    /// Model views: the node each path names.
    pub ids: BTreeMap<String, Id>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rename_moves_subtrees_and_replaces_files() {
        let mut m = Model::default();
        for op in [
            Op::Mkdir("a".into()),
            Op::Create("a/f".into()),
            Op::Create("g".into()),
            Op::Link {
                from: "g".into(),
                to: "a/h".into(),
            },
            Op::Rename {
                from: "a".into(),
                to: "b".into(),
            },
            Op::Rename {
                from: "b/f".into(),
                to: "g".into(),
            },
        ] {
            m.apply(&op).unwrap();
        }
        let v = m.view();
        let names: Vec<&String> = v.meta.keys().collect();
        assert_eq!(names, ["b", "b/h", "g"]);
        assert_eq!(
            v.meta["b/h"].nlink, 1,
            "the link lost its partner to the rename"
        );
        assert_eq!(v.meta["b"].nlink, 2);
    }
}
