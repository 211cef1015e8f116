"""Views of one evaluation and the votes on one proposal, built from ledger rows.

Plain JSON-serialisable dicts: numbers stay numbers, exact score decimals are strings, and every
piece carries the id of the row it came from.
"""

from __future__ import annotations

import json
from decimal import ROUND_HALF_UP, Decimal
from typing import Optional

from ..errors import JudgeError
from ..ledger import Ledger
from ..stages.patch import patch_stats
from ..noise import recorded_floor
from ..records import Outcome, Vote, meaning
from ..scoring import MEASURED, format_score, measurement, score_vote, standing  # noqa: F401 (scorecard, leaderboard)
from ..stages.details import StaticDetail
from .formatting import signature_label

RESOURCE_COLUMNS = (
    "registers",
    "smem_bytes",
    "spill_bytes",
    "stack_bytes",
    "threads_per_cta",
    "ctas_per_sm",
    "ptx_bytes",
    "cubin_bytes",
)


def change_pct(speedup: Optional[float]) -> Optional[float]:
    """(before - after) / before from before / after, in %."""
    return None if not speedup else (1 - 1 / speedup) * 100


def claim_of(row: dict) -> Optional[list]:
    return [row["claim_low"], row["claim_high"]] if row["claim_low"] is not None else None


def interval(row: dict) -> Optional[list]:
    """An evaluation's geomean interval, or None where nothing was timed."""
    return [row["geomean_ci_low"], row["geomean_ci_high"]] if row["geomean_ci_low"] is not None else None


def revision_head(revision: dict) -> dict:
    """What every view of a revision starts with: which proposal and revision it is, its title and author."""
    return {
        "proposal_id": revision["proposal_id"],
        "revision": revision["revision"],
        "revision_id": revision["id"],
        "title": revision["title"],
        "author": revision["author"],
    }


def winner(ledger: Ledger, round_row: dict) -> Optional[dict]:
    """A round's winning revision and its measured geomean, from the ledger rows that name it; None without one."""
    if round_row["winner_revision_id"] is None:
        return None
    revision = ledger.revision(round_row["winner_revision_id"])
    evaluation = ledger.latest_evaluation(round_row["id"], revision["id"])
    return {
        **revision_head(revision),
        "patch_stats": stats_of(revision["patch"]),
        "geomean": evaluation["geomean_speedup"] if evaluation else None,
        "geomean_ci": interval(evaluation) if evaluation else None,
        "evaluation_id": evaluation["id"] if evaluation else None,
    }


def stats_of(patch: Optional[str]) -> Optional[dict]:
    if not patch:
        return None
    try:
        stats = patch_stats(patch)
    except JudgeError:
        return None
    return {"files": stats.files, "hunks": stats.hunks, "added": stats.added, "removed": stats.removed}


# compile resources -------------------------------------------------------------------------


def by_benchmarks(rows: list[dict]) -> dict[str, list[dict]]:
    """A kernel_resources listing grouped by the benchmarks each configuration serves."""
    grouped: dict[str, list[dict]] = {}
    for row in rows:
        grouped.setdefault(row["benchmarks_json"], []).append(row)
    return grouped


def knob_changes(signature, base_signature) -> Optional[list[dict]]:
    """The knobs whose values differ from the base configuration's, or None where there is nothing to compare."""
    if not isinstance(signature, dict) or not isinstance(base_signature, dict):
        return None
    names = sorted(set(signature) | set(base_signature))
    return [
        {"knob": name, "base": base_signature.get(name), "value": signature.get(name)}
        for name in names
        if signature.get(name) != base_signature.get(name)
    ]


def resources(rows: list[dict], base: Optional[dict[str, list[dict]]]) -> list[dict]:
    """Each compiled kernel's resources, paired with the base's kernel that serves the same benchmarks.

    Pairing by benchmarks, not by signature: a proposal that changes a knob changes the signature, and
    its knobs and deltas against the base are exactly what the report is for. `base` None: this is the base.
    """
    out = []
    seen: dict[str, int] = {}
    for row in rows:
        key = row["benchmarks_json"]
        position = seen.get(key, 0)
        seen[key] = position + 1
        counterparts = (base or {}).get(key, [])
        paired = counterparts[position] if position < len(counterparts) else None
        paired = paired if paired and paired["ok"] and row["ok"] else None
        signature = json.loads(row["signature"]) if row["signature"] else None
        base_signature = json.loads(counterparts[0]["signature"]) if counterparts and counterparts[0]["signature"] else None
        out.append(
            {
                "kernel_resources_id": row["id"],
                "signature": signature,
                "label": signature_label(signature),
                "knob_changes": knob_changes(signature, base_signature) if base is not None else None,
                "kernel": row["kernel"],
                "benchmarks": json.loads(key) if key else None,
                "ok": bool(row["ok"]),
                "error": row["error"],
                "limiter": row["limiter"],
                "base_limiter": paired["limiter"] if paired else None,
                "has_base": paired is not None,
                "compile_seconds": row["compile_seconds"],
                **{c: {"value": row[c], "base": paired[c] if paired else None} for c in RESOURCE_COLUMNS},
            }
        )
    return out


