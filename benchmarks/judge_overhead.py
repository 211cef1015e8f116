"""Where a candidate's seconds go in the GPU stages (or the CPU target's): correctness (its runner's start
included), timing and, inside timing, the measuring itself; with spares that import torch themselves and with spares
forked from a template; and which oracle and runner commands took the seconds (judge.sandbox.worker's tallies).

    PYTHONPATH=$PWD python benchmarks/judge_overhead.py [--target kernels/vecadd_cpu] [--candidates 3] [--budget-s 1]
Runs on a CPU for a CPU target and on a GPU for a GPU target. Not a test: it prints tables.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from judge import stats  # noqa: E402
from judge.stage_calls import StageCalls  # noqa: E402
from judge.sandbox import worker as worker_module  # noqa: E402
from judge.stages.evaluation import Evaluator  # noqa: E402
from judge.targets import load_target  # noqa: E402

TOP_COMMANDS = 8


def one_round(target, work: Path, candidates: int, forked: bool, budget_s: float | None) -> list[dict]:
    """Candidates (each the base's own kernel) as a round evaluates them, after the base's check; seconds per
    stage for each."""
    source = target.kernel_source()
    base = target.assemble(work / "base", source)
    stages = StageCalls()
    rows = []
    with Evaluator(target, work / ".round", base_dir=base, fork_spares=forked) as evaluator:
        checked = stages.check_base(evaluator, base)  # the base's check is per round: not a candidate's cost
        if not checked.passed:
            raise SystemExit(f"base: correctness {checked.status}: {checked.summary}")
        worker_module.COMMAND_SECONDS.clear()
        for n in range(candidates):
            started = time.monotonic()
            results = stages.evaluate(evaluator, target.assemble(work / f"c{n}", source), budget_s)
            total = time.monotonic() - started
            by_stage = {r.stage: r for r in results}
            if "timing" not in by_stage or not by_stage["timing"].passed:
                last = results[-1]
                raise SystemExit(f"candidate {n}: {last.stage} {last.status}: {last.summary}")
            rows.append({"check": by_stage["correctness"].seconds, "timing": by_stage["timing"].seconds,
                         "measuring": by_stage["timing"].detail.to_json()["measuring_s"], "total": total,
                         "detail": by_stage["timing"].detail.to_json()})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=Path, default=ROOT / "kernels" / "vecadd_cpu")
    parser.add_argument("--candidates", type=int, default=3)
    parser.add_argument("--budget-s", type=float, default=None, help="timing budget per candidate")
    parser.add_argument("--spares", choices=("both", "importing", "forked"), default="both",
                        help="which spares to run the round with (both: one round each)")
    args = parser.parse_args()
    target = load_target(args.target)
    print(f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, target {target.name}, "
          f"{args.candidates} candidates (the base's own kernel), budget {args.budget_s}, medians in seconds")
    print("| spares | correctness | timing | of which measuring | per candidate |")
    print("|---|---|---|---|---|")
    tallies = {}
    for forked in {"both": (False, True), "importing": (False,), "forked": (True,)}[args.spares]:
        rows = one_round(target, Path(tempfile.mkdtemp(prefix="judge-overhead-")), args.candidates, forked,
                         args.budget_s)
        tallies[forked] = dict(worker_module.COMMAND_SECONDS)
        med = {k: stats.median([r[k] for r in rows]) for k in rows[0]}
        print(f"| {'forked' if forked else 'importing torch'} | {med['check']:.2f} | {med['timing']:.2f} | "
              f"{med['measuring']:.2f} | {med['total']:.2f} |", flush=True)
    for forked, seconds in tallies.items():
        print(f"\ncommands, spares {'forked' if forked else 'importing torch'}: seconds per candidate (count)")
        for name, (count, total) in sorted(seconds.items(), key=lambda kv: -kv[1][1])[:TOP_COMMANDS]:
            print(f"- {name}: {total / args.candidates:.2f} s ({count / args.candidates:.0f})")

if __name__ == "__main__":
    main()
