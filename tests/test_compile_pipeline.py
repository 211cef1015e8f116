"""Rounds whose compiles overlap the kernel stages (judge.stages.compile.pipeline): the same verdicts and ledger rows as a
round that compiles everything first, candidates judged while later ones compile, broken compiles recorded."""

import threading
import time
from pathlib import Path

import pytest

from fakestages import FakeStages
from judge.ledger import Ledger
from judge.rounds import Settings, run_round
from judge.stage_calls import StageCalls
from test_rounds import proposal

MIXED = [proposal(pid, verdict) for pid, verdict in [
    ("a-fast", "speedup 1.25"), ("b-broken", "compile-error"), ("c-slow", "speedup 0.8"), ("d-wrong", "incorrect"),
    ("e-broken", "compile-error"), ("f-same", "speedup 1.0")]]


def ledger_rows(ledger: Ledger) -> list[tuple]:
    """Every evaluation as it would be reported: who, outcome, reason and each stage's status and summary."""
    rows = []
    for e in ledger.query("select e.*, r.proposal_id from evaluations e left join revisions r on r.id = e.revision_id"):
        stages = tuple((s.stage, s.status, s.summary) for s in ledger.stage_results(e["id"]))
        rows.append((e["subject"], e["proposal_id"], e["outcome"], e["reason"], stages))
    return sorted(rows, key=repr)


def a_round(tmp_path, name: str, stages, candidates=MIXED, **options):
    from test_rounds import FIXTURE

    kernels = tmp_path / name / "kernels"
    kernels.mkdir(parents=True)
    (kernels / "axpy").symlink_to(FIXTURE)
    ledger = Ledger(tmp_path / name / "ledger.db")
    for candidate in candidates:
        ledger.submit(candidate, "test")
    settings = Settings(kernels_dir=kernels, work_dir=tmp_path / name / "work", cache_dir=tmp_path / name / "cache",
                        stages=stages, **options)
    events = []
    [summary] = run_round(ledger, 1, settings=settings, on_event=lambda kind, **info: events.append((kind, info)))
    return ledger, summary, events


def test_overlapped_compiles_give_the_verdicts_and_rows_of_compiling_first(tmp_path):
    before_ledger, before, _ = a_round(tmp_path, "before", FakeStages(), overlap=False)
    after_ledger, after, events = a_round(tmp_path, "after", FakeStages())
    listed = [(v.proposal_id, v.outcome, v.reason) for v in after.verdicts]
    assert listed == [(v.proposal_id, v.outcome, v.reason) for v in before.verdicts]
    assert [pid for pid, _, _ in listed] == ["b-broken", "e-broken", "a-fast", "c-slow", "d-wrong", "f-same"]
    assert ledger_rows(after_ledger) == ledger_rows(before_ledger)
    counts = after_ledger.query("select revision_id, count(*) as n from evaluations where subject = 'candidate' "
                                "group by revision_id")
    assert [c["n"] for c in counts] == [1] * 6  # each result recorded once
    progress = [info["done"] for kind, info in events if kind == "compile-progress"]
    assert sorted(progress) == [1, 2, 3, 4, 5, 6]
    assert [info["total"] for kind, info in events if kind == "gpu-start"] == [6]


class HeldCompile(FakeStages):
    """One candidate's compile (`held`) ends only once another's kernel stages (`until`'s) have begun."""

    def __init__(self, held: str, until: str):
        super().__init__()
        self.held, self.until = held, until
        self.judged = threading.Event()
        self.log: list[str] = []

    def compile_one(self, target, workspace, *, cache_dir, workers):
        if workspace.name == self.held:
            self.log.append(f"{self.held} compile waited: {self.judged.wait(timeout=60)}")
        result = super().compile_one(target, workspace, cache_dir=cache_dir, workers=workers)
        self.log.append(f"{workspace.name} compiled")
        return result

    def evaluate(self, evaluator, workspace, budget_s, floor=None, progress=None, control=False, serves=0):
        self.log.append(f"{workspace.name} judged")
        if workspace.name == self.until:
            self.judged.set()
        return super().evaluate(evaluator, workspace, budget_s, floor, progress, control)


def test_a_candidate_is_judged_while_later_ones_compile(tmp_path):
    stages = HeldCompile("c-last", until="a-first")
    candidates = [proposal("a-first", "speedup 1.25"), proposal("b-next", "speedup 1.0"),
                  proposal("c-last", "speedup 0.8")]
    _, summary, _ = a_round(tmp_path, "round", stages, candidates, workers=1)
    assert [(v.proposal_id, v.outcome) for v in summary.verdicts] == \
        [("a-first", "faster"), ("b-next", "unchanged"), ("c-last", "slower")]
    assert stages.log.index("a-first judged") < stages.log.index("c-last compiled")
    assert "c-last compile waited: True" in stages.log


