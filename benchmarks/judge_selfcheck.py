"""How honest judge's verdicts are on a target: identical kernels (A/A) and calibrated slowdowns, judged as a
round judges candidates.

Per target, in one Evaluator (one oracle, the same spares), in this order:
  1. controls: the base against an identical copy, as every round's control; their pairs set the noise floor
     (judge.noise.floor_from, the target's min_effect as its lower limit);
  2. identical candidates: the base again, judged against that floor (the verdict must be unchanged or
     inconclusive, never faster or slower);
  3. slowdowns: the base slowed by a known fraction of its own time per benchmark (judge.calibrate's mixin),
     `--tries` times at `--slowdown` percent and once at each `--ladder` percent, judged in a second Evaluator
     against the base with an empty spin after each call (judge.calibrate.spun_evaluator), so that only the delay
     differs and "2%" is 2%.
It prints a table per target and one across targets, and writes every number to --json.

    PYTHONPATH=$PWD python benchmarks/judge_selfcheck.py --target tests/fixtures/gpumode/vecadd \
        --target .gpumode/problems/pmpp_v2/matmul_py [--controls 1] [--aa 3] [--slowdown 2] [--tries 10] \
        [--ladder 0.5,1,5] [--json out.json]
Needs a CUDA GPU for GPU targets (a CPU target runs anywhere). Not a test: it prints numbers for
docs/judge_performance.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from judge import devices  # noqa: E402
from judge.sandbox import worker  # noqa: E402
from judge.calibrate import _delays, slowed_by, spun_evaluator  # noqa: E402
from judge.errors import JudgeError  # noqa: E402
from judge.stages.check import check  # noqa: E402
from judge.dispatch import kernel_stages  # noqa: E402
from judge.stages.evaluation import Evaluator  # noqa: E402
from judge.noise import floor_from, target_minimum  # noqa: E402
from judge.targets import load_target  # noqa: E402
from judge.stages.timing.stage import MIN_PAIRS  # noqa: E402


def log(message: str) -> None:
    print(f"[{datetime.now(timezone.utc).strftime('%H:%M:%S')}] {message}", flush=True)


def judged(ev: Evaluator, work: Path, name: str, source: str, budget_s, floor) -> dict:
    """One candidate as a round judges it: correctness, then timing in process pairs against `floor`."""
    started = time.monotonic()
    stages = kernel_stages(ev, ev.target.assemble(work / name, source), budget_s, floor)
    timing = stages[-1]
    out = {"name": name, "seconds": round(time.monotonic() - started, 2), "stage": timing.stage,
           "status": timing.status, "summary": timing.summary}
    if timing.stage == "timing" and timing.status == "passed":
        d = timing.detail
        out.update(decision=d.decision, geomean=d.geomean, ci=d.geomean_ci, pairs=d.pairs,
                   pair_geomeans=d.pair_geomeans, logs=[math.log(g) for g in d.pair_geomeans],
                   measuring_s=d.measuring_s,
                   benchmarks=[{"index": b.index, "label": b.label, "base_median_us": b.base_median_us,
                                "speedup": b.speedup, "ci": [b.ci_low, b.ci_high],
                                "pair_log_ratios": b.pair_log_ratios, "method": b.method,
                                "replay": b.audit.get("replay_ratio"), "first_calls": b.audit.get("first_calls")}
                               for b in d.benchmarks])
    log(f"  {name}: {out.get('decision', out['status'])} {out['summary']} ({out['seconds']} s)")
    return out


def selfcheck(path: Path, args, work_root: Path) -> dict:
    target = load_target(path)
    base_source = target.kernel_source()
    work = work_root / target.name
    started = time.monotonic()
    log(f"{target.name}: {len(target.benchmarks)} benchmarks")
    with Evaluator(target, work / ".round", base_dir=target.assemble(work / "base", base_source)) as ev:
        base = check(ev, ev.base_dir)
        if not base.passed:
            return {"target": target.name, "error": f"the base fails correctness: {base.summary}"}
        controls = [judged(ev, work, f"control-{n}", base_source, args.budget_s, None) for n in range(args.controls)]
        floor = floor_from([c["logs"] for c in controls if c.get("logs")], target_minimum(target), MIN_PAIRS)
        log(f"  floor: {floor.words()}")
        aa = [judged(ev, work, f"aa-{n}", base_source, args.budget_s, floor) for n in range(args.aa)]
        delays = _delays(ev, target, [c for c in controls + aa if c.get("benchmarks")])
    tries, ladder = [], []
    if args.tries or args.ladder:  # slowed copies, against the base with an empty spin after each call
        try:
            with spun_evaluator(target, work, base_source, delays) as ev:
                for n in range(args.tries):
                    source = slowed_by(base_source, delays, args.slowdown / 100)
                    tries.append(judged(ev, work, f"slow{args.slowdown:g}-{n}", source, args.budget_s, floor))
                for percent in args.ladder:
                    source = slowed_by(base_source, delays, percent / 100)
                    ladder.append(dict(judged(ev, work, f"ladder{percent:g}", source, args.budget_s, floor),
                                       percent=percent))
        except JudgeError as error:
            return {"target": target.name, "error": str(error)}
    identical = [r for r in controls + aa if r.get("decision")]
    logs = [x for r in identical for x in r["logs"]]
    return {"target": target.name, "benchmarks": len(target.benchmarks), "floor": floor.to_json(),
            "controls": controls, "aa": aa, "tries": tries, "ladder": ladder, "slowdown": args.slowdown,
            "identical_verdicts": [r["decision"] for r in identical],
            "mean_log_ratio": sum(logs) / len(logs) if logs else None,
            # the "self error": how far an identical copy's geomean strayed from 1, at worst
            "worst_self_error": max((abs(r["geomean"] - 1) for r in identical), default=None),
            "slower_in": sum(1 for r in tries if r.get("decision") == "slower"),
            "smallest_found": min([r["percent"] for r in ladder if r.get("decision") == "slower"]
                                  + ([args.slowdown] if any(r.get("decision") == "slower" for r in tries) else []),
                                  default=None),
            "seconds": round(time.monotonic() - started, 1),
            "per_evaluation_s": round(sum(r["seconds"] for r in controls + aa + tries + ladder)
                                      / max(1, len(controls + aa + tries + ladder)), 2)}


def table(results: list[dict], args) -> None:
    print()
    print(f"| target | benchmarks | identical: verdicts | mean log ratio | worst self error | floor | "
          f"{args.slowdown:g}% slower | ladder found | s per evaluation | s |")
    print("|---|---:|---|---:|---:|---:|---:|---|---:|---:|")
    for r in results:
        if "error" in r:
            print(f"| {r['target']} | | {r['error']} | | | | | | | |")
            continue
        counts = {}
        for v in r["identical_verdicts"]:
            counts[v] = counts.get(v, 0) + 1
        verdicts = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        ladder = ", ".join(f"{x['percent']:g}%: {x.get('decision', x['status'])}" for x in r["ladder"])
        mean = f"{r['mean_log_ratio']:+.4f}" if r["mean_log_ratio"] is not None else "-"
        worst = f"{r['worst_self_error']:.2%}" if r["worst_self_error"] is not None else "-"
        print(f"| {r['target']} | {r['benchmarks']} | {verdicts} | {mean} | {worst} | {r['floor']['effect']:.2%} | "
              f"{r['slower_in']} of {len(r['tries'])} | {ladder} | {r['per_evaluation_s']} | {r['seconds']} |")
    judged = [r for r in results if "error" not in r]
    identical = [v for r in judged for v in r["identical_verdicts"]]
    wrong = [v for v in identical if v in ("faster", "slower")]
    means = [r for r in judged if r["mean_log_ratio"] is not None]
    within = [r for r in means if abs(r["mean_log_ratio"]) <= 0.003]
    worst = max((r for r in judged if r["worst_self_error"] is not None), key=lambda r: r["worst_self_error"],
                default=None)
    print()
    print(f"identical kernels: {len(identical)}, judged faster or slower: {len(wrong)}")
    print(f"mean log ratio within ±0.3%: {len(within)} of {len(means)} targets")
    if worst is not None:
        print(f"worst self error: {worst['worst_self_error']:.2%} ({worst['target']})")
    tried = [r for r in judged if r["tries"]]
    if tried:
        print(f"{args.slowdown:g}% slowdowns judged slower: "
              + ", ".join(f"{r['target']} {r['slower_in']} of {len(r['tries'])}" for r in tried))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", action="append", type=Path, required=True)
    parser.add_argument("--controls", type=int, default=1)
    parser.add_argument("--aa", type=int, default=3)
    parser.add_argument("--slowdown", type=float, default=2.0)
    parser.add_argument("--tries", type=int, default=10)
    parser.add_argument("--ladder", type=lambda s: [float(x) for x in s.split(",") if x], default=[0.5, 1.0, 5.0])
    parser.add_argument("--budget-s", type=float, default=None)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    facts = devices.probe()
    if facts is not None:
        log(f"device: {facts.name}, driver {facts.driver}, CUDA {facts.cuda}, torch {facts.torch}, "
            f"CuTe DSL {facts.cutedsl}")
    work_root = Path(tempfile.mkdtemp(prefix="judge-selfcheck-"))
    results = []
    worker.COMMAND_SECONDS.clear()
    for path in args.target:
        results.append(selfcheck(path, args, work_root))
        if args.json:
            args.json.write_text(json.dumps({"device": facts.to_dict() if facts else None, "results": results,
                                             "commands": worker.COMMAND_SECONDS}, default=str))
    table(results, args)


if __name__ == "__main__":
    main()
