//! POSIX ACLs (Linux: fs/ext3/acl.c and fs/posix_acl.c): the two ACL
//! xattrs kept in ext3's on-disk format and in step with the mode.
//!
//! The names `system.posix_acl_access` and `system.posix_acl_default`
//! speak the xattr format (version 2) to callers and are stored in ext3's
//! (version 1, name index 2 and 3), converted by [`crate::format::acl`].
//! What ext3 and the VFS do around them is done here, because through
//! FUSE the kernel leaves it to the filesystem (fs/fuse/acl.c: "Fuse
//! userspace is responsible for updating access permissions in the
//! inode"): setting an access ACL sets the mode (`posix_acl_update_mode`)
//! and stores no xattr when the mode says it all; chmod rewrites the
//! access ACL (`posix_acl_chmod`); a new inode takes its parent's default
//! ACL, masked by the create mode, instead of the umask
//! (`posix_acl_create`). The kernel checks permissions against the ACLs
//! it reads back (FUSE_POSIX_ACL implies default_permissions).
//!
//! With `noacl` (or a superblock without the `acl` default mount option)
//! the names answer EOPNOTSUPP, as ext3's do, and the umask always applies.

use super::inode::InodeState;
use super::xattr::SetMode;
use super::{Filesystem, FsError, Result};
use crate::format::acl::{Acl, AclType};
use crate::format::inode::Inode;
use crate::format::xattr::Xattr;
use crate::format::InodeNo;
use crate::journal::Handle;

/// `EXT3_DEFM_ACL` in `s_default_mount_opts`: mount with ACLs unless told
/// `noacl`.
pub const EXT3_DEFM_ACL: u32 = 0x0004;

/// Whether the one setting an access ACL keeps the file's setgid bit,
/// given the file's group: true when the setter is in that group or holds
/// CAP_FSETID (`posix_acl_update_mode`).
pub type KeepSgid<'a> = &'a dyn Fn(u32) -> bool;

fn bad_acl(_: crate::format::FormatError) -> FsError {
    FsError::Invalid("bad ACL")
}

fn acl_xattr(kind: AclType, acl: &Acl) -> Xattr {
    Xattr {
        name_index: kind.name_index(),
        name: Vec::new(),
        value: acl.to_disk(),
    }
}

impl Filesystem {
    /// Whether POSIX ACLs are on for this mount (`acl`/`noacl`, else the
    /// superblock's default mount options).
    pub fn posix_acl(&self) -> bool {
        self.posix_acl
    }

    /// An inode's ACL of `kind` as stored, `None` when it has none. A
    /// stored value that does not parse is EINVAL, as ext4_acl_from_disk
    /// answers.
    pub(super) fn read_acl(
        &self,
        ino: InodeNo,
        st: &InodeState,
        kind: AclType,
    ) -> Result<Option<Acl>> {
        // Most inodes have no xattrs at all: no need to parse anything.
        if st.disk.i_file_acl == 0 && !has_ibody_xattrs(&st.disk) {
            return Ok(None);
        }
        let (a, b) = self.xattr_lists(ino, st)?;
        let Some(x) = a
            .into_iter()
            .chain(b)
            .find(|x| x.name_index == kind.name_index() && x.name.is_empty())
        else {
            return Ok(None);
        };
        Acl::from_disk(&x.value).map_err(|e| {
            tracing::warn!(inode = ino.0, "unreadable ACL: {e}");
            bad_acl(e)
        })
    }

    /// getxattr of an ACL name: the ACL in the xattr format.
    pub fn get_acl(&self, ino: InodeNo, kind: AclType) -> Result<Vec<u8>> {
        if !self.posix_acl {
            return Err(FsError::NotSupported);
        }
        let inode = self.iget(ino)?;
        let st = inode.state.read();
        match self.read_acl(ino, &st, kind)? {
            Some(acl) => Ok(acl.to_xattr()),
            None => Err(FsError::NoData),
        }
    }

