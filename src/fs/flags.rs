//! Inode flags (chattr/lsattr): FS_IOC_GETFLAGS/SETFLAGS and
//! FS_IOC_GETVERSION/SETVERSION (Linux: fs/ext3/ioctl.c, with the checks
//! today's fs/ext4/ioctl.c and the VFS's fileattr code make), and the
//! checks through which every other operation honours the immutable and
//! append-only flags.
//!
//! Over FUSE the kernel never learns an inode's flags (`struct fuse_attr`
//! has no S_IMMUTABLE or S_APPEND), so the VFS checks that honour them on
//! a kernel filesystem (may_open, may_delete, may_create, vfs_link,
//! notify_change, xattr_permission, vfs_fallocate) never fire: jbdfs makes
//! them here, for every caller, root included, with the kernel's errno
//! (EPERM). The sync (`S`) and dirsync (`D`) flags make the operations on
//! the inode synchronous handles; noatime (`A`) is kept and shown.

use super::namei::SetAttr;
use super::now;
use super::{Filesystem, FsError, Result};
use crate::format::inode::flags::*;
use crate::format::inode::Inode;
use crate::format::InodeNo;

/// Capabilities (include/uapi/linux/capability.h) the flag ioctls consult.
pub const CAP_FOWNER: u32 = 3;
pub const CAP_LINUX_IMMUTABLE: u32 = 9;
pub const CAP_SYS_RESOURCE: u32 = 24;

/// Credits for a flag or version change: the inode.
const FLAGS_CREDITS: u32 = 2;

/// Who asks to change an inode's flags or version: the fsuid and the
/// effective capability set (the FUSE adapter reads it from
/// /proc/PID/status, CapEff).
#[derive(Clone, Copy, Debug, Default)]
pub struct FlagsCaller {
    pub uid: u32,
    /// Bit N set: capability N is effective.
    pub cap_effective: u64,
}

impl FlagsCaller {
    pub fn capable(&self, cap: u32) -> bool {
        cap < 64 && self.cap_effective & (1u64 << cap) != 0
    }

    /// inode_owner_or_capable: the owner, or a caller with CAP_FOWNER.
    fn owner_or_capable(&self, inode: &Inode) -> bool {
        self.uid == inode.i_uid || self.capable(CAP_FOWNER)
    }
}

/// IS_IMMUTABLE.
pub fn is_immutable(inode: &Inode) -> bool {
    inode.i_flags & EXT2_IMMUTABLE_FL != 0
}

/// IS_APPEND.
pub fn is_append(inode: &Inode) -> bool {
    inode.i_flags & EXT2_APPEND_FL != 0
}

/// IS_SYNC for an inode: writes to it, and changes of it, commit before
/// they return.
pub fn is_sync(inode: &Inode) -> bool {
    inode.i_flags & EXT2_SYNC_FL != 0
}

/// IS_DIRSYNC for a directory's own flags (the mount's dirsync and sync
/// options are the caller's to add): changes to its entries commit before
/// they return.
pub fn is_dirsync(dir: &Inode) -> bool {
    dir.i_flags & (EXT2_SYNC_FL | EXT2_DIRSYNC_FL) != 0
}

/// The flags a new inode of `mode` takes from its directory, as
/// ext3_new_inode gives them.
pub fn inherited(dir: &Inode, mode: u16) -> u32 {
    ext3_mask_flags(mode, dir.i_flags & EXT3_FL_INHERITED)
}

/// Changing the inode's data (write, truncate, fallocate): not while it
/// is immutable.
pub(crate) fn may_write(inode: &Inode) -> Result<()> {
    if is_immutable(inode) {
        return Err(FsError::NotPermitted);
    }
    Ok(())
}

/// Punching a hole (vfs_fallocate: any mode beyond KEEP_SIZE): not on an
/// immutable or append-only inode, since it changes data already written.
pub(crate) fn may_punch(inode: &Inode) -> Result<()> {
    may_change_xattrs(inode)
}

