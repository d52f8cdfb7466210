//! The NBD wire protocol (NetworkBlockDevice/nbd doc/proto.md): the fixed
//! newstyle handshake with `NBD_OPT_GO`, and the transmission phase's
//! requests and simple replies. Everything here works on any `Read`/`Write`
//! and keeps no state, so the fuzz target and the unit tests drive it over
//! byte buffers; every length a server sends is bounded before it is used.

use std::io::{self, Read, Write};

pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// The second magic of the old-style handshake, which we do not speak.
pub const CLISERV_MAGIC: u64 = 0x0000_4202_8186_1253;
pub const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

// Handshake flags (server) and client flags.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

// Options and their replies.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_GO: u32 = 7;
pub const REP_ACK: u32 = 1;
pub const REP_INFO: u32 = 3;
pub const REP_ERR: u32 = 1 << 31;
pub const REP_ERR_UNSUP: u32 = REP_ERR + 1;
pub const REP_ERR_POLICY: u32 = REP_ERR + 2;
pub const REP_ERR_INVALID: u32 = REP_ERR + 3;
pub const REP_ERR_PLATFORM: u32 = REP_ERR + 4;
pub const REP_ERR_TLS_REQD: u32 = REP_ERR + 5;
pub const REP_ERR_UNKNOWN: u32 = REP_ERR + 6;
pub const REP_ERR_SHUTDOWN: u32 = REP_ERR + 7;
pub const REP_ERR_BLOCK_SIZE_REQD: u32 = REP_ERR + 8;
pub const INFO_EXPORT: u16 = 0;
pub const INFO_BLOCK_SIZE: u16 = 3;

// Transmission flags.
pub const TFLAG_HAS_FLAGS: u16 = 1 << 0;
pub const TFLAG_READ_ONLY: u16 = 1 << 1;
pub const TFLAG_SEND_FLUSH: u16 = 1 << 2;
pub const TFLAG_SEND_FUA: u16 = 1 << 3;
pub const TFLAG_SEND_TRIM: u16 = 1 << 5;
pub const TFLAG_CAN_MULTI_CONN: u16 = 1 << 8;

// Commands.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;

/// The payload limit a client keeps to when the server names none (and the
/// most we ever put in one request, whatever it names): 32 MiB.
pub const DEFAULT_MAX_PAYLOAD: u32 = 1 << 25;
/// Export names longer than this are refused by the spec.
pub const MAX_NAME: usize = 4096;
/// The longest option reply payload we accept (a description is at most
/// 4 KiB; anything much larger is a broken or hostile server).
const MAX_OPT_REPLY: u32 = 64 * 1024;
/// How many option replies one `NBD_OPT_GO` may bring before we give up.
const MAX_OPT_REPLIES: usize = 256;

/// What the handshake learned about the export.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExportInfo {
    /// Bytes, rounded down to a multiple of `min_block`.
    pub size: u64,
    /// Transmission flags (0 when the server did not set HAS_FLAGS).
    pub flags: u16,
    /// Every request's offset and length are multiples of this.
    pub min_block: u32,
    /// Requests at least this large and aligned avoid read-modify-write
    /// in the server.
    pub preferred_block: u32,
    /// The most one read or write may carry.
    pub max_payload: u32,
}

impl ExportInfo {
    pub fn read_only(&self) -> bool {
        self.flags & TFLAG_READ_ONLY != 0
    }
    pub fn can_flush(&self) -> bool {
        self.flags & TFLAG_SEND_FLUSH != 0
    }
    pub fn can_fua(&self) -> bool {
        self.flags & TFLAG_SEND_FUA != 0
    }
    pub fn can_trim(&self) -> bool {
        self.flags & TFLAG_SEND_TRIM != 0
    }
    pub fn can_multi_conn(&self) -> bool {
        self.flags & TFLAG_CAN_MULTI_CONN != 0
    }
}

