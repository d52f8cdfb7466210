"""The filesystems measured, as context managers.

    with targets.make("jbdfs/io_uring", "ram", data="ordered", log=LOG) as t:
        workload(t.mnt)

makes a fresh image on the device's backing (mkfs-jbdfs for jbdfs, mke2fs
for the others), mounts it, and on exit unmounts, waits for a FUSE daemon
to let go of the image, runs `e2fsck -fn` (a failure is recorded in
FSCK_FAILED and reported loudly by fsck_summary) and removes the image.
Workloads that remount one image (cold reads) use the steps by hand:
make_image(), `with t.mount(opts):`, fsck(), remove().

Names: jbdfs and floor may carry their transport (jbdfs/dev_fuse,
jbdfs/io_uring, floor/...); plain "jbdfs" is the daemon's own default
transport unless a transport is given. ext3 is Linux's on a loop device,
xfs likewise, fuse2fs the Debian package, floor daemon/examples/fuse_floor.rs
(no storage: its image is made and checked only so that every filesystem
runs the same steps), raw a plain directory on the backing.
"""
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import common
from .common import bin_dir, die, info, warn

DEVICES = ("ram", "disk", "array", "sata", "nbd", "nbd-delay")
FSCK_FAILED = []  # labels of the runs whose image e2fsck -fn did not pass
NBD_DELAY = os.environ.get("BENCH_NBD_DELAY", "1ms")
IMAGE_SIZE = os.environ.get("BENCH_IMAGE_SIZE", "2G")
KEEP = os.environ.get("MNT_KEEP", "0") == "1"
FALLBACK = re.compile(r"fall(s|ing)?[ -]?back|(serving over|by) /dev/fuse|"
                      r"uring.*(error|fail|unavailable|unsupported|disabled|not granted)", re.I)


def workdir(device):
    if device == "disk":
        return os.environ.get("BENCH_DISK_DIR", "/var/tmp")
    if device in DEVICES:
        return "/dev/shm"
    die(f"unknown device {device} (expected {', '.join(DEVICES)})")


def split(name):
    """'jbdfs/io_uring' -> ('jbdfs', 'io_uring'); 'ext3' -> ('ext3', None)."""
    base, _, transport = name.partition("/")
    return base, transport or None


def wait_for(cond, seconds, step=0.1):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step)
    return cond()


