//! A fault-injection device for tests: passes everything through to an
//! inner device, and fails with EIO the Nth read, write or flush after it
//! is armed (optionally every one from then on, optionally only inside a
//! byte range), as a failing disk would.

use std::io::{self, IoSlice};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::BlockDevice;

/// Which kind of request a fault hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultOp {
    Read,
    Write,
    Flush,
}

/// When to fail: the `nth` request of kind `op` (1 = the next one) counted
/// from when the plan was armed, among those touching `range` if given.
#[derive(Clone, Debug)]
pub struct FaultPlan {
    pub op: FaultOp,
    pub nth: u64,
    /// Keep failing every such request after the first failure.
    pub sticky: bool,
    /// Only requests overlapping these bytes count (flushes always count).
    pub range: Option<Range<u64>>,
}

impl FaultPlan {
    pub fn new(op: FaultOp, nth: u64) -> Self {
        FaultPlan {
            op,
            nth: nth.max(1),
            sticky: false,
            range: None,
        }
    }

    pub fn sticky(mut self) -> Self {
        self.sticky = true;
        self
    }

    pub fn in_range(mut self, range: Range<u64>) -> Self {
        self.range = Some(range);
        self
    }
}

struct Armed {
    plan: FaultPlan,
    seen: u64,
    tripped: bool,
}

/// Passes requests to `inner`, failing those the armed plan names.
pub struct FaultDevice {
    inner: Arc<dyn BlockDevice>,
    armed: Mutex<Option<Armed>>,
    injected: AtomicU64,
}

impl FaultDevice {
    pub fn new(inner: Arc<dyn BlockDevice>) -> Self {
        FaultDevice {
            inner,
            armed: Mutex::new(None),
            injected: AtomicU64::new(0),
        }
    }

    /// Replaces any earlier plan; counting starts now.
    pub fn arm(&self, plan: FaultPlan) {
        *self.armed.lock() = Some(Armed {
            plan,
            seen: 0,
            tripped: false,
        });
    }

    /// Stops injecting faults.
    pub fn disarm(&self) {
        *self.armed.lock() = None;
    }

    /// How many requests have been failed so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    pub fn inner(&self) -> &Arc<dyn BlockDevice> {
        &self.inner
    }

    /// Whether this request must fail; counts it against the plan.
    fn should_fail(&self, op: FaultOp, bytes: Range<u64>) -> bool {
        let mut guard = self.armed.lock();
        let Some(a) = guard.as_mut() else {
            return false;
        };
        if a.plan.op != op {
            return false;
        }
        let overlaps = |r: &Range<u64>| bytes.start < r.end && r.start < bytes.end;
        if op != FaultOp::Flush && !a.plan.range.as_ref().is_none_or(overlaps) {
            return false;
        }
        let fail = if a.tripped {
            a.plan.sticky
        } else {
            a.seen += 1;
            a.seen == a.plan.nth
        };
        if fail {
            a.tripped = true;
            self.injected.fetch_add(1, Ordering::Relaxed);
        }
        fail
    }

    fn check(&self, op: FaultOp, offset: u64, len: usize) -> io::Result<()> {
        if self.should_fail(op, offset..offset.saturating_add(len as u64)) {
            Err(io::Error::from_raw_os_error(libc::EIO))
        } else {
            Ok(())
        }
    }
}

impl BlockDevice for FaultDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check(FaultOp::Read, offset, buf.len())?;
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check(FaultOp::Write, offset, buf.len())?;
        self.inner.write_at(buf, offset)
    }

    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<()> {
        let len = bufs.iter().map(|b| b.len()).sum();
        self.check(FaultOp::Write, offset, len)?;
        self.inner.write_vectored_at(bufs, offset)
    }

    fn flush(&self) -> io::Result<()> {
        self.check(FaultOp::Flush, 0, 0)?;
        self.inner.flush()
    }

    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.discard(offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemoryDevice;

    fn device() -> FaultDevice {
        FaultDevice::new(Arc::new(MemoryDevice::new(1 << 16).unwrap()))
    }

    #[test]
    fn fails_exactly_the_nth_request_of_its_kind() {
        let d = device();
        d.arm(FaultPlan::new(FaultOp::Write, 3));
        let mut b = [0u8; 512];
        d.read_at(&mut b, 0).unwrap();
        d.write_at(&b, 0).unwrap();
        d.write_at(&b, 512).unwrap();
        let e = d.write_at(&b, 1024).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        d.write_at(&b, 1024).unwrap();
        d.flush().unwrap();
        assert_eq!(d.injected(), 1);
    }

    #[test]
    fn sticky_faults_keep_failing() {
        let d = device();
        d.arm(FaultPlan::new(FaultOp::Flush, 2).sticky());
        d.flush().unwrap();
        assert!(d.flush().is_err());
        assert!(d.flush().is_err());
        d.disarm();
        d.flush().unwrap();
        assert_eq!(d.injected(), 2);
    }

    #[test]
    fn a_range_limits_which_requests_count() {
        let d = device();
        d.arm(FaultPlan::new(FaultOp::Read, 1).in_range(4096..8192));
        let mut b = [0u8; 1024];
        d.read_at(&mut b, 0).unwrap();
        d.read_at(&mut b, 3072).unwrap();
        assert!(d.read_at(&mut b, 3584).is_err(), "overlaps the range");
        d.read_at(&mut b, 4096).unwrap();
        let v = [IoSlice::new(&b)];
        d.write_vectored_at(&v, 4096).unwrap();
    }
}
