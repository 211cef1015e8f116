"""Rounds: outcomes per proposal, the winner, compounding bases, not-run reasons, resume after a kill."""

import difflib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fakestages import FakeStages
from judge.errors import JudgeError
from judge.ledger import Ledger
from judge.noise import Floor
from judge.records import Outcome, Proposal
from judge.report import render_round
from judge.rounds import RoundRun, Settings, run_round
from judge.schedule import base_for
from judge.verdicts import decide
from judge.stages.details import CheckDetail, TimedBenchmark, TimingDetail
from judge.stages.result import StageResult
from judge.targets import load_target

FIXTURE = Path(__file__).parent / "fixtures" / "axpy"
BASE = (FIXTURE / "submission.py").read_text()


def knob_patch(old: str, new: str, verdict: str, base: str = BASE) -> str:
    """A patch that changes one knob line and adds a marker telling the fake stages what to report."""
    lines = base.splitlines()
    i = lines.index(old)
    before, after = lines[i - 1], lines[i + 1]
    return (
        "--- a/submission.py\n+++ b/submission.py\n"
        f"@@ -{i},3 +{i},4 @@\n {before}\n-{old}\n+{new}\n+# verdict: {verdict}\n {after}\n"
    )


def proposal(pid, verdict, round=1, knob=("SCALE = 2.0", "SCALE = 2.0  # tuned"), **extra):
    patch = knob_patch(knob[0], knob[1], verdict) if verdict else None
    return Proposal(id=pid, title=pid, author="team", round=round, target="axpy", pitch="why", patch=patch, **extra)


@pytest.fixture
def setup(tmp_path):
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    os.symlink(FIXTURE, kernels / "axpy")
    ledger = Ledger(tmp_path / "ledger.db")
    settings = Settings(kernels_dir=kernels, work_dir=tmp_path / "work", cache_dir=tmp_path / "cache", stages=FakeStages())
    return ledger, settings


def outcomes(summary):
    return {v.proposal_id: (v.outcome, v.reason) for v in summary.verdicts}


def test_each_proposal_gets_the_outcome_its_stages_dictate(setup):
    ledger, settings = setup
    for p in [proposal("a-fast", "speedup 1.25"), proposal("b-slow", "speedup 0.8"), proposal("c-same", "speedup 1.0"),
              proposal("d-broken", "compile-error"), proposal("e-wrong", "incorrect"), proposal("f-crash", "crash"),
              proposal("g-pitch", None)]:
        ledger.submit(p, "test")
    [summary] = run_round(ledger, 1, settings=settings)
    assert outcomes(summary) == {
        "a-fast": ("faster", "geomean 1.250x [1.244, 1.256] over 2 benchmarks"),
        "b-slow": ("slower", "geomean 0.800x [0.796, 0.804] over 2 benchmarks"),
        "c-same": ("unchanged", "geomean 1.000x [0.995, 1.005] over 2 benchmarks"),
        "d-broken": ("compile-error", "DSLUserCodeError: unsupported tile (submission.py:7)"),
        "e-wrong": ("incorrect", "test 0: 3 of 127 elements differ (first at [5]: got 1.0, expected 2.0)"),
        "f-crash": ("crashed", "correctness: RuntimeError: CUDA error: an illegal memory access was encountered"),
    }
    assert summary.pitches == ["g-pitch"]
    assert summary.winner == "a-fast"
    rows = ledger.query("select count(*) as n from timings")
    assert rows[0]["n"] == 4 * 2 * 3  # three timed proposals and the control x two benchmarks x three repetitions


def test_a_patch_that_no_longer_applies_is_patch_failed(setup):
    ledger, settings = setup
    ledger.submit(proposal("a", None).model_copy(update={"patch": knob_patch("SCALE = 2.0", "SCALE = 3.0", "x").replace(" CHUNKS = 1", " CHUNKS = 7")}), "test")
    [summary] = run_round(ledger, 1, settings=settings)
    assert outcomes(summary)["a"][0] == "patch-failed"
    assert "hunk 1 '@@ -5,3 +5,4 @@' of submission.py does not apply" in outcomes(summary)["a"][1]


def test_without_a_gpu_the_gpu_stages_say_why_they_did_not_run(setup):
    ledger, settings = setup
    settings.stages = FakeStages(gpu=False)
    ledger.submit(proposal("a", "speedup 1.25"), "test")
    [summary] = run_round(ledger, 1, settings=settings)
    assert outcomes(summary) == {"a": ("not-run", "needs a CUDA GPU, this machine has none")}
    assert summary.winner is None
    # running again on the same machine adds nothing: the verdict stands for the same reason
    [again] = run_round(ledger, 1, settings=settings)
    assert [v.skipped for v in again.verdicts] == [True]
    assert ledger.query("select count(*) as n from evaluations where subject = 'candidate'")[0]["n"] == 1


