//! Man pages (section 8) for jbdfs, mkfs.jbdfs and fsck.jbdfs, written
//! from the clap definitions their `--help` comes from, so the two cannot
//! drift apart.
//!
//! Each binary calls [`generate_if_asked`] first thing in `main`: run as
//! `BIN --generate-man DIR` it writes `DIR/NAME.8` and exits, before its
//! own parser sees the arguments (the daemon's required SOURCE and
//! MOUNTPOINT would refuse the flag). scripts/install.sh installs the
//! pages that way; [`check_binary`] is what the binaries' tests assert.
//!
//! A page is clap_mangen's NAME, SYNOPSIS, DESCRIPTION and OPTIONS, then
//! the command's after-help text kept line for line (it is a table of
//! mount options for the daemon) under a title of the binary's choosing,
//! then VERSION and SEE ALSO.

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, ExitCode};

use clap::Command;
use clap_mangen::Man;
use roff::{bold, roman, Roff};

/// The argument that asks a binary for its man page.
pub const FLAG: &str = "--generate-man";

/// The manual section of all three pages: they are system administration
/// commands (a mount helper, mkfs and fsck).
pub const SECTION: &str = "8";

/// What a binary adds to the page clap_mangen makes of its command.
#[derive(Clone, Copy, Debug)]
pub struct Page {
    /// The title of the section holding the command's after-help text.
    pub notes: &'static str,
    /// Other pages to name under SEE ALSO, as `name(section)`.
    pub see_also: &'static [&'static str],
}

/// If this process was started as `BIN --generate-man DIR`, writes the page
/// of `cmd` into DIR, prints its path and returns the exit code; otherwise
/// returns None and the binary goes on as usual.
pub fn generate_if_asked(cmd: impl FnOnce() -> Command, page: &Page) -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(OsStr::new(FLAG)) {
        return None;
    }
    let (Some(dir), None) = (args.next(), args.next()) else {
        eprintln!("usage: {FLAG} DIR");
        return Some(ExitCode::from(2));
    };
    match write_page(cmd(), page, Path::new(&dir)) {
        Ok(path) => {
            println!("{}", path.display());
            Some(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("{FLAG}: {}: {e}", Path::new(&dir).display());
            Some(ExitCode::from(1))
        }
    }
}

/// Writes the page of `cmd` to `dir/NAME.8`, creating `dir`; returns the
/// file's path.
pub fn write_page(cmd: Command, page: &Page, dir: &Path) -> io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let name = cmd.get_name().to_string();
    let path = dir.join(format!("{name}.{SECTION}"));
    std::fs::write(&path, render(cmd, page)?)?;
    Ok(path)
}

/// The page of `cmd` as roff source.
pub fn render(cmd: Command, page: &Page) -> io::Result<String> {
    let mut cmd = cmd;
    cmd.build();
    let notes = cmd.get_after_help().map(|h| h.to_string());
    let version = cmd.get_version().map(str::to_string);
    let man = Man::new(cmd.clone())
        .title(cmd.get_name().to_uppercase())
        .section(SECTION)
        // clap_mangen leaves out an empty date, which would shift the
        // source and manual into the wrong places of .TH.
        .date(date_today())
        .source(format!("jbdfs {}", version.as_deref().unwrap_or_default()))
        .manual("System Administration");
    let mut out = String::new();
    append(&mut out, |w| man.render_title(w))?;
    append(&mut out, |w| man.render_name_section(w))?;
    append(&mut out, |w| man.render_synopsis_section(w))?;
    append(&mut out, |w| man.render_description_section(w))?;
    append(&mut out, |w| man.render_options_section(w))?;
    let mut tail = Roff::new();
    if let Some(notes) = notes {
        tail.control("SH", [page.notes]);
        notes_as_help_shows_them(&mut tail, &notes);
    }
    if let Some(v) = version {
        tail.control("SH", ["VERSION"]);
        tail.text([roman(format!("{} {v}", cmd.get_name()))]);
    }
    if !page.see_also.is_empty() {
        tail.control("SH", ["SEE ALSO"]);
        let mut refs = Vec::new();
        for (i, r) in page.see_also.iter().enumerate() {
            let (name, rest) = r.split_once('(').unwrap_or((r, ""));
            refs.push(bold(name));
            let sep = if i + 1 < page.see_also.len() {
                ", "
            } else {
                ""
            };
            refs.push(roman(format!("({rest}{sep}")));
        }
        tail.text(refs);
    }
    append(&mut out, |w| tail.to_writer(w))?;
    Ok(out)
}

