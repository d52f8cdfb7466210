#!/usr/bin/env python3
"""Report for scripts/bench-fsmark.sh: reads its TSV of results (fs, device,
data mode, bdelay, threads, files/s; one line per run, repeats allowed) and
prints Markdown tables: files/s in the layout of DESIGN.md's bdelay table,
bdelay=auto against the best fixed setting, and jbdfs against Linux ext3 and
fuse2fs with ratios. jbdfs and the FUSE floor are named with their FUSE
transport (jbdfs/dev_fuse, jbdfs/io_uring, floor/dev_fuse, floor/io_uring;
a plain "jbdfs" or "floor", from before transports, is /dev/fuse), each
transport in its own rows or columns. With --charts DIR, writes one PNG per
device and data mode: files/s against threads, one line per bdelay value
and transport (and the references, dashed).

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
TRANSPORT_ORDER = ["dev_fuse", "io_uring"]


def fs_name(fs):
    """The FUSE filesystems with their transport: jbdfs -> jbdfs/dev_fuse."""
    return f"{fs}/dev_fuse" if fs in ("jbdfs", "floor") else fs


def load(path, stat):
    """{(fs, device, data, bdelay): {threads: files/s}}, repeats combined by
    stat: max (the default: on a shared machine other work only ever slows
    a run down, so the best of R runs is the steadiest estimate) or median."""
    runs = defaultdict(lambda: defaultdict(list))
    with open(path) as f:
        for line in f:
            fs, dev, data, bdelay, threads, rate = line.rstrip("\n").split("\t")
            runs[(fs_name(fs), dev, data, bdelay)][int(threads)].append(float(rate))
    combine = max if stat == "max" else statistics.median
    return {k: {t: combine(v) for t, v in d.items()} for k, d in runs.items()}


def ordered(values, order):
    return sorted(values, key=lambda v: (order.index(v) if v in order else len(order), v))


def transports(res, base, dev=None, data=None):
    """The transports BASE (jbdfs or floor) ran on, in order."""
    found = {k[0].split("/", 1)[1] for k in res
             if k[0].startswith(base + "/") and dev in (None, k[1]) and data in (None, k[2])}
    return ordered(found, TRANSPORT_ORDER)


def design_table(res, data):
    """Rows 'device transport bdelay', columns threads, as in DESIGN.md."""
    keys = [k for k in res if k[0].startswith("jbdfs/") and k[2] == data]
    threads = sorted({t for k in keys for t in res[k]})
    rows = []
    for dev in ordered({k[1] for k in keys}, DEVICE_ORDER):
        for tr in transports(res, "jbdfs", dev, data):
            for b in ordered({k[3] for k in keys if k[1] == dev and k[0] == f"jbdfs/{tr}"}, BDELAY_ORDER):
                r = res[(f"jbdfs/{tr}", dev, data, b)]
                rows.append([dev, tr, b] + [benchreport.num(r.get(t)) for t in threads])
    benchreport.table(["device", "transport", "bdelay"] + [str(t) for t in threads], rows)


def auto_table(res, data):
    """bdelay=auto against the best fixed setting at each thread count."""
    rows = []
    for dev in ordered({k[1] for k in res if k[0].startswith("jbdfs/") and k[2] == data}, DEVICE_ORDER):
        for tr in transports(res, "jbdfs", dev, data):
            fs = f"jbdfs/{tr}"
            auto = res.get((fs, dev, data, "auto"))
            fixed = {b: res[(fs, dev, data, b)] for b in FIXED if (fs, dev, data, b) in res}
            if not auto or not fixed:
                continue
            for t in sorted(auto):
                best_b, best = max(((b, r[t]) for b, r in fixed.items() if t in r), key=lambda x: x[1])
                rows.append([dev, tr, str(t), benchreport.num(auto[t]),
                             f"{benchreport.num(best)} (bdelay={best_b})", benchreport.ratio(auto[t], best)])
    if rows:
        print(f"\nbdelay=auto against the best fixed bdelay (0, yield, 1-4), data={data}:\n")
        benchreport.table(["device", "transport", "threads", "auto files/s", "best fixed files/s",
                           "auto/best"], rows)


def reference_table(res, data):
    """jbdfs on each transport (auto, or the one bdelay run, and the best
    setting) against ext3 and fuse2fs, and the FUSE floor (fuser answering
    from memory) on each transport where it was run."""
    for dev in ordered({k[1] for k in res if not k[0].startswith("jbdfs/") and k[2] == data},
                       DEVICE_ORDER):
        refs = {r: res.get((r, dev, data, "-"), {}) for r in ("ext3", "fuse2fs")}
        refs = {r: v for r, v in refs.items() if v}
        ext3 = refs.get("ext3", {})
        floors = {tr: res[(f"floor/{tr}", dev, data, "-")] for tr in transports(res, "floor", dev, data)}
        mine, shown, chosen = {}, {}, {}
        for tr in transports(res, "jbdfs", dev, data):
            bs = {k[3]: v for k, v in res.items() if k[0] == f"jbdfs/{tr}" and k[1] == dev and k[2] == data}
            b = "auto" if "auto" in bs else ordered(bs, BDELAY_ORDER)[0]
            mine[tr], shown[tr], chosen[tr] = bs, bs[b], b
        if not mine:
            continue
        threads = sorted({t for v in shown.values() for t in v})
        head = ["threads"]
        for tr in mine:
            head.append(f"jbdfs/{tr}")
            if len(mine[tr]) > 1:
                head.append(f"jbdfs/{tr} best (bdelay)")
        head += list(refs)
        head += [f"(jbdfs/{tr})/{r}" for tr in mine for r in refs]
        if len(mine) > 1:
            head.append("jbdfs io_uring/dev_fuse")
        head += [f"floor/{tr}" for tr in floors]
        for tr in floors:
            if tr in mine:
                head.append(f"(jbdfs/{tr})/(floor/{tr})")
            if ext3:
                head.append(f"ext3/(floor/{tr})")
        if len(floors) > 1:
            head.append("floor io_uring/dev_fuse")
        rows = []
        for t in threads:
            row = [str(t)]
            for tr, bs in mine.items():
                row.append(benchreport.num(shown[tr].get(t)))
                if len(bs) > 1:
                    cands = [(b, r[t]) for b, r in bs.items() if t in r]
                    best_b, best = max(cands, key=lambda x: x[1]) if cands else ("–", None)
                    row.append(f"{benchreport.num(best)} ({best_b})")
            row += [benchreport.num(v.get(t)) for v in refs.values()]
            row += [benchreport.ratio(shown[tr].get(t), v.get(t)) for tr in mine for v in refs.values()]
            if len(mine) > 1:
                row.append(benchreport.ratio(shown.get("io_uring", {}).get(t), shown.get("dev_fuse", {}).get(t)))
            row += [benchreport.num(v.get(t)) for v in floors.values()]
            for tr, fl in floors.items():
                if tr in mine:
                    row.append(benchreport.ratio(shown[tr].get(t), fl.get(t)))
                if ext3:
                    row.append(benchreport.ratio(ext3.get(t), fl.get(t)))
            if len(floors) > 1:
                row.append(benchreport.ratio(floors.get("io_uring", {}).get(t), floors.get("dev_fuse", {}).get(t)))
            rows.append(row)
        which = ", ".join(f"jbdfs/{tr} bdelay={b}" for tr, b in chosen.items())
        print(f"\nfs_mark on {dev}, data={data}: jbdfs on each transport against Linux ext3 (loop)"
              f" and the references, files/s ({which}):\n")
        benchreport.table(head, rows)


def stats_table(path, data):
    """The journal statistics of each jbdfs mount (RESULTS.stats)."""
    if not os.path.exists(path):
        return
    rows = []
    with open(path) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            dev, mode, b, txns, handles, wait = fields[:6]
            tr = fields[6] if len(fields) > 6 else "dev_fuse"
            if mode == data:
                rows.append((DEVICE_ORDER.index(dev) if dev in DEVICE_ORDER else 9,
                             TRANSPORT_ORDER.index(tr) if tr in TRANSPORT_ORDER else 9,
                             BDELAY_ORDER.index(b) if b in BDELAY_ORDER else 9,
                             [dev, tr, b, txns, handles, wait]))
    if rows:
        print(f"\nJournal statistics per mount (all thread counts), data={data}:\n")
        benchreport.table(["device", "transport", "bdelay", "transactions", "handles per transaction",
                           "µs waiting to batch per transaction"], [r for *_, r in sorted(rows)])


def charts(res, outdir):
    styles = {"dev_fuse": "-", "io_uring": "-."}
    for (dev, data) in sorted({(k[1], k[2]) for k in res}):
        lines = []
        for tr in transports(res, "jbdfs", dev, data):
            fs = f"jbdfs/{tr}"
            for b in ordered({k[3] for k in res if k[:3] == (fs, dev, data)}, BDELAY_ORDER):
                lines.append((f"{fs} bdelay={b}", res[(fs, dev, data, b)], styles.get(tr, "-")))
        labels = {"ext3": ("Linux ext3", "--"), "fuse2fs": ("fuse2fs", "--")}
        for tr in transports(res, "floor", dev, data):
            labels[f"floor/{tr}"] = (f"FUSE floor/{tr} (no storage)", ":")
        for ref, (label, style) in labels.items():
            if (ref, dev, data, "-") in res:
                lines.append((label, res[(ref, dev, data, "-")], style))
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