def test_the_winner_patch_becomes_the_next_round_base(setup):
    ledger, settings = setup
    ledger.submit(proposal("a", "speedup 1.10"), "test")
    ledger.submit(proposal("b", "speedup 1.30", knob=("CHUNKS = 1", "CHUNKS = 4")), "test")
    [first] = run_round(ledger, 1, settings=settings)
    assert first.winner == "b"
    target = load_target(settings.kernels_dir / "axpy")
    source, origin = base_for(ledger, target, 2)
    assert origin == "round 1 base + winner b r1"
    assert "CHUNKS = 4" in source and "SCALE = 2.0\n" in source
    # a round-2 proposal patches the compounded base, and round 2 freezes that base
    c = proposal("c", None, round=2).model_copy(
        update={"patch": knob_patch("SCALE = 2.0", "SCALE = 2.0  # tuned", "speedup 1.05", base=source)})
    ledger.submit(c, "test")
    [second] = run_round(ledger, 2, settings=settings)
    assert second.base_origin == "round 1 base + winner b r1"
    workspace = (settings.work_dir / "axpy" / "round-2" / "candidates" / "c" / "submission.py").read_text()
    assert "CHUNKS = 4" in workspace and "SCALE = 2.0  # tuned" in workspace


def test_a_proposal_named_like_judges_own_workspaces_leaves_them_alone(setup):
    """A proposal id is any slug, so 'base', 'control' and 'peer' are ids a contestant may pick. Before, a proposal
    'base' was assembled into the round's base directory: every candidate was then timed against its kernel."""
    ledger, settings = setup
    bases, controls = [], []

    class Watching(FakeStages):
        def evaluate(self, session, workspace, budget_s, floor=None, progress=None, control=False, serves=0):
            bases.append((session.base_dir / "submission.py").read_text())
            controls.extend([(workspace, serves)] if control else [])
            return super().evaluate(session, workspace, budget_s, floor, progress, control)

    settings.stages = Watching()
    for pid, verdict in [("base", "speedup 0.5"), ("control", "speedup 0.5"), ("peer", "speedup 0.5"),
                         ("honest", "speedup 1.25")]:
        ledger.submit(proposal(pid, verdict), "test")
    [summary] = run_round(ledger, 1, settings=settings)
    assert len(bases) == 5 and set(bases) == {BASE}  # the control and four candidates, each against the base
    assert outcomes(summary)["honest"][0] == "faster" and summary.winner == "honest"
    root = settings.work_dir / "axpy" / "round-1"
    assert (root / "base" / "submission.py").read_text() == (root / "control" / "submission.py").read_text() == BASE
    # the proposal named 'control' is timed as a candidate is; the control's floor serves the four candidates
    assert controls == [(root / "control", 4)]


def test_the_round_starts_its_oracle_and_spares_on_a_thread_and_compiles_its_base_while_it_probes(setup):
    """The probe (a child importing torch) and the oracle's start (judge.warm) each on a thread of their own, so that
    the base's compile and check do not wait for them; where the kernels cannot run here nothing is started."""
    ledger, settings = setup
    happened = []

    class Watching(FakeStages):
        class _Evaluator(FakeStages._Evaluator):
            def start(self):
                time.sleep(0.2)  # the oracle importing torch: the driver goes on meanwhile
                happened.append("oracle and spares started")

        def open_round(self, target, root, base_dir, fork_spares=None):
            happened.append("evaluator opened")
            return super().open_round(target, root, base_dir, fork_spares)

        def probe(self):
            time.sleep(0.2)
            happened.append("probed")
            return super().probe()

        def compile_many(self, jobs, **kwargs):  # the candidates' compiles run on threads of their own meanwhile
            happened.extend(f"compiled {workspace.name}" for _, workspace in jobs if workspace.name == "base")
            return super().compile_many(jobs, **kwargs)

        def check_base(self, evaluator, base_dir, progress=None, timed_next=None):
            happened.append("checked base")
            return super().check_base(evaluator, base_dir, progress, timed_next)

    settings.stages = Watching()
    ledger.submit(proposal("a-fast", "speedup 1.25"), "test")
    run_round(ledger, 1, settings=settings)
    assert happened[:5] == ["compiled base", "probed", "evaluator opened", "oracle and spares started", "checked base"]
    assert happened.count("oracle and spares started") == 1
    happened.clear()
    run_round(ledger, 1, settings=settings)  # every verdict stands: nothing to start
    assert happened == ["probed"]  # the base too has its verdict: not compiled again
    settings.stages = Watching(gpu=False)
    run_round(ledger, 2, settings=settings, target=load_target(FIXTURE))
    assert "oracle and spares started" not in happened and "compiled base" in happened


