"""Timing stage: the base and the candidate in process pairs, each pair two fresh confined runners that take
turns on the device, pairs added one after another until the comparison is decided.

The process pair is the unit of the statistics (judge.stats): each pair gives one log ratio of medians per
benchmark, the verdict's interval is Student's t over the pairs, and pairs are added while the answer is
undecided, from MIN_PAIRS up to MAX_PAIRS (or the budget), after which an undecided comparison is inconclusive.
Base and candidate are treated alike in every pair: both runners come from the same spares, bind and load the
same way, sit on the same cores, neither ran the correctness cases, who goes first alternates by pair and by
round, and both run the same secret input sets, each in its own memory, at an offset drawn per pair.

Inside a pair (judge.stages.timing.turns) each timed call is one record to a runner in its call frame
(judge.boundary.callframe); the oracle writes the call's input set in before and checks its output after. Clocks:
- "gpu": L2 flushed, the launch hidden behind a GPU spin, events around the call on its stream, the tail after a sync;
- "call": the GPU idle, events around the whole call (launch included), as GPU MODE times;
- "host" (CPU targets): the host's clock around the call.
GPU targets measure both GPU clocks; judge.toml's `clock` says which decides, and the other is measured on one
round in turns.OTHER_CLOCK_EVERY. Nothing a runner reports is taken on trust: outputs are checked by the
oracle, the parent's wall clock must account for the times a runner claims, a kernel faster on sets it has seen
than on new ones replays answers, and the runner's audit and every call's reply name what it changed.
"""

from __future__ import annotations

import math
import random
import time
from pathlib import Path
from typing import Callable

from . import audits
from ... import stats
from ...devices import gate
from ...workspaces import fresh
from ..evaluation import Evaluator
from ..build import bound
from ..lease import RunnerLease
from ..progress import Progress, quiet
from ...noise import MAX_PAIRS, MIN_PAIRS, Floor, default_floor, enough_pairs
from ...boundary import callframe
from ...boundary.runner import LONG_CALL_US, spin_cycles, spin_for, wait_least
from ...errors import JudgeError
from .. import budget
from ..details import ABSENT, TimingDetail
from ..result import StageResult, not_run
from ...targets import Target
from .summary import GroupResult, PairBenchmark, PairResult, pair_geomeans, summarise
from .turns import PairTurns, clocks_for, reps_for, steady_reps_for
from ...sandbox.isolation import session_strays
from ...sandbox.worker import CommandFailed, Worker, WorkerError, time_left

STAGE = "timing"
BUDGET_PER_BENCHMARK_S = 5.0


class Stopped(Exception):
    """A pair could not be timed: a failure of the stage, with whose runner it was."""

    def __init__(self, status: str, message: str, who: str, log: str = ""):
        super().__init__(message)
        self.status, self.message, self.who, self.log = status, message, who, log


def run_timing(target: Target, candidate: Path, base: Path, *, budget_s: float | None = None,
               timeout_s: float | None = None, floor: Floor | None = None, progress: Progress = quiet) -> StageResult:
    """Time the kernel in `candidate` against the one in `base` (a round shares one Evaluator instead)."""
    reason = gate(target.arch)
    if reason:
        return not_run(STAGE, reason)
    candidate = Path(candidate).resolve()
    with Evaluator(target, fresh(candidate.parent / f".{candidate.name}-oracle"), base_dir=Path(base)) as evaluator:
        return measure(evaluator, candidate, budget_s=budget_s, timeout_s=timeout_s, floor=floor, progress=progress)


