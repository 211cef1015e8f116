"""Timing stage: base and candidate in two confined runner processes that take turns on the GPU.

One turn is one timed call in one runner while the other runner's whole process group is stopped
(SIGSTOP), so nothing one does can reach the other. Turns alternate order (base first, then candidate
first) and both run the same secret sequence of input sets. A turn is one command (`timed`: arm, fire,
report), so the parent's wall clock around it holds everything the runner did for the call. Inside a turn
the runner copies the set into one of several physical copies (taken in turn), flushes L2, and:
- clock "gpu": spins the GPU longer than the host takes to launch, then events around the call (launch
  hidden; measured on an H100, identical kernels differed by up to 1.5% with the launch exposed);
- clock "call": the GPU idle, events around the whole call (launch included), as GPU MODE times;
- clock "host" (CPU targets): the host's clock around the call.
GPU targets measure both GPU clocks; judge.toml's `clock` says which decides the verdict, and the other one
is measured on one round in OTHER_CLOCK_EVERY
(SIDE_STREAM_OTHER_EVERY once a kernel is found leaving work on a side stream).

Nothing a runner reports is taken on trust. Every timed call's output is checked, by projections, against
the oracle's answer for that input set; the parent's own wall clock around each turn must account for the
time the runner claims (a runner that reports less than it took is `tampered`); a kernel much faster on
inputs it has seen before than on new ones is replaying answers; and the runner's own audit names what the
candidate changed in its process. Rounds go on until the 95% interval of the median ratio on the deciding
clock is within ±1%, or the budget is spent.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from . import audits, stats
from .devices import gate
from .evaluation import Case, Evaluator, derive, fresh, with_seed
from .runner import spin_cycles, spin_for
from .stage_details import ABSENT, TimedBenchmark, TimingDetail
from .stages import StageResult, not_run
from .targets import Target
from .tensors import projection_failure
from .worker import CommandFailed, Worker, WorkerError, tally, time_left

STAGE = "timing"
BUDGET_PER_BENCHMARK_S = 5.0
# Per kernel, on the deciding clock. On an H100 identical kernels' error is set by constant per-process offsets
# more than by repetitions: at 200 the worst self |geomean - 1| was 0.12-0.47% per self-check, at 150 0.21-0.61%
# in five (2026-11-25, docs/judge_performance.md), and every 50 more cost about 460 timed calls, 0.6 s, per candidate.
MIN_REPS = 150
MAX_REPS = 20_000
# The clock that does not decide is measured on one round in this many: its median is shown beside the
# deciding one (about MIN_REPS / 7 repetitions of each kernel). Where the GPU clock decides and a kernel leaves
# work on a side stream, the call clock becomes the one analysed (judge.audits.samples), and from the check that
# finds it on it is measured on one round in SIDE_STREAM_OTHER_EVERY.
OTHER_CLOCK_EVERY = 8
SIDE_STREAM_OTHER_EVERY = 2
# A runner measures the null tail (judge.audits.side_stream_work's yardstick) before one GPU-clock call in this
# many of its own: the pooled median needs no more, and each one is a spin and two syncs.
NULL_TAIL_EVERY = 4
HALF_WIDTH = 0.01


def run_timing(target: Target, candidate: Path, base: Path, *, budget_s: float | None = None,
               timeout_s: float | None = None) -> StageResult:
    """Time the kernel in `candidate` against the one in `base` (a round shares one Evaluator instead)."""
    reason = gate(target.arch)
    if reason:
        return not_run(STAGE, reason)
    candidate = Path(candidate).resolve()
    with Evaluator(target, fresh(candidate.parent / f".{candidate.name}-oracle"), base_dir=Path(base)) as ev:
        try:
            worker = ev.runner(candidate, "timing.log")
            worker.call("load", target.limits.timing_s)
        except (WorkerError, CommandFailed) as error:
            return _stopped(error, 0.0)
        try:
            return measure(ev, worker, candidate, budget_s=budget_s, timeout_s=timeout_s)
        finally:
            worker.close()


def measure(ev: Evaluator, cand: Worker, workspace: Path | None = None, *, budget_s: float | None = None,
            timeout_s: float | None = None) -> StageResult:
    """Time the loaded kernel in `cand` against the round's base on every benchmark. With `workspace` (where
    the candidate is assembled) the kernel is timed in `ev.processes` runners, as the base is."""
    target = ev.target
    limit = timeout_s if timeout_s is not None else target.limits.timing_s
    budget = budget_s if budget_s is not None else BUDGET_PER_BENCHMARK_S * len(target.benchmarks)
    budget = min(budget, 0.5 * limit)
    started = time.monotonic()
    deadline = started + limit
    try:
        bases = ev.bases
    except (WorkerError, CommandFailed) as error:
        ev.drop_base()
        return _stopped(error, time.monotonic() - started, who="base")
    cands = [cand]
    ev.discard_prebound(keep=workspace)  # another kernel's, were there any: nothing else may run while this is timed
    try:
        while workspace is not None and len(cands) < len(bases):
            extra = ev.prebound(workspace)
            if extra is not None:
                cands.append(extra)
                extra.finish(time_left(deadline))  # its bind and load, sent during the correctness stage
                continue
            cands.append(ev.runner(workspace, f"timing-{len(cands)}.log"))
            cands[-1].call("load", time_left(deadline))
        ev.settle()  # the spares: none may touch the GPU while anything is timed
        return _measured(ev, _Session(ev, bases[:len(cands)], cands, deadline), budget, started)
    except (WorkerError, CommandFailed) as error:
        return _stopped(error, time.monotonic() - started)
    finally:
        for extra in cands[1:]:
            extra.close(wait=False)


def _measured(ev: Evaluator, session: "_Session", budget: float, started: float) -> StageResult:
    """Every benchmark in turn, then the audits; the stage's result."""
    target, cands = ev.target, session.cands
    benchmarks, failure = [], None
    facts = None if target.on_cpu else ev.ask("facts")
    try:
        session.freeze()
        left = budget
        for index in range(len(target.benchmarks)):
            share = left / (len(target.benchmarks) - index)
            t0 = time.monotonic()
            bench = session.benchmark(index, share)
            left = max(0.0, left - (time.monotonic() - t0))
            strays = sorted(pid for cand in cands for pid in cand.strays())
            if strays:
                bench.setdefault("strays", strays)
            benchmarks.append(bench)
            if bench.get("failure"):
                failure = bench["failure"]
                break
        audit = [change for cand in cands for change in session.turn(cand, "audit").value]
    except (WorkerError, CommandFailed) as error:
        who = session.last_who
        if who == "base":
            ev.drop_base()
        return _stopped(error, time.monotonic() - started, who=who)
    finally:
        session.thaw()
    seconds = time.monotonic() - started
    detail = summarise(benchmarks, target, cands[0].hello.get("confinement"))
    after = None if target.on_cpu else ev.ask("facts")
    detail = detail.updated(device=facts, device_after={k: after.get(k) for k in (
        "sm_clock_mhz", "mem_clock_mhz", "temperature_c")} if after else None)
    tail = cands[0].log_tail()
    if failure:
        return StageResult(STAGE, "failed", failure, seconds, detail, tail)
    reasons = sorted(set(audit), key=audit.index) + detail.audit_reasons
    if reasons:
        detail = detail.updated(audit_reasons=ABSENT, tampered=reasons)
        return StageResult(STAGE, "tampered", f"tampered: {'; '.join(reasons)}", seconds, detail, tail)
    return StageResult(STAGE, "passed", detail.summary, seconds, detail.updated(audit_reasons=ABSENT, summary=ABSENT),
                       tail)


