"""Where a timed pair's seconds go: for one candidate (the base's own kernel) after the base's check, each process pair
and benchmark's wall seconds, split into the runners' builds and warm-ups (entering the frame), the turns themselves
and the rest (the oracle laying the sets out, leaving the frame, releasing), with the calls each kernel took; then the
oracle and runner commands by seconds (judge.sandbox.worker's tallies).

    PYTHONPATH=$PWD python benchmarks/pair_breakdown.py --target PROBLEM_DIR [--spares forked|importing] [--detail F]
Runs on a CPU for a CPU target and on a GPU for a GPU target. Not a test: it prints tables. It wraps the timing stage's
own functions to clock them, and changes nothing they do.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from judge.sandbox import worker as worker_module  # noqa: E402
from judge.stages.lease import RunnerLease  # noqa: E402
from judge.stages.timing import stage, turns  # noqa: E402
from judge.targets import load_target  # noqa: E402
import judge_overhead  # noqa: E402

TOP_COMMANDS = 20


class Clocked:
    """Seconds spent in the timing stage's parts, keyed by (pair, benchmark) where they belong to one."""

    def __init__(self):
        self.pairs: dict[int, float] = {}
        self.benchmarks: dict[tuple[int, int], float] = {}
        self.frames: dict[tuple[int, int], float] = {}
        self.turns: dict[tuple[int, int], tuple[float, int]] = {}
        self.runners: list[float] = []
        self.pair = 0
        # per benchmark, over its pairs: the tallies of its timed turns (worker_module.COMMAND_SECONDS' "timed*" and
        # "turn" entries, as [count, seconds]) and its calls' own times ("call us": [count, microseconds])
        self.legs: dict[int, dict[str, list]] = defaultdict(lambda: defaultdict(lambda: [0, 0.0]))

    def install(self) -> None:
        time_pair, benchmark, enter, run = stage.time_pair, stage._benchmark, stage._enter_frames, turns.PairTurns.run
        acquire = RunnerLease.acquire_loaded
        clocked = self

        def timed_pair(evaluator, workspace, pair, *args, **kwargs):
            clocked.pair, began = pair, time.perf_counter()
            try:
                return time_pair(evaluator, workspace, pair, *args, **kwargs)
            finally:
                clocked.pairs[pair] = time.perf_counter() - began

        def timed_benchmark(evaluator, runners, index, *args, **kwargs):
            began = time.perf_counter()
            try:
                return benchmark(evaluator, runners, index, *args, **kwargs)
            finally:
                clocked.benchmarks[(clocked.pair, index)] = time.perf_counter() - began

        def timed_enter(evaluator, runners, key, *args, **kwargs):
            began = time.perf_counter()
            try:
                return enter(evaluator, runners, key, *args, **kwargs)
            finally:
                index = int(key.rsplit("-", 1)[1])
                clocked.frames[(clocked.pair, index)] = time.perf_counter() - began

        def timed_run(self):
            began, before = time.perf_counter(), turn_tallies(worker_module.COMMAND_SECONDS)
            try:
                return run(self)
            finally:
                calls = len(self.series[("base", self.analysed_clock())])
                clocked.turns[(clocked.pair, self.index)] = (time.perf_counter() - began, calls)
                legs = clocked.legs[self.index]
                for name, (count, seconds) in turn_tallies(worker_module.COMMAND_SECONDS).items():
                    then = before.get(name, (0, 0.0))
                    legs[name][0] += count - then[0]
                    legs[name][1] += seconds - then[1]
                reps = [rep["us"] for series in self.series.values() for rep in series]
                legs["call us"][0] += len(reps)
                legs["call us"][1] += sum(reps)

        def timed_acquire(lease, *args, **kwargs):
            began = time.perf_counter()
            try:
                return acquire(lease, *args, **kwargs)
            finally:
                clocked.runners.append(time.perf_counter() - began)

        stage.time_pair, stage._benchmark, stage._enter_frames = timed_pair, timed_benchmark, timed_enter
        turns.PairTurns.run, RunnerLease.acquire_loaded = timed_run, timed_acquire


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=Path, default=ROOT / "kernels" / "vecadd_cpu")
    parser.add_argument("--spares", choices=("forked", "importing"), default="forked")
    parser.add_argument("--detail", type=Path, help="write the timing stage's detail (JSON) to this file")
    args = parser.parse_args()
    target = load_target(args.target)
    clocked = Clocked()
    clocked.install()
    rows = judge_overhead.one_round(target, Path(tempfile.mkdtemp(prefix="judge-pairs-")), 1,
                                    args.spares == "forked", None)
    row = rows[0]
    if args.detail:
        args.detail.write_text(json.dumps(row["detail"], indent=1))
    print(f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, target {target.name}, one candidate "
          f"(the base's own kernel), spares {args.spares}: correctness {row['check']:.1f} s, timing "
          f"{row['timing']:.1f} s ({len(clocked.pairs)} pairs, runners acquired in {sum(clocked.runners):.1f} s)")
    print("\n| pair | benchmark | wall s | build and warm-up s | turns s | calls per kernel | the rest s |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for (pair, index), wall in sorted(clocked.benchmarks.items()):
        frames = clocked.frames.get((pair, index), 0.0)
        turned, calls = clocked.turns.get((pair, index), (0.0, 0))
        print(f"| {pair} | {index} | {wall:.2f} | {frames:.2f} | {turned:.2f} | {calls} | "
              f"{wall - frames - turned:.2f} |")
    per_pair = defaultdict(float)
    for (pair, _), wall in clocked.benchmarks.items():
        per_pair[pair] += wall
    print("\n| pair | wall s | its benchmarks s |")
    print("|---:|---:|---:|")
    for pair, wall in sorted(clocked.pairs.items()):
        print(f"| {pair} | {wall:.2f} | {per_pair[pair]:.2f} |")
    print()
    print("\n".join(turn_lines(worker_module.COMMAND_SECONDS)))
    print()
    print("\n".join(benchmark_turn_lines(clocked.legs)))
    print("\ncommands: seconds (count)")
    for name, (count, total) in sorted(worker_module.COMMAND_SECONDS.items(), key=lambda kv: -kv[1][1])[:TOP_COMMANDS]:
        print(f"- {name}: {total:.2f} s ({count})")


# A timed call's round trip as the runner tells it (judge.boundary.callframe's `at` and `phases_us`), in order, and
# the oracle's step between two calls (its `turn` command: the last output checked, the next set written).
TURN_LEGS = ("to the worker", "before the call", "the call and its syncs", "the checks and the output copy", "the rest",
             "back from the worker")


def turn_lines(tallies: dict) -> list[str]:
    """A table of a timed turn's parts, milliseconds per call and their share of the turn; none without timed calls."""
    calls, wall = tallies.get("timed", (0, 0.0))
    if not calls:
        return []
    step_count, step_s = tallies.get("turn", (0, 0.0))
    rows = [(f"the record's round trip: {leg} (the runner's own account)",
             tallies.get(f"timed.{leg} (its own account)", (0, 0.0))[1]) for leg in TURN_LEGS]
    rows.append(("the oracle's step between calls (its `turn` command)", step_s))
    total = wall + step_s
    lines = [f"a timed turn: {calls} calls, {1e3 * total / calls:.2f} ms each ({step_count} oracle steps)",
             "", "| part | ms per call | share |", "|---|---:|---:|"]
    lines += [f"| {name} | {1e3 * seconds / calls:.3f} | {seconds / total:.0%} |" for name, seconds in rows]
    return lines


def turn_tallies(tallies: dict) -> dict[str, tuple[int, float]]:
    """The tallies of the timed turns: the records' ("timed" and their legs) and the oracle's steps ("turn")."""
    return {name: (entry[0], entry[1]) for name, entry in tallies.items()
            if name in ("timed", "turn") or name.startswith("timed.")}


def benchmark_turn_lines(legs: dict[int, dict[str, list]]) -> list[str]:
    """Per benchmark, over its pairs and every runner: milliseconds per timed call of the kernel's own call (its
    analysed and other clock alike), of the runner's parts of the round trip, of the oracle's step, and of the whole
    turn; none without timed calls."""
    rows = []
    for index in sorted(legs):
        tally = legs[index]
        calls = tally["timed"][0]
        if not calls:
            continue
        part = {leg: tally[f"timed.{leg} (its own account)"][1] for leg in TURN_LEGS}
        on_the_way = part["to the worker"] + part["back from the worker"] + part["the rest"]
        ms = [1e-3 * tally["call us"][1] / max(1, tally["call us"][0])] + \
            [1e3 * seconds / calls for seconds in (part["before the call"], part["the call and its syncs"],
                                                  part["the checks and the output copy"], on_the_way,
                                                  tally["turn"][1], tally["timed"][1] + tally["turn"][1])]
        rows.append(f"| {index} | {calls} | " + " | ".join(f"{v:.2f}" for v in ms) + " |")
    if not rows:
        return []
    return ["per benchmark, ms per timed call (every runner, every pair)", "",
            "| benchmark | calls | the kernel's call | before the call | the call, spin and syncs "
            "| checks and output copy | to, back and the rest | the oracle's step | the turn |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"] + rows


if __name__ == "__main__":
    main()
