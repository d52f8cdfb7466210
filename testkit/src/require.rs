//! What a test needs from the machine, and what happens without it.
//!
//! `require!(root, fuse, loop, e2fsprogs, "setfacl")` at the top of a test
//! checks each facility; when one is missing the test prints a loud line
//! to stderr (past libtest's capture) naming itself and what is missing,
//! and returns: a skip, green but seen. With `JBDFS_REQUIRE_ORACLES=1` in
//! the environment (scripts/test.sh sets it; so does `CI`, as before), a
//! missing facility is a failure instead: the test panics with that
//! message. `available!(...)` is the same check as a `bool`, for the part
//! of a test that needs more than the rest (the Linux half of a test).
//!
//! Facilities: `root`; `fuse` (/dev/fuse, as root); `loop` (loop mounts:
//! root, /dev/loop-control and a free loop device); `e2fsprogs` (mke2fs,
//! e2fsck, debugfs, dumpe2fs); `"tool"` (a program on PATH or in
//! /sbin, /usr/sbin); and `(Need::That(ok, "what"))` for anything else.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The environment variable that turns a missing facility into a failure.
pub const REQUIRE_ENV: &str = "JBDFS_REQUIRE_ORACLES";

/// One thing a test needs.
#[derive(Clone, Debug)]
pub enum Need {
    /// Running as root.
    Root,
    /// FUSE mounts: /dev/fuse, as root.
    Fuse,
    /// ext3 loop mounts: root, /dev/loop-control, a free loop device.
    Loop,
    /// mke2fs, e2fsck, debugfs and dumpe2fs.
    E2fsprogs,
    /// A program, on PATH or in /sbin, /usr/sbin, /bin, /usr/bin.
    Tool(&'static str),
    /// A file that must exist (a tarball, a device).
    File(PathBuf),
    /// Anything else: whether it holds, and what it is.
    That(bool, String),
}

/// Whether this process runs as root, from /proc/self/status.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// Where `name` is installed: PATH first, then the sbin and bin
/// directories (e2fsprogs lives in /sbin, outside a user's PATH).
pub fn tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/sbin", "/usr/sbin", "/bin", "/usr/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Why `need` is not met here, or None when it is.
pub fn missing(need: &Need) -> Option<String> {
    match need {
        Need::Root => (!is_root()).then(|| "not running as root".to_string()),
        Need::Fuse => {
            if !Path::new("/dev/fuse").exists() {
                Some("no /dev/fuse (FUSE tests need root and /dev/fuse)".into())
            } else if !is_root() {
                Some("not root (FUSE tests need root and /dev/fuse)".into())
            } else {
                None
            }
        }
        Need::Loop => crate::loopdev::loop_mounts_available()
            .err()
            .map(|why| format!("no loop mounts: {why}")),
        Need::E2fsprogs => ["mke2fs", "e2fsck", "debugfs", "dumpe2fs"]
            .into_iter()
            .find(|t| tool(t).is_none())
            .map(|t| format!("{t} (e2fsprogs) is not installed")),
        Need::Tool(t) => tool(t).is_none().then(|| format!("{t} is not installed")),
        Need::File(p) => (!p.exists()).then(|| format!("{} does not exist", p.display())),
        Need::That(ok, what) => (!ok).then(|| what.clone()),
    }
}

/// Whether a missing facility fails the test: `JBDFS_REQUIRE_ORACLES=1`,
/// or `CI` set (as the tests have always done under CI).
pub fn oracles_required() -> bool {
    std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1") || std::env::var_os("CI").is_some()
}

/// The running test's name: libtest names each test's thread after it.
pub fn test_name() -> String {
    std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .unwrap_or("this test")
        .to_string()
}

/// A missing facility: panics when [`oracles_required`], else says so
/// loudly on stderr. `part` names what is skipped when it is not the whole
/// test.
pub fn skip(test: &str, part: Option<&str>, why: &str) {
    let what = match part {
        Some(p) => format!("{test} ({p})"),
        None => test.to_string(),
    };
    if oracles_required() {
        panic!(
            "{what} cannot run: {why}; {REQUIRE_ENV}=1 (or CI) is set, so this is a \
             failure, not a skip (scripts/deps.sh installs what is missing)"
        );
    }
    // Straight to stderr: libtest captures eprintln! of passing tests.
    let _ = writeln!(
        std::io::stderr(),
        "\n!!!!!!!! SKIP {what}: {why} (with {REQUIRE_ENV}=1 this fails; \
         scripts/deps.sh installs what is missing)\n"
    );
}

/// A test (or part) that does not run in this pass by design, not for a
/// missing facility (a test only the io_uring pass runs): said as loudly
/// as a skip, and never a failure.
pub fn not_this_pass(test: &str, why: &str) {
    let _ = writeln!(
        std::io::stderr(),
        "\n!!!!!!!! SKIP {test} in this pass: {why}\n"
    );
}

/// Whether every need is met; at the first that is not, [`skip`] (which
/// panics when oracles are required) and false.
pub fn met(needs: &[Need]) -> bool {
    met_part(None, needs)
}

/// [`met`] for a part of the test, named in the message.
pub fn met_part(part: Option<&str>, needs: &[Need]) -> bool {
    for n in needs {
        if let Some(why) = missing(n) {
            skip(&test_name(), part, &why);
            return false;
        }
    }
    true
}

/// Returns from the test (a loud skip, or a panic with
/// `JBDFS_REQUIRE_ORACLES=1`) unless every facility is here; see the
/// module documentation.
#[macro_export]
macro_rules! require {
    ($($need:tt),+ $(,)?) => {
        if !$crate::require::met(&[$($crate::__need!($need)),+]) {
            return;
        }
    };
}

/// Whether every facility is here, as a `bool`; a missing one skips
/// loudly (or fails) only the part of the test named by the first
/// argument: `if available!("the Linux half"; loop) { ... }`.
#[macro_export]
macro_rules! available {
    ($part:expr; $($need:tt),+ $(,)?) => {
        $crate::require::met_part(Some($part), &[$($crate::__need!($need)),+])
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __need {
    (root) => {
        $crate::require::Need::Root
    };
    (fuse) => {
        $crate::require::Need::Fuse
    };
    (loop) => {
        $crate::require::Need::Loop
    };
    (e2fsprogs) => {
        $crate::require::Need::E2fsprogs
    };
    ($tool:literal) => {
        $crate::require::Need::Tool($tool)
    };
    (($need:expr)) => {
        $need
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needs_a_missing_tool(reached: &mut bool) {
        crate::require!(root, "jbdfs-no-such-tool");
        *reached = true;
    }

    #[test]
    fn a_missing_facility_skips_or_fails_as_the_environment_says() {
        let why = missing(&Need::Tool("jbdfs-no-such-tool")).expect("missing");
        assert!(why.contains("jbdfs-no-such-tool"), "{why}");
        assert!(missing(&Need::That(true, "holds".into())).is_none());
        assert!(tool("sh").is_some());
        let mut reached = false;
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            needs_a_missing_tool(&mut reached)
        }));
        // Skipped (returned early) by default; a panic when required.
        assert_eq!(run.is_err(), oracles_required());
        assert!(!reached, "the test body ran without its tool");
    }
}
