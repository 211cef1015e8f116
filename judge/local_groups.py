"""A local dispatch's candidates in process groups: each checked as its compile ends, and those that pass timed
together once every candidate of the run is checked, the base's calls of each group serving every kernel in it
(judge.stages.timing.group). A candidate that fails its check is recorded at once; a control is timed as before,
alone, since its floor is what the others' verdicts clear."""

from __future__ import annotations

import time
from typing import Iterable, Iterator, Optional

from .stages.job import Job
from .stages.result import StageResult


def evaluate_in_groups(run, jobs: Iterable[Job], progress_of) -> Iterator[tuple[Job, list[StageResult], Optional[dict]]]:
    """Each job's kernel stages, in the order they end: a failed check's at once, the timed ones after their group.
    `progress_of(on_event, name)` makes a job's progress (judge.dispatch.progress_of)."""
    stages = run.settings.stages
    held: list[tuple[Job, StageResult, float]] = []
    for job in jobs:
        run.on_event("stage", proposal=job.name, stage="correctness")
        started = time.monotonic()
        checked = stages.check(run.open_evaluator(), job.workspace, progress_of(run.on_event, job.name))
        if not checked.passed:
            run.on_event("evaluated", proposal=job.name, seconds=round(time.monotonic() - started, 1))
            yield job, [checked], None
            continue
        held.append((job, checked, time.monotonic() - started))
    if not held:
        return
    size = stages.group_size(run.open_evaluator(), len(held))
    for job, _, _ in held:
        run.on_event("stage", proposal=job.name, stage=timing_words(size, len(held)))
    started = time.monotonic()
    timed = stages.time_group(run.open_evaluator(), [job.workspace for job, _, _ in held],
                              run.settings.timing_budget_s, run.floor,
                              [progress_of(run.on_event, job.name) for job, _, _ in held])
    group_s = time.monotonic() - started
    for (job, checked, check_s), timing in zip(held, timed):
        run.on_event("evaluated", proposal=job.name, seconds=round(check_s + group_s, 1))
        yield job, [checked, timing], None


def timing_words(size: int, kernels: int) -> str:
    """What a held candidate's timing is, as its `stage` event says it: `kernels` timed in process groups of at most
    `size` beside one base (the memory plan's room: group.group_size), or in pairs, saying why where there were
    others to group."""
    if kernels == 1:
        return "timing"
    if size >= kernels:
        return f"timing, in one process group of {kernels} kernels beside the base"
    if size > 1:
        return f"timing, {kernels} kernels in process groups of {size} beside the base"
    return "timing, in process pairs (the device has room for no second kernel's runner beside the base's)"
