"""fsck speed: fsck-jbdfs -fn against e2fsck -fn on the same image, side by
side, on a 2 GiB ext3 image full of small files.

    bench fsck [IMAGE]

The image (default $JBDFS_WORKDIR/bench-fsck.img, kept for reuse) is made
with mke2fs -t ext3 and filled through a Linux loop mount with fs_mark (4
threads, no fsync, FILES files of SIZE bytes spread over subdirectories),
or with a plain loop when fs_mark is missing. Both checkers then run RUNS
times each, alternately, after one warm-up run each (the image is in the
page cache for all timed runs). Prints each run's wall and CPU time (user +
system: steadier when other work shares the cores), the medians and the
ratios e2fsck / fsck-jbdfs (above 1: fsck-jbdfs is faster). Needs root
(loop mount). Environment: FILES (default 120000), SIZE (4096), RUNS (5),
FSCK (the fsck-jbdfs binary), JBDFS_WORKDIR.
"""
import os
import shutil
import subprocess
import time

from . import common, report, stats, targets
from .common import die, section


def fill(img, files, size):
    with targets.Ext3("disk", data=None, image=img, workdir_=os.path.dirname(img)).mount() as mnt:
        if shutil.which("fs_mark"):
            per = files // 4
            args = ["fs_mark"]
            for t in range(4):
                os.makedirs(f"{mnt}/t{t}", exist_ok=True)
                args += ["-d", f"{mnt}/t{t}"]
            common.quiet(args + ["-n", per, "-s", size, "-S", "0", "-D", "64", "-N", "256", "-k", "-L", "1",
                                 "-l", f"{mnt}.fs_mark.log"])
            os.unlink(f"{mnt}.fs_mark.log")
        else:
            for i in range(1, files + 1):
                d = f"{mnt}/d{i // 1000}"
                os.makedirs(d, exist_ok=True)
                with open(f"{d}/f{i}", "wb") as f:
                    f.write(bytes(size))


def seconds(*cmd):
    """(wall, cpu) of one run, cpu = user + system of the child."""
    before = os.times()
    t0 = time.monotonic()
    subprocess.run([str(c) for c in cmd], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return round(wall, 3), round(cpu, 3)


def main(argv):
    ap = common.parser(__doc__)
    work = os.environ.get("JBDFS_WORKDIR") or os.environ.get("TMPDIR") or "/tmp"
    ap.add_argument("image", nargs="?", default=f"{work}/bench-fsck.img")
    a = ap.parse_args(argv)
    fsck = os.environ.get("FSCK") or str(common.bin_dir() / "fsck-jbdfs")
    files = int(os.environ.get("FILES", "120000"))
    size = int(os.environ.get("SIZE", "4096"))
    runs = int(os.environ.get("RUNS", "5"))
    os.environ["LC_ALL"] = "C"
    if not os.access(fsck, os.X_OK):
        die(f"no fsck binary at {fsck} (cargo build --release -p fsck-jbdfs)")
    common.on_signals()
    img = a.image
    if not os.path.exists(img) or os.path.getsize(img) == 0:
        section(f"making {img}: 2 GiB ext3, {files} files of {size} bytes")
        with open(img, "wb") as f:
            f.truncate(2 << 30)
        common.quiet(["mke2fs", "-q", "-F", "-t", "ext3", img])
        try:
            fill(img, files, size)
        except BaseException:
            os.unlink(img)
            raise
    if subprocess.run(["e2fsck", "-fn", img], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode:
        die(f"{img} is not clean for e2fsck -fn")
    print(subprocess.run([fsck, "-fn", img], capture_output=True, text=True).stdout.rstrip().split("\n")[-1])
    section("warm-up")
    seconds("e2fsck", "-fn", img)
    seconds(fsck, "-fn", img)
    section("timed runs (seconds: wall, cpu = user + system)")
    e, j = [], []
    for r in range(1, runs + 1):
        e.append(seconds("e2fsck", "-fn", img))
        j.append(seconds(fsck, "-fn", img))
        print(f"run {r}: e2fsck -fn {e[-1][0]:.3f} wall {e[-1][1]:.3f} cpu   "
              f"fsck-jbdfs -fn {j[-1][0]:.3f} wall {j[-1][1]:.3f} cpu", flush=True)
    print(f"\nmethod: {stats.METHOD}")
    for i, what in ((0, "wall:"), (1, "cpu: ")):
        ve, vj = [x[i] for x in e], [x[i] for x in j]
        me, mj = stats.median(ve), stats.median(vj)
        print(f"median {what} e2fsck -fn {report.spread(ve, 3)} s, fsck-jbdfs -fn {report.spread(vj, 3)} s, "
              f"ratio e2fsck/fsck-jbdfs {me / mj:.2f}; fsck-jbdfs against e2fsck: "
              f"{report.judged(vj, ve, higher_is_better=False)}")
    return 0