/// An error in what the server sent: `InvalidData`, naming the server.
pub fn bad(msg: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("NBD server: {msg}"))
}

fn read_exact_or<R: Read>(r: &mut R, buf: &mut [u8], what: &str) -> io::Result<()> {
    r.read_exact(buf).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("NBD server: connection closed while reading {what}"),
            )
        } else {
            e
        }
    })
}

fn be_u16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}
fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// The fixed newstyle handshake up to transmission: `NBD_OPT_GO` for
/// `export`, asking for `NBD_INFO_BLOCK_SIZE` (so we must, and do, keep to
/// the sizes it gives), falling back to `NBD_OPT_EXPORT_NAME` on a server
/// without GO.
pub fn handshake<S: Read + Write>(s: &mut S, export: &str) -> io::Result<ExportInfo> {
    let no_zeroes = greet(s)?;
    go(s, export, no_zeroes)
}

/// The server's greeting and our flags; whether the server leaves out the
/// zeroes after `NBD_OPT_EXPORT_NAME`'s reply.
pub fn greet<S: Read + Write>(s: &mut S) -> io::Result<bool> {
    let mut greet = [0u8; 18];
    read_exact_or(s, &mut greet[..16], "the greeting")?;
    if be_u64(&greet) != NBDMAGIC {
        return Err(bad(format!(
            "bad greeting magic {:#018x} (is this an NBD server?)",
            be_u64(&greet)
        )));
    }
    match be_u64(&greet[8..]) {
        IHAVEOPT => {}
        CLISERV_MAGIC => return Err(bad("offers only the old-style handshake")),
        m => return Err(bad(format!("bad handshake magic {m:#018x}"))),
    }
    read_exact_or(s, &mut greet[16..], "the handshake flags")?;
    let hflags = be_u16(&greet[16..]);
    if hflags & FLAG_FIXED_NEWSTYLE == 0 {
        return Err(bad("does not offer the fixed newstyle handshake"));
    }
    let no_zeroes = hflags & FLAG_NO_ZEROES != 0;
    let mut cflags = FLAG_C_FIXED_NEWSTYLE;
    if no_zeroes {
        cflags |= FLAG_C_NO_ZEROES;
    }
    s.write_all(&cflags.to_be_bytes())?;
    Ok(no_zeroes)
}

/// `NBD_OPT_STARTTLS`: `Ok` when the server acknowledged it, so the TLS
/// handshake comes next on the same socket. Anything else is an error:
/// a client that asked for TLS never goes on without it.
pub fn starttls<S: Read + Write>(s: &mut S) -> io::Result<()> {
    send_option(s, OPT_STARTTLS, &[])?;
    let (kind, payload) = read_option_reply(s, OPT_STARTTLS)?;
    let msg = human(&payload);
    let why = match kind {
        REP_ACK => return Ok(()),
        REP_ERR_UNSUP => "it does not know NBD_OPT_STARTTLS".to_string(),
        REP_ERR_POLICY => "NBD_OPT_STARTTLS refused by policy".to_string(),
        REP_ERR_INVALID => "NBD_OPT_STARTTLS invalid (already in TLS?)".to_string(),
        k if k & REP_ERR != 0 => format!("NBD_OPT_STARTTLS answered with error {k:#x}"),
        k => format!("NBD_OPT_STARTTLS answered with reply type {k}"),
    };
    let _ = send_option(s, OPT_ABORT, &[]);
    let why = if msg.is_empty() {
        why
    } else {
        format!("{why}: {msg}")
    };
    Err(io::Error::new(io::ErrorKind::PermissionDenied, why))
}

