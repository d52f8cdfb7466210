//! Mounting and serving: fuser mounts and negotiates FUSE_INIT, then the
//! requests go over io_uring when asked for and granted, or stay on
//! /dev/fuse. Used by the daemon and by examples/fuse_floor.rs, so that
//! the floor measures the same transport.

use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::fuser_adapter::{FuserAdapter, InitWants, MAX_WRITE};
use super::request::Handler;
use super::uring::{self, RingConfig, Rings};

/// The kernel's switch for FUSE over io_uring.
pub const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// How requests reach the daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// read and writev on /dev/fuse, by fuser's workers.
    DevFuse,
    /// FUSE over io_uring with queues set up so; one warning, and
    /// /dev/fuse, when the kernel cannot give it.
    IoUring(RingConfig),
    /// io_uring when the kernel offers it (enable_uring is on), quietly
    /// /dev/fuse when not: the default.
    Auto(RingConfig),
}

/// A mounted session, not yet serving.
pub struct Mounted<H: Handler> {
    session: fuser::Session<FuserAdapter<H>>,
    handler: Arc<H>,
    want_rings: Option<RingConfig>,
    workers: usize,
}

/// What a session is served by, for logs and the stats file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Serving {
    DevFuse { workers: usize },
    IoUring { queues: usize, config: RingConfig },
}

impl std::fmt::Display for Serving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Serving::DevFuse { workers } => write!(f, "/dev/fuse, {workers} workers"),
            Serving::IoUring { queues, config } => write!(
                f,
                "io_uring, {queues} queues, depth {}, poll {}us",
                config.depth,
                config.poll.as_micros()
            ),
        }
    }
}

/// Why io_uring cannot be asked for here, naming what to change.
fn uring_unavailable() -> Option<String> {
    match std::fs::read_to_string(ENABLE_URING) {
        Err(_) => Some(format!(
            "this kernel has no FUSE over io_uring ({ENABLE_URING} is missing; Linux 6.14+ with CONFIG_FUSE_IO_URING)"
        )),
        Ok(v) if !matches!(v.trim(), "Y" | "1") => Some(format!(
            "FUSE over io_uring is disabled ({ENABLE_URING} is {}; root can write 1 to it)",
            v.trim()
        )),
        Ok(_) => uring::rings_available()
            .err()
            .map(|e| format!("this process cannot make io_uring rings: {e}")),
    }
}

/// Mounts `handler` at `mountpoint` and negotiates FUSE_INIT. With
/// [`Transport::IoUring`], FUSE_OVER_IO_URING is asked for when the
/// kernel can give it; otherwise one warning says why, and the session
/// serves over /dev/fuse.
pub fn mount<H: Handler>(
    handler: Arc<H>,
    mountpoint: &Path,
    config: &fuser::Config,
    direct_io: bool,
    transport: Transport,
) -> io::Result<Mounted<H>> {
    let (mut want_rings, asked) = match transport {
        Transport::DevFuse => (None, false),
        Transport::IoUring(config) => (Some(config), true),
        Transport::Auto(config) => (Some(config), false),
    };
    if want_rings.is_some() {
        if let Some(why) = uring_unavailable() {
            match asked {
                true => tracing::warn!("{why}: serving over /dev/fuse"),
                false => tracing::debug!("{why}: serving over /dev/fuse"),
            }
            want_rings = None;
        }
    }
    let wants = InitWants {
        direct_io,
        io_uring: want_rings.is_some(),
    };
    let adapter = FuserAdapter::new(handler.clone(), wants);
    let negotiated = adapter.negotiated();
    let session = fuser::Session::new(adapter, mountpoint, config)?;
    handler.set_kernel_cache(Arc::new(super::fuser_adapter::FuserKernelCache(
        session.notifier(),
    )));
    if want_rings.is_some() && !negotiated.io_uring.load(Ordering::Acquire) {
        let why = "the kernel did not offer FUSE_OVER_IO_URING at FUSE_INIT";
        match asked {
            true => tracing::warn!("{why} ({ENABLE_URING}): serving over /dev/fuse"),
            false => tracing::debug!("{why}: serving over /dev/fuse"),
        }
        want_rings = None;
    }
    Ok(Mounted {
        session,
        handler,
        want_rings,
        workers: config.n_threads.unwrap_or(1),
    })
}

impl<H: Handler> Mounted<H> {
    pub fn unmount_callable(&mut self) -> fuser::SessionUnmounter {
        self.session.unmount_callable()
    }

    /// Starts the rings, if granted: after this, what [`Mounted::serving`]
    /// says is true.
    pub fn start(&mut self) -> io::Result<Option<Rings>> {
        let Some(config) = self.want_rings else {
            return Ok(None);
        };
        let dev = std::os::fd::AsFd::as_fd(&self.session).try_clone_to_owned()?;
        let payload = (MAX_WRITE as usize).max(super::abi::FUSE_MIN_READ_BUFFER);
        let rings = Rings::start(&dev, self.handler.clone(), config, payload)?;
        tracing::info!(
            queues = rings.queues,
            depth = rings.config.depth,
            poll_us = rings.config.poll.as_micros(),
            "serving over io_uring"
        );
        Ok(Some(rings))
    }

    /// The transport the session serves by, once started.
    pub fn serving(&self) -> Serving {
        match self.want_rings {
            Some(config) => Serving::IoUring {
                queues: uring::possible_cpus().unwrap_or(1),
                config: config.clamped(),
            },
            None => Serving::DevFuse {
                workers: self.workers,
            },
        }
    }

    /// Serves until unmounted: fuser's workers read /dev/fuse (every
    /// request, or FORGET and INTERRUPT only when the rings carry the
    /// rest), then the queue threads are joined.
    pub fn run(self, rings: Option<Rings>) -> io::Result<()> {
        let res = self.session.run();
        if let Some(r) = rings {
            r.join();
        }
        res
    }
}