class Target:
    fs = "?"
    mkfs = "mke2fs"
    checked = True  # e2fsck -fn after the run

    def __init__(self, device="ram", transport=None, data="ordered", opts="", log=None,
                 image=None, size=None, mkfs_args=(), label=None, workdir_=None):
        self.device, self.transport, self.data, self.opts = device, transport, data, opts
        self.log = log or os.devnull
        self.image = image
        self.own_image = image is None
        self.size = size or IMAGE_SIZE
        self.mkfs_args = list(mkfs_args)
        self.dir = workdir_ or workdir(device)
        self.name = label or (f"{self.fs}/{transport}" if transport else self.fs)
        self.mnt = None
        self.peak_kib = 0

    def __repr__(self):
        return f"{self.name} on {self.device}"

    # -- the image ------------------------------------------------------
    def make_image(self):
        if not self.own_image or self.image:
            return
        fd, self.image = tempfile.mkstemp(prefix="jbdfs-test.", suffix=".img", dir=self.dir)
        os.close(fd)
        if self.mkfs == "mkfs-jbdfs":
            cmd = [bin_dir() / "mkfs-jbdfs", "-q", "-F", "-b", "4096", *self.mkfs_args, self.image, self.size]
        elif self.mkfs == "mke2fs":
            cmd = ["mke2fs", "-q", "-F", "-t", "ext3", "-b", "4096", *self.mkfs_args, self.image, self.size]
        elif self.mkfs == "mkfs.xfs":
            os.truncate(self.image, parse_size(self.size))
            cmd = ["mkfs.xfs", "-f", "-q", self.image]
        else:
            return
        if subprocess.run([str(c) for c in cmd], stdout=subprocess.DEVNULL).returncode:
            self.remove()
            die(f"cannot make {self.name}'s image with {cmd[0]}")

    def fsck(self, what=None):
        """e2fsck -fn the image; True when clean (or not an ext3 image)."""
        if not self.checked or not self.image:
            return True
        out = subprocess.run(["e2fsck", "-fn", self.image], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        with open(self.log, "a") as f:
            f.write(out.stdout)
        if out.returncode == 0:
            return True
        sys.stdout.flush()
        print(out.stdout, file=sys.stderr)
        what = what or getattr(self, "what", None) or repr(self)
        warn(f"e2fsck -fn {self.image} exited with status {out.returncode} ({what})")
        FSCK_FAILED.append(what)
        if self.own_image:
            shutil.copyfile(self.image, self.image + ".failed")
            info(f"kept the image that failed e2fsck: {self.image}.failed")
        return False

    def remove(self):
        if self.own_image and self.image and not KEEP:
            for p in (self.image, self.image + ".stats"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(p)
        if self.own_image:
            self.image = None

    # -- mounting ---------------------------------------------------------
    @contextlib.contextmanager
    def mount(self, opts=""):
        """Mount the image on a fresh directory; yields it; unmounts."""
        mnt = tempfile.mkdtemp(prefix="jbdfs-bench.", dir=self.dir)
        try:
            self.mnt = mnt
            self._mount(mnt, opts)
            try:
                yield mnt
            finally:
                self._umount(mnt)
        finally:
            self.mnt = None
            if os.path.ismount(mnt):
                warn(f"cleanup: {mnt} still mounted; umount -l")
                subprocess.run(["umount", "-l", mnt], stderr=subprocess.DEVNULL)
            with contextlib.suppress(OSError):
                os.rmdir(mnt)
            loop_detach(self.image)

    def __enter__(self):
        self.make_image()
        self._cm = self.mount()
        try:
            self._cm.__enter__()
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc):
        try:
            self._cm.__exit__(*exc)
        finally:
            self.fsck()
            self.remove()
        return False

    def _logf(self):
        return open(self.log, "a")

    def _mount(self, mnt, opts):
        raise NotImplementedError

    def _umount(self, mnt):
        if subprocess.run(["umount", mnt]).returncode:
            warn(f"unmounting {self.name} from {mnt} failed")


class Daemon(Target):
    """A FUSE daemon we start in the foreground (in its own session, so that
    Ctrl-C reaches us, and we unmount it, rather than killing it first)."""
    proc = None

    def _start(self, mnt, args):
        start = os.path.getsize(self.log) if os.path.exists(self.log) else 0
        with self._logf() as log:
            self.proc = subprocess.Popen([str(a) for a in args], stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        if not wait_for(lambda: os.path.ismount(mnt) or self.proc.poll() is not None, 30) \
                or not os.path.ismount(mnt):
            subprocess.run(["tail", "-n", "20", self.log])
            self._reap(5)
            die(f"{self.name} did not mount on {mnt} ({' '.join(map(str, args))}; log: {self.log})")
        if self.transport == "io_uring":
            self._check_uring(start)

    def _check_uring(self, start):
        """A result labelled io_uring must be one: the switch is still on,
        the daemon holds io_uring rings, its log reports no fallback."""
        if common.uring_state() != "Y":
            die(f"enable_uring reads {common.uring_state()}: refusing to measure {self.name} as io_uring")
        fds = Path(f"/proc/{self.proc.pid}/fd")

        def rings():
            try:
                return sum(1 for fd in fds.iterdir() if os.readlink(fd) == "anon_inode:[io_uring]")
            except OSError:
                return 0
        wait_for(lambda: rings() > 0 or self.proc.poll() is not None, 5)
        with open(self.log, errors="replace") as f:
            f.seek(start)
            bad = [line for line in f if FALLBACK.search(line)][:3]
        if bad:
            die(f"{self.name} logged {bad!r}: refusing to label it io_uring (log: {self.log})")
        if rings() == 0:
            die(f"{self.name} (pid {self.proc.pid}) holds no io_uring ring: refusing to label it io_uring")
        info(f"{self.name} on {self.mnt}: on io_uring ({rings()} rings)")

    def _reap(self, seconds=60):
        if self.proc is None:
            return 0
        try:
            rc = self.proc.wait(seconds)
        except subprocess.TimeoutExpired:
            warn(f"cleanup: {self.name} daemon {self.proc.pid} still running; sending SIGTERM")
            self.proc.terminate()
            rc = self.proc.wait()
        self.proc = None
        return rc


class Jbdfs(Daemon):
    fs = "jbdfs"
    mkfs = "mkfs-jbdfs"
    nbdkit = None

    def options(self, extra=""):
        opts = [f"data={self.data}"] if self.data else []
        if self.device in ("array", "sata"):
            opts.append(f"devsim={self.device}")
        opts += [o for o in (self.opts, extra) if o]
        if self.transport == "io_uring":
            opts.append(",".join(common.uring_options()))
        elif self.transport == "dev_fuse":
            # Explicit: jbdfs serves over io_uring whenever enable_uring is on.
            opts.append("noio_uring")
        return ",".join(opts)

    def _mount(self, mnt, opts):
        src = self.image
        if self.device in ("nbd", "nbd-delay"):
            src = self._serve_nbd()
        args = [bin_dir() / "jbdfs", "-f", src, mnt]
        if self.options(opts):
            args += ["-o", self.options(opts)]
        self._start(mnt, args)

    def _serve_nbd(self):
        """Serve the image with nbdkit on a Unix socket beside it (with the
        delay filter for nbd-delay); the NBD URI jbdfs mounts."""
        common.need("nbdkit", f"the {self.device} device needs it: scripts/deps.sh installs it")
        sock = self.image + ".sock"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(sock)
        args = ["nbdkit", "-f", "-U", sock]
        if self.device == "nbd-delay":
            args += ["--filter=delay", "file", f"file={self.image}",
                     f"delay-read={NBD_DELAY}", f"delay-write={NBD_DELAY}"]
        else:
            args += ["file", f"file={self.image}"]
        with self._logf() as log:
            self.nbdkit = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        if not wait_for(lambda: os.path.exists(sock), 5, 0.05):
            die(f"nbdkit did not start serving {self.image} (log: {self.log})")
        return f"nbd+unix:///?socket={sock}"

    def _umount(self, mnt):
        if self.proc is not None:
            with contextlib.suppress(OSError, StopIteration), open(f"/proc/{self.proc.pid}/status") as f:
                hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
                self.peak_kib = max(self.peak_kib, hwm)
        # umount.fuse.jbdfs waits until the daemon has written the image back.
        if subprocess.run([common.SCRIPTS / "umount.fuse.jbdfs", mnt]).returncode:
            warn(f"unmounting jbdfs from {mnt} failed")
        rc = self._reap()
        if rc:
            warn(f"jbdfs daemon for {mnt} exited with status {rc}")
        if self.nbdkit is not None:
            self.nbdkit.terminate()
            self.nbdkit.wait()
            self.nbdkit = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.image + ".sock")


class Floor(Daemon):
    fs = "floor"

    def _mount(self, mnt, opts):
        args = [bin_dir() / "examples" / "fuse_floor", mnt]
        if self.transport == "io_uring":
            args += common.floor_uring_args()
        self._start(mnt, args)

    def _umount(self, mnt):
        if subprocess.run(["fusermount3", "-u", mnt]).returncode and subprocess.run(["umount", mnt]).returncode:
            warn(f"unmounting fuse_floor from {mnt} failed")
        self._reap()


class Ext3(Target):
    """Linux's ext3 on a loop device."""
    fs = "ext3"

    def _mount(self, mnt, opts):
        o = ",".join(x for x in ("loop", f"data={self.data}" if self.data else "", opts) if x)
        if subprocess.run(["mount", "-t", "ext3", "-o", o, self.image, mnt]).returncode:
            die(f"mount -o {o} {self.image} failed")


class Xfs(Target):
    fs = "xfs"
    mkfs = "mkfs.xfs"
    checked = False

    def _mount(self, mnt, opts):
        if subprocess.run(["mount", "-t", "xfs", "-o", "loop", self.image, mnt]).returncode:
            die(f"mount -o loop {self.image} (xfs) failed")


class Fuse2fs(Target):
    """fuse2fs daemonizes; it does not write its journal."""
    fs = "fuse2fs"

    def _mount(self, mnt, opts):
        with self._logf() as log:
            if subprocess.run(["fuse2fs", self.image, mnt], stdout=log, stderr=subprocess.STDOUT).returncode:
                die(f"fuse2fs {self.image} failed (log: {self.log})")

    def _umount(self, mnt):
        super()._umount(mnt)
        # fuse2fs writes the image back after the unmount returns. fuser reads
        # every process's /proc entries and blocks on one stuck in another
        # FUSE mount that hangs: each look is bounded, the wait is 10 s.
        def free():
            try:
                return subprocess.run(["timeout", "-k", "1", "2", "fuser", "-s", self.image],
                                      stderr=subprocess.DEVNULL).returncode == 1
            except OSError:
                return True
        wait_for(free, 10)


class Raw(Target):
    """The raw backing store: a plain directory beside the images."""
    fs = "raw"
    mkfs = None
    checked = False

    def make_image(self):
        pass

    @contextlib.contextmanager
    def mount(self, opts=""):
        d = tempfile.mkdtemp(prefix="jbdfs-raw.", dir=self.dir)
        self.mnt = d
        try:
            yield d
        finally:
            self.mnt = None
            shutil.rmtree(d, ignore_errors=True)


KINDS = {c.fs: c for c in (Jbdfs, Floor, Ext3, Xfs, Fuse2fs, Raw)}


def make(name, device="ram", **kw):
    base, transport = split(name)
    if base not in KINDS:
        die(f"unknown filesystem {base}")
    if transport and base not in ("jbdfs", "floor"):
        die(f"{base} has no transport")
    default = kw.pop("transport", None)
    return KINDS[base](device, transport or default, label=kw.pop("label", None) or name, **kw)


def fs_list(device, refs, transports):
    """jbdfs and the references REFS (ext3, fuse2fs, floor) where they can run
    (ram and disk: the kernel cannot run on jbdfs's latency models); jbdfs
    and floor once per transport when transports are given."""
    names = ["jbdfs"] + (list(refs) if device in ("ram", "disk") else [])
    out = []
    for n in names:
        if n in ("jbdfs", "floor") and transports is not None:
            out += [f"{n}/{t}" for t in transports]
        else:
            out.append(n)
    return out


def one_at_a_time(devices, repeat, refs, transports, data, opts, log, transport=None):
    """For each device, repeat and filesystem (jbdfs, and the references REFS
    where they run) in turn: a fresh image mounted in data mode DATA (jbdfs
    also with OPTS, and on TRANSPORT when its name carries none), yielded as
    (target, device, run); then unmounted and checked with e2fsck -fn."""
    for dev in devices:
        for r in range(1, repeat + 1):
            for fs in fs_list(dev, refs, transports):
                jb = split(fs)[0] == "jbdfs"
                with make(fs, dev, data=data, opts=opts if jb else "", log=log, transport=transport) as t:
                    t.what = f"{fs} on {dev}, run {r}"
                    info(f"{t.what}")
                    yield t, dev, r


def one_at_a_time_main(a, name, files, refs, workload, report_results, transports=None, transport=None,
                       title=None, floor=False):
    """The whole of a benchmark run one filesystem at a time (tree, afd),
    once its options A are parsed: --report, or build, run WORKLOAD(mnt) on
    each (one_at_a_time; its rows go to the results with the filesystem and
    device in front), print the report and the fsck summary. FILES is the
    (quick, full) default of --files; the exit status."""
    if a.report:
        report_results(a.report, a.charts)
        return 0
    devices = (a.devices or ("ram" if a.quick else "ram disk")).split()
    a.files = a.files or files[0 if a.quick else 1]
    common.need_root("FUSE and loop mounts")
    common.on_signals()
    if transports is not None:
        transports = common.Transports(transports)
    common.build(floor=floor)
    results, log = common.results_files(name, a.out)
    if title:
        common.header(title, transports)
    emit = common.tsv_sink(results)
    for t, dev, _ in one_at_a_time(devices, a.repeat, refs, transports, a.data, a.opts, log, transport):
        for row in workload(t.mnt):
            emit(t.name, dev, *row)
    report_results(results, a.charts)
    return 0 if fsck_summary() else 1


def loop_detach(image):
    """Detach any loop device left on IMAGE (a lazy unmount, an interrupted run)."""
    if not image or not shutil.which("losetup"):
        return
    out = subprocess.run(["losetup", "-l", "-n", "-O", "NAME,BACK-FILE"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        dev, _, back = line.strip().partition(" ")
        back = back.strip().removesuffix(" (deleted)")
        if back == image or back.startswith(str(image).rstrip("/") + "/"):
            if subprocess.run(["losetup", "-d", dev], stderr=subprocess.DEVNULL).returncode == 0:
                warn(f"cleanup: detached {dev} ({back})")


def parse_size(s):
    s = str(s)
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(s[-1:].upper(), 1)
    return int(s.rstrip("KMGTkmgt")) * mult


def fsck_summary():
    """After a run: say whether every image was clean for e2fsck -fn, loudly
    when not. Returns True when clean."""
    if not FSCK_FAILED:
        print("\ne2fsck -fn after every run: clean")
        return True
    print(f"\n**E2FSCK -fn FOUND ERRORS after {len(FSCK_FAILED)} run(s)** (the figures of those runs "
          "are of a damaged filesystem):")
    for f in FSCK_FAILED:
        print(f"- {f}")
    return False


# -- jbdfs mounted as users mount it: `mount -t fuse.jbdfs` --------------
# mount(8) runs mount.fuse3 (Debian's fuse3), which runs `jbdfs` from the
# PATH mount(8) resets (so /usr/local/bin/jbdfs), and the daemon puts itself
# in the background; `umount DIR` runs /sbin/umount.fuse.jbdfs, which waits
# for the daemon to write the image back. mount_helpers() puts both in place
# for a run, sharing scripts/fstests.sh's bookkeeping (SHARE_DIR), so that
# runs at once do not remove what another still uses.
SHARE_DIR = Path("/run/jbdfs-fstests")
DAEMON_BIN = Path("/usr/local/bin/jbdfs")
UMOUNT_HELPER = Path("/sbin/umount.fuse.jbdfs")


def _share_leave():
    with contextlib.suppress(FileNotFoundError):
        os.unlink(SHARE_DIR / f"run.{os.getpid()}")
    for f in SHARE_DIR.glob("run.*"):
        pid = f.name.split(".", 1)[1]
        if pid.isdigit() and os.path.exists(f"/proc/{pid}"):
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f)
    for f in SHARE_DIR.glob("installed.*"):
        with contextlib.suppress(OSError):
            os.unlink(f.read_text().strip())
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f)


@contextlib.contextmanager
def mount_helpers():
    """What `mount -t fuse.jbdfs` and `umount` need, for the length of the
    with: /usr/local/bin/jbdfs (a symlink to this build's, unless it is that
    build already: another jbdfs there stops the run, as in fstests.sh) and
    /sbin/umount.fuse.jbdfs, each removed afterwards if the run put it there."""
    common.need("mount.fuse3", "mount -t fuse.jbdfs runs it: apt-get install fuse3 (scripts/deps.sh)")
    SHARE_DIR.mkdir(parents=True, exist_ok=True)
    (SHARE_DIR / f"run.{os.getpid()}").touch()
    try:
        mine = bin_dir() / "jbdfs"
        if not DAEMON_BIN.exists() and not DAEMON_BIN.is_symlink():
            os.symlink(mine.resolve(), DAEMON_BIN)
            (SHARE_DIR / "installed.jbdfs").write_text(f"{DAEMON_BIN}\n")
            info(f"installed {DAEMON_BIN} -> {mine.resolve()} for the run")
        elif subprocess.run(["cmp", "-s", DAEMON_BIN, mine]).returncode:
            die(f"{DAEMON_BIN} is another jbdfs than {mine}: mount -t fuse.jbdfs would run it "
                "(reinstall with scripts/install.sh, remove it, or set JBDFS_BIN_DIR)")
        if not UMOUNT_HELPER.exists():
            shutil.copyfile(common.SCRIPTS / "umount.fuse.jbdfs", UMOUNT_HELPER)
            os.chmod(UMOUNT_HELPER, 0o755)
            (SHARE_DIR / "installed.umount-helper").write_text(f"{UMOUNT_HELPER}\n")
            info(f"installed {UMOUNT_HELPER} for the run")
        yield
    finally:
        _share_leave()


class DaemonPid:
    """The part of Popen that Daemon uses, for a daemon that is not our
    child (it put itself in the background)."""

    def __init__(self, pid):
        self.pid = pid

    def alive(self):
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False

    def poll(self):
        return None if self.alive() else 0

    def wait(self, timeout=None):
        if not wait_for(lambda: not self.alive(), timeout if timeout is not None else 1e9, 0.02):
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
        return 0

    def terminate(self):
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, 15)


