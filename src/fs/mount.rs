//! Mounting and unmounting (Linux: fs/ext3/super.c): read and check the
//! superblock and group descriptors, refuse what jbdfs cannot handle, and
//! keep the in-memory superblock and its on-disk copy in step.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::error::{ErrorState, WatchedDevice};
use super::{FsError, Result};
use crate::cache::{Buffer, BufferCache};
use crate::device::BlockDevice;
use crate::format::group_desc::{GroupDesc, GROUP_DESC_SIZE};
use crate::format::jbd::{self, JournalSuperblock};
use crate::format::superblock::{self as sbm, feature, Superblock};
use crate::format::{BlockNo, Corruption, FormatError, GroupNo, InodeNo, Location};
use crate::journal::{Handle, Journal, JournalConfig};

/// The buffer cache's default budget (`-o cache_size=`).
pub const DEFAULT_CACHE_SIZE: usize = 256 << 20;

/// How file data is ordered against the journal (`-o data=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DataMode {
    /// File data goes home before the commit that references it.
    #[default]
    Ordered,
    /// File data is not ordered against metadata at all: commits do not
    /// wait for it.
    Writeback,
    /// File data is logged in the journal like metadata.
    Journal,
}

impl DataMode {
    /// Every mode, for the tests and tools that try each.
    pub const ALL: [DataMode; 3] = [Self::Ordered, Self::Writeback, Self::Journal];

    /// The values `data=` takes, for a message naming a bad one.
    pub const EXPECTED: &'static str = "ordered, writeback or journal";

    /// The word `data=` takes for this mode.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ordered => "ordered",
            Self::Writeback => "writeback",
            Self::Journal => "journal",
        }
    }

    /// The mode a `data=` value names, if it names one.
    pub fn from_option(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == value)
    }
}

impl std::fmt::Display for DataMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How to mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountConfig {
    /// Mount read-only. Unless the device is read-only too, a remount can
    /// make it read-write later (the journal is loaded then).
    pub read_only: bool,
    /// The device cannot be written (opened read-only, or an export the
    /// server offers read-only): the mount is read-only for good.
    pub read_only_device: bool,
    /// Bytes of metadata the buffer cache may hold.
    pub cache_size: usize,
    pub journal: JournalConfig,
    /// `-o dirsync` (or `-o sync`): directory changes are durable on return.
    pub dirsync: bool,
    /// `-o data=`: how file data is ordered against the journal.
    pub data: DataMode,
    /// `-o errors=`: what an error does (see error.rs).
    pub errors: super::error::ErrorsPolicy,
    /// What errors=panic does after recording the error.
    pub panic_action: super::error::PanicAction,
    /// `-o max_map=N`: blocks one block-map call may map (1 forces
    /// single-block mapping, for the A/B); `u32::MAX` is no limit.
    pub max_map: u32,
    /// `-o acl` / `-o noacl`: POSIX ACLs on or off; `None` takes the
    /// superblock's default mount options (mke2fs sets `acl`), as ext3.
    pub acl: Option<bool>,
    /// relatime, strictatime, noatime, nodiratime (see atime.rs).
    pub atime: super::atime::AtimePolicy,
}

/// What a remount may change on the fly, as ext3_remount does: the
/// journal's barrier, commit interval and batching, errors=, and atime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tunables {
    pub journal: JournalConfig,
    pub errors: super::error::ErrorsPolicy,
    pub atime: super::atime::AtimePolicy,
}

impl Default for MountConfig {
    fn default() -> Self {
        MountConfig {
            read_only: false,
            read_only_device: false,
            cache_size: DEFAULT_CACHE_SIZE,
            journal: JournalConfig::default(),
            dirsync: false,
            data: DataMode::default(),
            errors: Default::default(),
            panic_action: Default::default(),
            max_map: u32::MAX,
            acl: None,
            atime: Default::default(),
        }
    }
}

/// The share of the cache budget given to file data waiting to go home.
fn data_queue_limit(cache_size: usize) -> usize {
    (cache_size / 8).clamp(1 << 20, 32 << 20)
}