    /// setxattr (`value` given) or removexattr (`None`) of an ACL name, as
    /// ext3_set_acl: the value must be a valid ACL in the xattr format; an
    /// access ACL sets the mode and is stored only when the mode cannot
    /// say it all; a default ACL is for directories only. Removing an ACL
    /// that is not there succeeds, as in ext3.
    pub fn set_acl(
        &self,
        ino: InodeNo,
        kind: AclType,
        value: Option<&[u8]>,
        mode: SetMode,
        keep_sgid: KeepSgid<'_>,
    ) -> Result<()> {
        if !self.posix_acl {
            return Err(FsError::NotSupported);
        }
        let acl = match value {
            Some(v) => Acl::from_xattr(v).map_err(bad_acl)?,
            None => None,
        };
        if let Some(a) = &acl {
            a.valid().map_err(bad_acl)?;
        }
        self.change_xattrs(ino, |list, disk| {
            let index = kind.name_index();
            let pos = list
                .iter()
                .position(|x| x.name_index == index && x.name.is_empty());
            match (pos, mode) {
                (Some(_), SetMode::Create) => return Err(FsError::Exists),
                (None, SetMode::Replace) => return Err(FsError::NoData),
                _ => {}
            }
            let mut store = acl;
            if kind == AclType::Default && !disk.is_dir() {
                // The VFS refuses this before it reaches a filesystem.
                return match store {
                    Some(_) => Err(FsError::Invalid("a default ACL on a non-directory")),
                    None => Ok(()),
                };
            }
            if let (AclType::Access, Some(a)) = (kind, &store) {
                let (new_mode, keep) = a.update_mode(disk.i_mode, keep_sgid(disk.i_gid));
                disk.i_mode = new_mode;
                if !keep {
                    store = None;
                }
            }
            match (store, pos) {
                (Some(a), Some(i)) => list[i] = acl_xattr(kind, &a),
                (Some(a), None) => list.push(acl_xattr(kind, &a)),
                (None, Some(i)) => {
                    list.remove(i);
                }
                (None, None) => {}
            }
            Ok(())
        })
    }

