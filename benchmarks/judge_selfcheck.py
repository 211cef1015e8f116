"""How good and how costly the judge's own measurements are, on the vecadd fixture (15-60 us kernels).

Three questions, one table each:
  1. cost: GPU and wall seconds to evaluate a round of 8 candidates over 4 benchmarks (correctness + timing);
  2. noise: the speedup reported when the same kernel is judged against itself, five times
     (goal: every |geomean - 1| under 0.5%, every interval containing 1.0);
  3. resolution: the smallest slowdown it reports as significant, from kernels with a calibrated extra spin.
The round of question 1 is made of the candidates of questions 2 and 3 (5 identical, 3 delayed).

    PYTHONPATH=$PWD python benchmarks/judge_selfcheck.py [--json out.json]
Needs a CUDA GPU. Not a test: it prints numbers for docs/judge_performance.md.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from judge import audits, devices, stats, worker  # noqa: E402
from judge.evaluation import Evaluator  # noqa: E402
from judge.rounds import Stages  # noqa: E402
from judge.targets import load_target  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "gpumode" / "vecadd"
DELAYED = FIXTURE / "variants" / "delayed.py"
SELF_RUNS = 5
EXTRA_FRACTIONS = [0.005, 0.01, 0.02]  # slowdowns of the delayed candidates, of the geomean time
LADDER_FRACTIONS = [0.0025]  # measured outside the round: finer than its candidates


def delayed_source(cycles: int) -> str:
    return re.sub(r"^DELAY_CYCLES = .*$", f"DELAY_CYCLES = {cycles}", DELAYED.read_text(), flags=re.M)


def cycles_per_us() -> float:
    """How many cycles torch.cuda._sleep spins per microsecond on this GPU at its present clock."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rates = []
    for _ in range(5):
        torch.cuda.synchronize()
        start.record()
        torch.cuda._sleep(2_000_000)
        end.record()
        end.synchronize()
        rates.append(2_000_000 / (start.elapsed_time(end) * 1e3))
    return stats.median(rates)