/// `NBD_OPT_GO` for `export` (after [`greet`], and [`starttls`] if TLS).
pub fn go<S: Read + Write>(s: &mut S, export: &str, no_zeroes: bool) -> io::Result<ExportInfo> {
    if export.len() > MAX_NAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("NBD export name is longer than {MAX_NAME} bytes"),
        ));
    }
    let mut go = Vec::with_capacity(8 + export.len());
    go.extend_from_slice(&(export.len() as u32).to_be_bytes());
    go.extend_from_slice(export.as_bytes());
    go.extend_from_slice(&1u16.to_be_bytes());
    go.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    send_option(s, OPT_GO, &go)?;

    let mut export_info: Option<(u64, u16)> = None;
    let mut sizes: Option<(u32, u32, u32)> = None;
    for _ in 0..MAX_OPT_REPLIES {
        let (kind, payload) = read_option_reply(s, OPT_GO)?;
        match kind {
            REP_INFO => {
                if payload.len() < 2 {
                    return Err(bad("NBD_REP_INFO without an info type"));
                }
                match be_u16(&payload) {
                    INFO_EXPORT => {
                        if payload.len() != 12 {
                            return Err(bad("NBD_INFO_EXPORT of the wrong length"));
                        }
                        export_info = Some((be_u64(&payload[2..]), be_u16(&payload[10..])));
                    }
                    INFO_BLOCK_SIZE => {
                        if payload.len() != 14 {
                            return Err(bad("NBD_INFO_BLOCK_SIZE of the wrong length"));
                        }
                        sizes = Some((
                            be_u32(&payload[2..]),
                            be_u32(&payload[6..]),
                            be_u32(&payload[10..]),
                        ));
                    }
                    // Name, description and whatever comes later.
                    _ => {}
                }
            }
            REP_ACK => {
                let (size, flags) = export_info
                    .ok_or_else(|| bad("NBD_OPT_GO acknowledged without NBD_INFO_EXPORT"))?;
                return export_info_from(size, flags, sizes);
            }
            REP_ERR_UNSUP => return export_name_fallback(s, export, no_zeroes),
            k if k & REP_ERR != 0 => {
                // Leave politely; the error is what matters.
                let _ = send_option(s, OPT_ABORT, &[]);
                return Err(option_error(k, export, &payload));
            }
            k => return Err(bad(format!("unexpected option reply type {k}"))),
        }
    }
    Err(bad("too many replies to NBD_OPT_GO"))
}

fn send_option<W: Write>(w: &mut W, option: u32, data: &[u8]) -> io::Result<()> {
    let mut msg = Vec::with_capacity(16 + data.len());
    msg.extend_from_slice(&IHAVEOPT.to_be_bytes());
    msg.extend_from_slice(&option.to_be_bytes());
    msg.extend_from_slice(&(data.len() as u32).to_be_bytes());
    msg.extend_from_slice(data);
    w.write_all(&msg)?;
    w.flush()
}

/// One option reply: its type and payload.
fn read_option_reply<R: Read>(r: &mut R, option: u32) -> io::Result<(u32, Vec<u8>)> {
    let mut h = [0u8; 20];
    read_exact_or(r, &mut h, "an option reply")?;
    if be_u64(&h) != OPT_REPLY_MAGIC {
        return Err(bad(format!("bad option reply magic {:#018x}", be_u64(&h))));
    }
    if be_u32(&h[8..]) != option {
        return Err(bad(format!(
            "reply to option {} when {option} was asked",
            be_u32(&h[8..])
        )));
    }
    let kind = be_u32(&h[12..]);
    let len = be_u32(&h[16..]);
    if len > MAX_OPT_REPLY {
        return Err(bad(format!("option reply of {len} bytes")));
    }
    let mut payload = vec![0u8; len as usize];
    read_exact_or(r, &mut payload, "an option reply's payload")?;
    Ok((kind, payload))
}

