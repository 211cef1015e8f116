"""Correctness stage: every test (twice, on two secret seeds) and every benchmark shape, under every input
distribution the target declares, each output poisoned before the call and judged by the oracle.

The kernel runs in its confined runner, called in judge.boundary.callframe as a timed call is: the oracle writes the
case's inputs (with NaN in the outputs) into memory the runner maps only once the runner waits in that frame,
and reads the output back from the outbox. The oracle, in a process where no candidate code was ever
imported, made the inputs and runs the reference: nothing the candidate does in its own process can change a
verdict, and no hook of its sees a case's inputs before its call.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..boundary import callframe
from ..devices import gate
from ..workspaces import fresh
from ..errors import JudgeError
from . import budget
from .build import build
from .evaluation import Case, Evaluator
from .lease import RunnerLease
from .details import ABSENT, CheckDetail, CheckedCase
from .progress import Progress, quiet
from .result import StageResult, not_run
from ..targets import Target, spec_label
from .timing.turns import frame_flags
from ..sandbox.worker import CommandFailed, Worker, WorkerError, time_left

STAGE = "correctness"


class Tampered(Exception):
    """What a call's reply or the frame's entry showed of the kernel's changes (the stage is tampered)."""


class CheckBesideRunner(Exception):
    """The oracle's check of a case ran out of device memory while the kernel's runner held its own: checked again
    once that runner is closed, as a verdict must not depend on what memory a kernel keeps."""

    def __init__(self, key: str, entry: CheckedCase):
        super().__init__(key)
        self.key, self.entry = key, entry


class NoRoom(Exception):
    """The device ran out of memory while the oracle checked an output or in the kernel's own call: no verdict on
    the kernel (its runner, the base's or judge's own holdings may have taken the room), so the stage is not run
    rather than the round lost."""


def run_correctness(target: Target, workspace: Path, *, timeout_s: float | None = None) -> StageResult:
    """Check the kernel assembled in `workspace` on its own (a round shares one Evaluator across candidates)."""
    reason = gate(target.arch)
    if reason:
        return not_run(STAGE, reason)
    workspace = Path(workspace).resolve()
    with Evaluator(target, fresh(workspace.parent / f".{workspace.name}-oracle")) as evaluator:
        return check(evaluator, workspace, timeout_s=timeout_s)


def check_base(evaluator: Evaluator, base_dir: Path, progress: Progress = quiet,
               timed_next: Path | None = None) -> StageResult:
    """A round's check of its base, after one look at whether its benchmarks can be timed on this device at all:
    one that cannot, even with nothing else on the device, ends the round now in one line (budget.refuse_unfittable),
    not after the base's check and the A/A control. `timed_next`: the control's copy of the base, whose first pairs
    are bound while the base's cases run, as a candidate's are during its own check."""
    sizes, labels = budget.benchmark_sizes(evaluator.target, _sizing(evaluator, progress))
    budget.refuse_unfittable(budget.DeviceMemory(**evaluator.ask("memory")), sizes, labels)
    checked = check(evaluator, base_dir, progress=progress, timing_next=timed_next or False)
    return on_public_seed(evaluator, base_dir, checked) if checked.status == "failed" else checked


def _sizing(evaluator: Evaluator, progress: Progress):
    """`evaluator.bytes_of`, saying as each benchmark the target ranks by starts to be sized: the oracle makes its
    inputs and runs the reference once (Oracle.plan), which took minutes before a round's first case on a CPU copy
    of amd/moe, with nothing said."""
    target, started = evaluator.target, time.monotonic()
    ranked = target.ranked_benchmarks

    def bytes_of(index: int) -> budget.BenchmarkBytes:
        progress(stage="sizing", benchmark=ranked.index(index) + 1, benchmarks=len(ranked),
                 label=target.benchmark_label(index), seconds=round(time.monotonic() - started, 1))
        return evaluator.bytes_of(index)

    return bytes_of


