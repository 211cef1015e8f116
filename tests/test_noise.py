"""judge/noise.py: the floor a verdict clears, from the target's minimum and from A/A controls."""

import math

import pytest

from judge.noise import FLOOR_SIGMAS, SIGMA_BOUND, Floor, default_floor, floor_from
from judge.stats import chi2_low
from judge.targets import load_target
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_without_controls_the_floor_is_the_targets_minimum():
    target = load_target(ROOT / "tests" / "fixtures" / "gpumode" / "vecadd")
    floor = default_floor(target)
    assert (floor.effect, floor.source, floor.controls) == (0.01, "min_effect", 0)
    assert floor.words() == "1.0%, the target's minimum effect (no A/A control has raised it)"
    assert floor_from([], 0.01, 3) == floor
    assert floor_from([[0.01]], 0.01, 3) == floor  # one pair has no spread


def test_controls_set_the_floor_from_their_spread_and_bias():
    controls = [[0.02, -0.01, 0.005], [0.015, -0.005, 0.0]]
    floor = floor_from(controls, 0.01, 3, device="NVIDIA H100 80GB HBM3")
    spread = sum((x - sum(c) / 3) ** 2 for c in controls for x in c)
    sd = math.sqrt(spread / chi2_low(SIGMA_BOUND, 4))  # the upper end of the standard deviation's 90% range
    bias = abs(sum(sum(c) for c in controls) / 6)
    assert floor.effect == pytest.approx(round(math.expm1(bias + FLOOR_SIGMAS * sd / math.sqrt(3)), 5))
    assert (floor.source, floor.controls, floor.min_effect) == ("controls", 2, 0.01)
    assert floor.words() == (f"{floor.effect:.1%}, set by 2 A/A controls on NVIDIA H100 80GB HBM3 (an identical copy "
                             "of the base judged the same way); the target's minimum is 1.0%")


def test_quiet_controls_leave_the_minimum_and_say_how_many_there_were():
    floor = floor_from([[0.001, -0.001, 0.0]], 0.01, 3)
    assert (floor.effect, floor.source, floor.controls) == (0.01, "min_effect", 1)


def test_the_floor_is_symmetric_in_log_terms_and_survives_json():
    floor = Floor(effect=0.05, min_effect=0.01, source="controls", controls=3, device="cpu")
    assert floor.faster_at == 1.05 and floor.slower_at == pytest.approx(1 / 1.05)
    assert Floor.from_json(floor.to_json()) == floor
    assert Floor.from_json(None) is None


def test_a_floor_past_the_ceiling_turns_unchanged_into_inconclusive():
    wild = Floor(effect=207.02, min_effect=0.01, source="controls", controls=1, device="cpu")
    assert wild.too_wide
    assert [wild.bounded(o) for o in ("unchanged", "faster", "slower", "inconclusive")] == [
        "inconclusive", "faster", "slower", "inconclusive"]
    assert wild.words() == ("20702.0%, set by 1 A/A control on cpu (an identical copy of the base judged the same "
                            "way); the target's minimum is 1.0%; past the ceiling of 25%, so no verdict says unchanged")
    assert wild.ceiling_words() == ("the noise floor (20702.0%) is past judge's ceiling of 25%: identical code "
                                    "strays that far here, so no change can be called none")


@pytest.mark.parametrize("effect, min_effect, too_wide", [
    (0.25, 0.01, False),   # at the ceiling: still a floor a verdict can rest on
    (0.2501, 0.01, True),
    (0.35, 0.35, False),   # a target's own minimum above the ceiling is the organiser's choice
    (0.40, 0.35, True),    # controls that raise even that minimum
])
def test_the_ceiling_is_the_larger_of_max_floor_and_the_targets_minimum(effect, min_effect, too_wide):
    assert Floor(effect=effect, min_effect=min_effect, source="controls", controls=2).too_wide is too_wide


# ---- how many pairs a comparison takes (judge.noise.enough_pairs) ------------------------------

STRAY = [0.0, 0.0, math.log(1.35)]  # identical code: two quiet pairs and one stray pair at 1.35x


def test_one_stray_pair_of_three_sets_a_floor_that_hides_a_threefold_slowdown():
    """Why a control does not stop at three pairs: the floor those three would set is 296%, past a 3.5x slowdown
    (the dispatch test's ten-times kernel reads 0.22-0.37x on a 2-core VM), which then could not be called slower;
    each quiet pair after them narrows it, to 53% at MAX_PAIRS."""
    floor = floor_from([STRAY], 0.01, 3)
    assert floor.percent() == "295.7%" and floor.too_wide
    assert math.log(3.5) < math.log1p(floor.effect)
    quiet = [0.0, 0.01, -0.01, 0.0, 0.005]
    assert [floor_from([STRAY + quiet[:k]], 0.01, 3).percent() for k in range(1, 6)] == \
        ["137.6%", "93.3%", "73.2%", "60.9%", "52.6%"]


