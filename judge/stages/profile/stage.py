"""The profile stage: where a kernel's time goes, per benchmark, measured in a runner of its own.

The runner is started and confined as a timed pair's (judge.stages.evaluation.Evaluator.runner with `timed`: its
own scratch, its workspace read-only, pinned nowhere near a timed pair because the stage runs only where nothing is
timed), takes its inputs from the oracle as a timed runner does (a benchmark's warm-up set), warms up, then makes
the profiled calls (judge.boundary.profiling). On a GPU, where ncu is on the machine, ncu starts the runner (one per
benchmark: each report holds one benchmark's kernels) and measures from outside it; where ncu is missing or fails,
torch.profiler inside the runner, and the profile says so. On a CPU target, torch.profiler's host ops. A failure is
the profile's ("profile unavailable: <reason>"), never the round's.
"""

from __future__ import annotations

import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Optional

from ...devices import gate
from ...errors import JudgeError
from ...sandbox.worker import CommandFailed, WorkerError, time_left
from ...targets import Target
from ...workspaces import fresh
from ..build import build
from ..progress import Progress, quiet
from ..seeds import Case, derive, with_seed
from . import ncu as nsight
from .bounds import bound_lines
from .model import HOST, NCU, TORCH, BenchmarkProfile, KernelShare, Profile, one_line, unavailable
from .peaks import Peaks

STAGE = "profile"
CALLS = {NCU: 1, TORCH: 5, HOST: 20}
LIMIT_S = 900.0
NCU_BUDGET_S = 420.0  # of LIMIT_S, for every benchmark under ncu: past it, torch.profiler has the rest
# What a benchmark the profile's time left out says: a later profile of the same kernel profiles it (judge.profiles).
OUT_OF_TIME = "not profiled: the profile's time ran out"
FAILURES = (WorkerError, CommandFailed, JudgeError, OSError, RuntimeError, KeyError, ValueError)


def profile_kernel(target: Target, workspace: Path, root: Path, *, device: Optional[str] = None,
                   peaks: Optional[Peaks] = None, use_ncu: bool = True, confine: bool = True,
                   progress: Progress = quiet, timeout_s: Optional[float] = None,
                   indices: Optional[list[int]] = None) -> Profile:
    """Profile the kernel assembled in `workspace` on every benchmark, those the target ranks by first (or those of
    `indices`), with `root` as judge's own directory for it (emptied first). Within `timeout_s` after the first
    benchmark, which may always finish (up to NCU_BUDGET_S): a profile that never finishes one helps nobody, and the
    benchmarks it leaves out say OUT_OF_TIME.
    Never raises for what the kernel or a tool does: a failure is an unavailable Profile."""
    from ..evaluation import Evaluator

    reason = gate(target.arch)
    facts = {"device": device, "versions": {"torch": _version("torch")},
             "peaks": peaks.to_json() if peaks else None}
    if reason:
        return unavailable(reason, **facts)
    deadline = time.monotonic() + (LIMIT_S if timeout_s is None else timeout_s)
    if indices is None:  # what the verdicts are on first (Target.ranked_benchmarks), where the time may run out
        ranked = target.ranked_benchmarks
        indices = ranked + [i for i in range(len(target.benchmarks)) if i not in ranked]
    indices = list(indices)
    notes: list[str] = []
    try:
        with Evaluator(target, fresh(Path(root)), confine=confine, warm=False) as evaluator:
            benchmarks, tool = None, HOST if target.on_cpu else TORCH
            ncu = nsight.find() if use_ncu and not target.on_cpu else None
            if ncu is not None:
                try:
                    benchmarks, tool = _under_ncu(evaluator, Path(workspace), ncu, deadline, progress, notes,
                                                  indices), NCU
                    facts["versions"]["ncu"] = nsight.version(ncu)  # the tool's version where its numbers are kept
                except FAILURES as error:
                    notes.append(f"ncu ({nsight.version(ncu) or 'version unknown'}) failed "
                                 f"({one_line(_said(error))}): torch.profiler instead")
            elif not target.on_cpu:
                notes.append("ncu is not on this machine (or was not asked for): torch.profiler instead")
            if benchmarks is None:
                benchmarks = _in_process(evaluator, Path(workspace), tool, deadline, progress, indices)
            benchmarks = sorted(benchmarks, key=lambda b: b.index)
            for bench in benchmarks:
                _finish(bench, evaluator, peaks, target.on_cpu)
            if tool == TORCH and not any(b.kernels for b in benchmarks):
                notes.append("torch.profiler saw no GPU kernel (CUPTI may not start in a confined runner)")
    except FAILURES as error:
        return unavailable(_said(error), notes=notes, **facts)
    if all(b.error for b in benchmarks):
        return unavailable(benchmarks[0].error, notes=notes, **facts)
    return Profile("ok", tool=tool, notes=notes, benchmarks=benchmarks, **facts)