def on_public_seed(evaluator: Evaluator, base_dir: Path, checked: StageResult) -> StageResult:
    """A base that failed its check, with its first failed case run once more on task.yml's own seed: a base can
    fail the problem's own checker on some inputs of its distribution and pass on the public ones, the only ones
    GPU MODE's eval.py checks (pmpp/vectorsum_py's Triton base failed on 4 of 10 seeds of its 52M benchmark, and
    passed on task.yml's: H200, 2026-11-29). The verdict stands (judge's seeds are drawn, so that no answer can be
    precomputed); its summary says which of the two it is. Said nothing more where that case cannot be run again."""
    target = evaluator.target
    first = next((c for c in checked.detail.cases if not c.passed), None)
    entries = target.tests if first is not None and first.kind == "test" else target.benchmarks
    if first is None or first.test is None or not 0 <= first.test < len(entries) or "seed" not in entries[first.test]:
        return checked
    spec = dict(entries[first.test])
    case = Case(first.kind, first.test, 1, first.distribution or target.distributions[0].name, spec)
    try:
        with RunnerLease(evaluator) as lease:
            worker = lease.acquire(base_dir)
            deadline = time.monotonic() + target.limits.check_s  # from the runner's start, as in `check`
            worker.call("load", time_left(deadline))
            again = _run_case(evaluator, worker, case, 0, evaluator.nonce(), deadline)
    except (JudgeError, WorkerError, CommandFailed, Tampered, NoRoom, CheckBesideRunner):
        return checked
    said = (f"on task.yml's own seed ({spec['seed']}) the same {first.kind} passes: the base fails the problem's "
            f"check on some of its inputs, and a check of task.yml's seeds alone (GPU MODE's eval.py) passes it"
            if again.passed else f"it fails on task.yml's own seed ({spec['seed']}) too")
    return StageResult(checked.stage, checked.status, f"{checked.summary}; {said}", checked.seconds, checked.detail,
                       checked.log_tail)


def check(evaluator: Evaluator, workspace: Path, *, timeout_s: float | None = None, timing_next: bool | Path = False,
          nonce: int | None = None, progress: Progress = quiet) -> StageResult:
    """Start a runner for `workspace`, check every case, close the runner. With `timing_next` the timing stage's
    first process pairs are bound and loaded while the cases run (Evaluator.prebind), base and candidate alike:
    True for this kernel's timing, a path for that workspace's (the control's, after the base's check). Spares
    that become ready during the cases are bound too, up to the pairs' count, since a pair bound ahead starts at
    once and one bound when it starts waits for both its runners to import their kernels.
    `progress` hears of each case as it starts (judge.stages.progress). Where the device runs out of memory, the
    check runs once more with the spares' memory given back (Evaluator.give_back_spares) and the inputs the oracle
    kept on the GPU (kept_inputs.KeptInputs.leave_device), else it is not run."""
    nonce = evaluator.nonce() if nonce is None else nonce
    try:
        return _check(evaluator, workspace, timeout_s, timing_next, nonce, progress)
    except NoRoom as error:
        try:
            evaluator.ask("memory", timing=True)  # the correctness inputs kept on the GPU go back, made again later
        except JudgeError:
            pass  # an oracle that cannot answer fails the check's second run as it would have failed the first
        if not evaluator.give_back_spares():
            return not_run(STAGE, str(error))
    try:
        return _check(evaluator, workspace, timeout_s, timing_next, nonce, progress)
    except NoRoom as error:
        return not_run(STAGE, str(error))


