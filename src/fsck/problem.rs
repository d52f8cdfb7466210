//! Problem reporting, as e2fsck's `fix_problem`: print the message, answer
//! the question by the mode (-n no, -y yes, -p yes quietly), and count what
//! was fixed and what was left.

use std::io::Write;

use super::progress::Progress;
use super::{FsckOptions, Mode};

/// Prints a line on stdout; a closed pipe is not worth a panic.
pub fn out(text: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

/// Whether answering "no" leaves the filesystem in error (e2fsck's
/// `PR_NO_OK` marks the problems for which it does not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Error,
    NoOk,
}

#[derive(Default)]
pub struct Problems {
    mode: Mode,
    echo: bool,
    /// Every problem message, in order.
    pub messages: Vec<String>,
    pub fixed: usize,
    pub unfixed: usize,
    pub bar: Progress,
    /// Preen met a problem it may not fix alone (e2fsck's `preenhalt`).
    pub halted: bool,
    name: String,
}

impl Problems {
    pub fn new(opts: &FsckOptions) -> Self {
        Problems {
            mode: opts.mode,
            echo: opts.echo,
            bar: Progress::new(opts.progress_fd, &opts.name),
            name: opts.name.clone(),
            ..Default::default()
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Prints a line that is not a question.
    pub fn say(&mut self, text: &str) {
        if self.echo {
            self.bar.clear();
            out(text);
        }
    }

    /// Reports a problem and returns whether to fix it. `msg` ends with the
    /// separator e2fsck puts before the question ("  " or "\n"). Preen
    /// does not fix these: it stops, as e2fsck -p does.
    pub fn ask(&mut self, msg: &str, question: &str) -> bool {
        if self.mode == Mode::Preen {
            self.halt(msg);
            return false;
        }
        self.ask_with(msg, question, Severity::Error)
    }

    /// A problem preen may fix without asking (e2fsck's `PR_PREEN_OK`).
    pub fn ask_safe(&mut self, msg: &str, question: &str) -> bool {
        self.ask_with(msg, question, Severity::Error)
    }

    fn halt(&mut self, msg: &str) {
        self.messages.push(msg.trim_end().to_string());
        self.unfixed += 1;
        if self.halted {
            return;
        }
        self.halted = true;
        if self.echo {
            self.bar.clear();
            let name = &self.name;
            out(&format!(
                "{name}: {}\n\n{name}: UNEXPECTED INCONSISTENCY; RUN fsck MANUALLY.\n\t(i.e., without -a or -p options)",
                msg.trim_end()
            ));
        }
    }

    pub fn ask_with(&mut self, msg: &str, question: &str, sev: Severity) -> bool {
        if self.halted {
            self.messages.push(msg.trim_end().to_string());
            self.unfixed += usize::from(sev == Severity::Error);
            return false;
        }
        self.messages.push(msg.trim_end().to_string());
        let yes = self.mode != Mode::No;
        if self.echo {
            self.bar.clear();
            match self.mode {
                Mode::Preen => out(&format!("{} FIXED.", msg.trim_end())),
                _ => out(&format!(
                    "{msg}{question}? {}\n",
                    if yes { "yes" } else { "no" }
                )),
            }
        }
        if yes {
            self.fixed += 1;
        } else if sev == Severity::Error {
            self.unfixed += 1;
        }
        yes
    }

    /// A problem with no question (fixed without asking, when allowed).
    pub fn fixed_note(&mut self, msg: &str) -> bool {
        self.messages.push(msg.to_string());
        let yes = self.mode != Mode::No && !self.halted;
        if self.echo {
            self.bar.clear();
            out(&format!("{msg}{}", if yes { "" } else { " IGNORED." }));
        }
        if yes {
            self.fixed += 1;
        } else {
            self.unfixed += 1;
        }
        yes
    }

    /// A problem that cannot be fixed.
    pub fn unfixable(&mut self, msg: &str) {
        self.messages.push(msg.to_string());
        self.unfixed += 1;
        if self.echo {
            self.bar.clear();
            out(msg);
        }
    }
}
