"""What a round's timing may hold of the device, and how it is spent.

Each benchmark's timing needs its input sets (kept by the oracle), the copies the timed calls run on and the
outboxes (both in each runner's own memory), the reference's answers and the two runners' own working memory.
judge sizes all of it from what the oracle measured of the benchmark (its input and output bytes, the reference's
working memory beyond them) and what the device had free when timing began, so that judge's processes together
never hold more than ROUND_SHARE of the device: a benchmark's sets and copies start at their minimum and grow while
the round stays inside that share. A benchmark that cannot fit even at its minimum is refused before anything is
timed, in one line with both sizes.

The estimate of a runner's working memory is the reference's (the oracle's measurement on the same input): a
kernel that needs far more than its reference can still exhaust the device; it then fails as that kernel's crash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from ..boundary.kept_inputs import MIN_MAKING_S
from ..boundary.memory import ran_out  # noqa: F401 (the stages ask budget.ran_out)
from ..errors import JudgeError

# Of the device's total memory, what judge's processes (oracle, runners, spares) may hold together.
ROUND_SHARE = 0.8
# Timing input sets per benchmark, and the physical copies the timed calls take in turn: the bounds, and the bytes
# past which more of them buy nothing (more copies averaged out where buffers land, which moved one vecadd's time by
# up to 1.6% among eight allocations on an H100; sets are what the replay check compares first uses across).
MIN_SETS, MAX_SETS, SETS_CAP_BYTES = 2, 8, 4 << 30
MIN_COPIES, MAX_COPIES, COPIES_CAP_BYTES = 2, 8, 2 << 30
# Processes that hold a benchmark's output and working memory at once while it is timed: the pair's two runners and
# the oracle computing an answer.
HOLDERS = 3
# Runners that hold a benchmark's copies, each in its own memory (judge.boundary.staging): the pair's two. A process
# group's runners are one more for each kernel past the first (MemoryPlan.runners), and so are its holders.
COPY_HOLDERS = 2
# What a timed runner may hold past its plan: this share of what the plan gives it (runner_need), at most the cache
# the oracle keeps (DeviceMemory.cache). A runner empties torch's cache as each benchmark is laid out, so it holds
# what the plan counts and its spare's CUDA context, which the device's memory in use already shows: cholesky_py's
# runners held 13,022 MiB each on an H200 (2026-12-01) against a plan of 12,500 MiB and a context of 520 MiB.
RUNNER_MARGIN = 0.125
# The most kernels a process group times beside the base (judge.stages.timing.group); fewer where the device has no
# room for their runners (plan_group, kernels_per_group).
MAX_GROUP = 6
GIB = 1 << 30


@dataclass(frozen=True)
class DeviceMemory:
    """The memory of the device the timing runs on (a GPU, or the host for a CPU target), as the oracle found it."""

    name: str
    total: int
    free: int
    cache: int = 0  # what the oracle may keep cached beside its plan (torch's on a GPU; judge.boundary.memory)

    @property
    def in_use(self) -> int:
        """What others hold: judge's spares and prebound runners, and the oracle's L2 flush buffer, among them."""
        return max(0, self.total - self.free)

    @property
    def usable(self) -> int:
        """What judge may still take: ROUND_SHARE of the total, less what is in use by anyone already."""
        return int(ROUND_SHARE * self.total) - self.in_use


@dataclass(frozen=True)
class BenchmarkBytes:
    """A benchmark's sizes, measured by the oracle on one input."""

    input: int
    output: int
    work: int = 0  # the reference's peak beyond its inputs and outputs
    making: int = 0  # generate_input's peak beyond the input it makes
    weights: int = 0  # the projections' weights of its outputs (int8), which every holder keeps for the benchmark
    making_s: float = 0.0  # seconds generate_input took for that input: what keeping its sets saves per set

    def fixed(self, holders: int = HOLDERS) -> int:
        """What timing this benchmark holds whatever its sets and copies: one more input (the set an answer is
        computed on), and output, working memory and weights in each of its `holders` (the runners and the oracle)."""
        return self.input + holders * (self.output + self.work + self.weights)

    def area(self, copies: int) -> int:
        """What a runner allocates for this benchmark: its copies of the input and its device outbox after them, which
        holds the output once (judge.boundary.staging)."""
        return copies * self.input + self.output

    def answering(self) -> int:
        """What the oracle takes to answer a set: a copy of its input, the answer and the reference's working
        memory, and the weights it projects the answer with."""
        return self.input + self.output + self.work + self.weights

    def peak(self, eager: bool, holders: int = HOLDERS) -> int:
        """The fixed needs and the making of an input: made as a set is first used (while the runners hold their
        outputs) the two add up. Made and answered before the runners run the benchmark (`eager`), the largest of
        the making, the answering, and the calls: the runners' outputs, working memory and weights, and the weights
        the oracle checks their outputs with."""
        if not eager:
            return self.fixed(holders) + self.making
        calls = (holders - 1) * (self.output + self.work + self.weights) + self.weights
        return max(calls, self.making, self.answering())


