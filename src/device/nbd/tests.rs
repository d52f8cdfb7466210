//! The NBD client against a fake server written here, over a Unix socket:
//! handshake, replies out of order, error replies, bad magic and cookies,
//! dropped connections with reconnect and resending, and the timeout;
//! and the same over TLS (a PSK server made here with OpenSSL), with a
//! wrong key, a server that will not start TLS and one that strips it.
//! The fake keeps a volatile cache over a durable image, as a real server
//! with a write cache does: FLUSH copies one to the other, and dropping a
//! connection "crashes" the server, losing what was not flushed.

use super::proto::*;
use super::*;
use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicBool, AtomicUsize};

#[derive(Clone, Default)]
struct Behaviour {
    flags: u16,
    sizes: Option<(u32, u32, u32)>,
    bad_magic: bool,
    /// Reply to batches of this many requests, last first.
    reorder: usize,
    /// Reads and writes at this offset get EIO.
    fail_offset: Option<u64>,
    /// Hang up on the Nth request from now (not answering it), losing the
    /// unflushed cache.
    drop_at: Option<usize>,
    /// Answer with a cookie nobody asked for.
    wrong_cookie: bool,
    /// Hang up on every new connection right after accepting it.
    refuse: bool,
    /// Read requests and never answer them.
    stall: bool,
    /// The size the handshake claims (the disk is always SIZE bytes).
    claimed_size: Option<u64>,
    /// Send only half of the next read's data, then hang up.
    truncate_next_read: bool,
    tls: FakeTls,
}

/// What the fake does about TLS.
#[derive(Clone, Default)]
enum FakeTls {
    #[default]
    Off,
    /// Requires NBD_OPT_STARTTLS, then TLS with this PSK for user "alice".
    Require(Vec<u8>),
    /// A man in the middle: acknowledges STARTTLS and goes on in plain text.
    Strip,
}

/// The PSK the fake and the client share in these tests.
const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

/// A PSK file for the client with `key` for alice.
fn psk_file(key: &[u8]) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "jbdfs-nbd-{}-{}.psk",
        std::process::id(),
        crate::util::unique_suffix()
    ));
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(&path, format!("alice:{hex}\n")).unwrap();
    path
}

fn tls_client(key: &[u8]) -> Arc<TlsClient> {
    let path = psk_file(key);
    let c = TlsClient::new(&TlsSettings {
        psk_file: Some(path.clone()),
        ..Default::default()
    })
    .unwrap();
    let _ = std::fs::remove_file(path);
    Arc::new(c)
}

#[derive(Default)]
struct Disk {
    cache: Vec<u8>,
    durable: Vec<u8>,
}

struct Fake {
    path: PathBuf,
    disk: Arc<Mutex<Disk>>,
    how: Arc<Mutex<Behaviour>>,
    connections: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

const SIZE: usize = 1 << 20;

impl Fake {
    fn start(how: Behaviour) -> Fake {
        let path = std::env::temp_dir().join(format!(
            "jbdfs-nbd-{}-{}.sock",
            std::process::id(),
            crate::util::unique_suffix()
        ));
        let listener = UnixListener::bind(&path).unwrap();
        let disk = Arc::new(Mutex::new(Disk {
            cache: vec![0; SIZE],
            durable: vec![0; SIZE],
        }));
        let how = Arc::new(Mutex::new(how));
        let connections = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (d, h, c, s) = (disk.clone(), how.clone(), connections.clone(), stop.clone());
        let accept = std::thread::spawn(move || {
            let mut served = Vec::new();
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { break };
                c.fetch_add(1, Ordering::SeqCst);
                if h.lock().refuse {
                    continue;
                }
                let (d, h) = (d.clone(), h.clone());
                served.push(std::thread::spawn(move || serve(conn, d, h)));
            }
            for t in served {
                let _ = t.join();
            }
        });
        Fake {
            path,
            disk,
            how,
            connections,
            stop,
            accept: Some(accept),
        }
    }

    fn config(&self) -> NbdConfig {
        NbdConfig {
            address: NbdAddress::Unix(self.path.clone()),
            export: "disk".into(),
            timeout: Duration::from_secs(5),
            connections: 1,
            tls: match &self.how.lock().tls {
                FakeTls::Off => None,
                _ => Some(tls_client(KEY)),
            },
        }
    }

