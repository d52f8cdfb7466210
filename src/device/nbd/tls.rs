//! TLS for the NBD client (`nbds://`, NBD_OPT_STARTTLS): the credentials
//! (X.509 from a qemu/nbdkit certificate directory, or a PSK from an
//! nbdkit/qemu `username:hexkey` file) and a TLS stream that the plain
//! client's protocol code runs on unchanged.
//!
//! The library is OpenSSL (the `openssl` crate): rustls does not do
//! external pre-shared keys, which `nbdkit --tls-psk` and qemu's
//! `tls-creds-psk` use. The TLS engine works on memory buffers, never on
//! the socket: the reader thread reads the socket without a lock and then
//! decrypts, senders encrypt under a short lock and write the socket in
//! order under another, so one side never waits on the other's I/O, as
//! with the plain socket's two handles.

use std::fmt;
use std::io::{self, IoSlice, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openssl::ssl::{
    ErrorCode, SslConnector, SslFiletype, SslMethod, SslStream, SslVerifyMode, SslVersion,
};
use openssl::x509::X509VerifyResult;
use parking_lot::Mutex;

/// What the user asked for: the URI's query or the mount options.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// `tls-certificates=DIR`: ca-cert.pem, and client-cert.pem with
    /// client-key.pem when the server asks for a client certificate.
    pub certificates: Option<PathBuf>,
    /// `tls-psk-file=FILE`: `username:hexkey` lines.
    pub psk_file: Option<PathBuf>,
    /// `tls-username=`: which line of the PSK file (default: the first).
    pub username: Option<String>,
    /// `tls-hostname=`: the name the server's certificate must carry
    /// (default: the URI's host; `localhost` for a Unix socket).
    pub hostname: Option<String>,
}

impl TlsSettings {
    /// Whether any credential is named, which asks for TLS by itself.
    pub fn any(&self) -> bool {
        self.certificates.is_some() || self.psk_file.is_some()
    }

    /// `other`'s fields where it has them, this one's elsewhere.
    pub fn overridden_by(&self, other: &TlsSettings) -> TlsSettings {
        TlsSettings {
            certificates: other.certificates.clone().or(self.certificates.clone()),
            psk_file: other.psk_file.clone().or(self.psk_file.clone()),
            username: other.username.clone().or(self.username.clone()),
            hostname: other.hostname.clone().or(self.hostname.clone()),
        }
    }
}

/// Why TLS could not be set up or did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("TLS: both tls-certificates and tls-psk-file were given; use one")]
    BothCredentials,
    #[error("TLS PSK file {path}: {source}")]
    PskRead { path: PathBuf, source: io::Error },
    #[error("TLS PSK file {path}, line {line}: {why}")]
    PskSyntax {
        path: PathBuf,
        line: usize,
        why: &'static str,
    },
    #[error("TLS PSK file {path}: no key for user {user:?}")]
    PskNoUser { path: PathBuf, user: String },
    #[error("TLS PSK file {path}: no keys")]
    PskEmpty { path: PathBuf },
    #[error("TLS credentials: {what}: {source}")]
    Credentials {
        what: String,
        source: openssl::error::ErrorStack,
    },
    #[error("NBD server's certificate refused ({reason}); expected host name {host:?}, CA {ca}")]
    Verify {
        reason: String,
        host: String,
        ca: String,
    },
    #[error("TLS handshake with the NBD server failed: {0}")]
    Handshake(String),
    #[error("the NBD server does not offer TLS ({0}); an nbds:// export is never used without it")]
    NotOffered(String),
}

impl From<TlsError> for io::Error {
    fn from(e: TlsError) -> io::Error {
        let kind = match &e {
            TlsError::PskRead { source, .. } => source.kind(),
            TlsError::Verify { .. } | TlsError::NotOffered(_) => io::ErrorKind::PermissionDenied,
            TlsError::Handshake(_) => io::ErrorKind::ConnectionAborted,
            _ => io::ErrorKind::InvalidInput,
        };
        io::Error::new(kind, e)
    }
}

/// One line of a PSK file.
struct Psk {
    user: String,
    key: Vec<u8>,
}

/// Reads an nbdkit/qemu PSK file (`username:hexkey` per line, as
/// `psktool` writes them) and picks `user`'s key, or the first.
fn read_psk(path: &Path, user: Option<&str>) -> Result<Psk, TlsError> {
    let text = std::fs::read_to_string(path).map_err(|source| TlsError::PskRead {
        path: path.into(),
        source,
    })?;
    parse_psk(&text, user).map_err(|e| match e {
        PskParse::Syntax(line, why) => TlsError::PskSyntax {
            path: path.into(),
            line,
            why,
        },
        PskParse::NoUser(user) => TlsError::PskNoUser {
            path: path.into(),
            user,
        },
        PskParse::Empty => TlsError::PskEmpty { path: path.into() },
    })
}

