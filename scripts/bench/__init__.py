"""jbdfs's benchmarks (../shared/BENCHMARKS.md, docs/PERFORMANCE.md) as one
package: python3's standard library only (matplotlib for the charts, when
Debian's python3-matplotlib is there). Run as root from scripts/:

    python3 -m bench COMMAND [OPTIONS]      (COMMAND --help for each)

or through the wrappers scripts/bench-*.sh, which take the same flags as
before the package (`exec python3 -m bench ...`). scripts/ab.sh and
scripts/ab-builds.sh call the wrappers.

Layout:
  common.py    paths and environment (JBDFS_BIN_DIR, JBDFS_NO_BUILD, BENCH_*),
               messages, cargo build, the FUSE transports (enable_uring is
               read, never written: io_uring is skipped with a note when it
               is not Y), the report's header, signals, drop_caches
  targets.py   the filesystems measured, as context managers: jbdfs on
               /dev/fuse or io_uring (and over NBD: nbd, nbd-delay), Linux
               ext3 and XFS on loop devices, fuse2fs, the FUSE floor
               (daemon/examples/fuse_floor.rs), the raw store. Each makes its
               image, mounts, unmounts, waits for its daemon and runs
               e2fsck -fn on exit; failures are collected and fsck_summary()
               reports them loudly (and the run exits 1)
  stats.py     the one median, best-of-repeats
  report.py    Markdown tables, ratios, PNG charts
  fsmark.py    fs_mark small files with fsync, every bdelay, side by side (bench-fsmark.sh, ab.sh)
  seqio.py     bulk write with fsync, cold sequential read, --layout (bench-seqio.sh)
  tree.py      source tree, compilebench-like (bench-tree.sh)
  afd.py       many small files, afdbench-like (bench-afd.sh)
  bigdir.py    large directories (bench-bigdir.sh)
  datamodes.py fsync beside a bulk writer in each data mode (bench-data-modes.sh)
  fsck.py      fsck-jbdfs -fn against e2fsck -fn (bench-fsck.sh)

Every workload module has main(argv); the ones with raw results also take
--report RESULTS.tsv to print the tables of an earlier --out again.
"""