/// A mounted ext3 filesystem.
pub struct Filesystem {
    pub(crate) dev: Arc<dyn BlockDevice>,
    pub(crate) cache: Arc<BufferCache>,
    pub(crate) journal: Arc<Journal>,
    /// The in-memory superblock. Free counts here are refreshed from the
    /// group descriptors when the superblock is written.
    pub(crate) sb: Mutex<Superblock>,
    /// One lock per group, taken around bitmap and descriptor updates.
    pub(crate) group_locks: Vec<Mutex<()>>,
    pub(crate) inodes: super::inode::InodeCache,
    /// Read-only for good: the device cannot be written, the image has no
    /// journal (ext2) or has read-only-compatible features jbdfs lacks.
    pub(crate) read_only: bool,
    /// Read-only for now (`-o ro`, or `mount -o remount,ro`): nothing is
    /// written until a remount read-write. After a remount the log is
    /// empty; after a read-only mount it is not loaded yet. [atomic]
    pub(crate) remounted_ro: std::sync::atomic::AtomicBool,
    /// The atime options: set at mount, changed by a remount. [its own
    /// lock, a leaf]
    atime: Mutex<super::atime::AtimePolicy>,
    pub(crate) block_size: u32,
    pub(crate) groups: u32,
    /// Free blocks and inodes over all groups, kept in step with the
    /// descriptors so that allocation can honour reserved blocks cheaply.
    pub(crate) free_blocks: AtomicI64,
    pub(crate) free_inodes: AtomicI64,
    /// The orphan chain in memory, oldest first (see orphan.rs).
    pub(crate) orphans: Mutex<Vec<crate::format::InodeNo>>,
    pub(crate) dirsync: bool,
    pub(crate) data_journal: bool,
    /// File data on its way home (data=ordered and data=writeback).
    pub(crate) data: Arc<super::data::DataQueue>,
    /// Truncate tails logged as metadata (see tail.rs).
    pub(crate) logged_tails: super::tail::LoggedTails,
    /// Serialises renames across directories (see rename.rs).
    pub(crate) rename_lock: Mutex<()>,
    /// Shareable xattr blocks (see xattr.rs).
    pub(crate) xattr_share: super::xattr::XattrShare,
    /// The errors= policy and the errors seen (see error.rs).
    pub(crate) errors: Arc<super::error::ErrorState>,
    /// The most blocks one get_blocks/map_blocks call maps (`-o max_map=`).
    pub(crate) max_map: u32,
    /// Per-inode allocation windows and read patterns (see goal.rs).
    pub(crate) reservations: super::balloc::Reservations,
    pub(crate) readahead: super::readahead::ReadPatterns,
    /// POSIX ACLs are on (see acl.rs).
    pub(crate) posix_acl: bool,
}

/// Reads and validates the primary superblock.
pub fn read_superblock(dev: &dyn BlockDevice) -> Result<Superblock> {
    sbm::read_primary(dev.size(), |buf, off| dev.read_at(buf, off)).map_err(|e| match e {
        sbm::ReadError::Io(e) => FsError::Io(e),
        sbm::ReadError::Corrupt(c) => FsError::Corrupt(c),
    })
}

/// Reads the group descriptor table that follows the primary superblock,
/// without judging the descriptors.
pub fn read_group_desc_table(dev: &dyn BlockDevice, sb: &Superblock) -> Result<Vec<GroupDesc>> {
    let bs = sb.block_size() as u64;
    let start = (sb.s_first_data_block as u64 + 1) * bs;
    let len = sb.gdt_blocks() as u64 * bs;
    if start.checked_add(len).is_none_or(|end| end > dev.size()) {
        let err = FormatError::bad_field(
            "superblock",
            "s_blocks_count",
            sb.s_blocks_count,
            "the group descriptor table lies past the end of the device",
        );
        return Err(Corruption::new(Location::Superblock, err).into());
    }
    let mut buf = vec![0u8; len as usize];
    dev.read_at(&mut buf, start)?;
    Ok(
        crate::format::group_desc::parse_table(&buf, sb.group_count())
            .map_err(|e| Corruption::new(Location::GroupDesc(GroupNo(0)), e))?,
    )
}