def _check(evaluator: Evaluator, workspace: Path, timeout_s: float | None, timing_next: bool | Path, nonce: int,
           progress: Progress) -> StageResult:
    target = evaluator.target
    workspace = Path(workspace).resolve()  # the runner's cwd is the workspace: paths it gets must be absolute
    limit = timeout_s if timeout_s is not None else target.limits.check_s
    started = time.monotonic()
    worker, runner_start_s = None, ABSENT
    lease = RunnerLease(evaluator)
    try:
        worker = lease.acquire(workspace)
        runner_start_s = round(time.monotonic() - started, 3)  # a warm spare's bind, or a cold start
        # The kernel's limit starts once its runner is judge's to give: the wait for a spare still importing torch
        # (judge's start, bounded by the runner's own start limit) is never the kernel's time.
        deadline = time.monotonic() + limit
        confinement = worker.hello.get("confinement")
        worker.call("load", time_left(deadline))
        timed = workspace if timing_next is True else timing_next or None
        bind_ahead = (lambda: _prebind_timing(evaluator, timed)) if timed and evaluator.base_dir is not None else None
        planned = evaluator.cases(nonce)
        cases, changes, worker = _run_cases(evaluator, lease, worker, workspace, (nonce, planned), (started, deadline),
                                            lambda **info: progress(stage=STAGE, **info), bind_ahead)
    except NoRoom:
        _no_timing_follows(evaluator, lease)
        raise
    except Tampered as found:
        _no_timing_follows(evaluator, lease)
        message = str(found)
        return StageResult(STAGE, "tampered", f"tampered: {message}", time.monotonic() - started,
                           CheckDetail(tampered=message.split("; "), runner_start_s=runner_start_s),
                           worker.log_tail() if worker else "")
    except WorkerError as error:
        _no_timing_follows(evaluator, lease)
        return StageResult(STAGE, error.status, f"{error.status}: {error.message}", time.monotonic() - started,
                           CheckDetail(error=error.message, runner_start_s=runner_start_s), error.log_tail)
    except CommandFailed as error:
        _no_timing_follows(evaluator, lease)
        return StageResult(STAGE, "crashed", f"crashed: {error.error}", time.monotonic() - started,
                           CheckDetail(error=error.error, runner_start_s=runner_start_s), error.log_tail)
    seconds = time.monotonic() - started
    detail = CheckDetail(cases=cases, planned=len(planned), tolerance=_tolerance(target),
                         check_implementation=any(c.check_implementation is not None for c in cases),
                         confinement=confinement, secret_seeds=True, runner_start_s=runner_start_s,
                         distributions=[d.name for d in target.distributions])
    tail = worker.log_tail() if worker is not None else ""
    lease.release()
    if changes:
        evaluator.discard_prebound()
        detail = detail.updated(tampered=changes)
        return StageResult(STAGE, "tampered", f"tampered: {'; '.join(changes)}", seconds, detail, tail)
    failed = [c for c in cases if not c.passed]
    if failed:
        evaluator.discard_prebound()
        return StageResult(STAGE, "failed", failed_summary(len(cases), len(planned), failed[0]), seconds, detail,
                           tail)
    return StageResult(STAGE, "passed", f"{len(cases)} of {len(cases)} checks passed ({_counts(target)})",
                       seconds, detail, tail)


def _run_cases(evaluator: Evaluator, lease: RunnerLease, worker: Worker, workspace: Path,
               evaluation: tuple[int, list], clock: tuple[float, float], progress: Progress, bind_ahead=None
               ) -> tuple[list[CheckedCase], list[str], Worker | None]:
    """Every case in `worker` up to the first that fails, then its audit: the cases run, what the audits found, the
    runner still open (None where the last case's check closed it); `evaluation`: its nonce and its cases
    (Evaluator.cases); `clock`: the stage's start and deadline; `bind_ahead`, where the timing stage follows, called
    before each case (it binds the spares ready by then). A check that finds no room beside the runner closes it
    (its audit taken first) and runs again; the next case loads the kernel in a new runner."""
    (started, deadline), (nonce, planned), cases, changes = clock, evaluation, [], []
    for n, case in enumerate(planned):
        progress(case=n + 1, cases=len(planned), seconds=round(time.monotonic() - started, 1))
        if worker is None:
            waited = time.monotonic()
            worker = lease.acquire(workspace)
            deadline += time.monotonic() - waited  # a new runner's start is judge's time, as the first one's
            worker.call("load", time_left(deadline))
        if bind_ahead is not None:  # after the case's own runner, which takes the oldest spare first
            bind_ahead()
        try:
            cases.append(_run_case(evaluator, worker, case, n, nonce, deadline))
        except CheckBesideRunner as pending:
            changes += worker.call("audit", time_left(deadline)).value
            lease.release(wait=True)
            worker = None
            cases.append(_check_again(evaluator, pending))
        if not cases[-1].passed:  # one failed check decides the verdict: the cases after it would cost, not tell
            break
    if worker is not None:
        changes += worker.call("audit", time_left(deadline)).value
    return cases, changes, worker


def _prebind_timing(evaluator: Evaluator, workspace: Path) -> None:
    """The timing stage's first process pairs, base and candidate alike, bound and loaded while the cases run: as
    many as are not bound yet, from the spares ready now."""
    from .timing.stage import MIN_PAIRS

    evaluator.prebind(evaluator.base_dir, MIN_PAIRS, "timing-base")
    evaluator.prebind(workspace, MIN_PAIRS)


