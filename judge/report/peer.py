"""The view of a round's peer evaluation: how the round's base stands against the target's existing implementation.

The peer is timed as a candidate against the base, so its evaluation's speedup is peer over base; reports show
the inverse, base over peer (above 1: the base is faster), with the interval inverted with it."""

from __future__ import annotations

from typing import Optional

from ..ledger import Ledger

SUBJECT = "peer"


def _inverse(value: Optional[float]) -> Optional[float]:
    return 1.0 / value if value else None


def peer_view(ledger: Ledger, round_row: dict) -> Optional[dict]:
    """The round's latest peer evaluation: base/peer overall and per benchmark; None where none was recorded."""
    row = ledger.latest_evaluation(round_row["id"], None, subject=SUBJECT)
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
    return {
        "name": name,
        "evaluation_id": row["id"],
        "outcome": row["outcome"],
        "reason": reason,
        "base_over_peer": _inverse(row["geomean_speedup"]),
        "ci": [_inverse(high), _inverse(low)] if low is not None and high is not None else None,
        "benchmarks": benchmarks,
    }


def after_winner(peer: Optional[dict], winner_geomean: Optional[float]) -> Optional[float]:
    """The next base against the peer, estimated: base/peer times the winner's geomean over the base."""
    if not peer or peer["base_over_peer"] is None or winner_geomean is None:
        return None
    return peer["base_over_peer"] * winner_geomean
