"""The stage functions a round calls (judge.rounds), one object the tests replace: each loads what it runs (torch,
the compiler, the oracle's code) only when it is called."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

from .stages.progress import Progress, quiet
from .stages.result import StageResult
from .targets import Target
from .workspaces import fresh

if TYPE_CHECKING:
    from .noise import Floor
    from .stages.evaluation import Evaluator


class StageCalls:
    """The stage functions a round calls; tests substitute fakes, the real ones load torch lazily. `groups`: whether
    a local round times its candidates together in process groups (check, then time_group) rather than each in
    turn (evaluate)."""

    groups = True

    def probe(self):
        from .devices import probed  # the same cached probe the correctness and timing stages gate on

        return probed()

    def arch_gate(self, arch: str, facts) -> Optional[str]:
        from .devices import arch_gate

        return arch_gate(arch, facts)

    def machine(self, target: Target, on_event) -> tuple[Optional[str], Optional[dict]]:
        """Why the kernel stages cannot run here (None: they can) and the device they run on: this machine's CPU for
        a CPU target (no GPU is looked for), else the GPU the probe finds."""
        from .machine import facts_dict, host_facts

        if target.on_cpu:
            device = host_facts()
            on_event("cpu", target=target.name, device=device)
            return None, device
        on_event("probe", target=target.name)
        facts = self.probe()
        return self.arch_gate(target.arch, facts), facts_dict(facts)

    def compile_many(self, jobs, *, cache_dir, workers, progress) -> list[StageResult]:
        from .stages.compile.stage import compile_many

        return compile_many(jobs, cache_dir=cache_dir, workers=workers, progress=progress)

    def compile_workers(self, target: Target, root: Path, cores, spares: int, jobs: int):
        """Warm compile children for `jobs` candidates, pinned to `cores` (judge.stages.compile.workers)."""
        from .stages.compile.workers import CompileWorkers

        return CompileWorkers(root, cores=cores, spares=spares, jobs=jobs)

    def compile_one(self, target: Target, workspace: Path, *, cache_dir, workers) -> StageResult:
        from .stages.compile.stage import run_compile

        return run_compile(target, workspace, cache_dir=cache_dir, workers=workers)

    def static_check(self, target: Target, workspace: Path, compile_stage: StageResult) -> StageResult:
        from .stages.static.stage import run_static

        return run_static(target, workspace, compile_stage)

    def open_round(self, target: Target, root: Path, base_dir: Path, fork_spares: Optional[bool] = None) -> Evaluator:
        """The round's trusted state (judge.stages.evaluation.Evaluator): secret seeds, oracle, base runner."""
        from .stages.evaluation import Evaluator

        return Evaluator(target, fresh(root / ".judge-round"), base_dir=base_dir, fork_spares=fork_spares)

    def check_base(self, evaluator: Evaluator, base_dir: Path, progress: Optional[Progress] = None,
                   timed_next: Optional[Path] = None) -> StageResult:
        """The base's check; `timed_next`: the workspace timed against it next (the control), bound meanwhile."""
        from .stages.check import check_base

        return check_base(evaluator, base_dir, progress=progress or quiet, timed_next=timed_next)

    def evaluate(self, evaluator: Evaluator, workspace: Path, budget_s: Optional[float], floor: Optional[Floor] = None,
                 progress: Optional[Progress] = None, control: bool = False, serves: int = 0) -> list[StageResult]:
        """Correctness, then timing against the base in process pairs, against the noise floor `floor` (a
        `control` by noise.enough_pairs' rule, for `serves` candidates); `progress` hears of each case and timed
        benchmark as it starts."""
        from .dispatch import kernel_stages

        return kernel_stages(evaluator, workspace, budget_s, floor, progress or quiet, control, serves)

    def check(self, evaluator: Evaluator, workspace: Path, progress: Optional[Progress] = None) -> StageResult:
        """A candidate's correctness alone, its timing to come in a process group (time_group)."""
        from .stages.check import check

        return check(evaluator, workspace, progress=progress or quiet)

    def group_size(self, evaluator: Evaluator, wanted: int) -> int:
        """How many of `wanted` kernels one process group times beside the base (the memory plan's room)."""
        from .stages.timing.group import group_size

        return group_size(evaluator, wanted)

    def time_group(self, evaluator: Evaluator, workspaces: list[Path], budget_s: Optional[float],
                   floor: Optional[Floor] = None, progress: Optional[list[Progress]] = None,
                   control=None) -> list[StageResult]:
        """The kernels in `workspaces` timed against the base together, in process groups, each against the noise
        floor `floor` (the one its `control`, a stages.timing.group.GroupControl timed in the first group, answers);
        one timing result per workspace."""
        from .stages.timing.group import measure_group

        return measure_group(evaluator, workspaces, budget_s=budget_s, floor=floor, progress=progress,
                             control=control)
