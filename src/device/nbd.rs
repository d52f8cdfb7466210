//! A userspace NBD client as a [`BlockDevice`], for images on NBD exports
//! (qemu-nbd, nbdkit, nbd-server) where the kernel's nbd client is not
//! available.
//!
//! Many requests are in flight at once on one connection: callers send
//! under one writer lock, and a reader thread hands each reply to the
//! caller waiting on its cookie. A connection that drops is replaced
//! (reconnect with backoff, fresh handshake) for up to `timeout`, and what
//! was in flight is sent again (reads and writes are idempotent). A
//! connection on which a request has waited `timeout` for its reply (a
//! server that stopped answering) counts as dropped too. With
//! `CAN_MULTI_CONN` several connections may be used, as one set that is
//! replaced as a whole.
//!
//! Durability across reconnects: a server may lose writes it acknowledged
//! but had not yet flushed when its connection (or the server) died. So
//! every write acknowledged since the last successful FLUSH is kept (its
//! data, newest version of each byte range) and sent again on the new
//! connection before anyone else may use it; a FLUSH succeeds only on the
//! connection on which those writes were last acknowledged. Keeping them
//! costs memory, so past [`UNFLUSHED_LIMIT`] bytes a write flushes.

pub mod proto;
pub mod tls;
pub mod uri;

use std::collections::{BTreeMap, HashMap};
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};

pub use proto::ExportInfo;
pub use tls::{TlsClient, TlsSettings};
pub use uri::NbdUri;

use super::BlockDevice;

/// How long a dropped connection is retried by default (`-o nbd_timeout`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Bytes of acknowledged but unflushed writes kept for resending before a
/// write flushes on its own to bound the memory.
pub const UNFLUSHED_LIMIT: usize = 64 << 20;

/// Where the server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NbdAddress {
    Tcp { host: String, port: u16 },
    Unix(PathBuf),
}

impl NbdAddress {
    /// For a Unix socket that a connect found missing: what this process
    /// sees of the path, its directory and its mount namespace, so that a
    /// log tells a socket that is gone from one seen differently from here.
    fn seen_from_here(&self, e: &io::Error) -> String {
        let NbdAddress::Unix(path) = self else {
            return String::new();
        };
        if e.kind() != io::ErrorKind::NotFound {
            return String::new();
        }
        let node = match std::fs::symlink_metadata(path) {
            Ok(m) => format!("present ({:?})", m.file_type()),
            Err(e) => format!("absent ({e})"),
        };
        let dir = path.parent().map(|d| d.is_dir());
        let ns = std::fs::read_link("/proc/self/ns/mnt")
            .map(|l| l.display().to_string())
            .unwrap_or_default();
        format!(" (seen from here: the socket is {node}, its directory exists: {dir:?}, {ns})")
    }
}

impl std::fmt::Display for NbdAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NbdAddress::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            NbdAddress::Tcp { host, port } => write!(f, "{host}:{port}"),
            NbdAddress::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// What to connect to and how patiently.
#[derive(Clone, Debug)]
pub struct NbdConfig {
    pub address: NbdAddress,
    pub export: String,
    /// How long to keep trying to reconnect before requests fail with EIO.
    pub timeout: Duration,
    /// Connections to open when the server allows several
    /// (`CAN_MULTI_CONN`); one otherwise.
    pub connections: usize,
    /// TLS (NBD_OPT_STARTTLS) on every connection, never plain text.
    pub tls: Option<Arc<TlsClient>>,
}

/// One socket, TCP or Unix, or a TLS session over one.
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<tls::TlsStream<Stream>>),
}

