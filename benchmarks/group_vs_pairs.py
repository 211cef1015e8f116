"""Process groups against process pairs: the same kernels timed against the same base, each in pairs of its own one
after another (judge.stages.timing.stage.measure, what a round does today) and all at once in process groups
(judge.stages.timing.group.measure_group), in one Evaluator, after the base's check; the verdicts and seconds of both.

    PYTHONPATH=$PWD python benchmarks/group_vs_pairs.py --target PROBLEM_DIR [--copies 2] [--slow 0.1]
The kernels: `--copies` identical copies of the target's kernel and, with --slow F, a copy slowed by F of its own
time in each call (gpumode_parity.SLOWED_VARIANT). Runs on a CPU for a CPU target and on a GPU for a GPU target.
Not a test: it prints a table.
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
sys.path.insert(0, str(ROOT / "benchmarks"))

from judge.stage_calls import StageCalls  # noqa: E402
from judge.stages import budget  # noqa: E402
from judge.stages.evaluation import Evaluator  # noqa: E402
from judge.stages.timing.group import measure_group  # noqa: E402
from judge.stages.timing.stage import measure  # noqa: E402
from judge.targets import load_target  # noqa: E402
from judge.verdicts import timing_verdict  # noqa: E402
import gpumode_parity  # noqa: E402


def kernels(target, work: Path, copies: int, slow: float) -> list[tuple[str, Path]]:
    source = target.kernel_source()
    made = [(f"identical-{i + 1}", target.assemble(work / f"identical-{i + 1}", source)) for i in range(copies)]
    if slow:
        slowed = source + gpumode_parity.SLOWED_VARIANT.format(fraction=slow)
        made.append((f"slowed-{slow:g}", target.assemble(work / "slowed", slowed)))
    return made


def words(result) -> str:
    if result.status != "passed":
        return f"{result.status}: {result.summary[:80]}"
    outcome, _ = timing_verdict(result)
    return f"{outcome.value} {result.summary.split(' over ')[0].removeprefix('geomean ')}, {result.detail.pairs} pairs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--copies", type=int, default=2)
    parser.add_argument("--slow", type=float, default=0.1)
    args = parser.parse_args()
    target = load_target(args.target)
    with tempfile.TemporaryDirectory(prefix="judge-groups-") as scratch:
        work = Path(scratch)
        base = target.assemble(work / "base", target.kernel_source())
        made = kernels(target, work, args.copies, args.slow)
        with Evaluator(target, work / ".round", base_dir=base) as evaluator:
            checked = StageCalls().check_base(evaluator, base)
            if not checked.passed:
                sys.exit(f"the base failed its check: {checked.summary}")
            sizes, _ = budget.benchmark_sizes(target, evaluator.bytes_of)
            # the plan a round makes for its groups, which the pairs then run on too (the same sets and copies)
            size = budget.kernels_per_group(evaluator.memory_plan(len(made)), sizes)
            began = time.monotonic()
            paired = [measure(evaluator, path) for _, path in made]
            pairs_s = time.monotonic() - began
            began = time.monotonic()
            grouped = measure_group(evaluator, [path for _, path in made])
            group_s = time.monotonic() - began
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"{target.name} on {platform.node()}, {when}: {len(made)} kernels against the base; the memory plan "
          f"holds {size} kernel{'s' if size != 1 else ''} a group\n")
    print("| kernel | in pairs of its own | in process groups |\n|---|---|---|")
    for (name, _), one, other in zip(made, paired, grouped):
        print(f"| {name} | {words(one)} | {words(other)} |")
    print(f"| **seconds, all kernels** | {pairs_s:.1f} | {group_s:.1f} |")


if __name__ == "__main__":
    main()
