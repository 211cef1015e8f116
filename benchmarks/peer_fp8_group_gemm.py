"""Time the fp8_group_gemm_sm90 base kernel against torch._scaled_grouped_mm on the same inputs.

Per benchmark of the target's task.yml: both medians in us, the peer/ours ratio with a 95% bootstrap
interval, and each as a fraction of speed of light; then the geometric mean over the four contest cases.
Measurement: interleaved ours/peer repetitions, an L2 flush (a write of a buffer larger than L2) before
each, then a GPU spin longer than either's launch overhead (so the events time the kernels, not the host),
CUDA events around each call, warm-up excluded. The host's launch overhead per call is reported beside.

    python benchmarks/peer_fp8_group_gemm.py [--ceilings] [--reps 200] [--set NUM_STAGES=6] [--kernel FILE]
    python benchmarks/peer_fp8_group_gemm.py --ledger docs/examples/fp8-contest/fp8-contest.db --round 5
        (the ledger is shipped as fp8-contest.db.xz: `xz -dk` it first)

With --ledger and --round the kernel is that round's base as judge builds it (judge.schedule.base_for: the
round-1 kernel with each earlier winner's patch applied), written to a temporary file.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import importlib.util
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml

TARGET = Path(__file__).resolve().parent.parent / "kernels" / "fp8_group_gemm_sm90"
CONTEST_CASES = 4  # the first four benchmarks; the fifth is the large case


def load_module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def peer(data):
    a, b, sa, sb, offs, _ = data
    return torch._scaled_grouped_mm(
        a, b.transpose(-2, -1), sa, sb, offs=offs, out_dtype=torch.bfloat16
    )


def speed_of_light_us(spec: dict, tflops: float, tbps: float) -> float:
    """Max of the FP8 tensor-core time and the time to move each input and output once."""
    m_total, n, k, groups = sum(spec["m"]), spec["n"], spec["k"], len(spec["m"])
    flops = 2.0 * m_total * n * k
    nbytes = m_total * k + groups * n * k + 2 * m_total * n + 4 * (m_total + groups * n)
    return max(flops / (tflops * 1e12), nbytes / (tbps * 1e12)) * 1e6


def measure_ceilings(reps: int = 50) -> tuple[float, float]:
    """FP8 dense peak through a large torch._scaled_mm, and device-to-device copy bandwidth."""
    best_tflops = 0.0
    for size in (8192, 16384):
        a = torch.randn(size, size, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(size, size, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.ones((), device="cuda")
        fn = lambda: torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16)  # noqa: E731
        times = time_calls([fn], reps=reps, flush=None)[0]
        tflops = 2.0 * size**3 / (statistics.median(times) * 1e-6) / 1e12
        print(f"  scaled_mm fp8 {size}^3: median {statistics.median(times):.1f} us = {tflops:.0f} TFLOP/s")
        best_tflops = max(best_tflops, tflops)
        del a, b
    nbytes = 1 << 30
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    times = time_calls([lambda: dst.copy_(src)], reps=reps, flush=None)[0]
    tbps = 2.0 * nbytes / (statistics.median(times) * 1e-6) / 1e12
    print(f"  copy 1 GiB: median {statistics.median(times):.1f} us = {tbps:.3f} TB/s (read + write)")
    del src, dst
    torch.cuda.empty_cache()
    return best_tflops, tbps


def host_us_per_call(fn, calls: int = 30) -> float:
    """Median host time to enqueue one call (no synchronisation inside): the launch overhead."""
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


_cycles_per_us = []


def spin_cycles(us: float) -> int:
    """GPU clock cycles for `us` microseconds of torch.cuda._sleep, calibrated once."""
    if not _cycles_per_us:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1000)
        start.record()
        torch.cuda._sleep(2_000_000)
        end.record()
        torch.cuda.synchronize()
        _cycles_per_us.append(2_000_000 / (start.elapsed_time(end) * 1e3))
    return int(us * _cycles_per_us[0])


def time_calls(fns, reps: int, flush: torch.Tensor | None, warmup: int = 5,
               host_us: list[float] | None = None) -> list[list[float]]:
    """Interleave the functions rep by rep, flushing L2 before each call; returns us per call.

    The GPU spins after the flush for twice the slowest launch overhead (`host_us`, the callers' measurement of
    it, or measured here), so every call is already queued when its start event fires: the events time the
    kernels, not the host's launch path."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    torch.cuda.synchronize()
    spin = spin_cycles(2 * max(host_us or [host_us_per_call(fn) for fn in fns]) + 20)
    events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)] for _ in fns]
    for r in range(reps):
        for i, fn in enumerate(fns):
            if flush is not None:
                flush.zero_()
            torch.cuda._sleep(spin)
            events[i][r][0].record()
            fn()
            events[i][r][1].record()
    torch.cuda.synchronize()
    return [[start.elapsed_time(end) * 1e3 for start, end in ev] for ev in events]


def bootstrap_ratio_ci(ours: list[float], theirs: list[float], n: int = 2000, seed: int = 0):
    """95% bootstrap interval of median(theirs) / median(ours), resampling repetitions in pairs."""
    rng = np.random.default_rng(seed)
    a, b = np.asarray(ours), np.asarray(theirs)
    idx = rng.integers(0, len(a), size=(n, len(a)))
    ratios = np.median(b[idx], axis=1) / np.median(a[idx], axis=1)
    return float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))