/// Reads the group descriptor table and checks every descriptor.
pub fn read_group_descs(dev: &dyn BlockDevice, sb: &Superblock) -> Result<Vec<GroupDesc>> {
    let descs = read_group_desc_table(dev, sb)?;
    for (i, d) in descs.iter().enumerate() {
        d.validate(
            sb.s_first_data_block,
            sb.s_blocks_count,
            sb.inode_table_blocks(),
        )
        .map_err(|e| Corruption::new(Location::GroupDesc(GroupNo(i as u32)), e))?;
    }
    Ok(descs)
}

/// Refuses what cannot be mounted at all; returns whether the mount must
/// be read-only for good (besides a read-only device).
fn check_features(sb: &Superblock, read_only: bool) -> Result<bool> {
    let (incompat, ro_compat) = sb.unsupported_features();
    if !incompat.is_empty() {
        tracing::error!(features = %incompat.join(","), "unsupported incompatible features");
        return Err(FsError::NotSupported);
    }
    if !sb.has_compat(feature::COMPAT_HAS_JOURNAL) {
        tracing::warn!("filesystem has no journal (ext2); mounting read-only");
        return Ok(true);
    }
    if !ro_compat.is_empty() {
        if !read_only {
            tracing::warn!(features = %ro_compat.join(","), "unsupported read-only-compatible features; mounting read-only");
        }
        return Ok(true);
    }
    if sb.has_incompat(feature::INCOMPAT_RECOVER) && read_only {
        tracing::warn!("the journal needs recovery; a read-only mount shows the state before it");
    }
    Ok(false)
}

/// A journal error as the mount reports it, logged first (what is
/// unsupported is only named there).
fn recovery_error(what: &str, e: crate::journal::recovery::RecoveryError) -> FsError {
    use crate::journal::recovery::RecoveryError;
    tracing::error!("{what} failed: {e}");
    match e {
        RecoveryError::Io(e) => FsError::Io(e),
        RecoveryError::Corrupt(c) => FsError::Corrupt(c),
        RecoveryError::Unsupported(_) => FsError::NotSupported,
    }
}

/// Replays the journal if a crash left it in use (Linux: ext3_load_journal).
fn recover_if_needed(
    dev: &dyn BlockDevice,
    sb: &Superblock,
    read_only: bool,
) -> Result<Option<Superblock>> {
    if read_only || !sb.has_compat(feature::COMPAT_HAS_JOURNAL) {
        return Ok(None);
    }
    let opts = crate::journal::recovery::RecoverOptions { write: true };
    let report = crate::journal::recovery::recover(dev, opts)
        .map_err(|e| recovery_error("journal recovery", e))?;
    if !report.needed {
        return Ok(None);
    }
    super::error::keep_error_record_after_replay(dev, sb)?;
    tracing::info!(
        transactions = report.transactions,
        blocks = report.blocks_replayed,
        revoked = report.blocks_revoked,
        "recovered the journal"
    );
    Ok(Some(read_superblock(dev)?))
}

/// Explains why [`Filesystem::mount`] refused, for messages to the user.
pub fn refusal_reason(dev: &dyn BlockDevice) -> Option<String> {
    let sb = read_superblock(dev).ok()?;
    let (incompat, _) = sb.unsupported_features();
    if !incompat.is_empty() {
        return Some(format!(
            "unsupported filesystem features: {}",
            incompat.join(", ")
        ));
    }
    None
}

