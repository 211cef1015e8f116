"""Timing stage: candidate and base in one child process, interleaved, L2 flushed, CUDA events, medians.

One repetition: flush L2 (write a buffer twice its size) -> synchronize the device -> spin the GPU
(torch.cuda._sleep, longer than the host takes to launch the call) -> record `start` -> call the kernel ->
record `stream_end` -> synchronize the device (every stream) -> record `end`.
The spin keeps the host's launch time (and its jitter) out of `start`..`stream_end`: measured on an H100
with the GPU idle at `start` (as GPU MODE times), identical kernels loaded as "base" and "candidate"
differed by up to ±1.5% within a process, steadily over the run and whichever input copy each used.
`start`..`stream_end` misses work that the call leaves on a side stream without joining it back;
`stream_end`..`end` catches that work: without it, this tail is only the host's round trip through the
device sync, as in the null repetitions (the same sequence with no call) that are interleaved with the real ones. When either
kernel's tail exceeds the null tail, both kernels of that benchmark are timed `start`..`end` less the null
tail ("device-wide"); otherwise `start`..`stream_end` ("stream"), which is free of the sync's host jitter.

Base and candidate alternate order (A B, B A) and swap their two copies of the inputs every other round,
so that clock drift, order and buffer placement hit both alike. Rounds go on until the 95% interval of the
median ratio (block bootstrap over rounds, see stats.py) is within ±1%, or the time budget is spent.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

from . import stats
from .check import clone_data, module_name
from .devices import gate
from .isolation import run_isolated
from .stages import StageResult, not_run
from .targets import Target

STAGE = "timing"
BUDGET_PER_BENCHMARK_S = 5.0  # default measuring time per benchmark when the caller gives no budget
MIN_REPS = 200
MAX_REPS = 20_000
HALF_WIDTH = 0.01  # stop once the 95% interval is within ±1% of the ratio
WARMUP_CALLS = 3
WARMUP_S = 0.05
SPIN_MARGIN_US = 20.0  # the GPU spins this much plus SPIN_FACTOR x the slowest warm-up launch
SPIN_FACTOR = 2.0
MIN_US = 1e-3
# A tail this much longer than the null tail means work left on a side stream (the null tail's own jitter is
# a few microseconds on an H100 host).
SIDE_WORK_US = 3.0
SIDE_WORK_FRACTION = 0.05


def run_timing(target: Target, candidate: Path, base: Path, *, budget_s: float | None = None,
               timeout_s: float | None = None) -> StageResult:
    """Time the kernel in `candidate` against the one in `base` on every benchmark of the target."""
    reason = gate(target.arch)
    if reason:
        return not_run(STAGE, reason)
    limit = timeout_s if timeout_s is not None else target.limits.timing_s
    # The budget counts measuring time only; warm-up (and any JIT compile in it) and imports need the rest.
    budget = budget_s if budget_s is not None else BUDGET_PER_BENCHMARK_S * len(target.benchmarks)
    budget = min(budget, 0.5 * limit)
    candidate, base = Path(candidate).resolve(), Path(base).resolve()
    outcome = run_isolated(
        "judge.timing:_child_timing",
        {"candidate_dir": str(candidate), "base_dir": str(base), "kernel_file": target.kernel_file,
         "benchmarks": target.benchmarks, "budget_s": budget},
        timeout_s=limit,
        cwd=candidate,
        log_path=candidate / "timing.log",
    )
    if outcome.status != "ok":
        status = "timed-out" if outcome.status == "timed-out" else "crashed"
        return StageResult(STAGE, status, f"{status}: {outcome.error}", outcome.seconds,
                           {"error": outcome.error}, outcome.log_tail)
    detail = summarise(outcome.value, target)
    return StageResult(STAGE, "passed", detail.pop("summary"), outcome.seconds, detail, outcome.log_tail)


def summarise(raw: dict[str, Any], target: Target) -> dict[str, Any]:
    """Per-benchmark medians, speedups and intervals, and the geometric mean, from the child's raw samples."""
    benchmarks = []
    pairs = []
    for i, bench in enumerate(raw["benchmarks"]):
        base_us, cand_us = bench["base_us"], bench["cand_us"]
        ratio, low, high = stats.ratio_ci(base_us, cand_us)
        pairs.append((base_us, cand_us))
        entry = {
            "index": i,
            "label": target.benchmark_label(i),
            "base_median_us": round(stats.median(base_us), 3),
            "cand_median_us": round(stats.median(cand_us), 3),
            "speedup": round(ratio, 5),
            "ci_low": round(low, 5),
            "ci_high": round(high, 5),
            "significant": stats.significant(low, high),
            "reps": len(base_us),
            "stopped": bench["stopped"],
            "method": bench["method"],
            "null_tail_us": bench["null_tail_us"],
            "base_tail_excess_us": bench["base_tail_excess_us"],
            "cand_tail_excess_us": bench["cand_tail_excess_us"],
            "measuring_s": bench["measuring_s"],
            "spin_us": bench["spin_us"],
            "host_call_us": bench["host_call_us"],
            "launch_exposed": bench["launch_exposed"],
            "base_us": base_us,
            "cand_us": cand_us,
            "raw": bench["raw"],
        }
        if target.speed_of_light_us:
            entry["speed_of_light_us"] = target.speed_of_light_us[i]
        benchmarks.append(entry)
    point, low, high = stats.geomean_ci(pairs)
    n = len(benchmarks)
    return {
        "summary": f"geomean {point:.3f}x [{low:.3f}, {high:.3f}] over {n} benchmark{'s' if n != 1 else ''}",
        "geomean": round(point, 5),
        "geomean_ci": [round(low, 5), round(high, 5)],
        "significant": stats.significant(low, high),
        "benchmarks": benchmarks,
        "device": raw["device"],
        "device_after": raw["device_after"],
        "measuring_s": round(sum(b["measuring_s"] for b in raw["benchmarks"]), 3),
        "method": "interleaved pairs (order and input copies alternated), L2 flushed, launch hidden behind a GPU "
                  "spin, CUDA events; device-wide span where a kernel leaves side-stream work",
    }