def measure(evaluator: Evaluator, workspace: Path, *, budget_s: float | None = None, timeout_s: float | None = None,
            floor: Floor | None = None, nonce: int | None = None, progress: Progress = quiet,
            control: bool = False, serves: int = 0) -> StageResult:
    """Time the kernel assembled in `workspace` against the round's base, pair after pair (module docstring).
    `progress` hears of each benchmark of each pair as it starts (judge.stages.progress). A `control` (the base
    against an identical copy, whose pairs set the noise floor) stops by noise.enough_pairs' rule for controls, for the
    `serves` candidates its round may time."""
    target = evaluator.target
    if evaluator.timing_gate is not None and not control:
        evaluator.discard_prebound()  # what a check bound for this timing holds its memory for nothing
        return not_run(STAGE, evaluator.timing_gate)
    floor = floor or default_floor(target)
    nonce = evaluator.nonce() if nonce is None else nonce
    limit, budget = limit_and_budget(target, budget_s, timeout_s)
    started = time.monotonic()
    deadline = started + limit
    facts = None if target.on_cpu else evaluator.ask("facts")
    pairs: list[PairResult] = []
    evaluator.discard_prebound(keep=(workspace, evaluator.base_dir))

    def benchmark_starts(pair: int, index: int) -> None:
        benchmark_said(progress, target, pair + 1, index, started)

    try:
        for p in range(MAX_PAIRS):
            known = known_calls(pairs, evaluator.base_calls)
            pairs.append(time_pair(evaluator, Path(workspace), p, nonce, deadline, benchmark_starts, known))
            note_base_calls(evaluator.base_calls, pairs[-1])
            if pairs[-1].failure or pairs[-1].findings or pairs[-1].base_findings:
                break
            if enough_pairs(pair_geomeans(pairs, target), floor, time.monotonic() - started, budget, control,
                            limit, max(pair.seconds for pair in pairs), serves):
                break
    except Stopped as stop:
        gate = out_of_time(limit, len(pairs) + 1, stop.message) if control and stop.status == "timed-out" else None
        if gate:  # the round's other evaluators hear of it from the detail
            evaluator.timing_gate = gate
        return stopped_result(stop, time.monotonic() - started, gate)
    finally:
        evaluator.discard_prebound()
    return finish(evaluator, pairs, floor, facts, time.monotonic() - started)


def stopped_result(stop: Stopped, seconds: float, gate: str | None = None) -> StageResult:
    """The stage's result where a runner could not go on (Stopped): not run, or its status with whose runner."""
    if stop.status == "not-run":
        return not_run(STAGE, stop.message)
    detail = TimingDetail(error=stop.message, who=stop.who, gate=gate or ABSENT)
    return StageResult(STAGE, stop.status, f"{stop.status}: {'the base runner ' if stop.who == 'base' else ''}"
                       f"{stop.message}", seconds, detail, stop.log)


def limit_and_budget(target: Target, budget_s: float | None, timeout_s: float | None) -> tuple[float, float]:
    """A comparison's limit (the target's timing limit unless given) and its budget (BUDGET_PER_BENCHMARK_S a ranked
    benchmark unless given), the budget never past half the limit."""
    limit = timeout_s if timeout_s is not None else target.limits.timing_s
    budget = budget_s if budget_s is not None else BUDGET_PER_BENCHMARK_S * len(target.ranked_benchmarks)
    return limit, min(budget, 0.5 * limit)


def benchmark_said(progress: Progress, target: Target, pair: int, index: int, started: float) -> None:
    """Tell `progress` that benchmark `index` of pair `pair` (counted from 1) starts, with the stage's seconds."""
    ranked = target.ranked_benchmarks
    progress(stage=STAGE, pair=pair, max_pairs=MAX_PAIRS, benchmark=ranked.index(index) + 1, benchmarks=len(ranked),
             label=target.benchmark_label(index), seconds=round(time.monotonic() - started, 1))


def time_pair(evaluator: Evaluator, workspace: Path, pair: int, nonce: int, deadline: float,
              benchmark_starts: Callable[[int, int], None] | None = None,
              known: dict[int, float] | None = None) -> PairResult:
    """One process pair over every benchmark the target ranks by: the group of the base and the kernel in
    `workspace` (time_group)."""
    return time_group(evaluator, {"cand": Path(workspace)}, pair, nonce, deadline, benchmark_starts, known).of("cand")


