"""`judge calibrate`: how much noise judge sees on this machine for a target, and the smallest slowdown it finds.

For organizers setting up a contest on a new machine or target. It judges the target's current base against
identical copies of itself (A/A) several times, exactly as a round judges a candidate, and then copies slowed by
known fractions of their own time (a GPU spin, or a busy wait on the CPU, after each call). A spin is a kernel
launch of its own, with a fixed cost (on the H100 a "2%" spin slowed 24-74 us kernels by 5-10%), so the slowed
copies are judged against the base with an empty spin after each call: the fixed cost is on both sides and the
difference is the delay asked for. It keeps the A/A runs in the ledger, where they set the noise floor with the
rounds' controls (judge.noise), and reports per benchmark the floor and the smallest slowdown found.
"""

from __future__ import annotations

import math
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional

from . import stats
from .devices import gate, probed
from .stages.evaluation import Evaluator
from .workspaces import fresh
from .ledger import Ledger, sha256
from .machine import facts_dict
from .noise import Floor, device_name, floor_from, target_minimum
from .targets import Target
from .stages.timing.stage import MIN_PAIRS

SLOWDOWNS = (0.005, 0.01, 0.02, 0.05)
AA_RUNS = 3

DELAY_MIXIN = '''

# --- judge calibrate: the base, slowed by a known fraction of its own time on each benchmark ---
import time as _judge_cal_time

import torch as _judge_cal_torch

_judge_cal_kernel = custom_kernel
_JUDGE_CAL_DELAY_US = {delays!r}  # by the bytes of the call's input tensors; 0.0 is an empty spin
_judge_cal_rate = []
_judge_cal_known = {{}}  # id(data) -> (data, delay or None, on the GPU): judge calls the same data again and again


def _judge_cal_bytes(data):
    if isinstance(data, (tuple, list)):
        return sum(_judge_cal_bytes(x) for x in data)
    if isinstance(data, dict):
        return sum(_judge_cal_bytes(x) for x in data.values())
    if isinstance(data, _judge_cal_torch.Tensor):
        return data.numel() * data.element_size()
    return 0


def _judge_cal_on_gpu(data):
    if isinstance(data, (tuple, list)):
        return any(_judge_cal_on_gpu(x) for x in data)
    if isinstance(data, dict):
        return any(_judge_cal_on_gpu(x) for x in data.values())
    return isinstance(data, _judge_cal_torch.Tensor) and data.is_cuda


def _judge_cal_cycles_per_us():
    # The GPU's clock under load: a first spin raises it from idle, and the fastest of five is kept; a rate read
    # with the clock still low would make every delay short of the fraction asked for. On an H100 (2026-11-26)
    # 2% delays on vecadd read 1.2-1.7% with the median of three, 1.5-2.0% with this.
    if not _judge_cal_rate:
        start, end = (_judge_cal_torch.cuda.Event(enable_timing=True) for _ in range(2))
        _judge_cal_torch.cuda._sleep(4_000_000)
        rates = []
        for _ in range(5):
            start.record()
            _judge_cal_torch.cuda._sleep(200_000)
            end.record()
            end.synchronize()
            rates.append(200_000 / (start.elapsed_time(end) * 1e3))
        _judge_cal_rate.append(max(rates))
    return _judge_cal_rate[0]


def custom_kernel(data):
    known = _judge_cal_known.get(id(data))
    if known is None or known[0] is not data:  # worked out before the call: no host work between kernel and delay
        known = _judge_cal_known[id(data)] = (data, _JUDGE_CAL_DELAY_US.get(_judge_cal_bytes(data)),
                                              _judge_cal_on_gpu(data))
    delay, on_gpu = known[1], known[2]
    out = _judge_cal_kernel(data)
    if delay is not None:  # a benchmark's size: its spin, empty or not, so every copy pays the same launch
        if on_gpu:  # where the inputs are, not whether a GPU exists: a CPU target on a GPU host waits on the host
            _judge_cal_torch.cuda._sleep(int(delay * _judge_cal_cycles_per_us()))
        else:
            until = _judge_cal_time.perf_counter() + delay * 1e-6
            while _judge_cal_time.perf_counter() < until:
                pass
    return out
'''