def test_where_nvml_lists_a_gpu_for_it_the_round_starts_its_oracle_before_its_probe(setup, monkeypatch):
    """The probe imports torch in a child (5-6 s on an H200): the oracle and spares start meanwhile. Where the probe
    then finds the kernels cannot run here, the evaluator started early is closed at once and nothing is checked."""
    import judge.rounds

    ledger, settings = setup
    happened = []

    class Watching(FakeStages):
        class _Evaluator(FakeStages._Evaluator):
            def close(self):
                happened.append("evaluator closed")

        def open_round(self, target, root, base_dir, fork_spares=None):
            happened.append("evaluator opened")
            return super().open_round(target, root, base_dir, fork_spares)

        def probe(self):
            happened.append("probed")
            return super().probe()

        def check_base(self, evaluator, base_dir, progress=None, timed_next=None):
            happened.append("checked base")
            return super().check_base(evaluator, base_dir, progress, timed_next)

    monkeypatch.setattr(judge.rounds, "may_run", lambda arch: True)
    settings.stages = Watching()
    ledger.submit(proposal("a-fast", "speedup 1.25"), "test")
    [summary] = run_round(ledger, 1, settings=settings)
    assert happened == ["evaluator opened", "probed", "checked base", "evaluator closed"]
    assert outcomes(summary)["a-fast"][0] == "faster"
    happened.clear()
    settings.stages = Watching(gpu=False)
    [summary] = run_round(ledger, 2, settings=settings, target=load_target(FIXTURE))
    assert happened == ["evaluator opened", "probed", "evaluator closed"]
    assert summary.verdicts == []


def two_workers(monkeypatch, base_fails: bool = False) -> list:
    """Rounds on a dispatch with a second worker (as Ray with two GPUs), here on this machine with the fake stages:
    what the round hands to the base's check is kept in the list returned, and the control it is handed is run
    'on the second worker', whose place its record must name."""
    import judge.rounds
    from judge.dispatch import BaseCheck, LocalDispatch

    handed = []
    first, second = ({"host": f"w{i}", "gpus": str(i), "device": {"name": "Fake GPU"}, "gate": None} for i in (0, 1))

    class TwoWorkers(LocalDispatch):
        workers = 2

        def check_base(self, control=None):
            handed.append(control.name if control else None)
            result = super().check_base().result
            if base_fails:
                result = StageResult("correctness", "failed", "test 0: 1 of 127 elements differ", 0.1)
            ran = None
            if control is not None:
                ran = (self.run.settings.stages.evaluate(self.run.open_evaluator(), control.workspace, None,
                                                         self.run.floor, control=control.control), second)
            return BaseCheck(result, first, ran)

        def evaluate(self, jobs, control=None):
            for job in jobs:
                handed.append(job.name)
                yield from super().evaluate([job], control)

    monkeypatch.setattr(judge.rounds, "_dispatch", TwoWorkers)
    return handed


def test_on_one_gpu_the_base_s_check_is_handed_the_control_it_binds_runners_for_and_the_control_runs_after(setup):
    """One worker times one thing at a time: the control is laid out before the base's check, which binds the
    control's first pairs while its cases run (judge.stages.check), and is timed only after the check."""
    ledger, settings = setup
    happened = []

    class Watching(FakeStages):
        def check_base(self, evaluator, base_dir, progress=None, timed_next=None):
            happened.append(f"checked base, {timed_next.name} timed next")
            assert (timed_next / "submission.py").read_text() == (base_dir / "submission.py").read_text()
            return super().check_base(evaluator, base_dir, progress, timed_next)

        def evaluate(self, evaluator, workspace, budget_s, floor=None, progress=None, control=False, serves=0):
            happened.append(f"evaluated {workspace.name}")
            return super().evaluate(evaluator, workspace, budget_s, floor, progress, control)

    settings.stages = Watching()
    ledger.submit(proposal("a-fast", "speedup 1.25"), "test")
    [summary] = run_round(ledger, 1, settings=settings)
    assert happened == ["checked base, control timed next", "evaluated control", "evaluated a-fast"]
    assert outcomes(summary)["a-fast"][0] == "faster"


