"""Claims against measurements in the scorecard: each measured proposal's claimed range against its geomean,
and, where the contestant claimed ranges per benchmark, each of those against that benchmark's speedup."""

from __future__ import annotations

import json
from typing import Optional

from ..ledger import Ledger
from . import evaluations as ev


def _landed(claim: Optional[list], geomean: Optional[float]) -> str:
    if claim is None:
        return "no claim"
    if geomean is None:
        return "not measured"
    if geomean < claim[0]:
        return "below"
    if geomean > claim[1]:
        return "above"
    return "inside"


def claims_view(ledger: Ledger, target: str, history: list[tuple[dict, dict[int, dict]]]) -> dict:
    """Per author, each measured proposal's claim against its measured geomean; and who has nothing measured."""
    measured: dict[str, list[dict]] = {}
    authors: set[str] = set()
    for round_row, latest in history:
        for revision in ledger.revisions_of_round(target, round_row["round"]):
            authors.add(revision["author"])
            e = latest.get(revision["id"])
            if e is None or ev.standing(e) not in ev.MEASURED or e["geomean_speedup"] is None:
                continue
            claim = ev.claim_of(revision)
            measured.setdefault(revision["author"], []).append(
                {
                    "round": round_row["round"],
                    "proposal_id": revision["proposal_id"],
                    "revision": revision["revision"],
                    "claim": claim,
                    "geomean": e["geomean_speedup"],
                    "geomean_ci": ev.interval(e),
                    "status": ev.standing(e),
                    "landed": _landed(claim, e["geomean_speedup"]),
                    "evaluation_id": e["id"],
                    "per_benchmark": _per_benchmark(ledger, revision, e),
                }
            )
    tables = []
    for author in sorted(measured):
        rows = measured[author]
        counts = {k: sum(1 for r in rows if r["landed"] == k) for k in ("inside", "above", "below")}
        tables.append({"author": author, "measured": len(rows), **counts, "rows": rows})
    return {"authors": tables, "unmeasured_authors": sorted(authors - set(measured))}


def _per_benchmark(ledger: Ledger, revision: dict, evaluation: dict) -> list[dict]:
    """Each benchmark the contestant claimed a range for: the range, the measured speedup, where it landed."""
    claim = json.loads(revision["claim_json"]) if revision.get("claim_json") else {}
    ranges = {int(k): v for k, v in (claim.get("per_benchmark") or {}).items()}
    if not ranges:
        return []
    measured = {b["benchmark"]: b for b in ledger.benchmark_results(evaluation["id"])}
    out = []
    for index in sorted(ranges):
        bench = measured.get(index)
        speedup = bench["speedup"] if bench else None
        out.append({"index": index, "label": bench["label"] if bench else None, "claim": list(ranges[index]),
                    "speedup": speedup, "landed": _landed(list(ranges[index]), speedup)})
    return out