def slowed_source(base_source: str, delays: dict[int, float]) -> str:
    """The base's source with each call delayed by `delays[input bytes]` microseconds after it returns (a spin
    launched even for 0.0: judge slowed copies against `spun_source`, never against the bare base)."""
    return base_source.rstrip("\n") + "\n" + DELAY_MIXIN.format(delays={k: round(v, 3) for k, v in delays.items()})


def spun_source(base_source: str, delays: dict[int, float]) -> str:
    """The base with an empty spin after each benchmark's call: what slowed copies are judged against, so that
    the spin's own launch is on both sides and only the delay differs."""
    return slowed_source(base_source, {size: 0.0 for size in delays})


def slowed_by(base_source: str, delays: dict[int, float], fraction: float) -> str:
    """The base slowed by `fraction` of each benchmark's median time (`delays`, as `_delays` gives them)."""
    return slowed_source(base_source, {size: fraction * us for size, us in delays.items()})


@contextmanager
def spun_evaluator(target: Target, root: Path, base_source: str, delays: dict[int, float]) -> Iterator[Evaluator]:
    """An Evaluator whose base is `spun_source`, checked: where slowed copies are judged. Raises JudgeError where
    that base fails its correctness stage."""
    spun_dir = target.assemble(root / "base-spun", spun_source(base_source, delays))
    with Evaluator(target, root / ".judge-round-spun", base_dir=spun_dir) as evaluator:
        failed = kernel_stages_check(evaluator, spun_dir)
        if failed is not None:
            raise_not_run(target, f"the base with an empty spin after each call fails its correctness stage: {failed}")
        yield evaluator


def calibrate(ledger: Ledger, target: Target, base_source: str, work_dir: Path, *, aa: int = AA_RUNS,
              slowdowns: tuple[float, ...] = SLOWDOWNS, budget_s: Optional[float] = None,
              on_event: Callable[..., None] = lambda *a, **k: None) -> dict:
    """A/A runs, then calibrated slowdowns, of `base_source`; the result, also kept in the ledger."""
    from .dispatch import kernel_stages

    reason = gate(target.arch)
    if reason:
        raise_not_run(target, reason)
    facts = probed()
    device = device_name(facts_dict(facts))
    root = fresh(Path(work_dir) / target.name / "calibrate")
    base_dir = target.assemble(root / "base", base_source)
    started = time.monotonic()
    controls, slowed = [], []
    with Evaluator(target, root / ".judge-round", base_dir=base_dir) as evaluator:
        base_check = kernel_stages_check(evaluator, base_dir)
        if base_check is not None:
            raise_not_run(target, f"the base fails its own correctness stage: {base_check}")
        for n in range(aa):
            on_event("calibrate", what=f"A/A {n + 1} of {aa}")
            stages = _watched(on_event, f"(A/A {n + 1})", kernel_stages, evaluator,
                              target.assemble(root / f"aa-{n + 1}", base_source), budget_s, control=True)
            controls.append(_run_record(stages, f"A/A {n + 1}"))
        floor = floor_from([c["logs"] for c in controls], target_minimum(target), MIN_PAIRS, device)
        delays = _delays(evaluator, target, controls)
    with spun_evaluator(target, root, base_source, delays) as evaluator:
        for fraction in slowdowns:
            on_event("calibrate", what=f"slowed by {fraction:.1%}")
            source = slowed_by(base_source, delays, fraction)
            stages = _watched(on_event, f"(slowed {fraction:.1%})", kernel_stages, evaluator,
                              target.assemble(root / f"slow-{fraction:g}", source), budget_s, floor)
            slowed.append(dict(_run_record(stages, f"slowed {fraction:.1%}"), fraction=fraction))
    result = _summary(target, controls, slowed, floor)
    result["seconds"] = round(time.monotonic() - started, 1)
    result["id"] = ledger.record_calibration(target.name, device, facts_dict(facts), sha256(base_source), result,
                                             sys.argv)
    return result


