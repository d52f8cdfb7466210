//! rename(2), with RENAME_NOREPLACE and RENAME_EXCHANGE (Linux:
//! ext3_rename). Cross-directory renames of directories take the
//! filesystem's rename lock first, as the VFS's s_vfs_rename_mutex does, so
//! that the ancestry check cannot race with another rename.

use parking_lot::RwLockWriteGuard;

use super::dir::DirSlot;
use super::inode::{InodeRef, InodeState};
use super::namei::RenameFlags;
use super::{Filesystem, FsError, Result};
use crate::format::dirent as de;
use crate::format::inode::Inode;
use crate::format::InodeNo;
use crate::journal::Handle;

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
        if self.is_read_only() {
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
        Err(FsError::corrupt(
            crate::format::Location::Inode(dir),
            "directory",
            "'..' entry",
            cur.0,
            "the chain of '..' entries from this directory loops",
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
        check_flags(flags, target.is_some())?;
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
        check_flags(flags, target.is_some())?;
        if src.ino == dir || target.is_some_and(|t| t.ino == dir) {
            return Err(FsError::Invalid("rename of a directory's own entry"));
        }
        if target.is_some_and(|t| t.ino == src.ino) {
            // Two names of one inode: POSIX says do nothing.
            return Ok(());
        }
        // Every inode lock is taken before the handle starts (lib.rs).
        let src_ref = self.iget(src.ino)?;
        let tref = target.map(|t| self.iget(t.ino)).transpose()?;
        let (mut sst, mut tst) = lock_pair(&src_ref, tref.as_deref());
        check_rename_flags(&st.disk, &sst, &st.disk, tst.as_deref())?;
        let mut h = self.start_dirop(&st.disk)?;
        let res = self.rename_same_dir_in(
            &mut h,
            dir,
            st,
            (oname, nname),
            flags,
            (src, &mut sst),
            target.zip(tst.as_deref_mut()),
        );
        drop((sst, tst));
        self.finish_rename(h, res)
    }

    #[allow(clippy::too_many_arguments)]
    fn rename_same_dir_in(
        &self,
        h: &mut Handle<'_>,
        dir: InodeNo,
        st: &mut InodeState,
        (oname, nname): (&[u8], &[u8]),
        flags: RenameFlags,
        (src, sst): (DirSlot, &mut InodeState),
        target: Option<(DirSlot, &mut InodeState)>,
    ) -> Result<Option<InodeNo>> {
        let mut freed = None;
        let now = super::now();
        match target {
            Some((t, tst)) if flags.exchange => {
                self.dir_retarget(h, dir, st, oname, t.ino, t.file_type)?;
                self.dir_retarget(h, dir, st, nname, src.ino, src.file_type)?;
                tst.disk.i_ctime = now;
                self.write_inode(h, t.ino, &tst.disk)?;
            }
            Some((t, tst)) => {
                self.check_replace(&sst.disk, t.ino, tst)?;
                self.dir_retarget(h, dir, st, nname, src.ino, src.file_type)?;
                self.vacate(h, dir, st, oname, flags)?;
                if self.drop_target_link(h, t.ino, tst, st)? {
                    freed = Some(t.ino);
                }
            }
            None => {
                self.dir_add(h, dir, st, nname, src.ino, src.file_type)?;
                self.vacate(h, dir, st, oname, flags)?;
            }
        }
        sst.disk.i_ctime = now;
        self.write_inode(h, src.ino, &sst.disk)?;
        st.disk.i_mtime = now;
        st.disk.i_ctime = now;
        self.write_inode(h, dir, &st.disk)?;
        Ok(freed)
    }

    /// The source's name goes, or with RENAME_WHITEOUT is pointed at a new
    /// whiteout inode in the same transaction (ext4_whiteout_for_rename):
    /// a character device 0:0 with no permission bits.
    fn vacate(
        &self,
        h: &mut Handle<'_>,
        dir: InodeNo,
        dst: &mut InodeState,
        name: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        let Some(who) = flags.whiteout else {
            return self.dir_remove(h, dir, dst, name).map(|_| ());
        };
        let mode = crate::format::inode::S_IFCHR;
        let (wino, mut wst) = self.new_inode(h, dir, mode, who, &dst.disk)?;
        wst.disk.set_rdev(0, 0);
        self.write_inode(h, wino, &wst.disk)?;
        let ft = self.dirent_type(mode);
        self.dir_retarget(h, dir, dst, name, wino, ft)?;
        self.iget_new(wino, wst.disk);
        Ok(())
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
            self.dir_link_dec(&mut dir.disk);
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
        if p.target.is_some_and(|(t, _)| t == p.src) {
            return Ok(());
        }
        let src_ref = self.iget(p.src)?;
        let tref = p.target.map(|(t, _)| self.iget(t)).transpose()?;
        let (mut sst, mut tst) = lock_pair(&src_ref, tref.as_deref());
        check_rename_flags(&ost.disk, &sst, &nst.disk, tst.as_deref())?;
        let mut h = self.start_dirop(&nst.disk)?;
        if super::flags::is_dirsync(&ost.disk) {
            h.set_sync();
        }
        let dirs = ((op, ost, oname), (np, nst, nname));
        let res = self.rename_apply_in(&mut h, dirs, flags, &p, &mut sst, tst.as_deref_mut());
        drop((sst, tst));
        self.finish_rename(h, res)
    }

    #[allow(clippy::type_complexity)]
    fn rename_apply_in(
        &self,
        h: &mut Handle<'_>,
        ((op, ost, oname), (np, nst, nname)): (
            (InodeNo, &mut InodeState, &[u8]),
            (InodeNo, &mut InodeState, &[u8]),
        ),
        flags: RenameFlags,
        p: &Parties,
        sst: &mut InodeState,
        mut tst: Option<&mut InodeState>,
    ) -> Result<Option<InodeNo>> {
        let mut freed = None;
        let src_is_dir = sst.disk.is_dir();
        if flags.exchange {
            let (tino, ttype) = p.target.ok_or(FsError::NotFound)?;
            let tst = tst.as_deref_mut().ok_or(FsError::NotFound)?;
            self.dir_retarget(h, op, ost, oname, tino, ttype)?;
            self.dir_retarget(h, np, nst, nname, p.src, p.src_type)?;
            let tgt_is_dir = tst.disk.is_dir();
            if src_is_dir {
                self.dir_retarget(h, p.src, sst, b"..", np, de::EXT2_FT_DIR)?;
            }
            if tgt_is_dir {
                self.dir_retarget(h, tino, tst, b"..", op, de::EXT2_FT_DIR)?;
            }
            match (src_is_dir, tgt_is_dir) {
                (true, false) => {
                    self.dir_link_dec(&mut ost.disk);
                    self.dir_link_inc(&mut nst.disk);
                }
                (false, true) => {
                    self.dir_link_dec(&mut nst.disk);
                    self.dir_link_inc(&mut ost.disk);
                }
                _ => {}
            }
            self.write_inode(h, tino, &tst.disk)?;
        } else {
            if let (Some((tino, _)), Some(tst)) = (p.target, tst) {
                self.check_replace(&sst.disk, tino, tst)?;
                self.dir_retarget(h, np, nst, nname, p.src, p.src_type)?;
                if self.drop_target_link(h, tino, tst, nst)? {
                    freed = Some(tino);
                }
            } else {
                if src_is_dir && self.dir_links_full(&nst.disk) {
                    return Err(FsError::TooManyLinks);
                }
                self.dir_add(h, np, nst, nname, p.src, p.src_type)?;
            }
            self.vacate(h, op, ost, oname, flags)?;
            if src_is_dir {
                self.dir_retarget(h, p.src, sst, b"..", np, de::EXT2_FT_DIR)?;
                self.dir_link_dec(&mut ost.disk);
                self.dir_link_inc(&mut nst.disk);
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

/// The immutable and append-only flags of a rename's parties, as the
/// VFS's vfs_rename checks them: the source's name is deleted from its
/// directory, and the target's, if there is one, from its; with no target,
/// a name is created in the new directory.
fn check_rename_flags(
    odir: &Inode,
    src: &InodeState,
    ndir: &Inode,
    target: Option<&InodeState>,
) -> Result<()> {
    super::flags::may_delete(odir, &src.disk)?;
    match target {
        Some(t) => super::flags::may_delete(ndir, &t.disk),
        None => super::flags::may_create_in(ndir),
    }
}

/// RENAME_NOREPLACE needs no target, RENAME_EXCHANGE needs one and no
/// whiteout.
fn check_flags(flags: RenameFlags, target_exists: bool) -> Result<()> {
    if flags.exchange && flags.whiteout.is_some() {
        return Err(FsError::Invalid("RENAME_EXCHANGE with RENAME_WHITEOUT"));
    }
    if flags.noreplace && target_exists {
        return Err(FsError::Exists);
    }
    if flags.exchange && !target_exists {
        return Err(FsError::NotFound);
    }
    Ok(())
}

/// Write-locks two distinct inodes in ascending inode order (lib.rs).
fn lock_pair<'a>(
    a: &'a InodeRef,
    b: Option<&'a InodeRef>,
) -> (
    RwLockWriteGuard<'a, InodeState>,
    Option<RwLockWriteGuard<'a, InodeState>>,
) {
    match b {
        Some(b) if b.ino == a.ino => (a.state.write(), None),
        Some(b) if b.ino.0 < a.ino.0 => {
            let bg = b.state.write();
            (a.state.write(), Some(bg))
        }
        Some(b) => {
            let ag = a.state.write();
            (ag, Some(b.state.write()))
        }
        None => (a.state.write(), None),
    }
}
