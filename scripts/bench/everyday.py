#!/usr/bin/env python3
"""Everyday work on a real tree (issue 41): untar, a cold read of every
file, find -ls, du -s, cp -a, rm -rf and a git workflow, timed on jbdfs
mounted with `mount -t fuse.jbdfs` (over io_uring and over /dev/fuse),
Linux ext3 on a loop device, fuse2fs and the no-op FUSE floor, each on a
fresh image on the same backing, in interleaved rounds; then the FUSE
requests each workload sends, counted with the kernel's tracepoint.

    bench-everyday.sh [--quick] [--tree DIR] [--devices "ram disk"]
        [--repeat N] [--targets "jbdfs/io_uring jbdfs/dev_fuse ext3 fuse2fs
        floor/io_uring floor/dev_fuse"] [--[no-]count-requests]
        [--data MODE] [--opts JBDFS_OPTS] [--out FILE]
    bench-everyday.sh --report RESULTS.tsv

The tree: a real one, not generated. The default is the cargo registry's
sources (~/.cargo/registry/src, what a build of this project fills);
--tree DIR takes any directory (/usr/include, a toolchain's source). It
is tarred once into a cache file (~/.cache/jbdfs-bench/, made again when
the tree's counts or newest mtime change), copied to /dev/shm for the run
so that every untar reads it from memory.

Workloads, in this order on each target (a fresh image each round):
  tar xf + sync   untar the tree into the mount, then sync -f (syncfs)
  cold read       unmount, mount again, drop_caches (every target alike),
                  then read every file (tar cf - | cat > /dev/null)
  find -ls        warm: after the cold read
  du -s
  cp -a + sync    a copy of the tree within the mount
  rm -rf + sync   of the untarred tree (the copy stays, for git)
  git add         git init, then git add -A of the copy
  git commit
  git status
  git checkout    HEAD~1, after a second commit that modified a tenth of
                  the files and deleted a thirtieth of them (untimed)
--quick: one round, the tree workloads without cp -a and git, no request
counting (unless --count-requests). git's steps run where git is installed.

Targets: jbdfs/io_uring only where /sys/module/fuse/parameters/enable_uring
is Y (as root the run turns it on when it is N, and puts it back after);
the floor (daemon/examples/fuse_floor.rs: names and sizes in memory, reads
return zeros, rename is ENOSYS) skips the cold read (a remount empties it)
and git (which needs stored data and rename); its cp -a copies zeros. The
floor is started directly (it is an example, not installed); jbdfs through
mount(8), with scripts/umount.fuse.jbdfs and /usr/local/bin/jbdfs put in
place for the run when missing. e2fsck -fn checks every image after its run.

Requests: a separate, untimed pass on each FUSE target runs each workload
under `perf record -e fuse:fuse_request_send -a --filter 'connection == DEV'`
(this mount's requests only, from every context: the workload's own, the
writeback's), and reports them per regular file of the tree, total and by
opcode. Needs perf (Debian: linux-perf); without it the pass is skipped.

Results (--out, TSV): "time" FS DEVICE ROUND WORKLOAD SECONDS (SECONDS is
"fail" when the command failed), "req" FS DEVICE WORKLOAD OPCODE COUNT, and
"tree" NAME FILES DIRS BYTES. The report: medians of the rounds with the
spread (min-max), the ratio of each target's median to ext3's, and the
requests per file, as Markdown tables ready for docs/PERFORMANCE.md.
"""
import hashlib
import os
import random
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from . import common, report, stats, targets
from .common import die, info, warn

WORKLOADS = ["tar xf + sync", "cold read", "find -ls", "du -s", "cp -a + sync", "rm -rf + sync",
             "git add", "git commit", "git status", "git checkout"]
QUICK = ["tar xf + sync", "cold read", "find -ls", "du -s", "rm -rf + sync"]
GIT = [w for w in WORKLOADS if w.startswith("git")]
FLOOR_SKIPS = {"cold read": "a remount empties it, and its reads return zeros",
               "git add": "git needs stored data and rename", "git commit": "", "git status": "",
               "git checkout": ""}
TARGET_ORDER = ["jbdfs/io_uring", "jbdfs/dev_fuse", "ext3", "fuse2fs", "floor/io_uring", "floor/dev_fuse"]
CACHE_DIR = Path(os.environ.get("BENCH_TREE_CACHE", Path.home() / ".cache" / "jbdfs-bench"))
OPCODE = re.compile(r"connection (\d+) req \d+ opcode \d+ \(([A-Z_0-9]+)\)")


