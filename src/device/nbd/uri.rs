//! NBD URIs as qemu and libnbd write them (the NBD project's doc/uri.md):
//! `nbd://HOST[:PORT][/EXPORT]` and `nbd+unix:///EXPORT?socket=PATH`, and
//! their TLS forms `nbds://` and `nbds+unix://` with the query parameters
//! `tls-certificates=DIR`, `tls-psk-file=FILE`, `tls-username=` and
//! `tls-hostname=`.

use std::fmt;
use std::path::PathBuf;

use super::tls::TlsSettings;
use super::NbdAddress;

/// The NBD default port.
pub const DEFAULT_PORT: u16 = 10809;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NbdUri {
    pub address: NbdAddress,
    pub export: String,
    /// An `nbds` scheme: TLS or nothing.
    pub tls: bool,
    /// The `tls-*` query parameters (only with `nbds`).
    pub tls_settings: TlsSettings,
}

/// Whether `s` is meant as an NBD URI (so a parse error is worth
/// reporting, rather than treating `s` as a file name).
pub fn looks_like_nbd_uri(s: &str) -> bool {
    let scheme = s.split_once("://").map(|(sch, _)| sch.to_ascii_lowercase());
    matches!(
        scheme.as_deref(),
        Some("nbd" | "nbd+unix" | "nbd+tcp" | "nbds" | "nbds+unix" | "nbds+tcp" | "nbd+vsock")
    )
}

impl NbdUri {
    pub fn parse(s: &str) -> Result<NbdUri, String> {
        let err = |why: &str| format!("{s}: not a usable NBD URI: {why}");
        let (scheme, rest) = s.split_once("://").ok_or_else(|| err("no scheme"))?;
        let scheme = scheme.to_ascii_lowercase();
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        if rest.contains('#') {
            return Err(err("fragments are not allowed"));
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        // The export is the path without its first slash.
        let export = percent_decode(path.strip_prefix('/').unwrap_or(path))
            .ok_or_else(|| err("bad %-escape in the export name"))?;
        let mut socket = None;
        let mut tls_settings = TlsSettings::default();
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "socket" => {
                    let v = percent_decode(v).ok_or_else(|| err("bad %-escape in socket="))?;
                    socket = Some(PathBuf::from(v));
                }
                "tls-certificates" | "tls-psk-file" | "tls-username" | "tls-hostname" => {
                    let v = percent_decode(v)
                        .filter(|v| !v.is_empty())
                        .ok_or_else(|| err(&format!("bad or empty {k}=")))?;
                    let t = &mut tls_settings;
                    match k {
                        "tls-certificates" => t.certificates = Some(PathBuf::from(v)),
                        "tls-psk-file" => t.psk_file = Some(PathBuf::from(v)),
                        "tls-username" => t.username = Some(v),
                        _ => t.hostname = Some(v),
                    }
                }
                _ => return Err(err(&format!("unsupported query parameter {k:?}"))),
            }
        }
        let tls = scheme.starts_with("nbds");
        if !tls && tls_settings != TlsSettings::default() {
            return Err(err("tls-* parameters need an nbds:// or nbds+unix:// URI"));
        }
        let address = match scheme.as_str() {
            "nbd" | "nbd+tcp" | "nbds" | "nbds+tcp" => {
                if socket.is_some() {
                    return Err(err("socket= needs the nbd+unix scheme"));
                }
                let (host, port) = split_host_port(authority).map_err(|w| err(&w))?;
                NbdAddress::Tcp { host, port }
            }
            "nbd+unix" | "nbds+unix" => {
                if !authority.is_empty() {
                    return Err(err(&format!(
                        "{scheme} takes no host ({scheme}:///EXPORT?socket=PATH)"
                    )));
                }
                let path = socket.ok_or_else(|| err(&format!("{scheme} needs ?socket=PATH")))?;
                NbdAddress::Unix(path)
            }
            other => return Err(err(&format!("unsupported scheme {other:?}"))),
        };
        if export.len() > super::proto::MAX_NAME {
            return Err(err("export name too long"));
        }
        Ok(NbdUri {
            address,
            export,
            tls,
            tls_settings,
        })
    }
}

fn split_host_port(authority: &str) -> Result<(String, u16), String> {
    if authority.contains('@') {
        return Err("user names are not supported".into());
    }
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (h, after) = rest.split_once(']').ok_or("unclosed [ in the host")?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or("junk after ]")?),
        };
        (h.to_string(), port)
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (authority.to_string(), None),
        }
    };
    let port = match port {
        None | Some("") => DEFAULT_PORT,
        Some(p) => p.parse().map_err(|_| format!("bad port {p:?}"))?,
    };
    if host
        .chars()
        .any(|c| c.is_control() || c.is_whitespace() || "[]@/?#%".contains(c))
    {
        return Err(format!("bad host name {host:?}"));
    }
    // An empty host means the local machine, as libnbd reads it.
    let host = if host.is_empty() {
        "localhost".to_string()
    } else {
        host
    };
    Ok((host, port))
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn percent_encode(s: &str, keep: &[u8]) -> String {
    let mut out = String::new();
    for &c in s.as_bytes() {
        if c.is_ascii_alphanumeric() || b"-._~".contains(&c) || keep.contains(&c) {
            out.push(c as char);
        } else {
            out.push_str(&format!("%{c:02X}"));
        }
    }
    out
}