def test_candidates_whose_compile_ended_go_before_an_earlier_one_still_compiling(tmp_path):
    """The first candidate's compile ends only once the others have been judged: an inline extension's build held
    three ready candidates for 26.7 s of an H200's round (2026-11-29) while the GPU stood idle."""
    stages = HeldCompile("a-slow-build", until="c-ready")
    candidates = [proposal("a-slow-build", "speedup 1.25"), proposal("b-ready", "speedup 1.0"),
                  proposal("c-ready", "speedup 0.8"), proposal("d-broken", "compile-error")]
    ledger, summary, _ = a_round(tmp_path, "round", stages, candidates, workers=2)
    assert "a-slow-build compile waited: True" in stages.log
    assert stages.log.index("c-ready judged") < stages.log.index("a-slow-build compiled")
    # Listed in proposal order, as a round that compiled everything first lists them; the ledger as judged.
    assert [(v.proposal_id, v.outcome) for v in summary.verdicts] == [
        ("d-broken", "compile-error"), ("a-slow-build", "faster"), ("b-ready", "unchanged"), ("c-ready", "slower")]
    rows = ledger.query("select r.proposal_id from evaluations e join revisions r on r.id = e.revision_id "
                        "where e.subject = 'candidate' order by e.id")
    judged = [r["proposal_id"] for r in rows if r["proposal_id"] != "d-broken"]
    assert judged == ["b-ready", "c-ready", "a-slow-build"]


def test_in_ready_order_takes_the_first_ended_in_proposal_order_and_waits_for_any():
    from concurrent.futures import Future

    from judge.stages.compile.pipeline import in_ready_order

    futures = {name: Future() for name in "abc"}
    futures["b"].set_result("b's stages")
    futures["c"].set_result("c's stages")
    order = in_ready_order(list(futures.items()))
    assert [next(order), next(order)] == [("b", "b's stages"), ("c", "c's stages")]  # a is still compiling
    threading.Timer(0.2, futures["a"].set_result, ("a's stages",)).start()
    assert list(order) == [("a", "a's stages")]  # waited for
    both = {name: Future() for name in "xy"}
    for name, future in both.items():
        future.set_result(name)
    assert [name for name, _ in in_ready_order(list(both.items()))] == ["x", "y"]  # both ended: proposal order


def test_ready_jobs_wait_for_a_compile_that_lets_its_kernel_run_and_no_longer_than_asked():
    """ReadyJobs.wait_next: a compile that ended failed brings no job; one still running is waited for only as long
    as asked; one that ended and passed is a job at once; none left to wait for is none at once."""
    from concurrent.futures import Future
    from types import SimpleNamespace

    from judge.stages.compile.pipeline import CompilePipeline, ReadyJobs
    from judge.stages.result import StageResult

    def prepared(name):
        return SimpleNamespace(name=name, early=[])

    pipeline = object.__new__(CompilePipeline)
    pipeline.pending = [prepared("broken"), prepared("slow")]
    pipeline.futures = [Future(), Future()]
    pipeline.futures[0].set_result([StageResult("compile", "failed", "error: no such intrinsic", 0.1)])
    pipeline._untaken = list(zip(pipeline.pending, pipeline.futures))  # none taken by the round yet
    jobs = ReadyJobs(None, pipeline, [])
    started = time.monotonic()
    assert jobs.wait_next(0.2) is False  # the broken one is no job, and the slow one had not ended
    assert 0.2 <= time.monotonic() - started < 5
    threading.Timer(0.1, pipeline.futures[1].set_result, ([StageResult("compile", "passed", "", 30.0)],)).start()
    assert jobs.wait_next(10.0) is True  # ended within the wait, passed
    pipeline._untaken = []  # every compile taken by the round
    started = time.monotonic()
    assert jobs.wait_next(10.0) is False and time.monotonic() - started < 1


class LoggedStages(FakeStages):
    """Fake stages that note when each candidate's compile ends and its kernel stages begin; every compile but the
    first takes 0.3 s, so that an overlapped round would judge the first candidate before the others compile."""

    def __init__(self):
        super().__init__()
        self.log: list[str] = []

    def compile_one(self, target, workspace, *, cache_dir, workers):
        if workspace.name != "a-fast":
            time.sleep(0.3)
        result = super().compile_one(target, workspace, cache_dir=cache_dir, workers=workers)
        self.log.append(f"compiled {workspace.name}")
        return result

    def check_base(self, evaluator, base_dir, progress=None, timed_next=None):
        self.log.append("checked base")
        return super().check_base(evaluator, base_dir, progress, timed_next)

    def evaluate(self, evaluator, workspace, budget_s, floor=None, progress=None, control=False, serves=0):
        self.log.append(f"judged {workspace.name}")
        return super().evaluate(evaluator, workspace, budget_s, floor, progress, control)


