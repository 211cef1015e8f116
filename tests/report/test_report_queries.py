"""The Ledger methods the reports ask: each answers one question, checked against rows written for it."""

from judge.ledger import Ledger
from test_report import BASE_1, COMPILE_ERROR, CORRECT, FASTER, PATCHED, SLOWER, TARGET, evaluate, proposal


def ledger_with_two_rounds(tmp_path) -> tuple[Ledger, dict, dict]:
    ledger = Ledger(tmp_path / "ledger.db")
    revs = {
        "a1": ledger.submit(proposal("a", "team-a", 1, "pipeline", (1.1, 1.2), "NUM_AB_STAGES = 2"), "t").revision_id,
        "b1": ledger.submit(proposal("b", "team-b", 1, "tiling", None), "t").revision_id,
        "a2": ledger.submit(proposal("a", "team-a", 1, "pipeline", (1.1, 1.3), "NUM_AB_STAGES = 3"), "t").revision_id,
        "a3": ledger.submit(proposal("a", "team-a", 2, "pipeline", (1.1, 1.3), "NUM_AB_STAGES = 4"), "t").revision_id,
    }
    r1 = ledger.create_round(TARGET, 1, BASE_1, "base")
    run = ledger.start_run(r1["id"], ["judge", "run"])
    ids = {
        "base": evaluate(ledger, run, r1, None, "unchanged", "base", [CORRECT], None),
        "a2-first": evaluate(ledger, run, r1, revs["a2"], "compile-error", "x", [PATCHED, COMPILE_ERROR], None),
        "a2-second": evaluate(ledger, run, r1, revs["a2"], "implausible", "held", [PATCHED, CORRECT, FASTER], None),
        "a1": evaluate(ledger, run, r1, revs["a1"], "slower", "s", [PATCHED, CORRECT, SLOWER], None),
    }
    ledger.finish_run(run, "finished")
    ledger.clear(ids["a2-second"], "faster", "checked", "me")
    return ledger, revs, {"round": r1, "run": run, **ids}


def test_revisions_of_a_round_are_each_proposals_latest_for_that_round(tmp_path):
    ledger, revs, _ = ledger_with_two_rounds(tmp_path)
    assert [r["id"] for r in ledger.revisions_of_round(TARGET, 1)] == [revs["a2"], revs["b1"]]
    assert [r["id"] for r in ledger.revisions_of_round(TARGET, 2)] == [revs["a3"]]
    assert ledger.revisions_of_round("other", 1) == []
    assert [r["id"] for r in ledger.revisions_up_to_round(TARGET, 1)] == [revs["a1"], revs["a2"], revs["b1"]]


def test_latest_candidate_evaluations_carry_their_revision_and_clearance(tmp_path):
    ledger, revs, ids = ledger_with_two_rounds(tmp_path)
    rows = ledger.latest_candidate_evaluations(ids["round"]["id"])
    assert [(r["id"], r["proposal_id"], r["revision"], r["outcome"], r["cleared_outcome"]) for r in rows] == [
        (ids["a2-second"], "a", 2, "implausible", "faster"),
        (ids["a1"], "a", 1, "slower", None),
    ]
    assert rows[1]["claim_low"] == 1.1 and rows[1]["author"] == "team-a"
    assert [(r["id"], r["revision_id"], r["outcome"]) for r in ledger.superseded_candidate_evaluations(ids["round"]["id"])] == [
        (ids["a2-first"], revs["a2"], "compile-error")]


def test_runs_and_authors(tmp_path):
    ledger, _, ids = ledger_with_two_rounds(tmp_path)
    [run] = ledger.runs_of_round(ids["round"]["id"])
    assert (run["id"], run["status"]) == (ids["run"], "finished") and run["finished_at"] is not None
    assert [(r["author"], r["proposal_id"]) for r in ledger.proposal_authors(TARGET)] == [("team-a", "a"), ("team-b", "b")]
