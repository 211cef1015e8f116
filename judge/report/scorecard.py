"""The view of one round's scorecard, per target: what happened to each proposal, built from ledger rows.

Only what the rows say: a ranking of what was measured, verdict lines that state what ran, devices
from the evaluations that recorded one.
"""

from __future__ import annotations

import json
from typing import Optional

from ..errors import JudgeError
from ..ledger import Ledger
from ..noise import next_floor, recorded_floor
from ..records import Outcome
from ..schedule import clear_command
from ..stages.result import not_run_reason
from ..stats import median
from . import evaluations as ev
from .conventions import conventions
from .claims import claims_view
from .control import control_view, round_floor
from .peer import peer_view
from .profile import profile_view
from .formatting import fmt_claim, fmt_patch

GPU_STAGES = ("correctness", "timing")
# One name per state, in the ledger's views, the CLI and the reports alike: "pitch" (no patch) and "pending"
# (a patch no run has timed yet); the notes say what each means.
PITCH_ONLY = "pitch: no patch, nothing to evaluate until a revision brings one"
NOT_EVALUATED = "pending: no run of this round has reached this revision yet"


def _rounds_listing(rounds: list[dict]) -> str:
    numbers = sorted({r["round"] for r in rounds})
    return ", ".join(str(n) for n in numbers) if numbers else "none"


def _target_rounds(ledger: Ledger, round: int, target: Optional[str]) -> list[dict]:
    """The rounds rows a report covers, or a one-line error naming what the ledger does have."""
    if target is not None:
        rows = ledger.rounds(target)
        if not rows:
            targets = sorted({r["target"] for r in ledger.rounds()})
            raise JudgeError(
                f"target '{target}' has no rounds in the ledger (targets with rounds: {', '.join(targets) or 'none'})"
            )
        chosen = [r for r in rows if r["round"] == round]
        if not chosen:
            raise JudgeError(f"round {round} has not run for target '{target}' (its rounds in the ledger: {_rounds_listing(rows)})")
        return chosen
    rows = ledger.rounds()
    chosen = [r for r in rows if r["round"] == round]
    if not chosen:
        raise JudgeError(f"round {round} has not run (rounds in the ledger: {_rounds_listing(rows)})")
    return chosen


# proposals and the ranking ---------------------------------------------------------------


def _state(revision: dict, evaluation: Optional[dict], closed: bool) -> str:
    """measured (stands faster), held (implausible, and a person may still clear it), pending (a patch not yet
    timed), pitch (no patch) or eliminated."""
    if evaluation is None:
        return "pending" if revision["patch"] is not None else "pitch"
    if evaluation["held"] and not closed:
        return "held"
    if evaluation["standing"] == Outcome.NOT_RUN.value:
        return "pending"
    return "eliminated" if evaluation["eliminates"] else "measured"


def _proposal(ledger: Ledger, revision: dict, round_row: dict, context: dict) -> dict:
    row = context["latest"].get(revision["id"])
    evaluation = ev.evaluation(ledger, row, context["base_resources"]) if row else None
    votes = ev.votes(ledger, round_row["round"], revision["proposal_id"], context["latest"])
    state = _state(revision, evaluation, context["closed"])
    return {
        **ev.revision_head(revision),
        "category": revision["category"],
        "confidence": revision["confidence"],
        "parent": revision["parent"],
        "claim": ev.claim_of(revision),
        "risks": json.loads(revision["risks_json"] or "[]"),
        "references": json.loads(revision["references_json"] or "[]"),
        "pitch": revision["pitch"],
        "has_patch": revision["patch"] is not None,
        "patch_stats": ev.stats_of(revision["patch"]),
        "submitted_at": revision["submitted_at"],
        "state": state,
        "note": PITCH_ONLY if state == "pitch" else NOT_EVALUATED if evaluation is None else None,
        "evaluation": evaluation,
        "earlier_evaluations": context["superseded"].get(revision["id"], []),
        "votes": votes,
        "vote_counts": ev.vote_counts(votes),
        "mean_total": ev.mean_total(votes),
    }


