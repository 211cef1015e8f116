"""How far apart two processes running the same CPU kernel are judged: the CPU example target against itself.

A round's base runner and each candidate's runner are separate processes. On the host clock, the same kernel
runs at a different speed in different processes (where their memory landed, which core they share with
whom), and the within-process interval cannot see that: this prints the self-comparisons that the target's
`min_effect` (judge.toml) has to cover.

    PYTHONPATH=$PWD python benchmarks/cpu_selfcheck.py [--runs 8] [--target kernels/vecadd_cpu]
Not a test: it prints numbers for kernels/vecadd_cpu/judge.toml's comment.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from judge.stages.evaluation import Evaluator  # noqa: E402
from judge.stage_calls import StageCalls  # noqa: E402
from judge.targets import load_target  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8, help="candidates, each the base's own kernel")
    parser.add_argument("--target", type=Path, default=ROOT / "kernels" / "vecadd_cpu")
    parser.add_argument("--spares", choices=("default", "forked", "cold"), default="default",
                        help="runners forked from a template that imported torch, or each importing it itself")
    args = parser.parse_args()
    fork_spares = {"default": None, "forked": True, "cold": False}[args.spares]

    target = load_target(args.target)
    source = (args.target / target.kernel_file).read_text()
    work = Path(tempfile.mkdtemp(prefix="judge-cpu-selfcheck-"))
    base = target.assemble(work / "base", source)
    cores = len(os.sched_getaffinity(0))
    print(f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.processor() or platform.machine()}, "
          f"{cores} cores available, target {target.name}, min_effect {target.min_effect}, spares {args.spares}")
    labels = [target.benchmark_label(i) for i in range(len(target.benchmarks))]
    print("| run | geomean [95% interval] | " + " | ".join(labels) + " |")
    print("|---|---|" + "---|" * len(labels))
    worst = 1.0
    with Evaluator(target, work / ".round", base_dir=base, fork_spares=fork_spares) as evaluator:
        for run in range(args.runs):
            workspace = target.assemble(work / f"self-{run + 1}", source)
            timing = StageCalls().evaluate(evaluator, workspace, None)[-1]
            if not timing.passed:
                raise SystemExit(f"self-{run + 1}: timing {timing.status}: {timing.summary}")
            detail = timing.detail.to_json()
            low, high = detail["geomean_ci"]
            cells = [f"{b['speedup']:.3f}x" for b in detail["benchmarks"]]
            print(f"| self-{run + 1} | {detail['geomean']:.3f}x [{low:.3f}, {high:.3f}] | " + " | ".join(cells) + " |",
                  flush=True)
            worst = max(worst, detail["geomean"], 1 / detail["geomean"])
    print(f"worst self-comparison: {worst:.3f}x either way; a verdict needs a change beyond 1 + min_effect "
          f"= {1 + (target.min_effect or 0):.2f}x")


if __name__ == "__main__":
    main()
