"""Stage fakes for round tests: a kernel's source says what its stages should report.

A marker line in the patched kernel, `# verdict: <what>`, picks the behaviour: compile-error,
incorrect, crash, hang-timing, interrupt (Ctrl-C while it runs, the first time only; then as speedup 1.0),
or a speedup such as `speedup 1.25` (all benchmarks alike).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from judge.stage_calls import StageCalls
from judge.stages.details import CompileDetail, CompiledConfig, TimedBenchmark, TimingDetail
from judge.stages.result import StageResult


def marker(workspace: Path, kernel_file: str = "submission.py") -> str:
    match = re.search(r"# verdict: (.+)", (workspace / kernel_file).read_text())
    return match.group(1).strip() if match else "speedup 1.0"


class FakeStages(StageCalls):
    groups = False  # each job's stages in one call (evaluate), as the rounds these tests script them
    interrupted: set[str] = set()  # the workspaces whose "interrupt" has been raised once
    def __init__(self, gpu: bool = True, hang_s: float = 0.0):
        self.gpu = gpu
        self.hang_s = hang_s
        self.compiled: list[str] = []

    def probe(self):
        return {"name": "Fake GPU", "sm_count": 4} if self.gpu else None

    def arch_gate(self, arch, facts):
        return None if facts else "needs a CUDA GPU, this machine has none"

    def compile_many(self, jobs, *, cache_dir, workers, progress):
        results = []
        for i, (target, workspace) in enumerate(jobs):
            self.compiled.append(workspace.name)
            if marker(workspace) == "compile-error":
                error = {"type": "DSLUserCodeError", "message": "unsupported tile", "line": "DSLUserCodeError: unsupported tile (submission.py:7)"}
                config = CompiledConfig.from_json({"signature": {"size": 1}, "benchmarks": [0, 1], "ok": False, "error": error})
                results.append(StageResult("compile", "failed", error["line"], 0.1, CompileDetail(configs=[config])))
            else:
                regs = 96 if workspace.name == "base" else 128
                config = CompiledConfig.from_json({"signature": {"size": 1}, "benchmarks": [0, 1], "ok": True, "error": None,
                                                   "kernels": [{"name": "k", "registers": regs, "smem_total": 1024,
                                                                "spill_stores": 0, "spill_loads": 0, "stack_bytes": 0,
                                                                "threads": 128,
                                                                "occupancy": {"ctas_per_sm": 4, "limited_by": "registers"}}],
                                                   "ptx_bytes": 100, "cubin_bytes": 200, "seconds": 0.1})
                results.append(StageResult("compile", "passed", f"compiled: {regs} regs", 0.1, CompileDetail(configs=[config])))
            progress(i + 1, len(jobs))
        return results

    def compile_workers(self, target, root, cores, spares, jobs):
        return None

    def compile_one(self, target, workspace, *, cache_dir, workers):
        return self.compile_many([(target, workspace)], cache_dir=cache_dir, workers=1, progress=lambda *_: None)[0]

    class _Evaluator:
        def __init__(self, target, base_dir):
            self.target, self.base_dir = target, base_dir

        def close(self):
            pass

        def start(self):
            """What the real one starts early (oracle, spares), the fakes have no need of."""

    def open_round(self, target, root, base_dir, fork_spares=None):
        return self._Evaluator(target, base_dir)

    def check_base(self, evaluator, base_dir, progress=None, timed_next=None):
        return self.correctness(evaluator.target, base_dir, progress)

    def evaluate(self, evaluator, workspace, budget_s, floor=None, progress=None, control=False, serves=0):
        if marker(workspace) == "interrupt" and str(workspace) not in FakeStages.interrupted:
            FakeStages.interrupted.add(str(workspace))
            raise KeyboardInterrupt
        timing = lambda: self.timing(evaluator.target, workspace, evaluator.base_dir, budget_s, progress)  # noqa: E731
        if control:  # judge's own copy of the base: timed only, as judge.dispatch.kernel_stages times it
            return [timing()]
        check = self.correctness(evaluator.target, workspace, progress)
        if not check.passed:
            return [check]
        return [check, timing()]

    def correctness(self, target, workspace, progress=None):
        """One case, reported as the real stage reports each (judge.stages.progress), then the verdict."""
        if progress is not None:
            progress(stage="correctness", case=1, cases=1, seconds=0.0)
        return self._correctness(workspace)

    def _correctness(self, workspace):
        what = marker(workspace)
        if what == "incorrect":
            return StageResult("correctness", "failed", "test 0: 3 of 127 elements differ (first at [5]: got 1.0, expected 2.0)", 0.1)
        if what == "crash":
            return StageResult("correctness", "crashed", "RuntimeError: CUDA error: an illegal memory access was encountered", 0.1)
        return StageResult("correctness", "passed", "2 tests passed", 0.1)

    def timing(self, target, candidate, base, budget_s, progress=None):
        what = marker(candidate)
        if what == "hang-timing":
            time.sleep(self.hang_s)
        for index in range(len(target.benchmarks) if progress is not None else 0):  # one pair, as the real one says
            progress(stage="timing", pair=1, max_pairs=8, benchmark=index + 1, benchmarks=len(target.benchmarks),
                     label=target.benchmark_label(index), seconds=0.0)
        speedup = float(what.split()[1]) if what.startswith("speedup") else 1.0
        benchmarks = []
        for index in range(len(target.benchmarks)):
            base_us = 100.0 * (index + 1)
            benchmarks.append(TimedBenchmark(
                index=index, label=target.benchmark_label(index), base_median_us=base_us,
                cand_median_us=base_us / speedup, speedup=speedup, ci_low=speedup * 0.995,
                ci_high=speedup * 1.005, significant=speedup != 1.0, reps=3,
                base_us=[base_us] * 3, cand_us=[base_us / speedup] * 3,
            ))
        low, high = (speedup * 0.995, speedup * 1.005) if speedup != 1.0 else (0.995, 1.005)
        return StageResult("timing", "passed", f"geomean {speedup:.3f}x [{low:.3f}, {high:.3f}] over {len(benchmarks)} benchmarks",
                           1.0, TimingDetail(benchmarks=benchmarks, geomean=speedup, geomean_ci=[low, high],
                                             max_speedup=target.max_speedup, min_effect=target.min_effect))


def rounds_with(monkeypatch, make_stages=None) -> None:
    """Every round run from now on in this test (by the CLI, the library or a server) uses `make_stages()` as its
    stages, the plain FakeStages by default."""
    from judge import rounds

    real = rounds.run_round
    make = make_stages or FakeStages

    def run_round(ledger, round, *, target=None, settings=None, on_event=None):
        settings.stages = make()
        return real(ledger, round, target=target, settings=settings, on_event=on_event)

    monkeypatch.setattr(rounds, "run_round", run_round)