def time_group(evaluator: Evaluator, workspaces: dict[str, Path], pair: int, nonce: int, deadline: float,
               benchmark_starts: Callable[[int, int], None] | None = None,
               known: dict[int, float] | None = None) -> GroupResult:
    """One process group over every benchmark the target ranks by (Target.ranked_benchmarks): a fresh runner for the
    base and for each kernel in `workspaces` (a pair: one, "cand"), bound in an order drawn for the group, pinned to
    the timing cores, each benchmark in turn (`benchmark_starts(pair, index)` told as it starts), then every runner's
    audit. `known`: per benchmark, the call time an earlier pair or group sized it by."""
    rng = random.Random(evaluator.shift(nonce, pair, -1))
    members = ["base", *workspaces]
    if len(members) == 2:
        order = members if rng.random() < 0.5 else members[::-1]
    else:
        order = rng.sample(members, len(members))
    runners: dict[str, Worker] = {}
    result = GroupResult(findings={who: [] for who in members})
    started = time.monotonic()
    places = {"base": (evaluator.base_dir, f"timing-base-{pair}")}
    places.update({who: (Path(directory), f"timing-{pair}") for who, directory in workspaces.items()})
    with RunnerLease(evaluator) as lease:
        for who in order:  # all load their kernels at once where no check bound them ahead (Evaluator.prebind)
            directory, name = places[who]
            evaluator.prebind(directory, 1, name)
        for who in order:
            directory, name = places[who]
            try:
                runners[who] = lease.acquire_loaded(directory, f"{name}.log", time_left(deadline))
            except (WorkerError, CommandFailed) as error:
                raise _stopped(error, who) from None
        evaluator.pin_timing(*runners.values())
        result.confinement = (runners[members[1]].hello or {}).get("confinement")
        evaluator.settle()
        first = members[pair % len(members)]
        step_us = 0.0  # judge's step around a call, as the benchmark before measured it
        for index in evaluator.target.ranked_benchmarks:
            if benchmark_starts is not None:
                benchmark_starts(pair, index)
            bench = _benchmark(evaluator, runners, index, pair, nonce, first, deadline, result,
                               (known or {}).get(index, 0.0), step_us)
            step_us = bench.step_us or step_us
            result.benchmarks.append(bench)
            if bench.failure:
                result.failure, result.failed_who = bench.failure, bench.failed_who
                break
        for who, worker in runners.items():  # every audit at once: each walks its own process (0.2 s on an H100)
            try:
                worker.start("audit")
            except (WorkerError, CommandFailed) as error:
                raise _stopped(error, who) from None
        for who, worker in runners.items():
            try:
                found = worker.finish(time_left(deadline)).value
            except (WorkerError, CommandFailed) as error:
                raise _stopped(error, who) from None
            result.findings[who].extend(found)
    result.seconds = time.monotonic() - started
    return result