def knob_table(resources_view: list[dict]) -> Optional[dict]:
    """The base's configurations as a table of knobs: one column per knob, one row per configuration."""
    configs: dict[str, dict] = {}
    for r in resources_view:
        if isinstance(r["signature"], dict):
            configs.setdefault(json.dumps([r["benchmarks"], r["signature"]]), r)
    if not configs:
        return None
    names = sorted({name for r in configs.values() for name in r["signature"]})
    rows = [{"benchmarks": r["benchmarks"], "values": [r["signature"].get(n) for n in names]} for r in configs.values()]
    return {"knobs": names, "rows": rows}


# one evaluation ----------------------------------------------------------------------------


def _clocks_and_audit(row: dict) -> dict:
    """The clock that decided a benchmark, what each clock measured, and what the audits found."""
    clocks = json.loads(row["clocks_json"]) if row.get("clocks_json") else {}
    audit = json.loads(row["audit_json"]) if row.get("audit_json") else {}
    return {
        "clock": row.get("clock"),
        "clocks": [{"name": name, **values} for name, values in sorted(clocks.items())],
        "wall_excess": audit.get("wall_excess_us", {}),
        "replay": audit.get("replay_ratio", {}),
        "inputs": _inputs(row.get("placement"), row.get("processes")),
    }


def _inputs(placement: Optional[str], processes: Optional[int]) -> Optional[str]:
    """Where a benchmark's timed inputs were and how many runner processes each kernel ran in, as one cell."""
    if not placement:
        return None
    return placement if not processes else f"{placement}; {processes} process{'es' if processes != 1 else ''} each"


def _benchmark(b: dict) -> dict:
    sol, before, after = b["speed_of_light_us"], b["base_median_us"], b["cand_median_us"]
    return {
        "benchmark_result_id": b["id"],
        "index": b["benchmark"],
        "label": b["label"] or f"benchmark {b['benchmark']}",
        "before_us": before,
        "after_us": after,
        "change_pct": (before - after) / before * 100 if before else None,
        "speedup": b["speedup"],
        "ci": [b["ci_low"], b["ci_high"]],
        "significant": bool(b["significant"]),
        "reps": b["reps"],
        "sol_us": sol,
        "sol_pct": sol / after * 100 if sol and after else None,
        **_clocks_and_audit(b),
    }


def _rule_state(result) -> str:
    if result.ran is False:  # this machine's tool could not run it: not a finding either way
        return "not run here"
    return "passed" if result.passed else "FAILED"


def static_lines(detail: StaticDetail) -> list[str]:
    """What the static stage ran, one line for the rules of each config and one for the layout checks."""
    lines = []
    configs = detail.configs
    for n, config in enumerate(configs, start=1):
        where = f" (config {n} of {len(configs)})" if len(configs) > 1 else ""
        lines.append(f"rules{where}: " + ", ".join(f"{r.rule} {_rule_state(r)}" for r in config.rules))
    checks = detail.layout_checks
    if checks:
        lines.append(f"layout checks ({detail.layout_checks_file}): "
                     + ", ".join(f"{c.name} {c.status}" for c in checks))
    return lines


