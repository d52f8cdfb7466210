"""What every benchmark shares: paths and environment, messages, building,
the FUSE transports, the report's header, signals and cache dropping.

Environment (as the shell scripts had it):
  JBDFS_BIN_DIR      the build measured (default $CARGO_TARGET_DIR/release or target/release)
  JBDFS_NO_BUILD=1   do not run cargo build first
  BENCH_DISK_DIR     where "disk" images go (default /var/tmp; JBDFS_DISK_DIR for seqio)
  BENCH_IMAGE_SIZE   image size of the fs_mark, tree and afd runs (default 2G, sparse)
  BENCH_NBD_DELAY    nbdkit's delay per read and write for "nbd-delay" (default 1ms)
  BENCH_URING_Q_DEPTH  io_uring queue depth: jbdfs -o io_uring_q_depth=N, fuse_floor --depth N
  BENCH_URING_POLL_US  io_uring polling after answers: jbdfs -o io_uring_poll_us=N, fuse_floor --poll-us N
  MNT_KEEP=1         keep the images
"""
import os
import shlex
import signal
import tempfile
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
URING_PARAM = Path(os.environ.get("BENCH_URING_PARAM", "/sys/module/fuse/parameters/enable_uring"))
URING_Q_DEPTH = os.environ.get("BENCH_URING_Q_DEPTH", "")
URING_POLL_US = os.environ.get("BENCH_URING_POLL_US", "")
TRANSPORTS = ("dev_fuse", "io_uring")

for _d in ("/usr/local/sbin", "/usr/sbin", "/sbin"):
    if _d not in os.environ.get("PATH", "").split(":"):
        os.environ["PATH"] = os.environ.get("PATH", "") + ":" + _d

# The name messages carry: the wrapper's (bench-fsmark.sh), else "bench CMD".
PROG = os.environ.get("BENCH_PROG", "bench")


def bin_dir():
    if os.environ.get("JBDFS_BIN_DIR"):
        return Path(os.environ["JBDFS_BIN_DIR"])
    return Path(os.environ.get("CARGO_TARGET_DIR") or ROOT / "target") / "release"


def info(msg):
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)


def warn(msg):
    print(f"{PROG}: warning: {msg}", file=sys.stderr, flush=True)


