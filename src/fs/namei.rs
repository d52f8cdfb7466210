//! Names and inode lifetimes (Linux: fs/ext3/namei.c): create, mkdir,
//! mknod, symlink, link, unlink, rmdir, rename, and the attribute changes
//! of setattr.
//!
//! Every operation holds the lock of each directory it changes, then the
//! locks of the inodes it changes, in the order documented in lib.rs.

use super::inode::InodeState;
use super::{now, Filesystem, FsError, Result};
use crate::format::dirent::{self as de};
use crate::format::inode::{self as fi, Inode, Timestamp};
use crate::format::superblock::feature;
use crate::format::InodeNo;
use crate::journal::Handle;

/// ext3's link count limit (EXT3_LINK_MAX).
pub const EXT3_LINK_MAX: u16 = 32000;
/// With dir_nlink, where a directory's count stops (EXT4_LINK_MAX): past
/// it the count is 1, "more than can be counted".
pub const EXT4_LINK_MAX: u16 = 65000;

impl Filesystem {
    fn dir_nlink(&self) -> bool {
        self.sb
            .lock()
            .has_ro_compat(crate::format::superblock::feature::RO_COMPAT_DIR_NLINK)
    }

    /// Whether directory `dir` may take another subdirectory
    /// (EXT4_DIR_LINK_MAX): without dir_nlink ext3's 32,000 links; with it
    /// there is no limit, the count becoming 1 past 65,000.
    pub(crate) fn dir_links_full(&self, dir: &crate::format::inode::Inode) -> bool {
        !self.dir_nlink() && dir.i_links_count >= EXT3_LINK_MAX
    }

    /// A subdirectory's ".." now names `dir` (ext4_inc_count).
    pub(crate) fn dir_link_inc(&self, dir: &mut crate::format::inode::Inode) {
        let overflowed = dir.i_links_count == 1 || dir.i_links_count >= EXT4_LINK_MAX;
        if self.dir_nlink() && overflowed {
            dir.i_links_count = 1;
        } else {
            dir.i_links_count = dir.i_links_count.saturating_add(1);
        }
    }

    /// A subdirectory's ".." no longer names `dir` (ext4_dec_count): a
    /// count of 1 (overflowed) or 2 stays.
    pub(crate) fn dir_link_dec(&self, dir: &mut crate::format::inode::Inode) {
        if dir.i_links_count > 2 {
            dir.i_links_count -= 1;
        }
    }
}

const NAMEI_CREDITS: u32 = 32;

/// Who is asking, for new inodes' owners and reserved blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
}

impl Caller {
    pub fn privileged(&self) -> bool {
        self.uid == 0
    }
}

/// Attribute changes, as setattr gives them.
#[derive(Clone, Copy, Debug, Default)]
pub struct SetAttr {
    pub mode: Option<u16>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<Timestamp>,
    pub mtime: Option<Timestamp>,
    pub ctime: Option<Timestamp>,
    /// A time was given explicitly, not as "now" (the kernel's
    /// ATTR_TIMES_SET): refused on an append-only inode, where `touch`'s
    /// "now" is not.
    pub times_set: bool,
}

/// rename(2) flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RenameFlags {
    pub noreplace: bool,
    pub exchange: bool,
    /// RENAME_WHITEOUT: the old name is left pointing at a whiteout (a
    /// character device 0:0, as overlayfs reads it) owned by this caller.
    pub whiteout: Option<Caller>,
}

impl Filesystem {
    pub(super) fn dirent_type(&self, mode: u16) -> u8 {
        if !self.sb.lock().has_incompat(feature::INCOMPAT_FILETYPE) {
            return de::EXT2_FT_UNKNOWN;
        }
        de::file_type_of(mode)
    }

    fn check_writable(&self) -> Result<()> {
        if self.is_read_only() {
            Err(FsError::ReadOnly)
        } else {
            Ok(())
        }
    }