def test_on_two_workers_the_control_runs_beside_the_base_check_and_is_recorded_after_it(setup, monkeypatch):
    """Ray with two GPUs: the control goes to the second actor while the first checks the base, so the round waits
    once, not twice, before its first candidate; the ledger still holds the base, then the control, each with the
    worker that ran it."""
    import json

    ledger, settings = setup
    handed = two_workers(monkeypatch)
    ledger.submit(proposal("a-fast", "speedup 1.25"), "test")
    [summary] = run_round(ledger, 1, settings=settings)
    assert handed == ["(control)", "a-fast"]  # the control was not timed a second time
    assert outcomes(summary) == {"a-fast": ("faster", "geomean 1.250x [1.244, 1.256] over 2 benchmarks")}
    rows = ledger.query("select subject, outcome, reason, device_json from evaluations order by id")
    assert [(r["subject"], r["outcome"], r["reason"]) for r in rows] == [
        ("base", "unchanged", "compiled and correct"),
        ("control", "unchanged", "the base against itself: geomean 1.000x [0.995, 1.005] over 2 benchmarks"),
        ("candidate", "faster", "geomean 1.250x [1.244, 1.256] over 2 benchmarks")]
    assert [(json.loads(r["device_json"])["host"], json.loads(r["device_json"])["gpus"]) for r in rows[:2]] == [
        ("w0", "0"), ("w1", "1")]


def test_a_control_that_ran_beside_a_base_that_failed_is_not_recorded(setup, monkeypatch):
    ledger, settings = setup
    handed = two_workers(monkeypatch, base_fails=True)
    ledger.submit(proposal("a-fast", "speedup 1.25"), "test")
    run_round(ledger, 1, settings=settings)
    assert handed[0] == "(control)"
    rows = ledger.query("select subject, outcome, reason from evaluations where subject != 'candidate' order by id")
    assert [(r["subject"], r["outcome"], r["reason"]) for r in rows] == [
        ("base", "incorrect", "test 0: 1 of 127 elements differ")]


def test_the_candidates_of_a_round_whose_base_failed_are_not_run_and_say_why(setup, monkeypatch):
    """A base that fails leaves nothing to time against. Before, a candidate that compiled was charged with it: on
    an H200 whose torch GPU MODE's helion package does not import under, a correct candidate of a CPU copy came out
    "crashed: the base runner ModuleNotFoundError ...". It is now not-run with the base's failure in its reason (and
    redone once the base is), a candidate that does not compile keeps its compile-error, and the event says it
    once."""
    ledger, settings = setup
    handed = two_workers(monkeypatch, base_fails=True)
    events = []
    ledger.submit(proposal("a-fast", "speedup 1.25"), "test")
    ledger.submit(proposal("b-broken", "compile-error"), "test")
    [summary] = run_round(ledger, 1, settings=settings, on_event=lambda kind, **info: events.append((kind, info)))
    why = ("the round's base is incorrect (test 0: 1 of 127 elements differ): nothing to time a candidate against "
           "here (the base is frozen for the round: run it again with --again where the base passes)")
    assert outcomes(summary) == {"a-fast": ("not-run", why),
                                 "b-broken": ("compile-error", "DSLUserCodeError: unsupported tile (submission.py:7)")}
    assert handed == ["(control)"]  # no candidate went to a worker
    assert [info for kind, info in events if kind == "base-failed"] == [{"proposal": "(base)", "reason": why}]
    assert summary.winner is None
    # Run again, the base frozen and still failing: the not-run verdict stands, nothing is recorded twice.
    rows = ledger.query("select count(*) as n from evaluations")[0]["n"]
    [again] = run_round(ledger, 1, settings=settings)
    assert [(v.proposal_id, v.outcome, v.skipped) for v in again.verdicts if v.proposal_id == "a-fast"] == [
        ("a-fast", "not-run", True)]
    assert ledger.query("select count(*) as n from evaluations")[0]["n"] == rows


