"""The statistics of timing: medians, paired bootstrap intervals of a median ratio, geometric means.

Single repetitions of a GPU kernel jump by tens of percent (clock changes, other work on the host) while
medians of batches agree to a fraction of a percent, so every estimate here is built on medians, and the
intervals come from resampling blocks of interleaved (base, candidate) pairs together, so that drift that
moves both members of a pair cancels and noise correlated over neighbouring rounds is not mistaken for
independent evidence. Everything is seeded: the same samples give the same interval.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Sequence

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 20261123
# Bootstrap replicates are computed this many at a time so that long runs never need a huge index array.
_CHUNK_ELEMENTS = 4_000_000


def median(values: Sequence[float]) -> float:
    """The middle value; the mean of the two middle values for an even count."""
    if len(values) == 0:
        raise ValueError("median of no values")
    return float(np.median(np.asarray(values, dtype=float)))


def block_length(n: int) -> int:
    """Rounds per bootstrap block: about n^(1/3), so that noise correlated over neighbouring rounds (host
    state, clocks) widens the interval instead of being taken for independent evidence."""
    return max(1, min(n, round(n ** (1 / 3))))


def _block_resamples(n: int, resamples: int, rng: np.random.Generator):
    """Index arrays of moving-block bootstrap resamples of n consecutive samples, a chunk of rows at a time so
    that long runs never need a huge index array."""
    length = block_length(n)
    blocks = -(-n // length)
    offsets = np.arange(length)
    step = max(1, _CHUNK_ELEMENTS // (blocks * length))
    for start in range(0, resamples, step):
        count = min(step, resamples - start)
        starts = rng.integers(0, n - length + 1, size=(count, blocks))
        yield start, (starts[:, :, None] + offsets).reshape(count, -1)[:, :n]


def _row_medians(rows: np.ndarray) -> np.ndarray:
    """np.median(rows, axis=1), bit for bit, by sorting: 2-5x faster for the short rows of a bootstrap (the
    timing stage's summary spent 0.3 s per candidate in np.median)."""
    n = rows.shape[1]
    ordered = np.sort(rows, axis=1)
    middle = n // 2
    return ordered[:, middle] if n % 2 else (ordered[:, middle - 1] + ordered[:, middle]) / 2


def ratio_replicates(base: Sequence[float], cand: Sequence[float], *, resamples: int = RESAMPLES,
                     rng: np.random.Generator) -> np.ndarray:
    """Bootstrap replicates of median(base) / median(cand): moving blocks of consecutive pairs
    (base[i], cand[i]) are resampled together, so drift common to a pair cancels."""
    b = np.asarray(base, dtype=float)
    c = np.asarray(cand, dtype=float)
    if b.shape != c.shape or b.ndim != 1 or len(b) == 0:
        raise ValueError(f"paired samples need equal, non-zero lengths, got {b.shape} and {c.shape}")
    out = np.empty(resamples)
    for start, idx in _block_resamples(len(b), resamples, rng):
        out[start:start + len(idx)] = _row_medians(b[idx]) / _row_medians(c[idx])
    return out


def ratio_ci(base: Sequence[float], cand: Sequence[float], *, confidence: float = CONFIDENCE,
             resamples: int = RESAMPLES, seed: int = SEED) -> tuple[float, float, float]:
    """(median(base)/median(cand), low, high): the speedup and its paired percentile-bootstrap interval."""
    ratio = median(base) / median(cand)
    reps = ratio_replicates(base, cand, resamples=resamples, rng=np.random.default_rng(seed))
    low, high = _percentiles(reps, confidence)
    return ratio, low, high


def median_ci(values: Sequence[float], *, confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
              seed: int = SEED) -> tuple[float, float, float]:
    """(median, low, high): the median of a series and its moving-block bootstrap interval."""
    v = np.asarray(values, dtype=float)
    if v.ndim != 1 or len(v) == 0:
        raise ValueError("median of no values")
    reps = np.empty(resamples)
    for start, idx in _block_resamples(len(v), resamples, np.random.default_rng(seed)):
        reps[start:start + len(idx)] = _row_medians(v[idx])
    low, high = _percentiles(reps, confidence)
    return float(np.median(v)), low, high


def median_half_width(values: Sequence[float], confidence: float = CONFIDENCE) -> float:
    """Half the width of a distribution-free interval of the median, relative to the median: its ends are the
    order statistics a binomial (normal approximation) puts around the middle rank, so a few wild samples on either
    side move it no more than any others. How well a series pins its median; infinity for a median that is not
    positive or a series too short for the interval to leave out its extremes."""
    ordered = sorted(values)
    n = len(ordered)
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    low = math.floor((n - z * math.sqrt(n)) / 2)
    high = math.ceil((n + z * math.sqrt(n)) / 2) - 1
    middle = median(ordered) if n else 0.0
    if low < 1 or high > n - 2 or not middle > 0:
        return math.inf
    return (ordered[high] - ordered[low]) / (2 * middle)


def geomean(values: Sequence[float]) -> float:
    """The geometric mean of positive values."""
    if len(values) == 0:
        raise ValueError("geometric mean of no values")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def geomean_ci(pairs: Sequence[tuple[Sequence[float], Sequence[float]]], *, confidence: float = CONFIDENCE,
               resamples: int = RESAMPLES, seed: int = SEED) -> tuple[float, float, float]:
    """(geomean of per-benchmark speedups, low, high), each benchmark resampled on its own, the logs averaged."""
    if len(pairs) == 0:
        raise ValueError("geometric mean of no benchmarks")
    rng = np.random.default_rng(seed)
    point = geomean([median(b) / median(c) for b, c in pairs])
    logs = np.zeros(resamples)
    for base, cand in pairs:
        logs += np.log(ratio_replicates(base, cand, resamples=resamples, rng=rng))
    low, high = _percentiles(np.exp(logs / len(pairs)), confidence)
    return point, low, high


def precise_enough(ratio: float, low: float, high: float, half_width: float = 0.01) -> bool:
    """The stopping rule: True once the interval lies within ±half_width of the ratio (both sides)."""
    return high / ratio - 1 < half_width and 1 - low / ratio < half_width


def significant(low: float, high: float) -> bool:
    """An interval that excludes 1.0: the two kernels differ."""
    return low > 1.0 or high < 1.0


def rank_sum_p(higher: Sequence[float], lower: Sequence[float]) -> float:
    """One-sided p-value that the values of `higher` tend to exceed those of `lower`: the Mann-Whitney U test,
    normal approximation with tie and continuity corrections. 1.0 when either side is empty or every value ties.
    Rank-based, so one wild sample (a host hiccup of 20x) weighs no more than any other."""
    n1, n2 = len(higher), len(lower)
    if not n1 or not n2:
        return 1.0
    values = np.concatenate([np.asarray(higher, dtype=float), np.asarray(lower, dtype=float)])
    _, where, counts = np.unique(values, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2)[where]  # tied values share their mean rank
    ties = float((counts.astype(float) ** 3 - counts).sum())
    u = float(ranks[:n1].sum()) - n1 * (n1 + 1) / 2
    n = n1 + n2
    variance = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if variance <= 0:
        return 1.0
    z = (u - n1 * n2 / 2 - 0.5) / math.sqrt(variance)
    return 0.5 * math.erfc(z / math.sqrt(2))


def _percentiles(replicates: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(replicates, [tail, 100 - tail])
    return float(low), float(high)


# ---- the process pair as the unit ---------------------------------------------------------------------------
#
# A process is one sample of everything that differs between processes (where its buffers and code landed, its
# host thread's core, its allocator's state): an identical kernel measured 0.1-0.3 us per call apart in two
# processes on an H100, and GPU MODE's matmul_py at 128^3 had base processes with medians of 11.06 and 13.47 us.
# Repetitions inside a process cannot see that, so the interval is built over process pairs (one base process,
# one candidate process, taking turns): each pair gives one log ratio of medians per benchmark, and the
# interval is Student's t over the pairs. A bootstrap over three to eight pairs has too few distinct resamples
# (ten for three pairs) and understates the spread; t is exact for normal offsets and wider where pairs disagree.


def pair_log_ratio(base: Sequence[float], cand: Sequence[float]) -> float:
    """log(median(base) / median(cand)) of one process pair's repetitions on one benchmark."""
    return math.log(median(base) / median(cand))


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, dof: int) -> float:
    """The p-quantile of Student's t with `dof` degrees of freedom (p in (0.5, 1)), by bisection on its CDF."""
    if dof < 1:
        raise ValueError("Student's t needs at least one degree of freedom")
    low, high = 0.0, 1.0
    while _t_cdf(high, dof) < p:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        if _t_cdf(mid, dof) < p:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def _t_cdf(t: float, dof: int) -> float:
    """P(T <= t) for t >= 0, through the regularized incomplete beta function."""
    x = dof / (dof + t * t)
    return 1.0 - 0.5 * _betainc(dof / 2, 0.5, x)


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (modified Lentz)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _betainc(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 400):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * f


def chi2_low(p: float, dof: int) -> float:
    """The p-quantile (p < 0.5) of the chi-square distribution with `dof` degrees of freedom, by Wilson and
    Hilferty's cube-root approximation (within a few percent from two degrees of freedom on)."""
    z = -math.sqrt(2) * _erfcinv(2 * p)
    return dof * max(0.0, 1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3


def _erfcinv(y: float) -> float:
    """The inverse of math.erfc, by bisection (0 < y < 2)."""
    low, high = -10.0, 10.0
    for _ in range(200):
        mid = (low + high) / 2
        if math.erfc(mid) > y:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(mean, low, high): Student's t interval of the mean of `values` (at least two)."""
    n = len(values)
    if n < 2:
        raise ValueError("an interval over pairs needs at least two pairs")
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def geomean_logs(per_pair: Sequence[Sequence[float]]) -> list[float]:
    """Each pair's geomean log ratio: the mean over benchmarks of its log ratios (one row per pair)."""
    return [sum(row) / len(row) for row in per_pair]


@dataclass(frozen=True)
class Decision:
    """Where a comparison stands after some pairs: `outcome` is faster, slower, unchanged or undecided; point
    and interval are speedups (before / after)."""

    outcome: str
    point: float
    low: float
    high: float
    pairs: int


def decide(logs: Sequence[float], floor: float, confidence: float = CONFIDENCE) -> Decision:
    """The verdict the pairs' geomean log ratios support against a noise floor (a fraction, 0.01 is 1%):
    faster (slower) when the interval lies above (below) 1 and the point clears the floor; unchanged when the
    whole interval lies within the floor; undecided otherwise (more pairs may settle it)."""
    mean, low, high = t_interval(logs, confidence)
    edge = math.log1p(floor)
    point, lo, hi = math.exp(mean), math.exp(low), math.exp(high)
    if low > 0 and mean >= edge:
        outcome = "faster"
    elif high < 0 and mean <= -edge:
        outcome = "slower"
    elif low >= -edge and high <= edge:
        outcome = "unchanged"
    else:
        outcome = "undecided"
    return Decision(outcome, point, lo, hi, len(logs))


def final(decision: Decision, floor: float) -> str:
    """The outcome when no more pairs will run: an undecided comparison is unchanged where its interval excludes
    1 but its point is within the floor (a real change, too small to count), else inconclusive."""
    if decision.outcome != "undecided":
        return decision.outcome
    edge = math.log1p(floor)
    significant = decision.low > 1.0 or decision.high < 1.0
    if significant and abs(math.log(decision.point)) < edge:
        return "unchanged"
    return "inconclusive"


def settled(logs: Sequence[float], floor: float, min_pairs: int, max_pairs: int) -> bool:
    """Whether no more pairs are needed: at least `min_pairs` and a decision, or `max_pairs` reached."""
    if len(logs) >= max_pairs:
        return True
    return len(logs) >= min_pairs and decide(logs, floor).outcome != "undecided"


def sequential(draw, floor: float, min_pairs: int, max_pairs: int) -> tuple[str, Decision]:
    """Pairs drawn one at a time (`draw()` gives a pair's geomean log ratio) until `settled`; the final outcome
    and the decision it rests on. The timing stage runs the same rule with real process pairs."""
    logs = [draw() for _ in range(min_pairs)]
    while not settled(logs, floor, min_pairs, max_pairs):
        logs.append(draw())
    decision = decide(logs, floor)
    return final(decision, floor), decision