#[derive(Debug, PartialEq, Eq)]
enum PskParse {
    Syntax(usize, &'static str),
    NoUser(String),
    Empty,
}

fn parse_psk(text: &str, user: Option<&str>) -> Result<Psk, PskParse> {
    let mut first = None;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, hex) = line
            .split_once(':')
            .ok_or(PskParse::Syntax(i + 1, "not username:hexkey"))?;
        if name.is_empty() || name.len() > 127 {
            return Err(PskParse::Syntax(i + 1, "user name empty or too long"));
        }
        let key = decode_hex(hex).ok_or(PskParse::Syntax(i + 1, "the key is not hex"))?;
        if key.is_empty() || key.len() > 256 {
            return Err(PskParse::Syntax(i + 1, "the key is empty or too long"));
        }
        let psk = Psk {
            user: name.to_string(),
            key,
        };
        match user {
            Some(u) if u == name => return Ok(psk),
            Some(_) => {}
            None if first.is_none() => first = Some(psk),
            None => {}
        }
    }
    match user {
        Some(u) => Err(PskParse::NoUser(u.to_string())),
        None => first.ok_or(PskParse::Empty),
    }
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if b.len() % 2 != 0 {
        return None;
    }
    b.chunks(2)
        .map(|p| {
            let hi = (p[0] as char).to_digit(16)?;
            let lo = (p[1] as char).to_digit(16)?;
            Some((hi * 16 + lo) as u8)
        })
        .collect()
}

/// A TLS client set up once (certificates and keys read, the PSK file
/// parsed) and used for every connection and reconnection.
pub struct TlsClient {
    connector: SslConnector,
    /// The PSK user, when the credentials are a PSK (no certificates).
    psk_user: Option<String>,
    /// The CA the server's certificate must chain to, for messages.
    ca: String,
    hostname: Option<String>,
}

impl fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsClient")
            .field("psk_user", &self.psk_user)
            .field("ca", &self.ca)
            .field("hostname", &self.hostname)
            .finish_non_exhaustive()
    }
}

fn creds<T>(
    what: impl Into<String>,
    r: Result<T, openssl::error::ErrorStack>,
) -> Result<T, TlsError> {
    r.map_err(|source| TlsError::Credentials {
        what: what.into(),
        source,
    })
}

impl TlsClient {
    pub fn new(s: &TlsSettings) -> Result<TlsClient, TlsError> {
        if s.certificates.is_some() && s.psk_file.is_some() {
            return Err(TlsError::BothCredentials);
        }
        let mut b = creds(
            "setting up TLS",
            SslConnector::builder(SslMethod::tls_client()),
        )?;
        creds(
            "TLS 1.2 at least",
            b.set_min_proto_version(Some(SslVersion::TLS1_2)),
        )?;
        let mut psk_user = None;
        let mut ca = "the system's".to_string();
        if let Some(path) = &s.psk_file {
            let psk = read_psk(path, s.username.as_deref())?;
            psk_user = Some(psk.user.clone());
            ca = "none (PSK)".into();
            // The connector's default list leaves PSK out.
            creds(
                "PSK cipher suites",
                b.set_cipher_list("ECDHE-PSK:DHE-PSK:PSK:!aNULL:!eNULL:!MD5:!3DES:!RC4"),
            )?;
            b.set_verify(SslVerifyMode::NONE);
            b.set_psk_client_callback(move |_ssl, _hint, identity, key| {
                let id = psk.user.as_bytes();
                // The identity is a C string.
                if id.len() >= identity.len() || psk.key.len() > key.len() {
                    return Err(openssl::error::ErrorStack::get());
                }
                identity[..id.len()].copy_from_slice(id);
                identity[id.len()] = 0;
                key[..psk.key.len()].copy_from_slice(&psk.key);
                Ok(psk.key.len())
            });
        } else if let Some(dir) = &s.certificates {
            let ca_file = dir.join("ca-cert.pem");
            if !ca_file.exists() {
                return Err(TlsError::Credentials {
                    what: format!("{} is missing", ca_file.display()),
                    source: openssl::error::ErrorStack::get(),
                });
            }
            creds(
                format!("reading {}", ca_file.display()),
                b.set_ca_file(&ca_file),
            )?;
            ca = ca_file.display().to_string();
            let cert = dir.join("client-cert.pem");
            if cert.exists() {
                let key = dir.join("client-key.pem");
                creds(
                    format!("reading {}", cert.display()),
                    b.set_certificate_chain_file(&cert),
                )?;
                creds(
                    format!("reading {}", key.display()),
                    b.set_private_key_file(&key, SslFiletype::PEM),
                )?;
                creds("the client key and certificate", b.check_private_key())?;
            }
        } else {
            creds("the system's CA certificates", b.set_default_verify_paths())?;
        }
        Ok(TlsClient {
            connector: b.build(),
            psk_user,
            ca,
            hostname: s.hostname.clone(),
        })
    }

