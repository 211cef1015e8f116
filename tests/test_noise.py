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
