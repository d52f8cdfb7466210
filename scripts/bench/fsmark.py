"""Small files with fsync (BENCHMARKS.md section 1): fs_mark, 4 KiB files,
fsync before close, one directory per thread, on jbdfs for every bdelay
value and on Linux ext3 (loop) and fuse2fs in the same run, on a ramdisk
image, a disk image and the emulated array and sata devices (and, on
request, the ram image served over NBD: devices nbd and nbd-delay).

    bench fsmark [--quick] [--devices "ram disk array sata"]
        [--bdelay "0 yield 1 2 3 4 jbd2 auto"] [--threads "1 2 4 8 10 16 20"]
        [--data "ordered"] [--rounds R] [--seconds S | --files N] [--no-refs]
        [--floor] [--transport dev_fuse|io_uring|both] [--charts DIR] [--out FILE]
    bench fsmark --report RESULTS.tsv [--charts DIR]

Every setting of a device is mounted side by side (one jbdfs per bdelay
value and transport, and the references), then for each thread count one
warm-up run on each (not recorded: it sizes the rounds) and R interleaved
rounds (5; 3 with --quick; --repeat R is the old name), one fs_mark run on
each setting in turn, the order rotated by one each round, so that the
machine's load changes affect every setting alike; then each is unmounted
and checked with e2fsck -fn. Each run creates about S seconds' worth of
files (2; 0.5 with --quick), sized from the warm-up's rate, the same in every
round, but never more than a guess per device for the whole run (40,000
files on ram; it was 2,000, about 0.1 s at 16 threads, in which ext3 runs
far faster than in long runs); --files N makes every run N files per thread
instead (fs_mark's own default is 1,000). Every figure is the median
(min–max) of the rounds, every ratio a ratio of medians with its bootstrap
interval and verdict (stats.py); the machine's load before and during the
run is sampled and printed, with a warning when other work used the CPUs.
Prints Markdown tables:
files/s in the layout of DESIGN.md's bdelay table, bdelay=auto against the
best fixed setting, jbdfs against ext3, fuse2fs and the FUSE floor (--floor:
daemon/examples/fuse_floor.rs, what FUSE's round trips cost) with ratios,
and the journal's statistics per mount. --charts DIR writes
fsmark-DEVICE[-DATA].png (files/s against threads). --transport: jbdfs and
the floor on /dev/fuse, on io_uring or both side by side (default both;
io_uring only where enable_uring is Y). --out keeps the raw results, TSV:
fs (jbdfs/TRANSPORT, floor/TRANSPORT, ext3, fuse2fs), device, data, bdelay,
threads, files/s; RESULTS.stats beside it holds the journal statistics,
RESULTS.machine the load before and during the run.
"""
import contextlib
import os
import re
import subprocess
from collections import defaultdict

from . import common, report, stats, targets
from .common import die, warn

BDELAY_ORDER = ["0", "yield", "1", "2", "3", "4", "jbd2", "auto"]
FIXED = ["0", "yield", "1", "2", "3", "4"]
DEVICE_ORDER = ["ram", "disk", "array", "sata"]
TRANSPORT_ORDER = ["dev_fuse", "io_uring"]


def fs_name(fs):
    """The FUSE filesystems with their transport: jbdfs -> jbdfs/dev_fuse."""
    return f"{fs}/dev_fuse" if fs in ("jbdfs", "floor") else fs


def load_runs(path):
    """{(fs, device, data, bdelay): {threads: [files/s of each round]}}."""
    runs = defaultdict(lambda: defaultdict(list))
    with open(path) as f:
        for line in f:
            fs, dev, data, bdelay, threads, rate = line.rstrip("\n").split("\t")
            runs[(fs_name(fs), dev, data, bdelay)][int(threads)].append(float(rate))
    return runs


def load(path, stat):
    """{(fs, device, data, bdelay): {threads: files/s}}, the rounds combined
    by stat: max (best of the rounds) or median. The tables use load_runs."""
    return {k: {t: stats.combine(v, "median" if stat == "median" else "best") for t, v in d.items()}
            for k, d in load_runs(path).items()}


def transports(res, base, dev=None, data=None):
    """The transports BASE (jbdfs or floor) ran on, in order."""
    found = {k[0].split("/", 1)[1] for k in res
             if k[0].startswith(base + "/") and dev in (None, k[1]) and data in (None, k[2])}
    return report.ordered(found, TRANSPORT_ORDER)