impl Filesystem {
    pub fn mount(dev: Arc<dyn BlockDevice>, config: &MountConfig) -> Result<Arc<Self>> {
        let sb = read_superblock(&*dev)?;
        let for_good = check_features(&sb, config.read_only)? || config.read_only_device;
        let read_only = config.read_only || for_good;
        let sb = recover_if_needed(&*dev, &sb, read_only)?.unwrap_or(sb);
        let descs = read_group_descs(&*dev, &sb)?;
        let free_blocks: i64 = descs.iter().map(|d| d.bg_free_blocks_count as i64).sum();
        let free_inodes: i64 = descs.iter().map(|d| d.bg_free_inodes_count as i64).sum();
        let block_size = sb.block_size();
        sb.check_fits(dev.size())
            .map_err(|e| Corruption::new(Location::Superblock, e))?;
        let data_limit = data_queue_limit(config.cache_size);
        let errors = ErrorState::new(
            config.errors,
            config.panic_action,
            dev.clone(),
            &sb,
            read_only,
        );
        // Metadata (through the cache) and file data reach the device through
        // watches that apply the errors= policy to I/O errors.
        let meta_dev: Arc<dyn BlockDevice> =
            Arc::new(WatchedDevice::new(dev.clone(), errors.clone(), true));
        let dev: Arc<dyn BlockDevice> = Arc::new(WatchedDevice::new(dev, errors.clone(), false));
        let cache = Arc::new(BufferCache::new(
            meta_dev,
            block_size as usize,
            config.cache_size.saturating_sub(data_limit),
        ));
        let order = match config.data {
            DataMode::Writeback => super::data::DataOrder::Writeback,
            DataMode::Ordered | DataMode::Journal => super::data::DataOrder::Ordered,
        };
        let data =
            super::data::DataQueue::start(dev.clone(), block_size as usize, order, data_limit)?;
        let groups = sb.group_count();
        let posix_acl = config
            .acl
            .unwrap_or(sb.s_default_mount_opts & super::acl::EXT3_DEFM_ACL != 0);
        let fs = Arc::new(Filesystem {
            journal: Arc::new(Journal::new(cache.clone())),
            dev,
            cache,
            group_locks: (0..groups).map(|_| Mutex::new(())).collect(),
            inodes: super::inode::InodeCache::default(),
            sb: Mutex::new(sb),
            read_only: for_good,
            remounted_ro: std::sync::atomic::AtomicBool::new(read_only),
            block_size,
            groups,
            free_blocks: AtomicI64::new(free_blocks),
            free_inodes: AtomicI64::new(free_inodes),
            orphans: Mutex::new(Vec::new()),
            rename_lock: Mutex::new(()),
            dirsync: config.dirsync,
            data_journal: config.data == DataMode::Journal && !for_good,
            data,
            logged_tails: Default::default(),
            xattr_share: Default::default(),
            errors,
            max_map: config.max_map.max(1),
            reservations: Default::default(),
            readahead: Default::default(),
            posix_acl,
            atime: Mutex::new(config.atime),
        });
        fs.errors.attach_journal(&fs.journal);
        if fs.data_journal {
            // The data queue's share of cache_size goes unused in
            // data=journal: the commits' frozen copies get it instead.
            fs.journal.set_copy_budget(data_limit);
        }
        fs.readahead.start(Arc::downgrade(&fs))?;
        // Kept for a remount read-write of a read-only mount.
        fs.journal.retune(config.journal);
        if !read_only {
            fs.start_writing()?;
        }
        Ok(fs)
    }

    /// What a read-write mount does before its first operation, and a
    /// read-only mount at its first remount read-write (ext3_remount's
    /// path through ext3_setup_super): start logging, mark the filesystem
    /// in use, free what a crash left orphaned.
    fn start_writing(&self) -> Result<()> {
        if !self.data_journal {
            self.journal.set_commit_flush_hook(self.data.clone());
        }
        self.load_journal(self.journal.config())?;
        self.errors.record_on_disk();
        self.remounted_ro
            .store(false, std::sync::atomic::Ordering::Release);
        self.mark_mounted()?;
        let n = self.orphan_cleanup()?;
        if n > 0 {
            tracing::info!(orphans = n, "freed inodes orphaned by a crash");
        }
        Ok(())
    }

    /// The buffer cache, for its memory figures (tests, statistics).
    pub fn buffer_cache(&self) -> &Arc<BufferCache> {
        &self.cache
    }

    /// The journal (tests drive checkpoints through it).
    pub fn journal(&self) -> &Arc<Journal> {
        &self.journal
    }

