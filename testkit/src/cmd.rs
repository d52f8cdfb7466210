//! Running a command and keeping what it printed.

use std::ffi::OsStr;
use std::process::Command;

/// The captured result of a command.
#[derive(Debug)]
pub struct Out {
    /// The exit code; `None` when killed by a signal (or not started).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// The command line, for messages.
    pub cmdline: String,
}

impl Out {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// The result of a command run by hand (for environment variables or
    /// a working directory of its own), under `cmdline` in messages.
    pub fn of(cmdline: &str, o: std::process::Output) -> Out {
        Out {
            code: o.status.code(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
            cmdline: cmdline.to_string(),
        }
    }

    /// Everything the command printed, with its command line and status,
    /// for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "$ {}\nexit: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.cmdline, self.code, self.stdout, self.stderr
        )
    }

    /// Panics with the full output unless the command exited 0.
    pub fn expect_ok(self) -> Self {
        assert!(self.success(), "command failed:\n{}", self.describe());
        self
    }
}

/// Runs `prog` with `args` in the C locale and captures its output. A
/// bare name is looked up on PATH and then in /sbin and /usr/sbin
/// ([`crate::tool`]). A command that cannot be started gives `code: None`
/// and the error in `stderr`.
pub fn run<P, I, S>(prog: P, args: I) -> Out
where
    P: AsRef<OsStr>,
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let prog = prog.as_ref();
    let name = prog.to_string_lossy().into_owned();
    let path = if name.contains('/') {
        None
    } else {
        crate::tool(&name)
    };
    let args: Vec<std::ffi::OsString> = args.into_iter().map(|a| a.as_ref().into()).collect();
    let cmdline = std::iter::once(name.clone())
        .chain(args.iter().map(|a| a.to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join(" ");
    match Command::new(path.as_deref().map_or(prog, |p| p.as_os_str()))
        .args(&args)
        .env("LC_ALL", "C")
        .env("LANG", "C")
        .env("TZ", "UTC")
        .output()
    {
        Ok(o) => Out {
            code: o.status.code(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
            cmdline,
        },
        Err(e) => Out {
            code: None,
            stdout: String::new(),
            stderr: format!("cannot run {name}: {e}"),
            cmdline,
        },
    }
}