def test_a_cpu_targets_compiles_all_end_before_its_first_candidate_is_judged(tmp_path, monkeypatch):
    """Timed on the host, a CPU target's candidates would share its memory and caches with later compiles."""
    import shutil

    import test_rounds

    fixture = tmp_path / "axpy_cpu"
    shutil.copytree(test_rounds.FIXTURE, fixture)
    toml = fixture / "judge.toml"
    toml.write_text(toml.read_text().replace('arch = "any"', 'arch = "cpu"'))
    monkeypatch.setattr(test_rounds, "FIXTURE", fixture)
    stages = LoggedStages()
    _, summary, _ = a_round(tmp_path, "round", stages, MIXED, workers=1)
    assert [v.outcome for v in summary.verdicts] == \
        ["compile-error", "compile-error", "faster", "slower", "incorrect", "unchanged"]
    # The A/A control is timed before any compile; the four candidates that compiled, after all six compiles.
    names = ["a-fast", "b-broken", "c-slow", "d-wrong", "e-broken", "f-same"]
    assert stages.log == ["checked base", "judged control"] + [f"compiled {name}" for name in names] + \
        [f"judged {name}" for name in names if "broken" not in name]


def test_a_gpu_targets_first_candidate_is_judged_while_the_others_compile(tmp_path):
    """Its candidates' compiles start before its base's check (one thread here: one after another, 0.3 s each but the
    first's), and the first candidate is judged as soon as its own has ended."""
    stages = LoggedStages()
    a_round(tmp_path, "round", stages, MIXED, workers=1)
    log = stages.log
    assert log.index("checked base") < log.index("judged control") < log.index("judged a-fast")
    assert log.index("judged a-fast") < log.index("compiled c-slow") < log.index("judged c-slow")
    assert log.index("compiled a-fast") < log.index("judged control")  # it compiled beside the base and the control


class RealCompiles(FakeStages):
    """Fake kernel stages, real compile children (warm ones, as a round makes them), a 15 s compile limit."""

    compile_workers = StageCalls.compile_workers

    def compile_one(self, target, workspace, *, cache_dir, workers):
        from judge.stages.compile.stage import run_compile

        return run_compile(target, workspace, cache_dir=cache_dir, timeout_s=15, workers=workers)


@pytest.mark.slow
def test_compiles_that_crash_or_hang_are_verdicts_and_the_others_go_on(tmp_path):
    knob = "SCALE = 2.0"
    broken = {"b-hang": "import time; time.sleep(600)", "c-crash": "import os; os._exit(3)"}
    candidates = [proposal(pid, "speedup 1.25" if pid != "d-same" else "speedup 1.0",
                           knob=(knob, f"{knob}; {broken.get(pid, 'pass')}"))
                  for pid in ("a-fast", "b-hang", "c-crash", "d-same")]
    ledger, summary, _ = a_round(tmp_path, "round", RealCompiles(), candidates)
    assert [(v.proposal_id, v.outcome, v.reason) for v in summary.verdicts] == [
        ("b-hang", "timed-out", "compile: timed out after 15 s importing submission.py"),
        ("c-crash", "crashed", "compile: crashed: exited with code 3 before returning importing submission.py"),
        ("a-fast", "faster", "geomean 1.250x [1.244, 1.256] over 2 benchmarks"),
        ("d-same", "unchanged", "geomean 1.000x [0.995, 1.005] over 2 benchmarks")]
    assert len(ledger.query("select id from evaluations where subject = 'candidate'")) == 4


def test_progress_shows_the_compiles_and_the_candidates_judged_side_by_side(tmp_path):
    """The round's own events, fed to `judge run`'s progress: both bars end full, compile failures counted as
    judged (their verdict is the candidate's end)."""
    import io

    from rich.console import Console

    from judge.cli.progress import RunProgress

    _, _, events = a_round(tmp_path, "round", FakeStages())
    buffer = io.StringIO()
    with RunProgress(Console(file=buffer, width=120, force_terminal=False), enabled=True) as progress:
        for kind, info in events:
            progress.event(kind, **info)
        tasks = {t.description: (t.completed, t.total) for t in progress.progress.tasks}
    assert tasks == {"compiling": (6, 6), "candidates judged": (6, 6)}
    assert "  b-broken: compile-error (DSLUserCodeError: unsupported tile (submission.py:7))" in buffer.getvalue()


