"""Issue 41 for real on the CPU example: vecadd_cpu's base profiled in a confined runner of its own (torch.profiler's
host ops), kept in the ledger and reused; a kernel that raises gives the profile's one line, never an exception."""

from __future__ import annotations

from pathlib import Path

from judge import profiles
from judge.ledger import Ledger
from judge.targets import load_target

ROOT = Path(__file__).resolve().parents[1]


def test_vecadd_cpu_profile_is_where_the_host_time_goes_and_a_raising_kernel_is_unavailable(tmp_path):
    ledger = Ledger(tmp_path / "ledger.db")
    target = load_target(ROOT / "kernels" / "vecadd_cpu")
    heard = []
    done = profiles.profile_source(ledger, target, target.kernel_source(), "base", tmp_path / "base",
                                   progress=lambda **info: heard.append((info["benchmark"], info["label"])))
    profile = done["profile"]
    assert (done["reused"], profile["status"], profile["tool"], profile["peaks"]) == (
        False, "ok", "torch.profiler (host ops)", None)
    assert heard == [(1, "size=262144"), (2, "size=1048576")]
    for bench in profile["benchmarks"]:
        top = bench["kernels"][0]
        assert (top["name"], top["launches"]) == ("aten::add", 1.0)
        assert 0 < top["share"] <= 1 and bench["call_us"] > 0
        assert bench["bounds"][0].startswith("host: aten::add takes ")
    assert profiles.profile_source(ledger, target, target.kernel_source(), "base", tmp_path / "base")["reused"]

    raising = target.kernel_source().replace("def custom_kernel(data", "def custom_kernel(data, _=None):\n"
                                             "    raise ValueError('no')\n\n\ndef unused(data")
    failed = profiles.profile_source(ledger, target, raising, "candidate", tmp_path / "raising")["profile"]
    assert failed["status"] == "unavailable"
    assert failed["reason"].startswith("ValueError: no")


def test_a_kernel_that_changes_its_input_objects_is_profiled_on_them_as_made(tmp_path):
    """The kvdecode fixture's cache holds 8 rows and its benchmark fills 5: more than three calls on one cache object
    raise 'KV cache exceeded', and a profile makes more. Each profiled call gets the cache as made."""
    target = load_target(ROOT / "tests" / "fixtures" / "gpumode" / "kvdecode")
    target.arch = "cpu"
    done = profiles.profile_source(Ledger(tmp_path / "ledger.db"), target, target.kernel_source(), "base",
                                   tmp_path / "base")
    assert done["profile"]["status"] == "ok", done["profile"]
    assert [b["label"] for b in done["profile"]["benchmarks"]] == ["batch=4 dim=64 prefill=5 capacity=8"]


def test_a_runner_started_by_ncu_keeps_its_pipes_and_ncus_report_is_read_when_it_exits(tmp_path):
    """The ncu path's plumbing with a stand-in for ncu (tests/fixtures/profile/fake_ncu.sh) on the CPU: the runner
    is started by the launcher, answers over the pipes it inherited, exits when told, and only then is the report
    written and read back (one runner per benchmark)."""
    import time

    from judge.stages.evaluation import Evaluator
    from judge.stages.profile import stage
    from judge.workspaces import fresh

    target = load_target(ROOT / "kernels" / "vecadd_cpu")
    workspace = fresh(tmp_path / "kernel")
    target.assemble(workspace, target.kernel_source())
    fake = Path(__file__).parent / "fixtures" / "profile" / "fake_ncu.sh"
    notes = []
    with Evaluator(target, fresh(tmp_path / "judge"), warm=False) as evaluator:
        benches = stage._under_ncu(evaluator, workspace.resolve(), str(fake), time.monotonic() + 120,
                                   lambda **info: None, notes, list(range(len(target.benchmarks))))
    assert notes == []
    assert [(b.index, [(k.launches, k.us, k.stalls[0][0]) for k in b.kernels]) for b in benches] == [
        (0, [(2.0, 2435.0, "long_scoreboard"), (1.0, 3.25, "long_scoreboard")]),
        (1, [(2.0, 2435.0, "long_scoreboard"), (1.0, 3.25, "long_scoreboard")])]
    assert all(b.call_us > 0 for b in benches)


def test_a_target_ranked_by_its_last_benchmark_has_that_one_profiled_first(tmp_path):
    """A round's profile of its base gets a share of the round's time (profiles.round_profile_s): where the problem
    ranks by its last benchmark (GPU MODE's pmpp problems), that one comes first, and a profile cut short leaves
    out the others."""
    import dataclasses

    from judge.stages.profile.stage import OUT_OF_TIME

    target = dataclasses.replace(load_target(ROOT / "kernels" / "vecadd_cpu"), ranking_by="last")
    heard = []
    done = profiles.profile_source(Ledger(tmp_path / "ledger.db"), target, target.kernel_source(), "base",
                                   tmp_path / "base", timeout_s=0.0,
                                   progress=lambda **info: heard.append((info["benchmark"], info["label"])))
    assert heard[0] == (2, "size=1048576")
    [first, last] = done["profile"]["benchmarks"]  # kept in the order of the benchmarks
    assert (first["index"], last["index"]) == (0, 1)
    assert first["error"].startswith(OUT_OF_TIME) and not last.get("error")
