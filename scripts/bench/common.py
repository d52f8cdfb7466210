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


def header(title, transports=None, sampler=None, method=True):
    """The report's header: the command line, the transports, the machine
    (with SAMPLER, a LoadSampler: its look before the run) and the method of
    the verdicts."""
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
    if sampler is not None and sampler.before_line():
        print(sampler.before_line())
    if method:
        from . import stats
        print(f"method: every figure is the median (min–max) of interleaved rounds; {stats.METHOD}",
              flush=True)


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


# -- the machine's load: part of every result ------------------------------
# Other work on the CPUs slows some runs and not others, and no statistic
# undoes that. The sampler reads, every second in a background thread:
# /proc/loadavg, /proc/pressure/cpu (some avg10: the share of time some task
# waited for a CPU), /proc/stat (steal: a hypervisor gave the CPU to another
# guest; busy: every non-idle jiffy) and every process's CPU time in
# /proc/PID/stat. "Other work" is the CPU time of processes that are not
# this benchmark's (not descendants of this process, not kernel threads,
# not one of OURS_DAEMONS, which daemonize and leave our tree for init's),
# per second of wall time: a quiet machine shows about 0.0 CPUs, two CPU
# hogs about 2. Another benchmark's daemons (jbdfs, fs_mark) count as other
# work: they are.
OURS_DAEMONS = {"fuse2fs"}
# Above these, the report warns that its figures are unreliable.
BUSY_OTHER_CPUS = 0.25   # other work, CPUs on average
BUSY_STEAL = 0.05        # steal, share of all CPU time
_TCK = os.sysconf("SC_CLK_TCK")


def _proc_cpu():
    """{pid: (comm, ppid, cpu jiffies)} of every process."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                s = f.read()
        except OSError:
            continue
        comm = s[s.index("(") + 1:s.rindex(")")]
        f = s[s.rindex(")") + 2:].split()
        out[int(d)] = (comm, int(f[1]), int(f[11]) + int(f[12]))
    return out


def _stat_cpu():
    """(busy jiffies, steal jiffies, all jiffies) from /proc/stat's cpu line."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    steal = v[7] if len(v) > 7 else 0
    return sum(v[:8]) - idle - steal, steal, sum(v[:8])


def _psi_some10():
    s = read_sys("/proc/pressure/cpu")
    if not s:
        return None
    for line in s.splitlines():
        if line.startswith("some"):
            return float(line.split()[1].split("=")[1])
    return None


def _loadavg1():
    return float(read_sys("/proc/loadavg").split()[0])


