//! fsck.jbdfs (built as fsck-jbdfs): the command line over `jbdfs::fsck`,
//! with e2fsck's flags and exit codes.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{CommandFactory, Parser};

/// println! that does not panic when stdout is a closed pipe.
macro_rules! say {
    ($($t:tt)*) => {
        jbdfs::fsck::problem::out(&format!($($t)*))
    };
}
use jbdfs::device::lock::{self, LockKind};
use jbdfs::device::{BlockDevice, FileDevice, OpenOptions, Source, SourceOptions};
use jbdfs::fsck::{self, exit, FsckError, FsckOptions, Mode};

#[derive(Parser, Debug)]
#[command(
    name = "fsck.jbdfs",
    version,
    about = "Check a jbdfs (ext3) filesystem, with e2fsck's flags and exit codes",
    after_help = "Exit status: 0 clean, 1 errors corrected, 4 errors left uncorrected, 8 operational error, 16 usage error, 32 cancelled.\nWith -p, -a or -y an image in use (mounted by jbdfs) is refused (exit 8); -n checks it anyway, read-only, with a warning."
)]
struct Args {
    /// Open read-only and answer "no" to every question.
    #[arg(short = 'n')]
    no: bool,
    /// Preen: fix what is safe without asking.
    #[arg(short = 'p')]
    preen: bool,
    /// Same as -p.
    #[arg(short = 'a')]
    auto: bool,
    /// Answer "yes" to every question.
    #[arg(short = 'y')]
    yes: bool,
    /// Check even if the filesystem seems clean.
    #[arg(short = 'f')]
    force: bool,
    /// Show progress on file descriptor FD (0 for the terminal).
    #[arg(short = 'C', value_name = "FD")]
    progress_fd: Option<i32>,
    /// Verbose.
    #[arg(short = 'v')]
    verbose: bool,
    /// Use the backup superblock at this block (and its group descriptors)
    /// instead of the primary; the primary is rewritten from it when fixing.
    #[arg(short = 'b', value_name = "SUPERBLOCK")]
    superblock: Option<u64>,
    /// The block size to read the -b superblock with (default: try each).
    #[arg(short = 'B', value_name = "BLOCKSIZE", requires = "superblock")]
    blocksize: Option<u32>,
    /// Optimize directories: rebuild each one, indexed where dir_index
    /// allows, its names sorted and packed.
    #[arg(short = 'D')]
    optimize: bool,
    /// The image file, block device or NBD URI (nbd://HOST[:PORT]/EXPORT,
    /// nbd+unix:///EXPORT?socket=PATH).
    device: PathBuf,
}

/// What fsck.jbdfs(8) adds to the page made from [`Args`].
const MAN_PAGE: jbdfs_man::Page = jbdfs_man::Page {
    notes: "NOTES",
    see_also: &["jbdfs(8)", "mkfs.jbdfs(8)", "e2fsck(8)"],
};

fn main() -> ExitCode {
    if let Some(code) = jbdfs_man::generate_if_asked(Args::command, &MAN_PAGE) {
        return code;
    }
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) if e.use_stderr() => {
            let _ = e.print();
            return ExitCode::from(exit::USAGE);
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    ExitCode::from(run(&args))
}

