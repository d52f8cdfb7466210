"""python3 -m bench COMMAND [OPTIONS]: see scripts/bench/__init__.py."""
import importlib
import os
import sys

COMMANDS = {
    "fsmark": "fsmark", "seqio": "seqio", "tree": "tree", "afd": "afd", "bigdir": "bigdir",
    "data-modes": "datamodes", "fsck": "fsck", "everyday": "everyday",
}


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(__doc__.strip() + "\ncommands: " + " ".join(COMMANDS), file=sys.stderr)
        return 2
    cmd = sys.argv[1]
    os.environ.setdefault("BENCH_PROG", f"bench {cmd}")
    module = importlib.import_module(f"bench.{COMMANDS[cmd]}")
    return module.main(sys.argv[2:]) or 0


if __name__ == "__main__":
    sys.exit(main())
