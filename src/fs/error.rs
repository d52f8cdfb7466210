//! What happens when something goes wrong (Linux: ext3_error and
//! ext3_handle_error in fs/ext3/super.c, ext4's save_error_info): the error
//! is recorded in the superblock (`s_state |= EXT2_ERROR_FS`, the error
//! count and the first and last error's time, inode, block, function and
//! line), and the `errors=` policy is applied:
//!
//! - `continue`: nothing more;
//! - `remount-ro` (the default): the journal is aborted, so the running
//!   transaction never commits and new changes get EROFS; reads go on;
//! - `panic`: as remount-ro, and nothing more is written to the device
//!   after the error record; the daemon exits (a simulated crash).
//!
//! Errors are noticed where they surface: I/O errors by [`WatchedDevice`],
//! which sits between the filesystem and its device, and corruption found
//! while serving a request by [`Filesystem::report_error`].
//!
//! A forced shutdown (ext4's EXT4_IOC_SHUTDOWN, fstests' `godown`) uses
//! the same machinery without recording an error: the journal is aborted
//! and every later device write refused, as errors=panic does, so the
//! image keeps exactly what had committed (see [`Filesystem::shutdown`]).

use std::fmt;
use std::io::{self, IoSlice};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;

use super::FsError;
use crate::device::BlockDevice;
use crate::format::superblock::{self as sbm, Superblock};
use crate::format::Location;
use crate::journal::Journal;

/// What to do when the filesystem finds an inconsistency (`errors=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ErrorsPolicy {
    Continue,
    /// ext3's default: stop writing, keep serving reads.
    #[default]
    RemountRo,
    Panic,
}

impl ErrorsPolicy {
    /// The values `errors=` takes, for a message naming a bad one.
    pub const EXPECTED: &'static str = "continue, remount-ro or panic";

    /// The policy an `errors=` value names, if it names one.
    pub fn from_option(value: &str) -> Option<Self> {
        match value {
            "continue" => Some(Self::Continue),
            "remount-ro" => Some(Self::RemountRo),
            "panic" => Some(Self::Panic),
            _ => None,
        }
    }
}

impl fmt::Display for ErrorsPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Continue => "continue",
            Self::RemountRo => "remount-ro",
            Self::Panic => "panic",
        })
    }
}

/// What `errors=panic` does once the error is recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PanicAction {
    /// Stop writing to the device and keep the process (in-process tests).
    #[default]
    StopWriting,
    /// Stop writing and exit the process at once (the daemon).
    ExitProcess,
}

/// How a forced shutdown treats what is not yet on disk (the kernel's
/// EXT4_GOING_FLAGS_DEFAULT, _LOGFLUSH and _NOLOGFLUSH).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownMode {
    /// Freeze first: file data written, the journal committed and
    /// checkpointed (bdev_freeze), then stop.
    Sync,
    /// Commit the running transaction, then stop (file data the commit does
    /// not wait for is lost).
    FlushLog,
    /// Stop at once: nothing after the last commit survives.
    NoFlush,
}

/// The exit status of a daemon stopped by `errors=panic`.
pub const PANIC_EXIT_STATUS: i32 = 70;

/// One error, as the superblock records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorRecord {
    pub time: u32,
    pub ino: u32,
    pub block: u64,
    pub func: &'static str,
    pub line: u32,
}

struct Recorded {
    count: u32,
    first: Option<ErrorRecord>,
    last: Option<ErrorRecord>,
}

/// The errors= policy of one mount, and the errors seen so far.
pub struct ErrorState {
    /// Set at mount, changed by a remount. [its own lock, a leaf]
    policy: Mutex<ErrorsPolicy>,
    panic_action: PanicAction,
    /// The device below the watch: the error record must reach it even
    /// after writes through the watch are refused.
    raw: Arc<dyn BlockDevice>,
    /// A read-only mount records errors in memory only (ext3 writes
    /// nothing to a read-only filesystem); set at its remount read-write.
    record_on_disk: AtomicBool,
    block_size: u64,
    journal: OnceLock<Weak<Journal>>,
    read_only: AtomicBool,
    /// No device write goes through any more: errors=panic, or a forced
    /// shutdown.
    halted: AtomicBool,
    /// A forced shutdown began: every request fails with EIO until
    /// unmount.
    shut_down: AtomicBool,
    recorded: Mutex<Recorded>,
}