def best_of(settings, t):
    """(bdelay, runs) of the setting with the highest median at T threads, of {bdelay: {threads: runs}}."""
    cands = [(b, r[t]) for b, r in settings.items() if r.get(t)]
    return max(cands, key=lambda x: stats.median(x[1])) if cands else ("–", None)


def design_table(res, data):
    """Rows 'device transport bdelay', columns threads, as in DESIGN.md:
    each cell the median files/s (min–max) of the rounds."""
    keys = [k for k in res if k[0].startswith("jbdfs/") and k[2] == data]
    threads = sorted({t for k in keys for t in res[k]})
    rows = []
    for dev in report.ordered({k[1] for k in keys}, DEVICE_ORDER):
        for tr in transports(res, "jbdfs", dev, data):
            for b in report.ordered({k[3] for k in keys if k[1] == dev and k[0] == f"jbdfs/{tr}"}, BDELAY_ORDER):
                r = res[(f"jbdfs/{tr}", dev, data, b)]
                rows.append([dev, tr, b] + [report.spread(r.get(t)) for t in threads])
    report.table(["device", "transport", "bdelay"] + [str(t) for t in threads], rows)


def auto_table(res, data):
    """bdelay=auto against the best fixed setting at each thread count (the
    fixed setting with the highest median: choosing the best of several
    favours it a little), with the verdict."""
    rows = []
    for dev in report.ordered({k[1] for k in res if k[0].startswith("jbdfs/") and k[2] == data}, DEVICE_ORDER):
        for tr in transports(res, "jbdfs", dev, data):
            fs = f"jbdfs/{tr}"
            auto = res.get((fs, dev, data, "auto"))
            fixed = {b: res[(fs, dev, data, b)] for b in FIXED if (fs, dev, data, b) in res}
            if not auto or not fixed:
                continue
            for t in sorted(auto):
                best_b, best = best_of(fixed, t)
                rows.append([dev, tr, str(t), report.spread(auto[t]),
                             f"{report.spread(best)} (bdelay={best_b})", report.judged(auto[t], best)])
    if rows:
        print(f"\nbdelay=auto against the best fixed bdelay (0, yield, 1-4), data={data}, files/s, "
              "median (min–max) of the rounds; auto/best: ratio of medians [95% interval] verdict:\n")
        report.table(["device", "transport", "threads", "auto files/s", "best fixed files/s",
                      "auto/best"], rows)


def questions_table(res, data):
    """The seeds' two questions, where the run has their settings: does
    bdelay=1 collapse on ram at 2+ threads (bdelay=1 against bdelay=0), and
    does batching help on sata (bdelay=1 and auto against bdelay=0)."""
    rows = []
    for tr in transports(res, "jbdfs", None, data):
        fs = f"jbdfs/{tr}"
        for dev, what in (("ram", ["1"]), ("sata", ["1", "auto"])):
            zero = res.get((fs, dev, data, "0"))
            for b in what:
                other = res.get((fs, dev, data, b))
                if not zero or not other:
                    continue
                for t in sorted(t for t in other if t in zero and (dev == "sata" or t >= 2)):
                    rows.append([dev, tr, str(t), f"bdelay={b} / bdelay=0", report.spread(other[t]),
                                 report.spread(zero[t]), report.judged(other[t], zero[t])])
    if rows:
        print(f"\nThe seeds' questions, data={data}: does bdelay=1 collapse on ram at 2+ threads; does "
              "batching help on sata (files/s, median (min–max); ratio [95% interval] verdict):\n")
        report.table(["device", "transport", "threads", "comparison", "batched", "bdelay=0", "ratio"], rows)


