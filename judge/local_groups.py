"""A local dispatch's candidates in process groups: each checked as its compile ends, and those that pass timed
together once every candidate of the run is checked (or once the next compile keeps them waiting longer than a
group of its own would cost), the base's calls of each group serving every kernel in it (judge.stages.timing.group).
A candidate that fails its check is recorded at once. The round's control, where it is timed in this run, is a
kernel of the first group: it is recorded, and the floor the others' verdicts clear is read,
as soon as its own comparison is done (judge.control.record_control), before any candidate's verdict."""

from __future__ import annotations

import time
from typing import Callable, Iterable, Iterator, Optional

from .control import ControlJob, announce_floor, floor_with, record_control
from .ledger import now
from .noise import MIN_PAIRS
from .stages.job import Job
from .stages.result import StageResult
from .stages.timing.group import GroupControl


# A group's `stage` words where an earlier group of the round began before its candidates were checked.
LATER_WORDS = ", after the candidates whose compiles ended first"


def evaluate_in_groups(run, jobs: Iterable[Job], progress_of, control: Optional[ControlJob] = None,
                       wait_next: Optional[Callable[[float], bool]] = None
                       ) -> Iterator[tuple[Job, list[StageResult], Optional[dict]]]:
    """Each job's kernel stages, in the order they end: a failed check's at once, the timed ones after their group.
    `progress_of(on_event, name)` makes a job's progress (judge.dispatch.progress_of); `control`, the round's control
    to time in the first group (it is recorded here, not yielded). `wait_next(seconds)`, where given, says whether
    another job comes within that long (judge.stages.compile.pipeline.ReadyJobs): the candidates checked so far wait
    for the next one, and are timed together at once where it does not come in time, later ones in groups of their
    own, so that a slow compile (31 s of one vectoradd_py solution's `load_inline`) leaves no device idle. They wait
    MIN_PAIRS checks' time (their checks' mean): a kernel timed in a group of its own costs at least MIN_PAIRS pairs,
    each at least one call of every benchmark in two runners, so the wait never costs more than the group it saves."""
    held: list[tuple[Job, StageResult, float]] = []
    later = False  # whether a group of this round was timed already: the later ones' `stage` says why they wait
    for job in jobs:
        run.on_event("stage", proposal=job.name, stage="correctness")
        started = time.monotonic()
        checked = run.settings.stages.check(run.open_evaluator(), job.workspace, progress_of(run.on_event, job.name))
        if checked.passed:
            held.append((job, checked, time.monotonic() - started))
        else:
            run.on_event("evaluated", proposal=job.name, seconds=round(time.monotonic() - started, 1))
            yield job, [checked], None
        # after a failed check too: the next job may be the slow compile (a wrong variant checked last before a
        # vectoradd_py solution's 29 s load_inline held three checked candidates 15 s, H200, 2026-12-01)
        if held and wait_next is not None and not wait_next(next_compile_wait_s([s for _, _, s in held])):
            yield from _time_held(run, held, progress_of, control, later)
            held, control, later = [], None, True
    if held or control is not None:
        yield from _time_held(run, held, progress_of, control, later)


def next_compile_wait_s(check_seconds: list[float]) -> float:
    """How long candidates checked in `check_seconds` wait for the next compile before they are timed without it:
    MIN_PAIRS times their mean check (evaluate_in_groups says why; judge.ray_dispatch waits the same)."""
    return MIN_PAIRS * sum(check_seconds) / len(check_seconds)


def _time_held(run, held: list[tuple[Job, StageResult, float]], progress_of, control: Optional[ControlJob],
               later: bool = False) -> Iterator[tuple[Job, list[StageResult], Optional[dict]]]:
    """The checked candidates `held` timed together in process groups, the `control` in the first one, where given;
    `later`: after others of the round, whose compiles ended first."""
    stages = run.settings.stages
    kernels = len(held) + (control is not None)
    size = stages.group_size(run.open_evaluator(), kernels)
    words = timing_words(size, kernels, control is not None) + (LATER_WORDS if later else "")
    for job, _, _ in held:
        run.on_event("stage", proposal=job.name, stage=words)
    started = time.monotonic()
    timed = stages.time_group(run.open_evaluator(), [job.workspace for job, _, _ in held],
                              run.settings.timing_budget_s, run.floor,
                              [progress_of(run.on_event, job.name) for job, _, _ in held],
                              control and _group_control(run, control, progress_of, size > 1))
    group_s = time.monotonic() - started
    for (job, checked, check_s), timing in zip(held, timed):
        run.on_event("evaluated", proposal=job.name, seconds=round(check_s + group_s, 1))
        yield job, [checked, timing], None


def _group_control(run, control: ControlJob, progress_of, grouped: bool = True) -> GroupControl:
    """The round's control as a kernel of the candidates' first group (`grouped`; else timed alone before them, the
    device having room for no second kernel's runner): recorded, and the round's floor read and announced, the
    moment its timing is final."""
    control.started = now()
    run.on_event("stage", proposal=control.job.name, stage="the base against an identical copy of itself, " + (
        "in the candidates' process group" if grouped else "before the candidates"))
    started = time.monotonic()

    def floor_after(result: StageResult):
        run.on_event("evaluated", proposal=control.job.name, seconds=round(time.monotonic() - started, 1))
        record_control(run, control, [result])
        return announce_floor(run)

    return GroupControl(control.job.workspace, control.job.serves, floor_after,
                        progress_of(run.on_event, control.job.name), lambda logs: floor_with(run, logs))


def timing_words(size: int, kernels: int, control: bool = False) -> str:
    """What a held candidate's timing is, as its `stage` event says it: `kernels` (the `control` among them) timed in
    process groups of at most `size` beside one base (the memory plan's room: group.group_size), or in pairs, saying
    why where there were others to group."""
    among = " (the round's control among them)" if control else ""
    if kernels == 1:
        return "timing"
    if size >= kernels:
        return f"timing, in one process group of {kernels} kernels{among} beside the base"
    if size > 1:
        return f"timing, {kernels} kernels{among} in process groups of {size} beside the base"
    return "timing, in process pairs (the device has room for no second kernel's runner beside the base's)"
