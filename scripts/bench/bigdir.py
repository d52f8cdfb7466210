"""Large directories: does the cost of creating or looking up one entry grow
with the directory's size? The same workload on jbdfs (the daemon's default
transport) and on Linux ext3 (loop mount) in one run, images in /dev/shm, a
table for each; then Linux ext3 looking up in the directory jbdfs built.

    bench bigdir [--entries N] [--batch B]

N entries (100,000) are created in one directory in batches of B (10,000);
after each batch, creates of the next batch and lookups (stat) of 2,000
random existing names are timed: one Markdown row per batch (entries, µs per
create, µs per lookup). jbdfs tells the kernel to cache entries for 1 s, so
almost all lookups reach the daemon.
"""
import os
import random
import subprocess
import tempfile
import time
import shutil

from . import common, targets
from .common import info, section


def scaling(root, total, batch):
    d = os.path.join(root, "big")
    os.mkdir(d)
    rng = random.Random(42)
    made = 0
    print("| entries | create µs/op | lookup µs/op |")
    print("|---:|---:|---:|")
    while made < total:
        t0 = time.perf_counter()
        for i in range(made, made + batch):
            os.close(os.open(os.path.join(d, f"entry-{i:07d}"), os.O_CREAT | os.O_WRONLY, 0o644))
        create = (time.perf_counter() - t0) / batch * 1e6
        made += batch
        probes = [rng.randrange(made) for _ in range(2000)]
        t0 = time.perf_counter()
        for i in probes:
            os.stat(os.path.join(d, f"entry-{i:07d}"))
        lookup = (time.perf_counter() - t0) / len(probes) * 1e6
        print(f"| {made} | {create:.1f} | {lookup:.1f} |", flush=True)


def lookups(d, n):
    rng = random.Random(7)
    probes = [rng.randrange(n) for _ in range(20000)]
    t0 = time.perf_counter()
    for i in probes:
        os.stat(os.path.join(d, f"entry-{i:07d}"))
    print(f"stat of random names: {(time.perf_counter() - t0) / len(probes) * 1e6:.1f} µs/op", flush=True)


def main(argv):
    ap = common.parser(__doc__)
    ap.add_argument("--entries", type=int, default=100000)
    ap.add_argument("--batch", type=int, default=10000)
    a = ap.parse_args(argv)
    common.need_root("FUSE and loop mounts")
    common.on_signals()
    common.build()
    work = tempfile.mkdtemp(prefix="jbdfs-bigdir.", dir="/dev/shm")
    log = f"{work}/mount.log"
    inodes = ["-N", str(a.entries + 65536)]
    try:
        section(f"jbdfs ({os.cpu_count()} cores, image in /dev/shm), {a.entries} entries in one directory")
        jb = targets.Jbdfs("ram", None, data=None, log=log, size="4G", mkfs_args=inodes, workdir_=work)
        jb.make_image()
        with jb.mount() as mnt:
            scaling(mnt, a.entries, a.batch)
        info(f"jbdfs daemon peak memory: {jb.peak_kib} kB")
        if jb.fsck("jbdfs's big directory"):
            info("e2fsck -fn: clean")
        out = subprocess.run(["debugfs", "-R", "stat /big", jb.image], capture_output=True, text=True).stdout
        if "Flags: 0x1000" in out:
            info("/big is htree-indexed")
        section("Linux ext3 (loop mount) looking up in the directory jbdfs built")
        with targets.Ext3("ram", data=None, image=jb.image, log=log, workdir_=work).mount() as mnt:
            lookups(f"{mnt}/big", a.entries)
        jb.remove()
        section("Linux ext3 (loop mount), same workload")
        with targets.Ext3("ram", data=None, log=log, size="4G", mkfs_args=inodes, workdir_=work) as t:
            scaling(t.mnt, a.entries, a.batch)
    finally:
        targets.loop_detach(work)
        shutil.rmtree(work, ignore_errors=True)
    return 0 if targets.fsck_summary() else 1