def _benchmark(evaluator: Evaluator, runners: dict[str, Worker], index: int, pair: int, nonce: int, first: str,
               deadline: float, result: GroupResult, known_us: float = 0.0, step_us: float = 0.0) -> PairBenchmark:
    """One benchmark in one pair or group: its sets made and laid out by the oracle, every runner built and warmed
    up, then the turns (judge.stages.timing.turns), their steady repetitions sized by the call and judge's `step_us`
    around it."""
    target = evaluator.target
    spec = target.benchmarks[index]
    planned = evaluator.memory_plan().benchmarks[index]
    sets, copies = planned.sets, planned.copies
    key = f"t{nonce}-{pair}-{index}"
    pids = {who: w.pid for who, w in runners.items()}
    try:
        made = evaluator.ask("benchmark", key=key, spec=spec, distribution=target.distributions[0].name,
                             seeds=evaluator.timing_seeds(index, nonce, pair, sets),
                             projection_seed=evaluator.projection_seed(index, nonce, pair), copies=copies,
                             runners=list(pids.values()), shift=evaluator.shift(nonce, pair, index),
                             flush=not target.on_cpu, keep=evaluator.kept_name(index), hold=evaluator.held_name(index),
                             reserve=budget.need_of([evaluator.bytes_of(index)], [planned], False, len(runners)),
                             eager=planned.eager)
    except JudgeError as error:
        raise out_of_memory(error, index) from None
    current = list(runners)[-1]
    try:
        spin, serials, claimed = _enter_frames(evaluator, runners, key, made, copies, deadline, result, known_us)
        call_us = sizing_call_us(list(claimed.values()), known_us)
        clocks, deciding = clocks_for(target.on_cpu, target.deciding_clock, call_us)
        turns = PairTurns(evaluator, key, index, runners, clocks, deciding, sets, copies, spin,
                          random.Random(evaluator.shift(nonce, pair, index + 1000)), first, deadline,
                          reps=reps_for(call_us), steady=steady_reps_for(call_us, step_us))
        measuring = time.monotonic()
        try:
            turns.run()
        except (WorkerError, CommandFailed) as error:
            raise _stopped(error, turns.last_who) from None
        except JudgeError as error:  # the oracle's: an answer it computes between calls may find no room either
            raise out_of_memory(error, index) from None
        measuring_s = time.monotonic() - measuring
        for who, worker in runners.items():
            current = who
            _leave_frame(worker, who, turns, serials[who], deadline)
        for who, flags in turns.flags.items():
            result.findings[who].extend(sorted(set(flags)))
    except (WorkerError, CommandFailed) as error:
        raise _stopped(error, current) from None
    finally:
        evaluator.ask("release", key=key)
    by_session = session_strays([w.process.pid for w in runners.values()])  # one walk of /proc for the group's runners
    strays_of = {who: by_session[w.process.pid] for who, w in runners.items()}
    strays = sorted(pid for found in strays_of.values() for pid in found)
    return PairBenchmark(index=index, series=turns.series, spin_us=round(spin["us"], 1), sets=sets, copies=copies,
                         placement="separate", measuring_s=measuring_s, strays=strays, analysed=turns.analysed_clock(),
                         strays_of=strays_of if len(runners) > 2 else None,
                         failure=turns.failure if turns.failure and turns.failure != "raised" else None,
                         call_us=call_us, base_call_us=claimed["base"], failed_who=turns.failed_who,
                         step_us=round(turns.base_step_us(), 1))


def _leave_frame(worker: Worker, who: str, turns: PairTurns, serial: int, deadline: float) -> None:
    """End `who`'s stretch of calls and stop its runner; a call that raised is read as the kernel's crash. With
    flags, what a call left set (a hooked builtin) may break the call or the runner's own code after the stretch:
    the flags make it tampered, not crashed."""
    try:
        if turns.failure == "raised" and who == turns.last_who:
            error = worker.read_reply(serial, time_left(deadline)).value.get("error", "the kernel raised")
            raise CommandFailed(error, worker.log_tail())
        worker.leave(callframe.command(0, callframe.OP_STOP), serial, time_left(deadline))
        worker.freeze()
    except CommandFailed as error:
        if not turns.flags[who]:
            raise _stopped(error, who) from None


def out_of_time(limit: float, pair: int, message: str) -> str:
    """Why a round whose A/A control ran out of time times no candidate: each of a candidate's pairs times the base
    as the control's did, on top of the candidate (linalg/eigh_py's base takes 18-30 s a call on its benchmarks'
    shapes on an H200: a pair of it is past the task's 600 s). Its candidates are still checked."""
    return (f"the round's A/A control ran out of its {limit:.0f} s of timing in pair {pair} ({message}): every pair "
            f"times the base as the control's did, so no candidate is timed in this round; a longer limit "
            f"(judge.toml [limits] timing_s, or the task's benchmark_timeout) lets it be")


