"""Whether the GPU clock's wait (judge.boundary.gpu_wait) does what the timing relies on, on this GPU:

1. it ends soon after the runner's word, never before its least, and at its most where no word comes;
2. the length of the wait before a kernel does not move the kernel's time: a wait now lasts about a call's own
   launch, where the fixed spin it replaced lasted three, so kernels are timed after waits of different lengths.

    PYTHONPATH=$PWD python benchmarks/gpu_wait_check.py [--rounds 250]

Kernels of the FP8 problem's sizes (bf16 and FP8 GEMMs, a memory-bound scale), each call after an L2 flush, the
wait lengths interleaved in a random order every round, a pause between rounds as judge's turns have. Prints
Markdown tables; not a test.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from judge.boundary import gpu_wait  # noqa: E402

WAITS_US = (20, 300, 1400, 4000)
REFERENCE_US = 1400  # today's fp8-mm spin
BOOTSTRAP = 400


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=250)
    args = parser.parse_args()
    import torch

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    wait = gpu_wait.load()
    if wait is None:
        print("this machine's CUDA driver did not load judge's GPU wait: the timing spins instead")
        return 1
    wait.set_stream(torch.cuda.current_stream().cuda_stream)
    rate = _cycles_per_us(torch)
    print(f"# The GPU clock's wait on {torch.cuda.get_device_name()}\n\n"
          f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC · torch {torch.__version__} · python "
          f"{platform.python_version()} · {rate:.0f} cycles/us · `{' '.join(sys.argv)}`\n")
    _ends(torch, wait, rate)
    _lengths(torch, rate, args.rounds)
    return 0


def _cycles_per_us(torch) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rates = []
    for _ in range(5):
        torch.cuda.synchronize()
        start.record()
        torch.cuda._sleep(1_000_000)
        end.record()
        end.synchronize()
        rates.append(1_000_000 / (start.elapsed_time(end) * 1e3))
    return statistics.median(rates)


def _ends(torch, wait: gpu_wait.GpuWait, rate: float) -> None:
    """The wait's length on the GPU (events around it) when the word comes after `after` us of host work."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    code = 0
    rows = []
    for label, least_us, most_us, after_us in (("word at once", 0, 20_000, 0), ("word after 100 us", 0, 20_000, 100),
                                               ("word after 1000 us", 0, 20_000, 1000),
                                               ("word at once, least 800 us", 800, 20_000, 0),
                                               ("no word, most 2000 us", 0, 2_000, None)):
        spans = []
        for _ in range(20):
            code += 1
            torch.cuda.synchronize()
            wait.page[gpu_wait.CODE], wait.page[gpu_wait.LEAST] = code, int(least_us * rate)
            wait.page[gpu_wait.MOST] = int(most_us * rate)
            start.record()
            wait.launch(wait.function, 1, 1, 1, 1, 1, 1, 0, wait.stream, wait.params, None)
            end.record()
            if after_us is not None:
                began = time.perf_counter()
                while (time.perf_counter() - began) * 1e6 < after_us:
                    pass
                wait.page[gpu_wait.FLAG] = code
            end.synchronize()
            spans.append(start.elapsed_time(end) * 1e3)
        rows.append(f"| {label} | {statistics.median(spans):.1f} | {min(spans):.1f} | {max(spans):.1f} |")
    print("## 1. Where the wait ends (20 waits each, events around it)\n\n| the runner's word | median us | least us | "
          "most us |\n|---|---:|---:|---:|\n" + "\n".join(rows) + "\n")


def _lengths(torch, rate: float, rounds: int) -> None:
    """Each kernel after waits of WAITS_US, interleaved; its median per length against that after REFERENCE_US."""
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(2 * l2 // 4, dtype=torch.int32, device="cuda")
    a1, b1 = (torch.randn(s, device="cuda", dtype=torch.bfloat16) for s in ((1024, 7168), (7168, 1536)))
    a2, b2 = (torch.randn(s, device="cuda", dtype=torch.bfloat16) for s in ((6144, 7168), (7168, 4608)))
    f8a, f8b = (torch.randn(s, device="cuda").to(torch.float8_e4m3fn) for s in ((1024, 7168), (1536, 7168)))
    x, one = torch.randn(64 << 20, device="cuda"), torch.ones((), device="cuda")
    kernels = {"bf16 GEMM 1024x1536x7168": lambda: a1 @ b1, "bf16 GEMM 6144x4608x7168": lambda: a2 @ b2,
               "fp8 GEMM 1024x1536x7168": lambda: torch._scaled_mm(f8a, f8b.t(), one, one, out_dtype=torch.bfloat16),
               "x * 2, 256 MiB": lambda: x * 2}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rng = random.Random(1)
    print(f"## 2. A kernel's time after waits of different lengths ({rounds} calls each, L2 flushed)\n\n| kernel | "
          + " | ".join(f"after {w} us" for w in WAITS_US) + " |\n|---|" + "---:|" * len(WAITS_US))
    for name, kernel in kernels.items():
        for _ in range(5):
            kernel()
        times: dict[int, list[float]] = {w: [] for w in WAITS_US}
        for _ in range(rounds):
            for wait_us in rng.sample(WAITS_US, len(WAITS_US)):
                flush.zero_()
                torch.cuda._sleep(int(wait_us * rate))
                start.record()
                kernel()
                end.record()
                end.synchronize()
                times[wait_us].append(start.elapsed_time(end) * 1e3)
                time.sleep(0.002)
        cells = [_cell(times[w], times[REFERENCE_US], rng) for w in WAITS_US]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"\nEach cell: the median, and its ratio to the median after {REFERENCE_US} us with a 95% bootstrap "
          "interval. After 20 us the host's launch is not hidden: that column shows what a wait too short does.")


def _cell(times: list[float], reference: list[float], rng: random.Random) -> str:
    ratios = sorted(statistics.median(rng.choices(times, k=len(times))) /
                    statistics.median(rng.choices(reference, k=len(reference))) for _ in range(BOOTSTRAP))
    point = statistics.median(times) / statistics.median(reference)
    low, high = ratios[int(0.025 * BOOTSTRAP)], ratios[int(0.975 * BOOTSTRAP) - 1]
    return f"{statistics.median(times):.1f} us, {point:.4f}x [{low:.4f}, {high:.4f}]"


if __name__ == "__main__":
    sys.exit(main())
