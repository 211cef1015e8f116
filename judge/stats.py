"""The statistics of timing: medians, paired bootstrap intervals of a median ratio, geometric means.

Single repetitions of a GPU kernel jump by tens of percent (clock changes, other work on the host) while
medians of batches agree to a fraction of a percent, so every estimate here is built on medians, and the
intervals come from resampling blocks of interleaved (base, candidate) pairs together, so that drift that
moves both members of a pair cancels and noise correlated over neighbouring rounds is not mistaken for
independent evidence. Everything is seeded: the same samples give the same interval.
"""

from __future__ import annotations

import math
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
