#!/usr/bin/env python3
"""Source tree, compilebench-like (BENCHMARKS.md section 4): the phases
below on jbdfs and on Linux ext3 (loop), in one run, on a ramdisk image and
a disk image, each on a fresh image checked with e2fsck -fn after its run.
Prints seconds per phase (the median (min–max) of R interleaved rounds:
5, 3 with --quick; --repeat R) with the ratio jbdfs/ext3 and its verdict
(stats.py).

    bench tree [--quick] [--devices "ram disk"] [--files N] [--repeat R]
        [--data MODE] [--opts JBDFS_OPTS] [--floor]
        [--transport dev_fuse|io_uring|both] [--charts DIR] [--out FILE]
    bench tree --report RESULTS.tsv [--charts DIR]

--floor adds the FUSE floor (daemon/examples/fuse_floor.rs: no storage)
beside ext3. --transport: jbdfs (and the floor) on /dev/fuse, on io_uring
or both, in turn within each repeat (default both; io_uring only where
enable_uring is Y). --quick: 500 files, ram only. RESULTS lines (--out) are:
fs, device, phase, seconds, MiB; fs is ext3, jbdfs/TRANSPORT or
floor/TRANSPORT (a plain jbdfs or floor is dev_fuse).

The tree is shaped like a kernel source tree: nested directories, sizes
drawn from a fixed seed (log-normal, median ~7 KiB). Phases: initial create,
create (a second tree), patch (append to or overwrite a tenth of the files),
compile (an object file beside each .c), read compiled tree, clean (delete
the objects), read tree, stat tree, delete tree. Every write phase ends with
sync(), so its data is on the device; read phases start from a cold kernel
cache when --drop-caches is given.
"""
import os
import random
import time
from collections import defaultdict

from . import common, report, stats, targets


PHASES = ["initial create", "create", "patch", "compile", "read compiled tree",
          "clean", "read tree", "stat tree", "delete tree"]
MIB = 1 << 20