UNTIMED = BenchmarkBytes(input=0, output=0)
"""What the plan holds for a benchmark that is never timed (benchmark_sizes)."""


@dataclass(frozen=True)
class BenchmarkPlan:
    sets: int
    copies: int
    eager: bool = False  # every set made when the benchmark is laid out, not at its first use (judge.boundary.oracle)


@dataclass(frozen=True)
class MemoryPlan:
    device: DeviceMemory
    benchmarks: list[BenchmarkPlan]
    need: int  # bytes the plan holds at its peak
    kept: tuple[bool, ...] = ()  # per benchmark: its sets held all round, kept from one pair to the next
    runners: int = COPY_HOLDERS  # the timed runners it holds at once: the base's and one per kernel of a group


def ran_out_line(error: Exception | str) -> str:
    """An out-of-memory error without the oracle's prefix (where it was the oracle's) and without the list of every
    process on the device that torch's message goes on with."""
    text = re.sub(r"^.*?the reference failed in the oracle \(\w+\): ", "", str(error))
    return re.split(r"\. Process \d+ has|\. Including non-PyTorch|; see ", text)[0][:300]


def kernel_ran_out(error: str, whose: str = "its") -> str:
    """The reason a kernel whose own call ran out of device memory is not run rather than crashed: judge's processes
    (the oracle, the spares, the other runner of a pair) held part of the device that GPU MODE's eval.py, one
    process, would have left it, so the failure is no verdict on the kernel (trimul's wrong variant on an H100,
    2026-11-28, was called crashed so). A kernel that raises such an error itself only gives up its verdict."""
    return f"{whose} call ran out of device memory beside judge's own processes ({ran_out_line(error)})"


def gib(nbytes: int) -> str:
    return f"{nbytes / GIB:.1f} GiB"


def need_of(sizes: list[BenchmarkBytes], plans: list[BenchmarkPlan], kept: bool | tuple[bool, ...] = False,
            runners: int = COPY_HOLDERS) -> int:
    """The peak bytes of a plan for `runners` timed runners (a pair's two, or a group's): each runner holds the copies and outbox of the largest benchmark it
    has built (its memory grows, and is reused for smaller ones), while one benchmark at a time holds its fixed
    needs and its sets and warm-up set; a benchmark whose sets are `kept` (all, or per benchmark) from one pair to the
    next holds them all round, and the oracle the projection weights of their answers. trimul's oracle held
    18,002 MiB of tensors with every benchmark's sets kept (H200, 2026-11-29): by their shapes, 14,400 MiB of sets
    and 3,328 MiB of weights, which the plan had not counted."""
    keep = _per_benchmark(kept, len(sizes))
    areas = runners * max((s.area(p.copies) for s, p in zip(sizes, plans)), default=0)
    sets = [(p.sets + 1) * s.input for s, p in zip(sizes, plans)]
    held = sum(n + s.weights for s, n, k in zip(sizes, sets, keep) if k)
    # at a kept benchmark's own peak its weights are already among its holders'
    peaks = [s.peak(p.eager, runners + 1) + (-s.weights if k else n) for s, p, n, k in zip(sizes, plans, sets, keep)]
    return areas + held + max(peaks, default=0)