impl Stream {
    fn connect(addr: &NbdAddress, timeout: Duration) -> io::Result<Stream> {
        match addr {
            NbdAddress::Unix(p) => Ok(Stream::Unix(UnixStream::connect(p)?)),
            NbdAddress::Tcp { host, port } => {
                let mut last = None;
                for a in (host.as_str(), *port).to_socket_addrs()? {
                    match TcpStream::connect_timeout(&a, timeout) {
                        Ok(s) => {
                            // Requests are small and latency-bound.
                            s.set_nodelay(true)?;
                            return Ok(Stream::Tcp(s));
                        }
                        Err(e) => last = Some(e),
                    }
                }
                Err(last.unwrap_or_else(|| {
                    io::Error::new(io::ErrorKind::NotFound, format!("{host}: no address"))
                }))
            }
        }
    }
    /// Another handle on the same socket (and TLS session).
    fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Tls(t) => Stream::Tls(Box::new(t.with_raw(t.raw().try_clone()?))),
        })
    }
    fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
            Stream::Tls(t) => {
                t.raw().shutdown();
                Ok(())
            }
        };
    }
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Unix(s) => s.set_read_timeout(t),
            Stream::Tls(s) => s.raw().set_read_timeout(t),
        }
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(t),
            Stream::Unix(s) => s.set_write_timeout(t),
            Stream::Tls(s) => s.raw().set_write_timeout(t),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write_vectored(bufs),
            Stream::Unix(s) => s.write_vectored(bufs),
            Stream::Tls(s) => s.write_vectored(bufs),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Writes all of `parts` with as few system calls as the kernel allows.
fn write_all_parts(w: &mut Stream, parts: &[&[u8]]) -> io::Result<()> {
    let mut parts: Vec<&[u8]> = parts.iter().copied().filter(|p| !p.is_empty()).collect();
    let mut first = 0;
    while first < parts.len() {
        let slices: Vec<IoSlice<'_>> = parts[first..].iter().map(|p| IoSlice::new(p)).collect();
        let n = match w.write_vectored(&slices) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        super::consume(&mut parts, &mut first, n);
    }
    Ok(())
}

/// Bytes shared between a request and the unflushed-write log.
#[derive(Clone)]
struct Payload {
    buf: Arc<[u8]>,
    start: usize,
    len: usize,
}

impl Payload {
    fn from_vec(v: Vec<u8>) -> Payload {
        let len = v.len();
        Payload {
            buf: v.into(),
            start: 0,
            len,
        }
    }
    fn bytes(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }
    fn slice(&self, skip: usize, len: usize) -> Payload {
        Payload {
            buf: self.buf.clone(),
            start: self.start + skip,
            len,
        }
    }
}

/// How a request ended.
enum Outcome {
    /// Success: the data of a read, empty otherwise.
    Done(Vec<u8>),
    /// The server's error number.
    Failed(u32),
    /// The connection went before the reply came: send it again.
    Lost,
}

/// Where a caller waits for its reply.
#[derive(Default)]
struct Slot {
    outcome: Mutex<Option<Outcome>>,
    cv: Condvar,
}

impl Slot {
    fn complete(&self, o: Outcome) {
        *self.outcome.lock() = Some(o);
        self.cv.notify_one();
    }
    fn wait(&self) -> Outcome {
        let mut g = self.outcome.lock();
        loop {
            if let Some(o) = g.take() {
                return o;
            }
            self.cv.wait(&mut g);
        }
    }
}

/// A request waiting for its reply.
struct Pending {
    slot: Arc<Slot>,
    /// Bytes a successful reply carries (a read's length).
    reply_len: usize,
    /// A write's offset and data, for the unflushed log on success.
    write: Option<(u64, Payload)>,
    /// When it was sent, to tell a server that stopped answering.
    sent: Instant,
}

#[derive(Default)]
struct PendingMap {
    map: HashMap<u64, Pending>,
    /// Set by the reader when the connection is gone; nothing more may be
    /// added.
    dead: bool,
}

/// Acknowledged writes not yet covered by a successful FLUSH: disjoint
/// byte ranges, each with the newest data acknowledged for it.
#[derive(Default)]
struct Unflushed {
    /// offset -> (data, sequence number of its acknowledgement, generation
    /// of the connection that acknowledged it).
    ranges: BTreeMap<u64, (Payload, u64, u64)>,
    bytes: usize,
    seq: u64,
}

impl Unflushed {
    fn insert(&mut self, offset: u64, data: Payload, gen: u64) {
        let end = offset + data.len as u64;
        let overlapping: Vec<u64> = self
            .ranges
            .range(..end)
            .rev()
            .take_while(|(&k, (p, _, _))| k + p.len as u64 > offset)
            .map(|(&k, _)| k)
            .collect();
        for k in overlapping {
            let Some((p, seq, g)) = self.ranges.remove(&k) else {
                continue; // listed above, so never taken
            };
            self.bytes -= p.len;
            let pend = k + p.len as u64;
            if k < offset {
                let head = p.slice(0, (offset - k) as usize);
                self.bytes += head.len;
                self.ranges.insert(k, (head, seq, g));
            }
            if pend > end {
                let skip = (end - k) as usize;
                let tail = p.slice(skip, p.len - skip);
                self.bytes += tail.len;
                self.ranges.insert(end, (tail, seq, g));
            }
        }
        self.seq += 1;
        self.bytes += data.len;
        self.ranges.insert(offset, (data, self.seq, gen));
    }