def round_base(ledger_path: Path, round_: int) -> Path:
    """Write round `round_`'s base of this target, as judge builds it from the ledger, to a temporary file."""
    import tempfile

    sys.path.insert(0, str(TARGET.parent.parent))
    from judge.errors import JudgeError
    from judge.ledger import Ledger
    from judge.schedule import base_for
    from judge.targets import load_target

    try:
        ledger = Ledger(ledger_path, create=False)
    except JudgeError as error:
        raise SystemExit(f"--ledger: {error}") from None
    latest = ledger.latest_round_number() or 0
    if not 1 <= round_ <= latest + 1:
        raise SystemExit(f"--round {round_}: {ledger_path} has rounds 1-{latest}; "
                         f"a base exists for rounds 1-{latest + 1}")
    source, origin = base_for(ledger, load_target(TARGET), round_)
    path = Path(tempfile.mkdtemp()) / "submission.py"
    path.write_text(source)
    print(f"round {round_} base: {origin}")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", type=Path, default=TARGET / "submission.py")
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--ceilings", action="store_true", help="measure FP8 peak and copy bandwidth first")
    parser.add_argument("--tflops", type=float, default=1233.0, help="FP8 ceiling when not measured")
    parser.add_argument("--tbps", type=float, default=3.0, help="bandwidth ceiling when not measured")
    parser.add_argument("--only", type=int, nargs="*", help="benchmark indices to run")
    parser.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE",
                        help="override a knob of the kernel file, e.g. NUM_STAGES=6 or CLUSTER_SHAPE_MN=(1,1)")
    parser.add_argument("--ledger", type=Path, help="a contest's ledger: time the base of --round from it")
    parser.add_argument("--round", type=int, help="with --ledger: the round whose base is timed")
    args = parser.parse_args()
    if (args.ledger is None) != (args.round is None):
        parser.error("--ledger and --round go together")
    if args.ledger is not None:
        args.kernel = round_base(args.ledger, args.round)

    sys.path.insert(0, str(TARGET))
    reference = load_module("reference", TARGET / "reference.py")
    kernel = load_module("submission", args.kernel)
    for item in args.set:
        knob, value = item.split("=", 1)
        setattr(kernel, knob, ast.literal_eval(value))
    task = yaml.safe_load((TARGET / "task.yml").read_text())
    props = torch.cuda.get_device_properties(0)
    print(f"device: {props.name}, {props.multi_processor_count} SMs; torch {torch.__version__}; "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"kernel: {args.kernel} config {kernel._config()}")

    tflops, tbps = args.tflops, args.tbps
    if args.ceilings:
        tflops, tbps = measure_ceilings()
    print(f"ceilings: FP8 {tflops:.0f} TFLOP/s, copy {tbps:.3f} TB/s")

    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")  # 256 MiB > 50 MB L2
    rows = []
    for index, spec in enumerate(task["benchmarks"]):
        if args.only and index not in args.only:
            continue
        data = reference.generate_input(**spec)
        t0 = time.time()
        out = kernel.custom_kernel(data).clone()
        torch.cuda.synchronize()
        first_call_s = time.time() - t0
        ok, msg = reference.check_implementation(data, out)
        peer_out = peer(data)
        peer_ok, peer_msg = reference.check_implementation(data, peer_out)
        host_ours = host_us_per_call(lambda: kernel.custom_kernel(data))
        host_peer = host_us_per_call(lambda: peer(data))
        ours, theirs = time_calls([lambda: kernel.custom_kernel(data), lambda: peer(data)], args.reps, flush,
                                  host_us=[host_ours, host_peer])
        mo, mp = statistics.median(ours), statistics.median(theirs)
        lo, hi = bootstrap_ratio_ci(ours, theirs)
        sol = speed_of_light_us(spec, tflops, tbps)
        rows.append((index, spec, mo, mp, mp / mo, lo, hi, sol, host_ours, host_peer))
        label = f"g={len(spec['m'])} N={spec['n']} K={spec['k']} M={','.join(map(str, spec['m']))}"
        print(f"[{index}] {label}: ours {'ok' if ok else 'WRONG'} ({msg}); peer {'ok' if peer_ok else 'WRONG'} "
              f"({peer_msg}); first call {first_call_s:.1f} s")
        del data, out, peer_out
        torch.cuda.empty_cache()

    print()
    print("| # | benchmark | ours (us) | peer (us) | peer/ours | 95% CI | SoL (us) | ours SoL frac | peer SoL frac "
          "| host us/call ours | host us/call peer |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for index, spec, mo, mp, ratio, lo, hi, sol, host_ours, host_peer in rows:
        label = f"g={len(spec['m'])} N={spec['n']} K={spec['k']}" + (" (large)" if index >= CONTEST_CASES else "")
        print(f"| {index} | {label} | {mo:.1f} | {mp:.1f} | {ratio:.3f} | {lo:.3f}-{hi:.3f} | {sol:.1f} | "
              f"{sol / mo:.2f} | {sol / mp:.2f} | {host_ours:.0f} | {host_peer:.0f} |")
    contest = [r for r in rows if r[0] < CONTEST_CASES]
    if contest:
        geo = math.exp(sum(math.log(r[4]) for r in contest) / len(contest))
        geo_ours = math.exp(sum(math.log(r[2]) for r in contest) / len(contest))
        geo_peer = math.exp(sum(math.log(r[3]) for r in contest) / len(contest))
        print(f"geomean over {len(contest)} contest cases: ours {geo_ours:.1f} us, peer {geo_peer:.1f} us, "
              f"peer/ours {geo:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
