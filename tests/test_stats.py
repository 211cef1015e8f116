"""judge/stats.py on fixed and synthetic samples: exact medians, honest intervals, the stopping rule."""

import math

import numpy as np
import pytest

from judge import stats
from judge.stats import geomean, geomean_ci, median, precise_enough, ratio_ci, significant


def test_median_exact():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert median([10.0]) == 10.0
    with pytest.raises(ValueError):
        median([])


def test_geomean_exact():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0, rel=1e-15)
    assert geomean([1.0, 1.0, 1.0]) == 1.0


def test_ratio_of_fixed_samples():
    ratio, low, high = ratio_ci([10.0, 11.0, 12.0], [5.0, 5.5, 6.0])
    assert ratio == 2.0
    assert low == pytest.approx(2.0) and high == pytest.approx(2.0)  # every pair has ratio exactly 2


def test_interval_is_seeded():
    rng = np.random.default_rng(1)
    base, cand = rng.lognormal(3, 0.1, 200), rng.lognormal(3, 0.1, 200)
    assert ratio_ci(base, cand) == ratio_ci(base, cand)
    assert ratio_ci(base, cand, seed=1) != ratio_ci(base, cand, seed=2)


def _synthetic(true_ratio, n, rng, jitter=0.03, outliers=0.05):
    """Interleaved pairs sharing a slow drift, with log-normal jitter and occasional 60% spikes."""
    drift = 1 + 0.02 * np.sin(np.arange(n) / 50)
    cand = 30.0 * drift * rng.lognormal(0, jitter, n)
    base = true_ratio * 30.0 * drift * rng.lognormal(0, jitter, n)
    for series in (base, cand):
        spikes = rng.random(n) < outliers
        series[spikes] *= 1.6
    return base, cand


@pytest.mark.parametrize("true_ratio", [1.0, 1.02, 0.9])
def test_interval_contains_the_true_ratio(true_ratio):
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(40):
        base, cand = _synthetic(true_ratio, 400, rng)
        _, low, high = ratio_ci(base, cand, resamples=500)
        hits += low <= true_ratio <= high
    assert hits >= 34  # a 95% interval; 34 of 40 leaves room for chance, not for a biased estimator


def test_interval_narrows_with_more_samples():
    rng = np.random.default_rng(3)
    small = ratio_ci(*_synthetic(1.05, 50, rng))
    large = ratio_ci(*_synthetic(1.05, 2000, rng))
    assert (large[2] - large[1]) < (small[2] - small[1]) / 3


def test_geomean_ci_contains_truth_and_the_point():
    rng = np.random.default_rng(11)
    pairs = [_synthetic(r, 300, rng) for r in (1.1, 1.0, 0.95, 1.2)]
    point, low, high = geomean_ci(pairs)
    truth = geomean([1.1, 1.0, 0.95, 1.2])
    assert low <= point <= high
    assert low <= truth <= high
    assert point == pytest.approx(geomean([median(b) / median(c) for b, c in pairs]), rel=1e-12)


def test_stopping_rule():
    assert precise_enough(1.0, 0.995, 1.005)
    assert precise_enough(2.0, 1.99, 2.01)
    assert not precise_enough(1.0, 0.985, 1.005)  # low side wider than 1%
    assert not precise_enough(1.0, 0.995, 1.011)  # high side wider than 1%
    assert not precise_enough(1.0, 0.99, 1.0)  # exactly 1% is not under it
    assert precise_enough(1.0, 0.97, 1.03, half_width=0.05)


def test_significant():
    assert significant(1.01, 1.05)
    assert significant(0.9, 0.99)
    assert not significant(0.99, 1.01)
    assert not significant(1.0, 1.02)


def test_block_length():
    from judge.stats import block_length

    assert [block_length(n) for n in (1, 8, 27, 1000, 8000)] == [1, 2, 3, 10, 20]