def test_a_wild_control_goes_on_past_its_budget_while_a_candidate_stops():
    from judge.noise import enough_pairs

    floor = Floor(effect=0.01, min_effect=0.01)
    spent = dict(elapsed=30.0, budget=10.0, limit=300.0, longest_pair=10.0)
    assert enough_pairs(STRAY, floor, **spent)  # a candidate: three pairs and its budget spent
    assert not enough_pairs(STRAY, floor, control=True, **spent)
    assert not enough_pairs(STRAY + [0.0] * 4, floor, control=True, **spent)  # 7 pairs: 61%, still past 25%
    # a quiet control stops at its budget as a candidate does; one whose floor is within the ceiling too
    assert enough_pairs([0.0, 0.01, -0.01], floor, control=True, **spent)
    assert not floor_from([[0.0, 0.03, -0.02]], 0.01, 3).too_wide
    assert enough_pairs([0.0, 0.03, -0.02], floor, control=True, **spent)


@pytest.mark.parametrize("pairs, elapsed, longest, enough", [
    (8, 30.0, 10.0, True),  # MAX_PAIRS: no more, control or not
    (3, 280.0, 10.0, True),  # the stage's limit (300 s) leaves no room for two more pairs of 10 s
    (3, 279.0, 10.0, False),
    (3, 285.0, 5.0, False),
    (2, 290.0, 10.0, False),  # never fewer than MIN_PAIRS: the stage's own deadline stops it
])
def test_a_wild_control_stops_at_the_cap_or_where_the_limit_leaves_no_room(pairs, elapsed, longest, enough):
    from judge.noise import enough_pairs

    logs = (STRAY * 3)[:pairs]
    assert enough_pairs(logs, Floor(effect=0.01, min_effect=0.01), elapsed, 10.0, True, 300.0, longest) is enough


HISTOGRAM = [math.log(g) for g in (0.99416, 0.97845, 1.01208)]  # pmpp/histogram_py's control, H200 2026-11-29


@pytest.mark.parametrize("logs, elapsed, longest, enough", [
    (HISTOGRAM, 5.5, 1.8, False),  # past its 5 s budget, three pairs of 1.5 s set 13.8%: five more cost 8 s
    (HISTOGRAM * 2 + HISTOGRAM[:2], 13.0, 1.8, True),  # MAX_PAIRS
    (HISTOGRAM, 55.0, 10.0, True),  # pairs of 10 s: a fourth would pass a tenth of the 600 s limit
    ([0.0, 0.005, -0.004], 5.5, 1.8, True),  # a floor of 3.4%, within five minima: its budget says enough
])
def test_a_control_with_a_wide_floor_goes_on_while_its_pairs_are_cheap(logs, elapsed, longest, enough):
    from judge.noise import enough_pairs

    assert [floor_from([x], 0.01, 3).percent() for x in (HISTOGRAM, [0.0, 0.005, -0.004])] == ["13.8%", "3.4%"]
    assert enough_pairs(logs, Floor(effect=0.01, min_effect=0.01), elapsed, 5.0, True, 600.0, longest) is enough


@pytest.mark.parametrize("serves, pairs, enough", [
    (2, 3, False), (2, 4, True),  # two candidates: one more pair than three (amd/identity's round took eight)
    (4, 4, False), (4, 5, True),  # four: two more
    (1, 4, True),  # one candidate: one more
    (0, 7, False),  # no round's count (judge calibrate): the cheap pairs alone bound it
    (20, 7, False), (20, 8, True),  # a large round's control goes on to MAX_PAIRS
])
def test_a_wide_floor_buys_a_control_one_more_pair_for_every_two_candidates(serves, pairs, enough):
    from judge.noise import enough_pairs

    logs = (HISTOGRAM * 3)[:pairs]  # a 13.8% floor from its first three pairs, wide after eight too
    assert floor_from([logs], 0.01, 3).effect > 0.05
    assert enough_pairs(logs, Floor(effect=0.01, min_effect=0.01), 5.5, 5.0, True, 600.0, 1.8, serves) is enough
    # a stray pair (a floor past the ceiling) is looked into whatever the round's size
    assert not enough_pairs(STRAY[:3], Floor(effect=0.01, min_effect=0.01), 30.0, 10.0, True, 300.0, 10.0, serves)


IDENTITY = [math.log(g) for g in (1.02, 0.99, 1.012, 0.995)]  # an A/A undecided against 1%, a floor of a few %


@pytest.mark.parametrize("serves, pairs, enough", [
    (3, 4, False), (3, 5, True),  # amd/identity's round of three (H200, 2026-11-30 11:14) took all eight
    (1, 4, True),
    (0, 7, False), (0, 8, True),  # judge calibrate: the budget and MAX_PAIRS alone
])
def test_an_undecided_control_within_its_budget_stops_at_the_pairs_its_candidates_buy(serves, pairs, enough):
    from judge.noise import enough_pairs
    from judge.stats import settled

    logs = (IDENTITY * 2)[:pairs]
    assert not settled(logs[:7], 0.01, 3, 8) and floor_from([logs], 0.01, 3).effect < 0.25
    assert enough_pairs(logs, Floor(effect=0.01, min_effect=0.01), 10.0, 35.0, True, 600.0, 2.6, serves) is enough
    # a candidate's comparison is bought by nothing: undecided within its budget, it goes on
    assert not enough_pairs(logs[:7], Floor(effect=0.01, min_effect=0.01), 10.0, 35.0, False, 600.0, 2.6, 3)
