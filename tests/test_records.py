"""Validation of proposals, sharks and votes: one line naming the source, the field and the reason."""

from decimal import Decimal

import pytest

from judge.errors import JudgeError
from judge.records import Outcome, Proposal, Shark, Vote, parse

PROPOSAL = {"id": "pipeline-stages-3", "title": "Three stages", "author": "contestant-1", "round": 1, "target": "axpy"}


def test_a_valid_proposal_keeps_its_fields():
    p = parse(Proposal, {**PROPOSAL, "claim": {"low": 1.5, "high": 1.8}, "parent": ""}, "p.toml")
    assert (p.id, p.round, p.claim.low, p.claim.high, p.parent, p.has_patch) == ("pipeline-stages-3", 1, 1.5, 1.8, None, False)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"id": "Pipeline Stages"}, "p.toml: field 'id': must be a slug: lowercase letters, digits and hyphens, starting with a letter or digit"),
        ({"round": 0}, "p.toml: field 'round': Input should be greater than or equal to 1"),
        ({"category": "magic"}, "p.toml: field 'category': must be one of pipeline, tiling, epilogue, scheduling, cluster, memory, other"),
        ({"claim": {"low": 2.0, "high": 1.5}}, "p.toml: field 'claim': low (2.0) is above high (1.5)"),
        ({"confidence": 1.5}, "p.toml: field 'confidence': Input should be less than or equal to 1"),
        ({"colour": "red"}, "p.toml: field 'colour': unknown field"),
    ],
)
def test_bad_proposal_fields_are_named(change, message):
    with pytest.raises(JudgeError) as error:
        parse(Proposal, {**PROPOSAL, **change}, "p.toml")
    assert str(error.value) == message


def test_a_missing_field_is_named():
    data = dict(PROPOSAL)
    del data["author"]
    with pytest.raises(JudgeError) as error:
        parse(Proposal, data, "p.toml")
    assert str(error.value) == "p.toml: field 'author': required field is missing"


def test_several_errors_are_counted_on_the_same_line():
    with pytest.raises(JudgeError) as error:
        parse(Proposal, {"id": "x"}, "p.toml")
    assert str(error.value) == "p.toml: field 'title': required field is missing (and 3 more)"


def test_shark_weights_must_sum_to_exactly_one():
    criteria = [{"name": "a", "weight": 0.4}, {"name": "b", "weight": 0.25}, {"name": "c", "weight": 0.2}, {"name": "d", "weight": 0.1}]
    with pytest.raises(JudgeError) as error:
        parse(Shark, {"name": "oracle", "criteria": criteria}, "s.toml")
    assert str(error.value) == "s.toml: field '(record)': criteria weights sum to 0.95, not 1"


def test_shark_weights_are_exact_decimals():
    criteria = [{"name": "a", "weight": 0.4}, {"name": "b", "weight": 0.25}, {"name": "c", "weight": 0.2}, {"name": "d", "weight": 0.15}]
    shark = parse(Shark, {"name": "oracle", "criteria": criteria}, "s.toml")
    assert [c.weight for c in shark.criteria] == [Decimal("0.4"), Decimal("0.25"), Decimal("0.2"), Decimal("0.15")]


def test_vote_scores_must_be_within_zero_to_ten():
    with pytest.raises(JudgeError) as error:
        parse(Vote, {"shark": "oracle", "proposal": "p", "scores": {"risk": 11}}, "v.toml")
    assert str(error.value) == "v.toml: field 'scores': score for 'risk' is 11, outside 0-10"


def test_only_faster_and_not_run_keep_a_proposal_in_the_contest():
    assert [o.value for o in Outcome if not o.eliminates] == ["faster", "not-run"]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"claim": {"low": 1.5, "high": float("inf")}}, "p.toml: field 'claim.high': Input should be a finite number"),
        ({"claim": {"low": float("nan"), "high": 1.8}}, "p.toml: field 'claim.low': Input should be a finite number"),
        ({"claim": {"low": 1, "high": 2, "per_benchmark": {"0": [1, float("inf")]}}},
         "p.toml: field 'claim.per_benchmark.0.1': Input should be a finite number"),
        ({"confidence": float("nan")}, "p.toml: field 'confidence': Input should be a finite number"),
    ],
)
def test_numbers_that_are_not_finite_are_refused(change, message):
    """An Infinity claim would be stored, and every JSON judge prints about it would then be invalid."""
    with pytest.raises(JudgeError) as error:
        parse(Proposal, {**PROPOSAL, **change}, "p.toml")
    assert str(error.value) == message


def test_a_score_that_is_not_finite_is_refused():
    with pytest.raises(JudgeError) as error:
        parse(Vote, {"shark": "oracle", "proposal": "p", "scores": {"risk": float("nan")}}, "v.toml")
    assert str(error.value) == "v.toml: field 'scores.risk': Input should be a finite number"