def _outcome_shown(p: dict) -> str:
    e = p["evaluation"]
    if e is None:
        return p["state"]  # pitch or pending
    if p["state"] == "held":
        return "implausible (held)"
    return f"{e['clearance']['outcome']} (cleared {e['outcome']})" if e["clearance"] else e["outcome"]


def _ranking(proposals: list[dict], winner_revision_id: Optional[int]) -> list[dict]:
    """Proposals that stand faster, ranked by geomean; then held, pending ones and pitches, unranked, by name.
    Eliminated proposals are not ranked: they are in the graveyard."""
    measured = sorted((p for p in proposals if p["state"] == "measured"),
                      key=lambda p: (-p["evaluation"]["geomean"], p["evaluation"]["id"]))
    unranked = [p for state in ("held", "pending", "pitch") for p in proposals if p["state"] == state]
    rows = []
    for position, p in enumerate(measured + unranked, start=1):
        e = p["evaluation"]
        rows.append(
            {
                "rank": position if p["state"] == "measured" else None,
                "proposal_id": p["proposal_id"],
                "revision": p["revision"],
                "author": p["author"],
                "state": p["state"],
                "outcome": _outcome_shown(p),
                "geomean": e["geomean"] if e else None,
                "geomean_ci": e["geomean_ci"] if e else None,
                "mean_total": p["mean_total"],
                "votes": p["vote_counts"],
                "evaluation_id": e["id"] if e else None,
                "winner": p["revision_id"] == winner_revision_id,
            }
        )
    return rows


def _verdict(proposals: list[dict], ranking: list[dict], gpu_reason: Optional[str], next_round: Optional[dict]) -> dict:
    """Why there is no winner, in words that say what ran: nothing timed is not 'none faster', and a result held as
    implausible is neither. `proposals`: the round's proposal views."""
    evaluations = [p["evaluation"] for p in proposals if p["evaluation"]]
    timed = sum(1 for e in evaluations if e["geomean"] is not None)
    held = [{"proposal_id": p["proposal_id"], "revision": p["revision"], "evaluation_id": p["evaluation"]["id"],
             "command": clear_command(p["evaluation"]["id"])}
            for p in proposals if p["evaluation"] and p["evaluation"]["held"]]
    if held:
        names = ", ".join(f"{h['proposal_id']} r{h['revision']} (evaluation #{h['evaluation_id']})" for h in held)
        why = f"{names} {'is' if len(held) == 1 else 'are'} held as implausible"
    elif timed:
        why = "no proposal was significantly faster than the base"
    elif gpu_reason:
        why = f"nothing was timed in this round ({gpu_reason})"
    elif not evaluations:
        why = "nothing was timed in this round (no proposal was evaluated)"
    else:
        why = "nothing was timed in this round (no proposal reached the timing stage)"
    return {
        "timed": timed,
        "held": held,
        "why_none": why,
        "pending": [r for r in ranking if r["state"] == "pending"],
        "next_round_started": next_round is not None,
    }


def _times(proposals: list[dict]) -> Optional[dict]:
    """Per benchmark, the base's median time, each measured proposal's and the speed of light (the times chart).
    The base's time: the median of its medians timed beside each measured proposal. None: nothing measured."""
    timed = [p for p in proposals if p["evaluation"] and p["evaluation"]["benchmarks"]]
    measured = [p for p in timed if (p["evaluation"]["clearance"] or p["evaluation"])["outcome"] in ev.MEASURED]
    measured.sort(key=lambda p: (-(p["evaluation"]["geomean"] or 0), p["evaluation"]["id"]))
    if not measured:
        return None
    benchmarks: dict[int, dict] = {}
    for p in measured:
        for b in p["evaluation"]["benchmarks"]:
            row = benchmarks.setdefault(b["index"], {"index": b["index"], "label": b["label"], "sol_us": b["sol_us"], "base_us": []})
            row["base_us"].append(b["before_us"])
    rows = [{**row, "base_us": median(row["base_us"])} for _, row in sorted(benchmarks.items())]
    times = [{b["index"]: b["after_us"] for b in p["evaluation"]["benchmarks"]} for p in measured]
    return {"benchmarks": rows, "proposals": [
        {"proposal_id": p["proposal_id"], "revision": p["revision"], "evaluation_id": p["evaluation"]["id"],
         "geomean": p["evaluation"]["geomean"], "after_us": [after.get(r["index"]) for r in rows]}
        for p, after in zip(measured, times)]}