fn option_error(kind: u32, export: &str, payload: &[u8]) -> io::Error {
    let what = match kind {
        REP_ERR_UNKNOWN => format!("no export named {export:?}"),
        REP_ERR_POLICY => "refused by policy (too many connections, or access denied)".into(),
        REP_ERR_INVALID => "the request was invalid".into(),
        REP_ERR_PLATFORM => "not supported on the server's platform".into(),
        REP_ERR_TLS_REQD => "requires TLS: use an nbds:// (or nbds+unix://) URI, \
             or give tls-certificates=DIR or tls-psk-file=FILE"
            .into(),
        REP_ERR_SHUTDOWN => "the server is shutting down".into(),
        REP_ERR_BLOCK_SIZE_REQD => "block sizes required".into(),
        k => format!("error {:#x}", k),
    };
    let msg = human(payload);
    let kind = match kind {
        REP_ERR_UNKNOWN => io::ErrorKind::NotFound,
        REP_ERR_POLICY => io::ErrorKind::PermissionDenied,
        _ => io::ErrorKind::Other,
    };
    if msg.is_empty() {
        io::Error::new(kind, format!("NBD server: {what}"))
    } else {
        io::Error::new(kind, format!("NBD server: {what}: {msg}"))
    }
}

/// An error reply's payload, a message for humans, made safe to print.
fn human(payload: &[u8]) -> String {
    String::from_utf8_lossy(payload)
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect()
}

/// The old way in, for servers without `NBD_OPT_GO`: no reply on error
/// (the server just hangs up), no block sizes.
fn export_name_fallback<S: Read + Write>(
    s: &mut S,
    export: &str,
    no_zeroes: bool,
) -> io::Result<ExportInfo> {
    send_option(s, OPT_EXPORT_NAME, export.as_bytes())?;
    let mut b = [0u8; 10 + 124];
    let len = if no_zeroes { 10 } else { b.len() };
    read_exact_or(
        s,
        &mut b[..len],
        "the export's size (does the export exist?)",
    )?;
    export_info_from(be_u64(&b), be_u16(&b[8..]), None)
}

/// Checks the server's numbers and fills in the spec's defaults.
pub fn export_info_from(
    size: u64,
    flags: u16,
    sizes: Option<(u32, u32, u32)>,
) -> io::Result<ExportInfo> {
    let flags = if flags & TFLAG_HAS_FLAGS != 0 {
        flags
    } else {
        0
    };
    let (min, pref, max) = sizes.unwrap_or((1, 4096, DEFAULT_MAX_PAYLOAD));
    if !min.is_power_of_two() || min > 65536 {
        return Err(bad(format!("invalid minimum block size {min}")));
    }
    if !pref.is_power_of_two() || pref < min {
        return Err(bad(format!(
            "invalid preferred block size {pref} (minimum {min})"
        )));
    }
    if max < min {
        return Err(bad(format!(
            "maximum payload {max} is below the minimum block size {min}"
        )));
    }
    // The most we put in one request: the server's limit, at most 32 MiB,
    // a whole number of minimum blocks.
    let max = max.min(DEFAULT_MAX_PAYLOAD) / min * min;
    if size > i64::MAX as u64 {
        return Err(bad(format!("export size {size} is out of range")));
    }
    Ok(ExportInfo {
        size: size / min as u64 * min as u64,
        flags,
        min_block: min,
        preferred_block: pref,
        max_payload: max,
    })
}

/// The 28-byte header of a transmission request.
pub fn encode_request(flags: u16, cmd: u16, cookie: u64, offset: u64, len: u32) -> [u8; 28] {
    let mut b = [0u8; 28];
    b[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&flags.to_be_bytes());
    b[6..8].copy_from_slice(&cmd.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b[16..24].copy_from_slice(&offset.to_be_bytes());
    b[24..28].copy_from_slice(&len.to_be_bytes());
    b
}

/// A simple reply's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyHeader {
    /// 0, or an NBD error number (errno values).
    pub error: u32,
    pub cookie: u64,
}

pub fn parse_reply_header(b: &[u8; 16]) -> io::Result<ReplyHeader> {
    match be_u32(b) {
        SIMPLE_REPLY_MAGIC => Ok(ReplyHeader {
            error: be_u32(&b[4..]),
            cookie: be_u64(&b[8..]),
        }),
        STRUCTURED_REPLY_MAGIC => Err(bad("structured reply, which was not negotiated")),
        m => Err(bad(format!("bad reply magic {m:#010x}"))),
    }
}