    /// Drops what a FLUSH on connection `gen`, sent when `seq` was the
    /// newest acknowledgement, made durable.
    fn retire(&mut self, seq: u64, gen: u64) {
        let bytes = &mut self.bytes;
        self.ranges.retain(|_, (p, s, g)| {
            let keep = *s > seq || *g != gen;
            if !keep {
                *bytes -= p.len;
            }
            keep
        });
    }
}

/// One connection in transmission phase.
struct Conn {
    gen: u64,
    /// A request unanswered this long means the server is stuck: the
    /// connection is dropped and the request sent again elsewhere.
    timeout: Duration,
    writer: Mutex<Stream>,
    /// A second handle on the socket, to shut it down without the writer
    /// lock (a sender may be blocked in it).
    control: Stream,
    pending: Mutex<PendingMap>,
    reader: Mutex<Option<JoinHandle<()>>>,
}

impl Conn {
    fn is_dead(&self) -> bool {
        self.pending.lock().dead
    }

    /// Sends one request; the returned slot gets its outcome.
    fn submit(
        &self,
        cookie: u64,
        cmd: u16,
        offset: u64,
        len: u32,
        write: Option<(u64, Payload)>,
    ) -> Arc<Slot> {
        let slot = Arc::new(Slot::default());
        {
            let mut p = self.pending.lock();
            if p.dead {
                slot.complete(Outcome::Lost);
                return slot;
            }
            let reply_len = if cmd == proto::CMD_READ {
                len as usize
            } else {
                0
            };
            let pending = Pending {
                slot: slot.clone(),
                reply_len,
                write: write.clone(),
                sent: Instant::now(),
            };
            p.map.insert(cookie, pending);
        }
        let header = proto::encode_request(0, cmd, cookie, offset, len);
        let data = write.as_ref().map_or(&[][..], |(_, p)| p.bytes());
        let sent = write_all_parts(&mut self.writer.lock(), &[&header, data]);
        if let Err(e) = sent {
            // The reader sees the shutdown and fails everything pending,
            // this request included, as lost.
            tracing::warn!(gen = self.gen, "NBD: sending a request failed: {e}");
            self.control.shutdown();
        }
        slot
    }

    /// Whether a request has waited longer than the timeout.
    fn stalled(&self) -> bool {
        let p = self.pending.lock();
        p.map.values().any(|r| r.sent.elapsed() > self.timeout)
    }

    /// Tells the server we are leaving and closes the socket.
    fn close(&self) {
        if !self.is_dead() {
            let header = proto::encode_request(0, proto::CMD_DISC, 0, 0, 0);
            let mut w = self.writer.lock();
            let _ = w.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = w.write_all(&header);
        }
        self.control.shutdown();
        if let Some(h) = self.reader.lock().take() {
            let _ = h.join();
        }
    }
}

