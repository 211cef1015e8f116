"""A runner's build of the oracle's plan, then the oracle's mapping of the device memory the runner allocated for its
inputs (judge.boundary.staging.RunnerFiles.bind). Every stage that hands a runner inputs builds through here, so no
input is written before the oracle has mapped that memory, and a runner whose process hands over a wrong handle or
too little memory fails as its kernel, never as the round."""

from __future__ import annotations

from typing import Any

from ..sandbox.worker import CommandFailed, Reply, Worker


def bound(evaluator: Any, worker: Worker, reply: Reply | None) -> Reply | None:
    """`reply` (the runner's to its `build`) once the oracle has mapped the device memory it names."""
    value = reply.value if reply is not None else None
    handle = value.get("device") if isinstance(value, dict) else None
    problem = evaluator.ask("bind", runner=worker.pid, handle=handle)["problem"]
    if problem:
        raise CommandFailed(problem, worker.log_tail())
    return reply


def build(evaluator: Any, worker: Worker, plan: dict, timeout_s: float) -> Reply:
    """The runner builds `plan`; the oracle maps what it allocated."""
    return bound(evaluator, worker, worker.call("build", timeout_s, plan=plan))
