"""The device's measured peaks, which a profile's achieved numbers are read against: DRAM bandwidth from a large
device-to-device copy, tensor-core throughput from a large matmul in the target's dtype family (FP8 through
torch._scaled_mm where the GPU has it, else bf16). Measured once per device and family in a child process (CUDA
never starts in judge's own) and kept in the ledger (judge.ledger.profiles); a CPU target needs none."""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

COPY_BYTES = 1 << 30
MATMUL_SIZE = 8192
REPEATS = 10
MEASURE_S = 300.0
# Dense tensor-core FLOPs per SM and clock, by compute capability and family: what ncu's pipe utilisation is a
# percentage of (sm_90: 989 bf16 TFLOPS on 132 SMs at 1830 MHz).
FLOPS_PER_SM_CLOCK = {("9.0", "bf16"): 4096, ("9.0", "fp8"): 8192, ("10.0", "bf16"): 8192, ("10.0", "fp8"): 16384,
                      ("8.0", "bf16"): 2048, ("8.9", "bf16"): 1024, ("8.9", "fp8"): 2048}


@dataclass
class Peaks:
    device: str
    family: str  # "fp8" or "bf16": the matmul's
    dram_gbps: float
    tensor_tflops: float
    torch: Optional[str] = None
    theoretical_tflops: Optional[float] = None  # from the SM count and clock, where the capability is known

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Optional[dict]) -> Optional["Peaks"]:
        return None if not data else cls(**{k: data.get(k) for k in cls.__dataclass_fields__})


def family_of(target_name: str) -> str:
    """The matmul family a target's tensor throughput is read against: FP8 for an FP8 target (by its name), else
    bf16."""
    return "fp8" if "fp8" in target_name.lower() else "bf16"


def measure(family: str, timeout_s: float = MEASURE_S) -> Peaks:
    """Measure this machine's GPU in a child process; raises RuntimeError in one line when it cannot."""
    from ...sandbox.isolation import run_isolated

    with tempfile.TemporaryDirectory(prefix="judge-peaks-") as tmp:
        outcome = run_isolated(_measure_here, {"family": family}, timeout_s=timeout_s, cwd=Path(tmp))
    if outcome.status != "ok" or not outcome.value:
        said = (outcome.error or outcome.log_tail or "no output").strip().splitlines() or ["no output"]
        raise RuntimeError(f"measuring the device's peaks failed ({outcome.status}): {said[-1]}")
    return Peaks(**outcome.value)


def theoretical_tflops(capability: str, sm_count: int, clock_mhz: Optional[int], family: str) -> Optional[float]:
    per = FLOPS_PER_SM_CLOCK.get((capability, family))
    if not per or not clock_mhz:
        return None
    return per * sm_count * clock_mhz * 1e6 / 1e12


def _measure_here(family: str) -> dict:
    """The child's side: the best of REPEATS timed copies and matmuls (CUDA events)."""
    import torch

    from ...machine import facts_here

    facts = facts_here()
    if facts is None:
        raise RuntimeError("no CUDA GPU")
    copy_ms = _copy_ms(torch)
    n = MATMUL_SIZE
    use_fp8 = family == "fp8" and hasattr(torch, "_scaled_mm") and torch.cuda.get_device_capability() >= (8, 9)
    mm_ms = _fp8_ms(torch, n) if use_fp8 else None
    if mm_ms is None:  # no FP8 here (or torch refused it): bf16, and the peaks say so
        use_fp8 = False
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        mm_ms = _best(lambda: a @ b)
    return {"device": facts.name, "family": "fp8" if use_fp8 else "bf16",
            "dram_gbps": round(2 * COPY_BYTES / (copy_ms * 1e-3) / 1e9, 1),
            "tensor_tflops": round(2 * n ** 3 / (mm_ms * 1e-3) / 1e12, 1), "torch": torch.__version__,
            "theoretical_tflops": theoretical_tflops(facts.capability, facts.sm_count,
                                                     facts.sm_clock_max_mhz, "fp8" if use_fp8 else "bf16")}


def _fp8_ms(torch, n: int):
    """The best FP8 (e4m3) n-cubed matmul through torch._scaled_mm, in ms; None where this torch refuses it."""
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants it
    one = torch.ones((), device="cuda", dtype=torch.float32)
    try:
        return _best(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    except (RuntimeError, TypeError):
        return None


def _copy_ms(torch) -> float:
    """A COPY_BYTES device-to-device copy's best time (its buffers freed on return)."""
    source = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda")
    copied = torch.empty_like(source)
    return _best(lambda: copied.copy_(source))


def _best(work) -> float:
    """The shortest of REPEATS timed runs of `work`, in ms, after two untimed ones."""
    import torch

    for _ in range(2):
        work()
    times = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        work()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return min(times)
