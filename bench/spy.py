"""Summarise a py-spy ``--format raw`` (collapsed stacks) file: self and inclusive time.

py-spy record --format raw --gil -o out.txt -- python -m bench profile --no-profile
python -m bench.spy out.txt [--within _work] [--top 25]
"""

from __future__ import annotations

import argparse
import re
from collections import Counter

_FRAME = re.compile(r"^(?P<fn>[^ ]+) \((?P<file>[^:)]+)(?::\d+)?\)$")


def _name(frame: str) -> str:
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    path = m["file"]
    short = "/".join(path.split("/")[-2:])
    return f"{m['fn']} ({short})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--within", default="_work", help="keep stacks through this function")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    selfs: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    with open(args.file) as fh:
        for line in fh:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            frames = [_name(f) for f in stack.split(";")]
            if args.within and not any(
                f.split(" (")[0].split(".")[-1] == args.within for f in frames
            ):
                continue
            n = int(count)
            total += n
            selfs[frames[-1]] += n
            for f in set(frames):
                incl[f] += n
    print(f"{total} samples through {args.within!r}")
    print("\nself:")
    for f, n in selfs.most_common(args.top):
        print(f"  {100 * n / total:5.1f}%  {f}")
    print("\ninclusive:")
    for f, n in incl.most_common(args.top):
        print(f"  {100 * n / total:5.1f}%  {f}")


if __name__ == "__main__":
    main()