def test_a_patch_that_adds_a_forbidden_call_stops_at_the_screen(tmp_path):
    kernels = tmp_path / "kernels"
    shutil.copytree(FIXTURE, kernels / "axpy")
    toml = kernels / "axpy" / "judge.toml"
    toml.write_text(toml.read_text() + '\n[rules]\nforbidden_calls = [{call = "torch.lerp", why = "one call does it all"}]\n')
    ledger = Ledger(tmp_path / "ledger.db")
    settings = Settings(kernels_dir=kernels, work_dir=tmp_path / "work", cache_dir=tmp_path / "cache", stages=FakeStages())
    patched = BASE.replace("CHUNKS = 1\n", "CHUNKS = 1\nimport torch as _t\n_fused = _t.lerp\n")
    patch = "".join(difflib.unified_diff(BASE.splitlines(True), patched.splitlines(True), "a/submission.py", "b/submission.py"))
    ledger.submit(proposal("fused", None).model_copy(update={"patch": patch}), "test")
    ledger.submit(proposal("honest", "speedup 1.2"), "test")
    [summary] = run_round(ledger, 1, settings=settings)
    assert outcomes(summary)["fused"] == (
        "forbidden-call", "uses torch.lerp, which this target forbids (one call does it all): submission.py:9: _fused = _t.lerp")
    assert summary.winner == "honest"
    verdict = next(v for v in summary.verdicts if v.proposal_id == "fused")
    stages = ledger.stage_results(verdict.evaluation_id)
    assert [(s.stage, s.status) for s in stages] == [("patch", "passed"), ("screen", "failed")]
    assert [(f.rule, f.line) for f in stages[1].detail.flags] == [("forbidden-call", 9)]
    assert "fused" not in settings.stages.compiled  # stopped before anything was compiled
    lines = render_round(ledger, 1, tmp_path / "reports").read_text().splitlines()
    assert (f"- Status: **forbidden-call** (evaluation #{verdict.evaluation_id}): uses torch.lerp, which this target "
            "forbids (one call does it all): submission.py:9: \\_fused = \\_t.lerp") in lines  # contained: _ escaped
    heading = lines.index("Screening flags (a static read of the patch: `forbidden-call` is the verdict above, the others "
                          "are for the sharks):")
    assert lines[heading + 2] == ("- line 9, forbidden-call: uses torch.lerp, which this target forbids (one call does "
                                  "it all) (`_fused = _t.lerp`)")


def test_decide_maps_a_failed_screen_to_forbidden_call():
    stages = [StageResult("patch", "passed", "ok"), StageResult("screen", "failed", "calls torch.x, ...: submission.py:3: x")]
    assert decide(stages) == (Outcome.FORBIDDEN_CALL, "calls torch.x, ...: submission.py:3: x")


def test_a_round_without_proposals_is_an_error(setup):
    ledger, settings = setup
    with pytest.raises(JudgeError) as error:
        run_round(ledger, 3, settings=settings)
    assert str(error.value) == "round 3 has no proposals (submit some with 'judge submit')"


def test_a_run_counts_the_time_inside_its_stages_from_their_details():
    run = RoundRun(None, None, None, None, {}, 0, Path("."), Path("."), None, None)
    run._count([StageResult("correctness", "passed", "ok", 1.0, CheckDetail(runner_start_s=0.25)),
                StageResult("timing", "passed", "ok", 2.0, TimingDetail(measuring_s=1.5)),
                StageResult("correctness", "crashed", "crashed: x", 0.5, CheckDetail(error="x")),
                StageResult("timing", "not-run", "not run: no GPU")])
    assert run.spent == {"correctness": 1.5, "runner starts": 0.25, "timing": 2.0, "measuring": 1.5}


def test_decide_reads_the_first_stage_that_stopped():
    stages = [StageResult("patch", "passed", "ok"), StageResult("compile", "timed-out", "killed after 300.0 s")]
    assert decide(stages) == (Outcome.TIMED_OUT, "compile: killed after 300.0 s")


def timed(geomean, low, high):
    return [StageResult("timing", "passed", f"geomean {geomean}x", 1.0, TimingDetail(geomean=geomean, geomean_ci=[low, high]))]


@pytest.mark.parametrize("geomean, low, high, outcome", [
    (1.010, 1.009, 1.011, "faster"),
    (1.006, 1.005, 1.007, "unchanged"),   # significant within the run, but under the run-to-run drift
    (0.998, 0.997, 0.999, "unchanged"),
    (0.990, 0.989, 0.991, "slower"),      # 1 / 1.01 = 0.9901: a 1% slowdown in the same log scale
    (1.050, 0.990, 1.110, "unchanged"),   # large but not significant
])
def test_a_verdict_needs_a_significant_and_large_enough_change(geomean, low, high, outcome):
    assert decide(timed(geomean, low, high))[0].value == outcome


def test_a_small_significant_change_says_why_it_is_unchanged():
    assert decide(timed(0.998, 0.997, 0.999)) == (
        Outcome.UNCHANGED, "geomean 0.998x; a change under 1.0% is within run-to-run drift")