/// The reader thread: replies to their callers until the connection ends,
/// then every request still waiting is lost.
fn read_loop(conn: Arc<Conn>, stream: Stream, log: Option<Arc<Mutex<Unflushed>>>) {
    let mut stream = Patient {
        stream,
        conn: &conn,
    };
    let err = loop {
        let mut taken = None;
        let reply = proto::read_reply(&mut stream, |cookie| {
            let p = conn.pending.lock().map.remove(&cookie)?;
            let len = p.reply_len;
            taken = Some(p);
            Some(len)
        });
        let (_, result) = match reply {
            Ok(r) => r,
            Err(e) => {
                // A request taken off the map but not answered is lost too.
                if let Some(p) = taken {
                    p.slot.complete(Outcome::Lost);
                }
                break e;
            }
        };
        // read_reply succeeds only for a cookie the closure took.
        let Some(p) = taken else {
            break io::Error::new(io::ErrorKind::InvalidData, "NBD: a reply for no request");
        };
        match result {
            Ok(data) => {
                // Logged before the caller hears of it, so a reconnect can
                // never miss an acknowledged write.
                if let (Some(log), Some((off, payload))) = (&log, p.write) {
                    log.lock().insert(off, payload, conn.gen);
                }
                p.slot.complete(Outcome::Done(data));
            }
            Err(e) => p.slot.complete(Outcome::Failed(e)),
        }
    };
    let waiting: Vec<Pending> = {
        let mut pm = conn.pending.lock();
        pm.dead = true;
        pm.map.drain().map(|(_, p)| p).collect()
    };
    if !waiting.is_empty() || err.kind() != io::ErrorKind::UnexpectedEof {
        tracing::warn!(
            gen = conn.gen,
            in_flight = waiting.len(),
            "NBD connection lost: {err}"
        );
    }
    conn.control.shutdown();
    for p in waiting {
        p.slot.complete(Outcome::Lost);
    }
}

/// The connections in use, all of one generation: one, or several when
/// the server offers `CAN_MULTI_CONN` (a flush on any of them then covers
/// writes completed on all). They live and die together: when one goes,
/// all are closed (their readers finished, so every acknowledgement is
/// logged) before the unflushed writes are sent again on a new set.
struct ConnSet {
    gen: u64,
    conns: Vec<Arc<Conn>>,
    next: AtomicUsize,
}

impl ConnSet {
    fn is_dead(&self) -> bool {
        self.conns.iter().any(|c| c.is_dead())
    }

    /// The connection the next request goes on: each in turn.
    fn pick(&self) -> &Conn {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len();
        &self.conns[i]
    }

    fn close(&self) {
        for c in &self.conns {
            c.close();
        }
    }
}

/// The reader's socket, which wakes up now and then (its read timeout) to
/// see whether a request has waited too long; a reply arriving in pieces
/// is simply waited for.
struct Patient<'a> {
    stream: Stream,
    conn: &'a Conn,
}

impl Read for Patient<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.stream.read(buf) {
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    if self.conn.stalled() {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!(
                                "no reply from the NBD server for {:.1} s",
                                self.conn.timeout.as_secs_f64()
                            ),
                        ));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => return r,
            }
        }
    }
}

/// How often a reconnect that keeps failing is logged as a warning.
const SAY_AGAIN: Duration = Duration::from_secs(5);

/// The current connection, and what happens when there is none.
#[derive(Default)]
struct ConnState {
    current: Option<Arc<ConnSet>>,
    gen: u64,
    /// When requests first found the connection gone.
    lost_at: Option<Instant>,
    /// The wait before the next reconnect while recovering.
    backoff: Duration,
    /// When a failed reconnect was last logged as a warning.
    last_said: Option<Instant>,
    /// Set when reconnecting gave up: every request fails from then on.
    failed: Option<String>,
}

/// One request of a batch.
struct Req {
    cmd: u16,
    offset: u64,
    len: u32,
    write: Option<Payload>,
}

/// A block device on an NBD export.
pub struct NbdDevice {
    cfg: NbdConfig,
    info: ExportInfo,
    state: Mutex<ConnState>,
    /// Present when the server flushes: see the module comment.
    log: Option<Arc<Mutex<Unflushed>>>,
    cookies: AtomicU64,
    /// Writes that must read-modify-write a minimum block take it
    /// exclusively, aligned writes shared: a read-modify-write must not
    /// put back stale bytes of a write that landed meanwhile.
    rmw: RwLock<()>,
    /// Whether `state.lost_at` is set, read without the lock on every
    /// completed request.
    recovering: AtomicBool,
}

impl NbdDevice {
    /// Connects and negotiates; fails at once (no retries) if the first
    /// connection does not work, so a wrong address is reported quickly.
    pub fn connect(cfg: NbdConfig) -> io::Result<NbdDevice> {
        let (stream, info) = Self::handshake(&cfg)?;
        let log = info
            .can_flush()
            .then(|| Arc::new(Mutex::new(Unflushed::default())));
        let dev = NbdDevice {
            cfg,
            info,
            state: Mutex::new(ConnState::default()),
            log,
            cookies: AtomicU64::new(1),
            rmw: RwLock::new(()),
            recovering: AtomicBool::new(false),
        };
        let conn = dev.open_set(Some(stream), 1)?;
        let mut st = dev.state.lock();
        st.current = Some(conn);
        st.gen = 1;
        drop(st);
        tracing::debug!(address = %dev.cfg.address, export = %dev.cfg.export, ?info, "NBD export connected");
        if !info.can_flush() && !info.read_only() {
            tracing::warn!(
                "NBD server {} offers no FLUSH: writes count as durable once acknowledged",
                dev.cfg.address
            );
        }
        Ok(dev)
    }

