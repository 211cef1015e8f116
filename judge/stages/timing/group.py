"""Several kernels timed against the base at once, in process groups: each group a fresh runner for the base and one
for each kernel still undecided, taking turns on every benchmark as a pair's two do (judge.stages.timing.turns), so
that the base's calls of one group serve every kernel in it. Each kernel's verdict reads the group as its own pair
with the base (GroupResult.of): the statistics, the audits and the verdict are a pair's, and a group of one is a
pair (judge.stages.timing.stage.measure).

The round's A/A control may be one of the group's kernels (GroupControl): it stops by the controls' rule, and no other
kernel leaves the groups by its statistics before it has, since the floor their verdicts clear is read only once the
control's pairs are in (GroupControl.floor_after).

What a group costs an attacker (docs/architecture.md, "Process groups"): a kernel cannot reach another's memory,
outbox or process, as in a pair. What it could do to a rival is fail the rival's runner (the device's memory taken,
a stray process left running): a kernel whose runner stops in a group of several (a crash, a call that raised, no
room) is therefore timed again alone, in pairs of its own, before its failure counts. A wrong output or a runner's
own tampering is that kernel's verdict at once (no rival reaches another's memory or process). Either way the group
it happened in is left out for the others, whose turns it may have disturbed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import budget
from ...errors import JudgeError
from ...noise import MAX_PAIRS, MIN_PAIRS, Floor, default_floor, enough_pairs, floor_from
from ..evaluation import Evaluator
from ..progress import Progress, quiet
from ..result import StageResult, not_run
from . import stage
from .summary import GroupResult, PairResult, pair_geomeans, strays_of

CONTROL = "control"  # the control's name among a group's members


@dataclass
class GroupControl:
    """The round's A/A control, timed in the first of the candidates' groups: the base assembled in `workspace`,
    stopped by the controls' rule for the `serves` verdicts its floor serves (noise.enough_pairs). `floor_after` takes
    its timing result as soon as it is final (the caller records it) and answers the floor the others' verdicts
    clear; `preview`, where given, says what that floor would be from the control's pairs so far: once every other
    kernel is decided against it, the control stops too (its further pairs would buy no verdict)."""

    workspace: Path
    serves: int
    floor_after: Callable[[StageResult], Floor]
    progress: Progress = quiet
    preview: Callable[[list[float]], Floor] | None = None  # the floor its pairs' log ratios so far would set


def measure_group(evaluator: Evaluator, workspaces: list[Path], *, budget_s: float | None = None,
                  timeout_s: float | None = None, floor: Floor | None = None, nonce: int | None = None,
                  progress: list[Progress] | None = None, control: GroupControl | None = None) -> list[StageResult]:
    """Time each kernel assembled in `workspaces` against the round's base, in process groups until each one's
    comparison is decided (its pairs by a pair's rule), one StageResult per workspace in their order; the `control`,
    where given, in the first group, its result handed to its floor_after. The limit and the budget are a pair's,
    times the pairs a group stands for ((kernels + 1) / 2). One kernel is a pair's stage (stage.measure)."""
    progress = progress or [quiet] * len(workspaces)
    floor = floor or default_floor(evaluator.target)
    size = group_size(evaluator, len(workspaces) + (control is not None))
    results: list[StageResult] = []
    if control is not None and (size == 1 or not workspaces):  # no room beside it (or no one): timed alone, first
        floor = control.floor_after(stage.measure(evaluator, control.workspace, budget_s=budget_s, timeout_s=timeout_s,
                                                  floor=floor, nonce=nonce, progress=control.progress, control=True,
                                                  serves=control.serves))
        control = None
    at = 0
    while at < len(workspaces):
        batch = size - (control is not None)
        part, floor = _measure_batch(evaluator, workspaces[at:at + batch], progress[at:at + batch], control,
                                     budget_s=budget_s, timeout_s=timeout_s, floor=floor, nonce=nonce)
        results += part
        at, control = at + batch, None
    return results


def _measure_batch(evaluator: Evaluator, workspaces: list[Path], progress: list[Progress],
                   control: GroupControl | None, *, budget_s: float | None, timeout_s: float | None, floor: Floor,
                   nonce: int | None) -> tuple[list[StageResult], Floor]:
    """The kernels of one group (and the control, where given) timed until each is decided: their results, and the
    floor their verdicts cleared."""
    if len(workspaces) == 1 and control is None:
        return [stage.measure(evaluator, workspaces[0], budget_s=budget_s, timeout_s=timeout_s, floor=floor,
                              nonce=nonce, progress=progress[0])], floor
    if evaluator.timing_gate is not None and control is None:
        evaluator.discard_prebound()
        return [not_run(stage.STAGE, evaluator.timing_gate) for _ in workspaces], floor
    nonce = evaluator.nonce() if nonce is None else nonce
    limit, budget = stage.limit_and_budget(evaluator.target, budget_s, timeout_s)
    names = {f"cand{i}": Path(w) for i, w in enumerate(workspaces)}
    said = dict(zip(names, progress))
    if control is not None:
        names, said = {CONTROL: Path(control.workspace), **names}, {CONTROL: control.progress, **said}
    share = (len(names) + 1) / 2
    started = time.monotonic()
    evaluator.discard_prebound(keep=(*names.values(), evaluator.base_dir))
    run = _GroupRun(evaluator, names, floor, nonce, started + limit * share, said, started, control,
                    (budget_s, timeout_s), share)
    try:
        while run.active and run.groups < MAX_PAIRS + len(names):
            run.one_group(budget, limit)
    finally:
        evaluator.discard_prebound()
    run.settle_control()
    results = {}
    for who, workspace in names.items():
        if who in run.solo:  # failed beside rivals: its failure counts only once it fails alone
            results[who] = stage.measure(evaluator, workspace, budget_s=budget_s, timeout_s=timeout_s, floor=run.floor,
                                         nonce=nonce, progress=run.progress[who])
        else:
            results[who] = run.done.get(who) or stage.finish(evaluator, run.pairs[who], run.floor, run.facts,
                                                             time.monotonic() - started)
    return [results[who] for who in names if who != CONTROL], run.floor


def group_size(evaluator: Evaluator, wanted: int) -> int:
    """How many of `wanted` kernels one group times: as many as the memory plan has room for (budget.kernels_per_group;
    a plan made here is made for groups of `wanted`); one where the plan cannot be made (the pair's stage then says
    why)."""
    if wanted == 1:
        return 1
    try:
        plan = evaluator.memory_plan(wanted)
    except JudgeError:
        return 1
    sizes, _ = budget.benchmark_sizes(evaluator.target, evaluator.bytes_of)
    return min(wanted, budget.kernels_per_group(plan, sizes))


class _GroupRun:
    """The groups of one batch: who is still timed, each one's pairs as read from the groups, who is done (a
    StageResult) or is to be timed alone, and the floor the verdicts clear (the control's, once it is in)."""

    def __init__(self, evaluator: Evaluator, names: dict[str, Path], floor: Floor, nonce: int, deadline: float,
                 progress: dict[str, Progress], started: float, control: GroupControl | None,
                 limits: tuple[float | None, float | None], share: float):
        self.evaluator, self.floor, self.nonce, self.deadline = evaluator, floor, nonce, deadline
        self.progress, self.started, self.control, self.limits = progress, started, control, limits
        self.share = share  # the pairs a group stands for: its seconds, read as a pair's
        self.facts = None if evaluator.target.on_cpu else evaluator.ask("facts")
        self.active = dict(names)
        self.pairs: dict[str, list[PairResult]] = {who: [] for who in names}
        self.done: dict[str, StageResult] = {}
        self.solo: list[str] = []
        self.groups = 0
        self.base_calls = evaluator.base_calls

    def one_group(self, budget: float, limit: float) -> None:
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
            self._stopped(stop, limit)
            return
        self._read(group, budget, limit)

    def _last_pairs(self) -> list[PairResult]:
        lasts = [pairs[-1] for pairs in self.pairs.values() if pairs]
        return lasts[-1:] if lasts else []

    def _stopped(self, stop: "stage.Stopped", limit: float) -> None:
        """A runner could not go on: the base's stops every kernel's timing as a pair's would, and so does the last
        kernel's, which had no rival; a kernel's beside others is timed again alone (a rival may have taken what it
        needed; the control at once, since the others' floor waits on it), and this group counts for no one."""
        if stop.who == "base" or stop.who not in self.active or len(self.active) == 1:
            failed = stage.stopped_result(stop, time.monotonic() - self.started)
            for who in list(self.active):
                self.done[who] = failed
            if CONTROL in self.active and stop.status == "timed-out":  # as a control timed alone says it
                gate = stage.out_of_time(limit, len(self.pairs[CONTROL]) + 1, stop.message)
                self.evaluator.timing_gate = gate
                self.done[CONTROL] = stage.stopped_result(stop, time.monotonic() - self.started, gate)
            self.active.clear()
            self.settle_control()
            return
        del self.active[stop.who]
        if stop.who != CONTROL:
            self.solo.append(stop.who)
            return
        budget_s, timeout_s = self.limits
        self.done[CONTROL] = stage.measure(self.evaluator, self.control.workspace, budget_s=budget_s,
                                           timeout_s=timeout_s, floor=self.floor, nonce=self.nonce,
                                           progress=self.control.progress, control=True, serves=self.control.serves)
        self.settle_control()

    def _read(self, group: GroupResult, budget: float, limit: float) -> None:
        """Each active kernel's pair from `group`. A kernel whose output the oracle found wrong (no rival reaches
        another's memory) or whose own runner showed tampering has its verdict from its pairs, and the group is left
        out for the others. The control is read first: the others leave by their statistics only once it is done."""
        stage.note_base_calls(self.base_calls, group)
        failed = [group.failed_who] if group.failure and group.failed_who not in (None, "base") else []
        tampering = [who for who in self.active if group.findings.get(who) or strays_of(group, who)]
        if (failed or tampering) and not group.findings.get("base"):
            for who in dict.fromkeys(failed + tampering):
                self.pairs[who].append(group.of(who))
                self._finish(who)
            return
        for who in self.active:
            self.pairs[who].append(group.of(who))
        elapsed = (time.monotonic() - self.started) / self.share
        for who in sorted(self.active, key=lambda name: name != CONTROL):
            pairs = self.pairs[who]
            last, logs = pairs[-1], pair_geomeans(pairs, self.evaluator.target)
            longest = max(pair.seconds for pair in pairs) / self.share
            stops = bool(last.failure or last.findings or last.base_findings)
            if who == CONTROL:
                if stops or enough_pairs(logs, self.floor, elapsed, budget, True, limit, longest, self.control.serves) \
                        or self._others_decided(logs, elapsed, budget, limit):
                    self._finish(who)
            elif stops or (CONTROL not in self.active and enough_pairs(logs, self.floor, elapsed, budget, False,
                                                                       limit, longest)):
                del self.active[who]

    def _others_decided(self, logs: list[float], elapsed: float, budget: float, limit: float) -> bool:
        """Whether every other active kernel is decided against the floor the control's pairs so far would set (from
        MIN_PAIRS on, neither that floor nor the control's own past the ceiling): the control's rule buys its further
        pairs for the verdicts its floor serves, and there are none left to serve, while every further pair of it is
        a group of them all."""
        if self.control.preview is None or len(logs) < MIN_PAIRS:
            return False
        floor = self.control.preview(logs)
        if floor.too_wide or floor_from([logs], floor.min_effect, MIN_PAIRS).too_wide:
            return False
        target = self.evaluator.target
        return all(enough_pairs(pair_geomeans(self.pairs[who], target), floor, elapsed, budget, False, limit)
                   for who in self.active if who != CONTROL)

    def _finish(self, who: str) -> None:
        """`who`'s verdict from its pairs now (the control's floor then read: settle_control)."""
        self.done[who] = stage.finish(self.evaluator, self.pairs[who], self.floor, self.facts,
                                      time.monotonic() - self.started)
        self.active.pop(who, None)
        if who == CONTROL:
            self.settle_control()

    def settle_control(self) -> None:
        """Hand the control's result over once, as soon as it is final, and take the floor it answers; a control
        still undecided when the groups ended (their number's bound) is read from its pairs as they are."""
        if self.control is None:
            return
        if CONTROL not in self.done:
            self._finish(CONTROL)  # which hands it over
            return
        control, self.control = self.control, None
        self.floor = control.floor_after(self.done[CONTROL])
