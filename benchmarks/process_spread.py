"""Where the spread between processes comes from, on GPU MODE problems: fresh processes, no judge, each timing
one benchmark per problem the way judge's GPU clock does (L2 flush, a GPU spin that hides the launch, CUDA
events around the call), in three layouts:
  A   five batches, nothing moved in between;
  B1  before each batch the caching allocator is emptied and a pad of random size is held, so the kernel's own
      intermediates and outputs land elsewhere; the inputs stay;
  B2  as B1, and the inputs are cloned to a new place too.
Then, in the same process, the kernel replayed from a CUDA graph (launch gaps gone; kernels that copy from
pageable memory cannot be captured) and the kernels' own GPU time from the profiler (gaps and host waits gone).

If moving memory inside a process (B1, B2) spreads batches as far as processes spread (A, between), the
spread is the layout; if the profiler's kernel times agree between processes while the events' do not, it is
host time inside the call. Prints a table; --json keeps every process's numbers.

    python benchmarks/process_spread.py --problems .gpumode/problems/pmpp_v2 --processes 10 [--spin-us 200] \
        [--cores 0,2,4] [--json out.json]
Needs a CUDA GPU. Not a test: it prints numbers for docs/judge_performance.md.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time

# One benchmark per problem, from its task.yml: the ones whose process pairs strayed most under judge.
CASES = [("grayscale_py", {"size": 512, "seed": 54352}),
         ("matmul_py", {"m": 2048, "n": 3072, "k": 2048, "seed": 32412}),
         ("histogram_py", {"size": 2621440, "seed": 8841, "contention": 10}),
         ("prefixsum_py", {"size": 262144, "seed": 12345}),
         ("vectoradd_py", {"size": 1024, "seed": 31232})]
REPS, BATCHES = 40, 5
FLUSH_BYTES = 100 * 2**20
SPIN_CYCLES_PER_US = 1980  # an H100's boost clock; the spin only has to outlast the launch


def load(problems: str, problem: str):
    """The problem's generate_input and its own submission's custom_kernel (each problem has a task.py and a
    reference.py of the same names, so the modules are dropped before the next)."""
    for name in ("task", "utils", "reference", "submission"):
        sys.modules.pop(name, None)
    sys.path[:0] = [os.path.join(problems, problem), problems]
    try:
        reference = importlib.import_module("reference")
        submission = importlib.import_module("submission")
    finally:
        del sys.path[:2]
    return reference.generate_input, submission.custom_kernel


def child(problems: str, seed: int, spin_us: float, core: int) -> dict:
    """One process's measurements of every case."""
    import torch

    if core >= 0:
        os.sched_setaffinity(0, {core})
    rng = random.Random(seed)
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    cycles = int(spin_us * SPIN_CYCLES_PER_US)

    def timed(call) -> float:
        times = []
        for _ in range(REPS):
            flush.zero_()
            torch.cuda._sleep(cycles)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) * 1000)
        return statistics.median(times)

    out = {"core": core}
    for problem, args in CASES:
        generate, kernel = load(problems, problem)
        data = generate(**args)
        torch.cuda.synchronize()
        timed(lambda: kernel(data))  # warm-up
        result = {"A": [timed(lambda: kernel(data)) for _ in range(BATCHES)], "B1": [], "B2": []}
        held = []  # the pad that moves the next allocations
        for layout in ("B1", "B2"):
            moved = data
            for _ in range(BATCHES):
                held.clear()
                if layout == "B2":
                    moved = None
                torch.cuda.empty_cache()
                held.append(torch.empty(rng.randrange(1, 64 * 2**20), dtype=torch.uint8, device="cuda"))
                if layout == "B2":
                    moved = tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in data)
                result[layout].append(timed(lambda: kernel(moved)))
        result["graph"] = _graph_times(torch, kernel, data, timed)
        result["kernel_us"] = _kernel_time(torch, kernel, data, flush, cycles)
        out[problem] = result
        data = moved = None
        held.clear()
        torch.cuda.empty_cache()
    return out