def tree_shape(files, seed):
    """[(relative path, size)], directories first implied by paths."""
    rng = random.Random(seed)
    dirs = [""]
    while len(dirs) < max(files // 15, 2):
        parent = rng.choice(dirs)
        if parent.count("/") < 4:
            dirs.append(os.path.join(parent, f"d{len(dirs):04d}"))
    out = []
    for i in range(files):
        d = rng.choice(dirs[1:])
        ext = rng.choices([".c", ".h", ".S", "", ".txt"], [55, 30, 3, 7, 5])[0]
        size = min(int(rng.lognormvariate(8.8, 1.1)), 256 << 10)
        out.append((os.path.join(d, f"f{i:05d}{ext}"), size))
    return out


def write_file(path, size, chunk=b"x" * (64 << 10)):
    with open(path, "wb") as f:
        while size > 0:
            n = min(size, len(chunk))
            f.write(chunk[:n])
            size -= n


def create_tree(root, shape):
    moved = 0
    for rel, size in shape:
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_file(path, size)
        moved += size
    return moved


def patch_tree(root, shape, rng):
    moved = 0
    for rel, size in rng.sample(shape, max(len(shape) // 10, 1)):
        path = os.path.join(root, rel)
        n = rng.randrange(64, 4096)
        if size > n and rng.random() < 0.5:
            with open(path, "r+b") as f:
                f.seek(rng.randrange(size - n))
                f.write(b"p" * n)
        else:
            with open(path, "ab") as f:
                f.write(b"a" * n)
        moved += n
    return moved


def objects(shape):
    return [(rel[:-2] + ".o", size * 3 // 5 + 1024) for rel, size in shape if rel.endswith(".c")]


def read_tree(root):
    moved = 0
    for dirpath, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(dirpath, name), "rb") as f:
                while True:
                    b = f.read(1 << 20)
                    if not b:
                        break
                    moved += len(b)
    return moved


def stat_tree(root):
    for dirpath, dirs, names in os.walk(root):
        for name in names + dirs:
            os.lstat(os.path.join(dirpath, name))
    return 0


def delete_tree(root):
    for dirpath, dirs, names in os.walk(root, topdown=False):
        for name in names:
            os.unlink(os.path.join(dirpath, name))
        for name in dirs:
            os.rmdir(os.path.join(dirpath, name))
    return 0


def run(root, files, seed=2008, drop_caches=True):
    """The phases on the filesystem mounted on ROOT: yields (phase, seconds, MiB moved)."""
    shape = tree_shape(files, seed)
    rng = random.Random(seed + 1)
    k0, k1 = os.path.join(root, "kernel-0"), os.path.join(root, "kernel-1")
    objs = objects(shape)
    steps = {
        "initial create": lambda: create_tree(k0, shape),
        "create": lambda: create_tree(k1, shape),
        "patch": lambda: patch_tree(k0, shape, rng),
        "compile": lambda: create_tree(k0, objs),
        "read compiled tree": lambda: read_tree(k0),
        "clean": lambda: sum(os.unlink(os.path.join(k0, r)) or 0 for r, _ in objs),
        "read tree": lambda: read_tree(k1),
        "stat tree": lambda: stat_tree(root),
        "delete tree": lambda: delete_tree(k0) + delete_tree(k1),
    }
    for phase in PHASES:
        reads = phase.startswith("read") or phase == "stat tree"
        if reads and drop_caches:
            common.drop_caches()
        t0 = time.perf_counter()
        moved = steps[phase]()
        if not reads:
            os.sync()
        secs = time.perf_counter() - t0
        yield phase, f"{secs:.4f}", f"{moved / MIB:.2f}"


TRANSPORT_ORDER = ["dev_fuse", "io_uring"]


def fs_name(fs):
    """The FUSE filesystems with their transport: jbdfs -> jbdfs/dev_fuse."""
    return f"{fs}/dev_fuse" if fs in ("jbdfs", "floor") else fs


def report_results(results, charts=None):
    res = defaultdict(lambda: defaultdict(list))
    with open(results) as f:
        for line in f:
            fs, dev, phase, secs, mib = line.rstrip("\n").split("\t")
            res[(fs_name(fs), dev)][phase].append((float(secs), float(mib)))
    # Every figure the median (min–max) of the rounds (interleaved: each
    # round runs every filesystem in turn), every ratio with its verdict.
    med = {k: {p: v for p, v in d.items()} for k, d in res.items()}

    def on(base, dev):
        """{transport: {phase: [(s, MiB)]}} for jbdfs or floor on dev, in order."""
        found = {fs.split("/", 1)[1]: d for (fs, d2), d in med.items() if fs.startswith(base + "/") and d2 == dev}
        return {t: found[t] for t in sorted(found, key=lambda t: (TRANSPORT_ORDER + [t]).index(t))}

    for dev in sorted({d for _, d in med}):
        mine, ext3, floors = on("jbdfs", dev), med.get(("ext3", dev), {}), on("floor", dev)
        secs = lambda r: report.spread([x[0] for x in r], 2) if r else "–"  # noqa: E731
        rate = lambda r: (f"{stats.median([x[1] for x in r]) / stats.median([x[0] for x in r]):.1f}"  # noqa: E731
                          if r and r[0][1] and stats.median([x[0] for x in r]) > 0 else "–")
        first = lambda r: [x[0] for x in r] if r else None  # noqa: E731
        cmp = lambda a, b: report.judged(a, b, higher_is_better=False)  # noqa: E731
        both = len(mine) > 1 and "io_uring" in mine and "dev_fuse" in mine
        both_floor = len(floors) > 1 and "io_uring" in floors and "dev_fuse" in floors
        head = ["phase"]
        for t in mine:
            head += [f"jbdfs/{t} s", f"jbdfs/{t} MiB/s"]
        head += ["ext3 s", "ext3 MiB/s"] + [f"(jbdfs/{t})/ext3" for t in mine]
        if both:
            head.append("jbdfs io_uring/dev_fuse")
        for t in floors:
            head += [f"floor/{t} s", f"(floor/{t})/ext3"]
            if t in mine:
                head.append(f"(jbdfs/{t})/(floor/{t})")
        if both_floor:
            head.append("floor io_uring/dev_fuse")

        def row(label, get, value, show_rate):
            """get(series) -> [(s, MiB)] or None; value(r) -> the cell."""
            out = [label]
            for t in mine:
                out += [value(get(mine[t])), rate(get(mine[t])) if show_rate else ""]
            out += [value(get(ext3)), rate(get(ext3)) if show_rate else ""]
            out += [cmp(first(get(mine[t])), first(get(ext3))) for t in mine]
            if both:
                out.append(cmp(first(get(mine["io_uring"])), first(get(mine["dev_fuse"]))))
            for t in floors:
                out += [value(get(floors[t])), cmp(first(get(floors[t])), first(get(ext3)))]
                if t in mine:
                    out.append(cmp(first(get(mine[t])), first(get(floors[t]))))
            if both_floor:
                out.append(cmp(first(get(floors["io_uring"])), first(get(floors["dev_fuse"]))))
            return out

        rows = [row(p, lambda d, p=p: d.get(p), secs, True) for p in PHASES]

        def total(d):
            """The total of each round (the rounds of every phase in order)."""
            if not d:
                return None
            n = min(len(d[p]) for p in PHASES if p in d)
            return [(sum(d[p][i][0] for p in PHASES if p in d), 0) for i in range(n)]

        rows.append(row("total", total, secs, False))
        print(f"\nSource tree (compilebench-like) on {dev}: seconds per phase, median (min–max) of the "
              "rounds (lower is better), MiB/s of the medians where data moves; ratios are of median "
              "times (jbdfs/TRANSPORT time / ext3 time) [95% interval] verdict:\n")
        report.table(head, rows)
        if charts:
            bars = [(f"jbdfs/{t}", [first(d.get(p)) for p in PHASES]) for t, d in mine.items()]
            bars.append(("Linux ext3", [first(ext3.get(p)) for p in PHASES]))
            bars += [(f"FUSE floor/{t} (no storage)", [first(d.get(p)) for p in PHASES])
                     for t, d in floors.items()]
            report.bar_chart(os.path.join(charts, f"tree-{dev}.png"),
                             f"compilebench-like phases on {dev} (seconds, lower is better)",
                             "seconds", PHASES, bars)


def main(argv):
    ap = common.parser(__doc__, "quick", "devices", "files", "repeat", "data", "opts", "charts", "out", "report")
    ap.add_argument("--floor", action="store_true")
    ap.add_argument("--transport")
    ap.add_argument("--seed", type=int, default=2008)
    ap.set_defaults(repeat=None)
    a = ap.parse_args(argv)
    a.repeat = a.repeat or (3 if a.quick else 5)
    # The transports: a --transport (or "both") for jbdfs and the floor.
    report_results_, sampler = common.with_machine(report_results, a)
    return targets.one_at_a_time_main(a, "tree", (500, 3000), ["ext3"] + (["floor"] if a.floor else []),
                                      lambda mnt: run(mnt, a.files, a.seed), report_results_,
                                      transports=a.transport or "both", floor=a.floor,
                                      title="source tree, compilebench-like (bench-tree.sh)")
