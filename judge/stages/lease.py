"""The runners one use of them takes from a round's evaluator (a correctness stage's one, a timed pair's two):
acquired from its spares, its prebound runners or a cold start (judge.stages.evaluation.Evaluator), and released
together. The stages that run kernels take and give back runners only through a lease, so none is left running,
whichever way a stage ends."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..sandbox.worker import Worker
    from .evaluation import Evaluator


class RunnerLease:
    """The runners taken for one use; `release` (or leaving the `with` block) ends them all."""

    def __init__(self, evaluator: Evaluator):
        self.evaluator = evaluator
        self.held: list[Worker] = []

    def acquire(self, workspace: Path, log_name: str = "worker.log") -> Worker:
        """A runner for `workspace`, its kernel not yet imported (Evaluator.runner)."""
        worker = self.evaluator.runner(workspace, log_name)
        self.held.append(worker)
        return worker

    def acquire_loaded(self, workspace: Path, log_name: str, deadline_s: float) -> Worker:
        """A runner for `workspace` with its kernel imported: a prebound one, else a new one (Evaluator.loaded)."""
        worker = self.evaluator.loaded(workspace, log_name, deadline_s)
        self.held.append(worker)
        return worker

    def release(self, wait: bool = False) -> None:
        """End every runner held (its files dropped at the oracle; `wait`: until each has exited, so that its device
        memory is free)."""
        held, self.held = self.held, []
        for worker in held:
            self.evaluator.close_runner(worker, wait)

    def __enter__(self) -> RunnerLease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()