impl ErrorState {
    pub fn new(
        policy: ErrorsPolicy,
        panic_action: PanicAction,
        raw: Arc<dyn BlockDevice>,
        sb: &Superblock,
        read_only: bool,
    ) -> Arc<Self> {
        Arc::new(ErrorState {
            policy: Mutex::new(policy),
            panic_action,
            raw,
            record_on_disk: AtomicBool::new(!read_only),
            block_size: sb.block_size() as u64,
            journal: OnceLock::new(),
            read_only: AtomicBool::new(false),
            halted: AtomicBool::new(false),
            shut_down: AtomicBool::new(false),
            recorded: Mutex::new(Recorded {
                count: sb.s_error_count,
                first: None,
                last: None,
            }),
        })
    }

    /// The journal to abort when the policy says so.
    pub fn attach_journal(&self, journal: &Arc<Journal>) {
        let _ = self.journal.set(Arc::downgrade(journal));
    }

    pub fn policy(&self) -> ErrorsPolicy {
        *self.policy.lock()
    }

    /// A remount's new `errors=`: for errors from now on.
    pub fn set_policy(&self, policy: ErrorsPolicy) {
        *self.policy.lock() = policy;
    }

    /// Whether an error made the filesystem read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only.load(Ordering::Acquire)
    }

    /// Errors from now on are recorded in the superblock too: the mount
    /// has become read-write.
    pub(crate) fn record_on_disk(&self) {
        self.record_on_disk.store(true, Ordering::Release);
    }

    /// Whether `errors=panic` or a forced shutdown stopped all writing.
    pub fn is_halted(&self) -> bool {
        self.halted.load(Ordering::Acquire)
    }

    /// Whether a forced shutdown has begun (ext4_forced_shutdown).
    pub fn is_shut_down(&self) -> bool {
        self.shut_down.load(Ordering::Acquire)
    }

    /// Marks the filesystem shut down; false if it already was.
    fn begin_shutdown(&self) -> bool {
        !self.shut_down.swap(true, Ordering::AcqRel)
    }

    /// The end of a forced shutdown: the journal aborted (the running
    /// transaction never commits, commit waiters get EIO), changes refused,
    /// and every later device write refused, so that nothing reaches the
    /// image after this. No error is recorded: a shutdown is not damage.
    fn halt_after_shutdown(&self) {
        self.read_only.store(true, Ordering::Release);
        if let Some(j) = self.journal.get().and_then(Weak::upgrade) {
            j.abort_new_handles();
        }
        self.halted.store(true, Ordering::Release);
    }

    /// How many errors this filesystem has recorded, over all mounts.
    pub fn error_count(&self) -> u32 {
        self.recorded.lock().count
    }

    /// Records `rec` and applies the policy.
    pub fn report(&self, rec: ErrorRecord) {
        tracing::error!(
            ino = rec.ino,
            block = rec.block,
            func = rec.func,
            policy = %self.policy(),
            "filesystem error"
        );
        {
            let mut r = self.recorded.lock();
            r.count = r.count.saturating_add(1);
            r.first.get_or_insert_with(|| rec.clone());
            r.last = Some(rec);
        }
        if self.policy() == ErrorsPolicy::Panic {
            // Before anything else can reach the device.
            self.halted.store(true, Ordering::Release);
        }
        // The record goes to disk before anyone can see the error (a waiter
        // for a commit wakes as soon as the journal is aborted), so a caller
        // that got EIO or EROFS finds it in the superblock.
        if self.record_on_disk.load(Ordering::Acquire) {
            if let Err(e) = self.write_record() {
                tracing::error!("could not record the error in the superblock: {e}");
            }
        }
        if self.policy() != ErrorsPolicy::Continue {
            if !self.read_only.swap(true, Ordering::AcqRel) {
                tracing::error!("remounting the filesystem read-only");
            }
            if let Some(j) = self.journal.get().and_then(Weak::upgrade) {
                j.abort_new_handles();
            }
        }
        if self.policy() == ErrorsPolicy::Panic {
            tracing::error!("errors=panic: stopping after the error");
            if self.panic_action == PanicAction::ExitProcess {
                std::process::exit(PANIC_EXIT_STATUS);
            }
        }
    }

    /// Stamps the errors seen so far into `sb`.
    pub fn stamp(&self, sb: &mut Superblock) {
        let r = self.recorded.lock();
        let Some(last) = &r.last else { return };
        sb.s_state |= sbm::EXT2_ERROR_FS;
        sb.s_error_count = r.count;
        if sb.s_first_error_time == 0 {
            if let Some(first) = &r.first {
                sb.s_first_error_time = first.time;
                sb.s_first_error_ino = first.ino;
                sb.s_first_error_block = first.block;
                sb.s_first_error_func = func_bytes(first.func);
                sb.s_first_error_line = first.line;
            }
        }
        sb.s_last_error_time = last.time;
        sb.s_last_error_ino = last.ino;
        sb.s_last_error_block = last.block;
        sb.s_last_error_func = func_bytes(last.func);
        sb.s_last_error_line = last.line;
    }

    /// Writes the record straight into the superblock on the device, as
    /// ext3_commit_super does: the journal may be unusable by now. Only
    /// the state and error fields change; everything else stays as the
    /// last checkpoint left it.
    fn write_record(&self) -> io::Result<()> {
        let mut buf = vec![0u8; sbm::SUPERBLOCK_SIZE];
        self.raw.read_at(&mut buf, sbm::SUPERBLOCK_OFFSET)?;
        let mut sb =
            Superblock::parse(&buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        self.stamp(&mut sb);
        self.raw.write_at(&sb.to_bytes(), sbm::SUPERBLOCK_OFFSET)?;
        self.raw.flush()
    }

    /// An I/O error from the device.
    fn device_error(&self, func: &'static str, offset: u64, line: u32) {
        self.report(ErrorRecord {
            time: crate::util::now().0 as u32,
            ino: 0,
            block: offset / self.block_size.max(1),
            func,
            line,
        });
    }
}