/// setxattr and removexattr (xattr_permission): not on an immutable or
/// append-only inode.
pub(crate) fn may_change_xattrs(inode: &Inode) -> Result<()> {
    if is_immutable(inode) || is_append(inode) {
        return Err(FsError::NotPermitted);
    }
    Ok(())
}

/// A new name in `dir` (create, mkdir, mknod, symlink, link, the target
/// of a rename): not in an immutable directory (the VFS's may_create asks
/// for write permission on it, which an immutable inode refuses).
pub(crate) fn may_create_in(dir: &Inode) -> Result<()> {
    if is_immutable(dir) {
        return Err(FsError::NotPermitted);
    }
    Ok(())
}

/// Removing `victim`'s name from `dir` (unlink, rmdir, either side of a
/// rename, a replaced rename target), as the VFS's may_delete: not from an
/// immutable or append-only directory, and not an immutable or
/// append-only inode.
pub(crate) fn may_delete(dir: &Inode, victim: &Inode) -> Result<()> {
    if is_immutable(dir) || is_append(dir) || is_immutable(victim) || is_append(victim) {
        return Err(FsError::NotPermitted);
    }
    Ok(())
}

/// A new link to `inode` (vfs_link): not to an immutable or append-only
/// inode.
pub(crate) fn may_link(inode: &Inode) -> Result<()> {
    if is_immutable(inode) || is_append(inode) {
        return Err(FsError::NotPermitted);
    }
    Ok(())
}

/// setattr (ext4_setattr and notify_change): nothing on an immutable
/// inode; on an append-only one, no size, mode or owner change and no
/// explicitly given time (the current time, `touch`, is allowed).
pub(crate) fn may_setattr(inode: &Inode, a: &SetAttr) -> Result<()> {
    if is_immutable(inode) {
        return Err(FsError::NotPermitted);
    }
    let changes_attrs = a.size.is_some() || a.mode.is_some() || a.uid.is_some() || a.gid.is_some();
    if is_append(inode) && (changes_attrs || a.times_set) {
        return Err(FsError::NotPermitted);
    }
    Ok(())
}

/// What an open of an inode needs from its flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenAs {
    /// The inode is synchronous (`S`): its writes must reach the
    /// filesystem, and commit, before write(2) returns.
    pub sync: bool,
}

impl Filesystem {
    /// The inode's flags as FS_IOC_GETFLAGS shows them.
    pub fn get_flags(&self, ino: InodeNo) -> Result<u32> {
        let inode = self.iget(ino)?;
        let flags = inode.state.read().disk.i_flags;
        Ok(flags & EXT3_FL_USER_VISIBLE)
    }

    /// FS_IOC_SETFLAGS: sets the user-modifiable flags to `requested`,
    /// keeping the others.
    ///
    /// As ext3 and today's ext4: only the owner or a caller with
    /// CAP_FOWNER (EPERM); setting or clearing `i` or `a` needs
    /// CAP_LINUX_IMMUTABLE (EPERM); flags outside the visible set, or
    /// meant for another kind of inode (`D` or `T` on a file), are
    /// EOPNOTSUPP; an inode that stays immutable may change no other flag
    /// (EPERM). Data journaling per file (`j`) is refused (EOPNOTSUPP):
    /// jbdfs journals data per mount (`data=journal`).
    pub fn set_flags(&self, ino: InodeNo, requested: u32, who: &FlagsCaller) -> Result<()> {
        if self.is_read_only() {
            return Err(FsError::ReadOnly);
        }
        let inode = self.iget(ino)?;
        let mut st = inode.state.write();
        if !who.owner_or_capable(&st.disk) {
            return Err(FsError::NotPermitted);
        }
        let old = st.disk.i_flags;
        if requested & !EXT3_FL_USER_VISIBLE != 0 {
            return Err(FsError::NotSupported);
        }
        let wanted = requested & EXT3_FL_USER_MODIFIABLE;
        if ext3_mask_flags(st.disk.i_mode, wanted) != wanted {
            return Err(FsError::NotSupported);
        }
        if (wanted ^ old) & (EXT2_APPEND_FL | EXT2_IMMUTABLE_FL) != 0
            && !who.capable(CAP_LINUX_IMMUTABLE)
        {
            return Err(FsError::NotPermitted);
        }
        if (requested ^ old) & EXT3_JOURNAL_DATA_FL != 0 {
            if !who.capable(CAP_SYS_RESOURCE) {
                return Err(FsError::NotPermitted);
            }
            return Err(FsError::NotSupported);
        }
        let new = wanted | (old & !EXT3_FL_USER_MODIFIABLE);
        let kept = EXT3_FL_USER_MODIFIABLE & !EXT2_IMMUTABLE_FL;
        if old & new & EXT2_IMMUTABLE_FL != 0 && (old ^ new) & kept != 0 {
            return Err(FsError::NotPermitted);
        }
        self.change_inode(ino, &mut st, |d| d.i_flags = new)
    }

