"""The peer in the reports: the round's base against the target's existing implementation, measured as a
candidate is and shown inverted (base over peer), in the scorecard and on the leaderboard."""

from judge.report import render_leaderboard, render_round, round_view
from test_report import B200, CORRECT, TARGET, evaluate, ledger, lines, timing  # noqa: F401  (fixture)

# The peer timed against round 1's base: slower on every benchmark, so the base is faster than the peer.
PEER_TIMING = timing([(373.0, 560.0), (372.0, 520.0), (173.0, 190.0), (156.0, 410.0)],
                     [(0.650, 0.680), (0.700, 0.730), (0.900, 0.920), (0.370, 0.390)], 0.65, [0.64, 0.66])


def record_peer(ledger, reason="torch._scaled_grouped_mm: slower: 0.650x [0.640, 0.660]", stages=None, outcome="slower"):
    r1 = ledger.round_row(TARGET, 1)
    run = ledger.start_run(r1["id"], ["judge", "run"])
    evaluation_id = ledger.record_evaluation(
        run_id=run, round_id=r1["id"], revision_id=None, subject="peer", kernel_sha256="1" * 64, outcome=outcome,
        reason=reason, stages=stages if stages is not None else [CORRECT, PEER_TIMING], device=B200,
        started_at="2025-06-01T11:00:00+00:00")
    ledger.finish_run(run, "finished")
    return evaluation_id


def test_the_scorecard_shows_the_base_against_the_peer_per_benchmark(ledger, tmp_path):
    peer_id = record_peer(ledger)
    text = lines(render_round(ledger, 1, tmp_path))
    heading = f"### Against the peer, torch._scaled_grouped_mm (evaluation #{peer_id})"
    at = text.index(heading)
    assert text[at + 2] == ("This round's base is 1.538x [1.515, 1.563] the peer's speed (geomean of the peer's time "
                            "over the base's, timed as a candidate is, beside the base); with the winner's measured "
                            "geomean, round 2's base would be about 1.631x (an estimate, not a measurement).")
    assert text[at + 4:at + 10] == [
        "| # | benchmark | base (us) | peer (us) | base / peer |",
        "|---:|---|---:|---:|---:|",
        "| 0 | g=8 k=7168 | 373 | 560 | 1.501x |",
        "| 1 | g=8 k=2048 | 372 | 520 | 1.398x |",
        "| 2 | g=2 k=4096 | 173 | 190 | 1.098x |",
        "| 3 | g=2 k=1536 | 156 | 410 | 2.628x |",
    ]


def test_a_peer_that_failed_its_check_is_reported_with_its_reason(ledger, tmp_path):
    failed = CORRECT.__class__("correctness", "failed", "test 2: output[0] is far from the reference", 3.0)
    record_peer(ledger, reason="torch._scaled_grouped_mm: incorrect: test 2: output[0] is far from the reference",
                stages=[failed], outcome="incorrect")
    text = lines(render_round(ledger, 1, tmp_path))
    assert ("The peer was not measured against the base: incorrect (incorrect: test 2: output[0] is far from the "
            "reference).") in text


def test_the_leaderboard_has_the_peer_columns_only_when_a_peer_was_measured(ledger, tmp_path):
    before = lines(render_leaderboard(ledger, tmp_path / "before"))
    assert not any("base / peer" in line for line in before)
    peer_id = record_peer(ledger)
    text = lines(render_leaderboard(ledger, tmp_path / "after"))
    header = next(line for line in text if line.startswith("| round |"))
    assert header.endswith("| evaluation | base / peer (measured) | after the winner / peer (est.) |")
    row1 = next(line for line in text if line.startswith("| 1 |"))
    assert row1.endswith(f"| 1.538x [1.515, 1.563] (#{peer_id}) | 1.631x |")
    row2 = next(line for line in text if line.startswith("| 2 |"))
    assert row2.endswith("| - | - |")


def test_peer_rows_are_not_candidates_nor_the_base(ledger):
    record_peer(ledger)
    view = round_view(ledger, 1)["targets"][0]
    assert [p["proposal_id"] for p in view["ranking"] if p["winner"]] == ["tma-store-epilogue"]
    assert view["base"]["evaluation"]["id"] == 1
    assert view["peer"]["base_over_peer"] == 1 / 0.65