# -- the tree -----------------------------------------------------------------
def tree_counts(root):
    """(regular files, directories, symlinks, bytes of the files, newest mtime)."""
    files = dirs = links = size = 0
    newest = 0.0
    for dirpath, dnames, fnames in os.walk(root):
        dirs += 1
        for n in fnames + dnames:
            st = os.lstat(os.path.join(dirpath, n))
            newest = max(newest, st.st_mtime)
            if stat.S_ISLNK(st.st_mode):
                links += 1
            elif stat.S_ISREG(st.st_mode):
                files += 1
                size += st.st_size
    return files, dirs, links, size, newest


def tree_tar(root):
    """The tree's tarball in the cache, made when missing or out of date; (tar, counts)."""
    root = os.path.realpath(root)
    if not os.path.isdir(root):
        die(f"--tree {root}: not a directory")
    counts = tree_counts(root)
    if counts[0] == 0:
        die(f"--tree {root} holds no files")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha1(root.encode()).hexdigest()[:12]
    tar, meta = CACHE_DIR / f"everyday-{key}.tar", CACHE_DIR / f"everyday-{key}.meta"
    sig = f"{root}\t{counts}\n"
    if not tar.exists() or not meta.exists() or meta.read_text() != sig:
        if meta.exists() and meta.read_text() != sig:
            then = meta.read_text().rstrip("\n").split("\t", 1)[-1]
            warn(f"{root} changed since it was tarred (files, dirs, symlinks, bytes, newest mtime: "
                 f"{then} then, {counts} now): figures from before are of another tree")
        info(f"tarring {root} into {tar} (once; again when the tree changes)")
        tmp = tar.with_suffix(".tar.tmp")
        if subprocess.run(["tar", "cf", tmp, "-C", root, "."]).returncode > 1:
            die(f"tar cf {tmp} -C {root} . failed")
        os.replace(tmp, tar)
        meta.write_text(sig)
    return tar, counts


# -- the workloads --------------------------------------------------------------
def git_env(home):
    env = dict(os.environ, HOME=home, GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME="bench",
               GIT_AUTHOR_EMAIL="bench@localhost", GIT_COMMITTER_NAME="bench",
               GIT_COMMITTER_EMAIL="bench@localhost", GIT_CONFIG_COUNT="2",
               GIT_CONFIG_KEY_0="gc.auto", GIT_CONFIG_VALUE_0="0",
               GIT_CONFIG_KEY_1="init.defaultBranch", GIT_CONFIG_VALUE_1="main")
    env.pop("GIT_DIR", None)
    env.pop("GIT_WORK_TREE", None)
    return env


def commands(tar, floor=False):
    """{workload: shell command run in the mount's root}. On the floor a
    sync's error is ignored: it writes back the attributes and pages of
    files it already forgot (rm -rf), which fails with ENOENT, and syncfs
    reports that."""
    q = shlex.quote(str(tar))
    sync = "{ sync -f . || true; }" if floor else "sync -f ."
    return {
        "tar xf + sync": f"mkdir tree && tar xf {q} -C tree && {sync}",
        "cold read": "tar cf - -C tree . | cat > /dev/null",
        "find -ls": "find tree -ls > /dev/null",
        "du -s": "du -s tree > /dev/null",
        "cp -a + sync": f"cp -a tree copy && {sync}",
        "rm -rf + sync": f"rm -rf tree && {sync}",
        "git add": "git init -q copy && git -C copy add -A",
        "git commit": "git -C copy commit -q -m tree",
        "git status": "git -C copy status > /dev/null",
        "git checkout": "git -C copy checkout -q HEAD~1",
    }