    /// posix_acl_chmod: after a mode change, the access ACL's owner,
    /// group-class and other entries take the new bits. Runs in the
    /// setattr's handle with the inode locked, and leaves `st.disk` for
    /// the caller to write. An ACL that cannot be read is left as it is
    /// (and logged): the mode change itself still goes through.
    pub(super) fn acl_chmod(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        st: &mut InodeState,
    ) -> Result<()> {
        if !self.posix_acl || st.disk.is_symlink() {
            return Ok(());
        }
        let mut acl = match self.read_acl(ino, st, AclType::Access) {
            Ok(Some(acl)) => acl,
            Ok(None) | Err(FsError::Invalid(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        if let Err(e) = acl.chmod(st.disk.i_mode) {
            tracing::warn!(inode = ino.0, "ACL left as it was on chmod: {e}");
            return Ok(());
        }
        h.ensure_credits(super::xattr::XATTR_CREDITS)?;
        self.apply_xattrs(h, ino, st, |list, _| {
            let index = AclType::Access.name_index();
            for x in list.iter_mut() {
                if x.name_index == index && x.name.is_empty() {
                    *x = acl_xattr(AclType::Access, &acl);
                }
            }
            Ok(())
        })
    }

    /// posix_acl_create and ext3_init_acl for a new inode, in the create's
    /// handle, with the parent (`dir`) locked and before the child is
    /// written: without a default ACL on the parent the umask takes its
    /// bits from the mode; with one, the default ACL masked by the create
    /// mode becomes the child's access ACL (stored when the mode cannot
    /// say it all) and the mode is masked by it, and a directory inherits
    /// the default ACL itself. Symlinks keep their 0777.
    pub(super) fn init_acl(
        &self,
        h: &mut Handle<'_>,
        parent: InodeNo,
        dir: &InodeState,
        ino: InodeNo,
        st: &mut InodeState,
        umask: u16,
    ) -> Result<()> {
        if st.disk.is_symlink() {
            return Ok(());
        }
        let default = match self.posix_acl {
            true => self.read_acl(parent, dir, AclType::Default)?,
            false => None,
        };
        let Some(default) = default else {
            st.disk.i_mode &= !(umask & 0o777);
            return Ok(());
        };
        let mut access = default.clone();
        let (mode, keep) = access.create_masq(st.disk.i_mode).map_err(bad_acl)?;
        st.disk.i_mode = mode;
        let is_dir = st.disk.is_dir();
        if !keep && !is_dir {
            return Ok(());
        }
        self.apply_xattrs(h, ino, st, |list, _| {
            if keep {
                list.push(acl_xattr(AclType::Access, &access));
            }
            if is_dir {
                list.push(acl_xattr(AclType::Default, &default));
            }
            Ok(())
        })
    }
}

/// Whether the inode's in-inode xattr area begins with the xattr magic.
fn has_ibody_xattrs(disk: &Inode) -> bool {
    let area = disk.xattr_area();
    area.len() >= 4
        && u32::from_le_bytes([area[0], area[1], area[2], area[3]])
            == crate::format::xattr::EXT2_XATTR_MAGIC
}

#[cfg(test)]
mod tests {
    //! The ACL rules in-process, on a memory device: what the daemon's
    //! tests (daemon/tests/acl.rs) show through the kernel against Linux.

    use std::sync::Arc;

    use super::*;
    use crate::device::{BlockDevice, MemoryDevice};
    use crate::format::acl::{AclEntry, ACL_GROUP, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER};
    use crate::format::acl::{ACL_USER, ACL_USER_OBJ};
    use crate::fs::namei::{Caller, SetAttr};
    use crate::fs::MountConfig;
    use crate::mkfs::{format, plan, MkfsOptions, Zeroed};

    const ROOT: InodeNo = InodeNo(2);
    const ME: Caller = Caller { uid: 0, gid: 0 };
    const ACCESS: &[u8] = b"system.posix_acl_access";
    const DEFAULT: &[u8] = b"system.posix_acl_default";

    fn mounted(acl: Option<bool>) -> Arc<Filesystem> {
        let opts = MkfsOptions {
            block_size: Some(1024),
            ..Default::default()
        };
        let size = 16 << 20;
        let mem = MemoryDevice::new(size).unwrap();
        let g = plan(&opts, size).unwrap();
        format(
            &mem,
            &opts,
            &g,
            Zeroed::All,
            &mut crate::util::Progress::quiet(),
        )
        .unwrap();
        let dev: Arc<dyn BlockDevice> = Arc::new(mem);
        let cfg = MountConfig {
            cache_size: 4 << 20,
            acl,
            ..Default::default()
        };
        Filesystem::mount(dev, &cfg).unwrap()
    }

    fn acl(entries: &[(u16, u16, u32)]) -> Acl {
        Acl {
            entries: entries
                .iter()
                .map(|&(t, p, i)| AclEntry::new(t, p, i))
                .collect(),
        }
    }

    /// u::rw- u:1000:rw- g::r-- g:50:r-x m::rwx o::r--
    fn named() -> Acl {
        acl(&[
            (ACL_USER_OBJ, 6, 0),
            (ACL_USER, 6, 1000),
            (ACL_GROUP_OBJ, 4, 0),
            (ACL_GROUP, 5, 50),
            (ACL_MASK, 7, 0),
            (ACL_OTHER, 4, 0),
        ])
    }

    /// The raw stored value of an ACL xattr, if any.
    fn stored(fs: &Filesystem, ino: InodeNo, kind: AclType) -> Option<Vec<u8>> {
        let inode = fs.iget(ino).unwrap();
        let st = inode.state.read();
        let (a, b) = fs.xattr_lists(ino, &st).unwrap();
        a.into_iter()
            .chain(b)
            .find(|x| x.name_index == kind.name_index())
            .map(|x| x.value)
    }

    fn mode(fs: &Filesystem, ino: InodeNo) -> u16 {
        fs.getattr(ino).unwrap().i_mode & 0o7777
    }

    #[test]
    fn an_access_acl_is_stored_in_ext3_format_and_sets_the_mode() {
        let fs = mounted(None);
        assert!(fs.posix_acl(), "mkfs sets the acl default mount option");
        let (f, _) = fs.mknod(ROOT, b"f", 0o100644, 0, ME).unwrap();
        let a = named();
        fs.setxattr(f, ACCESS, &a.to_xattr(), SetMode::Either)
            .unwrap();
        assert_eq!(fs.getxattr(f, ACCESS).unwrap(), a.to_xattr());
        assert_eq!(stored(&fs, f, AclType::Access).unwrap(), a.to_disk());
        // The group bits are the mask's.
        assert_eq!(mode(&fs, f), 0o674);
        let names = fs.listxattr(f).unwrap();
        assert_eq!(names, b"system.posix_acl_access\0");
        // chmod reaches the owner, mask and other entries.
        let chmod = SetAttr {
            mode: Some(0o640),
            ..Default::default()
        };
        fs.setattr(f, &chmod, ME).unwrap();
        let now = Acl::from_xattr(&fs.getxattr(f, ACCESS).unwrap())
            .unwrap()
            .unwrap();
        let perms: Vec<u16> = now.entries.iter().map(|e| e.e_perm).collect();
        assert_eq!(perms, [6, 6, 4, 5, 4, 0]);
        // An ACL the mode can say is stored as the mode alone.
        fs.setxattr(
            f,
            ACCESS,
            &Acl::from_mode(0o751).to_xattr(),
            SetMode::Either,
        )
        .unwrap();
        assert_eq!(mode(&fs, f), 0o751);
        assert_eq!(stored(&fs, f, AclType::Access), None);
        assert!(matches!(fs.getxattr(f, ACCESS), Err(FsError::NoData)));
        // Removing what is not there is no error, as in ext3.
        fs.removexattr(f, ACCESS).unwrap();
        fs.unmount().unwrap();
    }

    #[test]
    fn bad_acls_are_refused() {
        let fs = mounted(None);
        let (f, _) = fs.mknod(ROOT, b"f", 0o100644, 0, ME).unwrap();
        let no_mask = acl(&[
            (ACL_USER_OBJ, 6, 0),
            (ACL_USER, 6, 1000),
            (ACL_GROUP_OBJ, 4, 0),
            (ACL_OTHER, 4, 0),
        ]);
        for value in [no_mask.to_xattr(), vec![2, 0, 0, 0, 1], vec![1, 0, 0, 0]] {
            let r = fs.setxattr(f, ACCESS, &value, SetMode::Either);
            assert!(matches!(r, Err(FsError::Invalid(_))), "{value:?}: {r:?}");
        }
        // A default ACL is for directories.
        let r = fs.setxattr(f, DEFAULT, &named().to_xattr(), SetMode::Either);
        assert!(matches!(r, Err(FsError::Invalid(_))), "{r:?}");
        assert_eq!(mode(&fs, f), 0o644);
        assert_eq!(fs.listxattr(f).unwrap(), b"");
        fs.unmount().unwrap();
    }

    #[test]
    fn setgid_goes_unless_the_setter_may_keep_it() {
        let fs = mounted(None);
        let (f, _) = fs.mknod(ROOT, b"f", 0o102775, 0, ME).unwrap();
        let a = named().to_xattr();
        fs.set_acl(f, AclType::Access, Some(&a), SetMode::Either, &|g| g == 0)
            .unwrap();
        assert_eq!(mode(&fs, f), 0o2674);
        fs.set_acl(f, AclType::Access, Some(&a), SetMode::Either, &|_| false)
            .unwrap();
        assert_eq!(mode(&fs, f), 0o674);
        fs.unmount().unwrap();
    }

    #[test]
    fn new_inodes_inherit_the_default_acl_instead_of_the_umask() {
        let fs = mounted(None);
        let (d, _) = fs.mkdir(ROOT, b"d", 0o755, ME).unwrap();
        let def = named();
        fs.setxattr(d, DEFAULT, &def.to_xattr(), SetMode::Either)
            .unwrap();
        // Without a default ACL the umask applies.
        let (plain, _) = fs
            .mknod_umask(ROOT, b"plain", 0o100666, 0, ME, 0o022)
            .unwrap();
        assert_eq!(mode(&fs, plain), 0o644);
        assert_eq!(stored(&fs, plain, AclType::Access), None);
        // With one, the umask does not; the ACL is masked by the mode.
        let (f, _) = fs.mknod_umask(d, b"f", 0o100640, 0, ME, 0o077).unwrap();
        assert_eq!(mode(&fs, f), 0o640);
        let got = Acl::from_xattr(&fs.getxattr(f, ACCESS).unwrap())
            .unwrap()
            .unwrap();
        let perms: Vec<u16> = got.entries.iter().map(|e| e.e_perm).collect();
        assert_eq!(perms, [6, 6, 4, 5, 4, 0]);
        assert_eq!(stored(&fs, f, AclType::Default), None);
        // A directory also inherits the default ACL itself.
        let (sub, _) = fs.mkdir_umask(d, b"sub", 0o777, ME, 0o077).unwrap();
        assert_eq!(mode(&fs, sub), 0o674);
        assert_eq!(fs.getxattr(sub, DEFAULT).unwrap(), def.to_xattr());
        assert!(fs.getxattr(sub, ACCESS).is_ok());
        // Symlinks take nothing.
        let (l, _) = fs.symlink(d, b"l", b"f", ME).unwrap();
        assert_eq!(fs.listxattr(l).unwrap(), b"");
        assert_eq!(mode(&fs, l), 0o777);
        // A default ACL the mode can say leaves no access ACL behind.
        let (m, _) = fs.mkdir(ROOT, b"m", 0o755, ME).unwrap();
        let minimal = Acl::from_mode(0o750).to_xattr();
        fs.setxattr(m, DEFAULT, &minimal, SetMode::Either).unwrap();
        let (mf, _) = fs.mknod_umask(m, b"f", 0o100666, 0, ME, 0).unwrap();
        assert_eq!(mode(&fs, mf), 0o640);
        assert_eq!(fs.listxattr(mf).unwrap(), b"");
        fs.unmount().unwrap();
    }

    #[test]
    fn a_create_that_fails_after_inheriting_gives_the_xattr_block_back() {
        let fs = mounted(None);
        let (d, _) = fs.mkdir(ROOT, b"d", 0o755, ME).unwrap();
        // Too big for the inode: the inherited ACLs need an xattr block.
        let mut big = named();
        for uid in 2000..2040 {
            big.entries.insert(1, AclEntry::new(ACL_USER, 4, uid));
        }
        fs.setxattr(d, DEFAULT, &big.to_xattr(), SetMode::Either)
            .unwrap();
        // Leave exactly one free block: the new directory's xattr block
        // takes it, and its first directory block finds none.
        let (one, _) = fs.mknod(ROOT, b"one", 0o100644, 0, ME).unwrap();
        let bs = fs.block_size() as usize;
        fs.write(one, 0, &vec![1u8; bs], true).unwrap();
        let (fill, _) = fs.mknod(ROOT, b"fill", 0o100644, 0, ME).unwrap();
        let chunk = vec![2u8; 64 * bs];
        let mut at = 0u64;
        loop {
            match fs.write(fill, at, &chunk, true) {
                Ok(n) if n == chunk.len() => at += n as u64,
                Ok(n) => at += n as u64,
                Err(FsError::NoSpace) if chunk.len() > bs => break,
                Err(e) => panic!("filling: {e:?}"),
            }
        }
        while fs.write(fill, at, &vec![3u8; bs], true).is_ok() {
            at += bs as u64;
        }
        fs.unlink(ROOT, b"one").unwrap();
        fs.release(one).ok();
        fs.sync().unwrap();
        let before = fs.statfs().unwrap().free_blocks;
        assert_eq!(before, 1);
        let r = fs.mkdir_umask(d, b"sub", 0o777, ME, 0o022);
        assert!(matches!(r, Err(FsError::NoSpace)), "{r:?}");
        fs.sync().unwrap();
        assert_eq!(fs.statfs().unwrap().free_blocks, before);
        assert!(matches!(fs.lookup(d, b"sub"), Err(FsError::NotFound)));
        // A file needs only the xattr block, and gets it.
        let (f, _) = fs.mknod_umask(d, b"f", 0o100666, 0, ME, 0o022).unwrap();
        assert!(fs.getxattr(f, ACCESS).is_ok());
        assert_eq!(fs.statfs().unwrap().free_blocks, 0);
        fs.unmount().unwrap();
    }

    #[test]
    fn noacl_hides_the_names_and_applies_the_umask() {
        let fs = mounted(None);
        let (d, _) = fs.mkdir(ROOT, b"d", 0o755, ME).unwrap();
        fs.setxattr(d, DEFAULT, &named().to_xattr(), SetMode::Either)
            .unwrap();
        fs.unmount().unwrap();
        let dev = fs.dev.clone();
        drop(fs);
        let cfg = MountConfig {
            cache_size: 4 << 20,
            acl: Some(false),
            ..Default::default()
        };
        let fs = Filesystem::mount(dev, &cfg).unwrap();
        assert!(!fs.posix_acl());
        assert!(matches!(
            fs.getxattr(d, DEFAULT),
            Err(FsError::NotSupported)
        ));
        let r = fs.setxattr(d, ACCESS, &named().to_xattr(), SetMode::Either);
        assert!(matches!(r, Err(FsError::NotSupported)));
        assert_eq!(fs.listxattr(d).unwrap(), b"");
        let (f, _) = fs.mknod_umask(d, b"f", 0o100666, 0, ME, 0o027).unwrap();
        assert_eq!(mode(&fs, f), 0o640);
        assert_eq!(stored(&fs, f, AclType::Access), None);
        fs.unmount().unwrap();
    }
}