def mounted_pid(mnt):
    """The pid of the jbdfs daemon serving MNT: its /run/mount/utab line
    (x-jbdfs.pid=), else /run/jbdfs/<mountpoint>.pid."""
    canon = os.path.realpath(mnt)
    target = "TARGET=" + canon.replace("\\", "\\134").replace(" ", "\\040")
    pid = None
    with contextlib.suppress(OSError), open(os.environ.get("LIBMOUNT_UTAB", "/run/mount/utab")) as f:
        for line in f:
            fields = line.split()
            if target in fields:
                for fl in fields:
                    if fl.startswith("OPTS="):
                        for o in fl[5:].split(","):
                            if re.fullmatch(r"x-jbdfs\.pid=\d+", o):
                                pid = int(o.split("=")[1])
    if pid is None:
        with contextlib.suppress(OSError, ValueError):
            pid = int(Path(f"/run/jbdfs/{canon.replace('/', '_')}.pid").read_text())
    return pid


class MountedJbdfs(Jbdfs):
    """jbdfs through `mount -t fuse.jbdfs IMAGE DIR -o OPTS` and `umount DIR`,
    as users run it (the daemon in the background, in a process group of
    its own); needs mount_helpers()."""

    def _mount(self, mnt, opts):
        if self.device in ("nbd", "nbd-delay"):
            die("the mount -t fuse.jbdfs targets run on ram and disk images only")
        args = ["mount", "-t", "fuse.jbdfs"]
        if self.options(opts):
            args += ["-o", self.options(opts)]
        args += [self.image, mnt]
        start = os.path.getsize(self.log) if os.path.exists(self.log) else 0
        with self._logf() as log:
            rc = subprocess.run([str(a) for a in args], stdout=log, stderr=subprocess.STDOUT).returncode
        if rc or not os.path.ismount(mnt):
            subprocess.run(["tail", "-n", "20", self.log])
            die(f"{' '.join(map(str, args))} failed (status {rc}; log: {self.log})")
        pid = mounted_pid(mnt)
        if pid is None:
            die(f"no jbdfs daemon pid for {mnt} in /run/mount/utab or /run/jbdfs")
        self.proc = DaemonPid(pid)
        if self.transport == "io_uring":
            self._check_uring(start)

    def _umount(self, mnt):
        if self.proc is not None:
            with contextlib.suppress(OSError, StopIteration), open(f"/proc/{self.proc.pid}/status") as f:
                hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
                self.peak_kib = max(self.peak_kib, hwm)
        # umount(8) runs /sbin/umount.fuse.jbdfs, which waits for the write-back.
        if subprocess.run(["umount", mnt]).returncode:
            warn(f"unmounting jbdfs from {mnt} failed")
        self._reap()


def make_mounted(name, device="ram", **kw):
    """make(), but jbdfs (any transport) through `mount -t fuse.jbdfs`."""
    base, transport = split(name)
    if base != "jbdfs":
        return make(name, device, **kw)
    default = kw.pop("transport", None)
    return MountedJbdfs(device, transport or default, label=kw.pop("label", None) or name, **kw)
