#!/usr/bin/env python3
"""Report for scripts/bench-fsmark.sh: reads its TSV of results (fs, device,
data mode, bdelay, threads, files/s; one line per run, repeats allowed) and
prints Markdown tables: files/s in the layout of DESIGN.md's bdelay table,
bdelay=auto against the best fixed setting, and jbdfs against Linux ext3 and
fuse2fs with ratios. With --charts DIR, writes one PNG per device and data
mode: files/s against threads, one line per bdelay value (and the
references, dashed).

    bench-fsmark.py RESULTS.tsv [--charts DIR] [--stat max|median]
"""
import argparse
import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_report as benchreport  # noqa: E402

BDELAY_ORDER = ["0", "yield", "1", "2", "3", "4", "jbd2", "auto"]
FIXED = ["0", "yield", "1", "2", "3", "4"]
DEVICE_ORDER = ["ram", "disk", "array", "sata"]


def load(path, stat):
    """{(fs, device, data, bdelay): {threads: files/s}}, repeats combined by
    stat: max (the default: on a shared machine other work only ever slows
    a run down, so the best of R runs is the steadiest estimate) or median."""
    runs = defaultdict(lambda: defaultdict(list))
    with open(path) as f:
        for line in f:
            fs, dev, data, bdelay, threads, rate = line.split("\t")
            runs[(fs, dev, data, bdelay)][int(threads)].append(float(rate))
    combine = max if stat == "max" else statistics.median
    return {k: {t: combine(v) for t, v in d.items()} for k, d in runs.items()}


def ordered(values, order):
    return sorted(values, key=lambda v: (order.index(v) if v in order else len(order), v))


def design_table(res, data):
    """Rows 'device bdelay', columns threads, as in DESIGN.md."""
    keys = [k for k in res if k[0] == "jbdfs" and k[2] == data]
    threads = sorted({t for k in keys for t in res[k]})
    rows = []
    for dev in ordered({k[1] for k in keys}, DEVICE_ORDER):
        for b in ordered({k[3] for k in keys if k[1] == dev}, BDELAY_ORDER):
            r = res[("jbdfs", dev, data, b)]
            rows.append([dev, b] + [benchreport.num(r.get(t)) for t in threads])
    benchreport.table(["device", "bdelay"] + [str(t) for t in threads], rows)


def auto_table(res, data):
    """bdelay=auto against the best fixed setting at each thread count."""
    rows = []
    for dev in ordered({k[1] for k in res if k[0] == "jbdfs" and k[2] == data}, DEVICE_ORDER):
        auto = res.get(("jbdfs", dev, data, "auto"))
        fixed = {b: res[("jbdfs", dev, data, b)] for b in FIXED if ("jbdfs", dev, data, b) in res}
        if not auto or not fixed:
            continue
        for t in sorted(auto):
            best_b, best = max(((b, r[t]) for b, r in fixed.items() if t in r), key=lambda x: x[1])
            rows.append([dev, str(t), benchreport.num(auto[t]), f"{benchreport.num(best)} (bdelay={best_b})",
                         benchreport.ratio(auto[t], best)])
    if rows:
        print(f"\nbdelay=auto against the best fixed bdelay (0, yield, 1-4), data={data}:\n")
        benchreport.table(["device", "threads", "auto files/s", "best fixed files/s", "auto/best"], rows)


def reference_table(res, data):
    """jbdfs (auto and best setting) against ext3 and fuse2fs, and the FUSE
    floor (fuser answering from memory) where it was run."""
    for dev in ordered({k[1] for k in res if k[0] != "jbdfs" and k[2] == data}, DEVICE_ORDER):
        ext3 = res.get(("ext3", dev, data, "-"), {})
        f2fs = res.get(("fuse2fs", dev, data, "-"), {})
        floor = res.get(("floor", dev, data, "-"), {})
        mine = {k[3]: v for k, v in res.items() if k[0] == "jbdfs" and k[1] == dev and k[2] == data}
        if not mine:
            continue
        auto = mine.get("auto") or next(iter(mine.values()))
        rows = []
        for t in sorted(auto):
            best_b, best = max(((b, r[t]) for b, r in mine.items() if t in r), key=lambda x: x[1])
            row = [str(t), benchreport.num(auto[t]), f"{benchreport.num(best)} ({best_b})",
                   benchreport.num(ext3.get(t)), benchreport.num(f2fs.get(t)),
                   benchreport.ratio(auto[t], ext3.get(t)), benchreport.ratio(auto[t], f2fs.get(t))]
            if floor:
                row += [benchreport.num(floor.get(t)), benchreport.ratio(auto[t], floor.get(t)),
                        benchreport.ratio(ext3.get(t), floor.get(t))]
            rows.append(row)
        print(f"\nfs_mark on {dev}, data={data}: jbdfs against Linux ext3 (loop) and fuse2fs, files/s:\n")
        head = ["threads", "jbdfs auto", "jbdfs best (bdelay)", "ext3", "fuse2fs",
                "auto/ext3", "auto/fuse2fs"]
        if floor:
            head += ["FUSE floor", "auto/floor", "ext3/floor"]
        benchreport.table(head, rows)


def stats_table(path, data):
    """The journal statistics of each jbdfs mount (RESULTS.stats)."""
    if not os.path.exists(path):
        return
    rows = []
    with open(path) as f:
        for line in f:
            dev, mode, b, txns, handles, wait = line.rstrip("\n").split("\t")
            if mode == data:
                rows.append((DEVICE_ORDER.index(dev) if dev in DEVICE_ORDER else 9,
                             BDELAY_ORDER.index(b) if b in BDELAY_ORDER else 9,
                             [dev, b, txns, handles, wait]))
    if rows:
        print(f"\nJournal statistics per mount (all thread counts), data={data}:\n")
        benchreport.table(["device", "bdelay", "transactions", "handles per transaction",
                           "µs waiting to batch per transaction"], [r for _, _, r in sorted(rows)])


def charts(res, outdir):
    for (dev, data) in sorted({(k[1], k[2]) for k in res}):
        lines = []
        for b in ordered({k[3] for k in res if k[:3] == ("jbdfs", dev, data)}, BDELAY_ORDER):
            lines.append((f"jbdfs bdelay={b}", res[("jbdfs", dev, data, b)], "-"))
        labels = {"ext3": "Linux ext3", "fuse2fs": "fuse2fs", "floor": "FUSE floor (no storage)"}
        for ref, label in labels.items():
            if (ref, dev, data, "-") in res:
                lines.append((label, res[(ref, dev, data, "-")], "--"))
        name = f"fsmark-{dev}.png" if data == "ordered" else f"fsmark-{dev}-{data}.png"
        # A log scale shows the ramdisk's collapse and the best settings alike.
        benchreport.line_chart(os.path.join(outdir, name),
                               f"fs_mark 4 KiB files, fsync, data={data}, device={dev}",
                               "threads", "files/s (log scale)", lines, logy=True, log2x=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--charts")
    ap.add_argument("--stat", choices=["max", "median"], default="max")
    args = ap.parse_args()
    res = load(args.results, args.stat)
    for data in ordered({k[2] for k in res}, ["ordered", "writeback", "journal"]):
        print(f"\nfs_mark, 4 KiB files, fsync before close, data={data}, files/s "
              f"({'best' if args.stat == 'max' else 'median'} of the repeats):\n")
        design_table(res, data)
        auto_table(res, data)
        reference_table(res, data)
        stats_table(args.results + ".stats", data)
    if args.charts:
        charts(res, args.charts)


if __name__ == "__main__":
    main()
