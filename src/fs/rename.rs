//! rename(2), with RENAME_NOREPLACE and RENAME_EXCHANGE (Linux:
//! ext3_rename). Cross-directory renames of directories take the
//! filesystem's rename lock first, as the VFS's s_vfs_rename_mutex does, so
//! that the ancestry check cannot race with another rename.

use super::inode::InodeState;
use super::namei::RenameFlags;
use super::{Filesystem, FsError, Result};
use crate::format::dirent as de;
use crate::format::InodeNo;
use crate::journal::Handle;

const RENAME_CREDITS: u32 = 48;
const ROOT: InodeNo = InodeNo(2);

fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// The parties of a rename, resolved under the directory locks.
struct Parties {
    src: InodeNo,
    src_type: u8,
    target: Option<(InodeNo, u8)>,
}

impl Filesystem {
    pub fn rename(
        &self,
        op: InodeNo,
        oname: &[u8],
        np: InodeNo,
        nname: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        if self.read_only {
            return Err(FsError::ReadOnly);
        }
        if is_dot(oname) || is_dot(nname) {
            return Err(FsError::Invalid("rename of . or .."));
        }
        if nname.len() > de::EXT2_NAME_LEN {
            return Err(FsError::NameTooLong);
        }
        if op == np && oname == nname {
            return if flags.noreplace {
                Err(FsError::Exists)
            } else {
                Ok(())
            };
        }
        let _topology = (op != np).then(|| self.rename_lock.lock());
        if op != np {
            let (src, _) = self.lookup(op, oname)?;
            if self.is_ancestor(src, np)? {
                return Err(FsError::Invalid("rename of a directory into itself"));
            }
        }
        self.rename_locked(op, oname, np, nname, flags)
    }

    /// Whether `dir` is `ancestor` or lies below it.
    fn is_ancestor(&self, ancestor: InodeNo, dir: InodeNo) -> Result<bool> {
        let mut cur = dir;
        let limit = self.sb.lock().s_inodes_count;
        for _ in 0..limit {
            if cur == ancestor {
                return Ok(true);
            }
            if cur == ROOT {
                return Ok(false);
            }
            let (parent, _) = self.lookup(cur, b"..")?;
            cur = parent;
        }
        Err(FsError::CorruptInode(
            dir,
            "directory loop in '..' entries".into(),
        ))
    }

    fn rename_locked(
        &self,
        op: InodeNo,
        oname: &[u8],
        np: InodeNo,
        nname: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        let odir = self.iget(op)?;
        let ndir = self.iget(np)?;
        // Directory locks in inode order; one lock when they are the same.
        let (mut first, mut second) = if op.0 <= np.0 {
            (odir.state.write(), (op != np).then(|| ndir.state.write()))
        } else {
            let n = ndir.state.write();
            (odir.state.write(), Some(n))
        };
        let (ost, nst): (&mut InodeState, &mut InodeState) = match second.as_mut() {
            Some(s) => (&mut first, s),
            None => return self.rename_same_dir(op, &mut first, oname, nname, flags),
        };
        let parties = self.resolve(op, ost, oname, np, nst, nname, flags)?;
        self.rename_apply(op, ost, oname, np, nst, nname, flags, parties)
    }

    #[allow(clippy::too_many_arguments)]
    fn resolve(
        &self,
        op: InodeNo,
        ost: &mut InodeState,
        oname: &[u8],
        np: InodeNo,
        nst: &mut InodeState,
        nname: &[u8],
        flags: RenameFlags,
    ) -> Result<Parties> {
        if !nst.disk.is_dir() || !ost.disk.is_dir() {
            return Err(FsError::NotDir);
        }
        let src = self.dir_lookup(op, ost, oname)?.ok_or(FsError::NotFound)?;
        let target = self.dir_lookup(np, nst, nname)?;
        if flags.noreplace && target.is_some() {
            return Err(FsError::Exists);
        }
        if flags.exchange && target.is_none() {
            return Err(FsError::NotFound);
        }
        if let Some(t) = target {
            if t.ino == op || t.ino == np {
                return Err(FsError::NotEmpty);
            }
        }
        if src.ino == op || src.ino == np {
            return Err(FsError::Invalid("rename of a directory into itself"));
        }
        Ok(Parties {
            src: src.ino,
            src_type: src.file_type,
            target: target.map(|t| (t.ino, t.file_type)),
        })
    }

