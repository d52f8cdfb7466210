//! The FUSE side of the daemon: one [`Handler`] (what each operation does,
//! [`handler::JbdFuse`]) behind two transports that only carry bytes:
//!
//! - [`fuser_adapter`]: fuser's session on /dev/fuse, which also mounts,
//!   negotiates FUSE_INIT and carries FORGET and INTERRUPT on every
//!   transport;
//! - [`uring`]: FUSE over io_uring (Linux 6.14+, `enable_uring`), one ring
//!   and one thread per CPU, with its own codec ([`abi`]).
//!
//! [`session`] chooses between them at mount time. Errors become errno in
//! one place ([`handler::errno`]); each request gets a tracing span in the
//! handler's dispatch.

pub mod abi;
mod attr;
mod caps;
pub mod fuser_adapter;
pub mod handler;
pub mod ioctl;
pub mod request;
mod runners;
pub mod session;
pub mod uring;

pub use fuser_adapter::{FuserAdapter, InitWants, MAX_WRITE, WANTED_INIT_FLAGS};
pub use handler::{errno, JbdFuse};
pub use request::{Answer, Ctx, Handler, Op, Outcome, Responder};
pub use session::{Mounted, Transport};