# the header: base, devices, what changed ---------------------------------------------------


def _device_groups(ledger: Ledger, round_id: int) -> dict:
    """Devices from the evaluations that recorded one; which recorded none; whether a GPU stage ran, and why not
    (the latest evaluation's reason: a round run again elsewhere is not described by its first machine)."""
    groups: dict[str, dict] = {}
    unrecorded: list[int] = []
    gpu_ran, reason = False, None
    for e in ledger.evaluations(round_id):
        group = groups.setdefault(e["device_json"], {"evaluation_ids": [], "gpu_ran": False}) if e["device_json"] else None
        if group is not None:
            group["evaluation_ids"].append(e["id"])
        else:
            unrecorded.append(e["id"])
        for s in ledger.stage_results(e["id"]):
            if s.stage not in GPU_STAGES:
                continue
            if s.status == "not-run":
                reason = not_run_reason(s.summary)
            else:
                gpu_ran = True
                if group is not None:
                    group["gpu_ran"] = True
    devices = [{"device": json.loads(key), **group} for key, group in groups.items()]
    return {"devices": devices, "unrecorded_ids": unrecorded, "gpu_ran": gpu_ran, "gpu_reason": reason}


def _changed(ledger: Ledger, target: str, round: int) -> dict:
    """What the previous round contributed to this round's base: its winner, or nothing."""
    if round == 1:
        return {"previous_round": None, "winner": None}
    previous = ledger.round_row(target, round - 1)
    if previous is None:
        return {"previous_round": round - 1, "ran": False, "winner": None}
    winner = ev.winner(ledger, previous)
    return {"previous_round": round - 1, "ran": True, "winner": winner}


def _base(ledger: Ledger, round_row: dict) -> tuple[dict, dict]:
    """The round's base and its evaluation; and the base's resources by benchmarks, for the deltas."""
    row = ledger.latest_evaluation(round_row["id"], None, subject="base")
    evaluation = ev.evaluation(ledger, row, None) if row else None
    if evaluation and all(stage["status"] == "passed" for stage in evaluation["stages"]):
        evaluation["outcome"] = "passed"  # stored as 'unchanged': the base measured against itself
    if evaluation:
        evaluation["knobs"] = ev.knob_table(evaluation["resources"])
    base = {
        "origin": round_row["base_origin"],
        "sha256": round_row["base_sha256"],
        "sha256_short": round_row["base_sha256"][:12],
        "evaluation": evaluation,
    }
    return base, ev.by_benchmarks(ledger.kernel_resources(row["id"])) if row else {}


# history: graveyard, claims, lineage ------------------------------------------------------


def _history(ledger: Ledger, target: str, round: int) -> list[tuple[dict, dict[int, dict]]]:
    """This target's rounds up to `round`, each with its latest candidate evaluation per revision."""
    return [
        (r, {e["revision_id"]: e for e in ledger.latest_candidate_evaluations(r["id"])})
        for r in ledger.rounds(target)
        if r["round"] <= round
    ]


