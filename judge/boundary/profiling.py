"""A profile's calls, inside the runner (judge.boundary.runner's `profile` command): the kernel called on the data
the warm-up used, never on a timed set, in a runner of its own that no timed pair uses.

Everything here runs beside the kernel's code, in its process: what it reports is the kernel process's own account.
Under ncu (mode "ncu") this process only brackets the calls (cudaProfilerStart/Stop) and ncu, outside it, measures;
with torch.profiler (mode "torch", or "host" on a CPU target) the numbers come from inside, and a kernel that
patches torch's profiler could change them (docs/architecture.md says what they can be trusted for).
"""

from __future__ import annotations

import time

TIMED_CALLS = 5
SHORT_US = 5.0  # a launch shorter than this is latency-bound whatever it does
TOP_OPS = 10


def profile_calls(torch, kernel, datas: list, calls: int, mode: str, cuda: bool) -> dict:
    """The call's own time (the median of TIMED_CALLS, nothing attached) and, on a GPU, its span on the GPU clock,
    then `calls` profiled calls."""
    times = {"call_us": _call_us(torch, kernel, datas, cuda)}
    if cuda:
        times["gpu_us"] = _gpu_us(torch, kernel, datas, times["call_us"])
    return {**times, "calls": calls, **_profiled(torch, kernel, datas, calls, mode, cuda)}


def _profiled(torch, kernel, datas: list, calls: int, mode: str, cuda: bool) -> dict:
    """`calls` calls under ncu (bracketed by cudaProfilerStart/Stop; ncu reads them) or torch.profiler (its
    kernels or host ops)."""
    if mode == "ncu":
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
        for n in range(calls):
            kernel(datas[n % len(datas)])
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
        return {}
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda and mode != "host" else [])
    with profile(activities=activities) as prof:
        for n in range(calls):
            kernel(datas[n % len(datas)])
        if cuda:
            torch.cuda.synchronize()
    if mode == "host" or not cuda:
        return {"kernels": _host_ops(prof, calls)}
    kernels, short = _device_kernels(torch, prof, calls)
    return {"kernels": kernels, "short_launches": short}


def _call_us(torch, kernel, datas: list, cuda: bool) -> float:
    times = []
    for n in range(TIMED_CALLS):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        kernel(datas[n % len(datas)])
        if cuda:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e6)
    return round(sorted(times)[len(times) // 2], 3)


def _gpu_us(torch, kernel, datas: list, call_us: float) -> float:
    """The median call on the GPU clock, as the timing stage measures it: CUDA events around the call on its stream,
    the host's launch hidden behind a GPU spin (torch.cuda._sleep) of twice the call's host time, at most 50 ms."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    torch.cuda._sleep(200_000)
    end.record()
    end.synchronize()
    cycles_per_us = 200_000 / max(start.elapsed_time(end) * 1e3, 1e-3)
    spin = int(min(50_000.0, 2 * call_us + 40.0) * cycles_per_us)
    times = []
    for n in range(TIMED_CALLS):
        torch.cuda.synchronize()
        torch.cuda._sleep(spin)
        start.record()
        kernel(datas[n % len(datas)])
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return round(sorted(times)[len(times) // 2], 3)


def _per_call(durations: dict[str, list[float]], calls: int) -> list[dict]:
    """Each name's launches per call and its time per call: the median launch times the launches, so that one
    slow profiled call (the profiler's own first, a host hiccup) does not stand for all of them."""
    out = []
    for name, times in durations.items():
        launches = len(times) / calls
        median = sorted(times)[len(times) // 2]
        out.append({"name": name, "launches": round(launches, 2), "us": round(median * launches, 3)})
    return sorted(out, key=lambda k: -k["us"])


def _device_kernels(torch, prof, calls: int) -> tuple[list[dict], float]:
    """The GPU kernels the calls launched, by name, per call; and the launches per call shorter than SHORT_US."""
    durations: dict[str, list[float]] = {}
    device = torch.autograd.DeviceType.CUDA
    events = [e for e in prof.events() if getattr(e, "device_type", None) == device]
    if events:
        for event in events:
            durations.setdefault(event.name, []).append(event.time_range.elapsed_us())
    else:  # a torch that hangs kernels under the ops that launched them
        for event in prof.events():
            for launched in getattr(event, "kernels", []) or []:
                durations.setdefault(launched.name, []).append(float(launched.duration))
    short = sum(1 for us in durations.values() for u in us if u < SHORT_US) / calls
    return _per_call(durations, calls), round(short, 2)


def _host_ops(prof, calls: int) -> list[dict]:
    """The ops that took the host's time, by self time per call, the largest TOP_OPS."""
    durations: dict[str, list[float]] = {}
    for event in prof.events():
        self_us = float(getattr(event, "self_cpu_time_total", 0.0) or 0.0)
        if self_us > 0 and not event.name.startswith("ProfilerStep"):
            durations.setdefault(event.name, []).append(self_us)
    return _per_call(durations, calls)[:TOP_OPS]