@pytest.mark.parametrize("recorded, default, outcome", [
    ({"min_effect": 0.35}, None, "unchanged"),                   # the target's minimum, as timing records it
    ({"floor": {"effect": 0.05, "min_effect": 0.01, "source": "controls", "controls": 4}}, None, "faster"),
    ({}, Floor(effect=0.35, min_effect=0.35), "unchanged"),     # nothing recorded: the round's default floor
    ({}, None, "faster"),                                       # nothing at all: MIN_EFFECT
])
def test_a_verdict_clears_the_floor_its_timing_detail_records(recorded, default, outcome):
    detail = TimingDetail.from_json({"geomean": 1.2, "geomean_ci": [1.19, 1.21], **recorded})
    stages = [StageResult("timing", "passed", "geomean 1.2x", 1.0, detail)]
    assert decide(stages, default)[0].value == outcome


WILD = {"effect": 207.02, "min_effect": 0.01, "source": "controls", "controls": 1, "device": "cpu"}


@pytest.mark.parametrize("recorded, outcome, reason", [
    # the loaded VM's wild control: ten times the work read unchanged under a 20702% floor; now it says so
    ({"geomean": 0.1, "geomean_ci": [0.09, 0.11], "floor": WILD}, "inconclusive",
     "geomean 0.1x; the noise floor (20702.0%) is past judge's ceiling of 25%: identical code strays that far "
     "here, so no change can be called none"),
    ({"geomean": 0.1, "geomean_ci": [0.09, 0.11], "floor": WILD, "decision": "inconclusive", "significant": True,
      "pairs": 3}, "inconclusive",
     "geomean 0.1x; the noise floor (20702.0%) is past judge's ceiling of 25%: identical code strays that far "
     "here, so no change can be called none"),
])
def test_a_floor_past_the_ceiling_gives_no_unchanged_verdict(recorded, outcome, reason):
    detail = TimingDetail.from_json(recorded)
    assert decide([StageResult("timing", "passed", "geomean 0.1x", 1.0, detail)]) == (Outcome(outcome), reason)


RUNNER = textwrap.dedent("""
    import sys
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from fakestages import FakeStages
    from judge.ledger import Ledger
    from judge.rounds import Settings, run_round
    root = Path({root!r})
    settings = Settings(kernels_dir=root / "kernels", work_dir=root / "work", cache_dir=root / "cache",
                        stages=FakeStages(hang_s=600))
    run_round(Ledger(root / "ledger.db"), 1, settings=settings)
""")


def test_killing_a_run_loses_no_finished_result_and_a_second_run_resumes(setup, tmp_path):
    ledger, settings = setup
    ledger.submit(proposal("a", "speedup 1.2"), "test")
    ledger.submit(proposal("b", "hang-timing"), "test")
    ledger.submit(proposal("c", "speedup 1.1"), "test")
    child = subprocess.Popen([sys.executable, "-c", RUNNER.format(tests=str(Path(__file__).parent), root=str(tmp_path))])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rows = ledger.query("select r.proposal_id from evaluations e join revisions r on r.id = e.revision_id")
        if rows:
            break
        time.sleep(0.1)
    time.sleep(0.5)  # let it sit inside b's hanging timing stage
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert [r["proposal_id"] for r in rows] == ["a"]
    assert ledger.query("select status from runs")[0]["status"] == "running"

    [summary] = run_round(ledger, 1, settings=settings)
    assert [(v.proposal_id, v.outcome, v.skipped) for v in summary.verdicts] == [
        ("a", "faster", True), ("b", "unchanged", False), ("c", "faster", False)]
    assert [r["status"] for r in ledger.query("select status from runs order by id")] == ["interrupted", "finished"]
    assert ledger.query("select count(*) as n from evaluations where subject = 'candidate'")[0]["n"] == 3
    assert summary.winner == "a"


def test_an_implausible_speedup_cannot_win_until_a_person_clears_it(setup):
    from judge import actions

    ledger, settings = setup
    ledger.submit(proposal("a-too-good", "speedup 20"), "test")
    ledger.submit(proposal("b-fast", "speedup 1.25", knob=("CHUNKS = 1", "CHUNKS = 2")), "test")
    [summary] = run_round(ledger, 1, settings=settings)
    assert outcomes(summary)["a-too-good"] == (
        "implausible", "geomean 20.000x is past the target's bound of 10x (timing said faster: geomean 20.000x "
        "[19.900, 20.100] over 2 benchmarks); held until a person clears it")
    assert summary.winner == "b-fast"
    round_id = ledger.round_row("axpy", 1)["id"]
    evaluation = ledger.latest_evaluation(round_id, ledger.latest_revision("a-too-good")["id"])
    with pytest.raises(JudgeError, match="field 'note': say why the result is real"):
        actions.clear_evaluation(ledger, evaluation["id"], "  ", "referee")
    result = actions.clear_evaluation(ledger, evaluation["id"], "re-timed by hand: the base sleeps", "referee")
    assert result == {"clearance_id": 1, "evaluation_id": evaluation["id"], "target": "axpy", "round": 1,
                      "outcome": "faster", "reason": "geomean 20.000x [19.900, 20.100] over 2 benchmarks",
                      "round_winner": "a-too-good"}
    assert ledger.rounds("axpy")[0]["winner_revision_id"] == evaluation["revision_id"]
    with pytest.raises(JudgeError, match=f"evaluation {evaluation['id']} is already cleared"):
        actions.clear_evaluation(ledger, evaluation["id"], "again", "referee")
    faster = ledger.latest_evaluation(round_id, ledger.latest_revision("b-fast")["id"])
    with pytest.raises(JudgeError, match=f"evaluation {faster['id']} is faster, not implausible: nothing to clear"):
        actions.clear_evaluation(ledger, faster["id"], "why", "referee")


