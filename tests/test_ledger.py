"""The ledger keeps every revision and result, writes atomically, and survives two writers at once."""

import json
import multiprocessing
from pathlib import Path

import pytest

from judge.ledger import Ledger
from judge.records import Proposal, Shark, Vote
from judge.stages.details import CheckDetail, TimedBenchmark, TimingDetail
from judge.stages.result import StageResult


def make(pid="p", title="t", **extra):
    return Proposal(id=pid, title=title, author="a", round=1, target="axpy", pitch="pitch", **extra)


def test_resubmitting_changed_content_adds_a_revision_and_keeps_the_old_one(tmp_path):
    ledger = Ledger(tmp_path / "l.db")
    assert ledger.submit(make(), "x").status == "new"
    assert ledger.submit(make(), "x").status == "unchanged"
    second = ledger.submit(make(title="better"), "x")
    assert (second.status, second.revision) == ("revised", 2)
    assert [(r["revision"], r["title"]) for r in ledger.revision_history("p")] == [(1, "t"), (2, "better")]
    assert [r["title"] for r in ledger.current_revisions()] == ["better"]


def test_a_patch_is_kept_byte_for_byte(tmp_path):
    ledger = Ledger(tmp_path / "l.db")
    patch = "--- a/submission.py\n+++ b/submission.py\n@@ -1,2 +1,2 @@\n \n-x = 1\n+x = 2\n"
    ledger.submit(make(patch=patch), "x")
    assert ledger.latest_revision("p")["patch"] == patch


def test_a_changed_rubric_is_a_new_shark_version(tmp_path):
    ledger = Ledger(tmp_path / "l.db")
    crit = [{"name": "a", "weight": 0.5}, {"name": "b", "weight": 0.5}]
    assert ledger.add_shark(Shark(name="s", criteria=crit), "f")[1:] == (1, "new")
    assert ledger.add_shark(Shark(name="s", criteria=crit), "f")[1:] == (1, "unchanged")
    crit[0]["weight"], crit[1]["weight"] = 0.6, 0.4
    assert ledger.add_shark(Shark(name="s", criteria=crit), "f")[1:] == (2, "revised")


def test_the_same_vote_twice_is_one_row_and_a_changed_vote_supersedes(tmp_path):
    ledger = Ledger(tmp_path / "l.db")
    ledger.submit(make(), "x")
    shark_id, _, _ = ledger.add_shark(Shark(name="s", criteria=[{"name": "a", "weight": 1}]), "f")
    vote = Vote(shark="s", proposal="p", scores={"a": 7})
    first = ledger.cast_vote(vote, shark_id, 1, 1, "v")
    assert ledger.cast_vote(vote, shark_id, 1, 1, "v") == (first[0], "unchanged")
    changed = ledger.cast_vote(Vote(shark="s", proposal="p", scores={"a": 8}), shark_id, 1, 1, "v")
    assert changed[1] == "revised"
    assert ledger.db["votes"].count == 2
    assert [v["scores_json"] for v in ledger.votes()] == ['{"a": "8"}']


def _timing(*lacking: str):
    """A passed timing stage; a benchmark that lacks the `lacking` keys is what a bug half-way through it leaves."""
    bench = {"index": 0, "label": "size=1", "base_median_us": 10.0, "cand_median_us": 8.0, "speedup": 1.25,
             "ci_low": 1.2, "ci_high": 1.3, "significant": True, "reps": 2}
    bench = TimedBenchmark.from_json({k: v for k, v in bench.items() if k not in lacking})
    bench = bench.updated(base_us=[10.0, 10.1], cand_us=[8.0, 7.9])
    return StageResult("timing", "passed", "geomean 1.250x", 1.0,
                       TimingDetail(benchmarks=[bench], geomean=1.25, geomean_ci=[1.2, 1.3]))


