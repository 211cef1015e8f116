"""Candidates per minute of a whole `judge run` round: on one GPU, on every GPU of this host (`--gpus`), and
through a Ray cluster (`--ray ADDRESS`), with each mode's verdicts compared to the one-GPU run's.

    PYTHONPATH=$PWD python benchmarks/judge_scale.py [--candidates 8] [--modes one,gpus,ray] [--ray-address ADDR]

The round: GPU MODE-style vecadd (tests/fixtures/gpumode/vecadd) whose base spins DELAY cycles after its add;
the candidates spin 0 (faster), DELAY (unchanged) or 2 x DELAY (slower) cycles, in turn. Every stage and every
defence of a real round runs (confined runners, correctness on every test, timing against the base).
Needs CUDA GPUs, and Ray for the gpus and ray modes. Not a test: it prints a table.

The cpu mode needs no GPU: the CPU target kernels/vecadd_cpu, each candidate its base plus a comment (every
stage runs: compile, correctness, timing against the base); cpu-serial runs it as rounds did before issue 27
(every compile first, each a cold child). Its rows add the compile stage's seconds per candidate. cpu-compile
times one candidate's compile stage, cold and warm in turn, `--candidates` times.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from judge.ledger import Ledger  # noqa: E402
from judge.records import Proposal  # noqa: E402
from judge.rounds import Settings, run_round  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "gpumode"
DELAYED = FIXTURES / "vecadd" / "variants" / "delayed.py"
DELAY = 20000  # cycles: about 10 us at 2 GHz, a fifth to a half of the kernel's time


def kernel(cycles: int) -> str:
    return re.sub(r"^DELAY_CYCLES = .*$", f"DELAY_CYCLES = {cycles}", DELAYED.read_text(), flags=re.M)


def patch(base: str, new: str) -> str:
    return "".join(difflib.unified_diff(base.splitlines(True), new.splitlines(True), "a/submission.py", "b/submission.py"))


def candidates(count: int) -> list[tuple[str, int]]:
    """(proposal id, cycles): faster, unchanged and slower in turn; an unchanged one differs by a comment."""
    kinds = [("faster", 0), ("same", DELAY), ("slower", 2 * DELAY)]
    return [(f"{kinds[i % 3][0]}-{i}", kinds[i % 3][1]) for i in range(count)]


def event_log(kind: str, **fields) -> None:
    """`--events`: each round event on stderr with the seconds since the benchmark started, to see where time goes;
    a Ray actor's runner command seconds when it closes."""
    if kind == "worker-tallies":
        print(f"{time.monotonic() - STARTED:8.2f}s runner commands of the actor on GPU {fields['place']['gpus']}:",
              file=sys.stderr)
        return print_tallies(fields["tallies"])
    words = " ".join(f"{k}={v}" for k, v in fields.items() if k in ("proposal", "stage", "outcome", "done", "total"))
    print(f"{time.monotonic() - STARTED:8.2f}s {kind} {words}", file=sys.stderr, flush=True)


def print_tallies(tallies: dict | None = None) -> None:
    """`--events`: the seconds the parent (this process, or a Ray actor's `tallies`) waited on each runner command
    (judge.sandbox.worker's tally), largest first."""
    from judge.sandbox.worker import COMMAND_SECONDS

    for name, (count, seconds) in sorted((tallies or COMMAND_SECONDS).items(), key=lambda kv: -kv[1][1])[:16]:
        print(f"{seconds:8.2f}s {count:6d}  {name}", file=sys.stderr)


STARTED = time.monotonic()
ON_EVENT = None  # event_log with --events