def _per_benchmark(kept: bool | tuple[bool, ...], count: int) -> tuple[bool, ...]:
    return (bool(kept),) * count if isinstance(kept, bool) else tuple(kept)


def plan_memory(device: DeviceMemory, sizes: list[BenchmarkBytes], labels: list[str],
                kept: bool | tuple[bool, ...] = False, runners: int = COPY_HOLDERS) -> MemoryPlan:
    """Sets and copies per benchmark within `device.usable`: each at its floor (_floors), then grown in turn
    (copies, then sets, smallest benchmarks first) up to their caps while the plan leaves its processes their
    margins (fits: growth only buys time and averaging; cholesky_py's round, grown to the last byte, ran an H100
    out). Sets grow only where making one is quick (under MIN_MAKING_S): trimul's seqlen-768 Cauchy
    inputs take 2.9 s each on an H200, and grown to eight sets they cost 22.6 s of every pair (2026-11-29). Raises
    JudgeError naming the first benchmark that cannot fit at its minimum, or the sum where they cannot fit
    together. `runners`: the timed runners it holds at once (a group's, MemoryPlan.runners)."""
    plans = _floors(device, sizes, labels, kept, runners)
    order = sorted(range(len(sizes)), key=lambda i: sizes[i].input)
    for field, cap_count, cap_bytes in (("copies", MAX_COPIES, COPIES_CAP_BYTES), ("sets", MAX_SETS, SETS_CAP_BYTES)):
        grown = True
        while grown:
            grown = False
            for i in order:
                current = getattr(plans[i], field)
                if current >= cap_count or (current + 1) * sizes[i].input > max(cap_bytes, sizes[i].input * 2):
                    continue
                if field == "sets" and plans[i].eager:
                    continue  # made up front, a set a kernel never runs on would cost its making anyway
                if field == "sets" and sizes[i].making_s >= MIN_MAKING_S:
                    continue  # each set more is made again in every pair, or once a round where kept: seconds each
                trial = list(plans)
                trial[i] = BenchmarkPlan(**{**plans[i].__dict__, field: current + 1})
                if fits(device, sizes, trial, kept, runners):
                    plans, grown = trial, True
    return MemoryPlan(device, plans, need_of(sizes, plans, kept, runners), _per_benchmark(kept, len(sizes)), runners)


# A benchmark's least sets and copies, in the order they are preferred: one copy where two do not fit (the calls then
# take the same memory in turn; copies only average out where buffers land); two sets at least, or a kernel could
# replay one answer unseen; and where even that does not fit, its sets made up front, before the runners hold
# anything of it.
FLOORS = (BenchmarkPlan(MIN_SETS, MIN_COPIES), BenchmarkPlan(MIN_SETS, 1), BenchmarkPlan(MIN_SETS, MIN_COPIES, True),
          BenchmarkPlan(MIN_SETS, 1, True))


def _floors(device: DeviceMemory, sizes: list[BenchmarkBytes], labels: list[str],
            kept: bool | tuple[bool, ...], runners: int = COPY_HOLDERS) -> list[BenchmarkPlan]:
    """Each benchmark's first floor that fits it alone; then, while the benchmarks do not fit together (every one's
    copies stay allocated while a pair runs), the largest step down first, each to its first floor that makes
    them fit, else to its floor that needs least itself. JudgeError where one cannot fit alone, or all not together."""
    usable = device.usable
    plans = []
    for index, size in enumerate(sizes):  # a floor that leaves the processes their margins, else one that fits at all
        floor = (next((p for p in FLOORS if fits(device, [size], [p], False, runners)), None) or
                 next((p for p in FLOORS if need_of([size], [p], False, runners) <= usable), None))
        if floor is None:
            raise _cannot_fit(index, labels[index], size, device,
                              f"{gib(max(usable, 0))} ({ROUND_SHARE:.0%} of it less {gib(device.in_use)} in use)")
        plans.append(floor)
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i].input):
        if need_of(sizes, plans, kept, runners) <= usable:
            break
        lower = FLOORS[FLOORS.index(plans[i]):]
        plans[i] = next((f for f in lower if need_of(sizes, plans[:i] + [f] + plans[i + 1:], kept, runners) <= usable),
                        min(lower, key=lambda f: need_of([sizes[i]], [f], False, runners)))
    if need_of(sizes, plans, kept, runners) > usable:
        raise JudgeError(
            f"the benchmarks need {gib(need_of(sizes, plans, kept, runners))} of device memory together to be timed; "
            f"{device.name} has {gib(device.total)}, of which judge may use {gib(max(usable, 0))}")
    return plans