def die(msg):
    print(f"{PROG}: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def section(title):
    print(f"\n==== {title} ====", flush=True)


def need_root(what="this"):
    if os.geteuid() != 0:
        die(f"{what} needs root (run it with sudo or as root)")


def have_loop():
    return os.path.exists("/dev/loop-control") and subprocess.run(
        ["losetup", "-f"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def need(cmd, why):
    from shutil import which
    if not which(cmd):
        die(f"{cmd} is missing ({why})")


def run(args, **kw):
    """subprocess.run with check=True unless told; args are strings."""
    kw.setdefault("check", True)
    return subprocess.run([str(a) for a in args], **kw)


def quiet(args, **kw):
    return run(args, stdout=subprocess.DEVNULL, **kw)


def build(floor=False):
    """Build the release binaries (and the FUSE floor) unless JBDFS_NO_BUILD=1."""
    if os.environ.get("JBDFS_NO_BUILD", "0") != "1":
        info("cargo build --release --workspace")
        if subprocess.run(["cargo", "build", "--quiet", "--release", "--workspace"], cwd=ROOT,
                          stdout=sys.stderr).returncode:
            die("build failed")
        if floor and subprocess.run(["cargo", "build", "--quiet", "--release", "-p", "jbdfs-daemon",
                                     "--example", "fuse_floor"], cwd=ROOT, stdout=sys.stderr).returncode:
            die("building daemon/examples/fuse_floor.rs failed")
    for b in ("jbdfs", "mkfs-jbdfs") + (("examples/fuse_floor",) if floor else ()):
        if not (bin_dir() / b).exists():
            die(f"{bin_dir() / b} not found (build it, or set JBDFS_BIN_DIR)")


def drop_caches():
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        pass


def uring_state():
    try:
        return URING_PARAM.read_text().strip()
    except OSError:
        return "absent"


class Transports:
    """The FUSE transports a run measures. This package never writes
    enable_uring: when it is not Y, io_uring is left out with a note (and
    the run measures /dev/fuse), so no figure is ever labelled io_uring that
    was not served over it."""

    def __init__(self, want=None):
        state = uring_state()
        self.note = ""
        if want in (None, ""):
            want = "both"
        if want not in ("dev_fuse", "io_uring", "both"):
            die(f"unknown transport '{want}' (expected dev_fuse, io_uring or both)")
        wanted = list(TRANSPORTS) if want == "both" else [want]
        if "io_uring" in wanted and state != "Y":
            self.note = (f"io_uring skipped: {URING_PARAM} is {state} (this run does not change it; "
                         "as root: echo 1 > it)")
            warn(self.note + "; measuring /dev/fuse only")
            wanted = ["dev_fuse"]
        self.list = wanted

    def __iter__(self):
        return iter(self.list)


def cmdline():
    return os.environ.get("BENCH_CMDLINE", "").rstrip() or " ".join(shlex.quote(a) for a in sys.argv)


def machine():
    with open("/proc/meminfo") as f:
        mem = next(int(line.split()[1]) for line in f if line.startswith("MemTotal"))
    return (f"{os.cpu_count()} cores, {mem / 1048576:.0f} GiB, kernel {os.uname().release}; "
            f"cpuidle: {cpuidle()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")


def read_sys(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def cpuidle():
    """How idle CPUs sleep. It moves every figure with a thread hand-off in
    it: a virtual machine's guest that halts at once (haltpoll with
    guest_halt_poll_ns 0) pays a VM exit for each wake-up of an idle CPU,
    which slows FUSE's round trips and ext3's loop and jbd2 threads alike,
    by up to 3x on a single-threaded workload (docs/PERFORMANCE.md)."""
    governor = read_sys("/sys/devices/system/cpu/cpuidle/current_governor") or "none"
    poll = read_sys("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
    return f"{governor}, guest_halt_poll_ns {poll}" if poll is not None else governor


def uring_options():
    """jbdfs's -o options for io_uring, with BENCH_URING_Q_DEPTH and _POLL_US."""
    opts = ["io_uring"]
    opts += [f"io_uring_q_depth={URING_Q_DEPTH}"] if URING_Q_DEPTH else []
    opts += [f"io_uring_poll_us={URING_POLL_US}"] if URING_POLL_US else []
    return opts


def floor_uring_args():
    """fuse_floor's arguments for io_uring, the same settings as uring_options."""
    args = ["--io-uring"]
    args += ["--depth", URING_Q_DEPTH] if URING_Q_DEPTH else []
    args += ["--poll-us", URING_POLL_US] if URING_POLL_US else []
    return args


def header(title, transports=None):
    """The report's header: the command line, the transports, the machine."""
    section(title)
    print(f"command: {cmdline()}")
    if transports is not None:
        line = f"transport: {' and '.join(transports)} (enable_uring: {uring_state()}"
        if "io_uring" in transports.list:
            line += f"; jbdfs -o {','.join(uring_options())}, fuse_floor {' '.join(floor_uring_args())}"
        print(line + ")")
        if transports.note:
            print(f"note: {transports.note}")
    print(f"machine: {machine()}", flush=True)


def on_signals():
    """Ctrl-C and SIGTERM unwind through the targets' context managers, which
    unmount, wait for their daemons and remove their images."""
    def stop(signum, _frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def tsv_sink(path, prefix=""):
    """A function that appends one TSV line (fields) to PATH and echoes it on stderr."""
    def emit(*fields):
        line = "\t".join(str(f) for f in fields)
        with open(path, "a") as f:
            f.write(prefix + line + "\n")
        print(prefix + line, file=sys.stderr, flush=True)
    return emit


def parser(doc, *shared):
    """An argument parser with DOC as its help and the options most
    workloads share: SHARED among quick, devices, files, repeat, data, opts,
    charts, out, report."""
    import argparse
    ap = argparse.ArgumentParser(prog=PROG, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    opts = {
        "quick": dict(action="store_true"), "devices": {}, "files": dict(type=int),
        "repeat": dict(type=int, default=1), "data": dict(default="ordered"), "opts": dict(default=""),
        "charts": {}, "out": {}, "report": dict(metavar="RESULTS", help="print the report of an earlier --out"),
    }
    for name in shared:
        ap.add_argument(f"--{name}", **opts[name])
    return ap


def results_files(name, out=None, log=True):
    """The raw results file (OUT, or a new one in /tmp), emptied, and a new
    mount and fsck log: (results, log)."""
    results = out or tempfile.mkstemp(prefix=f"jbdfs-{name}.", suffix=".tsv", dir="/tmp")[1]
    open(results, "w").close()
    logf = tempfile.mkstemp(prefix=f"jbdfs-{name}.", suffix=".log", dir="/tmp")[1] if log else None
    info(f"raw results: {results}" + (f"; mount and fsck log: {logf}" if logf else ""))
    return results, logf
