"""Claims against measurements in the scorecard: each measured proposal's claimed range against its geomean,
and, where the contestant claimed ranges per benchmark, each of those against that benchmark's speedup; and each
shark's calls (fund or not, made before the measurement) against what was measured."""

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
    states: dict[str, list[str]] = {}
    for round_row, latest in history:
        for revision in ledger.revisions_of_round(target, round_row["round"]):
            e = latest.get(revision["id"])
            state = ev.standing(e) if e else ("pitch" if revision["patch"] is None else "pending")
            states.setdefault(revision["author"], []).append(f"{revision['proposal_id']} r{revision['revision']}: {state}")
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
    unmeasured = [{"author": a, "proposals": states[a]} for a in sorted(set(states) - set(measured))]
    return {"authors": tables, "unmeasured_authors": unmeasured,
            "sharks": _sharks(ledger, target, history)}


def _call(fund: Optional[bool], outcome: str) -> str:
    """A fund call is right when a funded proposal stood faster or an unfunded one did not."""
    if fund is None:
        return "no call"
    return "right" if fund == (outcome == "faster") else "wrong"


def _sharks(ledger: Ledger, target: str, history: list[tuple[dict, dict[int, dict]]]) -> list[dict]:
    """Per shark, over the rounds so far: each latest vote on a measured revision, its fund call and the outcome."""
    rows: dict[str, list[dict]] = {}
    for round_row, latest in history:
        revisions = {r["id"]: r for r in ledger.revisions_of_round(target, round_row["round"])}
        for vote in ledger.votes(round=round_row["round"]):
            e = latest.get(vote["revision_id"])
            if vote["revision_id"] not in revisions or e is None or ev.standing(e) not in ev.MEASURED \
                    or e["geomean_speedup"] is None:
                continue
            fund = None if vote["fund"] is None else bool(vote["fund"])
            rows.setdefault(vote["shark_name"], []).append({
                "round": round_row["round"], "proposal_id": vote["proposal_id"],
                "revision": revisions[vote["revision_id"]]["revision"], "fund": fund, "outcome": ev.standing(e),
                "geomean": e["geomean_speedup"], "evaluation_id": e["id"], "call": _call(fund, ev.standing(e))})
    out = []
    for shark in sorted(rows):
        calls = rows[shark]
        funded = [r for r in calls if r["fund"] is True]
        passed = [r for r in calls if r["fund"] is False]
        out.append({"shark": shark, "measured": len(calls), "right": sum(r["call"] == "right" for r in calls),
                    "funded": len(funded), "funded_faster": sum(r["outcome"] == "faster" for r in funded),
                    "passed": len(passed), "passed_not_faster": sum(r["outcome"] != "faster" for r in passed),
                    "rows": calls})
    return out


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