fn run(args: &Args) -> u8 {
    let modes = [args.no, args.preen || args.auto, args.yes];
    if modes.iter().filter(|&&m| m).count() > 1 {
        eprintln!("fsck.jbdfs: only one of the options -p/-a, -n or -y may be specified.");
        return exit::USAGE;
    }
    if args.no && args.optimize {
        eprintln!("fsck.jbdfs: The -n and -D options are incompatible.");
        return exit::ERROR;
    }
    let mode = if args.yes {
        Mode::Yes
    } else if args.preen || args.auto {
        Mode::Preen
    } else {
        Mode::No
    };
    let name = args.device.display().to_string();
    let source = match Source::parse(args.device.as_os_str()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fsck.jbdfs: {e}");
            return exit::ERROR;
        }
    };
    let dev = match &source {
        Source::Path(path) => match open_file(path, mode) {
            Some(d) => d,
            None => return exit::ERROR,
        },
        Source::Nbd(_) => {
            // No lock reaches a remote export: one writer is up to the
            // server (docs/REMOTE.md).
            let opts = SourceOptions::new(OpenOptions {
                read_only: mode == Mode::No,
                ..Default::default()
            });
            let opened = jbdfs::device::open::open(&source, &opts).and_then(|o| {
                if mode == Mode::No {
                    Ok(o.device)
                } else {
                    o.writable()
                }
            });
            match opened {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("fsck.jbdfs: {e} while trying to open {name}");
                    return exit::ERROR;
                }
            }
        }
    };
    let opts = FsckOptions {
        mode,
        force: args.force,
        echo: mode != Mode::Preen || args.verbose,
        progress_fd: args.progress_fd,
        name: name.clone(),
        superblock: args.superblock.map(|b| (b, args.blocksize)),
        compress_dirs: args.optimize,
    };
    match fsck::check(&*dev, &opts) {
        Ok(report) => {
            if report.skipped_clean {
                say!(
                    "{name}: clean, {}",
                    report.summary("").trim_start_matches(": ")
                );
                return report.exit_code();
            }
            if report.fixed > 0 && report.bytes_written > 0 {
                say!("\n{name}: ***** FILE SYSTEM WAS MODIFIED *****");
            }
            if report.unfixed > 0 {
                say!("\n{name}: ********** WARNING: Filesystem still has errors **********\n");
            }
            say!("{}", report.summary(&name));
            report.exit_code()
        }
        Err(FsckError::Unsupported(f)) => {
            eprintln!("fsck.jbdfs: {name} has unsupported feature(s): {f}");
            eprintln!("fsck.jbdfs: Get a newer version of e2fsck to check it; fsck.jbdfs checks ext3 only.");
            exit::ERROR
        }
        Err(FsckError::Abort(msg)) => {
            say!("{msg}");
            say!("Abort? yes\n");
            exit::ERROR
        }
        Err(FsckError::Io(e)) => {
            eprintln!("fsck.jbdfs: {e} while checking {name}");
            exit::ERROR
        }
        Err(e) => {
            eprintln!("fsck.jbdfs: {e}");
            eprintln!("fsck.jbdfs: {name} does not hold a valid ext3 filesystem (the superblock could not be read or is invalid)");
            exit::ERROR
        }
    }
}

/// Opens an image file or block device as e2fsck does: a check that may
/// write needs the image to itself (its lock, or O_EXCL on a device); -n
/// looks without a lock, and warns when someone holds it. None after
/// saying why it cannot.
fn open_file(path: &Path, mode: Mode) -> Option<Arc<dyn BlockDevice>> {
    let name = path.display();
    let dev = match FileDevice::open(
        path,
        OpenOptions {
            read_only: mode == Mode::No,
            exclusive: mode != Mode::No,
            no_lock: mode == Mode::No,
            ..Default::default()
        },
    ) {
        Ok(d) => d,
        Err(e) => {
            if let Some(busy) = lock::in_use(&e) {
                eprintln!("fsck.jbdfs: {busy}.");
                eprintln!("fsck.jbdfs: Cannot continue, aborting.");
            } else {
                eprintln!("fsck.jbdfs: {e} while trying to open {name}");
            }
            return None;
        }
    };
    if mode == Mode::No && lock::conflicts(dev.file(), LockKind::Read).unwrap_or(false) {
        let busy = lock::InUse {
            path: path.to_path_buf(),
            holder: lock::find_holder(path, dev.file()),
        };
        say!("Warning!  {busy}.");
        say!("Warning: it may change while it is checked; what is found may not be there.\n");
    }
    Some(Arc::new(dev))
}
