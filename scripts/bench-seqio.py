#!/usr/bin/env python3
"""Helpers of scripts/bench-seqio.sh.

The report of its sequential read and bulk write runs, from its TSV of
results (fs, backing, read|write, mode, round, MB/s; fs is raw, ext3, xfs,
or jbdfs/TRANSPORT; backing ramdisk, disk or nbd: the ramdisk's image served
by nbdkit, jbdfs only), medians of the rounds, one row per jbdfs transport;
with nbd, a column of jbdfs over NBD against jbdfs on the ramdisk's file:

    scripts/bench-seqio.py report RESULTS.tsv [--read-mib N] [--write-sizes "7 13 64"] [--rounds R]

Fragment count of a file in an ext3 image, from `debugfs -R "stat FILE"`:

    debugfs -R "stat /f" IMAGE | scripts/bench-seqio.py BLOCKS_PER_GROUP FIRST_DATA_BLOCK

Prints three counts on one line:
  extents    runs of data blocks contiguous on disk (what debugfs lists);
  fragments  the same, counting the file's own pointer blocks sitting in
             line between two runs as no break (ext3 puts each indirect
             block just before the data it maps);
  beyond     fragments not explained by a block group's metadata (bitmaps
             and inode table at the start of every group, which no file
             can run through in ext3's layout without flex_bg).
"""

import argparse
import os
import re
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_report as benchreport  # noqa: E402

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


def report(argv):
    ap = argparse.ArgumentParser(prog="bench-seqio.py report")
    ap.add_argument("results")
    ap.add_argument("--read-mib")
    ap.add_argument("--write-sizes")
    ap.add_argument("--rounds")
    args = ap.parse_args(argv)
    runs = defaultdict(list)
    backings = []
    with open(args.results) as f:
        for line in f:
            fs, backing, test, mode, _round, mbs = line.rstrip("\n").split("\t")
            if backing not in backings:
                backings.append(backing)
            if mbs:
                runs[(fs, backing, test, mode)].append(float(mbs))
    med = {k: statistics.median(v) for k, v in runs.items()}
    found = {k[0].split("/", 1)[1] for k in med if k[0].startswith("jbdfs/")}
    trs = sorted(found, key=lambda t: (TRANSPORT_ORDER + [t]).index(t))
    both = "dev_fuse" in trs and "io_uring" in trs
    nbd = "nbd" in backings
    of = f"median of {args.rounds} rounds" if args.rounds else "median of the rounds"

    def fig(v):
        return benchreport.num(v, 1)

    def label(b):
        return BACKING_LABEL.get(b, b)

    def over_local(v, b, fs, test, mode):
        """v against the same jbdfs run on the local file, for nbd rows."""
        if b not in LOCAL_OF:
            return "–"
        return benchreport.ratio(v, med.get((fs, LOCAL_OF[b], test, mode)))

    print(f"\nSequential read{f', {args.read_mib} MiB' if args.read_mib else ''}, dd bs=4k, "
          f"cold cache (MB/s, {of}):\n")
    head = ["backing", "jbdfs", "multiblock", "max_map=1", "raw", "Linux ext3", "XFS",
            "multi/single", "multi/raw", "multi/ext3", "multi/XFS"]
    if both:
        head.append("multi io_uring/dev_fuse")
    if nbd:
        head.append("multi NBD/local")
    rows = []
    for b in backings:
        raw, ext3, xfs = (med.get((r, b, "read", "-")) for r in ("raw", "ext3", "xfs"))
        for t in trs:
            multi = med.get((f"jbdfs/{t}", b, "read", "multi"))
            single = med.get((f"jbdfs/{t}", b, "read", "single"))
            row = [label(b), f"jbdfs/{t}", fig(multi), fig(single), fig(raw), fig(ext3), fig(xfs),
                   benchreport.ratio(multi, single), benchreport.ratio(multi, raw),
                   benchreport.ratio(multi, ext3), benchreport.ratio(multi, xfs)]
            if both:
                row.append(benchreport.ratio(multi, med.get(("jbdfs/dev_fuse", b, "read", "multi")))
                           if t == "io_uring" else "–")
            if nbd:
                row.append(over_local(multi, b, f"jbdfs/{t}", "read", "multi"))
            rows.append(row)
    benchreport.table(head, rows)

    sizes = f", {args.write_sizes.replace(' ', '+')} MiB files" if args.write_sizes else ""
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
        raw, xfs = med.get(("raw", b, "write", "-")), med.get(("xfs", b, "write", "-"))
        for m in MODES:
            ext3 = med.get(("ext3", b, "write", m))
            for t in trs:
                mine = med.get((f"jbdfs/{t}", b, "write", m))
                if mine is None and ext3 is None:
                    continue
                row = [label(b), m, f"jbdfs/{t}", fig(mine), fig(ext3), fig(xfs), fig(raw),
                       benchreport.ratio(mine, raw), benchreport.ratio(mine, ext3),
                       benchreport.ratio(mine, xfs)]
                if both:
                    row.append(benchreport.ratio(mine, med.get(("jbdfs/dev_fuse", b, "write", m)))
                               if t == "io_uring" else "–")
                if nbd:
                    row.append(over_local(mine, b, f"jbdfs/{t}", "write", m))
                rows.append(row)
    benchreport.table(head, rows)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "report":
        report(sys.argv[2:])
        return
    per_group, first_data = int(sys.argv[1]), int(sys.argv[2])
    runs, meta = parse(sys.stdin.read())
    if not runs:
        print("extents 0 fragments 0 beyond 0")
        return
    extents = fragments = beyond = 1
    for (_, _, _, end), (_, _, start, _) in zip(runs, runs[1:]):
        if start == end + 1:
            continue
        extents += 1
        gap = range(end + 1, start)
        if start > end and all(b in meta for b in gap):
            continue
        fragments += 1
        if not steps_over_group_metadata(end, start, per_group, first_data):
            beyond += 1
    print(f"extents {extents} fragments {fragments} beyond {beyond}")


if __name__ == "__main__":
    main()