    fn check_name(name: &[u8]) -> Result<()> {
        if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
            return Err(FsError::Invalid("bad file name"));
        }
        if name.len() > de::EXT2_NAME_LEN {
            return Err(FsError::NameTooLong);
        }
        Ok(())
    }

    /// A handle for a change to a directory: synchronous under `-o dirsync`
    /// or `-o sync`, or when the directory has the dirsync flag, as ext3's
    /// IS_DIRSYNC.
    pub(crate) fn start_dirop(&self, dir: &Inode) -> Result<Handle<'_>> {
        let mut h = self.journal.start(NAMEI_CREDITS)?;
        if self.dirsync || super::flags::is_dirsync(dir) {
            h.set_sync();
        }
        Ok(h)
    }

    /// Looks `name` up in `parent` and returns the child's number and inode.
    pub fn lookup(&self, parent: InodeNo, name: &[u8]) -> Result<(InodeNo, Inode)> {
        if name.len() > de::EXT2_NAME_LEN {
            return Err(FsError::NameTooLong);
        }
        let dir = self.iget(parent)?;
        // Lookups share the directory's lock once its index exists; only
        // the first one builds it.
        let cached = {
            let st = dir.state.read();
            if !st.disk.is_dir() {
                return Err(FsError::NotDir);
            }
            st.dir_index.as_ref().map(|idx| idx.get(name))
        };
        let slot = match cached {
            Some(slot) => slot,
            None => {
                let mut st = dir.state.write();
                self.dir_lookup(parent, &mut st, name)?
            }
        };
        let slot = slot.ok_or(FsError::NotFound)?;
        let child = self.iget(slot.ino)?;
        let disk = child.state.read().disk.clone();
        Ok((slot.ino, disk))
    }

    pub fn getattr(&self, ino: InodeNo) -> Result<Inode> {
        Ok(self.iget(ino)?.state.read().disk.clone())
    }

    /// The inode a file handle names, found by number alone (ext4's
    /// ext4_nfs_get_inode, through FUSE a LOOKUP of "." on a node the
    /// kernel has forgotten): [`FsError::Stale`] for a number outside the
    /// table or reserved (but the root), and for an inode no longer in use
    /// (no links: deleted, or an open orphan, as ext4_iget judges it). The
    /// caller compares the generation.
    pub fn inode_for_handle(&self, ino: InodeNo) -> Result<Inode> {
        let (count, first) = {
            let sb = self.sb.lock();
            (sb.s_inodes_count, sb.first_ino())
        };
        if ino.0 == 0 || ino.0 > count || (ino.0 < first && ino.0 != 2) {
            return Err(FsError::Stale);
        }
        let inode = self.getattr(ino)?;
        if inode.i_links_count == 0 {
            return Err(FsError::Stale);
        }
        Ok(inode)
    }

    /// A new inode of `mode` owned by the caller, written and installed.
    pub(super) fn new_inode(
        &self,
        h: &mut Handle<'_>,
        parent: InodeNo,
        mode: u16,
        who: Caller,
        parent_disk: &Inode,
    ) -> Result<(InodeNo, InodeState)> {
        let is_dir = mode & fi::S_IFMT == fi::S_IFDIR;
        let topdir = parent.0 == fi::ino::EXT2_ROOT_INO
            || parent_disk.i_flags & fi::flags::EXT2_TOPDIR_FL != 0;
        let ino = self.alloc_inode(h, parent, is_dir, topdir)?;
        let mut disk = self.blank_inode();
        let t = now();
        disk.i_mode = mode;
        disk.i_uid = who.uid;
        // BSD group semantics when the parent is setgid, as ext3 does.
        let (parent_mode, gid) = (parent_disk.i_mode, parent_disk.i_gid);
        disk.i_gid = if parent_mode & 0o2000 != 0 {
            gid
        } else {
            who.gid
        };
        if is_dir && parent_mode & 0o2000 != 0 {
            disk.i_mode |= 0o2000;
        }
        disk.i_atime = t;
        disk.i_ctime = t;
        disk.i_mtime = t;
        disk.i_crtime = t;
        disk.i_links_count = 1;
        disk.i_generation = self.next_generation();
        Ok((ino, InodeState::new(disk)))
    }

    fn next_generation(&self) -> u32 {
        use std::sync::atomic::{AtomicU32, Ordering};
        static GEN: AtomicU32 = AtomicU32::new(0);
        let seed = crate::util::now().1;
        GEN.fetch_add(1, Ordering::Relaxed).wrapping_add(seed)
    }

    /// mknod/create: a regular file, fifo, socket or device node, with
    /// `mode` as given (or as the parent's default ACL masks it).
    pub fn mknod(
        &self,
        parent: InodeNo,
        name: &[u8],
        mode: u16,
        rdev: u32,
        who: Caller,
    ) -> Result<(InodeNo, Inode)> {
        self.mknod_umask(parent, name, mode, rdev, who, 0)
    }

    /// [`Self::mknod`] with the caller's umask, which applies unless the
    /// parent has a default ACL (posix_acl_create; see acl.rs).
    pub fn mknod_umask(
        &self,
        parent: InodeNo,
        name: &[u8],
        mode: u16,
        rdev: u32,
        who: Caller,
        umask: u16,
    ) -> Result<(InodeNo, Inode)> {
        self.check_writable()?;
        Self::check_name(name)?;
        let kind = mode & fi::S_IFMT;
        let kind = if kind == 0 { fi::S_IFREG } else { kind };
        if !matches!(
            kind,
            fi::S_IFREG | fi::S_IFIFO | fi::S_IFSOCK | fi::S_IFCHR | fi::S_IFBLK
        ) {
            return Err(FsError::Invalid("mknod of this file type"));
        }
        let mode = kind | (mode & 0o7777);
        self.create_entry(parent, name, mode, who, umask, |_, _, _, st| {
            if kind == fi::S_IFCHR || kind == fi::S_IFBLK {
                st.disk.set_rdev(
                    libc::major(rdev as libc::dev_t),
                    libc::minor(rdev as libc::dev_t),
                );
            }
            Ok(())
        })
    }

    /// Refuses a parent that is not a directory, or one already removed.
    fn live_dir(dst: &InodeState) -> Result<()> {
        if !dst.disk.is_dir() {
            return Err(FsError::NotDir);
        }
        if dst.disk.i_links_count == 0 {
            return Err(FsError::NotFound);
        }
        Ok(())
    }

    /// Creates a child of `parent`, letting `init` fill it before it is
    /// written and linked in.
    fn create_entry(
        &self,
        parent: InodeNo,
        name: &[u8],
        mode: u16,
        who: Caller,
        umask: u16,
        init: impl FnOnce(&Self, &mut Handle<'_>, InodeNo, &mut InodeState) -> Result<()>,
    ) -> Result<(InodeNo, Inode)> {
        let dir = self.iget(parent)?;
        let mut dst = dir.state.write();
        Self::live_dir(&dst)?;
        if self.dir_lookup(parent, &mut dst, name)?.is_some() {
            return Err(FsError::Exists);
        }
        super::flags::may_create_in(&dst.disk)?;
        let is_dir = mode & fi::S_IFMT == fi::S_IFDIR;
        if is_dir && self.dir_links_full(&dst.disk) {
            return Err(FsError::TooManyLinks);
        }
        let mut h = self.start_dirop(&dst.disk)?;
        let res = self.create_in(&mut h, parent, &mut dst, name, (mode, umask), who, init);
        let stop = h.stop();
        let out = res?;
        stop?;
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    fn create_in(
        &self,
        h: &mut Handle<'_>,
        parent: InodeNo,
        dst: &mut InodeState,
        name: &[u8],
        (mode, umask): (u16, u16),
        who: Caller,
        init: impl FnOnce(&Self, &mut Handle<'_>, InodeNo, &mut InodeState) -> Result<()>,
    ) -> Result<(InodeNo, Inode)> {
        let (ino, mut st) = self.new_inode(h, parent, mode, who, &dst.disk)?;
        st.disk.i_flags = super::flags::inherited(&dst.disk, mode);
        let is_dir = mode & fi::S_IFMT == fi::S_IFDIR;
        // The child's slot is written only once its name is in: until then
        // a failure (ENOSPC for the directory's new block, say) leaves the
        // slot as it was, and only the blocks and the inode number taken
        // so far are to be given back.
        let undo = |fs: &Self, h: &mut Handle<'_>, st: &mut InodeState| {
            if st.disk.i_file_acl != 0 {
                if let Err(e) = fs.xattr_release_block(h, ino, st) {
                    tracing::error!(inode = ino.0, "undoing a failed create: {e}");
                }
            }
            if let Err(e) = fs.free_blocks_from_in_handle(h, ino, st, 0) {
                tracing::error!(inode = ino.0, "undoing a failed create: {e}");
            }
            if let Err(e) = fs.free_inode(h, ino, is_dir) {
                tracing::error!(inode = ino.0, "undoing a failed create: {e}");
            }
        };
        // The mode the umask or the parent's default ACL leaves, and the
        // inherited ACLs (acl.rs).
        if let Err(e) = self.init_acl(h, parent, dst, ino, &mut st, umask) {
            undo(self, h, &mut st);
            return Err(e);
        }
        if let Err(e) = init(self, h, ino, &mut st) {
            undo(self, h, &mut st);
            return Err(e);
        }
        let ft = self.dirent_type(mode);
        if let Err(e) = self.dir_add(h, parent, dst, name, ino, ft) {
            undo(self, h, &mut st);
            return Err(e);
        }
        if let Err(e) = self.write_inode(h, ino, &st.disk) {
            if let Err(r) = self.dir_remove(h, parent, dst, name) {
                tracing::error!(inode = ino.0, "undoing a failed create: {r}");
            }
            undo(self, h, &mut st);
            return Err(e);
        }
        let t = now();
        dst.disk.i_mtime = t;
        dst.disk.i_ctime = t;
        if is_dir {
            self.dir_link_inc(&mut dst.disk);
        }
        self.write_inode(h, parent, &dst.disk)?;
        let disk = st.disk.clone();
        self.iget_new(ino, st.disk);
        Ok((ino, disk))
    }

    /// open(O_TMPFILE): a regular file in no directory, with no links,
    /// on the orphan list from the start (ext4_tmpfile), so that a crash
    /// frees it. `parent` gives its group, owner group and ACLs. It lives
    /// while open, and a link (linkat with AT_EMPTY_PATH) gives it a name.
    pub fn tmpfile(
        &self,
        parent: InodeNo,
        mode: u16,
        who: Caller,
        umask: u16,
    ) -> Result<(InodeNo, Inode)> {
        self.check_writable()?;
        if mode & fi::S_IFMT != fi::S_IFREG {
            return Err(FsError::Invalid("O_TMPFILE of a file that is not regular"));
        }
        let dir = self.iget(parent)?;
        let mut dst = dir.state.write();
        Self::live_dir(&dst)?;
        super::flags::may_create_in(&dst.disk)?;
        let mut h = self.journal.start(NAMEI_CREDITS)?;
        let res = self.tmpfile_in(&mut h, parent, &mut dst, (mode, umask), who);
        let stop = h.stop();
        let out = res?;
        stop?;
        Ok(out)
    }

    fn tmpfile_in(
        &self,
        h: &mut Handle<'_>,
        parent: InodeNo,
        dst: &mut InodeState,
        (mode, umask): (u16, u16),
        who: Caller,
    ) -> Result<(InodeNo, Inode)> {
        let (ino, mut st) = self.new_inode(h, parent, mode, who, &dst.disk)?;
        st.disk.i_flags = super::flags::inherited(&dst.disk, mode);
        st.disk.i_links_count = 0;
        let made = self
            .init_acl(h, parent, dst, ino, &mut st, umask)
            .and_then(|()| self.orphan_add(h, ino, &mut st))
            .and_then(|()| self.write_inode(h, ino, &st.disk));
        if let Err(e) = made {
            if st.disk.i_file_acl != 0 {
                if let Err(r) = self.xattr_release_block(h, ino, &mut st) {
                    tracing::error!(inode = ino.0, "undoing a failed O_TMPFILE: {r}");
                }
            }
            if let Err(r) = self.free_inode(h, ino, false) {
                tracing::error!(inode = ino.0, "undoing a failed O_TMPFILE: {r}");
            }
            return Err(e);
        }
        let disk = st.disk.clone();
        self.iget_new(ino, st.disk);
        Ok((ino, disk))
    }

    pub fn mkdir(
        &self,
        parent: InodeNo,
        name: &[u8],
        mode: u16,
        who: Caller,
    ) -> Result<(InodeNo, Inode)> {
        self.mkdir_umask(parent, name, mode, who, 0)
    }

    /// [`Self::mkdir`] with the caller's umask, which applies unless the
    /// parent has a default ACL (posix_acl_create; see acl.rs).
    pub fn mkdir_umask(
        &self,
        parent: InodeNo,
        name: &[u8],
        mode: u16,
        who: Caller,
        umask: u16,
    ) -> Result<(InodeNo, Inode)> {
        self.check_writable()?;
        Self::check_name(name)?;
        let mode = fi::S_IFDIR | (mode & 0o7777);
        self.create_entry(parent, name, mode, who, umask, |fs, h, ino, st| {
            st.disk.i_links_count = 2;
            fs.init_dir_block(h, ino, st, parent, who)
        })
    }

    /// Gives a new directory its first block, holding "." and "..".
    fn init_dir_block(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        st: &mut InodeState,
        parent: InodeNo,
        who: Caller,
    ) -> Result<()> {
        let m = self.get_blocks(h, ino, st, 0, 1, who.privileged())?;
        let b = m.physical.ok_or(FsError::NoSpace)?;
        let block = de::new_dir_block(self.block_size as usize, ino, parent)
            .map_err(|e| crate::format::Corruption::new(crate::format::Location::Inode(ino), e))?;
        let buf = self.cache.get_new(b)?;
        h.modify(&buf)?.copy_from_slice(&block);
        st.disk.i_size = self.block_size as u64;
        Ok(())
    }
}

impl Filesystem {
    pub fn symlink(
        &self,
        parent: InodeNo,
        name: &[u8],
        target: &[u8],
        who: Caller,
    ) -> Result<(InodeNo, Inode)> {
        self.check_writable()?;
        Self::check_name(name)?;
        if target.is_empty() || target.len() >= self.block_size as usize {
            return Err(FsError::NameTooLong);
        }
        let mode = fi::S_IFLNK | 0o777;
        self.create_entry(parent, name, mode, who, 0, |fs, h, ino, st| {
            st.disk.i_size = target.len() as u64;
            if target.len() < fi::EXT2_FAST_SYMLINK_MAX {
                st.disk.set_i_block_bytes(target);
                return Ok(());
            }
            let m = fs.get_blocks(h, ino, st, 0, 1, who.privileged())?;
            let b = m.physical.ok_or(FsError::NoSpace)?;
            let mut block = vec![0u8; fs.block_size as usize];
            block[..target.len()].copy_from_slice(target);
            let buf = fs.cache.get_new(b)?;
            h.modify(&buf)?.copy_from_slice(&block);
            Ok(())
        })
    }

    pub fn readlink(&self, ino: InodeNo) -> Result<Vec<u8>> {
        let inode = self.iget(ino)?;
        let st = inode.state.read();
        if !st.disk.is_symlink() {
            return Err(FsError::Invalid("not a symlink"));
        }
        let len = st.disk.i_size as usize;
        if st.disk.is_fast_symlink(self.block_size) {
            return Ok(st.disk.i_block_bytes()[..len.min(fi::EXT2_FAST_SYMLINK_MAX)].to_vec());
        }
        if len >= self.block_size as usize {
            return Err(FsError::corrupt(
                crate::format::Location::Inode(ino),
                "inode",
                "i_size",
                len as u64,
                "a slow symlink's target is longer than a block",
            ));
        }
        let buf = self.dir_block(ino, &st, 0)?;
        let data = buf.read();
        Ok(data[..len].to_vec())
    }

    pub fn link(&self, ino: InodeNo, parent: InodeNo, name: &[u8]) -> Result<Inode> {
        self.check_writable()?;
        Self::check_name(name)?;
        if ino == parent {
            return Err(FsError::NotPermitted);
        }
        let dir = self.iget(parent)?;
        let child = self.iget(ino)?;
        let mut dst = dir.state.write();
        if !dst.disk.is_dir() {
            return Err(FsError::NotDir);
        }
        let mut st = child.state.write();
        if st.disk.is_dir() {
            return Err(FsError::NotPermitted);
        }
        super::flags::may_create_in(&dst.disk)?;
        super::flags::may_link(&st.disk)?;
        if st.disk.i_links_count >= EXT3_LINK_MAX {
            return Err(FsError::TooManyLinks);
        }
        // An inode with no links is linked only as an O_TMPFILE's is: the
        // kernel allows it for those alone (I_LINKABLE). It leaves the
        // orphan list, as in ext4_link.
        if st.freed {
            return Err(FsError::NotFound);
        }
        let was_orphan = st.disk.i_links_count == 0;
        let mut h = self.start_dirop(&dst.disk)?;
        let ft = self.dirent_type(st.disk.i_mode);
        let res = self
            .dir_add(&mut h, parent, &mut dst, name, ino, ft)
            .and_then(|()| {
                if was_orphan {
                    self.orphan_del(&mut h, ino)?;
                    // It was the chain's link; a linked inode has none.
                    st.disk.i_dtime = 0;
                }
                let t = now();
                st.disk.i_links_count += 1;
                st.disk.i_ctime = t;
                dst.disk.i_mtime = t;
                dst.disk.i_ctime = t;
                self.write_inode(&mut h, ino, &st.disk)?;
                self.write_inode(&mut h, parent, &dst.disk)
            });
        let stop = h.stop();
        res?;
        stop?;
        Ok(st.disk.clone())
    }

    pub fn unlink(&self, parent: InodeNo, name: &[u8]) -> Result<()> {
        self.remove_name(parent, name, false)
    }

    pub fn rmdir(&self, parent: InodeNo, name: &[u8]) -> Result<()> {
        if name == b"." {
            return Err(FsError::Invalid("rmdir of ."));
        }
        if name == b".." {
            return Err(FsError::NotEmpty);
        }
        self.remove_name(parent, name, true)
    }

    fn remove_name(&self, parent: InodeNo, name: &[u8], want_dir: bool) -> Result<()> {
        self.check_writable()?;
        let dir = self.iget(parent)?;
        let mut dst = dir.state.write();
        let slot = self
            .dir_lookup(parent, &mut dst, name)?
            .ok_or(FsError::NotFound)?;
        if slot.ino == parent {
            return Err(FsError::Invalid("removing a directory's own entry"));
        }
        let child = self.iget(slot.ino)?;
        let mut st = child.state.write();
        super::flags::may_delete(&dst.disk, &st.disk)?;
        match (want_dir, st.disk.is_dir()) {
            (true, false) => return Err(FsError::NotDir),
            (false, true) => return Err(FsError::IsDir),
            (true, true) if !self.dir_is_empty(slot.ino, &mut st)? => {
                return Err(FsError::NotEmpty)
            }
            _ => {}
        }
        let mut h = self.start_dirop(&dst.disk)?;
        let res = self.unlink_locked(&mut h, parent, &mut dst, name, slot.ino, &mut st);
        let stop = h.stop();
        let free_now = res?;
        stop?;
        drop(st);
        drop(dst);
        if free_now {
            self.release_inode_if_unused(&child)?;
        }
        Ok(())
    }

    /// Removes `name` from `dir` and drops a link from `child`; returns
    /// whether the child has no links left.
    fn unlink_locked(
        &self,
        h: &mut Handle<'_>,
        dir: InodeNo,
        dst: &mut InodeState,
        name: &[u8],
        ino: InodeNo,
        st: &mut InodeState,
    ) -> Result<bool> {
        self.dir_remove(h, dir, dst, name)?;
        let t = now();
        dst.disk.i_mtime = t;
        dst.disk.i_ctime = t;
        if st.disk.is_dir() {
            self.dir_link_dec(&mut dst.disk);
            st.disk.i_links_count = 0;
        } else {
            st.disk.i_links_count = st.disk.i_links_count.saturating_sub(1);
        }
        st.disk.i_ctime = t;
        let gone = st.disk.i_links_count == 0;
        if gone {
            self.orphan_add(h, ino, st)?;
        }
        self.write_inode(h, ino, &st.disk)?;
        self.write_inode(h, dir, &dst.disk)?;
        Ok(gone)
    }

    /// What a change to a regular file's contents by a caller without
    /// CAP_FSETID does to its set-ID bits (the kernel's
    /// setattr_should_drop_suidgid): set-user-ID goes, and set-group-ID
    /// too when the group may execute the file or the caller is not in
    /// its group (`in_group`). FUSE applies an older rule itself (it keeps
    /// set-group-ID on a file its group may not execute), so the FUSE
    /// layer finishes the job after fallocate. Returns whether the mode
    /// changed.
    pub fn remove_privs(&self, ino: InodeNo, in_group: &dyn Fn(u32) -> bool) -> Result<bool> {
        self.check_writable()?;
        let inode = self.iget(ino)?;
        let mut st = inode.state.write();
        let mode = st.disk.i_mode;
        let mut kill = mode & fi::S_ISUID;
        let group_exec = mode & fi::S_IXGRP != 0;
        if mode & fi::S_ISGID != 0 && (group_exec || !in_group(st.disk.i_gid)) {
            kill |= fi::S_ISGID;
        }
        if kill == 0 || !st.disk.is_reg() {
            return Ok(false);
        }
        let h = self.journal.start(1)?;
        st.disk.i_mode &= !kill;
        st.disk.i_ctime = now();
        self.write_inode_and_stop(h, ino, &st.disk, Ok(()))?;
        Ok(true)
    }

    /// setattr: mode, owner, size and times.
    pub fn setattr(&self, ino: InodeNo, attr: &SetAttr, who: Caller) -> Result<Inode> {
        self.check_writable()?;
        let inode = self.iget(ino)?;
        let mut st = inode.state.write();
        super::flags::may_setattr(&st.disk, attr)?;
        if setattr_changes_nothing(&st.disk, attr) {
            return Ok(st.disk.clone());
        }
        let mut h = self.journal.start(NAMEI_CREDITS)?;
        if super::flags::is_sync(&st.disk) {
            h.set_sync();
        }
        let res = self.setattr_locked(&mut h, ino, &mut st, attr, who);
        let stop = h.stop();
        res?;
        stop?;
        Ok(st.disk.clone())
    }

    fn setattr_locked(
        &self,
        h: &mut Handle<'_>,
        ino: InodeNo,
        st: &mut InodeState,
        a: &SetAttr,
        _who: Caller,
    ) -> Result<()> {
        let t = now();
        if let Some(size) = a.size {
            if st.disk.is_dir() {
                return Err(FsError::IsDir);
            }
            if !st.disk.is_reg() {
                return Err(FsError::Invalid("truncate of a special file"));
            }
            self.set_size(h, ino, st, size)?;
            st.disk.i_mtime = t;
        }
        if let Some(mode) = a.mode {
            st.disk.i_mode = (st.disk.i_mode & fi::S_IFMT) | (mode & 0o7777);
            self.acl_chmod(h, ino, st)?;
        }
        if let Some(uid) = a.uid {
            st.disk.i_uid = uid;
        }
        if let Some(gid) = a.gid {
            st.disk.i_gid = gid;
        }
        if let Some(at) = a.atime {
            st.disk.i_atime = at;
        }
        if let Some(mt) = a.mtime {
            st.disk.i_mtime = mt;
        }
        st.disk.i_ctime = a.ctime.unwrap_or(t);
        self.write_inode(h, ino, &st.disk)
    }
}

/// Whether a setattr would leave the inode as it is: every field it gives
/// holds that value already, and it gives the ctime too (without one, the
/// ctime moves to now). The kernel sends such requests under the writeback
/// cache when it writes back times the daemon has already been told
/// (fuse_flush_times after a utimensat or a chmod); they need no handle
/// and write nothing, since nothing on disk changes.
fn setattr_changes_nothing(disk: &Inode, a: &SetAttr) -> bool {
    let same = |given: Option<Timestamp>, held: Timestamp| given.is_none_or(|t| t == held);
    a.size.is_none()
        && a.mode.is_none_or(|m| m & 0o7777 == disk.i_mode & 0o7777)
        && a.uid.is_none_or(|u| u == disk.i_uid)
        && a.gid.is_none_or(|g| g == disk.i_gid)
        && same(a.atime, disk.i_atime)
        && same(a.mtime, disk.i_mtime)
        && a.ctime == Some(disk.i_ctime)
}