def test_correlated_noise_widens_the_interval():
    """Noise that persists over neighbouring rounds (a slow host) carries less evidence than its count."""
    rng = np.random.default_rng(5)
    n = 2000
    slow = np.repeat(rng.lognormal(0, 0.03, n // 50), 50)  # hits the candidate only, in runs of 50 rounds
    base = 30.0 * rng.lognormal(0, 0.01, n)
    cand = 30.0 * rng.lognormal(0, 0.01, n) * slow
    _, low, high = ratio_ci(base, cand)
    shuffled = rng.permutation(n)
    _, low_iid, high_iid = ratio_ci(base[shuffled], cand[shuffled])
    assert (high - low) > 1.5 * (high_iid - low_iid)


def test_bootstrap_row_medians_are_numpys_bit_for_bit():
    rng = np.random.default_rng(3)
    for n in (1, 2, 3, 150, 200, 201):
        rows = 24 + rng.standard_normal((50, n))
        assert np.array_equal(stats._row_medians(rows), np.median(rows, axis=1))


# ---- process pairs --------------------------------------------------------------------------------------------

import math as _math
import random as _random

from judge.noise import floor_from


def test_t_quantiles_match_the_tables():
    assert stats.t_quantile(0.975, 1) == pytest.approx(12.7062, abs=1e-4)
    assert stats.t_quantile(0.975, 2) == pytest.approx(4.3027, abs=1e-4)
    assert stats.t_quantile(0.975, 7) == pytest.approx(2.3646, abs=1e-4)
    assert stats.t_quantile(0.995, 3) == pytest.approx(5.8409, abs=1e-4)
    assert stats.t_quantile(0.975, 1000) == pytest.approx(1.9623, abs=1e-4)


def test_t_interval_of_three_pairs():
    mean, low, high = stats.t_interval([0.01, 0.012, 0.008])
    assert mean == pytest.approx(0.01)
    assert (low, high) == (pytest.approx(0.005031724576), pytest.approx(0.014968275424))
    with pytest.raises(ValueError, match="at least two pairs"):
        stats.t_interval([0.01])


def test_a_decision_needs_both_the_interval_and_the_floor():
    faster = stats.decide([0.02, 0.021, 0.019], 0.01)
    assert faster.outcome == "faster" and faster.pairs == 3
    assert faster.point == pytest.approx(_math.exp(0.02))
    # significant, the point under the floor and the interval reaching past it: undecided while pairs can be
    # added, unchanged once none will be
    small = stats.decide([0.009, 0.0095, 0.0085], 0.01)
    assert small.outcome == "undecided" and small.low > 1
    assert stats.final(small, 0.01) == "unchanged"
    assert stats.decide([0.001, -0.002, 0.0005], 0.01).outcome == "unchanged"
    wide = stats.decide([0.05, -0.04, 0.01], 0.01)
    assert wide.outcome == "undecided" and stats.final(wide, 0.01) == "inconclusive"
    assert stats.decide([-0.03, -0.031, -0.029], 0.01).outcome == "slower"


def test_pairs_are_added_until_settled_or_the_cap():
    draws = iter([0.05, -0.04, 0.01, 0.02, -0.03, 0.04, -0.02, 0.03, 99.0])
    outcome, decision = stats.sequential(lambda: next(draws), 0.01, 3, 8)
    assert decision.pairs == 8 and outcome == "inconclusive"
    draws = iter([0.001, -0.001, 0.0005, 99.0])
    assert stats.sequential(lambda: next(draws), 0.01, 3, 8)[1].pairs == 3


def _simulated_pair(rng, true_log, process_sd, order=0.0015, repetition_sd=0.001, bias=0.0):
    """One process pair's log ratio of medians: the true change, each process's own offset (base and candidate),
    who went first, and what is left of the repetitions' noise in a median."""
    return (true_log + bias + rng.gauss(0, process_sd) - rng.gauss(0, process_sd) + rng.choice([order, -order])
            + rng.gauss(0, repetition_sd))


@pytest.mark.parametrize("process_sd, bias", [(0.002, 0.0), (0.004, 0.0), (0.004, 0.003), (0.02, 0.0)])
def test_identical_kernels_never_get_a_verdict(process_sd, bias):
    """1,000 simulated comparisons of identical kernels, with per-process offsets, order effects and a bias the
    controls also saw: no faster, no slower."""
    rng = _random.Random(20261125)
    controls = [[_simulated_pair(rng, 0.0, process_sd, bias=bias) for _ in range(3)] for _ in range(5)]
    floor = floor_from(controls, 0.01, 3).effect
    outcomes = [stats.sequential(lambda: _simulated_pair(rng, 0.0, process_sd, bias=bias), floor, 3, 8)[0]
                for _ in range(1000)]
    assert outcomes.count("faster") == outcomes.count("slower") == 0


@pytest.mark.parametrize("change", [0.02, 0.05])
def test_real_slowdowns_are_found_where_the_noise_allows(change):
    rng = _random.Random(7)
    controls = [[_simulated_pair(rng, 0.0, 0.003) for _ in range(3)] for _ in range(5)]
    floor = floor_from(controls, 0.01, 3).effect
    assert floor < change
    outcomes = [stats.sequential(lambda: _simulated_pair(rng, -_math.log1p(change), 0.003), floor, 3, 8)[0]
                for _ in range(300)]
    assert outcomes.count("slower") >= 290


def test_the_median_is_pinned_by_ranks_so_wild_calls_do_not_widen_it():
    from judge.stats import median_half_width

    # twenty values: the 95% interval runs from the 6th to the 15th smallest
    assert median_half_width(list(range(1, 21))) == pytest.approx((15 - 6) / (2 * 10.5))
    assert median_half_width([100.0] * 15 + [1e6] * 5) == 0.0  # five wild calls of twenty on one side: none counts
    assert median_half_width([100.0] * 14 + [1e6] * 6) > 1  # a sixth one does
    assert median_half_width([1.0] * 7) == math.inf  # too few for an interval that leaves out both extremes
    assert median_half_width([0.0] * 20) == math.inf
