//! jbdfs-testkit: what the workspace's tests share (issue 20), once each.
//!
//! - images: made by jbdfs's mkfs as files ([`jbdfs_image_with`],
//!   [`image_4k`]) or in memory ([`mem_image`], [`small_image`]), and by
//!   mke2fs ([`mke2fs_image`]); scratch files and directories that remove
//!   themselves ([`TempImage`], [`TempDir`]);
//! - an in-process mount, no FUSE ([`mount_mem`], [`mount_mem_data`],
//!   [`mount_file`], [`mount_faulty`]);
//! - the e2fsprogs oracle: [`assert_e2fsck_clean`] (`e2fsck -fn`),
//!   [`assert_mem_clean`], [`assert_repairs_to_clean`], and parsers of
//!   `dumpe2fs` and `debugfs` output;
//! - guards that clean up on drop, also when the test panics: Linux loop
//!   mounts ([`LoopMount`]) and loop devices ([`LoopDevice`]), the jbdfs
//!   daemon as a child process ([`daemon::Daemon`]) and FUSE mounts
//!   ([`daemon::UnmountOnDrop`]);
//! - one seeded generator, [`Rng`] (splitmix64, `jbdfs::util::rng`, which
//!   jbdfs-crash uses too);
//! - [`require!`]: what a test needs from the machine (root, /dev/fuse,
//!   loop devices, tools); a loud skip without it, a failure with
//!   `JBDFS_REQUIRE_ORACLES=1` (see [`require`]).
//!
//! A dev-dependency only (`publish = false`); it does not link the daemon
//! or fuser: the daemon harness runs the `jbdfs` binary.

pub mod cmd;
pub mod crash;
pub mod daemon;
pub mod e2fs;
pub mod fsutil;
pub mod images;
pub mod loopdev;
pub mod require;
pub mod temp;

pub use cmd::{run, Out};
pub use e2fs::*;
pub use fsutil::*;
pub use images::*;
pub use jbdfs::util::rng::{mix, Rng};
pub use loopdev::{loop_mounts_available, LoopDevice, LoopMount, LOOP_LOCK};
pub use require::{is_root, tool};
pub use temp::*;
