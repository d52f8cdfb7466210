//! Opening what a user names as an image: a file or block device path, or
//! an NBD URI (`nbd://HOST[:PORT][/EXPORT]`, `nbd+unix:///EXPORT?socket=PATH`).
//! The daemon, mkfs, fsck and jbdfs-crash all come through here, so every
//! place that takes an image takes an export too.

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::nbd::{self, NbdConfig, NbdDevice, NbdUri, TlsClient, TlsSettings};
use super::{BlockDevice, FileDevice, OpenOptions};

/// An image's location.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    Path(PathBuf),
    Nbd(NbdUri),
}

impl Source {
    /// An NBD URI when `s` has an NBD scheme (a malformed one is an error,
    /// not a file name), a path otherwise.
    pub fn parse(s: &OsStr) -> io::Result<Source> {
        match s.to_str() {
            Some(t) if nbd::uri::looks_like_nbd_uri(t) => NbdUri::parse(t)
                .map(Source::Nbd)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e)),
            _ => Ok(Source::Path(PathBuf::from(s))),
        }
    }

    pub fn is_nbd(&self) -> bool {
        matches!(self, Source::Nbd(_))
    }

    /// The path, for a file or block device.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Source::Path(p) => Some(p),
            Source::Nbd(_) => None,
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Path(p) => write!(f, "{}", p.display()),
            Source::Nbd(u) => write!(f, "{u}"),
        }
    }
}

/// How to open a [`Source`].
#[derive(Clone, Debug)]
pub struct SourceOptions {
    /// For files and block devices; `read_only` applies to exports too.
    pub file: OpenOptions,
    /// How long an NBD client retries a lost connection.
    pub nbd_timeout: Duration,
    /// NBD connections to use when the server allows several.
    pub nbd_connections: usize,
    /// TLS credentials for an NBD source (`-o tls-certificates=` and the
    /// rest), over the URI's own; naming credentials asks for TLS even
    /// with an `nbd://` URI.
    pub tls: TlsSettings,
}

impl Default for SourceOptions {
    fn default() -> Self {
        SourceOptions {
            file: OpenOptions::default(),
            nbd_timeout: nbd::DEFAULT_TIMEOUT,
            nbd_connections: 1,
            tls: TlsSettings::default(),
        }
    }
}

impl SourceOptions {
    pub fn new(file: OpenOptions) -> Self {
        SourceOptions {
            file,
            ..Default::default()
        }
    }
}

/// An open image.
pub struct Opened {
    pub device: Arc<dyn BlockDevice>,
    /// Writes will fail: asked for, or an export the server offers only
    /// read-only (the caller decides whether that is an error or a
    /// read-only mount).
    pub read_only: bool,
}

impl Opened {
    /// The device, or an error when it cannot be written although writing
    /// was asked for.
    pub fn writable(self) -> io::Result<Arc<dyn BlockDevice>> {
        if self.read_only {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the NBD server exports it read-only",
            ));
        }
        Ok(self.device)
    }
}

/// Opens a file, block device or NBD export.
pub fn open(source: &Source, opts: &SourceOptions) -> io::Result<Opened> {
    match source {
        Source::Path(p) => Ok(Opened {
            device: Arc::new(FileDevice::open(p, opts.file)?),
            read_only: opts.file.read_only,
        }),
        Source::Nbd(u) => {
            let settings = u.tls_settings.overridden_by(&opts.tls);
            let tls = if u.tls || settings.any() {
                Some(Arc::new(TlsClient::new(&settings)?))
            } else {
                None
            };
            let dev = NbdDevice::connect(NbdConfig {
                address: u.address.clone(),
                export: u.export.clone(),
                timeout: opts.nbd_timeout,
                connections: opts.nbd_connections,
                tls,
            })?;
            let read_only = opts.file.read_only || dev.is_read_only();
            Ok(Opened {
                device: Arc::new(dev),
                read_only,
            })
        }
    }
}

/// [`open`] for a caller that will write: a read-only export is an error.
pub fn open_writable(source: &Source, opts: &SourceOptions) -> io::Result<Arc<dyn BlockDevice>> {
    open(source, opts)?.writable()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_uris() {
        assert_eq!(
            Source::parse(OsStr::new("/tmp/x.img")).unwrap(),
            Source::Path("/tmp/x.img".into())
        );
        // A relative file that merely contains the characters stays a file.
        assert!(!Source::parse(OsStr::new("dir/nbd://x")).unwrap().is_nbd());
        let s = Source::parse(OsStr::new("nbd://127.0.0.1:7/e")).unwrap();
        assert!(s.is_nbd() && s.path().is_none());
        assert_eq!(s.to_string(), "nbd://127.0.0.1:7/e");
        assert!(Source::parse(OsStr::new("nbd+unix:///e")).is_err());
        // Nobody listens there: a quick, clear error.
        let opts = SourceOptions {
            nbd_timeout: Duration::from_secs(1),
            ..Default::default()
        };
        let u = Source::parse(OsStr::new("nbd+unix:///e?socket=/nonexistent/nbd.sock")).unwrap();
        let e = open(&u, &opts).err().unwrap();
        assert!(e.to_string().contains("/nonexistent/nbd.sock"), "{e}");
    }
}
