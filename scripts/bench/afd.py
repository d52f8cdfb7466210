#!/usr/bin/env python3
"""Many small files, create and delete, afdbench-like (BENCHMARKS.md
section 5): on jbdfs (on /dev/fuse), Linux ext3 (loop) and fuse2fs, in one
run, on a ramdisk image and a disk image, each on a fresh image checked
with e2fsck -fn after its run. P processes, each working on N files spread
over D shared directories: create (1 KiB each), link (a second name),
rename (the second name, to another directory), delete (both names).
Prints files/s per phase (all processes; the median (min–max) of R
interleaved rounds: 5, 3 with --quick; --repeat R) with ratios and their
verdicts (stats.py).

    bench afd [--quick] [--devices "ram disk"] [--files N] [--procs P] [--dirs D]
        [--repeat R] [--data MODE] [--opts JBDFS_OPTS] [--charts DIR] [--out FILE]
    bench afd --report RESULTS.tsv [--charts DIR]

--quick: 500 files, ram only. RESULTS lines (--out): fs, device, phase, files/s.
"""
import os
import time
from collections import defaultdict
from multiprocessing import Barrier, Process, Queue

from . import common, report, targets


PHASES = ["create", "link", "rename", "delete"]


def names(root, proc, files, dirs):
    for i in range(files):
        d = os.path.join(root, f"dir{(proc + i) % dirs}")
        yield i, os.path.join(d, f"p{proc}-f{i}"), os.path.join(d, f"p{proc}-l{i}"), \
            os.path.join(root, f"dir{(proc + i + 1) % dirs}", f"p{proc}-r{i}")


def worker(root, proc, files, dirs, barrier, out):
    data = b"d" * 1024
    for phase in PHASES:
        barrier.wait()
        t0 = time.perf_counter()
        for _, f, link, moved in names(root, proc, files, dirs):
            if phase == "create":
                fd = os.open(f, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
                os.write(fd, data)
                os.close(fd)
            elif phase == "link":
                os.link(f, link)
            elif phase == "rename":
                os.rename(link, moved)
            else:
                os.unlink(f)
                os.unlink(moved)
        out.put((phase, time.perf_counter() - t0))


def run(root, procs_, files, dirs):
    """The phases on the filesystem mounted on ROOT: yields (phase, files/s)."""
    for d in range(dirs):
        os.makedirs(os.path.join(root, f"dir{d}"), exist_ok=True)
    barrier, out = Barrier(procs_), Queue()
    procs = [Process(target=worker, args=(root, p, files, dirs, barrier, out))
             for p in range(procs_)]
    for p in procs:
        p.start()
    times = defaultdict(list)
    for _ in range(procs_ * len(PHASES)):
        phase, secs = out.get()
        times[phase].append(secs)
    for p in procs:
        p.join()
        if p.exitcode != 0:
            common.die(f"a worker failed (exit status {p.exitcode})")
    os.sync()
    for phase in PHASES:
        # The phase ends when the slowest process ends.
        yield phase, f"{procs_ * files / max(times[phase]):.1f}"


def report_results(results, charts=None):
    res = defaultdict(lambda: defaultdict(list))
    with open(results) as f:
        for line in f:
            fs, dev, phase, rate = line.rstrip("\n").split("\t")
            res[(fs, dev)][phase].append(float(rate))
    # Every figure the median (min–max) of the interleaved rounds, every
    # ratio with its verdict (stats.py).
    med = res
    for dev in sorted({d for _, d in med}):
        mine, ext3, f2fs = (med.get((fs, dev), {}) for fs in ("jbdfs", "ext3", "fuse2fs"))
        rows = [[p, report.spread(mine.get(p)), report.spread(ext3.get(p)), report.spread(f2fs.get(p)),
                 report.judged(mine.get(p), ext3.get(p)), report.judged(mine.get(p), f2fs.get(p))]
                for p in PHASES]
        print(f"\nSmall files, create/link/rename/delete (afdbench-like) on {dev}, files/s, median (min–max) "
              "of the rounds; ratios of medians [95% interval] verdict:\n")
        report.table(["phase", "jbdfs", "ext3", "fuse2fs", "jbdfs/ext3", "jbdfs/fuse2fs"], rows)
        if charts:
            report.bar_chart(os.path.join(charts, f"afd-{dev}.png"),
                             f"create/link/rename/delete on {dev} (files/s, higher is better)",
                             "files/s", PHASES,
                             [(label, [d.get(p) for p in PHASES])
                              for label, d in (("jbdfs", mine), ("Linux ext3", ext3), ("fuse2fs", f2fs))])


def main(argv):
    ap = common.parser(__doc__, "quick", "devices", "files", "repeat", "data", "opts", "charts", "out", "report")
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--dirs", type=int, default=4)
    ap.set_defaults(repeat=None)
    a = ap.parse_args(argv)
    a.repeat = a.repeat or (3 if a.quick else 5)
    # jbdfs on /dev/fuse, its name plain "jbdfs" (as before transports).
    report_results_, sampler = common.with_machine(report_results, a)
    return targets.one_at_a_time_main(a, "afd", (500, 5000), ["ext3", "fuse2fs"],
                                      lambda mnt: run(mnt, a.procs, a.files, a.dirs), report_results_,
                                      transport="dev_fuse")
