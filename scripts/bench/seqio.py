"""Sequential I/O, BENCHMARKS.md sections 2 and 3, on a ramdisk image
(/dev/shm) and a disk image (JBDFS_DISK_DIR, default /var/tmp) in one run,
each against the raw backing store, Linux ext3 and XFS (loop mounts of
images of the same size) on the same backing:

  2. bulk write with fsync: files of 7, 13, 75 and 95 MiB and one of
     512 MiB, each `dd bs=1M conv=fsync`, in data=ordered, writeback and
     journal (XFS and raw have no data modes: one figure for all); MB/s
     over all the files of a mode.
  3. sequential read, cold cache: a 1 GiB file read with `dd bs=4k` on a
     fresh mount, every filesystem the same way (cold()): sync and
     `echo 3 > /proc/sys/vm/drop_caches` before mounting and again after,
     and for a loop device `blockdev --flushbufs`; fincore's count of the
     file's pages in the page cache just before each read is kept
     (RESULTS.cold) and checked in the report. With multiblock mapping and
     with -o max_map=1 for jbdfs.

Each round measures every filesystem in turn (reads: raw, jbdfs on each
transport with multiblock and max_map=1, ext3, XFS; writes: raw, XFS, then
for each data mode jbdfs on each transport and ext3; with nbd, each jbdfs
run on the ramdisk's file is followed by the same run over NBD); the tables
give the median (min–max) of the rounds (5; 3 with --quick), ratios with
their verdicts (stats.py), with ratios, and the
daemon's peak memory (VmHWM) against cache_size (JBDFS_CACHE_SIZE, 64M).

    bench seqio [--quick] [--only "ramdisk disk nbd"] [--rounds R]
        [--transport dev_fuse|io_uring|both] [--out FILE]
    bench seqio --layout [--quick]
    bench seqio --report RESULTS.tsv [--read-mib N] [--write-sizes "7 13 64"] [--rounds R]

--quick: 256 MiB read file, 7+13+64 MiB writes, three rounds. --out keeps the
raw results (TSV: fs, backing, read|write, mode, round, MB/s; fs is raw,
ext3, xfs or jbdfs/TRANSPORT; backing is ramdisk, disk or nbd). --only: the
backings measured (default "ramdisk disk"); nbd adds jbdfs rows to the
ramdisk's pass, the same image served by nbdkit's file plugin on a Unix
socket through jbdfs's NBD client, with its ratio to jbdfs on the local
file (nbd implies ramdisk).

--layout: the layout check instead (on /dev/fuse). A 4 GiB file written
sequentially with dd, then 2 writers of 2 GiB and 4 writers of 1 GiB at
once, on a sparse disk image; each file's fragments counted from debugfs
(extents; fragments, not counting the file's own in-line pointer blocks;
beyond, fragments not at a block group's metadata) and, on a Linux loop
mount, with filefrag. Linux ext3 writing the same files is the reference.
--quick: 1 GiB in all.
"""
import os
import re
import subprocess
import tempfile
import shutil
from collections import defaultdict

from . import common, report, stats, targets
from .common import die, info, section

TRANSPORT_ORDER = ["dev_fuse", "io_uring"]
MODES = ["ordered", "writeback", "journal"]
# Backings as the tables name them; "nbd" is jbdfs on the ramdisk's image
# through nbdkit, compared with jbdfs on that file (LOCAL_OF).
BACKING_LABEL = {"nbd": "ramdisk over NBD"}
LOCAL_OF = {"nbd": "ramdisk"}

DATA = re.compile(r"\((\d+)(?:-(\d+))?\):(\d+)(?:-(\d+))?")
# Superblock backup, descriptors, reserved descriptors, bitmaps and an
# inode table fit in this many blocks at the start of a group.
GROUP_HEAD = 2048
# A run may stop this many blocks short of a group's end (a pointer block
# or two of the file's own may sit there).
TAIL_SLACK = 8
META = re.compile(r"\((?:IND|DIND|TIND)\):(\d+)(?:-(\d+))?")


