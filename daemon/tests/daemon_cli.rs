//! The jbdfs daemon's command line as mount.fuse3 and fstab users meet it:
//! help, option errors named by option, and the argument orders mount helpers use.

use std::path::PathBuf;
use std::process::{Command, Output};

fn jbdfs(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_jbdfs"))
        .args(args)
        // The test must not depend on the caller's log settings.
        .env_remove("RUST_LOG")
        .output()
        .expect("run jbdfs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A real image file and mount point, so only the thing under test can fail.
struct Fixture {
    dir: PathBuf,
}

impl Fixture {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("jbdfs-cli-{name}-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("mnt")).unwrap();
        std::fs::write(dir.join("image"), [0u8; 4096]).unwrap();
        Fixture { dir }
    }

    fn image(&self) -> String {
        self.dir.join("image").display().to_string()
    }

    fn mnt(&self) -> String {
        self.dir.join("mnt").display().to_string()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Got as far as reading the (deliberately blank) image: every argument
/// was accepted, and the bad image is refused with a clear message.
fn assert_accepted(out: &Output) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot mount"), "{err}");
}

#[test]
fn help_lists_flags_and_exits_zero() {
    let out = jbdfs(&["--help"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in ["-f", "-o", "-d", "-s", "SOURCE", "MOUNTPOINT", "bdelay="] {
        assert!(text.contains(needle), "help lacks {needle}:\n{text}");
    }
}

#[test]
fn version_exits_zero() {
    let out = jbdfs(&["--version"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("jbdfs "));
}

#[test]
fn unknown_option_is_named() {
    let fx = Fixture::new("unknown");
    let out = jbdfs(&[&fx.image(), &fx.mnt(), "-o", "noatime,frobnicate"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("jbdfs: unknown mount option \"frobnicate\""),
        "{err}"
    );
}

#[test]
fn bad_bdelay_is_named() {
    let fx = Fixture::new("bdelay");
    let out = jbdfs(&[&fx.image(), &fx.mnt(), "-o", "bdelay=bogus"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with("jbdfs: "), "{err}");
    assert!(err.contains("bdelay") && err.contains("bogus"), "{err}");
}

#[test]
fn missing_source_argument_is_a_usage_error() {
    let out = jbdfs(&["-o", "ro"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("SOURCE"), "{err}");
}

#[test]
fn nonexistent_source_is_reported() {
    let fx = Fixture::new("nosource");
    let missing = fx.dir.join("no-such-image").display().to_string();
    let out = jbdfs(&[&missing, &fx.mnt()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("jbdfs: SOURCE") && err.contains("no-such-image"),
        "{err}"
    );
}

#[test]
fn source_must_not_be_a_directory() {
    let fx = Fixture::new("dirsource");
    let out = jbdfs(&[&fx.mnt(), &fx.mnt()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("neither a regular file nor a block device"),
        "{err}"
    );
}

#[test]
fn mountpoint_must_be_a_directory() {
    let fx = Fixture::new("filemnt");
    let out = jbdfs(&[&fx.image(), &fx.image()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("MOUNTPOINT") && err.contains("not a directory"),
        "{err}"
    );
}

#[test]
fn options_after_positionals_as_mount_fuse3_passes_them() {
    let fx = Fixture::new("after");
    let out = jbdfs(&[
        &fx.image(),
        &fx.mnt(),
        "-o",
        "rw,nosuid,nodev",
        "-o",
        "data=journal",
    ]);
    assert_accepted(&out);
}

#[test]
fn options_before_positionals() {
    let fx = Fixture::new("before");
    let out = jbdfs(&["-o", "bdelay=1,noatime", "-f", "-s", &fx.image(), &fx.mnt()]);
    assert_accepted(&out);
}

#[test]
fn options_between_positionals_and_attached_form() {
    let fx = Fixture::new("between");
    let out = jbdfs(&[
        &fx.image(),
        "-obdelay=yield",
        &fx.mnt(),
        "-o",
        "_netdev,x-systemd.automount",
    ]);
    assert_accepted(&out);
}

#[test]
fn debug_flag_turns_on_debug_logging() {
    let fx = Fixture::new("debug");
    let out = jbdfs(&["-d", &fx.image(), &fx.mnt(), "-o", "threads=4"]);
    assert_accepted(&out);
    let err = stderr(&out);
    assert!(
        err.contains("parsed mount options") && err.contains("threads: 4"),
        "{err}"
    );
}

#[test]
fn options_are_quiet_without_debug() {
    let fx = Fixture::new("quiet");
    let out = jbdfs(&[&fx.image(), &fx.mnt()]);
    assert_accepted(&out);
    assert!(!stderr(&out).contains("parsed mount options"));
}

#[test]
fn ext4_images_are_refused_naming_the_features() {
    let fx = Fixture::new("ext4");
    let img = fx.image();
    std::fs::write(&img, []).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.set_len(32 << 20).unwrap();
    let made = Command::new("mke2fs")
        .args(["-q", "-F", "-t", "ext4", &img])
        .status();
    if !made.map(|s| s.success()).unwrap_or(false) {
        eprintln!("skipping: mke2fs -t ext4 is not available");
        return;
    }
    let out = jbdfs(&["-f", &img, &fx.mnt()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("unsupported filesystem features"), "{err}");
    assert!(err.contains("extent"), "{err}");
}

/// `jbdfs --generate-man DIR` writes jbdfs.8: valid roff that man -l
/// renders, naming every flag and every mount option of --help.
#[test]
fn man_page_names_every_flag_and_mount_option() {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_jbdfs"));
    jbdfs_man::check_binary(bin, "jbdfs").unwrap();
}
