//! Small helpers shared across layers: time, randomness, unique names.

pub mod inthash;
pub mod rng;

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds and nanoseconds since the Unix epoch, now, from the same coarse
/// clock the kernel stamps inodes with (`current_time`). With the FUSE
/// writeback cache the kernel sets regular files' times itself; a finer
/// clock here could stamp a creation later than the kernel's next update.
pub fn now() -> (i64, u32) {
    let fixed = FIXED_NOW.load(Ordering::Relaxed);
    if fixed != i64::MIN {
        return (fixed, 0);
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid, owned `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    if rc == 0 {
        return (ts.tv_sec, ts.tv_nsec as u32);
    }
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(_) => (0, 0),
    }
}

/// [`fix_clock`]'s time, or `i64::MIN` for the real clock.
static FIXED_NOW: AtomicI64 = AtomicI64::new(i64::MIN);

/// Stops the clock at `sec` for the rest of the process: every time
/// [`now`] gives is then `sec`, as in a reproducible build
/// (`SOURCE_DATE_EPOCH`, mkfs.jbdfs -d).
pub fn fix_clock(sec: i64) {
    FIXED_NOW.store(sec, Ordering::Relaxed);
}

/// A process-unique counter, for temporary names in tests.
pub fn unique_suffix() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// `N` random bytes from the kernel's generator.
pub fn random_bytes<const N: usize>() -> std::io::Result<[u8; N]> {
    use std::io::Read;
    let mut out = [0u8; N];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut out)?;
    Ok(out)
}

/// A random (version 4) UUID.
pub fn random_uuid() -> std::io::Result<[u8; 16]> {
    let mut u = random_bytes::<16>()?;
    u[6] = (u[6] & 0x0f) | 0x40;
    u[8] = (u[8] & 0x3f) | 0x80;
    Ok(u)
}

/// Formats a UUID the usual way (8-4-4-4-12 hex digits).
pub fn format_uuid(u: &[u8; 16]) -> String {
    let h: Vec<String> = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        h[0..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..16].concat()
    )
}

/// Parses a UUID in 8-4-4-4-12 form.
pub fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let hex: String = s.chars().filter(|&c| c != '-').collect();
    if hex.len() != 32 || s.len() != 36 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Progress on long work, in e2fsprogs' style: `label: n/total` redrawn in
/// place on a terminal, then `done`. Quiet progress prints nothing.
pub struct Progress {
    enabled: bool,
    tty: bool,
    label: String,
    total: u64,
    last_percent: Option<u64>,
}

impl Progress {
    /// Progress on stdout; redrawn in place when stdout is a terminal.
    pub fn stdout(enabled: bool) -> Self {
        use std::io::IsTerminal;
        Progress {
            enabled,
            tty: std::io::stdout().is_terminal(),
            label: String::new(),
            total: 0,
            last_percent: None,
        }
    }

    pub fn quiet() -> Self {
        Self::stdout(false)
    }

    /// Prints a message as is.
    pub fn message(&mut self, text: &str) {
        if self.enabled {
            use std::io::Write;
            print!("{text}");
            let _ = std::io::stdout().flush();
        }
    }

    pub fn start(&mut self, label: &str, total: u64) {
        self.label = label.to_string();
        self.total = total;
        self.last_percent = None;
        self.message(&format!("{label}: "));
    }

    pub fn set(&mut self, done: u64) {
        if !self.enabled || !self.tty || self.total == 0 {
            return;
        }
        let percent = done * 100 / self.total;
        if self.last_percent == Some(percent) {
            return;
        }
        self.last_percent = Some(percent);
        let text = format!("{done}/{}", self.total);
        let back = "\u{8}".repeat(text.len());
        self.message(&format!("{text}{back}"));
    }

    pub fn finish(&mut self) {
        let pad = if self.tty { "                    " } else { "" };
        self.message(&format!("done{pad}\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_round_trip() {
        let u = random_uuid().unwrap();
        let s = format_uuid(&u);
        assert_eq!(parse_uuid(&s), Some(u));
        assert_eq!(parse_uuid("nope"), None);
    }
}
