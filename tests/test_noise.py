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