def _graph_times(torch, kernel, data, timed) -> list[float] | str:
    try:
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            kernel(data)
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            kernel(data)
        return [timed(graph.replay) for _ in range(BATCHES)]
    except Exception as error:  # a pageable copy or a host sync cannot be captured
        return f"{type(error).__name__}: {str(error).splitlines()[0][:120]}"


def _kernel_time(torch, kernel, data, flush, cycles) -> float | str:
    """The mean GPU time of the call's own kernels and copies per call (the flush and the spin left out)."""
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(REPS):
                flush.zero_()
                torch.cuda._sleep(cycles)
                kernel(data)
            torch.cuda.synchronize()
        total = 0.0
        for event in prof.events():
            if "CUDA" not in str(getattr(event, "device_type", "")):
                continue
            us = event.time_range.elapsed_us()
            if "spin_kernel" in event.name or "sleep" in event.name.lower() or ("Fill" in event.name and us > 10):
                continue
            total += us
        return total / REPS
    except Exception as error:
        return f"{type(error).__name__}: {error}"[:120]


def _sd_log(values: list[float]) -> float:
    logs = [math.log(v) for v in values]
    return statistics.stdev(logs) if len(logs) > 1 else float("nan")


def table(runs: list[dict]) -> list[str]:
    lines = ["| problem (benchmark) | events median us | between processes (A) | within, A | within, B1 | "
             "within, B2 | between (B2) | graph: between | kernels only: between | kernels only us |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for problem, args in CASES:
        per = [run[problem] for run in runs]
        medians_a = [statistics.median(p["A"]) for p in per]
        within = {k: statistics.mean(_sd_log(p[k]) for p in per) for k in ("A", "B1", "B2")}
        graphs = [statistics.median(p["graph"]) for p in per if isinstance(p["graph"], list)]
        kernels = [p["kernel_us"] for p in per if isinstance(p["kernel_us"], float)]
        graph = f"{_sd_log(graphs):.2%}" if len(graphs) == len(per) else "not capturable"
        kernel = f"{_sd_log(kernels):.2%}" if len(kernels) == len(per) else "n/a"
        kernel_us = f"{statistics.median(kernels):.1f}" if kernels else "n/a"
        label = ", ".join(f"{k}={v}" for k, v in args.items() if k != "seed")
        lines.append(f"| {problem} ({label}) | {statistics.median(medians_a):.1f} | {_sd_log(medians_a):.2%} | "
                     f"{within['A']:.2%} | {within['B1']:.2%} | {within['B2']:.2%} | "
                     f"{_sd_log([statistics.median(p['B2']) for p in per]):.2%} | {graph} | {kernel} | "
                     f"{kernel_us} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", required=True, help="GPU MODE's problems/pmpp_v2 directory")
    parser.add_argument("--processes", type=int, default=10)
    parser.add_argument("--spin-us", type=float, default=200.0)
    parser.add_argument("--cores", default="", help="pin process i to the i-th of these cores (default: unpinned)")
    parser.add_argument("--json")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--core", type=int, default=-1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    problems = os.path.abspath(args.problems)
    if args.child is not None:
        print(json.dumps(child(problems, args.child, args.spin_us, args.core)))
        return 0
    cores = [int(c) for c in args.cores.split(",") if c.strip()] or [-1]
    runs, started = [], time.time()
    for i in range(args.processes):
        command = [sys.executable, __file__, "--problems", problems, "--child", str(i), "--spin-us",
                   str(args.spin_us), "--core", str(cores[i % len(cores)])]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            print(f"process {i} failed:\n{done.stderr[-2000:]}", file=sys.stderr)
            continue
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"process {i + 1}/{args.processes} done ({time.time() - started:.0f} s)", file=sys.stderr)
    if len(runs) < 2:
        print("fewer than two processes finished: no spread to show", file=sys.stderr)
        return 1
    print(f"{len(runs)} processes, spin {args.spin_us:g} us, {time.time() - started:.0f} s; "
          "standard deviations of log times")
    print("\n".join(table(runs)))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"spin_us": args.spin_us, "cores": cores, "runs": runs}, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
