"""Where a candidate's seconds go in the GPU stages (or the CPU target's): runner start, correctness, timing
and, inside timing, the measuring itself; with warm spare runners and without.

    PYTHONPATH=$PWD python benchmarks/judge_overhead.py [--target kernels/vecadd_cpu] [--candidates 4]
Runs on a CPU for a CPU target and on a GPU for a GPU target. Not a test: it prints a table.
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
from judge.stages.check import check  # noqa: E402
from judge.stages.evaluation import Evaluator  # noqa: E402
from judge.targets import load_target  # noqa: E402
from judge.stages.timing.stage import measure  # noqa: E402


def one_round(target, work: Path, candidates: int, warm: bool, budget_s: float | None) -> list[dict]:
    """Candidates (each the base's own kernel) as a round evaluates them; seconds per part for each."""
    source = target.kernel_source()
    base = target.assemble(work / "base", source)
    rows = []
    with Evaluator(target, work / ".round", base_dir=base, warm=warm) as evaluator:
        evaluator.base  # the base's runner is per round: not a candidate's cost
        evaluator.settle()
        for n in range(candidates):
            workspace = target.assemble(work / f"c{n}", source)
            t0 = time.monotonic()
            result, worker = check(evaluator, workspace)
            t1 = time.monotonic()
            if worker is None:
                raise SystemExit(f"candidate {n}: correctness {result.status}: {result.summary}")
            timing = measure(evaluator, worker, workspace, budget_s=budget_s)
            t2 = time.monotonic()
            worker.close()
            if not timing.passed:
                raise SystemExit(f"candidate {n}: timing {timing.status}: {timing.summary}")
            start = result.detail.to_json().get("runner_start_s")
            rows.append({"start": start, "check": t1 - t0, "timing": t2 - t1,
                         "measuring": timing.detail.to_json()["measuring_s"], "total": t2 - t0})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=Path, default=ROOT / "kernels" / "vecadd_cpu")
    parser.add_argument("--candidates", type=int, default=4)
    parser.add_argument("--budget-s", type=float, default=None, help="timing budget per candidate")
    args = parser.parse_args()
    target = load_target(args.target)
    print(f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, target {target.name}, "
          f"{args.candidates} candidates (the base's own kernel), medians in seconds")
    print("| runners | runner start | correctness (incl. start) | timing | of which measuring | per candidate |")
    print("|---|---|---|---|---|---|")
    for warm in (False, True):
        rows = one_round(target, Path(tempfile.mkdtemp(prefix="judge-overhead-")), args.candidates, warm,
                         args.budget_s)
        med = {k: stats.median([r[k] for r in rows if r[k] is not None]) if any(r[k] is not None for r in rows)
               else None for k in rows[0]}
        start = f"{med['start']:.2f}" if med["start"] is not None else "n/a"
        print(f"| {'warm spare' if warm else 'cold'} | {start} | {med['check']:.2f} | {med['timing']:.2f} | "
              f"{med['measuring']:.2f} | {med['total']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
