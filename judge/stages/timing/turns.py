"""One process pair's timed turns on one benchmark: the base's runner and the candidate's, each in its call
frame (judge.boundary.callframe), taking turns while the other is stopped, the oracle writing each call's input set in
between and checking each call's output.

A turn is: the oracle checks the previous call's output (read from that runner's own outboxes, each span zeroed once
read), then writes this call's set into a copy in the calling runner's own memory (with NaN in the outputs and, on
the GPU clocks, the L2 flush buffer written last), all while every runner is stopped; then one record to the runner
whose turn it is, which calls the kernel and answers with its times and where it put the output. The parent's clock
times the record's round trip.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Any

from . import audits
from ... import stats
from ...boundary import callframe
from ...boundary.runner import LONG_CALL_US
from ...sandbox.worker import Worker, time_left

# The analysed clock's repetitions per kernel in one process pair and benchmark. Three pairs give 150, which on an
# H100 put the worst self |geomean - 1| at 0.21-0.61% in five self-checks (2026-11-25, docs/judge_performance.md).
REPS_PER_PAIR = 50
# A kernel whose calls are long needs fewer: as many as take MEASURE_S of its time, at least MIN_REPS (calls under
# 5 ms, the FP8 target's among them, keep all 50). A call that alone takes MEASURE_S is timed once per kernel and
# pair, after its warm-up: the verdict's statistics are over pairs (at least three), and one such call on a set
# neither process has seen varies less than the pairs do (linalg/qr_v2's 1 s calls: 0.4% between pairs on an H200,
# 2026-11-29). A second one cost every pair 2 s a kernel there.
MEASURE_S = 0.25
MIN_REPS = 1
# Where both kernels' calls are steady, fewer say as much: a benchmark's turns in a pair stop once each kernel has
# the steady repetitions (steady_reps_for) on the analysed clock and its median is pinned to within PRECISION (half
# the width of a 95% interval of the median, stats.median_half_width), the sets of that clock all used; else they go
# on to `reps`. A pair's ratio is then known to about 0.7%, against control floors of 1.9-7.7% (H100 and H200,
# 2026-11). The steady repetitions are as many as take PRECISE_S of turns, at most PRECISE_REPS and never fewer than
# FEWEST_STEADY: the shortest series whose interval of the median leaves out its fastest and its slowest call, so
# that one wild call on either side still cannot pin it. A turn costs its call and judge's own step around it (the
# oracle's check and next set, the record's round trip, the spin and syncs): 4.4 ms a turn for amd/fp8-mm's 0.02-1.4 ms
# calls on an H200 (2026-11-30), so that twenty turns of those short calls were 88 ms of a pair's benchmark. The step
# is the base runner's, measured on the benchmark before (stage._benchmark); before it is known, the call alone.
# Twenty steady calls of cholesky_py's 3.6-14.6 ms kernels cost a pair 1.9 s (H200, 2026-11-29), where their pairs'
# ratios moved together by up to 1% from process to process.
PRECISE_REPS = 20
PRECISE_S = 0.05
FEWEST_STEADY = 8
PRECISION = 0.005
MAX_ROUNDS = 4000
# The clock that does not decide is measured on one round in this many (about REPS_PER_PAIR / 7 repetitions).
# Where the GPU clock decides and a kernel leaves work on a side stream, the call clock becomes the one analysed
# and is measured on one round in SIDE_STREAM_OTHER_EVERY, from the check that finds the side-stream work on.
OTHER_CLOCK_EVERY = 8
SIDE_STREAM_OTHER_EVERY = 2
SIDE_STREAM_CHECK_AT = (16, 32)
# A runner measures the null tail (judge.stages.timing.audits.side_stream_work's yardstick) before one GPU-clock call in this
# many of its own: the pooled median needs no more, and each one is a spin and two syncs.
NULL_TAIL_EVERY = 4
# Two flags of the same kind share this many leading characters (their numbers come later): one of each is kept.
FLAG_KIND_CHARS = 40


@dataclass(frozen=True)
class PendingCheck:
    """A timed call whose output the oracle has yet to check: whose, on which clock, and what the oracle reads."""

    who: str
    clock: str
    verify: dict  # the oracle's `turn` command's verify: runner, set, copy, leaves, structure


class PairTurns:
    """The turns of one benchmark in one process pair, or group (the base beside several kernels, each its own
    runner, keyed by the name it has in `runners`; "base" is always one): who runs, which copy, which set, which
    clock. Every member calls once per round on the round's set, in an order that a pair alternates and a group
    draws each round (order_of_round)."""

    def __init__(self, evaluator, key: str, index: int, runners: dict[str, Worker], clocks: list[str], deciding: str,
                 sets: int, copies: int, spin: dict, rng: random.Random, first: str, deadline: float,
                 reps: int = REPS_PER_PAIR, steady: int = PRECISE_REPS):
        self.evaluator, self.key, self.index, self.runners = evaluator, key, index, runners
        self.reps, self.steady = reps, steady
        self.clocks, self.deciding, self.sets, self.copies = clocks, deciding, sets, copies
        self.spin, self.rng, self.first, self.deadline = spin, rng, first, deadline
        self.members = members_in_order(runners, first)
        self.series: dict[tuple[str, str], list[dict]] = {(w, c): [] for w in self.members for c in clocks}
        self.flags: dict[str, list[str]] = {w: [] for w in self.members}
        self.calls: dict[tuple[str, str], int] = {}
        self.timed: dict[str, set[int]] = {w: set() for w in self.members}
        self.used: set[int] = set()
        self.other_every = OTHER_CLOCK_EVERY
        self.pending: PendingCheck | None = None  # the last call's output, not yet checked by the oracle
        self.serials: dict[str, int] = {}
        self.failure: str | None = None
        self.failed_who: str | None = None  # whose call the failure was
        self.base_steps_us: list[float] = []  # each base turn's seconds beyond its call: judge's own step
        self.last_who = self.members[-1]

    def run(self) -> None:
        """Every round until the analysed clock has `reps` repetitions per kernel (or a failure)."""
        schedule = first_uses(self.sets, self.clocks, self.deciding, self.other_every, self.least_reps)
        rounds = 0
        while rounds < MAX_ROUNDS and self.failure is None:
            analysed = self.analysed_clock()
            if len(self.series[("base", analysed)]) >= self.reps or self.precise(analysed, schedule):
                break
            clock = clock_of(rounds, self.clocks, self.deciding, self.other_every)
            set_index = set_for(schedule, self.used, self.rng, clock, len(self.series[("base", clock)]))
            self.used.add(set_index)
            for who in self.order_of_round(len(self.series[("base", clock)])):
                if not self.turn(who, clock, set_index):
                    break
            rounds += 1
            if self.deciding == "gpu" and rounds in SIDE_STREAM_CHECK_AT and "call" in self.clocks:
                if any(audits.samples(member_view(self.series, who), "gpu")[2] == "device-wide"
                       for who in self.kernels):
                    self.other_every = SIDE_STREAM_OTHER_EVERY
        self.settle_last()

    def order_of_round(self, count: int) -> list[str]:
        """Who calls in which order in a round where each member has called `count` times on its clock: a pair
        alternates who goes first; a group draws its order each round, so that no kernel always follows the same
        one (a rotation would: on a CPU an identical copy that always ran right after the base came out 1.035x
        [1.029, 1.041] where its pairs read 0.984x [0.933, 1.039], 2026-11-30)."""
        if len(self.members) == 2:
            return rotated(self.members, count)
        return self.rng.sample(self.members, len(self.members))

    @property
    def least_reps(self) -> int:
        """The repetitions every benchmark gets on its analysed clock, however steady (the steady repetitions, or
        `reps` where that is fewer): the first uses of the sets are spread over them."""
        return min(self.reps, self.steady)

    def precise(self, clock: str, schedule: dict[str, dict[int, int]]) -> bool:
        """Whether the turns may stop before `reps`: both kernels have `least_reps` calls on `clock`, each one's
        median pinned to PRECISION, and every set planned for `clock` has had its first use, so that the replay
        check has as many first calls on the clock it reads as a longer series would give it. Never while the
        GPU clock's samples show side-stream work the check at SIDE_STREAM_CHECK_AT has not yet moved to the call
        clock: the verdict would read the call clock's few calls."""
        if min(len(self.series[(who, clock)]) for who in self.members) < self.least_reps:
            return False
        if not set(schedule.get(clock, {}).values()) <= self.used:
            return False
        for who in self.kernels:
            base, cand, method = audits.samples(member_view(self.series, who), clock)
            if method == "device-wide":
                return False
            if stats.median_half_width(base) > PRECISION or stats.median_half_width(cand) > PRECISION:
                return False
        return True

    @property
    def kernels(self) -> list[str]:
        """The members timed against the base."""
        return [who for who in self.members if who != "base"]

    def base_step_us(self) -> float:
        """The typical step judge takes around one of the base's calls (the oracle's check of the call before and the
        next set, the record's round trip, the spin, the syncs). The base's turns: a candidate's own round trips never
        size it, and an output slow to check brings the steady repetitions no lower than FEWEST_STEADY, which must
        still pin each median to PRECISION."""
        return stats.median(self.base_steps_us) if self.base_steps_us else 0.0

    def analysed_clock(self) -> str:
        """The clock whose samples decide: the call clock where side-stream work moved the GPU clock's there."""
        if self.other_every == SIDE_STREAM_OTHER_EVERY:
            return "call"
        return self.deciding

    def turn(self, who: str, clock: str, set_index: int) -> bool:
        """One timed call of `who` on `set_index`; False once the benchmark has failed."""
        worker = self.runners[who]
        self.last_who = who
        began = time.perf_counter()
        copy = self.calls.get((who, clock), 0) % self.copies
        self.calls[(who, clock)] = self.calls.get((who, clock), 0) + 1
        stage = {"set": set_index, "copy": copy, "runners": [worker.pid], "flush": clock != "host"}
        if not self.check_pending(stage):
            return False
        spin = null = least = 0
        if clock == "gpu":
            spin, least = self.spin["cycles"]["spin"], self.spin["cycles"]["least"]
            gpu_calls = len(self.series[(who, "gpu")])
            null = self.spin["cycles"]["null"] if gpu_calls % NULL_TAIL_EVERY == 0 else 0
        serial_box = []

        def record_for(serial: int) -> bytes:
            serial_box.append(serial)
            return callframe.command(serial, callframe.OP_CALL, clock, copy, spin, null, least)

        reply = worker.record(record_for, time_left(self.deadline), "timed")
        worker.freeze()
        out = reply.value
        self._note_flags(who, out)
        if out.get("status") == callframe.RAISED:
            self.failure = "raised"
            return False
        cold = set_index not in self.timed[who]
        self.timed[who].add(set_index)
        rep = {"us": out["us"], "tail_us": out["tail_us"], "host_us": out["host_us"],
               "null_tail_us": out["null_tail_us"] if out["null_tail_us"] >= 0 else None, "cold": cold,
               "set": set_index, "wall_us": reply.wall_s * 1e6, "pid": worker.pid,
               "spin_us": self.spin["us"] if clock == "gpu" else 0.0, "others_cpu_us": out.get("others_cpu_us")}
        self.series[(who, clock)].append(rep)
        if who == "base":
            self.base_steps_us.append((time.perf_counter() - began) * 1e6 - out["us"])
        if out["status"] == callframe.BAD_OUTPUT:
            self.fail(who, clock, set_index, out["problem"])
            return False
        self.pending = PendingCheck(who, clock, {"runner": worker.pid, "set": set_index, "copy": copy,
                                                  "leaves": out["leaves"], "structure": out.get("structure")})
        if out.get("release"):
            self.release(who)
        return True

    def check_pending(self, stage: dict | None) -> bool:
        """The oracle checks the previous call's output and writes the next set, in one step."""
        pending, self.pending = self.pending, None
        answer = self.evaluator.ask("turn", key=self.key, verify=pending.verify if pending else None, stage=stage)
        if pending and answer["problem"]:
            self.fail(pending.who, pending.clock, pending.verify["set"], answer["problem"])
            return False
        return True

    def release(self, who: str) -> None:
        """Let a runner drop the results it kept, once the oracle has read the last one."""
        if not self.check_pending(None):
            return
        worker = self.runners[who]
        worker.record(lambda serial: callframe.command(serial, callframe.OP_RELEASE), time_left(self.deadline),
                      "release")
        worker.freeze()

    def _note_flags(self, who: str, out: dict) -> None:
        for flag in frame_flags(out):
            if not any(seen.startswith(flag[:FLAG_KIND_CHARS]) for seen in self.flags[who]):
                self.flags[who].append(flag)  # the first call that showed each kind of evidence

    def settle_last(self) -> None:
        if self.pending is not None and self.failure is None:
            self.check_pending(None)

    def fail(self, who: str, clock: str, set_index: int, problem: str) -> None:
        count = len(self.series[(who, clock)])
        whose = "the base's" if who == "base" else "its"
        self.failed_who = who
        self.failure = (f"benchmark {self.index} ({self.evaluator.target.benchmark_label(self.index)}), timed call "
                        f"{count} on input set {set_index} ({clock} clock): {whose} {problem}")