/// The after-help text as --help lays it out: indented lines (tables)
/// unfilled so their columns stay, runs of other lines filled into
/// paragraphs. Nothing is hyphenated: option names must read whole.
fn notes_as_help_shows_them(roff: &mut Roff, notes: &str) {
    roff.control("nh", []);
    let mut unfilled = false;
    for line in notes.lines() {
        let table = line.starts_with(' ');
        if table != unfilled {
            roff.control(if table { "nf" } else { "fi" }, []);
            unfilled = table;
        }
        roff.text([roman(line)]);
    }
    if unfilled {
        roff.control("fi", []);
    }
    roff.control("hy", []);
}

/// The page's date, YYYY-MM-DD in UTC: SOURCE_DATE_EPOCH's if set (for
/// reproducible builds), else today's.
fn date_today() -> String {
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        });
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's civil_from_days).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Appends one rendered piece, dropping the apostrophe preamble that roff
/// writes at the start of each piece but the first.
fn append(out: &mut String, f: impl FnOnce(&mut Vec<u8>) -> io::Result<()>) -> io::Result<()> {
    let mut buf = Vec::new();
    f(&mut buf)?;
    let text = String::from_utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    if out.is_empty() {
        out.push_str(&text);
    } else {
        let body: Vec<&str> = text
            .lines()
            .skip_while(|l| l.starts_with(".ie \\n(.g .ds Aq") || l.starts_with(".el .ds Aq"))
            .collect();
        for l in body {
            out.push_str(l);
            out.push('\n');
        }
    }
    Ok(())
}

/// Checks the man page of the binary at `bin` against its `--help`: the
/// page is written by `bin --generate-man`, named `page_name`, has NAME,
/// SYNOPSIS, DESCRIPTION and OPTIONS, and names every option of `--help`
/// and every line of its after-help text. Where man(1) is installed the
/// page must also render with `man -l` without a warning; where it is not,
/// that part is skipped with a note, or fails under
/// `JBDFS_REQUIRE_ORACLES=1`. Returns what is wrong, if anything.
pub fn check_binary(bin: &Path, page_name: &str) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("jbdfs-man-{}-{}", std::process::id(), page_name));
    let _ = std::fs::remove_dir_all(&dir);
    let result = check_in(bin, page_name, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn check_in(bin: &Path, page_name: &str, dir: &Path) -> Result<(), String> {
    let out = run(Process::new(bin).arg(FLAG).arg(dir))?;
    let path = dir.join(format!("{page_name}.{SECTION}"));
    if out.trim() != path.display().to_string() {
        return Err(format!("{FLAG} printed {out:?}, not {}", path.display()));
    }
    let roff = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let title = format!(".TH {} {SECTION} ", page_name.to_uppercase());
    if !roff.contains(&title) {
        return Err(format!("no {title:?} line"));
    }
    for section in ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS"] {
        if !roff.contains(&format!("\n.SH {section}\n")) {
            return Err(format!("no {section} section"));
        }
    }
    let help = run(Process::new(bin).arg("--help"))?;
    let plain = unroff(&roff);
    let mut wanted = options_of(&help);
    wanted.extend(after_help_lines(&help));
    for w in &wanted {
        if !squeeze(&plain).contains(&squeeze(w)) {
            return Err(format!("the page does not name {w:?}"));
        }
    }
    check_with_man(&path, &wanted)
}