def test_a_time_below_the_speed_of_light_is_implausible():
    timing = StageResult("timing", "passed", "geomean 1.500x [1.490, 1.510] over 1 benchmark", 1.0, TimingDetail(
        geomean=1.5, geomean_ci=[1.49, 1.51], max_speedup=10.0,
        benchmarks=[TimedBenchmark.from_json({"index": 0, "cand_median_us": 1.2, "speed_of_light_us": 1.525})]))
    assert decide([timing]) == (
        Outcome.IMPLAUSIBLE, "benchmark 0 timed 1.200 us, below its speed of light 1.525 us (timing said faster: "
        "geomean 1.500x [1.490, 1.510] over 1 benchmark); held until a person clears it")


def test_the_peer_is_timed_against_each_rounds_base_once_and_never_ranked(tmp_path):
    """judge.toml [peer]: the peer runs the candidate stages against the base, is recorded with its name and
    subject 'peer', once per round (a resumed run keeps it), and never becomes a candidate or the winner."""
    import shutil

    kernels = tmp_path / "kernels"
    shutil.copytree(FIXTURE, kernels / "axpy")
    (kernels / "axpy" / "peer.py").write_text(BASE + "# verdict: speedup 0.5\n")
    meta = kernels / "axpy" / "judge.toml"
    meta.write_text((meta.read_text() if meta.exists() else "") + '\n[peer]\nfile = "peer.py"\nname = "torch axpy"\n')
    ledger = Ledger(tmp_path / "ledger.db")
    settings = Settings(kernels_dir=kernels, work_dir=tmp_path / "work", cache_dir=tmp_path / "cache", stages=FakeStages())
    ledger.submit(proposal("a-fast", "speedup 1.25"), "test")
    [summary] = run_round(ledger, 1, settings=settings)
    assert summary.winner == "a-fast" and [v.proposal_id for v in summary.verdicts] == ["a-fast"]
    r1 = ledger.round_row("axpy", 1)
    peer = ledger.latest_evaluation(r1["id"], None, subject="peer")
    assert (peer["outcome"], peer["reason"]) == ("slower", "torch axpy: geomean 0.500x [0.497, 0.502] over 2 benchmarks")
    run_round(ledger, 1, settings=settings)
    assert ledger.query("select count(*) as n from evaluations where subject = 'peer'")[0]["n"] == 1


def test_the_library_refuses_a_round_out_of_order_too(setup):
    """run_round checks the target's round order itself (judge.schedule), so a harness calling the library cannot
    run round 3 before round 2, nor round 1 again once round 2 started; nothing is written."""
    ledger, settings = setup
    ledger.submit(proposal("a", "speedup 1.25"), "test")
    run_round(ledger, 1, settings=settings)
    target = load_target(settings.kernels_dir / "axpy")
    with pytest.raises(JudgeError, match="^round 3 of axpy cannot run: round 1 has started, so the next is round 2$"):
        run_round(ledger, 3, target=target, settings=settings)
    run_round(ledger, 2, target=target, settings=settings)
    rows = ledger.query("select count(*) as n from evaluations")[0]["n"]
    with pytest.raises(JudgeError, match="^round 1 of axpy is closed: round 2 began on .* from its result"):
        run_round(ledger, 1, target=target, settings=settings.__class__(**{**settings.__dict__, "again": True}))
    assert ledger.query("select count(*) as n from evaluations")[0]["n"] == rows
    assert [r["round"] for r in ledger.rounds("axpy")] == [1, 2]