def one_round(mode: str, count: int, ray_address: str | None, gpus: list[int] | None) -> dict:
    """A fresh ledger and target copy, `count` proposals, one `run_round`; wall seconds and verdicts."""
    work = Path(tempfile.mkdtemp(prefix=f"judge-scale-{mode}-"))
    kernels = work / "kernels"
    shutil.copytree(FIXTURES, kernels)
    base = kernel(DELAY)
    (kernels / "vecadd" / "submission.py").write_text(base)
    ledger = Ledger(work / "ledger.db")
    for pid, cycles in candidates(count):
        source = kernel(cycles) + (f"# candidate {pid}\n" if cycles == DELAY else "")
        ledger.submit(Proposal(id=pid, title=pid, author="scale", round=1, target="vecadd", pitch="scale test",
                               patch=patch(base, source)), "scale")
    settings = Settings(kernels_dir=kernels, work_dir=work / "work", cache_dir=work / "cache",
                        ray_address=ray_address, gpus=gpus)
    start = time.monotonic()
    [summary] = run_round(ledger, 1, settings=settings, **({"on_event": ON_EVENT} if ON_EVENT else {}))
    wall = time.monotonic() - start
    verdicts = {v.proposal_id: v.outcome for v in summary.verdicts}
    return {"mode": mode, "gpus": len(gpus) if gpus else (None if ray_address else 1), "wall_s": round(wall, 1),
            "per_minute": round(60 * count / wall, 2), "verdicts": verdicts, "time": summary.time}


def cpu_round(mode: str, count: int, budget_s: float | None = None) -> dict:
    """A fresh ledger and copy of kernels/vecadd_cpu, `count` candidates that differ from the base by a comment."""
    work = Path(tempfile.mkdtemp(prefix=f"judge-scale-{mode}-"))
    kernels = work / "kernels"
    shutil.copytree(ROOT / "kernels" / "vecadd_cpu", kernels / "vecadd_cpu")
    base = (kernels / "vecadd_cpu" / "submission.py").read_text()
    ledger = Ledger(work / "ledger.db")
    for n in range(count):
        ledger.submit(Proposal(id=f"copy-{n}", title=f"copy {n}", author="scale", round=1, target="vecadd_cpu",
                               pitch="scale test", patch=patch(base, base + f"# candidate {n}\n")), "scale")
    serial = {"overlap": False, "warm_compiles": False} if mode == "cpu-serial" else {}
    settings = Settings(kernels_dir=kernels, work_dir=work / "work", cache_dir=work / "cache", timing_budget_s=budget_s,
                        **serial)
    start = time.monotonic()
    [summary] = run_round(ledger, 1, settings=settings)
    wall = time.monotonic() - start
    compiles = [s.seconds for e in ledger.evaluations(ledger.round_row("vecadd_cpu", 1)["id"])
                if e["subject"] == "candidate" for s in ledger.stage_results(e["id"]) if s.stage == "compile"]
    return {"mode": mode, "gpus": "cpu", "wall_s": round(wall, 1), "per_minute": round(60 * count / wall, 2),
            "compile_s_per_candidate": round(sum(compiles) / len(compiles), 3),
            "verdicts": {v.proposal_id: v.outcome for v in summary.verdicts}, "time": summary.time}


def compile_times(count: int) -> dict:
    """The compile stage of one vecadd_cpu candidate, cold (a fresh child) and warm (a ready warm child), in turn."""
    from judge.stages.compile.stage import run_compile
    from judge.stages.compile.workers import CompileWorkers
    from judge.targets import find_target

    work = Path(tempfile.mkdtemp(prefix="judge-scale-compile-"))
    target = find_target("vecadd_cpu", ROOT / "kernels")
    times: dict[str, list[float]] = {"cold": [], "warm": []}
    for n in range(count):
        source = target.kernel_source() + f"# candidate {n}\n"
        workers = CompileWorkers(work / f"w{n}", cores=None, spares=1, jobs=1)
        workers._pool[0].ready()  # a spare that has imported torch, as the round's pipeline keeps ahead
        for how, pool in (("cold", None), ("warm", workers)):
            start = time.monotonic()
            result = run_compile(target, target.assemble(work / f"{how}{n}", source), cache_dir=work / "cache",
                                 workers=pool)
            times[how].append(round(time.monotonic() - start, 3))
            assert result.status == "passed", result.summary
        workers.close()
    return times