class _Session:
    """The turns of one candidate's timing: who runs, who is frozen, and the per-benchmark loop.

    Base and candidate each run in as many processes (`bases`, `cands`), taken in pairs in turn: an identical
    kernel timed in two processes differs by a constant 0.1-0.3 us per call on an H100, even on the same
    physical memory, and more processes per kernel average that out."""

    def __init__(self, ev: Evaluator, bases: list[Worker], cands: list[Worker], deadline: float):
        self.ev, self.bases, self.cands, self.deadline = ev, bases, cands, deadline
        self.target = ev.target
        self.clocks = ["host"] if self.target.on_cpu else ["gpu", "call"]
        self.last_who = "candidate"
        self.timed: dict[int, set[int]] = {}
        self.gpu_calls: dict[int, int] = {}
        self.other_every = OTHER_CLOCK_EVERY

    @property
    def workers(self) -> list[tuple[str, Worker]]:
        return [("base", w) for w in self.bases] + [("cand", w) for w in self.cands]

    def freeze(self) -> None:
        for _, worker in self.workers:
            worker.freeze()

    def thaw(self) -> None:
        for _, worker in self.workers:
            if worker.process.poll() is None:
                worker.thaw()

    def pair(self, done: int) -> dict[str, Worker]:
        """The base and candidate runners of a clock's repetition `done`: each pair twice in a row (once
        base first, once candidate first), then the next pair."""
        index = (done // 2) % len(self.cands)
        return {"base": self.bases[index], "cand": self.cands[index]}

    def turn(self, worker: Worker, op: str, **args):
        self.last_who = "base" if worker in self.bases else "candidate"
        reply = worker.call(op, time_left(self.deadline), **args)
        worker.freeze()
        return reply

    def together(self, op: str, **args) -> list[tuple[str, Any]]:
        """One command in every runner at once, each frozen again as it answers: only where nothing is timed
        and every runner's state is rebuilt before its next timed call (inputs set up, sets generated). In turn
        they took 0.65-0.83 s of a round of 8 candidates on an H100 (2026-11-25)."""
        started = time.perf_counter()
        for name, worker in self.workers:
            self.last_who = "base" if name == "base" else "candidate"
            worker.start(op, **args)
        values = []
        for name, worker in self.workers:
            self.last_who = "base" if name == "base" else "candidate"
            values.append((name, worker.finish(time_left(self.deadline)).value))
            worker.freeze()
        tally(f"{op} (every runner at once)", time.perf_counter() - started)
        return values

    def rep(self, worker: Worker, set_index: int, clock: str, spin: dict, expected: list) -> tuple[dict, str | None]:
        """One timed call in one worker's turn, in one command timed by the parent; the worker is frozen again
        right after it, so no other process runs in between."""
        # Whether this is the kernel's first timed call on the set is the parent's own record, not the runner's.
        timed = self.timed.setdefault(id(worker), set())
        cold = set_index not in timed
        timed.add(set_index)
        spin_cycles = null_cycles = 0
        if clock == "gpu":
            calls = self.gpu_calls.get(id(worker), 0)
            self.gpu_calls[id(worker)] = calls + 1
            spin_cycles = spin["cycles"]["spin"]
            null_cycles = spin["cycles"]["null"] if calls % NULL_TAIL_EVERY == 0 else 0
        reply = self.turn(worker, "timed", set_index=set_index, clock=clock, spin_cycles=spin_cycles,
                          null_cycles=null_cycles)
        out = reply.value
        problem = out["problem"] or projection_failure(out["projections"], expected)
        rep = {key: out[key] for key in ("us", "tail_us", "host_us", "null_tail_us")}
        rep.update(cold=cold, set=set_index, wall_us=reply.wall_s * 1e6, pid=worker.pid,
                   spin_us=spin["us"] if clock == "gpu" else 0.0)
        return rep, problem

    def benchmark(self, index: int, share_s: float) -> dict[str, Any]:
        ev, target = self.ev, self.target
        spec = target.benchmarks[index]
        sets = ev.sets_for(index)
        seeds = ev.timing_seeds(index, sets)
        expected = ev.expectations(index, sets)
        distribution = target.distributions[0].name
        plan = ev.plan(Case("benchmark", index, 1, distribution, with_seed(spec, seeds[1])))
        copies = ev.copies_for(index)
        placement = self.place_inputs(index, seeds, plan["slots"], copies)
        # Every set is made before the warm-up, not before its first timed call: the allocations that follow a
        # new set made a kernel with temporaries of its own slower on its first calls on an H100, which the replay
        # check read as answers kept for the sets it had seen.
        for set_index in range(sets):
            self.together("prepare_set", set_index=set_index)
        spin = self.spin([(name, self.turn(w, "warm_up").value) for name, w in self.workers])
        order = random.Random(derive(ev.secret, "order", index))
        series: dict[tuple[str, str], list[dict]] = {(w, c): [] for w in ("base", "cand") for c in self.clocks}
        deciding = target.deciding_clock
        start = time.monotonic()
        rounds, next_check, stopped = 0, MIN_REPS, "max-reps"
        self.timed.clear()
        self.gpu_calls.clear()
        self.other_every = OTHER_CLOCK_EVERY
        while len(series[("base", deciding)]) < MAX_REPS:
            clock = self.clock_of(rounds)
            set_index = set_for(order, rounds, sets)
            rounds += 1
            turns = list(self.pair(len(series[("base", clock)])).items())
            if len(series[("base", clock)]) % 2:  # each clock alternates who goes first
                turns.reverse()
            for name, worker in turns:
                rep, problem = self.rep(worker, set_index, clock, spin, expected[set_index])
                if problem:
                    who = "the base's" if name == "base" else "its"
                    return {"index": index, "failure": f"benchmark {index} ({target.benchmark_label(index)}), "
                            f"timed call {rounds} on input set {set_index} ({clock} clock): {who} {problem}"}
                series[(name, clock)].append(rep)
            if clock != deciding:
                continue
            done = len(series[("base", deciding)])
            if done >= next_check:
                next_check = done + max(50, done // 4)
                base_us, cand_us, method = audits.samples(series, deciding)
                if method == "device-wide":  # side-stream work: the call clock's samples decide from here on
                    self.other_every = SIDE_STREAM_OTHER_EVERY
                ratio, low, high = stats.ratio_ci(base_us, cand_us, resamples=400)
                if stats.precise_enough(ratio, low, high, HALF_WIDTH):
                    stopped = "precise"
                    break
            if time.monotonic() - start > share_s and done >= MIN_REPS:
                stopped = "budget"
                break
        return {"index": index, "series": series, "stopped": stopped, "spin_us": round(spin["us"], 1),
                "sets": sets, "copies": copies, "placement": placement, "processes": len(self.cands),
                "measuring_s": round(time.monotonic() - start, 3)}

    def spin(self, warm_up: list[tuple[str, dict]]) -> dict:
        """The GPU clock's spin for a benchmark: sized from every runner's warm-up launches, converted to cycles
        at the base runners' rate, and the same cycles for every runner (a candidate's reported rate would
        set its own spin, so it is not used)."""
        if "gpu" not in self.clocks:
            return {"us": 0.0, "cycles": {"spin": 0, "null": 0}}
        spin_us = spin_for([us for _, reply in warm_up for us in reply["host_us"]])
        rate = stats.median([reply["cycles_per_us"] for name, reply in warm_up if name == "base"])
        return {"us": spin_us, "cycles": spin_cycles(spin_us, rate)}

    def place_inputs(self, index: int, seeds: list[int], slots: list[str], copies: int) -> str:
        """Set up a benchmark's inputs in every runner: on the oracle's shared slots where all can map them (the
        kernels then run on the same physical memory), else each on copies of its own. Returns what was used,
        and why not shared, for the report."""
        ev, spec = self.ev, self.target.benchmarks[index]
        distribution = self.target.distributions[0].name

        def setup(shared: dict | None) -> list[tuple[str, dict]]:
            return self.together("setup_benchmark", spec=spec, distribution=distribution, seeds=seeds, slots=slots,
                                 projection_seed=ev.projection_seed(index), copies=copies, shared=shared)

        if self.target.on_cpu:
            setup(None)
            return "separate"
        shared = ev.ask("share", spec=with_seed(spec, seeds[0]), distribution=distribution, copies=copies)
        if "error" in shared:
            setup(None)
            return f"separate (no shared slots: {shared['error']})"
        refused = [(name, placed.get("refused")) for name, placed in setup(shared) if placed["placement"] != "shared"]
        if not refused:
            return "shared"
        setup(None)  # neither kernel may run on memory the other does not
        name, why = refused[0]
        return f"separate (a {'base' if name == 'base' else 'candidate'} runner could not map the shared slots: {why})"

    def clock_of(self, round_index: int) -> str:
        """The clock of a round: the deciding one, and the other one on one round in `other_every`."""
        deciding = self.target.deciding_clock
        others = [c for c in self.clocks if c != deciding]
        every = self.other_every
        if others and round_index % every == every - 1:
            return others[(round_index // every) % len(others)]
        return deciding


def set_for(order: random.Random, round_index: int, sets: int) -> int:
    """The input set of a round: set k is first used at round k * (MIN_REPS // sets), every other round draws
    among the sets already in use. First calls on a set, which the replay check compares with the calls around
    them, are then spread over the series instead of bunching at its start: on an H100 a process's first calls
    of a benchmark ran up to 1.75x slower now and then (2026-11-25), which read as a replay when they were
    mostly first calls."""
    spacing = max(1, MIN_REPS // sets)
    if round_index % spacing == 0 and round_index // spacing < sets:
        return round_index // spacing
    return order.randrange(min(sets, 1 + round_index // spacing))


def summarise(benchmarks: list[dict], target: Target, confinement: dict | None) -> TimingDetail:
    """Per-benchmark medians, speedups and intervals on the deciding clock, the other clocks' medians, the
    audits (`audit_reasons`), and the geometric mean (with its `summary` line)."""
    deciding = target.deciding_clock
    out, pairs, reasons = [], [], []
    for bench in benchmarks:
        if bench.get("failure"):
            continue
        series, i = bench["series"], bench["index"]
        base_us, cand_us, method = audits.samples(series, deciding)
        ratio, low, high = stats.ratio_ci(base_us, cand_us)
        pairs.append((base_us, cand_us))
        clocks = {}
        for clock in sorted({c for _, c in series}):
            b, c, _ = audits.samples(series, clock)
            clocks[clock] = {"base_median_us": round(stats.median(b), 3), "cand_median_us": round(stats.median(c), 3),
                             "speedup": round(stats.median(b) / stats.median(c), 5), "reps": len(b)}
        audit = audits.audit(series, deciding)
        reasons += [f"benchmark {i}: {r}" for r in audit.pop("reasons")]
        if bench.get("strays"):
            reasons.append(f"benchmark {i}: processes it started left its process group and kept running while "
                           f"the base was timed (pids {', '.join(map(str, bench['strays']))})")
        out.append(TimedBenchmark(
            index=i, label=target.benchmark_label(i), clock=deciding,
            base_median_us=round(stats.median(base_us), 3), cand_median_us=round(stats.median(cand_us), 3),
            speedup=round(ratio, 5), ci_low=round(low, 5), ci_high=round(high, 5),
            significant=stats.significant(low, high), reps=len(base_us), stopped=bench["stopped"],
            method=method, clocks=clocks, audit=audit, spin_us=bench["spin_us"], sets=bench["sets"],
            copies=bench["copies"], placement=bench["placement"], processes=bench["processes"],
            process_medians_us=_process_medians(series[("base", deciding)], series[("cand", deciding)]),
            measuring_s=bench["measuring_s"], base_us=_rounded(base_us), cand_us=_rounded(cand_us),
            speed_of_light_us=target.speed_of_light_us[i] if target.speed_of_light_us else ABSENT,
        ))
    detail = TimingDetail(benchmarks=out, clock=deciding, confinement=confinement, max_speedup=target.max_speedup,
                          min_effect=target.min_effect, audit_reasons=reasons, method=METHOD[deciding])
    if not pairs:
        return detail
    point, low, high = stats.geomean_ci(pairs)
    n = len(out)
    return detail.updated(
        summary=f"geomean {point:.3f}x [{low:.3f}, {high:.3f}] over {n} benchmark{'s' if n != 1 else ''}",
        geomean=round(point, 5), geomean_ci=[round(low, 5), round(high, 5)],
        significant=stats.significant(low, high),
        measuring_s=round(sum(b.measuring_s for b in out), 3))


METHOD = {
    "gpu": "separate base and candidate processes taking turns (order and input sets alternated, physical input "
           "copies taken in turn), L2 flushed, launch hidden behind a GPU spin, CUDA events; device-wide span where "
           "a kernel leaves side-stream work",
    "call": "separate base and candidate processes taking turns (order and input sets alternated, physical input "
            "copies taken in turn), L2 flushed, GPU idle at the start, CUDA events around the whole call (launch "
            "included), device-wide",
    "host": "separate base and candidate processes taking turns (order and input sets alternated, physical input "
            "copies taken in turn), the host's clock around the call",
}


def _process_medians(base: list[dict], cand: list[dict]) -> dict[str, list[float]]:
    """The deciding clock's median per runner process of each kernel, in the order the processes first ran."""
    def medians(reps: list[dict]) -> list[float]:
        pids = list(dict.fromkeys(r["pid"] for r in reps))
        return [round(stats.median([r["us"] for r in reps if r["pid"] == pid]), 3) for pid in pids]
    return {"base": medians(base), "cand": medians(cand)}


def _stopped(error: Exception, seconds: float, who: str = "candidate") -> StageResult:
    if isinstance(error, CommandFailed):
        status, message, log = "crashed", error.error, error.log_tail
    else:
        status, message, log = error.status, error.message, error.log_tail
    prefix = "the base's runner " if who == "base" else ""
    return StageResult(STAGE, status, f"{status}: {prefix}{message}", seconds, TimingDetail(error=message, who=who),
                       log)


def _rounded(values: list[float]) -> list[float]:
    return [round(x, 3) for x in values]