    /// FS_IOC_GETVERSION: the inode's generation.
    pub fn get_version(&self, ino: InodeNo) -> Result<u32> {
        Ok(self.iget(ino)?.state.read().disk.i_generation)
    }

    /// FS_IOC_SETVERSION: sets the generation; the owner or a caller with
    /// CAP_FOWNER only (EPERM).
    pub fn set_version(&self, ino: InodeNo, generation: u32, who: &FlagsCaller) -> Result<()> {
        if self.is_read_only() {
            return Err(FsError::ReadOnly);
        }
        let inode = self.iget(ino)?;
        let mut st = inode.state.write();
        if !who.owner_or_capable(&st.disk) {
            return Err(FsError::NotPermitted);
        }
        self.change_inode(ino, &mut st, |d| d.i_generation = generation)
    }

    /// Applies `change` and a new ctime to the inode in a handle of its
    /// own, synchronous for a sync inode (chattr +S).
    fn change_inode(
        &self,
        ino: InodeNo,
        st: &mut super::inode::InodeState,
        change: impl FnOnce(&mut Inode),
    ) -> Result<()> {
        let mut h = self.journal.start(FLAGS_CREDITS)?;
        if is_sync(&st.disk) {
            h.set_sync();
        }
        change(&mut st.disk);
        st.disk.i_ctime = now();
        let res = self.write_inode(&mut h, ino, &st.disk);
        let stop = h.stop();
        res?;
        stop?;
        Ok(())
    }