def fragments(text, per_group, first_data):
    """Fragment counts of a file from `debugfs -R "stat FILE"`: extents (runs
    of data blocks contiguous on disk, what debugfs lists), fragments (the
    same, counting the file's own pointer blocks sitting in line between two
    runs as no break: ext3 puts each indirect block just before the data it
    maps) and beyond (fragments not explained by a block group's metadata:
    bitmaps and inode table at the start of every group, which no file can
    run through in ext3's layout without flex_bg)."""
    runs, meta = parse(text)
    if not runs:
        return 0, 0, 0
    extents = frags = beyond = 1
    for (_, _, _, end), (_, _, start, _) in zip(runs, runs[1:]):
        if start == end + 1:
            continue
        extents += 1
        gap = range(end + 1, start)
        if start > end and all(b in meta for b in gap):
            continue
        frags += 1
        if not steps_over_group_metadata(end, start, per_group, first_data):
            beyond += 1
    return extents, frags, beyond


def parse(text):
    blocks = text.split("BLOCKS:", 1)[-1]
    runs = []
    for m in DATA.finditer(blocks):
        lo = int(m.group(1))
        hi = int(m.group(2) or lo)
        p = int(m.group(3))
        runs.append((lo, hi, p, p + hi - lo))
    meta = set()
    for m in META.finditer(blocks):
        a = int(m.group(1))
        meta.update(range(a, int(m.group(2) or a) + 1))
    return runs, meta


def steps_over_group_metadata(end, start, per_group, first_data):
    """A run that reaches the end of a group and resumes just past the next
    group's metadata (at most GROUP_HEAD blocks in)."""
    group = (start - first_data) // per_group
    group_start = first_data + group * per_group
    ran_to_end = 0 <= group_start - end - 1 <= TAIL_SLACK
    return ran_to_end and start - group_start <= GROUP_HEAD