def benchmark_sizes(target, bytes_of) -> tuple[list[BenchmarkBytes], list[str]]:
    """Each benchmark of `target` as the plan takes it: its measured bytes (`bytes_of(index)`, the oracle's) and its
    label. A benchmark the target does not rank by is never timed (Target.ranked_benchmarks): it is not measured,
    and the plan holds nothing for it."""
    ranked = set(target.ranked_benchmarks)
    indices = range(len(target.benchmarks))
    return ([bytes_of(i) if i in ranked else UNTIMED for i in indices], [target.benchmark_label(i) for i in indices])


def refuse_unfittable(device: DeviceMemory, sizes: list[BenchmarkBytes], labels: list[str]) -> None:
    """Before a round checks its base: JudgeError, in one line, for the first benchmark that cannot be timed on this
    device even with nothing else on it (its least plan past ROUND_SHARE of the total). What fits an empty device
    but not beside what others hold is the memory plan's to say, when timing starts (plan_round)."""
    for index, size in enumerate(sizes):
        if need_of([size], [FLOORS[-1]]) > ROUND_SHARE * device.total:
            raise _cannot_fit(index, labels[index], size, device, f"{gib(ROUND_SHARE * device.total)} at most "
                              f"({ROUND_SHARE:.0%} of it)")


def _cannot_fit(index: int, label: str, size: BenchmarkBytes, device: DeviceMemory, may_use: str) -> JudgeError:
    need = need_of([size], [FLOORS[-1]])
    return JudgeError(
        f"benchmark {index} ({label}) needs {gib(need)} of device memory to be timed ({MIN_SETS} input sets of its "
        f"{gib(size.input)} input, a copy and an outbox in each of the pair's {COPY_HOLDERS} runners, its "
        f"{gib(size.output)} output in {HOLDERS} processes, {gib(size.work)} of "
        f"working memory in each{f', {gib(size.making)} to make an input before them' if size.making else ''}); "
        f"{device.name} has {gib(device.total)}, of which judge may use {may_use}")


