"""The view of the leaderboard across rounds: per target, each round's base and winner, the standings (each
contestant's best measured speedup over round 1's base, per device) and each author's record."""

from __future__ import annotations

import json
from typing import Optional

from ..ledger import Ledger
from ..records import Outcome
from ..stats import median
from . import evaluations as ev
from .peer import peer_view


def _no_winner(latest: list[dict]) -> dict:
    """Why a round has no winner: nothing was timed, or nothing timed was faster; and how many are pending."""
    timed = any(e["geomean_speedup"] is not None for e in latest)
    pending = sum(1 for e in latest if ev.standing(e) == Outcome.NOT_RUN.value)
    held = sum(1 for e in latest if ev.standing(e) == Outcome.IMPLAUSIBLE.value)
    return {"why": "none faster" if timed else "nothing timed", "pending": pending, "held": held}


def _base_times(ledger: Ledger, latest: list[dict]) -> Optional[list[dict]]:
    """The round's base time per benchmark (the leaderboard's chart): the median of its medians timed beside each
    measured proposal, as the round's times chart has it. None where nothing was measured."""
    benchmarks: dict[int, dict] = {}
    for e in latest:
        if ev.standing(e) not in ev.MEASURED:
            continue
        for b in ledger.benchmark_results(e["id"]):
            row = benchmarks.setdefault(b["benchmark"], {"index": b["benchmark"], "label": b["label"] or f"benchmark {b['benchmark']}",
                                                         "sol_us": b["speed_of_light_us"], "us": []})
            row["us"].append(b["base_median_us"])
    return [{**row, "us": median(row["us"])} for _, row in sorted(benchmarks.items())] or None


def _record(records: dict, e: dict, round: int) -> None:
    """Add one latest candidate evaluation to its author's record."""
    record = records.setdefault(e["author"], {"faster": set(), "eliminated": set(), "best": None})
    outcome = ev.standing(e)
    if outcome == Outcome.FASTER.value:
        record["faster"].add(e["proposal_id"])
    if Outcome(outcome).eliminates:
        record["eliminated"].add(e["proposal_id"])
    if outcome in ev.MEASURED and e["geomean_speedup"] is not None:
        best = record["best"]
        if best is None or e["geomean_speedup"] > best["geomean"]:
            record["best"] = {"geomean": e["geomean_speedup"], "proposal_id": e["proposal_id"], "revision": e["revision"],
                              "round": round, "evaluation_id": e["id"]}


def _stand(standings: dict, e: dict, round: int, base_speedup: float) -> None:
    """One latest candidate evaluation against its author's best on its device: its geomean over its own round's
    base, times that base's speedup over round 1's (the earlier winners compounded)."""
    if ev.standing(e) not in ev.MEASURED or e["geomean_speedup"] is None:
        return
    from ..noise import device_name

    device = device_name(json.loads(e["device_json"]) if e["device_json"] else None)
    over_original = e["geomean_speedup"] * base_speedup
    best = standings.get((e["author"], device))
    if best is None or over_original > best["over_original"]:
        standings[(e["author"], device)] = {
            "author": e["author"], "device": device, "over_original": over_original, "geomean": e["geomean_speedup"],
            "base_speedup": base_speedup, "proposal_id": e["proposal_id"], "revision": e["revision"], "round": round,
            "evaluation_id": e["id"]}


def _standings(standings: dict) -> list[dict]:
    """Per device, each contestant's best, fastest first (ties: by name)."""
    rows = sorted(standings.values(), key=lambda s: (s["device"], -s["over_original"], s["author"]))
    for device in {r["device"] for r in rows}:
        for place, row in enumerate((r for r in rows if r["device"] == device), start=1):
            row["place"] = place
    return rows


def _authors(ledger: Ledger, target: str, records: dict) -> list[dict]:
    proposals: dict[str, set] = {}
    for row in ledger.proposal_authors(target):
        proposals.setdefault(row["author"], set()).add(row["proposal_id"])
    authors = []
    for author in sorted(set(proposals) | set(records)):
        record = records.get(author, {"faster": set(), "eliminated": set(), "best": None})
        authors.append({"author": author, "proposals": len(proposals.get(author, ())), "faster": len(record["faster"]),
                        "eliminated": len(record["eliminated"]), "best": record["best"]})
    return authors


def _target(ledger: Ledger, target: str) -> dict:
    rounds = []
    cumulative: Optional[float] = None
    records: dict[str, dict] = {}
    standings: dict[tuple[str, str], dict] = {}
    for round_row in ledger.rounds(target):
        latest = ledger.latest_candidate_evaluations(round_row["id"])
        winner = ev.winner(ledger, round_row)
        base_speedup = cumulative or 1.0  # this round's base over round 1's: the earlier winners compounded
        if winner and winner["geomean"]:
            cumulative = (cumulative or 1.0) * winner["geomean"]
        rounds.append(
            {
                "round": round_row["round"],
                "round_id": round_row["id"],
                "base_origin": round_row["base_origin"],
                "base_sha256_short": round_row["base_sha256"][:12],
                "winner": winner,
                "no_winner": None if winner else _no_winner(latest),
                "cumulative": cumulative,
                "base_speedup": base_speedup,
                "base_times": _base_times(ledger, latest),
                "peer": peer_view(ledger, round_row, winner["geomean"] if winner else None),
            }
        )
        for e in latest:
            _record(records, e, round_row["round"])
            _stand(standings, e, round_row["round"], base_speedup)
    peer = next((r["peer"]["name"] for r in rounds if r["peer"]), None)
    return {"target": target, "rounds": rounds, "standings": _standings(standings),
            "authors": _authors(ledger, target, records), "peer": peer}


def leaderboard_view(ledger: Ledger) -> dict:
    """Per target: each round's base and winner with the compounded speedup, and each author's record."""
    return {"targets": [_target(ledger, target) for target in sorted({r["target"] for r in ledger.rounds()})]}