def change_a_tenth(repo, env, seed=41):
    """Before the checkout (untimed): append a line to a fifteenth of the
    files, delete a thirtieth (a tenth in all), and commit that."""
    files = []
    for dirpath, dnames, fnames in os.walk(repo):
        if dirpath == repo and ".git" in dnames:
            dnames.remove(".git")
        files += [os.path.join(dirpath, n) for n in fnames]
    files.sort()
    rng = random.Random(seed)
    chosen = rng.sample(files, max(len(files) // 10, 1))
    for i, path in enumerate(chosen):
        if i % 3 == 2:
            os.unlink(path)
        else:
            with open(path, "ab") as f:
                f.write(b"\n// changed by bench-everyday\n")
    subprocess.run(["sh", "-c", "git -C copy add -A && git -C copy commit -q -m change"],
                   cwd=os.path.dirname(repo), env=env, check=True)


def run_cmd(cmd, cwd, env, perf_data=None, conn=None):
    """Run CMD with sh in CWD (under perf record when PERF_DATA); (ok, seconds)."""
    args = ["sh", "-c", cmd]
    if perf_data:
        args = ["perf", "record", "-q", "-o", perf_data, "-e", "fuse:fuse_request_send",
                "--filter", f"connection == {conn}", "-a", "--"] + args
    t0 = time.perf_counter()
    p = subprocess.run(args, cwd=cwd, env=env, stdout=subprocess.DEVNULL if perf_data else None)
    secs = time.perf_counter() - t0
    if p.returncode:
        warn(f"`{cmd}` exited with status {p.returncode} in {cwd}")
    return p.returncode == 0, secs


def connection(mnt):
    """The FUSE connection's id as the tracepoint prints it (the kernel's dev_t of the mount)."""
    dev = os.stat(mnt).st_dev
    return (os.major(dev) << 20) | os.minor(dev)


def count_opcodes(perf_data, conn):
    out = subprocess.run(["perf", "script", "-i", perf_data], capture_output=True, text=True).stdout
    counts = defaultdict(int)
    for m in OPCODE.finditer(out):
        if int(m.group(1)) == conn:
            counts[m.group(2).removeprefix("FUSE_")] += 1
    return counts


def one_target(name, dev, tar, workloads, a, log, emit_time=None, emit_req=None, rnd=0):
    """Every workload on a fresh image of NAME: timed (emit_time) or counted (emit_req)."""
    t = targets.make_mounted(name, dev, data=a.data, opts=a.opts if name.startswith("jbdfs") else "", log=log)
    t.what = f"{name} on {dev}, " + (f"round {rnd}" if emit_time else "request count")
    info(t.what)
    floor = name.startswith("floor")
    cmds = commands(tar, floor)
    home = tempfile.mkdtemp(prefix="jbdfs-everyday-home.")
    env = git_env(home)
    perf_dir = tempfile.mkdtemp(prefix="jbdfs-everyday-perf.") if emit_req else None
    t.make_image()
    try:
        # The workloads before the cold read, on the first mount; the rest on a second.
        split_at = workloads.index("cold read") if "cold read" in workloads and not floor else len(workloads)
        todo = [w for w in workloads if not (floor and w in FLOOR_SKIPS)]
        for part in (todo[:split_at], todo[split_at:]) if split_at < len(workloads) else (todo,):
            if not part:
                continue
            with t.mount() as mnt:
                conn = connection(mnt)
                for w in part:
                    if w == "cold read":
                        common.drop_caches()
                    if w == "git checkout":
                        change_a_tenth(os.path.join(mnt, "copy"), env)
                    perf_data = os.path.join(perf_dir, "perf.data") if perf_dir else None
                    ok, secs = run_cmd(cmds[w], mnt, env, perf_data, conn)
                    if emit_time:
                        emit_time("time", name, dev, rnd, w, f"{secs:.4f}" if ok else "fail")
                    if emit_req:
                        for op, n in sorted(count_opcodes(perf_data, conn).items()):
                            emit_req("req", name, dev, w, op, n)
                        os.unlink(perf_data)
    finally:
        shutil.rmtree(home, ignore_errors=True)
        if perf_dir:
            shutil.rmtree(perf_dir, ignore_errors=True)
        t.fsck()
        t.remove()


# -- enable_uring -------------------------------------------------------------
class UringSwitch:
    """Turn enable_uring on for the run when it is N and we are root (as
    scripts/test.sh does), and put it back afterwards."""

    def __init__(self):
        self.was = None

    def on(self):
        state = common.uring_state()
        if state == "N" and os.geteuid() == 0:
            try:
                common.URING_PARAM.write_text("1\n")
            except OSError as e:
                warn(f"cannot turn {common.URING_PARAM} on ({e})")
                return
            if common.uring_state() == "Y":
                self.was = state
                info(f"{common.URING_PARAM} was {state}, now Y for the run (put back after)")

    def restore(self):
        if self.was is not None:
            try:
                common.URING_PARAM.write_text("0\n" if self.was == "N" else f"{self.was}\n")
                info(f"{common.URING_PARAM} put back to {self.was}")
            except OSError as e:
                warn(f"cannot put {common.URING_PARAM} back to {self.was} ({e})")
            self.was = None


# -- the report -----------------------------------------------------------------
def read_results(path):
    times = defaultdict(lambda: defaultdict(list))   # (fs, dev) -> workload -> [s or None]
    reqs = defaultdict(lambda: defaultdict(dict))   # (fs, dev) -> workload -> {op: n}
    tree = None
    with open(path) as f:
        for line in f:
            r = line.rstrip("\n").split("\t")
            if r[0] == "time":
                times[(r[1], r[2])][r[4]].append(None if r[5] == "fail" else float(r[5]))
            elif r[0] == "req":
                reqs[(r[1], r[2])][r[3]][r[4]] = int(r[5])
            elif r[0] == "tree":
                tree = (r[1], int(r[2]), int(r[3]), int(r[4]))
    return times, reqs, tree


def fmt_time(vals):
    ok = [v for v in vals if v is not None]
    if not ok:
        return "fail" if vals else "–"
    m = stats.median(ok)
    s = f"{m:.2f}"
    if len(ok) > 1:
        s += f" ({min(ok):.2f}–{max(ok):.2f})"
    if len(ok) < len(vals):
        s += f" [{len(vals) - len(ok)} failed]"
    return s


def per_file(n, files):
    v = n / files
    return "–" if not n else ("<0.01" if v < 0.005 else f"{v:.2f}")


def report_results(path, _charts=None):
    times, reqs, tree = read_results(path)
    files = tree[1] if tree else None
    if tree:
        print(f"\ntree: {tree[0]}: {tree[1]:,} files, {tree[2]:,} directories, "
              f"{tree[3] / (1 << 20):.1f} MiB")
    for dev in sorted({d for _, d in times} | {d for _, d in reqs}):
        fss = report.ordered([fs for fs, d in times if d == dev], TARGET_ORDER)
        if fss:
            work = [w for w in WORKLOADS if any(w in times[(fs, dev)] for fs in fss)]
            rounds = max(len(v) for fs in fss for v in times[(fs, dev)].values())
            print(f"\nEveryday workloads on {dev}: seconds, median of {rounds} interleaved round(s), "
                  "(min–max); lower is better; – where a target cannot run the workload:\n")
            report.table(["workload"] + fss, [[w] + [fmt_time(times[(fs, dev)].get(w, [])) for fs in fss]
                                              for w in work])
            if "ext3" in fss:
                others = [fs for fs in fss if fs != "ext3"]

                def med(fs, w):
                    ok = [v for v in times[(fs, dev)].get(w, []) if v is not None]
                    return stats.median(ok) if ok else None
                print(f"\nOn {dev}, each target's median time over ext3's (1.00x = ext3's time; lower is better):\n")
                rows = [[w] + [report.ratio(med(fs, w), med("ext3", w)) for fs in others] for w in work]
                tot = {fs: [med(fs, w) for w in work] for fs in fss}
                both = [i for i, w in enumerate(work) if all(tot[fs][i] is not None for fs in ["ext3"] + others)]
                if both and len(both) < len(work):
                    label = "sum of the workloads all targets ran"
                else:
                    label = "sum of the workloads"
                if both:
                    rows.append([label] + [report.ratio(sum(tot[fs][i] for i in both),
                                                        sum(tot["ext3"][i] for i in both)) for fs in others])
                report.table(["workload"] + [f"{fs}/ext3" for fs in others], rows)
        for fs in report.ordered([fs for fs, d in reqs if d == dev], TARGET_ORDER):
            per = reqs[(fs, dev)]
            work = [w for w in WORKLOADS if w in per]
            total = defaultdict(int)
            for w in work:
                for op, n in per[w].items():
                    total[op] += n
            ops = sorted(total, key=lambda o: -total[o])
            # A column for each opcode that reaches 0.05 per file in some
            # workload (24 at most), the rest summed in 'other'.
            div = files or 1
            top = [o for o in ops if any(per[w].get(o, 0) / div >= 0.05 for w in work)][:24]
            more = [o for o in ops if o not in top]
            unit = "per file of the tree" if files else "in all"
            print(f"\nFUSE requests on {fs} ({dev}), {unit} ({files or 0:,} files), from every context "
                  "(perf, fuse:fuse_request_send, this mount only)"
                  + (f"; 'other': {', '.join(more)}" if more else "") + ":\n")
            head = ["workload", "total"] + top + (["other"] if more else [])
            rows = []
            for w in work:
                c = per[w]
                row = [w, per_file(sum(c.values()), div)]
                row += [per_file(c.get(o, 0), div) for o in top]
                if more:
                    row.append(per_file(sum(c.get(o, 0) for o in more), div))
                rows.append(row)
            report.table(head, rows)


# -- main -----------------------------------------------------------------------------
def main(argv):
    import argparse
    ap = common.parser(__doc__, "quick", "devices", "data", "opts", "out", "report")
    ap.add_argument("--repeat", type=int)
    ap.add_argument("--tree", default=str(Path.home() / ".cargo" / "registry" / "src"))
    ap.add_argument("--targets", help="space-separated, default: " + " ".join(TARGET_ORDER))
    ap.add_argument("--count-requests", action=argparse.BooleanOptionalAction, default=None)
    a = ap.parse_args(argv)
    if a.report:
        report_results(a.report)
        return 0
    common.need_root("FUSE and loop mounts")
    common.on_signals()
    devices = (a.devices or "ram").split()
    repeat = a.repeat or (1 if a.quick else 3)
    count = a.count_requests if a.count_requests is not None else not a.quick
    workloads = list(QUICK if a.quick else WORKLOADS)
    if not shutil.which("git"):
        warn("git is not installed: the git workflow is skipped")
        workloads = [w for w in workloads if w not in GIT]
    if count and not shutil.which("perf"):
        warn("**perf is missing (apt-get install linux-perf): the FUSE requests are NOT counted**")
        count = False
    wanted = (a.targets or " ".join(TARGET_ORDER)).split()
    for n in wanted:
        if n not in TARGET_ORDER:
            die(f"unknown target {n} (expected some of: {' '.join(TARGET_ORDER)})")
    switch = UringSwitch()
    if any(n.endswith("/io_uring") for n in wanted):
        switch.on()
    try:
        uring = common.uring_state() == "Y"
        skipped = []
        if not uring:
            skipped.append(f"io_uring ({common.URING_PARAM} is {common.uring_state()})")
        if not shutil.which("fuse2fs") and "fuse2fs" in wanted:
            skipped.append("fuse2fs (not installed: apt-get install fuse2fs)")
        names = [n for n in wanted if (uring or not n.endswith("/io_uring"))
                 and (n != "fuse2fs" or shutil.which("fuse2fs"))]
        for s in skipped:
            warn(f"skipped: {s}")
        common.build(floor=any(n.startswith("floor") for n in names))
        tar, (nfiles, ndirs, nlinks, nbytes, _) = tree_tar(a.tree)
        results, log = common.results_files("everyday", a.out)
        emit = common.tsv_sink(results)
        emit("tree", os.path.realpath(a.tree), nfiles, ndirs, nbytes)
        common.section("everyday workloads on a real tree (bench-everyday.sh)")
        print(f"command: {common.cmdline()}")
        print(f"tree: {os.path.realpath(a.tree)}: {nfiles:,} files, {ndirs:,} directories, "
              f"{nlinks:,} symlinks, {nbytes:,} bytes ({nbytes / (1 << 20):.1f} MiB)")
        print(f"targets: {' '.join(names)}; jbdfs through mount -t fuse.jbdfs (-o data={a.data}"
              f"{',' + a.opts if a.opts else ''}, plus noio_uring or {','.join(common.uring_options())})")
        if skipped:
            print("skipped: " + "; ".join(skipped))
        print(f"enable_uring: {common.uring_state()}" + (" (turned on for the run)" if switch.was else ""))
        print(f"devices: {' '.join(devices)}; rounds: {repeat}, interleaved; workloads: {', '.join(workloads)}")
        if any(n.startswith("floor") for n in names):
            print("floor skips: cold read (a remount empties it, its reads return zeros) and git "
                  "(needs stored data and rename)")
        print(f"machine: {common.machine()}", flush=True)
        shm_tar = Path(tempfile.mkdtemp(prefix="jbdfs-everyday.", dir="/dev/shm")) / "tree.tar"
        shutil.copyfile(tar, shm_tar)
        try:
            with targets.mount_helpers():
                for dev in devices:
                    for r in range(1, repeat + 1):
                        for n in names:
                            one_target(n, dev, shm_tar, workloads, a, log, emit_time=emit, rnd=r)
                    if count:
                        for n in names:
                            if n.startswith(("jbdfs", "floor")):
                                one_target(n, dev, shm_tar, workloads, a, log, emit_req=emit)
        finally:
            shutil.rmtree(shm_tar.parent, ignore_errors=True)
    finally:
        switch.restore()
    print(f"\nresults: {results}")
    report_results(results)
    return 0 if targets.fsck_summary() else 1