def kernels_per_group(plan: MemoryPlan, sizes: list[BenchmarkBytes]) -> int:
    """How many kernels one process group may time beside the base: those the plan was made for (plan_round), and
    one more for each further runner, with its margin, that the device holds past the plan's need and margins. A
    runner holds the copies and outbox of the largest benchmark it builds and the largest output, working memory and
    weights of a call (runner_need); at most MAX_GROUP."""
    if not sizes:
        return MAX_GROUP
    runner = runner_need(sizes, plan.benchmarks)
    room = plan.device.usable - plan.need - margins(plan.device, sizes, plan.benchmarks, plan.runners)
    return max(1, min(MAX_GROUP, plan.runners - 1 + room // max(1, runner + runner_margin(plan.device, runner))))


def runner_need(sizes: list[BenchmarkBytes], plans: list[BenchmarkPlan]) -> int:
    """What a plan gives each timed runner: the copies and outbox of the largest benchmark it builds, and the largest
    output, working memory and weights of one of its calls."""
    return (max((s.area(p.copies) for s, p in zip(sizes, plans)), default=0) +
            max((s.output + s.work + s.weights for s in sizes), default=0))


def runner_margin(device: DeviceMemory, runner: int) -> int:
    """What a runner planned `runner` bytes may hold past them: RUNNER_MARGIN of it, at most the oracle's cache."""
    return min(device.cache, int(RUNNER_MARGIN * runner))


def margins(device: DeviceMemory, sizes: list[BenchmarkBytes], plans: list[BenchmarkPlan], runners: int) -> int:
    """What judge's processes may hold past a plan for `runners` timed runners: the cache the oracle keeps by design
    (judge.boundary.memory.release) and each runner's margin."""
    return device.cache + runners * runner_margin(device, runner_need(sizes, plans))


def fits(device: DeviceMemory, sizes: list[BenchmarkBytes], plans: list[BenchmarkPlan],
         kept: bool | tuple[bool, ...], runners: int) -> bool:
    """Whether a plan and its processes' margins fit what judge may use of the device: growth (copies, sets kept,
    a group's runners) only buys time and averaging, and never takes the margins; only a plan's floors may."""
    return need_of(sizes, plans, kept, runners) + margins(device, sizes, plans, runners) <= device.usable


def plan_device(memory: Callable[[], DeviceMemory], give_back: Callable[[], bool], sizes: list[BenchmarkBytes],
                labels: list[str], keep: bool, kernels: int = 1) -> MemoryPlan:
    """A round's plan (plan_round) on the device as `memory()` finds it; where the device is short (no plan, or one at
    the floors' edge), what `give_back()` frees goes first (the spares' contexts: they only save time), while it
    frees anything. Never for a larger group: a group's runners start from the spares, and cholesky_py's groups of
    five runners started without them took 35-47 s each to their first call, where fp8-mm's took about 1 s (H200,
    2026-11-30)."""
    while True:
        device = memory()
        try:
            plan = plan_round(device, sizes, labels, keep, kernels)
        except JudgeError:
            if not give_back():
                raise
            continue
        if fits(device, sizes, plan.benchmarks, plan.kept, plan.runners) or not give_back():
            return plan


def plan_round(device: DeviceMemory, sizes: list[BenchmarkBytes], labels: list[str], keep: bool,
               kernels: int = 1) -> MemoryPlan:
    """A round's plan for the largest process group of up to `kernels` kernels beside the base whose plan fits with
    its margins (fits), else for a pair (the JudgeError of a benchmark that cannot fit even then). A group's runner spares
    a whole pair's base calls, where sets kept or copies grown only spare making and average out where buffers land:
    the group's runners are planned first. cholesky_py's plan, grown and kept for a pair first, left no H200 room
    for a second kernel's runner (2026-11-30)."""
    for group in range(min(kernels, MAX_GROUP), 1, -1):
        try:
            plan = _plan_kept(device, sizes, labels, keep, group + 1)
        except JudgeError:
            continue
        if fits(device, sizes, plan.benchmarks, plan.kept, plan.runners):
            return plan
    return _plan_kept(device, sizes, labels, keep, COPY_HOLDERS)


def _plan_kept(device: DeviceMemory, sizes: list[BenchmarkBytes], labels: list[str], keep: bool,
               runners: int) -> MemoryPlan:
    """A plan for `runners` timed runners: where `keep`, every benchmark's sets kept across pairs where they all fit
    so, else those of the benchmarks whose sets take longest to make, one at a time while the plan still fits with
    its margins, and the others made again for every pair. cholesky_py's n=32768 sets, made again in every pair on
    an H200 (2026-11-28) because its 15 benchmarks' sets did not fit at once, took a large part, not timed apart, of
    the 8 s that benchmark cost a pair."""
    plan = plan_memory(device, sizes, labels, runners=runners)
    if not keep:
        return plan
    for index in sorted(range(len(sizes)), key=lambda i: -sizes[i].making_s):
        try:
            trial = plan_memory(device, sizes, labels, plan.kept[:index] + (True,) + plan.kept[index + 1:], runners)
        except JudgeError:
            continue
        if fits(device, sizes, trial.benchmarks, trial.kept, runners):  # kept sets only save time: never at the edge
            plan = trial
    return plan