    fn connect(&self) -> NbdDevice {
        NbdDevice::connect(self.config()).unwrap()
    }

    /// A client that gives a lost server `ms` milliseconds.
    fn connect_patiently(&self, ms: u64) -> NbdDevice {
        let mut cfg = self.config();
        cfg.timeout = Duration::from_millis(ms);
        NbdDevice::connect(cfg).unwrap()
    }

    fn set(&self, f: impl FnOnce(&mut Behaviour)) {
        f(&mut self.how.lock());
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn rd<const N: usize>(s: &mut impl Read) -> Option<[u8; N]> {
    let mut b = [0u8; N];
    s.read_exact(&mut b).ok()?;
    Some(b)
}

fn opt_reply(s: &mut impl Write, opt: u32, kind: u32, data: &[u8]) {
    let mut m = Vec::new();
    m.extend_from_slice(&OPT_REPLY_MAGIC.to_be_bytes());
    m.extend_from_slice(&opt.to_be_bytes());
    m.extend_from_slice(&kind.to_be_bytes());
    m.extend_from_slice(&(data.len() as u32).to_be_bytes());
    m.extend_from_slice(data);
    let _ = s.write_all(&m);
}

/// One connection: the handshake, then requests until it ends. Every
/// exit path just returns, so the client sees a hang-up.
fn serve(mut s: UnixStream, disk: Arc<Mutex<Disk>>, how: Arc<Mutex<Behaviour>>) {
    let b = how.lock().clone();
    let magic = if b.bad_magic { 0x1234 } else { NBDMAGIC };
    let mut g = Vec::new();
    g.extend_from_slice(&magic.to_be_bytes());
    g.extend_from_slice(&IHAVEOPT.to_be_bytes());
    g.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    if s.write_all(&g).is_err() {
        return;
    }
    let Some(_cflags) = rd::<4>(&mut s) else {
        return;
    };
    let key = match &b.tls {
        FakeTls::Off => return serve_options(s, disk, how, b),
        FakeTls::Require(key) => key.clone(),
        FakeTls::Strip => Vec::new(),
    };
    let Some((opt, _)) = read_option(&mut s) else {
        return;
    };
    if opt != OPT_STARTTLS {
        opt_reply(&mut s, opt, REP_ERR_TLS_REQD, b"TLS is required");
        return;
    }
    opt_reply(&mut s, opt, REP_ACK, b"");
    if key.is_empty() {
        return serve_options(s, disk, how, b);
    }
    use openssl::ssl::{SslAcceptor, SslMethod};
    let mut a = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server()).unwrap();
    a.set_cipher_list("PSK").unwrap();
    a.set_psk_server_callback(move |_ssl, id, out| {
        if id != Some(&b"alice"[..]) {
            return Ok(0);
        }
        out[..key.len()].copy_from_slice(&key);
        Ok(key.len())
    });
    let Ok(tls) = a.build().accept(s) else { return };
    serve_options(tls, disk, how, b)
}

/// One option from the client: its number and data.
fn read_option(s: &mut impl Read) -> Option<(u32, Vec<u8>)> {
    let h = rd::<16>(s)?;
    let opt = u32::from_be_bytes(h[8..12].try_into().unwrap());
    let len = u32::from_be_bytes(h[12..16].try_into().unwrap()) as usize;
    let mut data = vec![0u8; len];
    s.read_exact(&mut data).ok()?;
    Some((opt, data))
}

/// The options after the greeting (and TLS), then transmission.
fn serve_options<S: Read + Write>(
    mut s: S,
    disk: Arc<Mutex<Disk>>,
    how: Arc<Mutex<Behaviour>>,
    b: Behaviour,
) {
    loop {
        let Some((opt, data)) = read_option(&mut s) else {
            return;
        };
        if opt != OPT_GO {
            opt_reply(&mut s, opt, REP_ERR_UNSUP, b"");
            continue;
        }
        let nlen = u32::from_be_bytes(data[0..4].try_into().unwrap()) as usize;
        if &data[4..4 + nlen] != b"disk" {
            opt_reply(&mut s, opt, REP_ERR_UNKNOWN, b"no such export");
            continue;
        }
        let mut info = INFO_EXPORT.to_be_bytes().to_vec();
        info.extend_from_slice(&b.claimed_size.unwrap_or(SIZE as u64).to_be_bytes());
        info.extend_from_slice(&(b.flags | TFLAG_HAS_FLAGS).to_be_bytes());
        opt_reply(&mut s, opt, REP_INFO, &info);
        if let Some((min, pref, max)) = b.sizes {
            let mut info = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
            for v in [min, pref, max] {
                info.extend_from_slice(&v.to_be_bytes());
            }
            opt_reply(&mut s, opt, REP_INFO, &info);
        }
        opt_reply(&mut s, opt, REP_ACK, b"");
        break;
    }
    let mut held: Vec<Vec<u8>> = Vec::new();
    loop {
        let Some(h) = rd::<28>(&mut s) else { return };
        let cmd = u16::from_be_bytes([h[6], h[7]]);
        let cookie = u64::from_be_bytes(h[8..16].try_into().unwrap());
        let off = u64::from_be_bytes(h[16..24].try_into().unwrap()) as usize;
        let len = u32::from_be_bytes(h[24..28].try_into().unwrap()) as usize;
        let mut data = vec![0u8; if cmd == CMD_WRITE { len } else { 0 }];
        if s.read_exact(&mut data).is_err() {
            return;
        }
        let (b, truncate) = {
            let mut how = how.lock();
            let truncate = cmd == CMD_READ && std::mem::take(&mut how.truncate_next_read);
            if let Some(n) = how.drop_at.as_mut() {
                if *n <= 1 {
                    how.drop_at = None;
                    // The server crashes: its cache is gone.
                    let mut d = disk.lock();
                    d.cache = d.durable.clone();
                    return;
                }
                *n -= 1;
            }
            (how.clone(), truncate)
        };
        if b.stall {
            continue;
        }
        let cookie = if b.wrong_cookie {
            cookie ^ 0xdead
        } else {
            cookie
        };
        let mut reply = Vec::new();
        reply.extend_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
        let fail = b.fail_offset == Some(off as u64) || off + len > SIZE;
        let err: u32 = if fail { 5 } else { 0 };
        reply.extend_from_slice(&err.to_be_bytes());
        reply.extend_from_slice(&cookie.to_be_bytes());
        if !fail {
            let mut d = disk.lock();
            match cmd {
                CMD_READ => reply.extend_from_slice(&d.cache[off..off + len]),
                CMD_WRITE => d.cache[off..off + len].copy_from_slice(&data),
                CMD_FLUSH => d.durable = d.cache.clone(),
                CMD_TRIM => d.cache[off..off + len].fill(0xee),
                CMD_DISC => return,
                _ => {}
            }
        }
        if truncate {
            let _ = s.write_all(&reply[..16 + len / 2]);
            return;
        }
        held.push(reply);
        if held.len() >= b.reorder.max(1) {
            for r in held.drain(..).rev() {
                if s.write_all(&r).is_err() {
                    return;
                }
            }
        }
    }
}

#[test]
fn handshake_read_write_flush() {
    let fake = Fake::start(Behaviour {
        flags: TFLAG_SEND_FLUSH | TFLAG_SEND_FUA,
        ..Default::default()
    });
    let d = fake.connect();
    assert_eq!(d.size(), SIZE as u64);
    assert!(!d.is_read_only());
    assert_eq!(d.info().min_block, 1);
    d.write_vectored_at(&[IoSlice::new(&[1; 3000]), IoSlice::new(&[2; 5000])], 100)
        .unwrap();
    let mut b = vec![0u8; 8000];
    d.read_at(&mut b, 100).unwrap();
    assert!(b[..3000].iter().all(|&x| x == 1) && b[3000..].iter().all(|&x| x == 2));
    assert!(fake.disk.lock().durable[100..8100].iter().all(|&x| x == 0));
    d.flush().unwrap();
    assert_eq!(fake.disk.lock().durable[100..8100], b[..]);
    assert_eq!(d.log.as_ref().unwrap().lock().bytes, 0);
    // Past the end: refused here, never sent.
    assert!(d.read_at(&mut b, SIZE as u64 - 10).is_err());
    assert!(d.describe().starts_with("nbd+unix:///disk?socket="));
    // A name the server does not know.
    let mut cfg = fake.config();
    cfg.export = "nope".into();
    let e = NbdDevice::connect(cfg).err().unwrap();
    assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    assert!(e.to_string().contains("no export named \"nope\""), "{e}");
}

#[test]
fn concurrent_requests_answered_out_of_order() {
    // A 16 KiB read is four requests of at most 4 KiB, all in flight; the
    // server answers them last first.
    let fake = Fake::start(Behaviour {
        sizes: Some((512, 4096, 4096)),
        reorder: 4,
        ..Default::default()
    });
    {
        let mut d = fake.disk.lock();
        for (i, b) in d.cache.iter_mut().enumerate().take(1 << 16) {
            *b = (i / 4096) as u8;
        }
    }
    let d = fake.connect();
    assert_eq!(d.info().max_payload, 4096);
    let mut b = vec![0u8; 16384];
    d.read_at(&mut b, 4096).unwrap();
    for (i, x) in b.iter().enumerate() {
        assert_eq!(*x as usize, 1 + i / 4096);
    }
    // Four callers at once, each one request.
    let d = Arc::new(d);
    let threads: Vec<_> = (0..4u8)
        .map(|i| {
            let d = d.clone();
            std::thread::spawn(move || {
                let mut b = vec![0u8; 4096];
                d.read_at(&mut b, i as u64 * 4096).unwrap();
                assert!(b.iter().all(|&x| x == i));
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn unaligned_requests_keep_to_the_minimum_block() {
    let fake = Fake::start(Behaviour {
        sizes: Some((4096, 4096, 1 << 16)),
        ..Default::default()
    });
    fake.disk.lock().cache[..8192].fill(9);
    let d = fake.connect();
    d.write_at(&[5; 1024], 1024).unwrap();
    let c = fake.disk.lock().cache[..8192].to_vec();
    assert!(c[..1024].iter().all(|&x| x == 9));
    assert!(c[1024..2048].iter().all(|&x| x == 5));
    assert!(c[2048..].iter().all(|&x| x == 9));
    let mut b = [0u8; 10];
    d.read_at(&mut b, 2040).unwrap();
    assert_eq!(b, [5, 5, 5, 5, 5, 5, 5, 5, 9, 9]);
}

#[test]
fn error_replies_fail_only_their_request() {
    let fake = Fake::start(Behaviour {
        fail_offset: Some(8192),
        ..Default::default()
    });
    let d = fake.connect();
    let mut b = [0u8; 512];
    let e = d.read_at(&mut b, 8192).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    assert_eq!(
        d.write_at(&b, 8192).unwrap_err().raw_os_error(),
        Some(libc::EIO)
    );
    d.read_at(&mut b, 0).unwrap();
    assert_eq!(fake.connections.load(Ordering::SeqCst), 1);
}

#[test]
fn read_only_exports_refuse_writes() {
    let fake = Fake::start(Behaviour {
        flags: TFLAG_READ_ONLY,
        ..Default::default()
    });
    let d = fake.connect();
    assert!(d.is_read_only());
    let e = d.write_at(&[1; 512], 0).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    d.flush().unwrap();
}

#[test]
fn bad_magic_and_wrong_cookies_are_errors_not_panics() {
    let fake = Fake::start(Behaviour {
        bad_magic: true,
        ..Default::default()
    });
    let e = NbdDevice::connect(fake.config()).err().unwrap();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert!(e.to_string().contains("bad greeting magic"), "{e}");
    drop(fake);

    let fake = Fake::start(Behaviour {
        wrong_cookie: true,
        ..Default::default()
    });
    let d = fake.connect_patiently(1000);
    let mut b = [0u8; 512];
    let t = Instant::now();
    // Each reply is framed wrong, so each connection is dropped and
    // retried until the timeout.
    let e = d.read_at(&mut b, 0).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(10));
    assert!(e.to_string().contains("unreachable"), "{e}");
    assert!(fake.connections.load(Ordering::SeqCst) > 1);
    // From then on the device stays failed.
    assert!(d.read_at(&mut b, 0).is_err());
}

#[test]
fn a_dropped_connection_is_replaced_and_unflushed_writes_are_sent_again() {
    dropped_connection(FakeTls::Off);
}

#[test]
fn over_tls_a_dropped_connection_renegotiates_and_sends_again() {
    dropped_connection(FakeTls::Require(KEY.to_vec()));
}

fn dropped_connection(tls: FakeTls) {
    let fake = Fake::start(Behaviour {
        flags: TFLAG_SEND_FLUSH,
        tls,
        ..Default::default()
    });
    let d = fake.connect();
    d.write_at(&[1; 4096], 0).unwrap();
    d.flush().unwrap();
    d.write_at(&[2; 4096], 4096).unwrap();
    // Overwritten before the crash: only the newer data may come back.
    d.write_at(&[3; 4096], 8192).unwrap();
    d.write_at(&[4; 2048], 9216).unwrap();
    // The server dies on the next request, losing its cache: the writes to
    // 4096.. were acknowledged but never flushed.
    fake.set(|h| h.drop_at = Some(1));
    let mut b = vec![0u8; 12288];
    d.read_at(&mut b, 0).unwrap();
    assert_eq!(fake.connections.load(Ordering::SeqCst), 2);
    assert!(b[..4096].iter().all(|&x| x == 1));
    assert!(b[4096..8192].iter().all(|&x| x == 2));
    assert!(b[8192..9216].iter().all(|&x| x == 3));
    assert!(b[9216..11264].iter().all(|&x| x == 4));
    assert!(b[11264..].iter().all(|&x| x == 3));
    // A flush after the crash makes them durable.
    fake.set(|h| h.drop_at = Some(1));
    d.flush().unwrap();
    assert_eq!(fake.connections.load(Ordering::SeqCst), 3);
    assert_eq!(fake.disk.lock().durable[..12288], b[..]);
    assert_eq!(d.log.as_ref().unwrap().lock().bytes, 0);
}

#[test]
fn a_server_that_stays_away_fails_requests_after_the_timeout() {
    let fake = Fake::start(Behaviour::default());
    let d = fake.connect_patiently(500);
    fake.set(|h| {
        h.refuse = true;
        h.drop_at = Some(1);
    });
    let mut b = [0u8; 512];
    let t = Instant::now();
    let e = d.read_at(&mut b, 0).unwrap_err();
    assert!(t.elapsed() >= Duration::from_millis(500));
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(e.to_string().contains("unreachable for"), "{e}");
    fake.set(|h| h.refuse = false);
    assert!(d.read_at(&mut b, 0).is_err());
}

#[test]
fn unflushed_ranges_keep_the_newest_bytes() {
    let p = |v: u8, n: usize| Payload {
        buf: vec![v; n].into(),
        start: 0,
        len: n,
    };
    let mut u = Unflushed::default();
    u.insert(100, p(1, 100), 1);
    u.insert(150, p(2, 10), 1);
    u.insert(50, p(3, 60), 2);
    u.insert(190, p(4, 20), 2);
    let got: Vec<(u64, u8, usize)> = u
        .ranges
        .iter()
        .map(|(&o, (p, _, _))| (o, p.bytes()[0], p.len))
        .collect();
    assert_eq!(
        got,
        [
            (50, 3, 60),
            (110, 1, 40),
            (150, 2, 10),
            (160, 1, 30),
            (190, 4, 20)
        ]
    );
    assert_eq!(u.bytes, 160);
    // A flush on connection 2 after the 3rd acknowledgement retires only
    // what connection 2 acknowledged by then.
    u.retire(3, 2);
    assert_eq!(u.ranges.len(), 4);
    assert_eq!(u.bytes, 100);
}

#[test]
fn a_server_that_stops_answering_is_given_up_on() {
    let fake = Fake::start(Behaviour::default());
    let d = fake.connect_patiently(400);
    fake.set(|h| h.stall = true);
    let mut b = [0u8; 512];
    let t = Instant::now();
    let e = d.read_at(&mut b, 0).unwrap_err();
    assert!(t.elapsed() >= Duration::from_millis(400));
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(e.to_string().contains("unreachable"), "{e}");
    // It tried again on a new connection before giving up.
    assert!(fake.connections.load(Ordering::SeqCst) >= 2);
}

#[test]
fn short_replies_and_a_server_lying_about_its_size() {
    let fake = Fake::start(Behaviour {
        claimed_size: Some(2 * SIZE as u64),
        ..Default::default()
    });
    let d = fake.connect_patiently(1000);
    assert_eq!(d.size(), 2 * SIZE as u64);
    fake.disk.lock().cache[..4096].fill(3);
    // Half a reply, then the connection goes: read again elsewhere.
    fake.set(|h| h.truncate_next_read = true);
    let mut b = vec![0u8; 4096];
    d.read_at(&mut b, 0).unwrap();
    assert!(b.iter().all(|&x| x == 3));
    assert_eq!(fake.connections.load(Ordering::SeqCst), 2);
    // Past the real end the server fails the request: an error, no panic.
    let e = d.read_at(&mut b, SIZE as u64 + 4096).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    assert!(d.write_at(&b, SIZE as u64).is_err());
    d.read_at(&mut b, 0).unwrap();
}

#[test]
fn several_connections_when_the_server_allows_them() {
    several_connections(FakeTls::Off);
}

#[test]
fn over_tls_several_connections_each_have_a_session() {
    several_connections(FakeTls::Require(KEY.to_vec()));
}

fn several_connections(tls: FakeTls) {
    let fake = Fake::start(Behaviour {
        flags: TFLAG_SEND_FLUSH | TFLAG_CAN_MULTI_CONN,
        tls: tls.clone(),
        ..Default::default()
    });
    let mut cfg = fake.config();
    cfg.connections = 3;
    let d = Arc::new(NbdDevice::connect(cfg).unwrap());
    assert_eq!(fake.connections.load(Ordering::SeqCst), 3);
    // Writes spread over the three, one flush covers them all.
    let threads: Vec<_> = (0..6u8)
        .map(|i| {
            let d = d.clone();
            std::thread::spawn(move || d.write_at(&[i + 1; 4096], i as u64 * 4096).unwrap())
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    d.write_at(&[9; 4096], 6 * 4096).unwrap();
    // A crash on one connection loses the cache: the whole set is
    // replaced and the unflushed writes are sent again before anything
    // else goes out.
    fake.set(|h| h.drop_at = Some(1));
    let mut b = vec![0u8; 7 * 4096];
    d.read_at(&mut b, 0).unwrap();
    assert_eq!(fake.connections.load(Ordering::SeqCst), 6);
    d.flush().unwrap();
    let durable = fake.disk.lock().durable[..7 * 4096].to_vec();
    for i in 0..7 {
        let want = if i == 6 { 9 } else { i as u8 + 1 };
        assert!(
            durable[i * 4096..(i + 1) * 4096].iter().all(|&x| x == want),
            "block {i}"
        );
    }
    assert_eq!(b, durable);

    // Without CAN_MULTI_CONN, one connection whatever is asked.
    let fake = Fake::start(Behaviour {
        tls,
        ..Default::default()
    });
    let mut cfg = fake.config();
    cfg.connections = 3;
    let _d = NbdDevice::connect(cfg).unwrap();
    assert_eq!(fake.connections.load(Ordering::SeqCst), 1);
}

#[test]
fn trim_sends_whole_minimum_blocks_and_only_where_offered() {
    let fake = Fake::start(Behaviour {
        flags: TFLAG_SEND_FLUSH | TFLAG_SEND_TRIM,
        sizes: Some((512, 4096, 65536)),
        ..Default::default()
    });
    let d = fake.connect();
    d.write_at(&[7; 4096], 0).unwrap();
    // 100..3000 covers blocks 1-4 of 512 bytes whole; the edges stay.
    d.discard(100, 2900).unwrap();
    let cache = fake.disk.lock().cache[..4096].to_vec();
    assert!(
        cache[..512].iter().all(|&x| x == 7),
        "the partial first block kept"
    );
    assert!(
        cache[512..2560].iter().all(|&x| x == 0xee),
        "whole blocks trimmed"
    );
    assert!(
        cache[2560..].iter().all(|&x| x == 7),
        "the partial last block kept"
    );
    assert!(d.discard(SIZE as u64 - 512, 1024).is_err(), "past the end");

    let plain = Fake::start(Behaviour {
        flags: TFLAG_SEND_FLUSH,
        ..Default::default()
    });
    let e = plain.connect().discard(0, 4096).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::Unsupported, "{e}");
}

/// A reconnect that finds no socket says what the daemon sees of the path,
/// so that a log can tell a socket that is gone from one seen differently.
#[test]
fn a_missing_socket_is_described_as_seen_from_here() {
    let dir = std::env::temp_dir().join(format!("jbdfs-nbd-seen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let addr = NbdAddress::Unix(dir.join("nbd.sock"));
    let e = UnixStream::connect(dir.join("nbd.sock")).unwrap_err();
    let seen = addr.seen_from_here(&e);
    assert!(seen.contains("the socket is absent"), "{seen}");
    assert!(seen.contains("its directory exists: Some(true)"), "{seen}");
    assert!(seen.contains("mnt:["), "{seen}");
    let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
    assert_eq!(addr.seen_from_here(&refused), "");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tls_reads_and_writes_large_and_concurrent() {
    let fake = Fake::start(Behaviour {
        flags: TFLAG_SEND_FLUSH,
        tls: FakeTls::Require(KEY.to_vec()),
        ..Default::default()
    });
    let d = Arc::new(fake.connect());
    // Larger than a TLS record, so replies come in many records.
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    d.write_at(&big, 4096).unwrap();
    let threads: Vec<_> = (0..3u8)
        .map(|i| {
            let d = d.clone();
            std::thread::spawn(move || {
                d.write_at(&[i + 1; 8192], 512 * 1024 + i as u64 * 8192)
                    .unwrap()
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    d.flush().unwrap();
    let mut back = vec![0u8; big.len()];
    d.read_at(&mut back, 4096).unwrap();
    assert!(back == big);
    let durable = fake.disk.lock().durable.clone();
    assert!(durable[4096..4096 + big.len()] == big[..]);
    assert!(durable[512 * 1024..512 * 1024 + 8192]
        .iter()
        .all(|&x| x == 1));
}

#[test]
fn a_wrong_key_is_refused_and_nothing_is_written() {
    let fake = Fake::start(Behaviour {
        flags: TFLAG_SEND_FLUSH,
        tls: FakeTls::Require(KEY.to_vec()),
        ..Default::default()
    });
    let mut cfg = fake.config();
    cfg.tls = Some(tls_client(b"not the server's key, not at all"));
    let e = NbdDevice::connect(cfg).err().unwrap().to_string();
    assert!(
        e.contains("TLS handshake with the NBD server failed"),
        "{e}"
    );
    assert!(e.contains("alice"), "{e}");
    assert!(fake.disk.lock().cache.iter().all(|&x| x == 0));
}

#[test]
fn tls_is_never_given_up_for_plain_text() {
    // A man in the middle acknowledges STARTTLS, then talks in plain text.
    let fake = Fake::start(Behaviour {
        tls: FakeTls::Strip,
        ..Default::default()
    });
    let mut cfg = fake.config();
    cfg.tls = Some(tls_client(KEY));
    let e = NbdDevice::connect(cfg).err().unwrap().to_string();
    assert!(
        e.contains("TLS handshake with the NBD server failed"),
        "{e}"
    );
    // A server (or a proxy) without STARTTLS: refused, not used plain.
    let fake = Fake::start(Behaviour::default());
    let mut cfg = fake.config();
    cfg.tls = Some(tls_client(KEY));
    let e = NbdDevice::connect(cfg).err().unwrap().to_string();
    assert!(e.contains("does not offer TLS"), "{e}");
    assert!(e.contains("never used without it"), "{e}");
}

#[test]
fn a_plain_client_is_told_how_to_ask_for_tls() {
    let fake = Fake::start(Behaviour {
        tls: FakeTls::Require(KEY.to_vec()),
        ..Default::default()
    });
    let mut cfg = fake.config();
    cfg.tls = None;
    let e = NbdDevice::connect(cfg).err().unwrap().to_string();
    assert!(e.contains("requires TLS") && e.contains("nbds://"), "{e}");
    assert!(e.contains("tls-psk-file"), "{e}");
}
