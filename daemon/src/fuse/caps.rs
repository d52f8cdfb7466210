//! The capabilities of the process behind a FUSE request, for the checks a
//! kernel filesystem makes with capable() (CAP_LINUX_IMMUTABLE for
//! `chattr +i`/`+a`, CAP_FOWNER for a non-owner's flag change,
//! CAP_SYS_ADMIN for the filesystem-wide ioctls).
//!
//! A FUSE request carries only the caller's uid, gid and pid, so the
//! effective set is read from `/proc/PID/status` (`CapEff`), which needs no
//! capget(2) and no unsafe code. Root is not assumed capable: a root
//! process that dropped a capability (`setpriv --bounding-set
//! -linux_immutable`, a container) is refused as the kernel refuses it.

use jbdfs::fs::flags::FlagsCaller;

use super::request::Ctx;

/// include/uapi/linux/capability.h: what ext4 asks of a shutdown, a label
/// change or a trim.
pub(super) const CAP_SYS_ADMIN: u32 = 21;
/// What keeps the set-ID bits through a write or a truncate.
pub(super) const CAP_FSETID: u32 = 4;

/// The `CapEff:` line of a /proc/PID/status text, as a bit set.
pub(super) fn parse_cap_eff(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    let hex = line["CapEff:".len()..].trim();
    u64::from_str_radix(hex, 16).ok()
}

/// The effective capabilities of process `pid` (a FUSE request's pid: the
/// calling thread, which /proc shows too). None when it cannot be read
/// (the caller exited, or lives in a pid namespace the daemon cannot see):
/// the caller then counts as having none.
pub(super) fn effective(pid: u32) -> Option<u64> {
    if pid == 0 {
        return None;
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_cap_eff(&status)
}

/// The request's caller, for the flag and version ioctls.
pub(super) fn flags_caller(ctx: &Ctx) -> FlagsCaller {
    FlagsCaller {
        uid: ctx.uid,
        cap_effective: effective(ctx.pid).unwrap_or(0),
    }
}

/// capable(CAP_SYS_ADMIN) for the request's caller.
pub(super) fn sys_admin(ctx: &Ctx) -> bool {
    flags_caller(ctx).capable(CAP_SYS_ADMIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cap_eff_from_status() {
        let status = "Name:\tchattr\nUid:\t0\t0\t0\t0\nCapInh:\t0000000000000000\n\
                      CapPrm:\t000001ffffffffff\nCapEff:\t000001fffffffdff\n\
                      CapBnd:\t000001ffffffffff\n";
        let eff = parse_cap_eff(status).unwrap();
        assert_eq!(eff, 0x1ff_ffff_fdff);
        assert_eq!(eff & (1 << 9), 0, "CAP_LINUX_IMMUTABLE dropped");
        assert_eq!(parse_cap_eff("Name:\tx\n"), None);
        assert_eq!(parse_cap_eff("CapEff:\tzz\n"), None);
    }

    #[test]
    fn this_process_can_be_read() {
        let pid = std::process::id();
        assert!(effective(pid).is_some());
        assert_eq!(effective(0), None);
    }
}