def out_of_memory(error: JudgeError, index: int) -> Exception:
    """The oracle's failure to lay out a benchmark's sets or to answer one between calls: where the device ran out
    of memory (after the oracle gave back every set it could), this candidate is not run rather than the round lost;
    who took the room (its runner, the base's, or judge's plan) cannot be told from here, so it is no verdict on the
    candidate. Any other failure is the round's error, as it was."""
    if not budget.ran_out(error):
        return error
    return Stopped("not-run", f"the device had no room left for benchmark {index}'s input sets and answers beside "
                   f"this pair's runners ({budget.ran_out_line(error)})", "cand")


def _enter_frames(evaluator: Evaluator, runners: dict[str, Worker], key: str, made: dict, copies: int, deadline: float,
                  result: GroupResult, known_us: float = 0.0) -> tuple[dict, dict[str, int], dict[str, float]]:
    """Every runner builds their data from the oracle's plans, warm up on the warm-up set and enter the call frame,
    each stopped in between: the benchmark's spin, each runner's serial in the frame and each kernel's warm-up call
    (what its runner says, bounded by the parent's own clock around its warm-up); the shorter one sizes the
    repetitions (sizing_call_us): a candidate cannot make them fewer than the base's calls make them. Where an
    earlier pair found the calls long (`known_us`), each runner warms up with one call, whose time may include a
    compile."""
    current = list(runners)[-1]
    try:
        for who, worker in runners.items():
            current = who
            worker.start("build", plan=made["plans"][str(worker.pid)])
        for who, worker in runners.items():
            current = who
            bound(evaluator, worker, worker.finish(time_left(deadline)))
            worker.freeze()
        evaluator.ask("stage", key=key, name="warm", copies=list(range(copies)),
                      runners=[w.pid for w in runners.values()])
        warm, claimed = [], {}
        for who, worker in runners.items():
            current = who
            reply = worker.call("warm_up", time_left(deadline), known_us=known_us)
            warm.append((who, reply.value))
            claimed[who] = _claimed_call_us(reply)
            worker.freeze()
        spin = _spin(evaluator.target, warm)
        serials = {}
        for who, worker in runners.items():
            current = who
            serials[who], entered = worker.enter("calls", time_left(deadline))
            worker.freeze()
            result.findings[who].extend(entered.value.get("found", []))
    except (WorkerError, CommandFailed) as error:
        raise _stopped(error, current) from None
    return spin, serials, claimed


def known_calls(pairs: list[PairResult], base_calls: dict[int, float]) -> dict[int, float]:
    """Per benchmark, the call time the next pair starts from: what this comparison's previous pair sized it by, or
    the shorter kernel's median timed call there where that was shorter (a candidate far faster than a long base,
    whose one warm-up call compiled, is sized by its own calls from its second pair on); before its first pair,
    the base's own warm-up calls in the round's earlier pairs (the control's, an earlier candidate's:
    `note_base_calls`), never a rival candidate's. qr_v2's first pair of every candidate warmed each of its 1 s
    calls up twice (H200, 2026-11-29)."""
    if pairs:
        return {bench.index: min([bench.call_us] + _timed_medians(bench)) for bench in pairs[-1].benchmarks}
    return dict(base_calls)


def _timed_medians(bench: PairBenchmark) -> list[float]:
    return [stats.median([rep["us"] for rep in reps]) for reps in bench.series.values() if reps]


def note_base_calls(base_calls: dict[int, float], pair: PairResult | GroupResult) -> None:
    """Keep the shortest warm-up call the base's runner made on each benchmark of `pair` (or group: a single warm-up
    call may include its process's first-call costs; a shorter one is nearer the typical call)."""
    for bench in pair.benchmarks:
        if bench.base_call_us > 0:
            base_calls[bench.index] = min(bench.base_call_us, base_calls.get(bench.index, math.inf))