def test_no_evaluator_of_a_host_puts_spares_or_compiles_on_another_gpus_timed_cores(monkeypatch, tmp_path):
    """Two GPUs judged at once (--gpus, Ray): each evaluator's timed pair has its block of cores, and its spares
    and oracle (and the driver's compiles) use none of either block. Before, GPU 0's spares importing torch ran on
    the cores where GPU 1's pairs were timed, and the reverse."""
    import os

    from judge import machine
    from judge.stages.compile.pipeline import compile_cores
    from judge.core_blocks import placement
    from judge.targets import load_target
    gpu = load_target(Path(__file__).parent / "fixtures" / "gpumode" / "vecadd")  # two cores a timed pair
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert placement(gpu, 0, host_gpus=2) == {"timing": [14, 15], "others": list(range(12))}
    assert placement(gpu, 1, host_gpus=2) == {"timing": [12, 13], "others": list(range(12))}
    assert placement(gpu, 0, host_gpus=1) == {"timing": [14, 15], "others": list(range(14))}
    assert placement(gpu, 0, host_gpus=8) == {"timing": [14, 15], "others": [0, 1]}  # seven blocks fit, core 0 never
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    assert placement(gpu, 0, host_gpus=2) == {"timing": [1, 2], "others": [0]}
    assert placement(gpu, 1, host_gpus=2) is None  # too few cores to set a second block apart

    gpus = tmp_path / "gpus"
    for bus in ("0000:18:00.0", "0000:2a:00.0"):
        (gpus / bus).mkdir(parents=True)
    assert machine.host_gpu_count(gpus) == 2 and machine.host_gpu_count(tmp_path / "none") == 0
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    import judge.core_blocks as core_blocks

    monkeypatch.setattr(core_blocks, "host_gpu_count", lambda: 2)
    assert compile_cores(gpu, None) == list(range(12))  # this machine's GPU is judged, the other's block kept free
    assert compile_cores(gpu, [0, 1]) == list(range(12))


class GroupedStages(FakeStages):
    """Fake stages that time checked candidates together in groups (as the real ones do), the control in the first
    group handed over through its floor_after; one compile, c-slow's, takes 3 s."""

    groups = True

    def __init__(self):
        super().__init__()
        self.log: list[str] = []

    def compile_one(self, target, workspace, *, cache_dir, workers):
        if workspace.name == "c-slow":
            time.sleep(3.0)
        result = super().compile_one(target, workspace, cache_dir=cache_dir, workers=workers)
        self.log.append(f"compiled {workspace.name}")
        return result

    def check(self, evaluator, workspace, progress=None):
        # a check of 0.3 s: the held candidates then wait 0.9 s for the next compile (MIN_PAIRS checks), longer than
        # two compiles that end at once can be apart on a loaded machine (a check of a few milliseconds left f-same's
        # compile behind a-fast's group on this VM's 2 cores under a full suite, 2026-12-01), far shorter than 3 s
        time.sleep(0.3)
        return self.correctness(evaluator.target, workspace, progress)

    def group_size(self, evaluator, wanted):
        return wanted

    def time_group(self, evaluator, workspaces, budget_s, floor=None, progress=None, control=None):
        names = sorted(w.name for w in workspaces) + (["control"] if control is not None else [])
        self.log.append(f"grouped {' '.join(names)}")
        if control is not None:
            control.floor_after(self.timing(evaluator.target, control.workspace, evaluator.base_dir, budget_s))
        return [self.timing(evaluator.target, w, evaluator.base_dir, budget_s) for w in workspaces]


def test_a_round_times_its_checked_candidates_and_control_without_waiting_for_a_slow_compile(tmp_path):
    """Three compiles at once; two end at once and are checked, c-slow's takes 3 s, far longer than a group of its
    own would cost: the two are timed with the control meanwhile, and c-slow in a group of its own after."""
    stages = GroupedStages()
    candidates = [proposal(pid, verdict) for pid, verdict in [
        ("a-fast", "speedup 1.25"), ("c-slow", "speedup 0.8"), ("f-same", "speedup 1.0")]]
    ledger, summary, events = a_round(tmp_path, "round", stages, candidates, workers=3)
    assert [v.outcome for v in summary.verdicts] == ["faster", "slower", "unchanged"]
    log = stages.log
    assert log.index("grouped a-fast f-same control") < log.index("compiled c-slow") < log.index("grouped c-slow")
    said = {(info["proposal"], info["stage"]) for kind, info in events if kind == "stage"}
    assert ("c-slow", "timing, after the candidates whose compiles ended first") in said
    assert ("a-fast", "timing, in one process group of 3 kernels (the round's control among them) beside the base") \
        in said
    # the control recorded before any candidate's verdict, every verdict against its floor
    subjects = [r["subject"] for r in ledger.query("select subject from evaluations order by id")]
    assert subjects == ["base", "control", "candidate", "candidate", "candidate"]