    /// The journal's statistics (/proc/fs/jbd2/*/info format).
    pub fn journal_stats(&self) -> String {
        self.journal.stats()
    }

    /// Mounted read-only, or made so by an error (errors=remount-ro).
    pub fn is_read_only(&self) -> bool {
        self.mounted_read_only() || self.errors.is_read_only()
    }

    /// Mounted or remounted read-only (not made so by an error).
    pub(crate) fn mounted_read_only(&self) -> bool {
        self.read_only || self.remounted_ro.load(std::sync::atomic::Ordering::Acquire)
    }

    /// `mount -o remount,ro` or `remount,rw`, as ext3_remount does it.
    /// Read-only: new changes are refused, file data and the superblock
    /// (marked clean) are committed, the log is checkpointed and emptied,
    /// and needs_recovery is cleared, so the image is consistent and clean
    /// while mounted. Read-write: needs_recovery is set again and the
    /// superblock marked in use. A filesystem mounted read-only, or made so
    /// by an error, cannot go read-write.
    pub fn remount(&self, read_only: bool) -> Result<()> {
        use std::sync::atomic::Ordering;
        if read_only == self.mounted_read_only() {
            return Ok(());
        }
        if read_only {
            return self.remount_read_only();
        }
        if self.read_only || self.errors.is_read_only() || !self.journal_usable() {
            return Err(FsError::ReadOnly);
        }
        if !self.journal.is_logging() {
            return self.first_remount_read_write();
        }
        self.sb.lock().s_feature_incompat |= feature::INCOMPAT_RECOVER;
        self.write_superblock_direct()?;
        self.journal.thaw();
        self.remounted_ro.store(false, Ordering::Release);
        self.mark_mounted()
    }

    /// The options a remount may change, as they are now.
    pub fn tunables(&self) -> Tunables {
        Tunables {
            journal: self.journal.config(),
            errors: self.errors.policy(),
            atime: *self.atime.lock(),
        }
    }

    /// A remount's new options, in force from the next commit, error and
    /// access on.
    pub fn retune(&self, t: Tunables) {
        self.journal.retune(t.journal);
        self.errors.set_policy(t.errors);
        *self.atime.lock() = t.atime;
    }

    /// The atime options in force.
    pub fn atime_policy(&self) -> super::atime::AtimePolicy {
        *self.atime.lock()
    }

    fn remount_read_only(&self) -> Result<()> {
        use std::sync::atomic::Ordering;
        self.remounted_ro.store(true, Ordering::Release);
        let done = (|| {
            self.data.drain();
            if let Some(e) = self.data.take_error() {
                return Err(FsError::from(e));
            }
            self.sb.lock().s_state |= sbm::EXT2_VALID_FS;
            let mut h = self.journal.start(1)?;
            self.write_superblock(&mut h)?;
            h.stop()?;
            self.journal.freeze_read_only()?;
            self.sb.lock().s_feature_incompat &= !feature::INCOMPAT_RECOVER;
            self.write_superblock_direct()
        })();
        if done.is_err() {
            self.journal.thaw();
            self.remounted_ro.store(false, Ordering::Release);
        }
        done
    }

    /// A read-only mount goes read-write for the first time. A journal
    /// that still needs recovery (the mount could not replay it) is
    /// refused: replaying now would change blocks under the caches.
    fn first_remount_read_write(&self) -> Result<()> {
        if self.sb.lock().has_incompat(feature::INCOMPAT_RECOVER) {
            tracing::error!(
                "the journal needs recovery: unmount, and mount read-write to replay it"
            );
            return Err(FsError::ReadOnly);
        }
        let done = self.start_writing();
        if done.is_err() {
            self.remounted_ro
                .store(true, std::sync::atomic::Ordering::Release);
        }
        done
    }

    /// Whether the journal can take handles (not aborted by an error).
    fn journal_usable(&self) -> bool {
        !self.journal.is_aborted()
    }

    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    pub fn superblock(&self) -> Superblock {
        self.sb.lock().clone()
    }