def print_report(results, read_mib=None, write_sizes=None, rounds=None):
    """The tables: every figure the median (min–max) of the rounds, every
    ratio a ratio of medians with its bootstrap interval and verdict."""
    runs = defaultdict(list)
    backings = []
    with open(results) as f:
        for line in f:
            fs, backing, test, mode, _round, mbs = line.rstrip("\n").split("\t")
            if backing not in backings:
                backings.append(backing)
            if mbs:
                runs[(fs, backing, test, mode)].append(float(mbs))
    found = {k[0].split("/", 1)[1] for k in runs if k[0].startswith("jbdfs/")}
    trs = sorted(found, key=lambda t: (TRANSPORT_ORDER + [t]).index(t))
    both = "dev_fuse" in trs and "io_uring" in trs
    nbd = "nbd" in backings
    of = f"median (min–max) of {rounds} rounds" if rounds else "median (min–max) of the rounds"
    machine = results + ".machine"
    if os.path.exists(machine):
        with open(machine) as f:
            print("\n" + f.read().rstrip())
    print(f"\nmethod: {stats.METHOD}")

    def fig(k):
        return report.spread(runs.get(k), 1)

    def rat(k1, k2):
        return report.judged(runs.get(k1), runs.get(k2))

    def label(b):
        return BACKING_LABEL.get(b, b)

    def over_local(b, fs, test, mode):
        """The same jbdfs run on the local file, for nbd rows."""
        if b not in LOCAL_OF:
            return "–"
        return rat((fs, b, test, mode), (fs, LOCAL_OF[b], test, mode))

    cold_file = results + ".cold"
    if os.path.exists(cold_file):
        warm = []
        n = 0
        with open(cold_file) as f:
            for line in f:
                fs, b, mode, rnd, res, img = line.rstrip("\n").split("\t")
                n += 1
                if fs != "raw" and res not in ("0", "?"):
                    warm.append(f"{fs} {b} {mode} round {rnd}: {int(res) / 1048576:.1f} MiB")
        print(f"\ncold check (fincore, the file's pages in the page cache just before each of {n} reads): "
              + ("0 B for every filesystem" if not warm else "NOT COLD: " + "; ".join(warm)))
    print(f"\nSequential read{f', {read_mib} MiB' if read_mib else ''}, dd bs=4k, "
          f"cold (every filesystem unmounted, caches dropped, mounted again; loop devices "
          f"flushed) (MB/s, {of}):\n")
    head = ["backing", "jbdfs", "multiblock", "max_map=1", "raw", "Linux ext3", "XFS",
            "multi/single", "multi/raw", "multi/ext3", "multi/XFS"]
    if both:
        head.append("multi io_uring/dev_fuse")
    if nbd:
        head.append("multi NBD/local")
    rows = []
    for b in backings:
        raw, ext3, xfs = ((r, b, "read", "-") for r in ("raw", "ext3", "xfs"))
        for t in trs:
            multi, single = (f"jbdfs/{t}", b, "read", "multi"), (f"jbdfs/{t}", b, "read", "single")
            row = [label(b), f"jbdfs/{t}", fig(multi), fig(single), fig(raw), fig(ext3), fig(xfs),
                   rat(multi, single), rat(multi, raw), rat(multi, ext3), rat(multi, xfs)]
            if both:
                row.append(rat(multi, ("jbdfs/dev_fuse", b, "read", "multi")) if t == "io_uring" else "–")
            if nbd:
                row.append(over_local(b, f"jbdfs/{t}", "read", "multi"))
            rows.append(row)
    report.table(head, rows)

    sizes = f", {write_sizes.replace(' ', '+')} MiB files" if write_sizes else ""
    print(f"\nBulk write with fsync{sizes}, dd bs=1M conv=fsync (MB/s, {of}; XFS and raw have no "
          "data modes):\n")
    head = ["backing", "mode", "jbdfs", "jbdfs MB/s", "Linux ext3", "XFS", "raw",
            "jbdfs/raw", "jbdfs/ext3", "jbdfs/XFS"]
    if both:
        head.append("io_uring/dev_fuse")
    if nbd:
        head.append("NBD/local")
    rows = []
    for b in backings:
        raw, xfs = ("raw", b, "write", "-"), ("xfs", b, "write", "-")
        for m in MODES:
            ext3 = ("ext3", b, "write", m)
            for t in trs:
                mine = (f"jbdfs/{t}", b, "write", m)
                if mine not in runs and ext3 not in runs:
                    continue
                row = [label(b), m, f"jbdfs/{t}", fig(mine), fig(ext3), fig(xfs), fig(raw),
                       rat(mine, raw), rat(mine, ext3), rat(mine, xfs)]
                if both:
                    row.append(rat(mine, ("jbdfs/dev_fuse", b, "write", m)) if t == "io_uring" else "–")
                if nbd:
                    row.append(over_local(b, f"jbdfs/{t}", "write", m))
                rows.append(row)
    report.table(head, rows)