impl fmt::Display for NbdUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let export = percent_encode(&self.export, b"/");
        let s = if self.tls { "s" } else { "" };
        let mut query = Vec::new();
        if let NbdAddress::Unix(p) = &self.address {
            query.push(format!(
                "socket={}",
                percent_encode(&p.to_string_lossy(), b"/")
            ));
        }
        let t = &self.tls_settings;
        let paths = [
            ("tls-certificates", &t.certificates),
            ("tls-psk-file", &t.psk_file),
        ];
        for (k, v) in paths {
            if let Some(v) = v {
                query.push(format!(
                    "{k}={}",
                    percent_encode(&v.to_string_lossy(), b"/")
                ));
            }
        }
        for (k, v) in [("tls-username", &t.username), ("tls-hostname", &t.hostname)] {
            if let Some(v) = v {
                query.push(format!("{k}={}", percent_encode(v, b"")));
            }
        }
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{}", query.join("&"))
        };
        match &self.address {
            NbdAddress::Tcp { host, port } => {
                let host = if host.contains(':') {
                    format!("[{host}]")
                } else {
                    host.clone()
                };
                if *port == DEFAULT_PORT {
                    write!(f, "nbd{s}://{host}/{export}{query}")
                } else {
                    write!(f, "nbd{s}://{host}:{port}/{export}{query}")
                }
            }
            NbdAddress::Unix(_) => write!(f, "nbd{s}+unix:///{export}{query}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(host: &str, port: u16, export: &str) -> NbdUri {
        NbdUri {
            address: NbdAddress::Tcp {
                host: host.into(),
                port,
            },
            export: export.into(),
            tls: false,
            tls_settings: TlsSettings::default(),
        }
    }

    #[test]
    fn parses_the_forms_qemu_and_libnbd_write() {
        let p = |s: &str| NbdUri::parse(s).unwrap();
        assert_eq!(p("nbd://example.com"), tcp("example.com", 10809, ""));
        assert_eq!(p("nbd://example.com/"), tcp("example.com", 10809, ""));
        assert_eq!(
            p("nbd://127.0.0.1:1234/disk"),
            tcp("127.0.0.1", 1234, "disk")
        );
        assert_eq!(p("nbd://[::1]:99/a%20b"), tcp("::1", 99, "a b"));
        assert_eq!(p("nbd://h//abs"), tcp("h", 10809, "/abs"));
        assert_eq!(
            p("nbd+unix:///vol?socket=/run/nbd.sock"),
            NbdUri {
                address: NbdAddress::Unix("/run/nbd.sock".into()),
                export: "vol".into(),
                tls: false,
                tls_settings: TlsSettings::default(),
            }
        );
        assert_eq!(p("nbd+unix://?socket=/s").export, "");
        let t = p("nbds://h:99/x?tls-psk-file=/k.psk&tls-username=alice&tls-hostname=srv");
        assert!(t.tls);
        assert_eq!(t.address, tcp("h", 99, "x").address);
        assert_eq!(t.tls_settings.psk_file.as_deref(), Some("/k.psk".as_ref()));
        assert_eq!(t.tls_settings.username.as_deref(), Some("alice"));
        assert_eq!(t.tls_settings.hostname.as_deref(), Some("srv"));
        let t = p("nbds+unix:///v?socket=/s&tls-certificates=/etc/pki/qemu");
        assert!(t.tls && t.address == NbdAddress::Unix("/s".into()));
        assert_eq!(
            t.tls_settings.certificates.as_deref(),
            Some("/etc/pki/qemu".as_ref())
        );
        assert!(p("nbds://h").tls_settings == TlsSettings::default());
        for bad in [
            "nbds+unix:///x",
            "nbds://h/x?tls-username=",
            "nbd+unix:///x",
            "nbd+unix://host/x?socket=/s",
            "nbd://h:port/x",
            "nbd://h/x?socket=/s",
            "nbd://h/x?tls-certificates=/c",
            "nbd://u@h/x",
            "nbd://h/%zz",
            "nbd://[::1/x",
            "nbd://[[H]:9/x",
            "nbd://a b/x",
            "http://h/x",
        ] {
            assert!(NbdUri::parse(bad).is_err(), "{bad}");
        }
        assert!(looks_like_nbd_uri("NBD://h"));
        assert!(looks_like_nbd_uri("nbds://h"));
        assert!(!looks_like_nbd_uri("/tmp/nbd://x"));
        assert!(!looks_like_nbd_uri("image.img"));
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "nbd://example.com/disk",
            "nbd://127.0.0.1:1234/",
            "nbd://[::1]:99/a%20b",
            "nbd+unix:///vol?socket=/run/my%20nbd.sock",
            "nbds://h:7/e",
            "nbds+unix:///e?socket=/s&tls-psk-file=/k&tls-username=a%20b",
            "nbds://h/e?tls-certificates=/pki&tls-hostname=srv.example",
        ] {
            let u = NbdUri::parse(s).unwrap();
            assert_eq!(u.to_string(), s);
            assert_eq!(NbdUri::parse(&u.to_string()).unwrap(), u);
        }
    }
}
