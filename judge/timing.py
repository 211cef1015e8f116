"""Timing stage: candidate and base in one child process, interleaved, L2 flushed, CUDA events, medians.

How one repetition is timed, and why:
  flush L2 (write a buffer twice its size) -> synchronize the device -> record `start` -> call the kernel
  -> record `stream_end` -> synchronize the device -> record `end`.
`start`..`end` covers everything the call put on any stream, including work on side streams that it never
joined back to the current stream (events on the current stream alone would miss it, and such a kernel
would look faster than it is). The price is a near-constant host round trip (device sync returning, then
`end` being launched) inside every sample; it is measured by null repetitions (the same sequence with no
call) interleaved with the real ones, and its median is subtracted. `start`..`stream_end` is recorded too:
when it is much shorter than the total, the kernel leaves work on side streams.

Base and candidate alternate (A B, then B A) so that clock and thermal drift hit both alike, and the
rounds go on until the 95% interval of the median ratio is within ±1% or the time budget is spent.
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
MIN_REPS = 100
MAX_REPS = 20_000
HALF_WIDTH = 0.01  # stop once the 95% interval is within ±1% of the ratio
WARMUP_CALLS = 3
WARMUP_S = 0.05
MIN_CORRECTED_US = 1e-3


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
            "sync_overhead_us": bench["sync_overhead_us"],
            "base_stream_median_us": round(stats.median(bench["base_stream_us"]), 3),
            "cand_stream_median_us": round(stats.median(bench["cand_stream_us"]), 3),
            "measuring_s": bench["measuring_s"],
            "base_us": base_us,
            "cand_us": cand_us,
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
        "method": "interleaved pairs, L2 flushed, CUDA events across a device-wide sync, median of nulls subtracted",
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
    """Times one call as the module docstring says; holds the L2 flush buffer and three reusable events."""

    def __init__(self, l2_bytes: int):
        import torch

        self.torch = torch
        self.flush = torch.empty(max(2 * l2_bytes, 8 << 20) // 4, dtype=torch.int32, device="cuda")
        self.start, self.stream_end, self.end = (torch.cuda.Event(enable_timing=True) for _ in range(3))

    def time(self, fn, data) -> tuple[float, float]:
        torch = self.torch
        self.flush.zero_()
        torch.cuda.synchronize()
        self.start.record()
        fn(data)
        self.stream_end.record()
        torch.cuda.synchronize()
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end) * 1e3, self.start.elapsed_time(self.stream_end) * 1e3

    def null(self) -> float:
        torch = self.torch
        torch.cuda.synchronize()
        self.start.record()
        self.stream_end.record()
        torch.cuda.synchronize()
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end) * 1e3


class _HostTimer:
    """Wall-clock stand-in where there is no GPU, so that the child's loop can be tested on a CPU."""

    def time(self, fn, data) -> tuple[float, float]:
        start = time.perf_counter()
        fn(data)
        elapsed = (time.perf_counter() - start) * 1e6
        return elapsed, elapsed

    def null(self) -> float:
        start = time.perf_counter()
        return (time.perf_counter() - start) * 1e6


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
        _warm_up(timer, base, base_data)
        _warm_up(timer, cand, cand_data)
        if index == 0:
            facts = facts_here() if cuda else None  # clocks "before": read with the GPU just warmed up
        share = budget_left / (len(benchmarks) - index)
        started = time.monotonic()
        samples = _measure(timer, base, base_data, cand, cand_data, deadline=started + share,
                           min_reps=min_reps, max_reps=max_reps, half_width=half_width)
        spent = time.monotonic() - started
        budget_left = max(0.0, budget_left - spent)
        samples["measuring_s"] = round(spent, 3)
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
    base_raw, cand_raw, base_stream, cand_stream, nulls = [], [], [], [], []
    next_check = min_reps
    stopped = "max-reps"
    while len(base_raw) < max_reps:
        nulls.append(timer.null())
        if len(base_raw) % 2 == 0:
            b = timer.time(base, base_data)
            c = timer.time(cand, cand_data)
        else:
            c = timer.time(cand, cand_data)
            b = timer.time(base, base_data)
        base_raw.append(b[0])
        base_stream.append(b[1])
        cand_raw.append(c[0])
        cand_stream.append(c[1])
        n = len(base_raw)
        if n >= next_check:
            next_check = n + max(16, n // 4)
            overhead = stats.median(nulls)
            ratio, low, high = stats.ratio_ci(_corrected(base_raw, overhead), _corrected(cand_raw, overhead),
                                              resamples=400)
            if stats.precise_enough(ratio, low, high, half_width):
                stopped = "precise"
                break
        if time.monotonic() > deadline and n >= min_reps:
            stopped = "budget"
            break
    overhead = stats.median(nulls)
    return {
        "base_us": [round(x, 3) for x in _corrected(base_raw, overhead)],
        "cand_us": [round(x, 3) for x in _corrected(cand_raw, overhead)],
        "base_stream_us": [round(x, 3) for x in base_stream],
        "cand_stream_us": [round(x, 3) for x in cand_stream],
        "sync_overhead_us": round(overhead, 3),
        "stopped": stopped,
    }


def _corrected(samples: list[float], overhead: float) -> list[float]:
    return [max(MIN_CORRECTED_US, x - overhead) for x in samples]
