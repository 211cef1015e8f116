"""judge/stages/timing/group.py: several kernels timed against one base in process groups, on the CPU with the host
clock. Each kernel's verdict reads the group as its own pair with the base; one whose runner stops beside rivals is
timed again alone before its failure counts, and a group with a failure counts for no one else."""

import contextlib
import re
from pathlib import Path

from judge.stages.evaluation import Evaluator
from judge.stages.timing import group as timing_group
from judge.stages.timing import stage as timing
from judge.workspaces import fresh

VARIANTS = Path(__file__).parent / "fixtures" / "gpumode" / "vecadd" / "variants"


@contextlib.contextmanager
def groups_recorded():
    """The workspaces' names of every pair or group timed meanwhile (stage.time_group), in order."""
    started, real = [], timing.time_group

    def noted(evaluator, workspaces, *args, **kwargs):
        started.append(sorted(Path(w).name for w in workspaces.values()))
        return real(evaluator, workspaces, *args, **kwargs)

    timing.time_group = noted
    try:
        yield started
    finally:
        timing.time_group = real


def test_a_group_times_each_kernel_against_one_base_and_a_crashed_one_again_alone(tmp_path, small_target):
    base = small_target.assemble(tmp_path / "base", small_target.kernel_source())
    kernels = [small_target.assemble(tmp_path / name, (VARIANTS / f"{source}.py").read_text())
               for name, source in (("same", "correct"), ("faults", "faults"), ("cached", "cached"))]
    said: dict[int, list] = {0: [], 1: [], 2: []}
    with groups_recorded() as started, Evaluator(small_target, fresh(tmp_path / "oracle"), base_dir=base) as evaluator:
        results = timing_group.measure_group(evaluator, kernels, budget_s=2, timeout_s=300,
                                             progress=[lambda i=i, **info: said[i].append(info) for i in range(3)])
    same, faults, cached = results
    assert same.status == "passed", same.summary
    assert re.fullmatch(r"geomean \d+\.\d{3}x \[\d+\.\d{3}, \d+\.\d{3}\] over 2 benchmarks, \d process pairs",
                        same.summary)
    assert same.detail.decision in ("unchanged", "inconclusive")
    assert faults.status == "crashed" and faults.summary.startswith("crashed: IndexError")
    assert cached.status == "failed" and "its" in cached.summary, cached.summary
    # the first group held all three; a group with a failure counts for no one; the crashed kernel was timed again
    # alone after the groups (a rival may have failed its runner), the wrong one was judged on its own output
    assert started[0] == ["cached", "faults", "same"]
    assert sorted(started[1]) in (["cached", "same"], ["faults", "same"])
    assert started[2:] == [["same"]] * 3 + [["faults"]]
    # progress: the identical copy's pairs as they start, the first one again after each group left out
    assert same.detail.pairs == 3
    assert [(i["pair"], i["benchmark"]) for i in said[0]] == [(1, 1), (1, 1), (1, 1), (1, 2), (2, 1), (2, 2), (3, 1),
                                                               (3, 2)]


def test_a_group_read_as_one_kernels_pair_holds_the_base_and_that_kernel_only():
    from judge.stages.timing.summary import GroupResult, PairBenchmark, strays_of

    rep = {"us": 1.0}
    bench = PairBenchmark(index=0, series={(w, "host"): [dict(rep, who=w)] for w in ("base", "cand0", "cand1")},
                          spin_us=0.0, sets=2, copies=2, placement="separate", measuring_s=0.1, strays=[7, 9],
                          analysed="host", failure="benchmark 0: its output is far", failed_who="cand1",
                          strays_of={"base": [], "cand0": [], "cand1": [7, 9]})
    group = GroupResult(benchmarks=[bench], failure=bench.failure, failed_who="cand1",
                        findings={"base": [], "cand0": [], "cand1": ["its call left a profile or trace function set"]})
    mine, rival = group.of("cand0"), group.of("cand1")
    # a rival's failure, findings and stray processes are not this kernel's
    assert (mine.failure, mine.findings, mine.benchmarks[0].strays, mine.benchmarks[0].failure) == (None, [], [], None)
    assert mine.benchmarks[0].series == {("base", "host"): [dict(rep, who="base")],
                                         ("cand", "host"): [dict(rep, who="cand0")]}
    assert (rival.failure, rival.benchmarks[0].strays) == ("benchmark 0: its output is far", [7, 9])
    assert rival.findings == ["its call left a profile or trace function set"]
    assert (strays_of(group, "cand0"), strays_of(group, "cand1")) == (False, True)