def _in_process(evaluator, workspace: Path, mode: str, deadline: float, progress: Progress,
                indices: list[int]) -> list[BenchmarkProfile]:
    """One runner for the benchmarks of `indices`, torch.profiler inside it (the first may take NCU_BUDGET_S); where
    the profile's time would run out in the next one, the rest say so (_out_of_time), as under ncu, and a later
    round's profile goes on with them (judge.profiles)."""
    started = time.monotonic()
    first_deadline = max(deadline, started + NCU_BUDGET_S)
    worker = evaluator.runner(workspace, "profile.log", timed=True)
    try:
        worker.call("load", time_left(first_deadline))
        out, longest = [], 0.0
        for index in indices:
            if out and deadline - time.monotonic() < longest:
                return out + _out_of_time(evaluator.target, indices[len(out):], time.monotonic() - started)
            _tell(progress, evaluator.target, index, started)
            began = time.monotonic()
            try:
                value = _calls(evaluator, worker, index, CALLS[mode], mode, deadline if out else first_deadline)
            except (WorkerError, CommandFailed) as error:
                out.append(_failed(evaluator.target, index, error))
                if isinstance(error, WorkerError):
                    break
                continue
            out.append(_from_runner(evaluator.target, index, value))
            longest = max(longest, time.monotonic() - began)
        stopped = "not profiled: the runner had stopped on an earlier benchmark"
        return out + [BenchmarkProfile(i, evaluator.target.benchmark_label(i), error=stopped)
                      for i in indices[len(out):]]
    finally:
        evaluator.close_runner(worker)


def _under_ncu(evaluator, workspace: Path, ncu: str, deadline: float, progress: Progress,
               notes: list[str], indices: list[int]) -> list[BenchmarkProfile]:
    """A runner under ncu per benchmark of `indices`, the first within NCU_BUDGET_S whatever `deadline` says, the
    others within `deadline` too; where that time runs out, the benchmarks profiled so far are kept and the rest say
    so (_out_of_time). Any other failure raises, and the stage falls back to torch.profiler. Where the first
    benchmark fails with METRICS asked for, it is tried once more with ncu's sections alone (a GPU without one of
    them), and so are the rest."""
    started = time.monotonic()
    first_deadline = started + NCU_BUDGET_S
    deadline = min(deadline, first_deadline)
    metrics, out, longest = True, [], 0.0
    target = evaluator.target
    for index in indices:
        if out and deadline - time.monotonic() < longest:
            return out + _out_of_time(target, indices[len(out):], time.monotonic() - started)
        _tell(progress, target, index, started)
        began = time.monotonic()
        limit = deadline if out else first_deadline
        try:
            out.append(_one_under_ncu(evaluator, workspace, ncu, index, metrics, limit))
        except RuntimeError as error:
            if out and time.monotonic() >= limit:  # the time ran out inside this benchmark: keep the others
                return out + _out_of_time(target, indices[len(out):], time.monotonic() - started)
            if out or not metrics:
                raise
            notes.append(f"ncu with its extra metrics failed ({one_line(str(error))}): its sections alone instead")
            metrics = False
            out.append(_one_under_ncu(evaluator, workspace, ncu, index, metrics, limit))
        longest = max(longest, time.monotonic() - began)
    return out


def _out_of_time(target: Target, left: list[int], seconds: float) -> list[BenchmarkProfile]:
    """The benchmarks of `left`, not profiled: the next one would not have finished in the profile's time (one takes
    about as long as the longest so far), which the benchmarks profiled before it keep."""
    why = f"{OUT_OF_TIME} after {seconds:.0f} s"
    return [BenchmarkProfile(i, target.benchmark_label(i), error=why) for i in left]


def _one_under_ncu(evaluator, workspace: Path, ncu: str, index: int, metrics: bool, deadline: float
                   ) -> BenchmarkProfile:
    report = evaluator.root / f"ncu-{index}.ncu-rep"
    report.unlink(missing_ok=True)
    worker = evaluator.runner(workspace, f"profile-ncu-{index}.log", timed=True,
                              launcher=tuple(nsight.launcher(ncu, report, metrics)))
    try:
        worker.call("load", time_left(deadline))
        value = _calls(evaluator, worker, index, CALLS[NCU], NCU, deadline)
        worker.close(wait=True, grace_s=min(nsight.EXPORT_S, time_left(deadline)))  # ncu writes its report now
    except (WorkerError, CommandFailed) as error:
        said = nsight.complaint(worker.log_tail()) or f"the runner's log ends: {_last_line(worker.log_tail())}"
        raise RuntimeError(f"{_said(error)}; {said}") from None
    finally:
        evaluator.close_runner(worker)
    try:
        kernels = nsight.parse_csv(nsight.export_csv(ncu, report))
    except (OSError, subprocess.SubprocessError, RuntimeError) as error:
        raise RuntimeError(f"{error}; {nsight.complaint(worker.log_tail()) or 'ncu said nothing'}") from None
    if not kernels:
        raise RuntimeError(f"ncu profiled no kernel of benchmark {index}: "
                           f"{nsight.complaint(worker.log_tail()) or 'ncu said nothing'}")
    bench = _from_runner(evaluator.target, index, value)
    bench.kernels = _ncu_shares(kernels, value["calls"])
    return bench


