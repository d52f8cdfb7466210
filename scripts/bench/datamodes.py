"""The data-mode A/B: fsync latency beside a bulk writer (the classic cost of
ext3's data=ordered), jbdfs (the daemon's default transport) against Linux
ext3 on a loop device, in one run.

    bench data-modes [--dir DIR] [--runs N]

  --dir DIR   where the images go (default /dev/shm: a ramdisk)
  --runs N    interleaved rounds; the table shows the median (min–max) and the
              latencies of the median run (default 5)

For each of Linux ext3 and jbdfs, in data=ordered, writeback and journal: a
new 2 GiB image (mkfs-jbdfs), mount, run the workload, unmount, e2fsck -fn.
The workload: one thread rewrites a 256 MiB file in 1 MiB writes without
fsync; meanwhile 200 files of 4 KiB are created and fsync'd one by one. In
data=ordered every commit writes the bulk writer's queued data too; in
data=writeback it does not. Prints a Markdown table of fsyncs/s and the
median and 90th-percentile fsync latency, with jbdfs's ratio to Linux ext3
in the same mode.
"""
import os
import tempfile
import threading
import time

from . import common, report, stats, targets
from .common import info

MODES = ("ordered", "writeback", "journal")


def fsync_vs_bulk(mnt):
    """(fsyncs/s, median ms, p90 ms) of 200 fsync'd creates beside a bulk writer."""
    stop = False

    def bulk():
        buf = os.urandom(1 << 20)
        fd = os.open(f"{mnt}/bulk", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        n = 0
        while not stop:
            os.write(fd, buf)
            n += 1
            if n % 256 == 0:
                os.lseek(fd, 0, 0)
        os.close(fd)
    t = threading.Thread(target=bulk)
    t.start()
    try:
        time.sleep(1)
        lat = []
        os.makedirs(f"{mnt}/small", exist_ok=True)
        t0 = time.time()
        for i in range(200):
            s = time.time()
            fd = os.open(f"{mnt}/small/f{i}", os.O_CREAT | os.O_WRONLY, 0o644)
            os.write(fd, b"x" * 4096)
            os.fsync(fd)
            os.close(fd)
            lat.append(time.time() - s)
        el = time.time() - t0
    finally:
        stop = True
        t.join()
    lat.sort()
    return f"{200 / el:.0f}", f"{lat[100] * 1000:.1f}", f"{lat[180] * 1000:.1f}"


def main(argv):
    ap = common.parser(__doc__)
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args(argv)
    common.need_root()
    common.on_signals()
    common.build()
    log = tempfile.mkstemp(prefix="bench-data-modes.", suffix=".log", dir=os.environ.get("TMPDIR", "/tmp"))[1]
    result, runs = {}, {}
    sampler = common.load_sampler()
    # Interleaved: each round runs every filesystem and mode in turn.
    for rnd in range(1, a.runs + 1):
        for mode in MODES:
            for fs in ("ext3", "jbdfs"):
                info(f"round {rnd}: {'Linux ext3' if fs == 'ext3' else 'jbdfs'} data={mode}")
                t = targets.make(fs, "ram", data=mode, log=log, workdir_=a.dir)
                t.mkfs = "mkfs-jbdfs"
                with t:
                    runs.setdefault((fs, mode), []).append(fsync_vs_bulk(t.mnt))
    for k, v in runs.items():
        result[k] = stats.median_run(v, key=lambda r: float(r[0]))
    sampler.stop()
    print("\n" + "\n".join(sampler.lines()))
    print(f"method: {stats.METHOD}")
    print(f"\nfsync'd 4 KiB creates beside a bulk writer, images in {a.dir}, {a.runs} interleaved rounds: "
          "fsyncs/s median (min–max), latencies of the median run\n")
    print("| data= | ext3 fsyncs/s | ext3 median / p90 ms | jbdfs fsyncs/s | jbdfs median / p90 ms | jbdfs / ext3 |")
    print("|---|---:|---:|---:|---:|---:|")
    for mode in MODES:
        _, jm, jp = result[("jbdfs", mode)]
        _, em, ep = result[("ext3", mode)]
        jr, er = ([float(r[0]) for r in runs[(fs, mode)]] for fs in ("jbdfs", "ext3"))
        print(f"| {mode} | {report.spread(er)} | {em} / {ep} | {report.spread(jr)} | {jm} / {jp} | "
              f"{report.judged(jr, er)} |")
    return 0 if targets.fsck_summary() else 1
