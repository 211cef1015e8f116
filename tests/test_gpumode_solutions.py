"""GPU MODE's own pmpp_v2 problems, unchanged, with their solutions/: every wrong/ solution is incorrect and
every correct/ one is measured against the problem's submission.py (needs a GPU and a checkout of
gpu-mode/reference-kernels: JUDGE_GPUMODE_PROBLEMS=.../problems)."""

import os
from pathlib import Path

import pytest

from judge.stages.evaluation import Evaluator
from judge.workspaces import fresh
from judge.stage_calls import StageCalls
from judge.targets import load_target

GPUMODE = os.environ.get("JUDGE_GPUMODE_PROBLEMS")
PROBLEMS = Path(GPUMODE) / "pmpp_v2" if GPUMODE else None


def solutions() -> list[tuple[str, str, str]]:
    if PROBLEMS is None or not PROBLEMS.is_dir():
        return []
    return [(problem.name, kind, path.name)
            for problem in sorted(PROBLEMS.iterdir()) if (problem / "solutions").is_dir()
            for kind in ("correct", "wrong")
            for path in sorted((problem / "solutions" / kind).glob("*.py"))]


@pytest.mark.gpu
@pytest.mark.skipif(not GPUMODE, reason="set JUDGE_GPUMODE_PROBLEMS to a GPU MODE problems/ directory")
@pytest.mark.parametrize("problem,kind,name", solutions())
def test_solution_gets_its_verdict(problem, kind, name, tmp_path):
    target = load_target(PROBLEMS / problem)
    source = (PROBLEMS / problem / "solutions" / kind / name).read_text()
    base = target.assemble(tmp_path / "base", target.kernel_source())
    workspace = target.assemble(tmp_path / "solution", source)
    with Evaluator(target, fresh(tmp_path / "round"), base_dir=base) as evaluator:
        stages = StageCalls().evaluate(evaluator, workspace, budget_s=2.0 * len(target.benchmarks))
    check = stages[0]
    print(f"{problem}/{kind}/{name}: correctness {check.status}: {check.summary}")
    if kind == "wrong":
        assert check.status == "failed", check.summary + check.log_tail
        return
    failed = [c for c in check.detail.cases if not c.passed]
    if check.status == "failed" and all(c.reason.startswith("check_implementation:") for c in failed):
        # The problem's own checker rejects its own "correct" solution (conv2d's allows TF32 in cuDNN while
        # its reference forbids it): judge reports what the problem says.
        print("  rejected by the problem's own check_implementation")
        return
    assert check.status == "passed", check.summary + check.log_tail
    timing = stages[1]
    print(f"  timing {timing.status}: {timing.summary}")
    assert timing.status == "passed", timing.summary + timing.log_tail