def evaluate(evaluator: Evaluator, work: Path, name: str, source: str, budget_s: float | None):
    """One candidate as a round evaluates it: its own confined runner, the round's oracle and base runner."""
    workspace = evaluator.target.assemble(work / name, source)
    stages = Stages().evaluate(evaluator, workspace, budget_s)
    check, timing = stages[0], stages[-1]
    if not check.passed:
        raise SystemExit(f"{name}: correctness {check.status}: {check.summary}\n{check.log_tail}")
    if not timing.passed:
        raise SystemExit(f"{name}: timing {timing.status}: {timing.summary}\n{timing.log_tail}")
    return check, timing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write every number here too")
    parser.add_argument("--budget-s", type=float, default=None, help="timing budget per candidate (default: judge's)")
    args = parser.parse_args()

    facts = devices.probe()
    if facts is None:
        raise SystemExit("judge_selfcheck needs a CUDA GPU; this machine has none")
    target = load_target(FIXTURE)
    rate = cycles_per_us()
    work = Path(tempfile.mkdtemp(prefix="judge-selfcheck-"))
    base = target.assemble(work / "base", delayed_source(0))
    evaluator = Evaluator(target, work / ".round", base_dir=base)

    # A first self-comparison, outside the round, gives the kernel's times for calibrating the delays.
    _, calib = evaluate(evaluator, work, "calibration", delayed_source(0), args.budget_s)
    times = [b["base_median_us"] for b in calib.detail.to_json()["benchmarks"]]
    # A fixed spin of d us slows benchmark i by d / t_i; the geomean slows by about mean(d / t_i).
    inv = sum(1 / t for t in times) / len(times)

    def cycles_for(fraction: float) -> int:
        return max(1, round(fraction / inv * rate))

    candidates = [(f"self-{i + 1}", 0.0, delayed_source(0)) for i in range(SELF_RUNS)]
    candidates += [(f"slower-{f:.2%}", f, delayed_source(cycles_for(f))) for f in EXTRA_FRACTIONS]

    rows = []
    round_start = time.monotonic()
    child_s = measuring_s = 0.0
    worker.COMMAND_SECONDS.clear()
    for name, fraction, source in candidates:
        check, timing = evaluate(evaluator, work, name, source, args.budget_s)
        child_s += check.seconds + timing.seconds
        measuring_s += timing.detail.to_json()["measuring_s"]
        rows.append((name, fraction, check, timing))
    round_wall = time.monotonic() - round_start
    commands = {op: (count, seconds) for op, (count, seconds) in worker.COMMAND_SECONDS.items()}
    for fraction in LADDER_FRACTIONS:
        name = f"slower-{fraction:.2%}"
        check, timing = evaluate(evaluator, work, name, delayed_source(cycles_for(fraction)), args.budget_s)
        rows.append((name, fraction, check, timing))
    evaluator.close()

    device_after = rows[-1][3].detail.to_json()["device_after"]
    print(f"# judge self-check, {date.today().isoformat()}")
    print(f"device: {facts.name}, {facts.sm_count} SMs, {facts.arch}, L2 {facts.l2_mb} MB, driver {facts.driver}, "
          f"CUDA {facts.cuda}, torch {facts.torch}, CuTe DSL {facts.cutedsl}")
    print(f"clocks: SM {(calib.detail.to_json()['device'] or {}).get('sm_clock_mhz')} MHz before the first timing, "
          f"{device_after['sm_clock_mhz']} MHz after the last; spin rate {rate:.0f} cycles/us")
    confinement = calib.detail.to_json().get("confinement") or {}
    print(f"runners' confinement: syscalls: {confinement.get('syscalls', 'not reported')}")
    if not str(confinement.get("syscalls", "")).startswith("seccomp"):
        print("WARNING: the runners ran without seccomp (is pyseccomp installed?): not every defence was on")
    print(f"fixture: vecadd float32, benchmarks {', '.join(b['label'] for b in calib.detail.to_json()['benchmarks'])}; "
          f"base times {', '.join(f'{t:.1f}' for t in times)} us")
    print()
    print("## 1. Cost of a round (8 candidates x 4 benchmarks, correctness + timing)")
    print("| wall s | child processes s | of which measuring s | per candidate wall s |")
    print("|---|---|---|---|")
    print(f"| {round_wall:.1f} | {child_s:.1f} | {measuring_s:.1f} | {round_wall / len(candidates):.1f} |")
    print()
    print("Per candidate, seconds: " + "; ".join(
        f"{n} correctness {c.seconds:.2f}, timing {t.seconds:.2f} (measuring {t.detail.to_json()['measuring_s']:.2f})"
        for n, _, c, t in rows[:len(candidates)]))
    print()
    print("Commands to the workers over the round (the parent's wall clock, every worker):")
    print("| command | count | total s | per command us |")
    print("|---|---:|---:|---:|")
    for op, (count, seconds) in sorted(commands.items(), key=lambda item: -item[1][1]):
        print(f"| {op} | {count} | {seconds:.2f} | {seconds / count * 1e6:.0f} |")
    print()
    print("## 2. Same kernel against itself, and 3. calibrated slowdowns")
    print("| candidate | intended | geomean | 95% interval | significant | reps per benchmark | stopped, method, inputs "
          "| wall-clock excess us (gpu clock) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, fraction, _, timing in rows:
        d = timing.detail.to_json()
        low, high = d["geomean_ci"]
        reps = "/".join(str(b["reps"]) for b in d["benchmarks"])
        excess = "/".join(f"{b['audit']['wall_excess_us'].get('gpu call', 0):.1f}" for b in d["benchmarks"])
        stopped = "/".join(f"{b['stopped']} {b['method']} {b.get('placement', '')}" for b in d["benchmarks"])
        intended = "1.0000" if fraction == 0 else f"{1 / (1 + fraction):.4f}"
        print(f"| {name} | {intended} | {d['geomean']:.4f} | [{low:.4f}, {high:.4f}] | "
              f"{'yes' if d['significant'] else 'no'} | {reps} | {stopped} | {excess} |")
    selfs = [r[3].detail.to_json() for r in rows if r[1] == 0]
    worst = max(abs(d["geomean"] - 1) for d in selfs)
    contain = sum(d["geomean_ci"][0] <= 1 <= d["geomean_ci"][1] for d in selfs)
    slower = [r for r in rows if r[1] > 0]
    flagged = [(r[1], r[3].detail.to_json()["geomean"]) for r in slower if r[3].detail.to_json()["geomean_ci"][1] < 1]
    missed = [r[1] for r in slower if r[3].detail.to_json()["geomean_ci"][1] >= 1]
    print()
    print(f"self: worst |geomean - 1| = {worst:.2%} (goal < 0.5%); intervals containing 1.0: {contain} of {len(selfs)}")
    if flagged:
        smallest = min(flagged)
        print(f"smallest slowdown reported significant (interval below 1): {smallest[0]:.2%} intended "
              f"(measured geomean {smallest[1]:.4f}); not significant: "
              f"{', '.join(f'{m:.2%}' for m in missed) or 'none'}")
    ratios = [r for row in rows for b in row[3].detail.to_json()["benchmarks"]
              for r in b["audit"]["replay_ratio"].values() if r is not None]
    print(f"replay ratios (first calls on a set over the calls around them), every kernel and benchmark: "
          f"{min(ratios):.3f}-{max(ratios):.3f}; a candidate is named a replay above "
          f"{audits.REPLAY_FACTOR}x the base's")
    if args.json:
        args.json.write_text(json.dumps({
            "device": facts.to_dict(), "spin_cycles_per_us": rate, "round_wall_s": round_wall,
            "round_child_s": child_s, "round_measuring_s": measuring_s,
            "round_commands": {op: {"count": c, "seconds": round(t, 4)} for op, (c, t) in commands.items()},
            "calibration": calib.detail.to_json(),
            "rows": [{"name": n, "fraction": f, "correctness_s": c.seconds, "timing_s": t.seconds,
                      "timing": t.detail.to_json()} for n, f, c, t in rows],
        }))


if __name__ == "__main__":
    main()