def members_in_order(runners: dict, first: str) -> list[str]:
    """The members of a pair or group in the order of their first round: `first`, then the others in the order
    `runners` lists them."""
    names = list(runners)
    if first not in names:
        return names
    at = names.index(first)
    return names[at:] + names[:at]


def rotated(members: list[str], count: int) -> list[str]:
    """`members` rotated by `count`: for a pair, who goes first alternates round by round."""
    at = count % len(members)
    return members[at:] + members[:at]


def member_view(series: dict[tuple[str, str], list[dict]], who: str) -> dict[tuple[str, str], list[dict]]:
    """A group's series as the pair of the base and `who` (keys "base" and "cand"), which the audits and the
    summary read."""
    return {("base" if w == "base" else "cand", clock): reps for (w, clock), reps in series.items()
            if w in ("base", who)}


def frame_flags(out: dict[str, Any]) -> list[str]:
    """What a call's reply says could have run Python in judge's frame after the call (judge.boundary.callframe)."""
    flags = []
    if out.get("modes"):
        flags.append("a torch function or dispatch mode was active after its call")
    if out.get("hooks"):
        flags.append("its call left a profile or trace function set")
    if out.get("monitoring"):
        flags.append("its call left a sys.monitoring tool with events")
    if out.get("dispatch_changed"):
        flags.append("its call registered a kernel of its own for an operator judge's copy uses")
    if out.get("threads", 0) > 0:
        flags.append("its call started a Python thread that was still alive after it")
    if out.get("builtins"):
        names = [f"builtins.{name}" for name in out["builtins"]]
        flags.append(f"its call replaced {', '.join(names[:8])}" + (f" and {len(names) - 8} more" if names[8:] else ""))
    if out.get("wait_changed"):
        flags.append("its call changed what judge's GPU wait before each call is launched with")
    if out.get("thread_in_kernel"):
        flags.append(f"a thread ran the kernel's code after its call returned ({out['thread_in_kernel']})")
    return flags