/// The errno for an NBD error number. The spec's numbers are errno values;
/// anything else becomes EIO.
pub fn errno(nbd_error: u32) -> i32 {
    match nbd_error {
        1 => libc::EPERM,
        5 => libc::EIO,
        12 => libc::ENOMEM,
        22 => libc::EINVAL,
        28 => libc::ENOSPC,
        75 => libc::EOVERFLOW,
        95 => libc::EOPNOTSUPP,
        108 => libc::ESHUTDOWN,
        _ => libc::EIO,
    }
}

/// One reply read off the wire: its cookie and either its data (empty
/// except for a read) or the server's error number.
pub type Reply = (u64, Result<Vec<u8>, u32>);

/// Reads one simple reply. `payload_len` gives, for a cookie we are
/// waiting on, how many data bytes follow a successful reply (a read's
/// length, else 0); a cookie it does not know is an error, since nothing
/// after it could be framed.
pub fn read_reply<R: Read>(
    r: &mut R,
    payload_len: impl FnOnce(u64) -> Option<usize>,
) -> io::Result<Reply> {
    let mut h = [0u8; 16];
    read_exact_or(r, &mut h, "a reply")?;
    let hdr = parse_reply_header(&h)?;
    let len = payload_len(hdr.cookie)
        .ok_or_else(|| bad(format!("reply with unknown cookie {:#x}", hdr.cookie)))?;
    if hdr.error != 0 {
        // Simple replies carry no data after an error.
        return Ok((hdr.cookie, Err(hdr.error)));
    }
    let mut data = vec![0u8; len];
    read_exact_or(r, &mut data, "a read's data")?;
    Ok((hdr.cookie, Ok(data)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_bad_sizes() {
        let i = export_info_from(10_000, TFLAG_HAS_FLAGS | TFLAG_SEND_FLUSH, None).unwrap();
        assert_eq!((i.min_block, i.preferred_block), (1, 4096));
        assert_eq!(i.max_payload, DEFAULT_MAX_PAYLOAD);
        assert!(i.can_flush() && !i.read_only());
        // Without HAS_FLAGS the other bits mean nothing.
        assert_eq!(export_info_from(1, TFLAG_READ_ONLY, None).unwrap().flags, 0);
        let i = export_info_from(10_000, 1, Some((512, 4096, u32::MAX))).unwrap();
        assert_eq!((i.size, i.max_payload), (9728, DEFAULT_MAX_PAYLOAD));
        assert!(export_info_from(1, 1, Some((3, 4096, 1 << 20))).is_err());
        assert!(export_info_from(1, 1, Some((1 << 17, 1 << 17, 1 << 20))).is_err());
        assert!(export_info_from(1, 1, Some((4096, 512, 1 << 20))).is_err());
        assert!(export_info_from(1, 1, Some((4096, 4096, 100))).is_err());
        assert!(export_info_from(u64::MAX, 1, None).is_err());
    }

    #[test]
    fn reply_headers() {
        let mut b = [0u8; 16];
        b[..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
        b[4..8].copy_from_slice(&5u32.to_be_bytes());
        b[8..].copy_from_slice(&77u64.to_be_bytes());
        assert_eq!(
            parse_reply_header(&b).unwrap(),
            ReplyHeader {
                error: 5,
                cookie: 77
            }
        );
        b[..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
        assert!(parse_reply_header(&b).is_err());
        let mut r = &b"garbage garbage garbage"[..];
        assert!(read_reply(&mut r, |_| Some(0)).is_err());
        let mut r = &[0u8; 3][..];
        let e = read_reply(&mut r, |_| Some(0)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(errno(5), libc::EIO);
        assert_eq!(errno(12345), libc::EIO);
    }
}