    /// The flag checks of open(2) with `open_flags` (the VFS's
    /// inode_permission and may_open): no writing open of an immutable
    /// inode, and a writing open of an append-only one must append and
    /// must not truncate. EPERM otherwise.
    pub fn may_open(&self, ino: InodeNo, open_flags: i32) -> Result<OpenAs> {
        let inode = self.iget(ino)?;
        let st = inode.state.read();
        let writes = open_flags & libc::O_ACCMODE != libc::O_RDONLY;
        let truncates = open_flags & libc::O_TRUNC != 0;
        if (writes || truncates) && is_immutable(&st.disk) {
            return Err(FsError::NotPermitted);
        }
        if is_append(&st.disk) && ((writes && open_flags & libc::O_APPEND == 0) || truncates) {
            return Err(FsError::NotPermitted);
        }
        Ok(OpenAs {
            sync: is_sync(&st.disk),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::inode::{S_IFDIR, S_IFLNK, S_IFREG};

    fn inode(mode: u16, flags: u32) -> Inode {
        let mut i = Inode::new(128, 0);
        i.i_mode = mode;
        i.i_flags = flags;
        i
    }

    #[test]
    fn masks_are_ext3s() {
        assert_eq!(EXT3_FL_USER_VISIBLE, 0x0003_DFFF);
        assert_eq!(EXT3_FL_USER_MODIFIABLE, 0x0003_80FF);
        assert_eq!(EXT3_FL_USER_MODIFIABLE & EXT3_JOURNAL_DATA_FL, 0);
        assert_eq!(EXT3_FL_USER_VISIBLE & EXT2_INDEX_FL, EXT2_INDEX_FL);
        assert_eq!(EXT3_FL_USER_MODIFIABLE & EXT2_INDEX_FL, 0);
    }

    #[test]
    fn new_inodes_inherit_as_ext3_new_inode() {
        let dir = inode(
            S_IFDIR | 0o755,
            EXT2_SYNC_FL
                | EXT2_DIRSYNC_FL
                | EXT2_NOATIME_FL
                | EXT2_IMMUTABLE_FL
                | EXT2_APPEND_FL
                | EXT2_INDEX_FL
                | EXT2_TOPDIR_FL,
        );
        assert_eq!(
            inherited(&dir, S_IFDIR | 0o755),
            EXT2_SYNC_FL | EXT2_DIRSYNC_FL | EXT2_NOATIME_FL
        );
        assert_eq!(
            inherited(&dir, S_IFREG | 0o644),
            EXT2_SYNC_FL | EXT2_NOATIME_FL
        );
        assert_eq!(inherited(&dir, S_IFLNK | 0o777), EXT2_NOATIME_FL);
    }

    #[test]
    fn immutable_and_append_refuse_as_the_vfs() {
        let plain = inode(S_IFREG | 0o644, 0);
        let imm = inode(S_IFREG | 0o644, EXT2_IMMUTABLE_FL);
        let app = inode(S_IFREG | 0o644, EXT2_APPEND_FL);
        let dir = inode(S_IFDIR | 0o755, 0);
        let imm_dir = inode(S_IFDIR | 0o755, EXT2_IMMUTABLE_FL);
        let app_dir = inode(S_IFDIR | 0o755, EXT2_APPEND_FL);
        let eperm = |r: Result<()>| matches!(r, Err(FsError::NotPermitted));

        assert!(may_write(&plain).is_ok() && may_write(&app).is_ok() && eperm(may_write(&imm)));
        assert!(eperm(may_change_xattrs(&imm)) && eperm(may_change_xattrs(&app)));
        assert!(may_create_in(&app_dir).is_ok() && eperm(may_create_in(&imm_dir)));
        assert!(may_delete(&dir, &plain).is_ok());
        for (d, v) in [
            (&imm_dir, &plain),
            (&app_dir, &plain),
            (&dir, &imm),
            (&dir, &app),
        ] {
            assert!(eperm(may_delete(d, v)));
        }
        assert!(eperm(may_link(&imm)) && eperm(may_link(&app)) && may_link(&plain).is_ok());

        let touch = SetAttr {
            atime: Some(crate::format::inode::Timestamp::default()),
            mtime: Some(crate::format::inode::Timestamp::default()),
            ..Default::default()
        };
        let utimes = SetAttr {
            times_set: true,
            ..touch
        };
        let chmod = SetAttr {
            mode: Some(0o600),
            ..Default::default()
        };
        let truncate = SetAttr {
            size: Some(0),
            ..Default::default()
        };
        assert!(may_setattr(&app, &touch).is_ok());
        for a in [&utimes, &chmod, &truncate] {
            assert!(eperm(may_setattr(&app, a)));
            assert!(may_setattr(&plain, a).is_ok());
        }
        assert!(eperm(may_setattr(&imm, &touch)));
        assert!(eperm(may_setattr(&imm, &SetAttr::default())));
    }

    #[test]
    fn capabilities_are_bits_of_cap_eff() {
        let root = FlagsCaller {
            uid: 0,
            cap_effective: 0x0000_01ff_ffff_ffff,
        };
        assert!(root.capable(CAP_LINUX_IMMUTABLE) && root.capable(CAP_FOWNER));
        let no_imm = FlagsCaller {
            uid: 0,
            cap_effective: 0x0000_01ff_ffff_ffff & !(1 << CAP_LINUX_IMMUTABLE),
        };
        assert!(!no_imm.capable(CAP_LINUX_IMMUTABLE) && no_imm.capable(CAP_FOWNER));
        assert!(!FlagsCaller::default().capable(CAP_FOWNER));
        assert!(!root.capable(64));
    }
}