    fn rename_same_dir(
        &self,
        dir: InodeNo,
        st: &mut InodeState,
        oname: &[u8],
        nname: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        let src = self.dir_lookup(dir, st, oname)?.ok_or(FsError::NotFound)?;
        let target = self.dir_lookup(dir, st, nname)?;
        if flags.noreplace && target.is_some() {
            return Err(FsError::Exists);
        }
        if flags.exchange && target.is_none() {
            return Err(FsError::NotFound);
        }
        if src.ino == dir || target.is_some_and(|t| t.ino == dir) {
            return Err(FsError::Invalid("rename of a directory's own entry"));
        }
        let mut h = self.journal.start(RENAME_CREDITS)?;
        let res = self.rename_same_dir_in(&mut h, dir, st, oname, nname, flags, src, target);
        self.finish_rename(h, res)
    }

    #[allow(clippy::too_many_arguments)]
    fn rename_same_dir_in(
        &self,
        h: &mut Handle<'_>,
        dir: InodeNo,
        st: &mut InodeState,
        oname: &[u8],
        nname: &[u8],
        flags: RenameFlags,
        src: super::dir::DirSlot,
        target: Option<super::dir::DirSlot>,
    ) -> Result<Option<InodeNo>> {
        let src_ref = self.iget(src.ino)?;
        let mut freed = None;
        match target {
            Some(t) if t.ino == src.ino && !flags.exchange => {
                // Two names of one inode: POSIX says do nothing.
                return Ok(None);
            }
            Some(t) if flags.exchange => {
                self.dir_retarget(h, dir, st, oname, t.ino, t.file_type)?;
                self.dir_retarget(h, dir, st, nname, src.ino, src.file_type)?;
            }
            Some(t) => {
                let tref = self.iget(t.ino)?;
                let mut tst = tref.state.write();
                self.check_replace(&src_ref.state.read().disk, t.ino, &mut tst)?;
                self.dir_retarget(h, dir, st, nname, src.ino, src.file_type)?;
                self.dir_remove(h, dir, st, oname)?;
                if self.drop_target_link(h, t.ino, &mut tst, st)? {
                    freed = Some(t.ino);
                }
            }
            None => {
                self.dir_add(h, dir, st, nname, src.ino, src.file_type)?;
                self.dir_remove(h, dir, st, oname)?;
            }
        }
        self.touch_renamed(h, src.ino)?;
        if let Some(t) = target.filter(|_| flags.exchange) {
            self.touch_renamed(h, t.ino)?;
        }
        let t = crate::util::now();
        st.disk.i_mtime = crate::format::inode::Timestamp {
            sec: t.0,
            nsec: t.1,
        };
        st.disk.i_ctime = st.disk.i_mtime;
        self.write_inode(h, dir, &st.disk)?;
        Ok(freed)
    }

    /// Ends the rename's handle, then frees a replaced target nobody holds.
    fn finish_rename(&self, h: Handle<'_>, res: Result<Option<InodeNo>>) -> Result<()> {
        let stop = h.stop();
        let freed = res?;
        stop?;
        if let Some(ino) = freed {
            self.release_inode_if_unused(&self.iget(ino)?)?;
        }
        Ok(())
    }

    /// Checks that `target` may be replaced by `src`.
    fn check_replace(
        &self,
        src: &crate::format::inode::Inode,
        tino: InodeNo,
        tst: &mut InodeState,
    ) -> Result<()> {
        match (src.is_dir(), tst.disk.is_dir()) {
            (true, false) => Err(FsError::NotDir),
            (false, true) => Err(FsError::IsDir),
            (true, true) if !self.dir_is_empty(tino, tst)? => Err(FsError::NotEmpty),
            _ => Ok(()),
        }
    }

    /// Drops the replaced target's link; returns whether it is now unlinked.
    fn drop_target_link(
        &self,
        h: &mut Handle<'_>,
        tino: InodeNo,
        tst: &mut InodeState,
        dir: &mut InodeState,
    ) -> Result<bool> {
        let now = crate::util::now();
        tst.disk.i_ctime = crate::format::inode::Timestamp {
            sec: now.0,
            nsec: now.1,
        };
        if tst.disk.is_dir() {
            tst.disk.i_links_count = 0;
            dir.disk.i_links_count = dir.disk.i_links_count.saturating_sub(1);
        } else {
            tst.disk.i_links_count = tst.disk.i_links_count.saturating_sub(1);
        }
        let gone = tst.disk.i_links_count == 0;
        if gone {
            self.orphan_add(h, tino, tst)?;
        }
        self.write_inode(h, tino, &tst.disk)?;
        Ok(gone)
    }