def dd_mbs(*args):
    """Run dd; its rate in MB/s (10^6 bytes/s) and seconds."""
    out = subprocess.run(["dd", *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env=dict(os.environ, LC_ALL="C")).stdout
    m = re.search(r"^(\d+) bytes.*copied, ([0-9.e+-]+) s", out, re.M)
    if not m:
        die(f"dd {' '.join(map(str, args))} failed: {out.strip()}")
    return int(m.group(1)) / float(m.group(2)) / 1e6, float(m.group(2))


def resident(path):
    """Bytes of PATH in the page cache (fincore), or '?' without fincore."""
    out = subprocess.run(["fincore", "-b", "-n", "-o", "RES", str(path)], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "?"


def loop_devices(image):
    out = subprocess.run(["losetup", "-n", "-O", "NAME", "-j", str(image)], capture_output=True, text=True)
    return out.stdout.split()


def cold(target, path, image):
    """Cold means cold, the same way for every filesystem read: each read is
    of a fresh mount (the caller unmounted after the last read), sync and
    drop_caches before the mount and again after it; for a loop device
    (ext3, XFS) also `blockdev --flushbufs` on it, whose page cache is the
    block device's own. A FUSE daemon starts with an empty cache at each
    mount. On /dev/shm the image itself is memory for every filesystem alike
    (tmpfs has no other copy): that is the ramdisk being measured."""
    if target is not None and image and not isinstance(target, targets.Jbdfs):
        for dev in loop_devices(image):
            subprocess.run(["blockdev", "--flushbufs", dev], stderr=subprocess.DEVNULL)
    common.drop_caches()


def write_files(d, sizes):
    """The bulk-write workload: MB/s over all the files."""
    secs = 0.0
    for n in sizes:
        secs += dd_mbs("if=/dev/zero", f"of={d}/w{n}", "bs=1M", f"count={n}", "conv=fsync")[1]
    return f"{sum(sizes) * 1048576 / secs / 1e6:.1f}"


def fill(path, mib):
    common.quiet(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mib}", "conv=fsync", "status=none"])


class Run:
    def __init__(self, a, transports, emit):
        self.a, self.transports, self.record = a, transports, emit
        self.cache = os.environ.get("JBDFS_CACHE_SIZE", "64M")
        self.jbdfs = []  # every jbdfs target, for the peak memory
        self.cold_out = "/dev/null"  # main() sets RESULTS.cold

    def jbdfs_target(self, work, img, tr, via, data=None, opts=""):
        t = targets.Jbdfs("nbd" if via == "nbd" else "ram", tr, data=data,
                          opts=",".join(x for x in (f"cache_size={self.cache}", opts) if x),
                          log=f"{work}/jbdfs.log", image=img, size="3G", workdir_=work)
        self.jbdfs.append(t)
        return t

    def backing(self, name, d, nbd):
        work = tempfile.mkdtemp(prefix="jbdfs-seqio.", dir=d)
        try:
            self._backing(name, work, nbd)
        finally:
            targets.loop_detach(work)
            shutil.rmtree(work, ignore_errors=True)

    def _backing(self, name, work, nbd):
        a = self.a
        vias = ["local"] + (["nbd"] if name == "ramdisk" and nbd else [])
        over = "; jbdfs also over NBD, through nbdkit" if len(vias) > 1 else ""
        log = f"{work}/mount.log"
        section(f"{name}: sequential read of {a.read_mib} MiB ({os.path.dirname(work)}{over}), "
                f"median of {a.rounds} rounds")
        raw = f"{work}/raw.bin"
        fill(raw, a.read_mib)
        jimg = self.jbdfs_target(work, None, self.transports.list[0], "local")
        jimg.make_image()
        with jimg.mount() as mnt:
            fill(f"{mnt}/big", a.read_mib)
        refs = [targets.Ext3("ram", data="ordered", log=log, size="3G", workdir_=work),
                targets.Xfs("ram", log=log, size="3G", workdir_=work)]
        for t in refs:
            t.make_image()
            with t.mount() as mnt:
                fill(f"{mnt}/big", a.read_mib)
        kinds = ["raw"] + [("jbdfs", tr, m, via) for tr in self.transports for via in vias
                           for m in ("multi", "single")] + refs
        for rnd in range(1, a.rounds + 1):
            for k in kinds:
                if k == "raw":
                    cold(None, raw, None)
                    self.cold_check("raw", name, "-", rnd, raw, None)
                    self.record("raw", name, "read", "-", rnd, f"{dd_mbs(f'if={raw}', 'of=/dev/null', 'bs=4k')[0]:.1f}")
                elif isinstance(k, tuple):
                    _, tr, m, via = k
                    t = self.jbdfs_target(work, jimg.image, tr, via)
                    cold(None, None, None)
                    with t.mount("max_map=1" if m == "single" else "") as mnt:
                        cold(t, f"{mnt}/big", jimg.image)
                        self.cold_check(f"jbdfs/{tr}", name, m, rnd, f"{mnt}/big", jimg.image)
                        mbs = dd_mbs(f"if={mnt}/big", "of=/dev/null", "bs=4k")[0]
                    self.record(f"jbdfs/{tr}", "nbd" if via == "nbd" else name, "read", m, rnd, f"{mbs:.1f}")
                else:
                    cold(None, None, None)
                    with k.mount() as mnt:
                        cold(k, f"{mnt}/big", k.image)
                        self.cold_check(k.fs, name, "-", rnd, f"{mnt}/big", k.image)
                        mbs = dd_mbs(f"if={mnt}/big", "of=/dev/null", "bs=4k")[0]
                    self.record(k.fs, name, "read", "-", rnd, f"{mbs:.1f}")
        for t in [jimg] + refs:
            t.fsck(f"{t.fs} on {name}, after the reads")
            t.remove()
        os.unlink(raw)

        sizes = a.write_sizes
        section(f"{name}: bulk write with fsync ({' '.join(map(str, sizes))} MiB), median of {a.rounds} rounds")
        for rnd in range(1, a.rounds + 1):
            with targets.Raw("ram", workdir_=work) as t:
                self.record("raw", name, "write", "-", rnd, write_files(t.mnt, sizes))
            with targets.Xfs("ram", log=log, size="3G", workdir_=work) as t:
                self.record("xfs", name, "write", "-", rnd, write_files(t.mnt, sizes))
            for mode in ("ordered", "writeback", "journal"):
                for tr in self.transports:
                    for via in vias:
                        with self.jbdfs_target(work, None, tr, via, data=mode) as t:
                            mbs = write_files(t.mnt, sizes)
                        self.record(f"jbdfs/{tr}", "nbd" if via == "nbd" else name, "write", mode, rnd, mbs)
                with targets.Ext3("ram", data=mode, log=log, size="3G", workdir_=work) as t:
                    self.record("ext3", name, "write", mode, rnd, write_files(t.mnt, sizes))

    def cold_check(self, fs, backing, mode, rnd, path, image):
        """Record how much of the file (and of the image behind it) sits in
        the page cache just before its cold read: the file's must be 0."""
        line = "\t".join(map(str, (fs, backing, mode, rnd, resident(path), resident(image) if image else "-")))
        with open(self.cold_out, "a") as f:
            f.write(line + "\n")

    def peak_mib(self):
        return max((t.peak_kib for t in self.jbdfs), default=0) // 1024


def layout_files(d, total, writers):
    """WRITERS files written at once, each TOTAL / WRITERS MiB, dd bs=1M conv=fsync."""
    procs = [subprocess.Popen(["dd", "if=/dev/zero", f"of={d}/w{writers}-{i}", "bs=1M",
                               f"count={total // writers}", "conv=fsync", "status=none"])
             for i in range(1, writers + 1)]
    for p in procs:
        p.wait()


def layout_rows(img, fs, writers, log):
    """One table row per file."""
    head = subprocess.run(["dumpe2fs", "-h", img], capture_output=True, text=True).stdout
    bpg = int(re.search(r"^Blocks per group:\s*(\d+)", head, re.M).group(1))
    first = int(re.search(r"^First block:\s*(\d+)", head, re.M).group(1))
    rows = []
    with targets.Ext3("disk", data=None, image=img, log=log, workdir_=os.path.dirname(img)).mount("ro") as mnt:
        for i in range(1, writers + 1):
            name = f"w{writers}-{i}"
            text = subprocess.run(["debugfs", "-R", f"stat /{name}", img], capture_output=True, text=True).stdout
            ext, frag, beyond = fragments(text, bpg, first)
            ff = subprocess.run(["filefrag", f"{mnt}/{name}"], capture_output=True, text=True).stdout.split()[1]
            rows.append(f"| {fs} | {writers} | {name} | {ext} | {frag} | {beyond} | {ff} |")
    return rows


def layout_check(a):
    total = 1024 if a.quick else 4096
    d = os.environ.get("JBDFS_DISK_DIR", "/var/tmp")
    work = tempfile.mkdtemp(prefix="jbdfs-layout.", dir=d)
    log = f"{work}/mount.log"
    rows = []
    try:
        for n in (1, 2, 4):
            section(f"layout: {n} writer(s), {total} MiB in all")
            for t in (targets.Jbdfs("disk", "dev_fuse", data=None, opts=f"cache_size={os.environ.get('JBDFS_CACHE_SIZE', '64M')}",
                                    log=log, size="16G", workdir_=work),
                      targets.Ext3("disk", data=None, log=log, size="16G", workdir_=work)):
                t.make_image()
                try:
                    with t.mount() as mnt:
                        layout_files(mnt, total, n)
                    t.fsck(f"{t.fs} after {n} writer(s)")
                    rows += layout_rows(t.image, "jbdfs" if t.fs == "jbdfs" else "Linux ext3", n, log)
                finally:
                    t.remove()
    finally:
        targets.loop_detach(work)
        shutil.rmtree(work, ignore_errors=True)
    section(f"layout results ({common.machine()}, image on {d}, 4 KiB blocks, {total} MiB per run)")
    print("\n| fs | writers | file | extents | fragments | beyond group metadata | filefrag extents |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print("\nextents: contiguous data runs; fragments: runs joined across the file's own in-line pointer "
          "blocks; beyond: fragments not at a block group's metadata.")


def main(argv):
    ap = common.parser(__doc__, "quick", "out", "report")
    ap.add_argument("--only", default="ramdisk disk")
    ap.add_argument("--layout", action="store_true")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--transport")
    ap.add_argument("--read-mib", type=int)
    ap.add_argument("--write-sizes")
    a = ap.parse_args(argv)
    if a.report:
        print_report(a.report, a.read_mib, a.write_sizes, a.rounds)
        return 0
    common.need_root(common.PROG)
    if not common.have_loop():
        die("loop devices are needed for the Linux ext3 and XFS references")
    if not a.layout:
        common.need("mkfs.xfs", "scripts/deps.sh installs xfsprogs")
    only = a.only.split()
    for b in only:
        if b not in ("ramdisk", "disk", "nbd"):
            die(f"--only takes ramdisk, disk or nbd, not {b}")
    nbd = "nbd" in only
    if nbd:
        if a.layout:
            die("--layout runs on a local disk image only: drop nbd from --only")
        common.need("nbdkit", "the nbd backing needs it: scripts/deps.sh installs it")
        if "ramdisk" not in only:
            only.insert(0, "ramdisk")
            info(f"nbd is measured beside jbdfs on the local ramdisk image: --only \"{' '.join(only)}\"")
    a.rounds = a.rounds or (3 if a.quick else 5)
    a.read_mib = 256 if a.quick else 1024
    a.write_sizes = [7, 13, 64] if a.quick else [7, 13, 75, 95, 512]
    common.on_signals()
    transports = common.Transports("dev_fuse" if a.layout else a.transport)
    common.build()
    if a.layout:
        layout_check(a)
        return 0 if targets.fsck_summary() else 1
    results, _ = common.results_files("seqio", a.out, log=False)
    common.header("sequential I/O: bulk write with fsync, cold sequential read (bench-seqio.sh)", transports)
    sampler = common.load_sampler()
    print(sampler.before_line(), flush=True)
    print(f"method: every figure is the median (min–max) of {a.rounds} rounds; {stats.METHOD}", flush=True)
    r = Run(a, transports, common.tsv_sink(results))
    r.cold_out = results + ".cold"
    open(r.cold_out, "w").close()
    dirs = {"ramdisk": "/dev/shm", "disk": os.environ.get("JBDFS_DISK_DIR", "/var/tmp")}
    for b in ("ramdisk", "disk"):
        if b in only:
            r.backing(b, dirs[b], nbd)
    sampler.stop()
    with open(results + ".machine", "w") as f:
        f.write("\n".join(sampler.lines()) + "\n")
    section(f"results ({common.machine()})")
    sizes = " ".join(map(str, a.write_sizes))
    print_report(results, a.read_mib, sizes, a.rounds)
    print(f"\njbdfs daemon peak memory (VmHWM over every run): {r.peak_mib()} MiB, with cache_size={r.cache}")
    return 0 if targets.fsck_summary() else 1