def evaluation(ledger: Ledger, row: dict, base: Optional[dict[str, list[dict]]]) -> dict:
    """One evaluation as the report shows it: verdict, stages, benchmarks and compile resources
    (against `base`, the base's resources by benchmarks; None when this is the base)."""
    stages = ledger.stage_results(row["id"])
    outcome = Outcome(row["outcome"])
    geomean = row["geomean_speedup"]
    screen = next((x for x in stages if x.stage == "screen"), None)
    clearance = ledger.clearance(row["id"]) if outcome == Outcome.IMPLAUSIBLE else None
    standing = Outcome(clearance["outcome"]) if clearance else outcome
    timing = next((x for x in stages if x.stage == "timing" and x.detail.geomean is not None), None)
    floor = recorded_floor(timing.detail) if timing else None
    ci = interval(row)
    return {
        "id": row["id"],
        "run_id": row["run_id"],
        "outcome": outcome.value,
        "standing": standing.value,
        "reason": standing_reason(row, clearance),
        "meaning": meaning(standing, floor),
        "floor": floor.to_json() if floor else None,
        "eliminates": standing.eliminates,
        "geomean": geomean,
        "geomean_ci": ci,
        "geomean_change_pct": change_pct(geomean),
        "significant": ci is not None and (ci[0] > 1.0 or ci[1] < 1.0),
        "kernel_sha256": row["kernel_sha256"],
        "finished_at": row["finished_at"],
        "stages": [{"stage": s.stage, "status": s.status, "summary": s.summary, "seconds": s.seconds,
                    "lines": static_lines(s.detail) if s.stage == "static" else []} for s in stages],
        "benchmarks": [_benchmark(b) for b in ledger.benchmark_results(row["id"])],
        "resources": resources(ledger.kernel_resources(row["id"]), base),
        "flags": [f.to_json() for f in screen.detail.flags] if screen else [],
        "confinement": row.get("confinement"),
        "clearance": {**clearance, "held_because": held_because(row["reason"])} if clearance else None,
        "held": outcome == Outcome.IMPLAUSIBLE and clearance is None,
    }


def held_because(reason: str) -> str:
    """What made a result implausible, from its verdict's reason (verdicts.decide writes 'WHY (timing said ...);
    held until a person clears it')."""
    return reason.split(" (timing said ")[0]


def standing_reason(row: dict, clearance: Optional[dict]) -> str:
    """The reason of the outcome an evaluation stands at: a cleared one stands at its timing's verdict, so its
    reason is that verdict's, not the hold's."""
    if clearance is None:
        return row["reason"]
    return clearance.get("reason") or row["reason"]


# votes ---------------------------------------------------------------------------------------


def _latest_per_shark(ledger: Ledger, round: int, proposal_id: str) -> dict[str, dict]:
    """Each shark's vote on the proposal's latest revision it voted on in this round."""
    latest: dict[str, dict] = {}
    for row in ledger.votes(round=round, proposal_id=proposal_id):
        known = latest.get(row["shark_name"])
        if known is None or (row["revision_id"], row["id"]) > (known["revision_id"], known["id"]):
            latest[row["shark_name"]] = row
    return latest


def votes(ledger: Ledger, round: int, proposal_id: str, latest_by_revision: dict[int, dict]) -> list[dict]:
    """Each shark's latest vote on the proposal in this round, re-scored: totals are computed, never copied.
    `latest_by_revision`: the round's latest candidate evaluation of each revision, by revision id."""
    out = []
    for name, row in sorted(_latest_per_shark(ledger, round, proposal_id).items()):
        shark_row, shark = ledger.shark_by_id(row["shark_id"])
        vote = Vote.model_validate(
            {"shark": name, "proposal": proposal_id, "scores": json.loads(row["scores_json"]), "fund": bool(row["fund"]),
             "notes": row["notes"] or "", "stated_total": row["stated_total"]}
        )
        card = score_vote(shark, vote, measurement(latest_by_revision.get(row["revision_id"])))
        lines = [
            {"criterion": line.criterion, "weight": format_score(line.weight), "score": format_score(line.score),
             "weighted": format_score(line.weighted), "source": line.source}
            for line in card.lines
        ]
        out.append(
            {
                "vote_id": row["id"],
                "shark": name,
                "shark_title": shark.title,
                "shark_version": shark_row["version"],
                "revision": ledger.revision(row["revision_id"])["revision"],
                "lines": lines,
                "total": None if card.total is None else format_score(card.total),
                "pending_criteria": [line.criterion for line in card.lines if line.source == "pending"],
                "stated_total": None if card.stated_total is None else str(card.stated_total),
                "flag": card.flag,
                "gated": card.gated,
                "fund": card.fund,
                "notes": vote.notes,
                "bounds": sorted({c.bound for c in shark.criteria if c.bound}),
            }
        )
    return out


def vote_counts(votes_view: list[dict]) -> dict:
    """How many votes have a total judge computed, and how many wait on a measurement."""
    computed = sum(1 for v in votes_view if v["total"] is not None)
    return {"computed": computed, "pending": len(votes_view) - computed}


def mean_total(votes_view: list[dict]) -> Optional[str]:
    """The mean of the computed totals (pending votes count in no mean), to 0.001."""
    totals = [Decimal(v["total"]) for v in votes_view if v["total"] is not None]
    if not totals:
        return None
    mean = (sum(totals, Decimal(0)) / len(totals)).quantize(Decimal("0.001"), rounding=ROUND_HALF_UP)
    return format_score(mean)