    pub fn info(&self) -> &ExportInfo {
        &self.info
    }

    /// Whether the server exports read-only.
    pub fn is_read_only(&self) -> bool {
        self.info.read_only()
    }

    /// A name for messages: the export's URI.
    pub fn describe(&self) -> String {
        uri::NbdUri {
            address: self.cfg.address.clone(),
            export: self.cfg.export.clone(),
            tls: self.cfg.tls.is_some(),
            tls_settings: TlsSettings::default(),
        }
        .to_string()
    }

    fn handshake(cfg: &NbdConfig) -> io::Result<(Stream, ExportInfo)> {
        let per_try = cfg
            .timeout
            .clamp(Duration::from_secs(1), Duration::from_secs(10));
        let s = Stream::connect(&cfg.address, per_try)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", cfg.address)))?;
        // A server that accepts and then says nothing must not hang us.
        s.set_read_timeout(Some(per_try))?;
        let (s, info) = Self::negotiate(s, cfg).map_err(|e| {
            let e = if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut
            {
                io::Error::new(io::ErrorKind::TimedOut, "NBD server: handshake timed out")
            } else {
                e
            };
            io::Error::new(e.kind(), format!("{}: {e}", cfg.address))
        })?;
        s.set_read_timeout(None)?;
        Ok((s, info))
    }

    /// The handshake on `s`, which becomes a TLS stream after
    /// NBD_OPT_STARTTLS when TLS is configured.
    fn negotiate(mut s: Stream, cfg: &NbdConfig) -> io::Result<(Stream, ExportInfo)> {
        let no_zeroes = proto::greet(&mut s)?;
        if let Some(tls) = &cfg.tls {
            proto::starttls(&mut s).map_err(|e| tls::TlsError::NotOffered(e.to_string()))?;
            let host = match &cfg.address {
                NbdAddress::Tcp { host, .. } => host.as_str(),
                NbdAddress::Unix(_) => "localhost",
            };
            s = Stream::Tls(Box::new(tls.connect(s, host)?));
        }
        let info = proto::go(&mut s, &cfg.export, no_zeroes)?;
        Ok((s, info))
    }

