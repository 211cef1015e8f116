"""The view of a round's peer evaluation: how the round's base stands against the target's existing implementation.

The peer is timed as a candidate against the base, so its evaluation's speedup is peer over base; reports show
the inverse, base over peer (above 1: the base is faster), with the interval inverted with it."""

from __future__ import annotations

from typing import Optional

from ..ledger import Ledger


def _inverse(value: Optional[float]) -> Optional[float]:
    return 1.0 / value if value else None


def peer_view(ledger: Ledger, round_row: dict, winner_geomean: Optional[float]) -> Optional[dict]:
    """The round's latest peer evaluation: base/peer overall and per benchmark, and the next base's estimate
    after the winner (`winner_geomean` over this base); None where no peer evaluation was recorded."""
    row = ledger.peer_evaluation(round_row["id"])
    if row is None:
        return None
    name, _, reason = (row["reason"] or "").partition(": ")
    low, high = row["geomean_ci_low"], row["geomean_ci_high"]
    benchmarks = [
        {
            "index": b["benchmark"],
            "label": b["label"] or f"benchmark {b['benchmark']}",
            "base_us": b["base_median_us"],
            "peer_us": b["cand_median_us"],
            "base_over_peer": b["cand_median_us"] / b["base_median_us"] if b["base_median_us"] else None,
        }
        for b in ledger.benchmark_results(row["id"])
    ]
    base_over_peer = _inverse(row["geomean_speedup"])
    return {
        "name": name,
        "evaluation_id": row["id"],
        "outcome": row["outcome"],
        "reason": reason,
        "base_over_peer": base_over_peer,
        "ci": [_inverse(high), _inverse(low)] if low is not None and high is not None else None,
        "benchmarks": benchmarks,
        # an estimate, not a measurement: base/peer times the winner's geomean over the base
        "after_winner": base_over_peer * winner_geomean if base_over_peer and winner_geomean else None,
    }
