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
    others = len(held) - 1
    for job, _, _ in held:
        run.on_event("stage", proposal=job.name,
                     stage=f"timing, beside {others} other kernel{'s' if others != 1 else ''} in process groups"
                     if others else "timing")
    started = time.monotonic()
    timed = stages.time_group(run.open_evaluator(), [job.workspace for job, _, _ in held],
                              run.settings.timing_budget_s, run.floor,
                              [progress_of(run.on_event, job.name) for job, _, _ in held])
    group_s = time.monotonic() - started
    for (job, checked, check_s), timing in zip(held, timed):
        run.on_event("evaluated", proposal=job.name, seconds=round(check_s + group_s, 1))
        yield job, [checked, timing], None