def _calls(evaluator, worker, index: int, calls: int, mode: str, deadline: float) -> dict:
    """A benchmark's warm-up set from the oracle, the runner's warm-up on it, then its profiled calls."""
    target = evaluator.target
    nonce = evaluator.nonce()
    key = f"p{nonce}-{index}"
    seeds = [derive(evaluator.secret, nonce, "profile", index, n) for n in range(2)]
    made = evaluator.ask("benchmark", key=key, spec=target.benchmarks[index], distribution=target.distributions[0].name,
                         seeds=seeds, projection_seed=seeds[1], copies=1, runners=[worker.pid])
    try:
        build(evaluator, worker, made["plans"][str(worker.pid)], time_left(deadline))
        evaluator.ask("stage", key=key, name="warm", copies=[0], runners=[worker.pid])
        worker.call("warm_up", time_left(deadline))
        return worker.call("profile", time_left(deadline), calls=calls, mode=mode).value
    finally:
        evaluator.ask("release", key=key)


def _ncu_shares(kernels: list[dict], calls: int) -> list[KernelShare]:
    """ncu's kernels by name, per call: time summed, bandwidth, tensor and occupancy weighted by time, the stalls
    of the longest launch."""
    named: dict[str, list[dict]] = {}
    for kernel in kernels:
        named.setdefault(kernel["name"], []).append(kernel)
    out = []
    for name, launches in named.items():
        total = sum(k["time_us"] or 0.0 for k in launches)
        longest = max(launches, key=lambda k: k["time_us"] or 0.0)
        out.append(KernelShare(name, round(len(launches) / calls, 2), round(total / calls, 3),
                               dram_gbps=_time_weighted(launches, "dram_gbps"),
                               tensor_pct=_time_weighted(launches, "tensor_pct"),
                               occupancy_pct=_time_weighted(launches, "occupancy_pct"), stalls=longest["stalls"]))
    return sorted(out, key=lambda k: -k.us)


def _time_weighted(launches: list[dict], metric: str) -> Optional[float]:
    known = [(k[metric], k["time_us"] or 0.0) for k in launches if k.get(metric) is not None]
    if not known:
        return None
    weight = sum(t for _, t in known)
    value = sum(v * t for v, t in known) / weight if weight else known[0][0]
    return round(value, 3)


def _from_runner(target: Target, index: int, value: dict) -> BenchmarkProfile:
    kernels = [KernelShare(k["name"], k["launches"], k["us"]) for k in value.get("kernels", [])]
    return BenchmarkProfile(index, target.benchmark_label(index), call_us=value.get("call_us"),
                            gpu_us=value.get("gpu_us"), kernels=kernels)


def _finish(bench: BenchmarkProfile, evaluator, peaks: Optional[Peaks], on_cpu: bool) -> None:
    """Each kernel's share of the call and its fractions of the measured peaks; the bounds."""
    if bench.error:
        return
    busy = sum(k.us for k in bench.kernels)  # more than the call where the profiler's own cost swells it
    # shares of what the verdict times: the GPU clock's span where it decides (the host's launch is not in it)
    span = bench.gpu_us if bench.gpu_us and evaluator.target.deciding_clock == "gpu" else bench.call_us
    call = max(span or 0.0, busy) or None
    for kernel in bench.kernels:
        kernel.share = round(kernel.us / call, 4) if call else None
        if peaks is not None and kernel.dram_gbps is not None and peaks.dram_gbps:
            kernel.dram_of_peak = round(kernel.dram_gbps / peaks.dram_gbps, 4)
        if peaks is not None and kernel.tensor_pct is not None and peaks.theoretical_tflops and peaks.tensor_tflops:
            kernel.tensor_of_peak = round(kernel.tensor_pct / 100 * peaks.theoretical_tflops / peaks.tensor_tflops, 4)
    if call:
        spec = with_seed(evaluator.target.benchmarks[bench.index], 0)
        plan = evaluator.plan(Case("benchmark", bench.index, 1, evaluator.target.distributions[0].name, spec))
        moved = plan.get("input_bytes", 0) + plan.get("output_bytes", 0)
        bench.io_gbps = round(moved / (call * 1e-6) / 1e9, 3) if moved else None
    bench.bounds = bound_lines(bench, peaks, on_cpu)


def _failed(target: Target, index: int, error: Exception) -> BenchmarkProfile:
    return BenchmarkProfile(index, target.benchmark_label(index), error=one_line(_said(error)))


def _tell(progress: Progress, target: Target, index: int, started: float) -> None:
    progress(stage=STAGE, benchmark=index + 1, benchmarks=len(target.benchmarks), label=target.benchmark_label(index),
             seconds=round(time.monotonic() - started, 1))


def _said(error: Exception) -> str:
    if isinstance(error, WorkerError):
        return f"{error.status}: {error.message}"
    if isinstance(error, CommandFailed):
        return error.error
    return str(error) or type(error).__name__


def _last_line(text: str) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(empty)"


def _version(package: str) -> Optional[str]:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None