def reference_table(res, data):
    """jbdfs on each transport (auto, or the one bdelay run, and the best
    setting) against ext3 and fuse2fs, and the FUSE floor (fuser answering
    from memory) on each transport where it was run."""
    for dev in report.ordered({k[1] for k in res if not k[0].startswith("jbdfs/") and k[2] == data},
                              DEVICE_ORDER):
        refs = {r: res.get((r, dev, data, "-"), {}) for r in ("ext3", "fuse2fs")}
        refs = {r: v for r, v in refs.items() if v}
        ext3 = refs.get("ext3", {})
        floors = {tr: res[(f"floor/{tr}", dev, data, "-")] for tr in transports(res, "floor", dev, data)}
        mine, shown, chosen = {}, {}, {}
        for tr in transports(res, "jbdfs", dev, data):
            bs = {k[3]: v for k, v in res.items() if k[0] == f"jbdfs/{tr}" and k[1] == dev and k[2] == data}
            b = "auto" if "auto" in bs else report.ordered(bs, BDELAY_ORDER)[0]
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
                row.append(report.spread(shown[tr].get(t)))
                if len(bs) > 1:
                    best_b, best = best_of(bs, t)
                    row.append(f"{report.spread(best)} ({best_b})")
            row += [report.spread(v.get(t)) for v in refs.values()]
            row += [report.judged(shown[tr].get(t), v.get(t)) for tr in mine for v in refs.values()]
            if len(mine) > 1:
                row.append(report.judged(shown.get("io_uring", {}).get(t), shown.get("dev_fuse", {}).get(t)))
            row += [report.spread(v.get(t)) for v in floors.values()]
            for tr, fl in floors.items():
                if tr in mine:
                    row.append(report.judged(shown[tr].get(t), fl.get(t)))
                if ext3:
                    row.append(report.judged(ext3.get(t), fl.get(t)))
            if len(floors) > 1:
                row.append(report.judged(floors.get("io_uring", {}).get(t), floors.get("dev_fuse", {}).get(t)))
            rows.append(row)
        which = ", ".join(f"jbdfs/{tr} bdelay={b}" for tr, b in chosen.items())
        print(f"\nfs_mark on {dev}, data={data}: jbdfs on each transport against Linux ext3 (loop)"
              f" and the references, files/s, median (min–max) ({which}); ratios of medians "
              "[95% interval] verdict:\n")
        report.table(head, rows)


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
        report.table(["device", "transport", "bdelay", "transactions", "handles per transaction",
                           "µs waiting to batch per transaction"], [r for *_, r in sorted(rows)])


def draw_charts(res, outdir):
    styles = {"dev_fuse": "-", "io_uring": "-."}
    for (dev, data) in sorted({(k[1], k[2]) for k in res}):
        lines = []
        for tr in transports(res, "jbdfs", dev, data):
            fs = f"jbdfs/{tr}"
            for b in report.ordered({k[3] for k in res if k[:3] == (fs, dev, data)}, BDELAY_ORDER):
                lines.append((f"{fs} bdelay={b}", res[(fs, dev, data, b)], styles.get(tr, "-")))
        labels = {"ext3": ("Linux ext3", "--"), "fuse2fs": ("fuse2fs", "--")}
        for tr in transports(res, "floor", dev, data):
            labels[f"floor/{tr}"] = (f"FUSE floor/{tr} (no storage)", ":")
        for ref, (label, style) in labels.items():
            if (ref, dev, data, "-") in res:
                lines.append((label, res[(ref, dev, data, "-")], style))
        name = f"fsmark-{dev}.png" if data == "ordered" else f"fsmark-{dev}-{data}.png"
        # A log scale shows the ramdisk's collapse and the best settings alike.
        report.line_chart(os.path.join(outdir, name),
                               f"fs_mark 4 KiB files, fsync, data={data}, device={dev}",
                               "threads", "files/s (log scale)", lines, logy=True, log2x=True)


# Files for one run: the guess for the whole run and the least per thread.
# On ram the guess once was 2,000 files, which at 16 threads is a run of
# about 0.1 s, whatever --seconds asked: such bursts measured ext3 at 1.2-1.6x
# its rate over runs of a second or more (2026-12-07, docs/PERFORMANCE.md), so
# ram's runs now last about --seconds. `--files N` sets the size outright.
GUESS = {"ram": (40000, 40), "nbd": (2000, 40), "nbd-delay": (600, 20), "disk": (1200, 30),
         "array": (600, 20), "sata": (120, 6)}