class LoadSampler:
    """Samples the machine once a second from start() to stop() (a daemon
    thread); report() gives the lines of the header and the warning."""

    def __init__(self, interval=1.0):
        import threading
        self.interval = interval
        self.me = os.getpid()
        self.samples = []   # (t, loadavg1, psi some avg10, other CPUs, steal share)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.before = None

    def _ours(self, procs, pid):
        seen = 0
        while pid > 1 and seen < 64:
            if pid == self.me or pid == 2:
                return True
            comm, ppid, _ = procs.get(pid, ("", 0, 0))
            if ppid == 1 and comm in OURS_DAEMONS:
                return True
            pid, seen = ppid, seen + 1
        return False

    def _other_jiffies(self, prev, cur):
        n = 0
        for pid, (comm, ppid, cpu) in cur.items():
            if self._ours(cur, pid):
                continue
            old = prev.get(pid)
            n += cpu - old[2] if old and old[0] == comm and cpu >= old[2] else cpu if pid not in prev else 0
        return n

    def sample_once(self, seconds=1.0):
        """One measurement over SECONDS: (loadavg1, psi, other CPUs, steal share, busy CPUs)."""
        p0, s0, t0 = _proc_cpu(), _stat_cpu(), time.monotonic()
        time.sleep(seconds)
        p1, s1, t1 = _proc_cpu(), _stat_cpu(), time.monotonic()
        return self._point(p0, s0, t0, p1, s1, t1)

    def _point(self, p0, s0, t0, p1, s1, t1):
        wall = max(t1 - t0, 1e-3)
        other = self._other_jiffies(p0, p1) / _TCK / wall
        total = max(s1[2] - s0[2], 1)
        return (_loadavg1(), _psi_some10(), other, (s1[1] - s0[1]) / total, (s1[0] - s0[0]) / _TCK / wall)

    def _loop(self):
        p0, s0, t0 = _proc_cpu(), _stat_cpu(), time.monotonic()
        while not self._stop.wait(self.interval):
            p1, s1, t1 = _proc_cpu(), _stat_cpu(), time.monotonic()
            self.samples.append((t1,) + self._point(p0, s0, t0, p1, s1, t1))
            p0, s0, t0 = p1, s1, t1

    def start(self):
        """A 1-second look at the idle machine before the measurement, then the thread."""
        self.before = self.sample_once(1.0)
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(5)

    @staticmethod
    def _fmt(load, psi, other, steal, busy=None):
        s = f"loadavg {load:.2f}, cpu pressure some avg10 {'–' if psi is None else f'{psi:.1f}%'}, "
        s += f"steal {steal:.1%}, other work {other:.2f} CPUs"
        return s + (f" (all work {busy:.2f} CPUs)" if busy is not None else "")

    def before_line(self):
        return f"machine before: {self._fmt(*self.before)}" if self.before else None

    def lines(self):
        """The report's lines on the load: before, during (mean and peak), and
        the warning when other work shared the CPUs."""
        out = []
        if self.before:
            out.append(self.before_line())
        if self.samples:
            n = len(self.samples)
            mean = lambda i: sum(s[i] for s in self.samples if s[i] is not None) / n  # noqa: E731
            peak = lambda i: max((s[i] for s in self.samples if s[i] is not None), default=0)  # noqa: E731
            psi = [s[2] for s in self.samples if s[2] is not None]
            out.append(f"machine during ({n} samples, 1 s apart; loadavg and pressure include this "
                       f"benchmark's own work): loadavg peak {peak(1):.2f}, cpu pressure some avg10 "
                       f"{'–' if not psi else f'mean {sum(psi) / len(psi):.1f}%, peak {max(psi):.1f}%'}, "
                       f"steal mean {mean(4):.1%}, other work mean {mean(3):.2f} CPUs, peak {peak(3):.2f} "
                       f"(of {os.cpu_count()})")
        w = self.warning()
        if w:
            out.append(w)
        return out

    def warning(self):
        busy = []
        if self.before and self.before[2] > BUSY_OTHER_CPUS:
            busy.append(f"{self.before[2]:.2f} CPUs of other work before the run")
        if self.samples:
            n = len(self.samples)
            other = sum(s[3] for s in self.samples) / n
            steal = sum(s[4] for s in self.samples) / n
            if other > BUSY_OTHER_CPUS:
                busy.append(f"other work used {other:.2f} CPUs on average during the measurement")
            if steal > BUSY_STEAL:
                busy.append(f"steal was {steal:.1%}")
        if not busy:
            return None
        return ("**WARNING: the machine was busy** (" + "; ".join(busy) + f"; thresholds {BUSY_OTHER_CPUS} "
                f"CPUs, steal {BUSY_STEAL:.0%}): the figures below are unreliable, other work slowed "
                "some runs and not others; the spreads and intervals show how far")


def load_sampler():
    """Start a LoadSampler (a 1 s look before, then every second)."""
    return LoadSampler().start()


def with_machine(report_results, a):
    """REPORT_RESULTS printing the machine's load (a LoadSampler started now)
    and the method first; (function, sampler), the sampler None for --report."""
    if a.report:
        return report_results, None
    sampler = load_sampler()
    print(sampler.before_line(), flush=True)

    def report_(results, charts=None):
        sampler.stop()
        print("\n" + "\n".join(sampler.lines()))
        from . import stats
        print(f"method: {stats.METHOD}")
        report_results(results, charts)
    return report_, sampler