def _graveyard(history: list[tuple[dict, dict[int, dict]]], open_round: Optional[int]) -> list[dict]:
    """Every proposal revision eliminated in this target's rounds so far, with its promise and what happened; a
    result held as implausible is not, until its round closes (`open_round`: this round, if the next has not
    started)."""
    rows = []
    for round_row, latest in history:
        for e in latest.values():
            if not Outcome(ev.standing(e)).eliminates:
                continue
            if round_row["round"] == open_round and ev.standing(e) == Outcome.IMPLAUSIBLE.value:
                continue
            rows.append(
                {
                    "round": round_row["round"],
                    "proposal_id": e["proposal_id"],
                    "revision": e["revision"],
                    "author": e["author"],
                    "title": e["title"],
                    "claim": ev.claim_of(e),
                    "outcome": ev.standing(e),
                    "reason": e["reason"],
                    "geomean": e["geomean_speedup"],
                    "geomean_ci": ev.interval(e),
                    "geomean_change_pct": ev.change_pct(e["geomean_speedup"]),
                    "evaluation_id": e["id"],
                }
            )
    return sorted(rows, key=lambda r: (r["round"], r["proposal_id"], r["evaluation_id"]))


def _revision_changes(previous: Optional[dict], revision: dict) -> list[str]:
    if previous is None:
        return ["first revision"]
    changes = []
    if previous["title"] != revision["title"]:
        changes.append(f"title was \"{previous['title']}\"")
    if ev.claim_of(previous) != ev.claim_of(revision):
        changes.append(f"claim {fmt_claim(ev.claim_of(previous))} -> {fmt_claim(ev.claim_of(revision))}")
    if previous["patch"] != revision["patch"]:
        if revision["patch"] is None:
            changes.append("patch withdrawn")
        elif previous["patch"] is None:
            changes.append(f"patch added ({fmt_patch(ev.stats_of(revision['patch']))})")
        else:
            changes.append(f"patch changed (now {fmt_patch(ev.stats_of(revision['patch']))})")
    if previous["category"] != revision["category"]:
        changes.append(f"category {previous['category']} -> {revision['category']}")
    if previous["parent"] != revision["parent"]:
        changes.append(f"parent {previous['parent'] or 'none'} -> {revision['parent'] or 'none'}")
    if previous["pitch"] != revision["pitch"]:
        changes.append("pitch text")
    return changes or ["resubmitted (other fields)"]


def _lineage(ledger: Ledger, target: str, round: int) -> list[dict]:
    """Every revision of every proposal of this target up to this round, and the proposals each builds on."""
    out = []
    previous = None
    for revision in ledger.revisions_up_to_round(target, round):
        if previous is not None and previous["proposal_id"] != revision["proposal_id"]:
            previous = None
        out.append(
            {
                "proposal_id": revision["proposal_id"],
                "revision": revision["revision"],
                "revision_id": revision["id"],
                "round": revision["round"],
                "submitted_at": revision["submitted_at"],
                "changes": _revision_changes(previous, revision),
                "parent": revision["parent"] if revision["parent"] != revision["proposal_id"] else None,
            }
        )
        previous = revision
    return out


# the round ---------------------------------------------------------------------------------


def _proposals(ledger: Ledger, round_row: dict, base_resources: dict) -> tuple[list[dict], list[dict]]:
    """The round's proposals, by name (the ranking table gives their order), and the ranking."""
    latest_rows = ledger.latest_candidate_evaluations(round_row["id"])
    superseded: dict[int, list[dict]] = {}
    for row in ledger.superseded_candidate_evaluations(round_row["id"]):
        superseded.setdefault(row["revision_id"], []).append({"id": row["id"], "outcome": row["outcome"]})
    context = {"latest": {e["revision_id"]: e for e in latest_rows}, "superseded": superseded,
               "base_resources": base_resources,
               "closed": ledger.round_row(round_row["target"], round_row["round"] + 1) is not None}
    revisions = ledger.revisions_of_round(round_row["target"], round_row["round"])
    proposals = [_proposal(ledger, r, round_row, context) for r in revisions]
    return proposals, _ranking(proposals, round_row["winner_revision_id"])