    /// Maps the journal inode, checks its superblock and starts logging.
    /// The filesystem is marked as needing recovery on disk before the
    /// first transaction can commit, so that a crash is always replayed.
    fn load_journal(&self, cfg: JournalConfig) -> Result<()> {
        let (inum, bs) = {
            let sb = self.sb.lock();
            if !sb.has_compat(feature::COMPAT_HAS_JOURNAL) {
                return Ok(());
            }
            (InodeNo(sb.s_journal_inum), self.block_size as u64)
        };
        let sb = self.sb.lock().clone();
        let map = crate::journal::jmap::JournalMap::load(&*self.dev, &sb)
            .map_err(|e| recovery_error("loading the journal", e))?
            .blocks()
            .to_vec();
        let at = Location::Inode(inum);
        let first = *map.first().ok_or_else(|| {
            FsError::corrupt(at, "inode", "i_size", 0u32, "the journal has no blocks")
        })?;
        let mut raw = vec![0u8; jbd::JOURNAL_SUPERBLOCK_LEN];
        self.dev.read_at(&mut raw, first as u64 * bs)?;
        let jsb = JournalSuperblock::parse(&raw)
            .map_err(|e| Corruption::new(Location::JournalBlock(0), e))?;
        if jsb.s_blocksize != self.block_size {
            return Err(FsError::corrupt(
                at,
                "journal superblock",
                "s_blocksize",
                jsb.s_blocksize,
                "differs from the filesystem's block size",
            ));
        }
        if jsb.s_start != 0 {
            tracing::error!(
                "the journal holds transactions but the filesystem is not marked for recovery"
            );
            return Err(FsError::NotSupported);
        }
        self.sb.lock().s_feature_incompat |= feature::INCOMPAT_RECOVER;
        self.write_superblock_direct()?;
        self.journal.enable(map, &jsb, cfg)?;
        Ok(())
    }

    /// Writes the in-memory superblock straight to the device and flushes:
    /// only for the recovery flag, which must not wait for the journal.
    fn write_superblock_direct(&self) -> Result<()> {
        let bytes = self.sb.lock().to_bytes();
        self.dev.write_at(&bytes, sbm::SUPERBLOCK_OFFSET)?;
        self.dev.flush()?;
        Ok(())
    }

    /// Clears the valid flag while mounted, as ext3 does, so that a crash
    /// leaves the filesystem marked for checking.
    fn mark_mounted(&self) -> Result<()> {
        let mut h = self.journal.start(1)?;
        {
            let mut sb = self.sb.lock();
            sb.s_state &= !sbm::EXT2_VALID_FS;
            sb.s_mnt_count = sb.s_mnt_count.wrapping_add(1);
            sb.s_mtime = crate::util::now().0 as u32;
        }
        self.write_superblock(&mut h)?;
        h.set_sync();
        h.stop()?;
        Ok(())
    }

    /// Writes the in-memory superblock, with the free counts kept in step
    /// with the group descriptors, into its buffer. Summing the descriptors
    /// instead cost a cache lookup per group on every orphan-list change
    /// (a sixth of an `rm -rf`'s daemon time on a 16 GiB image), and grows
    /// with the filesystem.
    pub(crate) fn write_superblock(&self, h: &mut Handle<'_>) -> Result<()> {
        let (free_blocks, free_inodes) = self.free_counts();
        let bs = self.block_size as u64;
        let block = BlockNo((sbm::SUPERBLOCK_OFFSET / bs) as u32);
        let offset = (sbm::SUPERBLOCK_OFFSET % bs) as usize;
        let buf = self.cache.get(block)?;
        let access = h.get_write_access(&buf)?;
        {
            // Copied into the buffer with the superblock locked, so that
            // two writers cannot leave the older copy (an orphan chain's
            // head, say) in the buffer.
            let mut sb = self.sb.lock();
            sb.s_free_blocks_count = free_blocks;
            sb.s_free_inodes_count = free_inodes;
            sb.s_wtime = crate::util::now().0 as u32;
            self.errors.stamp(&mut sb);
            let bytes = sb.to_bytes();
            access.write()[offset..offset + bytes.len()].copy_from_slice(&bytes);
        }
        Ok(())
    }