def _no_timing_follows(evaluator: Evaluator, lease: RunnerLease) -> None:
    """The kernel failed its check: its runner and any bound for its timing (Evaluator.prebind) are closed."""
    lease.release()
    evaluator.discard_prebound()


def _run_case(evaluator: Evaluator, worker: Worker, case: Case, n: int, nonce: int, deadline: float) -> CheckedCase:
    """One case: the oracle lays out its inputs, the runner builds its data and enters its call frame, the
    oracle writes the inputs in while the runner is stopped, one call, then the oracle's verdict."""
    entry = CheckedCase(kind=case.kind, test=case.index, label=spec_label(case.spec), call=case.call,
                        seed=case.spec.get("seed"), distribution=case.distribution)
    key = f"c{nonce}-{n}"
    made = evaluator.ask("case", key=key, spec=case.spec, distribution=case.distribution, runner=worker.pid)
    try:
        try:
            build(evaluator, worker, made["plan"], time_left(deadline))
        except CommandFailed as error:  # the runner's allocation for the inputs: judge's room, not the kernel's
            if not budget.ran_out(error.error):
                raise
            raise NoRoom(f"the device had no room left for the inputs of {_where(entry)} "
                         f"({budget.ran_out_line(error.error)})") from None
        serial, entered = worker.enter("calls", time_left(deadline), count_threads=False)
        worker.freeze()
        found = entered.value.get("found") or []
        if found:
            raise Tampered("; ".join(found))
        evaluator.ask("stage", key=key, name="case", copies=[0], runners=[worker.pid])
        reply = worker.record(lambda s: callframe.command(s, callframe.OP_CALL), time_left(deadline), "case")
        value, flags = reply.value, frame_flags(reply.value)
        if value.get("status") == callframe.RAISED:
            error = worker.read_reply(serial, time_left(deadline)).value.get("error", "the kernel raised")
            if not flags:
                if budget.ran_out(error):
                    raise NoRoom(budget.kernel_ran_out(error))
                raise CommandFailed(f"{error} ({_where(entry)})", worker.log_tail())
        # Named before the runner's own code runs again: a builtin the call hooked broke the runner's next line
        # (torch.cuda.is_available, on an H200, 2026-11-29), which came out as the kernel's crash.
        if flags:
            raise Tampered("; ".join(flags))
        worker.leave(callframe.command(0, callframe.OP_STOP), serial, time_left(deadline))
    except BaseException:
        evaluator.ask("verify_case", key=key, runner=worker.pid, leaves=[])  # the oracle drops the case
        raise
    entry = entry.updated(poisoned=made["poisoned"], kernel_s=round(value["us"] * 1e-6, 6))
    if value.get("status") == callframe.BAD_OUTPUT:
        evaluator.ask("verify_case", key=key, runner=worker.pid, leaves=[])
        return entry.updated(passed=False, reason=value["problem"])
    try:
        verdict = evaluator.ask("verify_case", key=key, runner=worker.pid, leaves=value["leaves"],
                                structure=value.get("structure"))
    except JudgeError as error:
        if not budget.ran_out(error):
            raise
        raise CheckBesideRunner(key, entry) from None
    return entry.updated(**verdict)  # the oracle's verdict: passed, reason, outputs[, check_implementation]


def _check_again(evaluator: Evaluator, pending: CheckBesideRunner) -> CheckedCase:
    """A case's check once more, its kernel's runner closed: NoRoom where even then the device has too little."""
    try:
        verdict = evaluator.ask("check_again", key=pending.key)
    except JudgeError as error:
        if not budget.ran_out(error):
            raise
        raise NoRoom(f"the device had no room left to check the output of {_where(pending.entry)} "
                     f"({budget.ran_out_line(error)})") from None
    return pending.entry.updated(**verdict)


def failed_summary(run: int, planned: int, case: CheckedCase) -> str:
    """The check's line where case number `run` of `planned` failed, the cases after it not run."""
    after = f" (the {planned - run} after it not run)" if planned > run else ""
    return f"check {run} of {planned} failed{after}: {describe_failure(case)}"


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
