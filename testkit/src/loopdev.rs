//! Linux's own ext3 over a loop device: mounts that always unmount and
//! loop devices that always detach.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::cmd::{run, Out};
use crate::temp::TempDir;

/// `Ok` when loop mounts can work here, or the reason they cannot.
pub fn loop_mounts_available() -> Result<(), String> {
    if !crate::require::is_root() {
        return Err("not running as root".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Err("/dev/loop-control does not exist".into());
    }
    let o = run("losetup", ["-f"]);
    if !o.success() {
        return Err(format!("`losetup -f` failed: {}", o.stderr.trim()));
    }
    Ok(())
}

/// Serialises loop mounts within a test binary: concurrent loop device
/// allocation is a source of spurious failures.
pub static LOOP_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// An ext3 loop mount of an image, unmounted on drop. Declare it after the
/// image guard so that it drops first.
pub struct LoopMount {
    pub dir: TempDir,
    mounted: bool,
}

impl LoopMount {
    pub fn mount(image: &Path) -> Result<Self, Out> {
        Self::mount_with(image, "loop")
    }

    /// A mount with these `-o` options (`loop,ro`, ...).
    pub fn mount_with(image: &Path, options: &str) -> Result<Self, Out> {
        let dir = TempDir::new("mnt");
        let o = run(
            "mount",
            [
                OsStr::new("-o"),
                OsStr::new(options),
                OsStr::new("-t"),
                OsStr::new("ext3"),
                image.as_os_str(),
                dir.path.as_os_str(),
            ],
        );
        if !o.success() {
            return Err(o);
        }
        Ok(LoopMount { dir, mounted: true })
    }

    pub fn path(&self) -> &Path {
        &self.dir.path
    }

    /// Unmounts now, reporting failure. "Target is busy" is retried for a
    /// few seconds: on a shared machine another process (a scanner, a
    /// sibling test walking /tmp) may hold the tree for a moment.
    pub fn umount(&mut self) -> Out {
        let mut tries = 0;
        loop {
            let o = run("umount", [self.dir.path.as_os_str()]);
            if o.success() {
                self.mounted = false;
                return o;
            }
            tries += 1;
            if tries >= 30 || !o.stderr.contains("busy") {
                return o;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        if self.mounted {
            let o = self.umount();
            if !o.success() {
                eprintln!("umount failed, detaching lazily:\n{}", o.describe());
                let _ = run("umount", [OsStr::new("-l"), self.dir.path.as_os_str()]);
            }
        }
    }
}

/// A loop device attached to an image file (`losetup --find --show`),
/// detached on drop.
pub struct LoopDevice {
    pub path: PathBuf,
}

impl LoopDevice {
    /// Attaches `image` to a free loop device; Err is losetup's output.
    pub fn attach(image: &Path) -> Result<LoopDevice, Out> {
        let o = run(
            "losetup",
            [
                OsStr::new("--find"),
                OsStr::new("--show"),
                image.as_os_str(),
            ],
        );
        if !o.success() {
            return Err(o);
        }
        Ok(LoopDevice {
            path: PathBuf::from(o.stdout.trim()),
        })
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        // A read-only flag (`blockdev --setro`) outlives the detach and
        // would make the next user of the device read-only.
        let _ = run("blockdev", [OsStr::new("--setrw"), self.path.as_os_str()]);
        let _ = run("losetup", [OsStr::new("-d"), self.path.as_os_str()]);
    }
}