    fn start(&self, stream: Stream, gen: u64) -> io::Result<Arc<Conn>> {
        let timeout = self.cfg.timeout;
        // The reader wakes this often to look for stuck requests; a sender
        // blocked this long on a server that stopped reading gives up
        // (and the connection with it).
        let poll = (timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        stream.set_read_timeout(Some(poll))?;
        stream.set_write_timeout(Some(timeout))?;
        let reader_stream = stream.try_clone()?;
        let control = stream.try_clone()?;
        let conn = Arc::new(Conn {
            gen,
            timeout,
            writer: Mutex::new(stream),
            control,
            pending: Mutex::new(PendingMap::default()),
            reader: Mutex::new(None),
        });
        let c = conn.clone();
        let log = self.log.clone();
        let h = std::thread::Builder::new()
            .name(format!("nbd-reader-{gen}"))
            .spawn(move || read_loop(c, reader_stream, log))?;
        *conn.reader.lock() = Some(h);
        Ok(conn)
    }

    /// How many connections a set has: as configured when the server
    /// allows several, else one.
    fn set_size(&self) -> usize {
        if self.info.can_multi_conn() {
            self.cfg.connections.clamp(1, 64)
        } else {
            1
        }
    }

    /// A set of generation `gen`, its first connection's handshake already
    /// done when `first` is given. Every connection must see the export as
    /// the first handshake did.
    fn open_set(&self, first: Option<Stream>, gen: u64) -> io::Result<Arc<ConnSet>> {
        let mut conns: Vec<Arc<Conn>> = Vec::new();
        let mut first = first;
        for _ in 0..self.set_size() {
            let stream = match first.take() {
                Some(s) => s,
                None => {
                    let (stream, info) = Self::handshake(&self.cfg)?;
                    if info.size != self.info.size || info.flags != self.info.flags {
                        for c in &conns {
                            c.close();
                        }
                        return Err(proto::bad(format!(
                            "the export changed (size {} -> {}, flags {:#x} -> {:#x})",
                            self.info.size, info.size, self.info.flags, info.flags
                        )));
                    }
                    stream
                }
            };
            match self.start(stream, gen) {
                Ok(c) => conns.push(c),
                Err(e) => {
                    for c in &conns {
                        c.close();
                    }
                    return Err(e);
                }
            }
        }
        Ok(Arc::new(ConnSet {
            gen,
            conns,
            next: AtomicUsize::new(0),
        }))
    }

    /// The live connection, reconnecting (and resending unflushed writes)
    /// if it is gone; an error once `timeout` has passed without one.
    fn conn(&self) -> io::Result<Arc<ConnSet>> {
        let mut st = self.state.lock();
        if let Some(why) = &st.failed {
            return Err(io::Error::other(why.clone()));
        }
        if let Some(c) = &st.current {
            if !c.is_dead() {
                return Ok(c.clone());
            }
        }
        if let Some(old) = st.current.take() {
            old.close();
        }
        // A server that takes connections but drops every one before a
        // request completes must not keep us forever: the clock runs from
        // the first loss until a request succeeds again, and reconnects
        // back off over that whole time.
        let recovering = st.lost_at.is_some();
        let lost_at = *st.lost_at.get_or_insert_with(Instant::now);
        self.recovering.store(true, Ordering::SeqCst);
        let deadline = lost_at + self.cfg.timeout;
        if !recovering {
            st.backoff = Duration::from_millis(10);
        }
        let mut first = !recovering;
        loop {
            let now = Instant::now();
            if !first && now < deadline {
                std::thread::sleep(st.backoff.min(deadline - now));
                st.backoff = (st.backoff * 2).min(Duration::from_secs(1));
            }
            first = false;
            let result = if Instant::now() >= deadline {
                Err(io::Error::new(io::ErrorKind::TimedOut, "timed out"))
            } else {
                self.reconnect(st.gen + 1)
            };
            match result {
                Ok(conn) => {
                    st.gen += 1;
                    tracing::warn!(gen = st.gen, address = %self.cfg.address, "NBD: reconnected");
                    st.current = Some(conn.clone());
                    return Ok(conn);
                }
                Err(e) if Instant::now() >= deadline => {
                    let why = format!(
                        "NBD server {} unreachable for {:.1} s, giving up: {e}",
                        self.cfg.address,
                        self.cfg.timeout.as_secs_f64()
                    );
                    tracing::error!("{why}");
                    st.failed = Some(why.clone());
                    return Err(io::Error::other(why));
                }
                // Said once a loss and then every few seconds: why a
                // reconnect keeps failing is what a user (or a test that
                // timed out) needs to know.
                Err(e) if st.last_said.is_none_or(|t| t.elapsed() >= SAY_AGAIN) => {
                    st.last_said = Some(Instant::now());
                    let seen = self.cfg.address.seen_from_here(&e);
                    tracing::warn!(address = %self.cfg.address, "NBD: reconnecting failed: {e}{seen}");
                }
                Err(e) => tracing::debug!("NBD: reconnecting failed: {e}"),
            }
        }
    }

    /// A request succeeded: the connection works again.
    fn recovered(&self) {
        if self.recovering.load(Ordering::Relaxed) {
            let mut st = self.state.lock();
            st.lost_at = None;
            st.last_said = None;
            self.recovering.store(false, Ordering::SeqCst);
        }
    }

    /// A new connection, with every unflushed write sent again and
    /// acknowledged before it is handed out.
    fn reconnect(&self, gen: u64) -> io::Result<Arc<ConnSet>> {
        let conn = self.open_set(None, gen)?;
        let Some(log) = &self.log else {
            return Ok(conn);
        };
        let again: Vec<(u64, Payload)> = log
            .lock()
            .ranges
            .iter()
            .filter(|(_, (_, _, g))| *g != gen)
            .map(|(&off, (p, _, _))| (off, p.clone()))
            .collect();
        if !again.is_empty() {
            tracing::warn!(
                writes = again.len(),
                "NBD: sending again the writes not yet flushed"
            );
        }
        let slots: Vec<Arc<Slot>> = again
            .into_iter()
            .map(|(off, p)| {
                let len = p.len as u32;
                conn.pick()
                    .submit(self.cookie(), proto::CMD_WRITE, off, len, Some((off, p)))
            })
            .collect();
        for s in slots {
            match s.wait() {
                Outcome::Done(_) => {}
                Outcome::Failed(e) => {
                    conn.close();
                    return Err(io::Error::from_raw_os_error(proto::errno(e)));
                }
                Outcome::Lost => {
                    conn.close();
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "lost again while resending",
                    ));
                }
            }
        }
        Ok(conn)
    }

    fn cookie(&self) -> u64 {
        self.cookies.fetch_add(1, Ordering::Relaxed)
    }

    /// Runs `reqs` concurrently, sending again on a new connection those
    /// whose connection went; the data of each (reads) in order.
    fn run(&self, reqs: &[Req]) -> io::Result<Vec<Vec<u8>>> {
        let mut out: Vec<Option<Vec<u8>>> = vec![None; reqs.len()];
        loop {
            let conn = self.conn()?;
            let slots: Vec<(usize, Arc<Slot>)> = reqs
                .iter()
                .enumerate()
                .filter(|(i, _)| out[*i].is_none())
                .map(|(i, r)| {
                    let w = r.write.clone().map(|p| (r.offset, p));
                    (
                        i,
                        conn.pick().submit(self.cookie(), r.cmd, r.offset, r.len, w),
                    )
                })
                .collect();
            let mut lost = false;
            let mut failed = None;
            for (i, slot) in slots {
                match slot.wait() {
                    Outcome::Done(d) => out[i] = Some(d),
                    Outcome::Failed(e) => failed = failed.or(Some((i, e))),
                    Outcome::Lost => lost = true,
                }
            }
            if let Some((i, e)) = failed {
                let r = &reqs[i];
                let errno = proto::errno(e);
                let err = io::Error::from_raw_os_error(errno);
                tracing::warn!(
                    cmd = r.cmd,
                    offset = r.offset,
                    len = r.len,
                    "NBD server error: {err}"
                );
                return Err(err);
            }
            if !lost {
                self.recovered();
                return Ok(out.into_iter().map(Option::unwrap_or_default).collect());
            }
        }
    }

    fn check_range(&self, len: usize, offset: u64) -> io::Result<()> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.info.size => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "access of {len} bytes at {offset} is past the end of a {}-byte NBD export",
                    self.info.size
                ),
            )),
        }
    }

    /// The minimum-block-aligned span around `len` bytes at `offset`.
    fn span(&self, len: usize, offset: u64) -> (u64, usize) {
        let m = self.info.min_block as u64;
        let start = offset / m * m;
        let end = (offset + len as u64).div_ceil(m) * m;
        (start, (end - start) as usize)
    }

    /// Reads an aligned span, in requests of at most the maximum payload.
    fn read_aligned(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let max = self.info.max_payload as usize;
        let reqs: Vec<Req> = (0..buf.len())
            .step_by(max)
            .map(|at| Req {
                cmd: proto::CMD_READ,
                offset: offset + at as u64,
                len: (buf.len() - at).min(max) as u32,
                write: None,
            })
            .collect();
        let datas = self.run(&reqs)?;
        for (chunk, data) in buf.chunks_mut(max).zip(datas) {
            if data.len() != chunk.len() {
                return Err(proto::bad("a read returned the wrong length"));
            }
            chunk.copy_from_slice(&data);
        }
        Ok(())
    }

    fn write_aligned(&self, data: Payload, offset: u64) -> io::Result<()> {
        let max = self.info.max_payload as usize;
        let reqs: Vec<Req> = (0..data.len)
            .step_by(max)
            .map(|at| {
                let len = (data.len - at).min(max);
                Req {
                    cmd: proto::CMD_WRITE,
                    offset: offset + at as u64,
                    len: len as u32,
                    write: Some(data.slice(at, len)),
                }
            })
            .collect();
        self.run(&reqs)?;
        let over = self
            .log
            .as_ref()
            .is_some_and(|l| l.lock().bytes > UNFLUSHED_LIMIT);
        if over {
            self.flush()?;
        }
        Ok(())
    }

    fn write_payload(&self, data: Payload, offset: u64) -> io::Result<()> {
        self.check_range(data.len, offset)?;
        if self.info.read_only() {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        if data.len == 0 {
            return Ok(());
        }
        let (start, span) = self.span(data.len, offset);
        if start == offset && span == data.len {
            let _shared = self.rmw.read();
            return self.write_aligned(data, offset);
        }
        let _excl = self.rmw.write();
        let mut whole = vec![0u8; span];
        self.read_aligned(&mut whole, start)?;
        let skip = (offset - start) as usize;
        whole[skip..skip + data.len].copy_from_slice(data.bytes());
        self.write_aligned(Payload::from_vec(whole), start)
    }
}