    /// Free blocks and inodes over all groups, as the superblock holds
    /// them.
    fn free_counts(&self) -> (u32, u32) {
        let clamp = |n: i64| n.clamp(0, u32::MAX as i64) as u32;
        (
            clamp(self.free_blocks.load(Ordering::Relaxed)),
            clamp(self.free_inodes.load(Ordering::Relaxed)),
        )
    }

    /// Reads group `g`'s descriptor from the cached table.
    pub(crate) fn group_desc(&self, g: GroupNo) -> Result<GroupDesc> {
        let (buf, off) = self.group_desc_buffer(g)?;
        let data = buf.read();
        GroupDesc::parse(&data[off..off + GROUP_DESC_SIZE])
            .map_err(|e| Corruption::new(Location::GroupDesc(g), e).into())
    }

    pub(crate) fn group_desc_buffer(&self, g: GroupNo) -> Result<(Arc<Buffer>, usize)> {
        let (block, off) = self.sb.lock().group_desc_location(g);
        Ok((self.cache.get(block)?, off))
    }

    /// Rewrites group `g`'s descriptor through `h`; the caller holds the
    /// group lock.
    pub(crate) fn update_group_desc(
        &self,
        h: &mut Handle<'_>,
        g: GroupNo,
        f: impl FnOnce(&mut GroupDesc),
    ) -> Result<()> {
        let (buf, off) = self.group_desc_buffer(g)?;
        {
            let mut data = h.modify(&buf)?;
            let mut d = GroupDesc::parse(&data[off..off + GROUP_DESC_SIZE])
                .map_err(|e| Corruption::new(Location::GroupDesc(g), e))?;
            f(&mut d);
            d.write(&mut data[off..off + GROUP_DESC_SIZE]);
        }
        Ok(())
    }

    /// Writes everything home and flushes the device.
    pub fn sync(&self) -> Result<()> {
        // A data write that failed is reported even once the error has
        // made the filesystem read-only: the caller's data is lost.
        self.data.drain();
        if let Some(e) = self.data.take_error() {
            return Err(e.into());
        }
        if !self.is_read_only() {
            let mut h = self.journal.start(1)?;
            self.write_superblock(&mut h)?;
            h.stop()?;
        }
        self.journal.force_commit()?;
        Ok(())
    }

    /// Marks the filesystem clean and writes everything home.
    pub fn unmount(&self) -> Result<()> {
        if self.is_read_only() {
            // After an error the journal is aborted: the log keeps what
            // committed, for recovery; nothing more is written.
            return Ok(());
        }
        self.release_all_orphans()?;
        self.data.shutdown();
        if let Some(e) = self.data.take_error() {
            tracing::error!("file data was lost at unmount: {e}");
        }
        self.sb.lock().s_state |= sbm::EXT2_VALID_FS;
        let mut h = self.journal.start(1)?;
        self.write_superblock(&mut h)?;
        h.stop()?;
        // Commit and checkpoint: the log is empty and everything is home.
        self.journal.shutdown()?;
        let was_logging = {
            let mut sb = self.sb.lock();
            let was = sb.s_feature_incompat & feature::INCOMPAT_RECOVER != 0;
            sb.s_feature_incompat &= !feature::INCOMPAT_RECOVER;
            was
        };
        if was_logging {
            self.write_superblock_direct()?;
        }
        Ok(())
    }

    /// The volume label (`s_volume_name`, e2label's), NUL-padded.
    pub fn volume_name(&self) -> [u8; 16] {
        self.sb.lock().s_volume_name
    }

    /// Sets the volume label (FS_IOC_SETFSLABEL): at most 16 bytes, stored
    /// NUL-padded, through the journal as every superblock change is, and
    /// committed before this returns (e2label's change is durable when it
    /// exits too). Only the primary superblock changes: e2fsck does not
    /// compare the label with the backups.
    pub fn set_volume_name(&self, label: &[u8]) -> Result<()> {
        let mut name = [0u8; 16];
        if label.len() > name.len() {
            return Err(FsError::Invalid("label longer than 16 bytes"));
        }
        if self.is_read_only() {
            return Err(FsError::ReadOnly);
        }
        name[..label.len()].copy_from_slice(label);
        let mut h = self.journal.start(1)?;
        self.sb.lock().s_volume_name = name;
        self.write_superblock(&mut h)?;
        h.set_sync();
        h.stop()?;
        Ok(())
    }