    /// The host name a certificate must name: `tls-hostname`, else `host`.
    fn name_for<'a>(&'a self, host: &'a str) -> &'a str {
        self.hostname.as_deref().unwrap_or(host)
    }

    /// Runs the TLS handshake over `raw` (after the server acknowledged
    /// NBD_OPT_STARTTLS); `host` is the URI's host (`localhost` for a
    /// Unix socket).
    pub fn connect<S: Read + Write>(&self, raw: S, host: &str) -> Result<TlsStream<S>, TlsError> {
        let name = self.name_for(host).to_string();
        let mut cfg = creds("TLS connection", self.connector.configure())?;
        if self.psk_user.is_some() {
            cfg.set_verify_hostname(false);
            cfg.set_use_server_name_indication(false);
        }
        let ssl = creds("TLS connection", cfg.into_ssl(&name))?;
        let ssl = creds("TLS connection", SslStream::new(ssl, Bio::default()))?;
        let mut t = TlsStream {
            shared: Arc::new(Shared {
                ssl: Mutex::new(ssl),
                wire: Mutex::new(()),
            }),
            raw,
        };
        loop {
            let mut ssl = t.shared.ssl.lock();
            let r = ssl.connect();
            let out = std::mem::take(&mut ssl.get_mut().outbound);
            drop(ssl);
            let sent = t.raw.write_all(&out).and_then(|_| t.raw.flush());
            match r {
                Ok(()) => {
                    sent.map_err(|e| TlsError::Handshake(e.to_string()))?;
                    return Ok(t);
                }
                Err(e) if e.code() == ErrorCode::WANT_READ => {
                    sent.map_err(|e| TlsError::Handshake(e.to_string()))?;
                    let more = t.fill().map_err(|e| match e.kind() {
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                            TlsError::Handshake("the server stopped answering".into())
                        }
                        _ => TlsError::Handshake(e.to_string()),
                    })?;
                    if !more {
                        let hint = self.hint();
                        return Err(TlsError::Handshake(format!("the server hung up{hint}")));
                    }
                }
                Err(e) => return Err(self.why_failed(&t, e, name)),
            }
        }
    }

    fn why_failed<S>(&self, t: &TlsStream<S>, e: openssl::ssl::Error, host: String) -> TlsError {
        let v = t.shared.ssl.lock().ssl().verify_result();
        if v != X509VerifyResult::OK {
            return TlsError::Verify {
                reason: v.error_string().to_string(),
                host,
                ca: self.ca.clone(),
            };
        }
        let detail = match (e.ssl_error(), e.io_error()) {
            (Some(s), _) => s.to_string(),
            (None, Some(io)) => io.to_string(),
            _ => format!("{e}"),
        };
        TlsError::Handshake(format!("{detail}{}", self.hint()))
    }

    /// What to check when a PSK handshake fails.
    fn hint(&self) -> String {
        match &self.psk_user {
            Some(u) => format!(" (is the key for user {u:?} the one the server has?)"),
            None => String::new(),
        }
    }
}

/// The TLS engine's side of the wire: bytes received and not yet
/// decrypted, and bytes encrypted and not yet sent.
#[derive(Default)]
struct Bio {
    inbound: Vec<u8>,
    pos: usize,
    outbound: Vec<u8>,
}

impl Read for Bio {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let have = &self.inbound[self.pos..];
        if have.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = have.len().min(buf.len());
        buf[..n].copy_from_slice(&have[..n]);
        self.pos += n;
        if self.pos == self.inbound.len() {
            self.inbound.clear();
            self.pos = 0;
        }
        Ok(n)
    }
}

impl Write for Bio {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.outbound.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

struct Shared {
    ssl: Mutex<SslStream<Bio>>,
    /// Held while encrypted bytes go onto the socket, taken before `ssl`
    /// is let go so that records reach the wire in the order made.
    wire: Mutex<()>,
}

/// One handle on a TLS session over the socket handle `raw`; handles made
/// with [`TlsStream::with_raw`] share the session, one reading and others
/// writing, as the plain client uses its socket's clones.
pub struct TlsStream<S> {
    shared: Arc<Shared>,
    raw: S,
}

impl<S> TlsStream<S> {
    pub fn raw(&self) -> &S {
        &self.raw
    }

