"""Compiles overlapped with the kernel stages: a candidate goes to correctness and timing as soon as its own
compile and static stages end, while the candidates after it compile.

A bounded pool of threads runs each candidate's compile (a warm judge.stages.compile.workers child, or a cold one) and
its static stage; the round takes each candidate as soon as its compile has ended (`in_ready_order`): of those
that have, the first in proposal order, so that no candidate whose compile ended waits for an earlier one's still
running. On an H200 (2026-11-29, docs/judge_performance.md) the GPU stood idle for 26.7 s after vectoradd_py's A/A
control while its first candidate built an inline CUDA extension, and the three after it had compiled. The round's
verdicts are those of a round that compiled everything first; its ledger rows come in the order they were judged,
and its summary lists them in proposal order. Only the round's thread writes the ledger, one verdict per
transaction as it comes: a run killed half-way keeps every verdict written, and the compiles it had not used
are redone on resume.

Cores: the compile workers are pinned to the cores no timed pair uses: every core this process may use minus the
timing block (judge.core_blocks.placement) of each GPU of the host, and of each GPU the round times on (this
machine's: the one CUDA shows first, or `--gpus`). Where the host has too few cores to set any apart, placement
sets none and nothing is pinned, the timed pairs included.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ...records import sha256
from ..job import Job
from ..result import StageResult

# Warm compile children kept at once, at most: each holds torch (a few hundred MB) while it waits; more threads
# than this take a new one each, still warm unless the spares fall behind.
MAX_WARM = 8


@dataclass(frozen=True)
class PreparedCandidate:
    """A candidate patched and screened, ready to compile (judge.prepare makes it)."""

    revision: dict  # its ledger row
    source: str  # the patched kernel file
    workspace: Path  # where the target was assembled with it
    early: list[StageResult]  # the stages it passed already: patch and screen
    started: str  # when its evaluation started (judge.ledger.now)


def compile_cores(target, gpus: list[int] | None) -> list[int] | None:
    """The cores compiles may use: this process's, minus every timed pair's; None where none are set apart."""
    from ...core_blocks import placement, visible_gpu

    timing: set[int] = set()
    others = set(os.sched_getaffinity(0))
    for gpu in gpus or [visible_gpu()]:
        cores = placement(target, gpu)
        if cores is None:
            return None
        timing.update(cores["timing"])
        others &= set(cores["others"])  # every GPU's block of the host is left out, not only those judged here
    left = sorted(others - timing)
    return left or None


def in_ready_order(waiting: list[tuple[PreparedCandidate, Future]]) -> Iterator[tuple[PreparedCandidate, list]]:
    """Each candidate with its compile's result, once that compile has ended: of those ended, the first in proposal
    order; where none has, whichever ends first. One compile thread gives proposal order. `waiting` is emptied as
    they are taken (what is left: CompilePipeline.wait_next)."""
    while waiting:
        ended = next((i for i, (_, future) in enumerate(waiting) if future.done()), None)
        if ended is None:
            wait([future for _, future in waiting], return_when=FIRST_COMPLETED)
            continue
        prepared, future = waiting.pop(ended)
        yield prepared, future.result()


class CompilePipeline:
    """The compiles of a round's prepared candidates (PreparedCandidate), started at once on `threads` threads;
    iterating gives each with its stages as soon as its own compile has ended (`in_ready_order`), or, with `overlap`
    False, once all of them have, in proposal order (as rounds did before issue 27)."""

    def __init__(self, run, pending: list[PreparedCandidate], overlap: bool = True):
        self.run, self.pending, self.overlap = run, pending, overlap
        settings = run.settings
        cores = compile_cores(run.target, settings.gpus)
        threads = max(1, settings.workers or (len(cores) if cores else os.cpu_count() or 1))
        self.workers = None
        if pending and settings.warm_compiles:
            self.workers = settings.stages.compile_workers(run.target, run.root / "compilers", cores,
                                                           min(MAX_WARM, threads + 1), len(pending))
        self._done = 0
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="judge-compile")
        if pending:
            run.on_event("compile-start", total=len(pending))
        self.futures = [self._pool.submit(self._one, p) for p in pending]
        self._untaken = list(zip(pending, self.futures))  # emptied as the round takes them (in_ready_order)

    def __iter__(self) -> Iterator[tuple[PreparedCandidate, list[StageResult]]]:
        if not self.overlap:
            wait(self.futures)
        yield from in_ready_order(self._untaken)

    def wait_next(self, timeout_s: float, usable=lambda prepared, stages: True) -> bool:
        """Whether a compile the round has not taken yet ends, `usable`, within `timeout_s` (False once none is left
        to wait for): a round that times its checked candidates together waits this long for one more."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            if any(f.done() and f.exception() is None and usable(p, f.result()) for p, f in self._untaken):
                return True
            running = [f for _, f in self._untaken if not f.done()]
            left = deadline - time.monotonic()
            if not running or left <= 0:
                return False
            wait(running, timeout=left, return_when=FIRST_COMPLETED)

    def close(self) -> None:
        """Drop the compiles not started, end the running ones and the spares: nothing outlives the round."""
        for future in self.futures:
            future.cancel()
        if self.workers is not None:
            self.workers.close()
        self._pool.shutdown(wait=True)

    def _one(self, prepared: PreparedCandidate) -> list[StageResult]:
        """One candidate's compile and static stages (run_static reads the compiled files; its layout checks run
        in a child of their own), after the stages `prepared` already has."""
        run = self.run
        settings = run.settings
        compiled = settings.stages.compile_one(run.target, prepared.workspace, cache_dir=settings.cache_dir,
                                               workers=self.workers)
        stages = [*prepared.early, compiled]
        if run.target.static is not None and compiled.passed:
            stages.append(settings.stages.static_check(run.target, prepared.workspace, compiled))
        with self._lock:
            self._done += 1
            done = self._done
        run.on_event("compile-progress", done=done, total=len(self.pending))
        return stages


class ReadyJobs:
    """The candidates whose compile and static stages passed (or could not run), as the dispatch's jobs, each as it
    is ready (CompilePipeline); a candidate that failed one is recorded at once, its verdict in `failed`."""

    def __init__(self, run, pipeline: CompilePipeline, failed: list):
        self.run, self.pipeline, self.failed = run, pipeline, failed

    def __iter__(self) -> Iterator[Job]:
        return _ready_jobs(self.run, self.pipeline, self.failed)

    def wait_next(self, timeout_s: float) -> bool:
        """Whether another job is ready within `timeout_s` (CompilePipeline.wait_next): a failed compile is none."""
        return self.pipeline.wait_next(timeout_s, _is_job)


def _is_job(prepared: PreparedCandidate, stages: list[StageResult]) -> bool:
    """Whether a candidate's compile and static stages let its kernel run: passed, or could not run here."""
    return stages[-1].passed or stages[len(prepared.early)].status == "not-run"


def _ready_jobs(run, pipeline: CompilePipeline, failed: list) -> Iterator[Job]:
    for prepared, stages in pipeline:
        revision, early = prepared.revision, prepared.early
        if len(stages) > len(early) + 1:
            run.on_event("stage", proposal=revision["proposal_id"], stage="static")
        if _is_job(prepared, stages):
            yield Job((revision, stages, prepared.started), revision["proposal_id"], prepared.source,
                      prepared.workspace)
        else:
            failed.append(run.record(revision, sha256(prepared.source), stages, prepared.started))
