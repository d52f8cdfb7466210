//! The jbdfs daemon: everything between the kernel's FUSE protocol and the
//! filesystem library (the `jbdfs` crate, which knows nothing of FUSE).
//!
//! - [`options`]: the `-o` mount-option model and parser;
//! - [`daemon`]: opening the device, mounting, serving, signals, unmounting;
//! - [`fuse`]: the FUSE adapter, requests to `jbdfs::fs` calls;
//! - [`utab`]: the line in /run/mount/utab that lets umount(8) wait;
//! - [`remount`]: `mount -o remount,ro|rw` of a running mount.

pub mod daemon;
pub mod fuse;
pub mod options;
pub mod remount;
pub mod utab;