def test_an_evaluation_is_written_whole_or_not_at_all(tmp_path):
    ledger = Ledger(tmp_path / "l.db")
    ledger.submit(make(), "x")
    round_row = ledger.create_round("axpy", 1, "src", "origin")
    run_id = ledger.start_run(round_row["id"], [])
    broken = _timing("speedup")  # a bug half-way through the write
    with pytest.raises(KeyError):
        ledger.record_evaluation(run_id=run_id, round_id=round_row["id"], revision_id=1, subject="candidate",
                                 kernel_sha256="k", outcome="faster", reason="r", stages=[broken], device=None, started_at="t")
    assert [ledger.db[t].count for t in ("evaluations", "stage_results", "benchmark_results", "timings")] == [0, 0, 0, 0]
    ledger.record_evaluation(run_id=run_id, round_id=round_row["id"], revision_id=1, subject="candidate",
                             kernel_sha256="k", outcome="faster", reason="r", stages=[_timing()], device=None, started_at="t")
    assert [ledger.db[t].count for t in ("evaluations", "stage_results", "benchmark_results", "timings")] == [1, 1, 1, 2]
    # raw repetitions live in `timings`, not duplicated in the stage's JSON
    stored = json.loads(ledger.query("select detail_json from stage_results where id = 1")[0]["detail_json"])
    assert "base_us" not in stored["benchmarks"][0]


def test_text_a_candidate_produced_is_capped_before_it_is_stored(tmp_path):
    """A 16 MiB error line, in the summary, the detail and the reason, and a 1 MiB log tail: the ledger keeps
    4 KiB of each line, 8 KiB of the reason, the last 64 KiB of the tail, each saying how much it left out."""
    ledger = Ledger(tmp_path / "l.db")
    ledger.submit(make(), "x")
    round_row = ledger.create_round("axpy", 1, "src", "origin")
    run_id = ledger.start_run(round_row["id"], [])
    error = "RuntimeError: " + "x" * (16 << 20)
    crashed = StageResult("correctness", "crashed", f"crashed: {error}", 2.0, CheckDetail(error=error),
                          "head\n" + "t" * (1 << 20))
    ledger.record_evaluation(run_id=run_id, round_id=round_row["id"], revision_id=1, subject="candidate",
                             kernel_sha256="k", outcome="crashed", reason=f"correctness: crashed: {error}",
                             stages=[crashed], device=None, started_at="t")
    [stage] = ledger.stage_results(1)
    assert stage.summary == "crashed: RuntimeError: " + "x" * 4046 + " (16773170 more characters)"
    assert stage.detail.error == "RuntimeError: " + "x" * 4055 + " (16773161 more characters)"
    assert stage.log_tail == "(983077 more characters before)\n" + "t" * 65504
    assert ledger.evaluation(1)["reason"] == "correctness: crashed: RuntimeError: " + "x" * 8129 + " (16769087 more characters)"
    ledger.close()
    assert sum(path.stat().st_size for path in tmp_path.glob("l.db*")) < 1 << 20


def test_a_round_base_is_frozen_once_created(tmp_path):
    ledger = Ledger(tmp_path / "l.db")
    first = ledger.create_round("axpy", 1, "source one", "origin one")
    again = ledger.create_round("axpy", 1, "source two", "origin two")
    assert (again["id"], again["base_source"], again["base_origin"]) == (first["id"], "source one", "origin one")


def _writer(path: str, prefix: str, count: int) -> None:
    ledger = Ledger(path)
    for i in range(count):
        ledger.submit(make(pid=f"{prefix}-{i}"), "worker")


def test_two_processes_writing_one_ledger_at_once_lose_nothing(tmp_path):
    path = str(tmp_path / "l.db")
    Ledger(path).close()
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_writer, args=(path, name, 40)) for name in ("left", "right")]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
        assert w.exitcode == 0
    ledger = Ledger(path)
    assert ledger.db["proposals"].count == 80
    assert ledger.db["revisions"].count == 80
    assert ledger.db.execute("pragma integrity_check").fetchone()[0] == "ok"