@contextlib.contextmanager
def ray_head(gpus: int):
    """`ray start --head` on this host, as a user would start a one-node cluster; `ray stop` afterwards."""
    cli = [sys.executable, "-c", "from ray.scripts.scripts import main; main()"]
    subprocess.run(cli + ["start", "--head", "--disable-usage-stats", "--num-gpus", str(gpus)], check=True,
                   capture_output=True, text=True)
    try:
        yield
    finally:
        subprocess.run(cli + ["stop"], capture_output=True, text=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--modes", default="one,gpus", help="comma-separated: one, gpus, ray")
    parser.add_argument("--gpus", default="all", help="for the gpus mode: all or 0,1,...")
    parser.add_argument("--ray-address", default=None,
                        help="for the ray mode: a running cluster's address, or 'start' to start a head on this host "
                             "(all its GPUs) for the ray round and stop it after")
    parser.add_argument("--json", type=Path, help="write every number here too")
    parser.add_argument("--timing-budget", type=float, default=None, help="cpu modes: timing seconds per candidate")
    parser.add_argument("--events", action="store_true",
                        help="print the rounds' events on stderr as they come, and the runners' command seconds at the end")
    parser.add_argument("--spares", type=int, default=None,
                        help="spare runners per GPU instead of judge's default (this process's rounds, not Ray actors)")
    args = parser.parse_args()
    global ON_EVENT
    ON_EVENT = event_log if args.events else None
    if args.spares is not None:
        from judge.stages import evaluation

        evaluation.default_spares = lambda target: args.spares
    if args.events:
        import atexit

        atexit.register(print_tallies)
    if all(mode.startswith("cpu") for mode in args.modes.split(",")):
        return cpu_main(args)
    import torch

    count = torch.cuda.device_count()
    gpus = list(range(count)) if args.gpus == "all" else [int(g) for g in args.gpus.split(",")]
    print(f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, {count} x "
          f"{torch.cuda.get_device_name(0)}, {args.candidates} vecadd candidates x 4 benchmarks", flush=True)
    rows = []
    for mode in args.modes.split(","):
        if mode == "one":
            rows.append(one_round(mode, args.candidates, None, None))
        elif mode == "gpus":
            rows.append(one_round(mode, args.candidates, None, gpus))
        elif mode == "ray" and args.ray_address == "start":
            with ray_head(count):
                rows.append(one_round(mode, args.candidates, "auto", None))
                import ray

                ray.shutdown()
        elif mode == "ray":
            rows.append(one_round(mode, args.candidates, args.ray_address or "auto", None))
        else:
            raise SystemExit(f"unknown mode {mode!r}")
        if mode != "one":
            import ray

            ray.shutdown()
        print(json.dumps(rows[-1]), flush=True)
    reference = rows[0]["verdicts"]
    print("\n| mode | GPUs | wall s | candidates per minute | vs first row | same verdicts as the first row |")
    print("|---|---:|---:|---:|---:|---|")
    for r in rows:
        same = "yes" if r["verdicts"] == reference else "no: " + ", ".join(
            f"{k} {reference.get(k)}->{v}" for k, v in r["verdicts"].items() if reference.get(k) != v)
        print(f"| {r['mode']} | {r['gpus'] or 'cluster'} | {r['wall_s']} | {r['per_minute']} | "
              f"{r['per_minute'] / rows[0]['per_minute']:.2f}x | {same} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


def cpu_main(args) -> None:
    """The cpu modes, in the order given (repeat them to interleave), and their table."""
    print(f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, {len(os.sched_getaffinity(0))} "
          f"cores, {args.candidates} vecadd_cpu candidates", flush=True)
    rows = []
    if args.modes == "cpu-compile":
        print(json.dumps(compile_times(args.candidates)))
        return
    for mode in args.modes.split(","):
        rows.append(cpu_round(mode, args.candidates, args.timing_budget))
        print(json.dumps(rows[-1]), flush=True)
    print("\n| mode | wall s | compile s per candidate | stage sums s |")
    print("|---|---:|---:|---|")
    for r in rows:
        sums = ", ".join(f"{k} {v:.1f}" for k, v in r["time"]["stages_s"].items())
        print(f"| {r['mode']} | {r['wall_s']} | {r['compile_s_per_candidate']} | {sums} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
