"""Correctness stage: every test (twice, on two secret seeds) and every benchmark shape, under every input
distribution the target declares, each output poisoned before the call and judged by the oracle.

The kernel runs in its confined runner; the runner only saves what the kernel returned. The oracle, in a
process where no candidate code was ever imported, regenerates the inputs from the same seed, runs the
reference and compares: nothing the candidate does in its own process can change a verdict.
"""

from __future__ import annotations

import time
from pathlib import Path

from .devices import gate
from .evaluation import Case, Evaluator, fresh
from .stage_details import CheckDetail, CheckedCase
from .stages import StageResult, not_run
from .targets import Target, spec_label
from .worker import CommandFailed, Worker, WorkerError, time_left

STAGE = "correctness"


def run_correctness(target: Target, workspace: Path, *, timeout_s: float | None = None) -> StageResult:
    """Check the kernel assembled in `workspace` on its own (a round shares one Evaluator across candidates)."""
    reason = gate(target.arch)
    if reason:
        return not_run(STAGE, reason)
    workspace = Path(workspace).resolve()
    with Evaluator(target, fresh(workspace.parent / f".{workspace.name}-oracle")) as evaluator:
        result, worker = check(evaluator, workspace, timeout_s=timeout_s)
        if worker is not None:
            worker.close()
        return result


def check(evaluator: Evaluator, workspace: Path, *, timeout_s: float | None = None,
          timing_next: bool = False) -> tuple[StageResult, Worker | None]:
    """Start a runner for `workspace`, check every case; return the stage and the runner, still alive (for
    the timing stage) when it passed, else None. With `timing_next` the timing stage's other runners are bound
    and loaded while the cases run (Evaluator.prebind)."""
    target = evaluator.target
    workspace = Path(workspace).resolve()  # the runner's cwd is the workspace: paths it gets must be absolute
    limit = timeout_s if timeout_s is not None else target.limits.check_s
    started = time.monotonic()
    deadline = started + limit
    worker = None
    try:
        worker = evaluator.runner(workspace)
        runner_start_s = round(time.monotonic() - started, 3)  # a warm spare's bind, or a cold start
        confinement = worker.hello.get("confinement")
        worker.call("load", time_left(deadline))
        if timing_next and evaluator.processes > 1:
            evaluator.prebind(workspace, evaluator.processes - 1)
        evaluator.clear_outbox()
        cases = [_run_case(evaluator, worker, workspace, case, deadline) for case in evaluator.cases()]
        changes = worker.call("audit", time_left(deadline)).value
    except WorkerError as error:
        _no_timing_follows(evaluator, worker)
        return StageResult(STAGE, error.status, f"{error.status}: {error.message}", time.monotonic() - started,
                           CheckDetail(error=error.message), error.log_tail), None
    except CommandFailed as error:
        _no_timing_follows(evaluator, worker)
        return StageResult(STAGE, "crashed", f"crashed: {error.error}", time.monotonic() - started,
                           CheckDetail(error=error.error), error.log_tail), None
    seconds = time.monotonic() - started
    detail = CheckDetail(cases=cases, tolerance=_tolerance(target),
                         check_implementation=any(c.check_implementation is not None for c in cases),
                         confinement=confinement, secret_seeds=True, runner_start_s=runner_start_s,
                         distributions=[d.name for d in target.distributions])
    tail = worker.log_tail()
    if changes:
        _no_timing_follows(evaluator, worker)
        detail = detail.updated(tampered=changes)
        return StageResult(STAGE, "tampered", f"tampered: {'; '.join(changes)}", seconds, detail, tail), None
    failed = [c for c in cases if not c.passed]
    if failed:
        _no_timing_follows(evaluator, worker)
        summary = f"{len(failed)} of {len(cases)} checks failed; first: {describe_failure(failed[0])}"
        return StageResult(STAGE, "failed", summary, seconds, detail, tail), None
    return StageResult(STAGE, "passed", f"{len(cases)} of {len(cases)} checks passed ({_counts(target)})",
                       seconds, detail, tail), worker


def _no_timing_follows(evaluator: Evaluator, worker: Worker | None) -> None:
    """The kernel failed its check: its runner and any bound for its timing (Evaluator.prebind) are closed."""
    if worker is not None:
        worker.close()
    evaluator.discard_prebound()


def _run_case(evaluator: Evaluator, worker: Worker, workspace: Path, case: Case, deadline: float) -> CheckedCase:
    plan = evaluator.plan(case)
    dump = workspace / ".judge" / "output.pt"
    dump.unlink(missing_ok=True)
    entry = CheckedCase(kind=case.kind, test=case.index, label=spec_label(case.spec), call=case.call,
                        seed=case.spec.get("seed"), distribution=case.distribution)
    outbox = evaluator.outbox(plan)
    try:
        ran = worker.call("case", time_left(deadline), spec=case.spec, distribution=case.distribution,
                          slots=plan["slots"], dump=str(dump), outbox=outbox).value
    except CommandFailed as error:
        raise CommandFailed(f"{error.error} ({_where(entry)})", error.log_tail) from None
    entry = entry.updated(poisoned=ran["poisoned"], kernel_s=ran["kernel_s"])
    if ran["problem"]:
        return entry.updated(passed=False, reason=ran["problem"])
    # The runner's word on where it put its output decides only where the oracle looks: what it finds there is
    # judged as it is, and an outbox the runner did not fill holds zeros.
    received = outbox["layouts"] if outbox and ran.get("placed") == "outbox" else None
    verdict = evaluator.ask("verify", spec=case.spec, distribution=case.distribution, dump=str(dump),
                            outbox=received)
    verdict.pop("phases_us", None)  # the oracle's account of its time: tallied by judge.worker, not recorded
    dump.unlink(missing_ok=True)
    return entry.updated(**verdict)  # the oracle's verdict: passed, reason, outputs[, check_implementation]


def describe_failure(case: CheckedCase) -> str:
    return f"{_where(case)}: {case.reason}"


def _where(case: CheckedCase) -> str:
    if case.kind == "benchmark":
        where = f"benchmark {case.test} ({case.label})"
    else:
        where = f"test {case.test} ({case.label}), {'first' if case.call == 1 else 'second'} call"
    seed = f"seed {case.seed}" if case.seed is not None else "fixed inputs"
    distribution = f", {case.distribution} inputs" if case.distribution not in (None, "default") else ""
    return f"{where} ({seed}{distribution})"


def _counts(target: Target) -> str:
    parts = [f"{len(target.tests)} tests x 2 seeds"]
    if target.benchmarks:
        parts.append(f"{len(target.benchmarks)} benchmarks")
    text = " + ".join(parts)
    if len(target.distributions) > 1:
        text += f", {len(target.distributions)} input distributions"
    return text


def _tolerance(target: Target) -> dict | None:
    if target.rtol is None and target.atol is None:
        return None
    return {"rtol": target.rtol, "atol": target.atol}