class _ControlsWatched(FakeStages):
    """FakeStages that list the rounds whose controls they time and record the floor each timing used, as the real
    timing stage does (the round's page reads the device from it)."""

    def __init__(self):
        super().__init__()
        self.controls: list[str] = []

    def evaluate(self, session, workspace, budget_s, floor=None, progress=None, control=False, serves=0):
        self.controls.extend([session.base_dir.parent.name] if control else [])
        stages = super().evaluate(session, workspace, budget_s, floor, progress, control)
        timing = stages[-1]
        if floor is not None and timing.stage == "timing":
            stages[-1] = StageResult(timing.stage, timing.status, timing.summary, timing.seconds,
                                     timing.detail.updated(floor=floor.to_json()))
        return stages


def test_a_round_keeps_the_control_an_earlier_round_timed_of_its_very_base_on_this_device(setup, tmp_path,
                                                                                          monkeypatch):
    """Round 1 had no winner, so round 2's base is round 1's, whose control timed that very kernel on this device;
    its pairs are in the floor already, and timing it again cost a round 13-63 s on an H200. Round 2 says which
    control it kept, in its events and on its page; asked to judge again, it times its own."""
    ledger, settings = setup
    settings.stages = stages = _ControlsWatched()
    ledger.submit(proposal("a", "speedup 1.0"), "test")
    assert run_round(ledger, 1, settings=settings)[0].winner is None
    ledger.submit(proposal("b", "speedup 1.0", round=2), "test")
    events = []
    run_round(ledger, 2, settings=settings, on_event=lambda kind, **info: events.append((kind, info)))
    assert stages.controls == ["round-1"]
    [control] = ledger.query("select id from evaluations where subject = 'control'")
    words = (f"round 1's control (evaluation #{control['id']}) timed this very base on Fake GPU, so this round times "
             f"no control of its own")
    assert [info for kind, info in events if kind == "control-kept"] == [
        {"target": "axpy", "kept": {"round": 1, "evaluation_id": control["id"]}, "words": words}]
    page = render_round(ledger, 2, tmp_path / "pages").read_text()
    floor = ledger.verdict_floor(ledger.round_row("axpy", 2)["id"])
    line = (f"- Noise control: kept; {words}; the noise floor of this round's verdicts: "
            f"{Floor.from_json(floor).words()}\n")
    assert line in page
    # a calibration of the same base made after the round is not what the round kept
    from judge.ledger import noise as ledger_noise, sha256

    monkeypatch.setattr(ledger_noise, "now", lambda: "2999-01-01T00:00:00+00:00")
    ledger.record_calibration("axpy", "Fake GPU", {"name": "Fake GPU"}, sha256(BASE),
                              {"controls": [{"pair_geomeans": [1.0, 1.001, 0.999]}]}, ["judge", "calibrate"])
    assert line in render_round(ledger, 2, tmp_path / "later").read_text()
    settings.again = True
    run_round(ledger, 2, settings=settings)
    assert stages.controls == ["round-1", "round-2"]


def test_a_round_whose_base_changed_or_that_runs_elsewhere_times_its_own_control(setup):
    """A winner changes the base: round 2's kernel was never timed against itself, so its round times a control. A
    calibration of the base on another device keeps nothing either; one on this device does."""
    from judge.ledger import sha256

    ledger, settings = setup
    settings.stages = stages = _ControlsWatched()
    base_sha = sha256(BASE)
    result = {"controls": [{"pair_geomeans": [1.001, 0.998, 1.0]}]}
    ledger.record_calibration("axpy", "Other GPU", {"name": "Other GPU"}, base_sha, result, ["judge", "calibrate"])
    ledger.submit(proposal("a", "speedup 1.25"), "test")
    assert run_round(ledger, 1, settings=settings)[0].winner == "a"
    assert stages.controls == ["round-1"]  # calibrated on another device: round 1 timed its own
    ledger.submit(proposal("b", "speedup 1.0", round=2, knob=("CHUNKS = 1", "CHUNKS = 4")).model_copy(
        update={"patch": knob_patch("CHUNKS = 1", "CHUNKS = 4", "speedup 1.0",
                                    base=base_for(ledger, load_target(FIXTURE), 2)[0])}), "test")
    run_round(ledger, 2, settings=settings)
    assert stages.controls == ["round-1", "round-2"]  # a new base: timed again
    calibrated = ledger.record_calibration("axpy", "Fake GPU", {"name": "Fake GPU"}, base_sha, result, ["judge"])
    assert ledger.measured_base("axpy", base_sha, "Fake GPU", -1) == {"calibration": calibrated}
    assert ledger.measured_base("axpy", base_sha, "Fake GPU", ledger.round_row("axpy", 1)["id"]) == {
        "calibration": calibrated}  # the latest of round 1's control and this calibration
    assert ledger.measured_base("axpy", "0" * 64, "Fake GPU", -1) is None