    /// Another handle on the same session, over another handle on the
    /// same socket.
    pub fn with_raw<T>(&self, raw: T) -> TlsStream<T> {
        TlsStream {
            shared: self.shared.clone(),
            raw,
        }
    }
}

impl<S: Read + Write> TlsStream<S> {
    /// Reads what the socket has into the engine; `Ok(false)` at the end.
    fn fill(&mut self) -> io::Result<bool> {
        let mut buf = vec![0u8; 64 * 1024];
        let n = loop {
            match self.raw.read(&mut buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => break r?,
            }
        };
        if n == 0 {
            return Ok(false);
        }
        self.shared
            .ssl
            .lock()
            .get_mut()
            .inbound
            .extend_from_slice(&buf[..n]);
        Ok(true)
    }

    /// Sends what the engine made, keeping the order (see `Shared`).
    fn send(&mut self, mut ssl: parking_lot::MutexGuard<'_, SslStream<Bio>>) -> io::Result<()> {
        let out = std::mem::take(&mut ssl.get_mut().outbound);
        if out.is_empty() {
            return Ok(());
        }
        let _wire = self.shared.wire.lock();
        drop(ssl);
        self.raw.write_all(&out)
    }
}

fn tls_io_error(e: openssl::ssl::Error) -> io::Error {
    match e.into_io_error() {
        Ok(io) => io,
        Err(e) => io::Error::new(io::ErrorKind::InvalidData, format!("TLS: {e}")),
    }
}

impl<S: Read + Write> Read for TlsStream<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            let mut ssl = self.shared.ssl.lock();
            match ssl.ssl_read(buf) {
                Ok(n) => {
                    // A post-handshake answer (a key update) goes with the
                    // next request if a sender has the wire now.
                    if !ssl.get_ref().outbound.is_empty() {
                        if let Some(_wire) = self.shared.wire.try_lock() {
                            let out = std::mem::take(&mut ssl.get_mut().outbound);
                            drop(ssl);
                            self.raw.write_all(&out)?;
                        }
                    }
                    return Ok(n);
                }
                Err(e) if e.code() == ErrorCode::WANT_READ => {
                    drop(ssl);
                    if !self.fill()? {
                        return Ok(0);
                    }
                }
                Err(e) if e.code() == ErrorCode::ZERO_RETURN => return Ok(0),
                Err(e) => return Err(tls_io_error(e)),
            }
        }
    }
}

impl<S: Read + Write> Write for TlsStream<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    /// Encrypts every slice and sends the records in one write.
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let shared = self.shared.clone();
        let mut ssl = shared.ssl.lock();
        let mut total = 0;
        for b in bufs {
            let mut at = 0;
            while at < b.len() {
                match ssl.ssl_write(&b[at..]) {
                    Ok(n) => at += n,
                    Err(e) => return Err(tls_io_error(e)),
                }
            }
            total += b.len();
        }
        self.send(ssl)?;
        Ok(total)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.raw.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psk_files_as_psktool_writes_them() {
        let text = "# keys\nalice:0123456789abcdef\n\nbob:00FF\n";
        let a = parse_psk(text, None).unwrap();
        assert_eq!(a.user, "alice");
        assert_eq!(a.key, vec![0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]);
        assert_eq!(parse_psk(text, Some("bob")).unwrap().key, vec![0, 255]);
        assert_eq!(
            parse_psk(text, Some("carol")).err(),
            Some(PskParse::NoUser("carol".into()))
        );
        assert_eq!(parse_psk("\n# none\n", None).err(), Some(PskParse::Empty));
        for bad in ["alice", ":00", "a:0", "a:zz", "a:"] {
            assert!(parse_psk(bad, None).is_err(), "{bad}");
        }
    }

    #[test]
    fn credentials_are_checked_when_set_up() {
        let both = TlsSettings {
            certificates: Some("/c".into()),
            psk_file: Some("/p".into()),
            ..Default::default()
        };
        assert!(matches!(
            TlsClient::new(&both),
            Err(TlsError::BothCredentials)
        ));
        let missing = TlsSettings {
            psk_file: Some("/nonexistent/keys.psk".into()),
            ..Default::default()
        };
        let e = io::Error::from(TlsClient::new(&missing).unwrap_err());
        assert!(e.to_string().contains("/nonexistent/keys.psk"), "{e}");
        let no_ca = TlsSettings {
            certificates: Some("/nonexistent".into()),
            ..Default::default()
        };
        let e = TlsClient::new(&no_ca).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/ca-cert.pem is missing"), "{e}");
    }
}
