//! Progress for `-C FD`, as e2fsck: with FD 0 a percentage redrawn on the
//! terminal; with another descriptor, "pass current total" lines for a
//! front end to read.

use std::fs::File;
use std::io::Write;

#[derive(Default)]
pub struct Progress {
    /// Lines go to this descriptor (not the terminal).
    sink: Option<File>,
    terminal: bool,
    name: String,
    /// The last pass and tenth of a percent shown.
    last: (u8, u64),
}

impl Progress {
    pub fn new(fd: Option<i32>, name: &str) -> Self {
        let mut p = Progress {
            name: name.to_string(),
            last: (0, u64::MAX),
            ..Default::default()
        };
        match fd {
            Some(0) => p.terminal = true,
            // Opening /proc/self/fd/N gives the same file without unsafe
            // code to adopt a raw descriptor.
            Some(n) if n > 0 => {
                p.sink = File::options()
                    .append(true)
                    .open(format!("/proc/self/fd/{n}"))
                    .ok()
            }
            _ => {}
        }
        p
    }

    pub fn update(&mut self, pass: u8, done: u64, total: u64) {
        if total == 0 || (!self.terminal && self.sink.is_none()) {
            return;
        }
        let tenths = done.min(total) * 1000 / total;
        if self.last == (pass, tenths) {
            return;
        }
        self.last = (pass, tenths);
        if let Some(f) = &mut self.sink {
            let _ = writeln!(f, "{pass} {done} {total}");
        } else {
            // Passes 1-5 take roughly 70, 20, 2, 3 and 5 percent of a check.
            let (start, share) = match pass {
                1 => (0, 700),
                2 => (700, 200),
                3 => (900, 20),
                4 => (920, 30),
                _ => (950, 50),
            };
            let overall = start + share * tenths / 1000;
            let bars = (overall / 20) as usize;
            let mut out = std::io::stdout();
            let _ = write!(
                out,
                "\r{}: |{}{}| {:>3}.{}%",
                self.name,
                "=".repeat(bars),
                " ".repeat(50 - bars.min(50)),
                overall / 10,
                overall % 10
            );
            let _ = out.flush();
        }
    }

    /// Clears the bar from the terminal line, before a message or at the
    /// end; the next update draws it again.
    pub fn clear(&mut self) {
        if self.terminal && self.last.1 != u64::MAX {
            let mut out = std::io::stdout();
            let _ = write!(out, "\r{}\r", " ".repeat(self.name.len() + 62));
            let _ = out.flush();
            self.last.1 = u64::MAX;
        }
    }
}