fn func_bytes(name: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    let n = name.len().min(32);
    out[..n].copy_from_slice(&name.as_bytes()[..n]);
    out
}

/// The filesystem's view of its device: reports I/O errors to the error
/// state and refuses every write once `errors=panic` has stopped it.
/// Data reads are not reported (a bad data block is the reader's EIO, as in
/// ext3); metadata reads, and every write and flush, are.
pub struct WatchedDevice {
    inner: Arc<dyn BlockDevice>,
    state: Arc<ErrorState>,
    report_reads: bool,
}

impl WatchedDevice {
    pub fn new(inner: Arc<dyn BlockDevice>, state: Arc<ErrorState>, report_reads: bool) -> Self {
        WatchedDevice {
            inner,
            state,
            report_reads,
        }
    }

    fn refuse_if_halted(&self) -> io::Result<()> {
        if self.state.is_halted() {
            Err(io::Error::from_raw_os_error(libc::EIO))
        } else {
            Ok(())
        }
    }
}

impl BlockDevice for WatchedDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let res = self.inner.read_at(buf, offset);
        if res.is_err() && self.report_reads {
            self.state
                .device_error("jbdfs_read_metadata", offset, line!());
        }
        res
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.refuse_if_halted()?;
        let res = self.inner.write_at(buf, offset);
        if res.is_err() {
            self.state
                .device_error("jbdfs_write_block", offset, line!());
        }
        res
    }

    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<()> {
        self.refuse_if_halted()?;
        let res = self.inner.write_vectored_at(bufs, offset);
        if res.is_err() {
            self.state
                .device_error("jbdfs_write_block", offset, line!());
        }
        res
    }

    fn flush(&self) -> io::Result<()> {
        self.refuse_if_halted()?;
        let res = self.inner.flush();
        if res.is_err() {
            self.state.device_error("jbdfs_flush", 0, line!());
        }
        res
    }

    fn size(&self) -> u64 {
        self.inner.size()
    }

    /// Refused once writes are; a failure is the trim's, not an error of
    /// the filesystem (nothing it needs is lost).
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        self.refuse_if_halted()?;
        self.inner.discard(offset, len)
    }
}

impl super::Filesystem {
    /// Applies the errors= policy to an error that a request ended with,
    /// if it is one: corruption (ext3_error). I/O errors were reported by
    /// the device watch already.
    pub fn report_error(&self, err: &FsError, func: &'static str) {
        let (ino, block) = match err {
            FsError::Corrupt(c) => match c.at {
                Location::Inode(i) => (i.0, 0),
                Location::Block(b) => (0, b.0 as u64),
                _ => (0, 0),
            },
            _ => return,
        };
        self.errors.report(ErrorRecord {
            time: crate::util::now().0 as u32,
            ino,
            block,
            func,
            line: line!(),
        });
    }

    /// The errors= state of this mount.
    pub fn error_state(&self) -> &ErrorState {
        &self.errors
    }

