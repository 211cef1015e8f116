"""The two most promising bounds of a benchmark, one line each, from its profile and the device's measured peaks:
how close its kernels come to the DRAM peak and to the tensor-core peak, how much of the call is launches and gaps,
where its warps stall; on a CPU target, where the host's time goes. Pure: the brief and `judge profile` show them."""

from __future__ import annotations

from typing import Optional

from .model import BenchmarkProfile, KernelShare
from .peaks import Peaks

SHORT_US = 5.0
SHOWN = 2


def bound_lines(bench: BenchmarkProfile, peaks: Optional[Peaks], on_cpu: bool = False) -> list[str]:
    """The SHOWN lines whose bound the benchmark is nearest to, each with the share of the call it covers."""
    if on_cpu:
        return [_host_line(op) for op in bench.kernels[:SHOWN]]
    scored = [found for found in (_memory(bench, peaks), _tensor(bench, peaks), _launches(bench), _stalls(bench))
              if found is not None]
    return [line for _, line in sorted(scored, key=lambda item: -item[0])[:SHOWN]]


def _host_line(op: KernelShare) -> str:
    share = f"{op.share:.0%} of the call" if op.share is not None else "an unknown share of the call"
    return f"host: {op.name} takes {share} ({op.us:.1f} us self time, {op.launches:g} per call)"


def _kernels(count: int) -> str:
    return f"{count} kernel{'s' if count != 1 else ''}"


def _share(kernels: list[KernelShare]) -> float:
    return sum(k.share or 0.0 for k in kernels)


def _weighted(kernels: list[KernelShare], value) -> float:
    total = sum(k.us for k in kernels) or 1.0
    return sum(value(k) * k.us for k in kernels) / total


def _memory(bench: BenchmarkProfile, peaks: Optional[Peaks]):
    measured = [k for k in bench.kernels if k.dram_of_peak is not None]
    if measured:
        leaning = [k for k in measured if k.tensor_of_peak is None or k.dram_of_peak >= k.tensor_of_peak] or measured
        fraction, share = _weighted(leaning, lambda k: k.dram_of_peak), _share(leaning)
        return fraction * share, (f"memory: {fraction:.0%} of the measured DRAM peak over {_kernels(len(leaning))} "
                                  f"taking {share:.0%} of the call")
    if bench.io_gbps is not None and peaks is not None and peaks.dram_gbps:
        fraction = bench.io_gbps / peaks.dram_gbps
        return fraction, (f"memory: its inputs and outputs, read and written once, come to {fraction:.0%} of the "
                          f"measured DRAM peak over the call (a floor: no per-kernel bandwidth without ncu)")
    return None


def _tensor(bench: BenchmarkProfile, peaks: Optional[Peaks]):
    of_peak = [k for k in bench.kernels if k.tensor_of_peak is not None and k.tensor_of_peak > 0]
    if of_peak:
        fraction, share = _weighted(of_peak, lambda k: k.tensor_of_peak), _share(of_peak)
        family = peaks.family.upper() if peaks else "tensor"
        return fraction * share, (f"tensor cores: {fraction:.0%} of the measured {family} peak over "
                                  f"{_kernels(len(of_peak))} taking {share:.0%} of the call")
    pipe = [k for k in bench.kernels if k.tensor_pct is not None and k.tensor_pct > 0]
    if pipe:
        pct, share = _weighted(pipe, lambda k: k.tensor_pct), _share(pipe)
        return pct / 100 * share, (f"tensor cores: the tensor pipe {pct:.0f}% busy (ncu) over {_kernels(len(pipe))} "
                                   f"taking {share:.0%} of the call")
    return None


def _launches(bench: BenchmarkProfile):
    if not bench.kernels:
        return None
    launches = sum(k.launches for k in bench.kernels)
    short = sum(k.launches for k in bench.kernels if k.launches and k.us / k.launches < SHORT_US)
    busy = min(1.0, _share(bench.kernels))
    if not short and busy > 0.9:
        return None
    if short:
        line = (f"launch/latency: {short:g} of its {launches:g} launches a call take under 5 us each; the GPU busy "
                f"{busy:.0%} of the call")
    else:
        line = (f"host/launch: the GPU busy {busy:.0%} of the call ({launches:g} launch{'es' if launches != 1 else ''}"
                f" a call); the other {1 - busy:.0%} is host work and launch latency")
    return (1.0 - busy) + (short / launches if launches else 0.0) * busy, line


def _stalls(bench: BenchmarkProfile):
    stalled = [k for k in bench.kernels if k.stalls]
    if not stalled:
        return None
    worst = max(stalled, key=lambda k: k.share or 0.0)
    reason, value = worst.stalls[0][0], worst.stalls[0][1]
    used = max(worst.dram_of_peak or 0.0, worst.tensor_of_peak or 0.0)
    occupancy = f", occupancy {worst.occupancy_pct:.0f}%" if worst.occupancy_pct is not None else ""
    share = worst.share or 0.0
    return share * (1.0 - min(1.0, used)) * 0.5, (
        f"latency: {worst.name} ({share:.0%} of the call) stalls most on {reason} ({value:g} cycles per "
        f"instruction){occupancy}")