# ---------------------------------------------------------------------------------------------------------
# In the child (cwd: the candidate's workspace).


def _load_kernel(directory: str, kernel_file: str, as_name: str):
    """Import a kernel file under a name of our own, its directory first on sys.path while it loads."""
    path = Path(directory) / kernel_file
    spec = importlib.util.spec_from_file_location(as_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[as_name] = module
    sys.path.insert(0, directory)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(directory)
    return module.custom_kernel


class _CudaTimer:
    """Times one call as the module docstring says: (stream us, tail us); holds the L2 flush buffer and events."""

    def __init__(self, l2_bytes: int):
        import torch

        self.torch = torch
        self.flush = torch.empty(max(2 * l2_bytes, 8 << 20) // 4, dtype=torch.int32, device="cuda")
        self.start, self.stream_end, self.end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        self.cycles_per_us = self._spin_rate()
        self.spin_cycles = 0
        self.host_us: list[float] = []

    def _spin_rate(self) -> float:
        torch = self.torch
        rates = []
        for _ in range(3):
            torch.cuda.synchronize()
            self.start.record()
            torch.cuda._sleep(200_000)
            self.end.record()
            self.end.synchronize()
            rates.append(200_000 / (self.start.elapsed_time(self.end) * 1e3))
        return stats.median(rates)

    def hide_launch(self, host_us: float) -> None:
        """Spin the GPU for longer than the host takes to launch the call, so `start` fires when the call's
        work is already queued: host launch time and its jitter stay out of the measurement."""
        self.spin_cycles = int(self.cycles_per_us * (SPIN_MARGIN_US + SPIN_FACTOR * host_us))

    def time(self, fn, data) -> tuple[float, float]:
        torch = self.torch
        self.flush.zero_()
        torch.cuda.synchronize()
        if self.spin_cycles:
            torch.cuda._sleep(self.spin_cycles)
        self.start.record()
        host_start = time.perf_counter()
        fn(data)
        self.host_us.append((time.perf_counter() - host_start) * 1e6)
        self.stream_end.record()
        torch.cuda.synchronize()
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.stream_end) * 1e3, self.stream_end.elapsed_time(self.end) * 1e3

    def null(self) -> float:
        torch = self.torch
        torch.cuda.synchronize()
        self.start.record()
        self.stream_end.record()
        torch.cuda.synchronize()
        self.end.record()
        self.end.synchronize()
        return self.stream_end.elapsed_time(self.end) * 1e3


class _HostTimer:
    """Wall-clock stand-in where there is no GPU, so that the child's loop can be tested on a CPU."""

    cycles_per_us = 0.0
    spin_cycles = 0

    def __init__(self):
        self.host_us: list[float] = []

    def hide_launch(self, host_us: float) -> None:
        pass

    def time(self, fn, data) -> tuple[float, float]:
        start = time.perf_counter()
        fn(data)
        self.host_us.append((time.perf_counter() - start) * 1e6)
        return self.host_us[-1], 0.0

    def null(self) -> float:
        return 0.0


def _child_timing(candidate_dir: str, base_dir: str, kernel_file: str, benchmarks: list[dict],
                  budget_s: float, min_reps: int = MIN_REPS, max_reps: int = MAX_REPS,
                  half_width: float = HALF_WIDTH) -> dict:
    import torch

    import reference  # the candidate's copy; the task's files are the same in both directories

    from .devices import facts_here, read_clocks

    cand = _load_kernel(candidate_dir, kernel_file, f"judge_candidate_{module_name(kernel_file).replace('.', '_')}")
    base = _load_kernel(base_dir, kernel_file, f"judge_base_{module_name(kernel_file).replace('.', '_')}")
    cuda = torch.cuda.is_available()
    facts = None
    if cuda:
        props = torch.cuda.get_device_properties(0)
        timer = _CudaTimer(getattr(props, "L2_cache_size", 64 << 20))
    else:
        timer = _HostTimer()

    results = []
    budget_left = budget_s
    for index, spec in enumerate(benchmarks):
        data = reference.generate_input(**spec)
        base_data, cand_data = clone_data(data), clone_data(data)
        del data
        timer.hide_launch(0.0)
        _warm_up(timer, base, base_data)
        _warm_up(timer, cand, cand_data)
        # Launch times after warm-up (the first calls may include JIT compiles) size the spin.
        timer.host_us.clear()
        for _ in range(3):
            timer.time(base, base_data)
            timer.time(cand, cand_data)
        timer.hide_launch(max(timer.host_us))
        timer.host_us.clear()
        if index == 0:
            facts = facts_here() if cuda else None  # clocks "before": read with the GPU just warmed up
        share = budget_left / (len(benchmarks) - index)
        started = time.monotonic()
        samples = _measure(timer, base, base_data, cand, cand_data, deadline=started + share,
                           min_reps=min_reps, max_reps=max_reps, half_width=half_width)
        spent = time.monotonic() - started
        budget_left = max(0.0, budget_left - spent)
        samples["measuring_s"] = round(spent, 3)
        spin_us = timer.spin_cycles / timer.cycles_per_us if timer.spin_cycles else 0.0
        samples["spin_us"] = round(spin_us, 1)
        samples["host_call_us"] = round(stats.median(timer.host_us), 1)
        # Repetitions whose launch took longer than the spin: their host time leaked into the measurement.
        samples["launch_exposed"] = sum(h > spin_us for h in timer.host_us) if timer.spin_cycles else None
        results.append(samples)
        del base_data, cand_data
    after = read_clocks() if cuda else {}
    return {
        "benchmarks": results,
        "device": facts.to_dict() if facts else None,
        "device_after": {k: after.get(k) for k in ("sm_clock_mhz", "mem_clock_mhz", "temperature_c")},
    }


def _warm_up(timer, fn, data) -> None:
    start = time.monotonic()
    calls = 0
    while calls < WARMUP_CALLS or time.monotonic() - start < WARMUP_S:
        timer.time(fn, data)
        calls += 1


def _measure(timer, base, base_data, cand, cand_data, *, deadline: float, min_reps: int, max_reps: int,
             half_width: float) -> dict[str, Any]:
    """Interleaved rounds until the ratio's interval is within ±half_width, the deadline, or max_reps."""
    series = {key: [] for key in ("base_stream", "base_tail", "cand_stream", "cand_tail", "null_tail")}
    copies = (base_data, cand_data)
    next_check = min_reps
    stopped = "max-reps"
    n = 0
    while n < max_reps:
        series["null_tail"].append(timer.null())
        # Round k: order A B or B A, and inputs X/Y or Y/X, in a cycle of four.
        swap = (n // 2) % 2
        runs = [("base", base, copies[swap]), ("cand", cand, copies[1 - swap])]
        if n % 2:
            runs.reverse()
        for name, fn, data in runs:
            stream_us, tail_us = timer.time(fn, data)
            series[f"{name}_stream"].append(stream_us)
            series[f"{name}_tail"].append(tail_us)
        n += 1
        if n >= next_check:
            next_check = n + max(50, n // 4)
            base_us, cand_us, _ = _times(series)
            ratio, low, high = stats.ratio_ci(base_us, cand_us, resamples=400)
            if stats.precise_enough(ratio, low, high, half_width):
                stopped = "precise"
                break
        if time.monotonic() > deadline and n >= min_reps:
            stopped = "budget"
            break
    base_us, cand_us, method = _times(series)
    null = stats.median(series["null_tail"])
    return {
        "base_us": _rounded(base_us),
        "cand_us": _rounded(cand_us),
        "method": method,
        "null_tail_us": round(null, 3),
        "base_tail_excess_us": round(stats.median(series["base_tail"]) - null, 3),
        "cand_tail_excess_us": round(stats.median(series["cand_tail"]) - null, 3),
        # The stream series are base_us/cand_us already unless the device-wide method was used.
        "raw": {key: _rounded(values) for key, values in series.items()
                if method == "device-wide" or key.endswith("_tail")},
        "stopped": stopped,
    }


def side_stream_work(stream_us: list[float], tail_us: list[float], null_tail_us: list[float]) -> bool:
    """Whether a kernel leaves work running after its current stream is done: its tail after the
    device-wide sync exceeds the null tail by more than SIDE_WORK_US + SIDE_WORK_FRACTION of its time."""
    excess = stats.median(tail_us) - stats.median(null_tail_us)
    return excess > SIDE_WORK_US + SIDE_WORK_FRACTION * stats.median(stream_us)


def _times(series: dict[str, list[float]]) -> tuple[list[float], list[float], str]:
    """The samples to analyse: stream times, or device-wide times when either kernel leaves side-stream work."""
    nulls = series["null_tail"]
    if not any(side_stream_work(series[f"{v}_stream"], series[f"{v}_tail"], nulls) for v in ("base", "cand")):
        return series["base_stream"], series["cand_stream"], "stream"
    null = stats.median(nulls)
    device_wide = [
        [max(MIN_US, s + t - null) for s, t in zip(series[f"{v}_stream"], series[f"{v}_tail"])]
        for v in ("base", "cand")
    ]
    return device_wide[0], device_wide[1], "device-wide"


def _rounded(values: list[float]) -> list[float]:
    return [round(x, 3) for x in values]