    /// A forced shutdown (ext4_force_shutdown): from here until unmount the
    /// filesystem writes nothing more, and the FUSE layer answers every
    /// request with EIO ([`Filesystem::is_shut_down`]). The journal is
    /// aborted, so unmount leaves needs_recovery set and the next mount
    /// replays the log: with [`ShutdownMode::NoFlush`] exactly what had
    /// committed survives, with [`ShutdownMode::FlushLog`] the running
    /// transaction too, and with [`ShutdownMode::Sync`] everything (the
    /// filesystem is frozen first: file data written, the log committed and
    /// checkpointed, needs_recovery cleared, as freeze does). A second
    /// shutdown does nothing. Only a failed freeze is an error, and then
    /// the filesystem is not shut down, as in the kernel.
    pub fn shutdown(&self, mode: ShutdownMode) -> super::Result<()> {
        if self.errors.is_shut_down() {
            return Ok(());
        }
        if mode == ShutdownMode::Sync && !self.is_read_only() {
            self.remount(true)?;
        }
        if !self.errors.begin_shutdown() {
            return Ok(());
        }
        tracing::warn!(?mode, "filesystem shut down");
        if mode == ShutdownMode::FlushLog && !self.is_read_only() {
            if let Err(e) = self.journal().force_commit() {
                tracing::warn!("shutdown: the journal could not be committed: {e}");
            }
        }
        self.errors.halt_after_shutdown();
        Ok(())
    }

    /// Whether a forced shutdown has begun: every request fails with EIO.
    pub fn is_shut_down(&self) -> bool {
        self.errors.is_shut_down()
    }
}

/// Replaying the journal writes home logged superblock copies that predate
/// an error recorded since: put the error record back, as ext4_load_journal
/// does. `before` is the superblock as it was before the replay.
pub(crate) fn keep_error_record_after_replay(
    dev: &dyn BlockDevice,
    before: &Superblock,
) -> super::Result<()> {
    if before.s_state & sbm::EXT2_ERROR_FS == 0 && before.s_error_count == 0 {
        return Ok(());
    }
    let mut after = super::mount::read_superblock(dev)?;
    after.s_state |= before.s_state & sbm::EXT2_ERROR_FS;
    after.s_error_count = before.s_error_count;
    after.s_first_error_time = before.s_first_error_time;
    after.s_first_error_ino = before.s_first_error_ino;
    after.s_first_error_block = before.s_first_error_block;
    after.s_first_error_func = before.s_first_error_func;
    after.s_first_error_line = before.s_first_error_line;
    after.s_last_error_time = before.s_last_error_time;
    after.s_last_error_ino = before.s_last_error_ino;
    after.s_last_error_block = before.s_last_error_block;
    after.s_last_error_func = before.s_last_error_func;
    after.s_last_error_line = before.s_last_error_line;
    dev.write_at(&after.to_bytes(), sbm::SUPERBLOCK_OFFSET)?;
    dev.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::ShutdownMode;
    use crate::device::BlockDevice;
    use crate::format::InodeNo;
    use crate::fs::namei::Caller;
    use crate::fs::{Filesystem, FsError, MountConfig};

    const ROOT: InodeNo = InodeNo(2);
    const ME: Caller = Caller { uid: 0, gid: 0 };

    /// Makes `synced` (fsync'd) and then `late` (not committed), shuts down
    /// with `mode`, and checks that nothing reaches the device afterwards
    /// and that unmount works; returns the names a new mount finds.
    fn after_shutdown(mode: ShutdownMode) -> (bool, bool) {
        let mut cfg = MountConfig::default();
        cfg.journal.commit_interval = std::time::Duration::from_secs(300);
        let (mem, fs) = crate::testing::memory_fs(8 << 20, &cfg);
        let (f, _) = fs.mknod(ROOT, b"synced", 0o100644, 0, ME).unwrap();
        fs.write(f, 0, b"kept", true).unwrap();
        fs.fsync(f, false).unwrap();
        fs.mkdir(ROOT, b"late", 0o755, ME).unwrap();
        fs.shutdown(mode).unwrap();
        assert!(fs.is_shut_down());
        let frozen = mem.snapshot();
        assert!(matches!(
            fs.mkdir(ROOT, b"after", 0o755, ME),
            Err(FsError::ReadOnly)
        ));
        fs.unmount().unwrap();
        drop(fs);
        assert!(
            mem.snapshot() == frozen,
            "{mode:?}: written after the shutdown"
        );
        let dev: Arc<dyn BlockDevice> = mem.clone();
        let fs = Filesystem::mount(dev, &MountConfig::default()).unwrap();
        let synced = fs.lookup(ROOT, b"synced").map(|(ino, _)| ino);
        let late = fs.lookup(ROOT, b"late").is_ok();
        let synced = synced.is_ok_and(|ino| fs.read(ino, 0, 4).unwrap() == b"kept");
        fs.unmount().unwrap();
        (synced, late)
    }

    #[test]
    fn shutdown_keeps_what_each_mode_promises() {
        assert_eq!(after_shutdown(ShutdownMode::Sync), (true, true));
        assert_eq!(after_shutdown(ShutdownMode::FlushLog), (true, true));
        assert_eq!(after_shutdown(ShutdownMode::NoFlush), (true, false));
    }
}
