//! Access times, as ext3 keeps them under relatime (the default),
//! strictatime, noatime and nodiratime.
//!
//! Over FUSE the kernel marks every inode S_NOATIME and leaves atime to the
//! filesystem; and with the page cache kept across opens, most reads never
//! reach it. So the daemon counts an open for reading (and a directory's
//! opendir) as the access: touch_atime's rules applied then. When an open
//! moved atime, the FUSE layer tells the kernel its cached attributes are
//! stale (the pages stay cached).
//! See docs/ARCHITECTURE.md ("Access times").

use crate::format::inode::{flags, Timestamp};
use crate::format::InodeNo;

use super::{Filesystem, Result};

/// How accesses move atime (the mount's atime options).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AtimeMode {
    /// `relatime`: only when atime is not newer than mtime and ctime, or
    /// is a day old (the kernel's relatime_need_update).
    #[default]
    Relatime,
    /// `strictatime`: on every access.
    Strict,
    /// `noatime`: never.
    Never,
}

/// The mount's atime policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AtimePolicy {
    pub mode: AtimeMode,
    /// `nodiratime`: directories' atime never moves.
    pub nodiratime: bool,
}

/// relatime's "a day old" bound, in seconds.
const RELATIME_MAX_AGE: i64 = 24 * 60 * 60;

impl AtimePolicy {
    /// Whether an access at `now` moves an atime of `atime` (the kernel's
    /// atime_needs_update and relatime_need_update).
    fn needs_update(
        &self,
        is_dir: bool,
        (atime, mtime, ctime): (Timestamp, Timestamp, Timestamp),
        now: Timestamp,
    ) -> bool {
        // The kernel's clock is coarse: an access in the same tick as the
        // last one changes nothing (atime_needs_update's equality test).
        if (is_dir && self.nodiratime) || atime == now {
            return false;
        }
        match self.mode {
            AtimeMode::Never => false,
            AtimeMode::Strict => true,
            AtimeMode::Relatime => {
                atime <= mtime || atime <= ctime || now.sec - atime.sec >= RELATIME_MAX_AGE
            }
        }
    }
}

impl Filesystem {
    /// Applies an access to `ino` under `policy`; returns whether atime
    /// moved. Nothing is written on a read-only filesystem, or for an inode
    /// with the noatime flag (chattr +A).
    pub fn touch_atime(&self, ino: InodeNo, policy: AtimePolicy) -> Result<bool> {
        if self.is_read_only() || policy.mode == AtimeMode::Never {
            return Ok(false);
        }
        let inode = self.iget(ino)?;
        let now = super::now();
        {
            let st = inode.state.read();
            let d = &st.disk;
            let times = (d.i_atime, d.i_mtime, d.i_ctime);
            let no_atime = d.i_flags & flags::EXT2_NOATIME_FL != 0;
            if no_atime || !policy.needs_update(d.is_dir(), times, now) {
                return Ok(false);
            }
        }
        let mut st = inode.state.write();
        let mut h = self.journal.start(1)?;
        st.disk.i_atime = now;
        let res = self.write_inode(&mut h, ino, &st.disk);
        let stop = h.stop();
        res?;
        stop?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(sec: i64) -> Timestamp {
        Timestamp { sec, nsec: 0 }
    }

    #[test]
    fn relatime_moves_atime_once_after_each_change_and_daily() {
        let p = AtimePolicy::default();
        // Written at 100, not read since: the first read moves atime.
        assert!(p.needs_update(false, (t(100), t(100), t(100)), t(105)));
        // Read at 105: a second read does not.
        assert!(!p.needs_update(false, (t(105), t(100), t(100)), t(110)));
        // A day later it does.
        assert!(p.needs_update(false, (t(105), t(100), t(100)), t(105 + 86_400)));
        // Changed at 120 (ctime): the next read does.
        assert!(p.needs_update(false, (t(105), t(100), t(120)), t(130)));
        // In the same clock tick as the write: nothing to change.
        assert!(!p.needs_update(false, (t(100), t(100), t(100)), t(100)));
    }

    #[test]
    fn strict_noatime_and_nodiratime() {
        let strict = AtimePolicy {
            mode: AtimeMode::Strict,
            nodiratime: true,
        };
        assert!(strict.needs_update(false, (t(105), t(100), t(100)), t(110)));
        assert!(!strict.needs_update(true, (t(1), t(100), t(100)), t(110)));
        let never = AtimePolicy {
            mode: AtimeMode::Never,
            nodiratime: false,
        };
        assert!(!never.needs_update(false, (t(1), t(100), t(100)), t(110)));
    }
}