def clock_of(round_index: int, clocks: list[str], deciding: str, every: int) -> str:
    """The clock of a round: the deciding one, and the other one on one round in `every`."""
    others = [c for c in clocks if c != deciding]
    if others and round_index % every == every - 1:
        return others[(round_index // every) % len(others)]
    return deciding


def clocks_for(on_cpu: bool, deciding: str, call_us: float) -> tuple[list[str], str]:
    """The clocks a benchmark's pair measures and the one that decides. Calls of LONG_CALL_US or more (both kernels'
    warm-up calls, the shorter one's) are timed on the call clock alone: their launch is nothing beside them, the
    call clock holds any side-stream work, and the GPU clock's spin and its own repetitions would only add calls."""
    if on_cpu:
        return ["host"], deciding
    if call_us >= LONG_CALL_US:
        return ["call"], "call"
    return ["gpu", "call"], deciding


def reps_for(call_us: float) -> int:
    """Repetitions per kernel in a pair and benchmark for calls of `call_us`: REPS_PER_PAIR, fewer for long calls."""
    if call_us <= 0:
        return REPS_PER_PAIR
    return max(MIN_REPS, min(REPS_PER_PAIR, math.ceil(MEASURE_S * 1e6 / call_us)))


def steady_reps_for(call_us: float, step_us: float = 0.0) -> int:
    """The calls per kernel after which a pair's steady turns on a benchmark of `call_us` calls may stop: as many as
    take PRECISE_S of turns, each the call and judge's `step_us` around it, from FEWEST_STEADY to PRECISE_REPS."""
    if call_us <= 0:
        return PRECISE_REPS
    return max(FEWEST_STEADY, min(PRECISE_REPS, math.ceil(PRECISE_S * 1e6 / (call_us + max(0.0, step_us)))))


def first_uses(sets: int, clocks: list[str], deciding: str, every: int,
               reps: int = REPS_PER_PAIR) -> dict[str, dict[int, int]]:
    """When each set is first used, per clock: by the clock's own count of calls, the sets split between the
    clocks (even sets on the deciding clock, odd ones on the other), each clock's share spread over its calls.
    Every clock then holds first calls of several sets, so that the replay check has first calls to compare on
    the clock it reads, the call clock included where side-stream work moves the verdict there.

    The other clock's first calls start after the calls the replay check leaves out (audits.SKIP_FIRST_CALLS: a
    clock's first timed call of a benchmark is slow for every kernel), which take sets the deciding clock has
    used; a set first used there would give the replay check nothing to compare."""
    others = [c for c in clocks if c != deciding]
    if not others:
        spacing = max(1, reps // sets)
        return {deciding: {s * spacing: s for s in range(sets)}}
    split = {deciding: [s for s in range(sets) if s % 2 == 0], others[0]: [s for s in range(sets) if s % 2 == 1]}
    calls = {deciding: reps, others[0]: max(2, reps // every)}
    start = {deciding: 0, others[0]: audits.SKIP_FIRST_CALLS}
    plan = {}
    for clock, own in split.items():
        spacing = max(1, (calls[clock] - start[clock]) // max(1, len(own)))
        plan[clock] = {start[clock] + n * spacing: s for n, s in enumerate(own)}
    return plan


def set_for(schedule: dict[str, dict[int, int]], used: set[int], rng: random.Random, clock: str, call: int) -> int:
    """The input set of a clock's `call`-th call: the set scheduled for its first use there, else one of the sets
    already used on either clock, drawn at random."""
    planned = schedule.get(clock, {}).get(call)
    if planned is not None:
        return planned
    pool = sorted(used)
    return pool[rng.randrange(len(pool))] if pool else 0
