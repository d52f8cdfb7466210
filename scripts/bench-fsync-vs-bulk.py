#!/usr/bin/env python3
"""fsync latency beside a bulk writer: the classic ext3 data=ordered cost.

    scripts/bench-fsync-vs-bulk.py MOUNTPOINT

One thread rewrites a 256 MiB file in 1 MiB writes without fsync; meanwhile
200 files of 4 KiB are created and fsync'd one by one. In data=ordered every
commit writes the bulk writer's queued data too; in data=writeback it does
not. Prints fsyncs/s and the median and 90th-percentile fsync latency.
"""
import os, sys, threading, time
mnt = sys.argv[1]
stop = False
def bulk():
    buf = os.urandom(1 << 20)
    fd = os.open(f"{mnt}/bulk", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    n = 0
    while not stop:
        os.write(fd, buf); n += 1
        if n % 256 == 0: os.lseek(fd, 0, 0)
    os.close(fd)
t = threading.Thread(target=bulk); t.start()
time.sleep(1)
lat = []
os.makedirs(f"{mnt}/small", exist_ok=True)
t0 = time.time()
for i in range(200):
    s = time.time()
    fd = os.open(f"{mnt}/small/f{i}", os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"x" * 4096); os.fsync(fd); os.close(fd)
    lat.append(time.time() - s)
el = time.time() - t0
stop = True; t.join()
lat.sort()
print(f"fsyncs/s {200/el:.0f}  median {lat[100]*1000:.1f} ms  p90 {lat[180]*1000:.1f} ms")