/// Renders the page with `man -l` and looks for every wanted text in it.
fn check_with_man(path: &Path, wanted: &[String]) -> Result<(), String> {
    let out = Process::new("man")
        .arg("--warnings")
        .arg("-l")
        .arg(path)
        .env("LC_ALL", "C")
        .env("MANWIDTH", "200")
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if std::env::var_os("JBDFS_REQUIRE_ORACLES").is_some_and(|v| v == "1") {
                return Err("man(1) is not installed (JBDFS_REQUIRE_ORACLES=1)".into());
            }
            eprintln!("skipping the man -l check: man(1) is not installed");
            return Ok(());
        }
        Err(e) => return Err(format!("man -l: {e}")),
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() || !stderr.trim().is_empty() {
        return Err(format!(
            "man -l {}: {}: {stderr}",
            path.display(),
            out.status
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    for heading in ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS"] {
        if !text.lines().any(|l| l == heading) {
            return Err(format!("man -l shows no {heading} heading"));
        }
    }
    for w in wanted {
        if !squeeze(&text).contains(&squeeze(w)) {
            return Err(format!("man -l does not show {w:?}"));
        }
    }
    Ok(())
}

fn run(cmd: &mut Process) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Every option `--help` lists: `-x` and `--long` at the start of the
/// entries of its Options section.
fn options_of(help: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut in_options = false;
    for line in help.lines() {
        if line.ends_with(':') && !line.starts_with(' ') {
            in_options = line == "Options:";
            continue;
        }
        let entry = line.trim_start();
        if !in_options || !entry.starts_with('-') {
            continue;
        }
        for token in entry.split([' ', ',']) {
            // A counted flag shows as `-F...`.
            let token = token.trim_end_matches("...");
            if token.starts_with('-') && token.len() > 1 {
                found.push(token.to_string());
            } else if !token.is_empty() && !token.starts_with('<') {
                break;
            }
        }
    }
    found
}

/// The non-empty lines after the last section of `--help` (clap prints
/// after_help last).
fn after_help_lines(help: &str) -> Vec<String> {
    let body: Vec<&str> = help.lines().collect();
    // The after-help starts after the blank line that ends the options.
    let Some(opts) = body.iter().position(|l| *l == "Options:") else {
        return Vec::new();
    };
    let Some(blank) = body[opts..].iter().position(|l| l.trim().is_empty()) else {
        return Vec::new();
    };
    body[opts + blank..]
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.to_string())
        .collect()
}

/// Roff source as plain text, near enough to look for words in: escapes
/// and font changes undone, control lines dropped.
fn unroff(roff: &str) -> String {
    roff.lines()
        .filter(|l| !l.starts_with('.') || l.starts_with(".TP") || l.starts_with(".SH"))
        .map(|l| {
            l.replace("\\-", "-")
                .replace("\\*(Aq", "'")
                .replace("\\fB", "")
                .replace("\\fI", "")
                .replace("\\fR", "")
                .replace("\\fP", "")
                .replace("\\&", "")
                .replace("\\\\", "\\")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whitespace runs as one space, for comparing filled text.
fn squeeze(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const HELP: &str = "About\n\nUsage: x [OPTIONS] <A>\n\nArguments:\n  <A>  an a\n\nOptions:\n  -f             Stay\n  -F...          Force\n  -o <OPTIONS>   Opts\n  -h, --help     Print help\n  -V, --version  Print version\n\nNotes here:\n  a=1   the a\n";

    #[test]
    fn dates_are_civil() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_791), (2026, 12, 4));
    }

    #[test]
    fn options_and_after_help_are_read_from_help() {
        assert_eq!(
            options_of(HELP),
            ["-f", "-F", "-o", "-h", "--help", "-V", "--version"]
        );
        assert_eq!(after_help_lines(HELP), ["Notes here:", "  a=1   the a"]);
    }

    #[test]
    fn a_page_has_the_sections_and_keeps_the_notes_verbatim() {
        let cmd = Command::new("demo.jbdfs")
            .version("1.0")
            .about("Does a demo")
            .arg(
                clap::Arg::new("force")
                    .short('F')
                    .long("force")
                    .action(clap::ArgAction::SetTrue),
            )
            .after_help("Notes:\n  a=1   the 'a' - option\n.dot line");
        let page = Page {
            notes: "NOTES",
            see_also: &["jbdfs(8)", "mount(8)"],
        };
        let r = render(cmd, &page).unwrap();
        assert_eq!(r.matches(".ds Aq").count(), 2, "one preamble: {r}");
        let th = r.lines().find(|l| l.starts_with(".TH")).unwrap();
        assert!(th.starts_with(".TH DEMO.JBDFS 8 20"), "{th}");
        assert!(
            th.ends_with(" \"jbdfs 1.0\" \"System Administration\""),
            "{th}"
        );
        for s in [
            "NAME",
            "SYNOPSIS",
            "DESCRIPTION",
            "OPTIONS",
            "NOTES",
            "VERSION",
        ] {
            assert!(r.contains(&format!("\n.SH {s}\n")), "{s}: {r}");
        }
        assert!(r.contains(".SH \"SEE ALSO\""), "{r}");
        let notes = "\n.SH NOTES\n.nh\nNotes:\n.nf\n  a=1   the \\*(Aqa\\*(Aq \\- option\n.fi\n\\&.dot line\n.hy\n";
        assert!(r.contains(notes), "{r}");
        assert!(unroff(&r).contains("--force"), "{r}");
    }
}