impl BlockDevice for NbdDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check_range(buf.len(), offset)?;
        if buf.is_empty() {
            return Ok(());
        }
        let (start, span) = self.span(buf.len(), offset);
        if start == offset && span == buf.len() {
            return self.read_aligned(buf, offset);
        }
        let mut whole = vec![0u8; span];
        self.read_aligned(&mut whole, start)?;
        let skip = (offset - start) as usize;
        buf.copy_from_slice(&whole[skip..skip + buf.len()]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write_payload(Payload::from_vec(buf.to_vec()), offset)
    }

    fn write_vectored_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<()> {
        // One copy, which the unflushed log keeps anyway.
        let joined: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
        self.write_payload(Payload::from_vec(joined), offset)
    }

    /// A real NBD FLUSH: success means every write acknowledged before the
    /// call is durable, even across reconnects (see the module comment).
    fn flush(&self) -> io::Result<()> {
        let Some(log) = &self.log else {
            // No SEND_FLUSH: the server writes through (or cannot say).
            return Ok(());
        };
        loop {
            let conn = self.conn()?;
            let seq = log.lock().seq;
            let slot = conn
                .pick()
                .submit(self.cookie(), proto::CMD_FLUSH, 0, 0, None);
            match slot.wait() {
                Outcome::Done(_) => {
                    self.recovered();
                    log.lock().retire(seq, conn.gen);
                    return Ok(());
                }
                Outcome::Failed(e) => {
                    let err = io::Error::from_raw_os_error(proto::errno(e));
                    tracing::warn!("NBD server error on flush: {err}");
                    return Err(err);
                }
                // conn() reconnects and resends; then flush there.
                Outcome::Lost => continue,
            }
        }
    }

    fn size(&self) -> u64 {
        self.info.size
    }

    /// NBD_CMD_TRIM, where the server offers it (SEND_TRIM): FITRIM's free
    /// runs become the server's to drop. Only what is inside whole minimum
    /// blocks is sent, and a lost connection sends it again (a trim, like a
    /// write, may be repeated). A trimmed range reads back as anything, as
    /// on a disk; the filesystem trims only blocks it no longer uses.
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        if !self.info.can_trim() {
            return Err(io::Error::from(io::ErrorKind::Unsupported));
        }
        if self.info.read_only() {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.info.size)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let min = u64::from(self.info.min_block.max(1));
        let (mut at, end) = (offset.div_ceil(min) * min, end / min * min);
        // The length field is 32 bits: whole minimum blocks below 4 GiB.
        let most = (u64::from(u32::MAX) / min) * min;
        while at < end {
            let n = (end - at).min(most);
            self.trim_once(at, n as u32)?;
            at += n;
        }
        Ok(())
    }
}

impl NbdDevice {
    fn trim_once(&self, offset: u64, len: u32) -> io::Result<()> {
        loop {
            let conn = self.conn()?;
            let slot = conn
                .pick()
                .submit(self.cookie(), proto::CMD_TRIM, offset, len, None);
            match slot.wait() {
                Outcome::Done(_) => {
                    self.recovered();
                    return Ok(());
                }
                Outcome::Failed(e) => return Err(io::Error::from_raw_os_error(proto::errno(e))),
                Outcome::Lost => continue,
            }
        }
    }
}

impl Drop for NbdDevice {
    fn drop(&mut self) {
        if let Some(c) = self.state.lock().current.take() {
            c.close();
        }
    }
}

#[cfg(test)]
mod tests;
