"""Rubric arithmetic, including the seed shark's vote whose stated totals are not all its own arithmetic."""

from decimal import Decimal
from pathlib import Path

import pytest

from judge.errors import JudgeError
from judge.proposals import load_shark, load_vote_file
from judge.records import Shark, Vote
from judge.scoring import Measurement, check_vote, format_score, score_vote, speedup_score, total_flag

ROOT = Path(__file__).resolve().parents[1]
ORACLE = load_shark(ROOT / "sharks" / "performance-oracle.toml")
REFEREE = load_shark(ROOT / "sharks" / "measured-referee.toml")

# ../shared/seeds/001_*.txt: The Performance Oracle's four score rows and the totals it stated.
SEED_ROWS = {
    "pipeline-stages-3": ((8.5, 9.5, 8, 8), 8.4),
    "tile-64-rows": ((9, 6, 6, 8.5), 7.6),
    "tma-store-epilogue": ((6.5, 7, 7, 7.5), 6.9),
    "warp-specialization": ((6, 4, 4, 7), 5.6),
}


def seed_vote(proposal):
    scores, stated = SEED_ROWS[proposal]
    names = ("expected_speedup", "feasibility", "risk", "pitch_quality")
    return Vote.model_validate({"shark": "performance-oracle", "proposal": proposal, "scores": dict(zip(names, scores)), "stated_total": stated})


def test_the_seed_rubric_has_the_seed_weights():
    assert [(c.name, c.weight) for c in ORACLE.criteria] == [
        ("expected_speedup", Decimal("0.4")),
        ("feasibility", Decimal("0.25")),
        ("risk", Decimal("0.2")),
        ("pitch_quality", Decimal("0.15")),
    ]


def test_the_seed_vote_is_recomputed_and_its_wrong_totals_flagged():
    cards = {p: score_vote(ORACLE, seed_vote(p)) for p in SEED_ROWS}
    assert {p: format_score(c.total) for p, c in cards.items()} == {
        "pipeline-stages-3": "8.575",
        "tile-64-rows": "7.575",
        "tma-store-epilogue": "6.875",
        "warp-specialization": "5.25",
    }
    assert {p: c.flag for p, c in cards.items()} == {
        "pipeline-stages-3": "stated 8.4, computed 8.575",
        "tile-64-rows": None,
        "tma-store-epilogue": None,
        "warp-specialization": "stated 5.6, computed 5.25",
    }


def test_the_shipped_vote_files_carry_the_seed_rows():
    for proposal, (scores, stated) in SEED_ROWS.items():
        [vote] = load_vote_file(ROOT / "votes" / "nvfp4_group_gemm" / "round-1" / f"oracle--{proposal}.toml")
        assert tuple(vote.scores.values()) == tuple(Decimal(str(s)) for s in scores)
        assert vote.stated_total == Decimal(str(stated))


@pytest.mark.parametrize("stated, computed, flag", [
    ("8.4", "8.45", None),
    ("8.4", "8.451", "stated 8.4, computed 8.451"),
    ("8", "8.5", None),
    ("8", "8.51", "stated 8, computed 8.51"),
    ("7.58", "7.575", None),
])
def test_a_stated_total_may_differ_by_half_a_unit_of_its_last_digit(stated, computed, flag):
    assert total_flag(Decimal(stated), Decimal(computed)) == flag


@pytest.mark.parametrize("speedup, score", [(0.25, "0.00"), (0.5, "0.00"), (1.0, "5.00"), (1.1, "5.69"), (1.5, "7.92"), (2.0, "10.00"), (3.0, "10.00")])
def test_measured_speedup_maps_monotonically_to_zero_to_ten(speedup, score):
    assert str(speedup_score(speedup)) == score


def referee_vote():
    return Vote.model_validate({"shark": "measured-referee", "proposal": "p", "scores": {"claim_honesty": 7}})


def test_bound_criteria_are_pending_until_measured():
    card = score_vote(REFEREE, referee_vote(), Measurement())
    assert [(l.criterion, l.source) for l in card.lines] == [
        ("measured_speedup", "pending"), ("correctness", "pending"), ("claim_honesty", "shark")]
    assert card.total is None and format_score(card.total) == "pending"


def test_bound_criteria_are_filled_from_measurements():
    card = score_vote(REFEREE, referee_vote(), Measurement(correct=True, geomean_speedup=1.5))
    assert [str(l.score) for l in card.lines] == ["7.92", "10", "7"]
    assert card.total == Decimal("0.5") * Decimal("7.92") + Decimal("0.2") * 10 + Decimal("0.3") * 7
    assert format_score(card.total) == "8.06"


def test_an_incorrect_kernel_gets_a_total_of_zero_from_a_correctness_gate():
    card = score_vote(REFEREE, referee_vote(), Measurement(correct=False))
    assert (card.gated, card.total) == (True, Decimal(0))


def test_a_vote_must_score_every_unbound_criterion():
    vote = Vote.model_validate({"shark": "performance-oracle", "proposal": "p", "scores": {"expected_speedup": 8}})
    with pytest.raises(JudgeError) as error:
        check_vote(ORACLE, vote, "v.toml")
    assert str(error.value) == "v.toml: field 'scores.feasibility': required by shark 'performance-oracle'"


def test_a_vote_may_not_score_an_unknown_criterion():
    vote = Vote.model_validate({"shark": "measured-referee", "proposal": "p", "scores": {"claim_honesty": 7, "vibes": 9}})
    with pytest.raises(JudgeError) as error:
        check_vote(REFEREE, vote, "v.toml")
    assert str(error.value) == (
        "v.toml: field 'scores.vibes': not a criterion of shark 'measured-referee' "
        "(criteria: claim_honesty, correctness, measured_speedup)"
    )