def _target_round(ledger: Ledger, round_row: dict) -> dict:
    target, round = round_row["target"], round_row["round"]
    base, base_resources = _base(ledger, round_row)
    proposals, ranking = _proposals(ledger, round_row, base_resources)
    winner = next((r for r in ranking if r["winner"]), None)
    if winner is None and round_row["winner_revision_id"] is not None:
        # The winner is a revision this report does not list (a later revision replaced it): name it anyway.
        winner = ev.winner(ledger, round_row)
    devices = _device_groups(ledger, round_row["id"])
    evaluations = ledger.evaluations(round_row["id"])
    history = _history(ledger, target, round)
    next_round = ledger.round_row(target, round + 1)
    return {
        "target": target,
        "round": round,
        "round_id": round_row["id"],
        "next_round": round + 1,
        "base": base,
        "changed": _changed(ledger, target, round),
        **devices,
        "created_at": round_row["created_at"],
        "last_finished_at": max((e["finished_at"] for e in evaluations if e["finished_at"]), default=None),
        "runs": ledger.runs_of_round(round_row["id"]),
        "proposals": proposals,
        "ranking": ranking,
        "times": _times(proposals),
        "winner": winner,
        "verdict": _verdict(proposals, ranking, devices["gpu_reason"], next_round),
        "closed": next_round is not None,
        "floors": (floors := _floors(ledger, history)),
        "next_floor": _next_floor(ledger, target, floors),
        "peer": peer_view(ledger, round_row, winner["geomean"] if winner else None),
        "profile": profile_view(ledger, target, round_row["base_source"]),
        "control": control_view(ledger, round_row, round_floor(ledger, round_row["id"])),
        "graveyard": _graveyard(history, None if next_round else round),
        "claims": claims_view(ledger, target, history),
        "lineage": _lineage(ledger, target, round),
    }


def _floors(ledger: Ledger, history: list[tuple[dict, dict[int, dict]]]) -> list[dict]:
    """The noise floors the timed verdicts of this target's rounds so far used, as their timing details record
    them (judge.noise), each once."""
    floors: dict[str, dict] = {}
    for _, latest in history:
        for e in latest.values():
            if e["geomean_speedup"] is None:
                continue
            timing = next((s for s in ledger.stage_results(e["id"]) if s.stage == "timing"), None)
            if timing is not None:
                floor = recorded_floor(timing.detail)
                floors.setdefault(floor.words(), floor.view())
    return list(floors.values())


def _next_floor(ledger: Ledger, target: str, floors: list[dict]) -> dict | None:
    """The floor the target's next verdict will use (judge.noise.next_floor), above the minimum its verdicts
    recorded; None where none has recorded one."""
    if not floors:
        return None
    floor = next_floor(ledger, target, floors[-1]["min_effect"])
    return floor.view()


def _shown(targets: list[dict]) -> dict:
    """What the report holds, for the conventions that apply to it."""
    evaluations = [p["evaluation"] for t in targets for p in t["proposals"] if p["evaluation"]]
    evaluations += [t["base"]["evaluation"] for t in targets if t["base"]["evaluation"]]
    votes = [v for t in targets for p in t["proposals"] for v in p["votes"]]
    geomeans = [e["geomean"] for e in evaluations]
    geomeans += [g["geomean"] for t in targets for g in t["graveyard"]]
    geomeans += [t["changed"]["winner"]["geomean"] for t in targets if t["changed"]["winner"]]
    return {
        "speedups": any(g is not None for g in geomeans),
        "timing": any(e["benchmarks"] for e in evaluations),
        "floors": {t["target"]: t["floors"] for t in targets},
        "next_floors": {t["target"]: t["next_floor"] for t in targets if t["next_floor"]},
        "clocks": {b["clock"] for e in evaluations for b in e["benchmarks"] if b["clock"]},
        "resources": any(e["resources"] for e in evaluations),
        "votes": bool(votes),
        "bounds": sorted({b for v in votes for b in v["bounds"]}),
    }


def round_view(ledger: Ledger, round: int, target: str | None = None) -> dict:
    """Everything one round's report shows, per target, as JSON-serialisable data with ledger ids;
    the conventions once for all its targets."""
    targets = [_target_round(ledger, row) for row in _target_rounds(ledger, round, target)]
    return {"round": round, "targets": targets, "conventions": conventions(_shown(targets))}
