"""What a profile records: per benchmark the kernels a call launched (or, on a CPU target, the host's ops), each
one's share of the call and what it achieved against the device's measured peaks. The ledger keeps `to_json`;
the brief, the scorecard and `judge profile --json` show the same fields."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Optional

NCU = "ncu"
TORCH = "torch.profiler"
HOST = "torch.profiler (host ops)"  # on a CPU target: where the host's time goes


@dataclass
class KernelShare:
    """One kernel (or, on a CPU target, one op) of a call: its time per call and what it achieved."""

    name: str
    launches: float  # per call
    us: float  # its time per call (a CPU op: its self time)
    share: Optional[float] = None  # of the call's time, 0..1
    dram_gbps: Optional[float] = None
    dram_of_peak: Optional[float] = None  # of the measured DRAM peak, 0..1
    tensor_pct: Optional[float] = None  # ncu's tensor pipe utilisation, % of its peak sustained while active
    tensor_of_peak: Optional[float] = None  # of the measured tensor peak, 0..1
    occupancy_pct: Optional[float] = None  # achieved occupancy (ncu)
    stalls: list[list] = field(default_factory=list)  # [[reason, cycles per issued instruction], ...], worst first

    @classmethod
    def from_json(cls, data: dict) -> "KernelShare":
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass
class BenchmarkProfile:
    """One benchmark: the call's own time (measured apart from the profiled calls), its kernels, the bounds."""

    index: int
    label: str
    call_us: Optional[float] = None  # host clock around the call and a sync: launch and host work included
    gpu_us: Optional[float] = None  # the GPU clock's span, launch hidden behind a spin (what a "gpu" verdict times)
    kernels: list[KernelShare] = field(default_factory=list)
    bounds: list[str] = field(default_factory=list)
    io_gbps: Optional[float] = None  # the inputs and outputs' bytes once over the call's time: a floor of its traffic
    error: Optional[str] = None

    @classmethod
    def from_json(cls, data: dict) -> "BenchmarkProfile":
        own = {f.name: data[f.name] for f in fields(cls) if f.name in data and f.name != "kernels"}
        return cls(**own, kernels=[KernelShare.from_json(k) for k in data.get("kernels", [])])


@dataclass
class Profile:
    """A kernel's profile on one device: `status` "ok" or "unavailable" (then `reason` says why, in one line)."""

    status: str
    tool: Optional[str] = None  # NCU, TORCH or HOST
    reason: Optional[str] = None
    notes: list[str] = field(default_factory=list)  # e.g. why ncu was not used
    device: Optional[str] = None
    versions: dict[str, Any] = field(default_factory=dict)  # torch, ncu
    peaks: Optional[dict] = None  # judge.stages.profile.peaks.Peaks's JSON
    benchmarks: list[BenchmarkProfile] = field(default_factory=list)

    @property
    def line(self) -> str:
        """The one line a report or a round's event gives it."""
        if self.status != "ok":
            return f"profile unavailable: {self.reason}"
        done = sum(1 for b in self.benchmarks if not b.error)
        part = f" ({done} of {len(self.benchmarks)} benchmarks)" if done < len(self.benchmarks) else ""
        return f"profiled with {self.tool} on {self.device or 'this machine'}{part}"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "Profile":
        own = {f.name: data[f.name] for f in fields(cls) if f.name in data and f.name != "benchmarks"}
        return cls(**own, benchmarks=[BenchmarkProfile.from_json(b) for b in data.get("benchmarks", [])])


def unavailable(reason: str, **facts) -> Profile:
    return Profile("unavailable", reason=one_line(reason), **facts)


def one_line(text: str, limit: int = 300) -> str:
    """A failure's first line, capped: the reason a report shows."""
    lines = str(text).strip().splitlines()
    first = lines[0] if lines else "no reason given"
    return first if len(first) <= limit else first[:limit] + "..."