def test_a_candidates_timing_says_how_it_is_grouped():
    from judge.local_groups import timing_words

    assert [timing_words(size, kernels) for size, kernels in ((1, 1), (6, 3), (2, 5), (1, 3))] == [
        "timing",
        "timing, in one process group of 3 kernels beside the base",
        "timing, 5 kernels in process groups of 2 beside the base",
        "timing, in process pairs (the device has room for no second kernel's runner beside the base's)"]
    assert [timing_words(size, 4, True) for size in (4, 3)] == [
        "timing, in one process group of 4 kernels (the round's control among them) beside the base",
        "timing, 4 kernels (the round's control among them) in process groups of 3 beside the base"]


def test_the_last_kernel_of_a_group_that_crashes_alone_is_not_timed_again(tmp_path, small_target):
    base = small_target.assemble(tmp_path / "base", small_target.kernel_source())
    faulty = (VARIANTS / "faults.py").read_text()
    kernels = [small_target.assemble(tmp_path / name, faulty) for name in ("first", "second")]
    with groups_recorded() as started, Evaluator(small_target, fresh(tmp_path / "oracle"), base_dir=base) as evaluator:
        results = timing_group.measure_group(evaluator, kernels, budget_s=2, timeout_s=300)
    assert [r.status for r in results] == ["crashed", "crashed"]
    # the one that crashed beside a rival was timed again alone; the other crashed with no rival beside it
    assert len(started) == 3 and started[0] == ["first", "second"] and sorted(started[1] + started[2]) == [
        "first", "second"]


def test_the_control_in_a_group_is_handed_over_once_done_and_its_floor_is_every_kernels(tmp_path, small_target,
                                                                                         monkeypatch):
    from judge.noise import Floor

    base = small_target.assemble(tmp_path / "base", small_target.kernel_source())
    control = small_target.assemble(tmp_path / "control", small_target.kernel_source())
    correct = (VARIANTS / "correct.py").read_text()
    kernels = [small_target.assemble(tmp_path / name, correct) for name in ("first", "second")]
    wide = Floor(effect=0.2, min_effect=0.01, source="controls", controls=1)  # under the 25% ceiling
    handed = []

    def floor_after(result):
        handed.append(result)
        return wide

    # a budget that leaves an A/A control undecided against the 1% minimum going on, up to the pairs 16 verdicts buy
    # the floor the control's own three pairs would set is CI's noise (2 loaded cores set one past the ceiling): read
    # as narrow here, so that what stops the control is the others' decisions alone
    own_floors = []
    monkeypatch.setattr(timing_group, "floor_from", lambda samples, minimum, *_: own_floors.append(
        len(samples[0])) or Floor(effect=minimum, min_effect=minimum, source="min_effect"))
    grouped = timing_group.GroupControl(control, 16, floor_after, preview=lambda logs: wide)
    with groups_recorded() as started, Evaluator(small_target, fresh(tmp_path / "oracle"), base_dir=base) as evaluator:
        results = timing_group.measure_group(evaluator, kernels, budget_s=60, timeout_s=300, control=grouped)
    [timed] = handed
    assert timed.status == "passed", timed.summary
    assert started[0] == ["control", "first", "second"]
    # the control stopped with the pair in which the last kernel was decided against the floor its own pairs would
    # set (the third, unless the CPU's noise kept a kernel undecided there: a loaded CI's did once), its own floor
    # read at each pair from the third on, and each kernel cleared the floor it answered
    last = max(r.detail.pairs for r in results)
    assert timed.detail.pairs == last >= 3 and len(started) == last
    assert own_floors == list(range(3, last + 1))
    assert [(r.status, r.detail.floor, r.detail.decision) for r in results] == [
        ("passed", wide.to_json(), "unchanged")] * 2
    assert timed.detail.floor["effect"] == 0.01  # its own verdict read against the floor it was timed with


