"""Inclusive seconds per frame in a sample file of scripts/sampling/sitecustomize.py: each frame (function and line,
or with --functions function and file) with the seconds of the samples whose stack holds it, most first.

    python3 scripts/sampling/summary.py sample-cli-123.txt [--match check.py] [--functions] [--top 40]
"""

import argparse
import re
from collections import Counter


def inclusive(path: str, functions: bool) -> tuple[Counter, float, float]:
    """Seconds per frame, the seconds sampled, and the period (from the file's first line)."""
    counts, period, total = Counter(), 0.005, 0
    with open(path) as lines:
        for line in lines:
            if line.startswith("#"):
                found = re.search(r"one sample every (\d+) ms", line)
                period = int(found.group(1)) / 1e3 if found else period
                continue
            stack, _, n = line.rstrip("\n").rpartition(" ")
            total += int(n)
            frames = stack.split(";")
            if functions:
                frames = [re.sub(r":\d+\)$", ")", f) for f in frames]
            for frame in set(frames):
                counts[frame] += int(n)
    return Counter({k: v * period for k, v in counts.items()}), total * period, period


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--match", default="", help="only frames whose text holds this")
    parser.add_argument("--functions", action="store_true", help="add up a function's lines")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    seconds, total, _ = inclusive(args.file, args.functions)
    print(f"{total:.1f} s sampled")
    shown = [(k, s) for k, s in seconds.most_common() if args.match in k][:args.top]
    for frame, s in shown:
        print(f"{s:9.1f} s  {frame}")


if __name__ == "__main__":
    main()
