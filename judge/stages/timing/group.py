"""Several kernels timed against the base at once, in process groups: each group a fresh runner for the base and one
for each kernel still undecided, taking turns on every benchmark as a pair's two do (judge.stages.timing.turns), so
that the base's calls of one group serve every kernel in it. Each kernel's verdict reads the group as its own pair
with the base (GroupResult.of): the statistics, the audits and the verdict are a pair's, and a group of one is a
pair (judge.stages.timing.stage.measure).

What a group costs an attacker (docs/architecture.md, "Process groups"): a kernel cannot reach another's memory,
outbox or process, as in a pair. What it could do to a rival is fail the rival's runner (the device's memory taken,
a stray process left running): a kernel whose runner stops in a group of several (a crash, a call that raised, no
room) is therefore timed again alone, in pairs of its own, before its failure counts. A wrong output or a runner's
own tampering is that kernel's verdict at once (no rival reaches another's memory or process). Either way the group
it happened in is left out for the others, whose turns it may have disturbed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from .. import budget
from ...errors import JudgeError
from ...noise import MAX_PAIRS, Floor, default_floor, enough_pairs
from ..evaluation import Evaluator
from ..progress import Progress, quiet
from ..result import StageResult, not_run
from . import stage
from .summary import GroupResult, PairResult, pair_geomeans, strays_of


def measure_group(evaluator: Evaluator, workspaces: list[Path], *, budget_s: float | None = None,
                  timeout_s: float | None = None, floor: Floor | None = None, nonce: int | None = None,
                  progress: list[Progress] | None = None) -> list[StageResult]:
    """Time each kernel assembled in `workspaces` against the round's base, in process groups until each one's
    comparison is decided (its pairs by a pair's rule), one StageResult per workspace in their order. The limit and
    the budget are a pair's, times the pairs a group stands for ((kernels + 1) / 2). One workspace is a pair's
    stage (stage.measure)."""
    progress = progress or [quiet] * len(workspaces)
    size = group_size(evaluator, len(workspaces))
    if size < len(workspaces):  # the device holds runners for `size` kernels beside the base's: groups in turn
        results = []
        for at in range(0, len(workspaces), size):
            results += measure_group(evaluator, workspaces[at:at + size], budget_s=budget_s, timeout_s=timeout_s,
                                     floor=floor, nonce=nonce, progress=progress[at:at + size])
        return results
    if len(workspaces) == 1:
        return [stage.measure(evaluator, workspaces[0], budget_s=budget_s, timeout_s=timeout_s, floor=floor,
                              nonce=nonce, progress=progress[0])]
    target = evaluator.target
    if evaluator.timing_gate is not None:
        evaluator.discard_prebound()
        return [not_run(stage.STAGE, evaluator.timing_gate) for _ in workspaces]
    floor = floor or default_floor(target)
    nonce = evaluator.nonce() if nonce is None else nonce
    limit, budget = stage.limit_and_budget(target, budget_s, timeout_s)
    names = {f"cand{i}": Path(w) for i, w in enumerate(workspaces)}
    share = (len(names) + 1) / 2
    started = time.monotonic()
    deadline = started + limit * share
    evaluator.discard_prebound(keep=(*names.values(), evaluator.base_dir))
    run = _GroupRun(evaluator, names, floor, nonce, deadline, dict(zip(names, progress)), started)
    try:
        while run.active and run.groups < MAX_PAIRS + len(names):
            run.one_group(lambda: (time.monotonic() - started) / share, budget, limit)
    finally:
        evaluator.discard_prebound()
    results = {}
    for who, workspace in names.items():
        if who in run.solo:  # failed beside rivals: its failure counts only once it fails alone
            results[who] = stage.measure(evaluator, workspace, budget_s=budget_s, timeout_s=timeout_s, floor=floor,
                                         nonce=nonce, progress=run.progress[who])
        else:
            results[who] = run.done.get(who) or stage.finish(evaluator, run.pairs[who], floor, run.facts,
                                                             time.monotonic() - started)
    return [results[who] for who in names]


def group_size(evaluator: Evaluator, wanted: int) -> int:
    """How many of `wanted` kernels one group times: as many as the memory plan has room for (budget.kernels_per_group);
    one where the plan cannot be made (the pair's stage then says why)."""
    if wanted == 1:
        return 1
    try:
        plan = evaluator.memory_plan()
    except JudgeError:
        return 1
    sizes, _ = budget.benchmark_sizes(evaluator.target, evaluator.bytes_of)
    return min(wanted, budget.kernels_per_group(plan, sizes))


class _GroupRun:
    """The groups of one measure_group: who is still timed, each one's pairs as read from the groups, and who is
    done (a StageResult) or is to be timed alone."""

    def __init__(self, evaluator: Evaluator, names: dict[str, Path], floor: Floor, nonce: int, deadline: float,
                 progress: dict[str, Progress], started: float):
        self.evaluator, self.floor, self.nonce, self.deadline = evaluator, floor, nonce, deadline
        self.progress, self.started = progress, started
        self.facts = None if evaluator.target.on_cpu else evaluator.ask("facts")
        self.active = dict(names)
        self.pairs: dict[str, list[PairResult]] = {who: [] for who in names}
        self.done: dict[str, StageResult] = {}
        self.solo: list[str] = []
        self.groups = 0
        self.base_calls = evaluator.base_calls

    def one_group(self, elapsed: Callable[[], float], budget: float, limit: float) -> None:
        """Time one group of the kernels still active and read it: each one's pair, or its failure."""
        index_of = self.groups

        def starts(_: int, index: int) -> None:
            for who in self.active:
                stage.benchmark_said(self.progress[who], self.evaluator.target, len(self.pairs[who]) + 1, index,
                                     self.started)

        known = stage.known_calls(self._last_pairs(), self.base_calls)
        self.groups += 1
        try:
            group = stage.time_group(self.evaluator, self.active, index_of, self.nonce, self.deadline, starts, known)
        except stage.Stopped as stop:
            self._stopped(stop)
            return
        self._read(group, elapsed, budget, limit)

    def _last_pairs(self) -> list[PairResult]:
        lasts = [pairs[-1] for pairs in self.pairs.values() if pairs]
        return lasts[-1:] if lasts else []

    def _stopped(self, stop: "stage.Stopped") -> None:
        """A runner could not go on: the base's stops every kernel's timing as a pair's would, and so does the last
        kernel's, which had no rival; a kernel's beside others is timed again alone (a rival may have taken what it
        needed), and this group counts for no one."""
        if stop.who == "base" or stop.who not in self.active or len(self.active) == 1:
            failed = stage.stopped_result(stop, time.monotonic() - self.started)
            for who in list(self.active):
                self.done[who] = failed
            self.active.clear()
            return
        del self.active[stop.who]
        self.solo.append(stop.who)

    def _read(self, group: GroupResult, elapsed: Callable[[], float], budget: float, limit: float) -> None:
        """Each active kernel's pair from `group`. A kernel whose output the oracle found wrong (no rival reaches
        another's memory) or whose own runner showed tampering has its verdict from its pairs, and the group is left
        out for the others."""
        stage.note_base_calls(self.base_calls, group)
        failed = [group.failed_who] if group.failure and group.failed_who not in (None, "base") else []
        tampering = [who for who in self.active if group.findings.get(who) or strays_of(group, who)]
        if (failed or tampering) and not group.findings.get("base"):
            for who in dict.fromkeys(failed + tampering):
                self.pairs[who].append(group.of(who))
                self.done[who] = stage.finish(self.evaluator, self.pairs[who], self.floor, self.facts,
                                              time.monotonic() - self.started)
                del self.active[who]
            return
        for who in list(self.active):
            self.pairs[who].append(group.of(who))
            pairs = self.pairs[who]
            last = pairs[-1]
            if last.failure or last.findings or last.base_findings:
                del self.active[who]
            elif enough_pairs(pair_geomeans(pairs, self.evaluator.target), self.floor, elapsed(), budget, False,
                              limit, max(pair.seconds for pair in pairs)):
                del self.active[who]