def sizing_call_us(claimed: list[float], known_us: float) -> float:
    """The call time a benchmark's repetitions are sized by: the shorter kernel's warm-up call; where an earlier pair
    found the calls long (`known_us`) and each runner warmed up with one call, which may have compiled, the shorter
    of those and `known_us`."""
    return min(claimed + ([known_us] if known_us >= LONG_CALL_US else []))


def _claimed_call_us(reply) -> float:
    """A runner's warm-up call time, no longer than its warm-up's wall clock allows; 0 (all repetitions) where
    the reply does not say it in numbers."""
    try:
        calls = max(1, int(reply.value["calls"]))
        claimed = float(reply.value["call_us"])
        return max(0.0, min(claimed, reply.wall_s * 1e6 / calls)) if math.isfinite(claimed) else 0.0
    except (KeyError, TypeError, ValueError, OverflowError):
        return 0.0


def _spin(target: Target, warm: list[tuple[str, dict]]) -> dict:
    """The GPU clock's wait for a benchmark: sized from every member's warm-up launches (at least wait_least of
    them, at most spin_for), converted to cycles at the base runner's rate, the same cycles for all (a candidate's
    reported rate would set its own wait). `us` is its least, which every member's turn holds."""
    if target.on_cpu:
        return {"us": 0.0, "cycles": {"spin": 0, "least": 0, "null": 0}}
    most_us = spin_for([us for _, reply in warm for us in reply["host_us"]])
    least_us = min(most_us, wait_least([reply["host_us"] for _, reply in warm]))
    rate = stats.median([reply["cycles_per_us"] for who, reply in warm if who == "base"])
    return {"us": least_us, "cycles": spin_cycles(most_us, rate, least_us)}


def _stopped(error: Exception, who: str) -> Stopped:
    if isinstance(error, CommandFailed):
        if budget.ran_out(error.error):
            return Stopped("not-run", budget.kernel_ran_out(error.error, f"the {who.replace('cand', 'kernel')}'s"), who)
        return Stopped("crashed", error.error, who, error.log_tail)
    return Stopped(error.status, error.message, who, error.log_tail)


def finish(evaluator: Evaluator, pairs: list[PairResult], floor: Floor, facts: dict | None,
            seconds: float) -> StageResult:
    """The stage's result from the pairs: failure, tampering, or the summary with its decision."""
    target = evaluator.target
    confinement = pairs[0].confinement if pairs else None
    last = pairs[-1]
    if last.failure:
        detail = TimingDetail(error=last.failure, who="candidate", confinement=confinement)
        return StageResult(STAGE, "failed", last.failure, seconds, detail, "")
    if last.base_findings:
        message = f"the base's runner: {'; '.join(dict.fromkeys(last.base_findings))}"
        return StageResult(STAGE, "failed", message, seconds, TimingDetail(error=message, who="base"), "")
    if last.findings and not all(all(audits.samples(b.series, b.analysed)[:2]) for p in pairs for b in p.benchmarks):
        reasons = list(dict.fromkeys(last.findings))  # a call that raised after it tampered left nothing to compare
        detail = TimingDetail(tampered=reasons, who="candidate", confinement=confinement)
        return StageResult(STAGE, "tampered", f"tampered: {'; '.join(reasons)}", seconds, detail, "")
    detail = summarise(pairs, target, confinement, floor)
    after = None if target.on_cpu else evaluator.ask("facts")
    detail = detail.updated(device=facts, cores=evaluator.cores["timing"] if evaluator.cores else None,
                            device_after={k: after.get(k) for k in ("sm_clock_mhz", "mem_clock_mhz",
                                                                    "temperature_c")} if after else None)
    reasons = list(dict.fromkeys(last.findings)) + detail.audit_reasons
    if reasons:
        detail = detail.updated(audit_reasons=ABSENT, tampered=reasons)
        return StageResult(STAGE, "tampered", f"tampered: {'; '.join(reasons)}", seconds, detail, "")
    return StageResult(STAGE, "passed", detail.summary, seconds, detail.updated(audit_reasons=ABSENT, summary=ABSENT),
                       "")