    /// statfs: (blocks, free blocks, available to non-root, inodes, free inodes).
    pub fn statfs(&self) -> Result<StatFs> {
        let (free_blocks, free_inodes) = self.free_counts();
        let sb = self.sb.lock();
        let overhead = self.overhead_blocks(&sb);
        Ok(StatFs {
            block_size: self.block_size,
            blocks: (sb.s_blocks_count as u64).saturating_sub(overhead),
            free_blocks: free_blocks as u64,
            available: (free_blocks as u64).saturating_sub(sb.s_r_blocks_count as u64),
            inodes: sb.s_inodes_count as u64,
            free_inodes: free_inodes as u64,
            name_max: 255,
        })
    }

    /// Blocks taken by static metadata, which statfs leaves out of the total
    /// as ext3's "minixdf"-less default does.
    fn overhead_blocks(&self, sb: &Superblock) -> u64 {
        let per_group = 2 + sb.inode_table_blocks() as u64;
        let backups = (0..self.groups)
            .filter(|&g| sb.group_has_super(GroupNo(g)))
            .count() as u64;
        sb.s_first_data_block as u64
            + self.groups as u64 * per_group
            + backups * (1 + sb.gdt_blocks() as u64 + sb.s_reserved_gdt_blocks as u64)
    }
}

/// What statfs reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatFs {
    pub block_size: u32,
    pub blocks: u64,
    pub free_blocks: u64,
    pub available: u64,
    pub inodes: u64,
    pub free_inodes: u64,
    pub name_max: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::InodeNo;
    use crate::fs::namei::Caller;
    use crate::testing::{memory_fs, BLOCK};

    const ROOT: InodeNo = InodeNo(2);
    const ME: Caller = Caller { uid: 0, gid: 0 };

    /// What the descriptors say is free, summed group by group.
    fn summed(fs: &Filesystem) -> (u32, u32) {
        (0..fs.groups).fold((0, 0), |(b, i), g| {
            let d = fs.group_desc(GroupNo(g)).unwrap();
            (
                b + d.bg_free_blocks_count as u32,
                i + d.bg_free_inodes_count as u32,
            )
        })
    }

    /// The superblock and statfs take their free counts from the running
    /// totals, not from a walk of the descriptors: the totals must follow
    /// every allocation and free, orphans included (an unlinked open file
    /// writes the superblock, and frees its blocks only on release).
    #[test]
    fn the_free_counts_follow_the_descriptors() {
        let (_mem, fs) = memory_fs(24 << 20, &MountConfig::default());
        let (dir, _) = fs.mkdir(ROOT, b"d", 0o755, ME).unwrap();
        let mut files = Vec::new();
        for i in 0..40u32 {
            let name = format!("f{i}");
            let (ino, _) = fs.mknod(dir, name.as_bytes(), 0o100644, 0, ME).unwrap();
            fs.write(ino, 0, &vec![7u8; BLOCK * (1 + i as usize % 14)], true)
                .unwrap();
            files.push((name, ino));
        }
        for (name, ino) in files.iter().step_by(3) {
            fs.unlink(dir, name.as_bytes()).unwrap();
            assert_eq!(fs.free_counts(), summed(&fs), "{name} unlinked, still open");
            fs.release(*ino).unwrap();
        }
        assert_eq!(fs.free_counts(), summed(&fs));
        let st = fs.statfs().unwrap();
        assert_eq!((st.free_blocks as u32, st.free_inodes as u32), summed(&fs));
        fs.sync().unwrap();
        let sb = fs.sb.lock().clone();
        assert_eq!(
            (sb.s_free_blocks_count, sb.s_free_inodes_count),
            summed(&fs)
        );
        fs.unmount().unwrap();
    }
}
