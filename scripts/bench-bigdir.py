#!/usr/bin/env python3
"""Large-directory scaling: create N entries in one directory in batches, and
after each batch time creates of the next batch and lookups (stat) of random
existing names. Prints one Markdown row per batch: entries, µs per create,
µs per lookup. Used by scripts/bench-bigdir.sh on each filesystem under test."""
import os
import random
import sys
import time

root, total, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
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