def _watched(on_event: Callable[..., None], name: str, kernel_stages, *args, control: bool = False) -> list:
    """One run's kernel stages with their progress as `progress` events named `name`, and `evaluated` at the end
    (judge.cli.progress shows them as a round's); an A/A run is a `control` (its pairs set the floor)."""
    from .dispatch import progress_of

    started = time.monotonic()
    stages = kernel_stages(*args, progress=progress_of(on_event, name), control=control)
    on_event("evaluated", proposal=name, seconds=round(time.monotonic() - started, 1))
    return stages


def kernel_stages_check(evaluator: Evaluator, base_dir: Path) -> Optional[str]:
    """None when the base passes its correctness stage, else why not."""
    from .stages.check import check

    result = check(evaluator, base_dir)
    return None if result.passed else result.summary


def raise_not_run(target: Target, reason: str):
    from .errors import JudgeError

    raise JudgeError(f"{target.name}: cannot calibrate here: {reason}")


def _run_record(stages: list, name: str) -> dict:
    """One A/A or slowed run as the result keeps it (a run that did not pass timing says why)."""
    timing = stages[-1]
    if timing.stage != "timing" or timing.status != "passed":
        return {"name": name, "error": timing.summary, "logs": []}
    detail = timing.detail
    return {"name": name, "decision": detail.decision, "geomean": detail.geomean, "ci": detail.geomean_ci,
            "pairs": detail.pairs, "pair_geomeans": detail.pair_geomeans,
            "logs": [math.log(g) for g in detail.pair_geomeans],
            "benchmarks": [{"index": b.index, "label": b.label, "base_median_us": b.base_median_us,
                            "speedup": b.speedup, "ci": [b.ci_low, b.ci_high], "pair_log_ratios": b.pair_log_ratios}
                           for b in detail.benchmarks]}


def _delays(evaluator: Evaluator, target: Target, controls: list[dict]) -> dict[int, float]:
    """Each benchmark's median base time (over the A/A runs), keyed as the mixin keys calls: by input bytes."""
    from .stages.evaluation import Case, with_seed

    times: dict[int, list[float]] = {}
    for run in controls:
        for bench in run.get("benchmarks", []):
            times.setdefault(bench["index"], []).append(bench["base_median_us"])
    delays = {}
    for index, values in times.items():
        spec = with_seed(target.benchmarks[index], 0)
        plan = evaluator.plan(Case("benchmark", index, 1, target.distributions[0].name, spec))
        delays[int(plan["input_bytes"])] = stats.median(values)
    return delays


def _summary(target: Target, controls: list[dict], slowed: list[dict], floor: Floor) -> dict:
    """Per benchmark: its floor from the A/A runs, and the smallest slowdown whose interval and point found it."""
    per_benchmark = []
    for index in target.ranked_benchmarks:
        samples = [[r for b in run.get("benchmarks", []) if b["index"] == index for r in b["pair_log_ratios"]]
                   for run in controls]
        bench_floor = floor_from(samples, 0.0, MIN_PAIRS)
        found = [run["fraction"] for run in slowed for b in run.get("benchmarks", [])
                 if b["index"] == index and b["ci"][1] < 1.0 and b["speedup"] <= bench_floor.slower_at]
        per_benchmark.append({"index": index, "label": target.benchmark_label(index), "floor": bench_floor.effect,
                              "smallest_found": min(found) if found else None})
    found = [run["fraction"] for run in slowed if run.get("decision") == "slower"]
    aa = [run for run in controls if run.get("logs")]
    bias = sum(sum(run["logs"]) for run in aa) / max(1, sum(len(run["logs"]) for run in aa)) if aa else None
    return {"controls": controls, "slowdowns": slowed, "floor": floor.to_json(), "per_benchmark": per_benchmark,
            "aa_verdicts": [run.get("decision") for run in controls], "bias": bias,
            "smallest_found": min(found) if found else None}