def test_a_control_whose_runner_stops_beside_rivals_is_timed_alone_at_once_and_the_others_go_on(tmp_path,
                                                                                                 small_target):
    from judge.noise import Floor

    base = small_target.assemble(tmp_path / "base", small_target.kernel_source())
    control = small_target.assemble(tmp_path / "control", (VARIANTS / "faults.py").read_text())  # stands for a crash
    correct = (VARIANTS / "correct.py").read_text()
    kernels = [small_target.assemble(tmp_path / name, correct) for name in ("first", "second")]
    handed, floor = [], Floor(effect=0.2, min_effect=0.01, source="controls", controls=1)

    def floor_after(result):
        handed.append((result, len(started)))
        return floor

    grouped = timing_group.GroupControl(control, 2, floor_after)
    with groups_recorded() as started, Evaluator(small_target, fresh(tmp_path / "oracle"), base_dir=base) as evaluator:
        results = timing_group.measure_group(evaluator, kernels, budget_s=2, timeout_s=300, control=grouped)
    # the first group stopped on the control's runner; the control was timed alone right then (its failure then
    # counted) and handed over before the kernels' next group, which cleared the floor it answered
    [(timed, at)] = handed
    assert timed.status == "crashed" and timed.summary.startswith("crashed: IndexError"), timed.summary
    assert started[:2] == [["control", "first", "second"], ["control"]] and at == 2
    assert all(names == ["first", "second"] for names in started[2:])
    assert [(r.status, r.detail.floor) for r in results] == [("passed", floor.to_json())] * 2


def test_checked_candidates_are_timed_at_once_where_the_next_compile_keeps_them_waiting_longer_than_their_checks(
        monkeypatch):
    """judge.local_groups: after each check, the candidates checked so far wait for the next compile MIN_PAIRS times
    their mean check; where it does not end by then they are timed together (the control in their group), and those
    that come later in groups of their own, against the floor the control set."""
    import time
    from types import SimpleNamespace

    from judge import local_groups
    from judge.local_groups import timing_words
    from judge.stages.job import Job
    from judge.stages.result import StageResult

    calls, waits = [], []

    class Stages:
        def check(self, evaluator, workspace, progress):
            calls.append(("check", workspace.name))
            time.sleep(0.05)
            return StageResult("correctness", "failed" if workspace.name == "wrong" else "passed", "", 2.0)

        def group_size(self, evaluator, kernels):
            return kernels

        def time_group(self, evaluator, workspaces, budget_s, floor, progress, control):
            calls.append(("group", [w.name for w in workspaces], floor, control is not None))
            if control is not None:
                run.floor = "the control's floor"
            return [StageResult("timing", "passed", w.name, 3.0) for w in workspaces]

    events = []
    run = SimpleNamespace(settings=SimpleNamespace(stages=Stages(), timing_budget_s=1.0), floor="before",
                          open_evaluator=lambda: None, on_event=lambda kind, **info: events.append((kind, info)))
    monkeypatch.setattr(local_groups, "_group_control", lambda run, control, progress_of, grouped: control)
    jobs = [Job(None, name, "", Path(name)) for name in ("first", "second", "wrong", "late")]

    def wait_next(seconds):  # "second" and "wrong" come at once; "late" compiles long after "wrong" is checked
        waits.append(seconds)
        return len(waits) < 3

    came = [(job.name, [s.status for s in stages]) for job, stages, _ in local_groups.evaluate_in_groups(
        run, iter(jobs), lambda on_event, name: None, control="the control", wait_next=wait_next)]
    # the wait after the failed check, the last before the slow compile, is what times "first" and "second" now
    assert calls == [("check", "first"), ("check", "second"), ("check", "wrong"),
                     ("group", ["first", "second"], "before", True),
                     ("check", "late"), ("group", ["late"], "the control's floor", False)]
    # each wait MIN_PAIRS (3) times the held candidates' mean check (0.05 s and a little more each)
    assert len(waits) == 4 and all(3 * 0.05 <= wait < 3 * 0.05 + 1.0 for wait in waits), waits
    assert came == [("wrong", ["failed"]), ("first", ["passed", "passed"]), ("second", ["passed", "passed"]),
                    ("late", ["passed", "passed"])]
    said = [(info["proposal"], info["stage"]) for kind, info in events
            if kind == "stage" and info["stage"] != "correctness"]
    assert said == [("first", timing_words(3, 3, True)), ("second", timing_words(3, 3, True)), ("late", "timing, after the candidates whose compiles ended first")]
