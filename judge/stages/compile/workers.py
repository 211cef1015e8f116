"""Warm compile workers: a candidate's compile child that has imported torch before any candidate code exists.

A compile of a plain Python kernel cost 4.3 s on an H100 host (issue 27), nearly all of it the child's import of
torch. The compile stage's child is therefore started ahead, as judge.sandbox.worker's deferred spare (role "call", see
judge.sandbox.child): it imports torch and waits. When a compile comes, the spare is bound to it exactly as
judge.sandbox.isolation.run_isolated would start a fresh child: the compile's directory, environment, log and
confinement (judge.sandbox.confine, applied after judge's code and before the kernel is imported); it runs the one
function, answers, and is closed. A worker serves one candidate, never two: nothing a kernel leaves in its
process (modules, patches, the DSL's in-memory state) reaches another's compile, and the compile cache is read
and written by judge, as for a cold child.

Cores: every worker is pinned from its start to `cores`, which the caller takes from judge.core_blocks.placement
minus the timing cores of every GPU in use (judge.stages.compile.pipeline), so a compile never runs on a core where a
runner is being timed; a confined kernel cannot widen its affinity (judge.sandbox.confine denies sched_setaffinity) and
every process it starts inherits it.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from ...sandbox.confine import Policy, child_env, prepare
from ...sandbox.isolation import ChildOutcome, child_environment, entry_point, kill_group, run_isolated
from ...sandbox.worker import CommandFailed, Worker, WorkerError

# What a spare imports while it waits: the compile stage's child function and what it imports (the sandbox knows
# no stage: its parent names them).
PRELOAD = ("judge.stages.compile.stage",)


class CompileWorkers:
    """Spare compile children for `jobs` compiles, `spares` kept loading ahead (never more than compiles left)."""

    def __init__(self, root: Path, *, cores: list[int] | None, spares: int, jobs: int):
        self.root = Path(root).resolve()
        self.cores = cores
        self.spares = max(1, spares)
        self.left = jobs  # compiles still to come: no spare is started beyond them
        self._pool: list[Worker] = []
        self._busy: set[Worker] = set()
        self._lock = threading.Lock()
        self._started = 0
        self._closed = False
        with self._lock:
            self._top_up()

    def run(self, func: Callable | str, kwargs: dict, *, timeout_s: float, cwd: Path,
            env: dict[str, str] | None = None, log_path: Path | None = None, policy: Policy | None = None
            ) -> ChildOutcome:
        """judge.sandbox.isolation.run_isolated's call and outcome (the same statuses and error lines), in a warm worker;
        a spare that breaks before the kernel is imported is judge's loss: the compile runs cold instead."""
        worker = self._take()
        if worker is None:
            return run_isolated(func, kwargs, timeout_s=timeout_s, cwd=cwd, env=env, log_path=log_path, policy=policy)
        try:
            with tempfile.TemporaryDirectory(prefix="judge-child-") as tmp:
                bound_env, policy_json = child_environment(policy, env, Path(tmp))
                log = Path(log_path) if log_path is not None else Path(tmp) / "child.log"
                log.parent.mkdir(parents=True, exist_ok=True)
                try:
                    worker.ready()  # the spare's torch import: not the candidate's time
                    start = time.monotonic()
                    worker.bind({"func": entry_point(func)}, workspace=Path(cwd).resolve(), log_path=log,
                                policy=policy_json, env=bound_env)
                except (WorkerError, CommandFailed):
                    return run_isolated(func, kwargs, timeout_s=timeout_s, cwd=cwd, env=env, log_path=log_path,
                                        policy=policy)
                return _called(worker, kwargs, timeout_s, (worker.hello or {}).get("confinement"), start)
        finally:
            self._release(worker)

    def close(self) -> None:
        """Close the spares, and kill the workers still compiling (their threads then read a crash, unused)."""
        with self._lock:
            self._closed = True
            spares, self._pool = self._pool, []
            busy = list(self._busy)
        for worker in spares:
            worker.close(wait=False)
        for worker in busy:
            kill_group(worker.pid)

    # ---- internals -------------------------------------------------------------------------------------

    def _take(self) -> Worker | None:
        """The oldest spare, ready or not (its torch import is waited for by bind), or a new one; None once closed."""
        with self._lock:
            if self._closed:
                return None
            self.left -= 1
            worker = self._pool.pop(0) if self._pool else self._new()
            self._busy.add(worker)
            self._top_up()
        return worker

    def _release(self, worker: Worker) -> None:
        with self._lock:
            self._busy.discard(worker)
        worker.close()  # waited for: a worker is gone, with what it started, before its compile's verdict is used

    def _top_up(self) -> None:
        while len(self._pool) < min(self.spares, self.left):
            self._pool.append(self._new())

    def _new(self) -> Worker:
        from ...workspaces import fresh
        from ...core_blocks import pin

        self._started += 1
        home = fresh(self.root / str(self._started))
        rules = Policy(writable=[home], readable=[])
        prepare(rules)
        worker = Worker("call", None, cwd=home, log_path=home / "spare.log", env=child_env(rules, dict(os.environ)),
                        preload=PRELOAD)
        if self.cores:
            pin(worker.pid, self.cores)
        return worker


def _called(worker: Worker, kwargs: dict, timeout_s: float, confinement: dict | None, start: float) -> ChildOutcome:
    """The bound worker's one call, as run_isolated's ChildOutcome; its seconds run from the bind's start."""
    try:
        value = worker.call("run", timeout_s, kwargs=kwargs).value
    except WorkerError as error:
        # The worker's own status (timed-out, tampered or crashed): a warm compile serves in judge.sandbox.child's loop,
        # whose reply channel the kernel can reach, so a kernel that forges it is tampered here as in a runner.
        status = error.status
        code = None if status == "timed-out" else worker.process.returncode
        return ChildOutcome(status, None, code, time.monotonic() - start, worker.log_tail(), error.message,
                            confinement)
    except CommandFailed as error:
        return ChildOutcome("crashed", None, 0, time.monotonic() - start, worker.log_tail(), error.error, confinement)
    seconds = time.monotonic() - start
    return ChildOutcome("ok", value, 0, seconds, worker.log_tail(), "", confinement)

