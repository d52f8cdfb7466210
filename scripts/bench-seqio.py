#!/usr/bin/env python3
"""Fragment count of a file in an ext3 image, from `debugfs -R "stat FILE"`.

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

import re
import sys

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


def main():
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