def files_per_thread(dev, threads, seconds, last_rate=None):
    """With the rate the same setting reached last time, enough for about
    SECONDS, never more than the guess for the device (a setting that
    collapses when threads are added would otherwise run for minutes)."""
    total, least = GUESS[dev]
    if last_rate is not None:
        total = int(min(last_rate * seconds, total))
    return max(total // threads, least)


def pilot(base, dev, threads, seconds, log, name):
    """Warm-up runs, not recorded: from the least files per thread, four
    times more until a run lasts SECONDS/4; the files per thread for about
    SECONDS (files_per_thread). fs_mark on a cold mount is slow for its
    first files, and a setting that collapses must not be sized from
    another's rate."""
    least = GUESS[dev][1]
    cap = GUESS[dev][0] // threads
    n = least
    for _ in range(5):
        rate = run_fsmark(base, threads, n, log)
        subprocess.run(["rm", "-rf", base])
        if rate is None:
            die(f"fs_mark failed on {name} ({dev})")
        if n * threads / float(rate) >= seconds / 4 or n >= cap:
            break
        n = min(n * 4, cap)
    return files_per_thread(dev, threads, seconds, float(rate))


def run_fsmark(base, threads, n, log):
    """One fs_mark run in BASE; its files/s."""
    os.makedirs(base, exist_ok=True)
    args = ["fs_mark"]
    for i in range(1, threads + 1):
        args += ["-d", f"{base}/{i}"]
    # fs_mark keeps a log, fs_log.txt in the current directory unless told.
    args += ["-s", "4096", "-n", str(n), "-S", "1", "-L", "1", "-l", f"{log}.fs_mark"]
    proc = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rate = None
    for line in proc.stdout.splitlines():
        f = line.split()
        if len(f) >= 5 and f[0].isdigit():
            rate = f[3]
    if rate is None:
        tail = "\n".join(proc.stdout.splitlines()[-10:])
        warn(f"fs_mark in {base} exited with status {proc.returncode} and no rate; its output ends:\n{tail}")
    return rate


def journal_stats(path):
    """transactions, handles per transaction, µs waiting to batch, from jbdfs's -o stats= file."""
    n = h = w = ""
    with contextlib.suppress(FileNotFoundError), open(path) as f:
        for line in f:
            if "handles per transaction" in line:
                h = line.split()[0]
            if "waiting to batch per transaction" in line:
                # awk's $1 + 0: the leading number of "0us".
                w = "%g" % float(re.match(r"[0-9.]*", line.split()[0]).group() or 0)
            if re.search(r"transactions \(", line):
                n = line.split()[0]
    return n, h, w


def stats_transport(path, transport):
    """Whether the stats file (its last transport: line) agrees with TRANSPORT."""
    line = ""
    with contextlib.suppress(FileNotFoundError), open(path) as f:
        for x in f:
            if x.startswith("transport:"):
                line = x.strip()
    if (transport == "dev_fuse" and (not line or line.startswith("transport: /dev/fuse"))) or \
            (transport == "io_uring" and line.startswith("transport: io_uring")):
        return True
    warn(f"the mount was to be served over {transport}, but {path} says: {line or 'no transport line'}")
    return False


def one_device(a, data, dev, refs, transports, emit, stats_out, log, bad_transport):
    ts = []
    for fs in targets.fs_list(dev, refs, transports):
        base, tr = targets.split(fs)
        # fuse2fs has no data modes: it writes no journal at all.
        if base == "fuse2fs" and data != "ordered":
            continue
        for b in a.bdelay.split() if base == "jbdfs" else ["-"]:
            t = targets.make(fs, dev, data=data, log=log)
            t.bdelay = b
            ts.append(t)
    jb = [t for t in ts if t.fs == "jbdfs"]
    with contextlib.ExitStack() as images:
        for t in ts:
            t.make_image()
            images.callback(t.remove)
            if t.fs == "jbdfs":
                t.opts = f"bdelay={t.bdelay},stats={t.image}.stats"
        with contextlib.ExitStack() as mounts:
            for t in ts:
                mounts.enter_context(t.mount())
            run = 0
            for threads in [int(x) for x in a.threads.split()]:
                # A warm-up run on each, not recorded, which also sizes
                # every round of this thread count alike (the same files
                # per thread in each round, so that the rounds compare).
                size = {}
                for t in ts:
                    run += 1
                    size[id(t)] = a.files or pilot(f"{t.mnt}/r{run}", dev, threads, a.seconds, log, t.name)
                for rnd in range(a.rounds):
                    # Interleaved rounds, A B C, B C A, ...: each setting
                    # meets the machine's changes alike, and none is always first.
                    k = rnd % len(ts)
                    for t in ts[k:] + ts[:k]:
                        run += 1
                        # Short: fs_mark 3.3 overflows a name buffer (and
                        # aborts) once a directory path reaches about 39
                        # characters; the mount point takes 29.
                        base = f"{t.mnt}/r{run}"
                        rate = run_fsmark(base, threads, size[id(t)], log)
                        if rate is None:
                            die(f"fs_mark failed on {t.name} ({dev})")
                        subprocess.run(["rm", "-rf", base])
                        emit(t.name, dev, data, t.bdelay, threads, rate)
        for t in ts:
            t.fsck(f"{t.name} on {dev}, data={data}, bdelay={t.bdelay}")
        # The journal's own account of each jbdfs mount, written at unmount:
        # the transport served, how many handles shared a commit and how long
        # they waited to batch.
        for t in jb:
            journal_report(t, dev, data, stats_out, bad_transport)


def journal_report(t, dev, data, stats_out, bad_transport):
    st = t.image + ".stats"
    if not stats_transport(st, t.transport or "dev_fuse"):
        bad_transport.append(f"{t.name} on {dev}, data={data}, bdelay={t.bdelay}")
    if os.path.exists(st):
        with open(stats_out, "a") as f:
            f.write("\t".join([dev, data, t.bdelay, *journal_stats(st), t.transport or "dev_fuse"]) + "\n")


def print_report(results, stat="max", charts=None):
    """The tables of RESULTS (every figure the median and min–max of its
    rounds; STAT is no longer used: kept for the callers)."""
    res = load_runs(results)
    machine = results + ".machine"
    if os.path.exists(machine):
        with open(machine) as f:
            print("\n" + f.read().rstrip())
    print(f"\nmethod: {stats.METHOD}")
    for data in report.ordered({k[2] for k in res}, ["ordered", "writeback", "journal"]):
        n = sorted({len(v) for d in res.values() for v in d.values()})
        rounds = f"{n[0]}" if len(n) == 1 else f"{n[0]}-{n[-1]}"
        print(f"\nfs_mark, 4 KiB files, fsync before close, data={data}, files/s, median (min–max) "
              f"of {rounds} interleaved rounds:\n")
        design_table(res, data)
        auto_table(res, data)
        questions_table(res, data)
        reference_table(res, data)
        stats_table(results + ".stats", data)
    if charts:
        draw_charts(res, charts)


def main(argv):
    ap = common.parser(__doc__, "quick", "devices", "repeat", "data", "charts", "out", "report")
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--files", type=int, help="files per thread in every run (overrides --seconds)")
    ap.add_argument("--bdelay")
    ap.add_argument("--threads")
    ap.add_argument("--no-refs", action="store_true")
    ap.add_argument("--floor", action="store_true")
    ap.add_argument("--transport")
    ap.add_argument("--stat", choices=["max", "median"], default="max",
                    help="ignored: the tables give the median (min–max) of the rounds")
    ap.add_argument("--rounds", type=int, help="interleaved rounds (default 3 with --quick, else 5)")
    a = ap.parse_args(argv)
    if a.report:
        print_report(a.report, a.stat, a.charts)
        return 0
    # Later options override what --quick chooses.
    q = a.quick
    a.devices = a.devices or ("ram sata" if q else "ram disk array sata")
    a.bdelay = a.bdelay or ("0 1 auto" if q else "0 yield 1 2 3 4 jbd2 auto")
    a.threads = a.threads or ("1 4" if q else "1 2 4 8 10 16 20")
    a.seconds = a.seconds if a.seconds is not None else (0.5 if q else 2)
    # --repeat R: the old name of --rounds.
    a.rounds = a.rounds or (a.repeat if a.repeat > 1 else (3 if q else 5))
    refs = ([] if a.no_refs else ["ext3", "fuse2fs"]) + (["floor"] if a.floor else [])
    common.need_root("fs_mark on FUSE and loop mounts")
    common.need("fs_mark", "scripts/deps.sh installs fsmark")
    common.on_signals()
    transports = common.Transports(a.transport)
    common.build(floor=a.floor)
    results, log = common.results_files("fsmark", a.out)
    open(results + ".stats", "w").close()
    sampler = common.load_sampler()
    common.header("fs_mark: 4 KiB files, fsync before close (bench-fsmark.sh)", transports, sampler)
    print(f"rounds: {a.rounds} interleaved, about {a.seconds:g} s of files each, after a warm-up run "
          "that is not counted", flush=True)
    emit = common.tsv_sink(results)
    bad_transport = []
    try:
        for data in a.data.split():
            for dev in a.devices.split():
                one_device(a, data, dev, refs, transports, emit, results + ".stats", log, bad_transport)
    finally:
        sampler.stop()
        with open(results + ".machine", "w") as f:
            f.write("\n".join(sampler.lines()) + "\n")
    print_report(results, a.stat, a.charts)
    if bad_transport:
        print("\nNot served over the transport they are labelled with (their figures above are wrong):")
        for b in bad_transport:
            print(f"- {b}")
    return 0 if targets.fsck_summary() and not bad_transport else 1
