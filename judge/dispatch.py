"""Where a round's kernel-running stages (correctness, timing) run: on this machine (LocalDispatch), or on Ray
(judge.ray_dispatch), candidates spread over actors. What both share: a kernel's stages in one call (kernel_stages),
the words and progress a round says of them, and how the base's check comes back (BaseCheck).
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple, Optional

from .errors import JudgeError
from .stages.job import Job
from .stages.progress import Progress, quiet
from .stages.result import StageResult, kernel_stages_not_run


def parse_gpus(text: str) -> list[int]:
    """`--gpus`: 'all' (every GPU nvidia-smi lists) or a comma-separated list of indices."""
    if text.strip() == "all":
        import subprocess

        try:
            listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            listed = ""
        count = sum(1 for line in listed.splitlines() if line.startswith("GPU "))
        if not count:
            raise JudgeError("--gpus all: this machine has no NVIDIA GPU (nvidia-smi lists none)")
        return list(range(count))
    try:
        gpus = [int(part) for part in text.split(",")]
    except ValueError:
        raise JudgeError(f"--gpus: '{text}' is neither 'all' nor a list of GPU indices such as 0,1") from None
    if len(set(gpus)) != len(gpus) or min(gpus) < 0:
        raise JudgeError(f"--gpus: '{text}' names a GPU twice or a negative index")
    return gpus


def describe_place(place: dict) -> str:
    """Where a Ray actor runs, for progress lines: its host, and its GPU and what that GPU is, or (a CPU
    target's actor) its cores."""
    gate = f"; {place['gate']}" if place.get("gate") else ""
    device = place.get("device") or {}
    if "cpus" in place:
        where = f"{place['host']}, CPU {place['cpus'] or 'unpinned'} ({device.get('name') or 'unknown CPU'})"
        return where + ("" if place["cpus"] else ": no block of its host's cores was free") + gate
    name = device.get("name") or "no GPU"
    return f"{place['host']}, GPU {place['gpus'] or '-'} ({name})" + gate


def kernel_stages(evaluator, workspace: Path, budget_s: Optional[float], floor=None,
                  progress: Progress = quiet, control: bool = False, serves: int = 0) -> list[StageResult]:
    """Correctness in a runner of the candidate's, then timing against the base in process pairs (both with
    inputs from the candidate's own seeds); the noise floor `floor` decides faster or slower. `progress` hears
    of each case and each timed benchmark as it starts (judge.stages.progress). A `control` is timed by the
    controls' rule (judge.noise.enough_pairs), and timed only: it is judge's own copy of the base, whose check is the
    round's first (a control whose base fails is never recorded), and checking it again cost qr_v2's round 16.6 s
    (H200, 2026-11-29). Its timed calls are checked as every pair's are."""
    from .stages.check import check
    from .stages.timing.stage import measure

    nonce = evaluator.nonce()
    checked = [] if control else [check(evaluator, workspace, timing_next=evaluator.timing_gate is None, nonce=nonce,
                                        progress=progress)]
    if checked and not checked[0].passed:
        return checked
    return checked + [measure(evaluator, Path(workspace), budget_s=budget_s, floor=floor, nonce=nonce,
                              progress=progress, control=control, serves=serves)]


def kernel_stage_words(job: Job) -> str:
    """What a job's kernel stages are, as a round's `stage` event says it: a control is timed only."""
    return "timing" if job.control else "correctness and timing"


def progress_of(on_event, name: str) -> Progress:
    """A stage's progress as `progress` events of a round (or a calibration), named for the candidate (or
    "(base)", ...)."""
    return lambda **info: on_event("progress", proposal=name, **info)


class BaseCheck(NamedTuple):
    """The base's correctness as a dispatch checked it, where it ran, and the control's kernel stages and place
    where the control ran beside it (on another worker); None where it did not."""

    result: StageResult
    place: Optional[dict]
    control: Optional[tuple[list[StageResult], Optional[dict]]] = None


class LocalDispatch:
    """This machine, its GPU (or CPU for a CPU target), one candidate at a time: the round's own evaluator. Like
    every dispatch it takes its jobs as they come: a candidate runs while the next ones compile
    (judge.stages.compile.pipeline)."""

    workers = 1  # the control waits for the base's check: one GPU times one thing at a time

    def __init__(self, run):
        self.run = run

    def check_base(self, control: Optional[Job] = None) -> BaseCheck:
        """The base's check; the `control`, timed next on this one GPU, has its first pairs bound meanwhile."""
        run = self.run
        started = time.monotonic()
        checked = run.settings.stages.check_base(run.open_evaluator(), run.base_dir,
                                                 progress=progress_of(run.on_event, "(base)"),
                                                 timed_next=control.workspace if control is not None else None)
        run.on_event("evaluated", proposal="(base)", seconds=round(time.monotonic() - started, 1))
        return BaseCheck(checked, None)

    def gate(self) -> Optional[str]:
        return self.run.gate

    def warm(self) -> None:
        """Start the round's oracle and spares on a thread while the driver compiles the base (judge.warm); a round
        that saw a GPU for it before its probe has started them already."""
        if self.run.gate is None:
            self.run.warm()

    @property
    def control_in_groups(self) -> bool:
        """Whether this round's candidates are timed together in process groups, the control with them."""
        return self.run.settings.stages.groups and self.run.gate is None

    def evaluate(self, jobs: Iterable[Job], control=None) -> Iterator[tuple[Job, list[StageResult], Optional[dict]]]:
        """Each job's kernel stages: candidates checked as they come and timed together, the round's `control`
        (judge.control.ControlJob) in their first group, where given (judge.local_groups); a control that comes
        alone, or any job where the stages time no groups, one after another."""
        run = self.run
        wait_next = getattr(jobs, "wait_next", None)  # a round's compiles (ReadyJobs): whether another comes soon
        first = next(iter_jobs := iter(jobs), None)
        jobs = itertools.chain([first] if first else [], iter_jobs)
        if (first or control) and self.control_in_groups and not (first and first.control):
            from .local_groups import evaluate_in_groups
            yield from evaluate_in_groups(run, jobs, progress_of, control, wait_next)
            return
        for job in jobs:
            if run.gate is not None:
                yield job, kernel_stages_not_run(run.gate), None
                continue
            run.on_event("stage", proposal=job.name, stage=kernel_stage_words(job))
            started = time.monotonic()
            stages = run.settings.stages.evaluate(run.open_evaluator(), job.workspace, run.settings.timing_budget_s,
                                                  run.floor, progress=progress_of(run.on_event, job.name),
                                                  control=job.control, serves=job.serves)
            run.on_event("evaluated", proposal=job.name, seconds=round(time.monotonic() - started, 1))
            yield job, stages, None

    def close(self) -> None:
        self.run.close()