    fn touch_renamed(&self, h: &mut Handle<'_>, ino: InodeNo) -> Result<()> {
        let r = self.iget(ino)?;
        let mut st = r.state.write();
        let now = crate::util::now();
        st.disk.i_ctime = crate::format::inode::Timestamp {
            sec: now.0,
            nsec: now.1,
        };
        self.write_inode(h, ino, &st.disk)
    }

    #[allow(clippy::too_many_arguments)]
    fn rename_apply(
        &self,
        op: InodeNo,
        ost: &mut InodeState,
        oname: &[u8],
        np: InodeNo,
        nst: &mut InodeState,
        nname: &[u8],
        flags: RenameFlags,
        p: Parties,
    ) -> Result<()> {
        let mut h = self.journal.start(RENAME_CREDITS)?;
        let res = self.rename_apply_in(&mut h, op, ost, oname, np, nst, nname, flags, &p);
        self.finish_rename(h, res)
    }

    #[allow(clippy::too_many_arguments)]
    fn rename_apply_in(
        &self,
        h: &mut Handle<'_>,
        op: InodeNo,
        ost: &mut InodeState,
        oname: &[u8],
        np: InodeNo,
        nst: &mut InodeState,
        nname: &[u8],
        flags: RenameFlags,
        p: &Parties,
    ) -> Result<Option<InodeNo>> {
        let src_ref = self.iget(p.src)?;
        let tref = match p.target {
            Some((t, _)) => Some(self.iget(t)?),
            None => None,
        };
        if p.target.is_some_and(|(t, _)| t == p.src) && !flags.exchange {
            return Ok(None);
        }
        // Child locks in inode order.
        let (mut sst, mut tst) = match &tref {
            Some(t) if t.ino.0 < p.src.0 => {
                let tg = t.state.write();
                (src_ref.state.write(), Some(tg))
            }
            Some(t) => (src_ref.state.write(), Some(t.state.write())),
            None => (src_ref.state.write(), None),
        };
        let mut freed = None;
        let src_is_dir = sst.disk.is_dir();
        if flags.exchange {
            let (tino, ttype) = p.target.ok_or(FsError::NotFound)?;
            let tst = tst.as_mut().ok_or(FsError::NotFound)?;
            self.dir_retarget(h, op, ost, oname, tino, ttype)?;
            self.dir_retarget(h, np, nst, nname, p.src, p.src_type)?;
            let tgt_is_dir = tst.disk.is_dir();
            if src_is_dir {
                self.dir_retarget(h, p.src, &mut sst, b"..", np, de::EXT2_FT_DIR)?;
            }
            if tgt_is_dir {
                self.dir_retarget(h, tino, tst, b"..", op, de::EXT2_FT_DIR)?;
            }
            match (src_is_dir, tgt_is_dir) {
                (true, false) => {
                    ost.disk.i_links_count -= 1;
                    nst.disk.i_links_count += 1;
                }
                (false, true) => {
                    nst.disk.i_links_count -= 1;
                    ost.disk.i_links_count += 1;
                }
                _ => {}
            }
            self.write_inode(h, tino, &tst.disk)?;
        } else {
            if let (Some((tino, _)), Some(tst)) = (p.target, tst.as_mut()) {
                self.check_replace(&sst.disk, tino, tst)?;
                self.dir_retarget(h, np, nst, nname, p.src, p.src_type)?;
                if self.drop_target_link(h, tino, tst, nst)? {
                    freed = Some(tino);
                }
            } else {
                if src_is_dir && nst.disk.i_links_count >= super::namei::EXT3_LINK_MAX {
                    return Err(FsError::TooManyLinks);
                }
                self.dir_add(h, np, nst, nname, p.src, p.src_type)?;
            }
            self.dir_remove(h, op, ost, oname)?;
            if src_is_dir {
                self.dir_retarget(h, p.src, &mut sst, b"..", np, de::EXT2_FT_DIR)?;
                ost.disk.i_links_count = ost.disk.i_links_count.saturating_sub(1);
                nst.disk.i_links_count += 1;
            }
        }
        let now = crate::util::now();
        let t = crate::format::inode::Timestamp {
            sec: now.0,
            nsec: now.1,
        };
        sst.disk.i_ctime = t;
        for st in [&mut *ost, &mut *nst] {
            st.disk.i_mtime = t;
            st.disk.i_ctime = t;
        }
        self.write_inode(h, p.src, &sst.disk)?;
        self.write_inode(h, op, &ost.disk)?;
        self.write_inode(h, np, &nst.disk)?;
        Ok(freed)
    }
}
