"""Markdown scorecards of a round and the leaderboard across rounds, read back from the ledger.

The views are plain JSON-serialisable dicts of ledger values (numbers stay numbers, exact score
decimals are strings), each carrying the row ids it came from; the templates only lay them out and
format numbers through the filters defined here, so the Markdown and `--json` always agree.
"""

from __future__ import annotations

import json
import re
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any, Optional

import jinja2

from .errors import JudgeError
from .ledger import Ledger
from .patching import patch_stats
from .records import OUTCOME_MEANING, Outcome, Vote
from .scoring import CORRECTNESS_RULE, SPEEDUP_RULE, Measurement, format_score, score_vote

MEASURED = (Outcome.FASTER.value, Outcome.SLOWER.value, Outcome.UNCHANGED.value)
GPU_STAGES = ("correctness", "timing")
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
PITCH_ONLY = "pitch only: not evaluated until a revision brings a patch"
NOT_EVALUATED = "not evaluated yet: no run of this round has reached this revision"

CONVENTIONS = [
    "change = (before - after) / before, in %: positive is faster, negative is slower.",
    "speedup = before / after: above 1.000x is faster.",
    "geomean: the geometric mean of the per-benchmark speedups (every benchmark weighs the same).",
    "95% intervals: paired bootstrap of the ratio of medians per benchmark, and of the geomean over all "
    "benchmarks; \"significant\" means the interval excludes 1.000x. An outcome is faster (slower) only when "
    "the geomean's interval lies wholly above (below) 1 and the geomean is at least 1% away from 1.000x: "
    "within one run the interval can exclude 1 for a change smaller than the drift between runs (up to 0.8% on the H100).",
    "before/after: median time in microseconds (us) of the round's base and of the candidate, each in a confined "
    "process of its own, the two taking turns on the device (order and input sets alternated, the idle one "
    "stopped), each call after an L2 flush, on fresh input sets from secret seeds; shown to 3 significant digits "
    "(whole us from 1000 us up). The deciding clock is the target's: gpu (the call queued behind a short GPU spin, "
    "so the host's launch time is excluded), call (the GPU idle at the start, events around the whole call, "
    "launch included, as GPU MODE times), or host (CPU targets). GPU targets measure both GPU clocks.",
    "trust: every timed call's output is checked against the oracle (a process that never imported contestant "
    "code); the parent's wall clock must account for the times a process reports (wall-clock excess: how much "
    "longer its commands took than the base's, beyond the reported times); a kernel much faster on inputs it has "
    "seen before than on new ones is replaying answers (replay: first-call time over later-call time, "
    "candidate/base). Screening flags are a static read of the patch for the sharks, never a verdict.",
    "speedups 3 decimals with \"x\"; changes and % of speed of light 1 decimal; halves round up; "
    "% of SoL = speed of light / after (100% is the hardware bound).",
    "compile resources: value (change against the base's kernel that serves the same benchmarks); "
    "spills are store + load bytes; CTAs/SM is CUDA's occupancy arithmetic over registers, shared memory, "
    "threads and barriers and names the resource that limits it; it does not model tensor memory (sm_100) "
    "or cluster scheduling, so on a B200 it is an upper bound.",
    "shark totals: computed by judge as the sum of weight x score, in exact decimals; a stated total that differs "
    "from it by more than half a unit of its last written digit is flagged.",
]


# formatting (the template's filters) -------------------------------------------------


def fmt_us(value: Optional[float]) -> str:
    """A time in us to 3 significant digits, halves rounded up, without exponent notation (1234.5 -> 1235)."""
    if value is None:
        return "-"
    if value == 0:
        return "0"
    exact = Decimal(repr(float(value)))
    if abs(exact) >= 1000:
        return str(exact.quantize(Decimal(1), rounding=ROUND_HALF_UP))
    rounded = exact.quantize(Decimal(1).scaleb(exact.adjusted() - 2), rounding=ROUND_HALF_UP)
    if rounded.adjusted() > exact.adjusted():  # 9.996 -> 10.00: one digit too many
        rounded = rounded.quantize(Decimal(1).scaleb(rounded.adjusted() - 2), rounding=ROUND_HALF_UP)
    return f"{rounded:f}"


def _fixed(value: float, places: int) -> str:
    """`value` with `places` decimals, halves rounded up as written (f-strings round the binary value)."""
    return f"{Decimal(repr(float(value))).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP):f}"


def fmt_x(value: Optional[float]) -> str:
    return "-" if value is None else f"{_fixed(value, 3)}x"


def fmt_ci(ci: Optional[list]) -> str:
    if not ci or ci[0] is None:
        return ""
    return f"[{_fixed(ci[0], 3)}, {_fixed(ci[1], 3)}]"


def fmt_speedup(value: Optional[float], ci: Optional[list] = None) -> str:
    """1.250x [1.244, 1.256]: the point estimate and its 95% interval."""
    if value is None:
        return "-"
    interval = fmt_ci(ci)
    return f"{fmt_x(value)} {interval}" if interval else fmt_x(value)


def fmt_pct(value: Optional[float]) -> str:
    """A signed percentage, 1 decimal: +20.0%, -30.8%."""
    if value is None:
        return "-"
    text = _fixed(value, 1)
    return f"{text}%" if text.startswith("-") else f"+{text}%"


def fmt_plain_pct(value: Optional[float]) -> str:
    return "-" if value is None else f"{_fixed(value, 1)}%"


def fmt_claim(claim: Optional[list]) -> str:
    """A claimed range as the proposer wrote it: 1.5-1.8x (a single value when low = high)."""
    if not claim:
        return "no claim"
    low, high = claim
    return f"{low:g}x" if low == high else f"{low:g}-{high:g}x"


def fmt_delta(cell: Optional[dict]) -> str:
    """A resource against the base: 168 (+40); no delta where the base has no such configuration."""
    if cell is None or cell.get("value") is None:
        return "-"
    value, base = cell["value"], cell.get("base")
    if base is None:
        return f"{value}"
    return f"{value} ({value - base:+d})"


def fmt_seconds(value: Optional[float]) -> str:
    return "-" if value is None else f"{_fixed(value, 1)} s"


def fmt_patch(stats: Optional[dict]) -> str:
    if not stats:
        return "no patch"
    hunks = stats["hunks"]
    return f"+{stats['added']}/-{stats['removed']} lines in {hunks} hunk{'' if hunks == 1 else 's'}"


def fmt_device(device: Optional[dict]) -> str:
    """One line of what a GPU was: name, SMs, architecture, clocks, driver and software versions."""
    if not device:
        return "no CUDA GPU found"
    parts = [str(device.get("name", "unknown GPU"))]
    if device.get("sm_count") is not None:
        parts.append(f"{device['sm_count']} SMs")
    if device.get("arch"):
        parts.append(f"{device['arch']} (capability {device.get('capability', '?')})")
    if device.get("memory_gb") is not None:
        parts.append(f"{device['memory_gb']} GB memory")
    if device.get("l2_mb") is not None:
        parts.append(f"{device['l2_mb']} MB L2")
    if device.get("sm_clock_mhz") is not None:
        maximum = f" (max {device['sm_clock_max_mhz']})" if device.get("sm_clock_max_mhz") is not None else ""
        parts.append(f"SM clock {device['sm_clock_mhz']} MHz{maximum}")
    if device.get("mem_clock_mhz") is not None:
        parts.append(f"memory clock {device['mem_clock_mhz']} MHz")
    if device.get("temperature_c") is not None:
        parts.append(f"{device['temperature_c']} C")
    for key, name in (("driver", "driver"), ("cuda", "CUDA"), ("torch", "torch"), ("cutedsl", "CuTe DSL")):
        if device.get(key):
            parts.append(f"{name} {device[key]}")
    return ", ".join(parts)


def fmt_cell(value: Any) -> str:
    """Text safe inside a GitHub table cell: one line, pipes escaped."""
    if value is None:
        return ""
    return " ".join(str(value).split()).replace("|", "\\|")


def fmt_line(value: Any) -> str:
    """Text on one Markdown line (log lines and error messages may hold newlines)."""
    return "" if value is None else " ".join(str(value).split())


def fmt_code(value: Any) -> str:
    """Inline code on one line; a backtick inside (Python tracebacks have them) gets a longer fence."""
    text = fmt_line(value)
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def fmt_ids(ids: list[int]) -> str:
    return ", ".join(f"#{i}" for i in ids)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("judge", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters.update(
        us=fmt_us,
        x=fmt_x,
        ci=fmt_ci,
        speedup=fmt_speedup,
        pct=fmt_pct,
        plain_pct=fmt_plain_pct,
        claim=fmt_claim,
        delta=fmt_delta,
        seconds=fmt_seconds,
        patch=fmt_patch,
        device=fmt_device,
        cell=fmt_cell,
        line=fmt_line,
        code=fmt_code,
        ids=fmt_ids,
    )
    return env


# reading the ledger ----------------------------------------------------------------------


def _change_pct(speedup: Optional[float]) -> Optional[float]:
    """(before - after) / before from before / after, in %."""
    return None if not speedup else (1 - 1 / speedup) * 100


def _claim(row: dict) -> Optional[list]:
    return [row["claim_low"], row["claim_high"]] if row["claim_low"] is not None else None


def _stats(patch: Optional[str]) -> Optional[dict]:
    if not patch:
        return None
    try:
        stats = patch_stats(patch)
    except JudgeError:
        return None
    return {"files": stats.files, "hunks": stats.hunks, "added": stats.added, "removed": stats.removed}


def _round_revisions(ledger: Ledger, target: str, round: int) -> list[dict]:
    """Each proposal's latest revision submitted for this round (later rounds' revisions are not this round's)."""
    return ledger.query(
        """
        select r.* from revisions r
        join (select proposal_id, max(revision) as revision from revisions
              where round = :round and target = :target group by proposal_id) latest
          on latest.proposal_id = r.proposal_id and latest.revision = r.revision
        order by r.proposal_id
        """,
        {"round": round, "target": target},
    )


def _latest_candidates(ledger: Ledger, round_id: int) -> list[dict]:
    """The latest candidate evaluation of each revision in a round, with its revision's fields."""
    return ledger.query(
        """
        select e.*, r.proposal_id, r.revision, r.author, r.title, r.claim_low, r.claim_high from evaluations e
        join revisions r on r.id = e.revision_id
        where e.id in (select max(id) from evaluations where round_id = ? and subject = 'candidate' group by revision_id)
        order by e.id
        """,
        (round_id,),
    )


def _clocks_and_audit(row: dict) -> dict:
    """The clock that decided a benchmark, what each clock measured, and what the audits found."""
    clocks = json.loads(row["clocks_json"]) if row.get("clocks_json") else {}
    audit = json.loads(row["audit_json"]) if row.get("audit_json") else {}
    return {
        "clock": row.get("clock"),
        "clocks": [{"name": name, **values} for name, values in sorted(clocks.items())],
        "wall_excess": audit.get("wall_excess_us", {}),
        "replay": audit.get("replay_ratio", {}),
    }


def _measurement(evaluation: Optional[dict]) -> Measurement:
    """What a shark's bound criteria see: the same reading of an evaluation as `judge vote` uses."""
    if evaluation is None or evaluation["outcome"] == Outcome.NOT_RUN.value:
        return Measurement()
    if evaluation["outcome"] in MEASURED:
        return Measurement(correct=True, geomean_speedup=evaluation["geomean_speedup"])
    return Measurement(correct=False)


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


def _resources(ledger: Ledger, evaluation_id: int, stages: list, base: dict[str, list[dict]]) -> list[dict]:
    """Each compiled kernel's resources, paired with the base's kernel that serves the same benchmarks.

    Pairing by benchmarks, not by signature: a proposal that changes a knob changes the signature, and
    its delta against the base is exactly what the report is for.
    """
    out = []
    seen: dict[str, int] = {}
    for row in ledger.kernel_resources(evaluation_id):
        key = row["benchmarks_json"]
        position = seen.get(key, 0)
        seen[key] = position + 1
        candidates = base.get(key, [])
        base_row = candidates[position] if row["ok"] and position < len(candidates) else None
        base_row = base_row if base_row and base_row["ok"] else None
        signature = json.loads(row["signature"]) if row["signature"] else None
        cells = {
            column: {"value": row[column], "base": base_row[column] if base_row else None} for column in RESOURCE_COLUMNS
        }
        out.append(
            {
                "kernel_resources_id": row["id"],
                "signature": signature,
                "label": signature_label(signature),
                "kernel": row["kernel"],
                "benchmarks": json.loads(key) if key else None,
                "ok": bool(row["ok"]),
                "error": row["error"],
                "limiter": row["limiter"],
                "base_limiter": base_row["limiter"] if base_row else None,
                "has_base": base_row is not None,
                "compile_seconds": row["compile_seconds"],
                **cells,
            }
        )
    return out


def signature_label(signature) -> str:
    """A compile signature as knobs read in the source: tuples as 128x128x256, not as ranges."""
    if not isinstance(signature, dict) or not signature:
        return "(all)"
    parts = []
    for key, value in signature.items():
        if isinstance(value, (list, tuple)):
            value = "x".join(str(v) for v in value)
        parts.append(f"{key}={value}")
    return " ".join(parts)


def _resources_by_benchmarks(ledger: Ledger, evaluation_id: int) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for row in ledger.kernel_resources(evaluation_id):
        grouped.setdefault(row["benchmarks_json"], []).append(row)
    return grouped


def _evaluation(ledger: Ledger, row: dict, base_resources: dict[str, list[dict]]) -> dict:
    """One evaluation as the report shows it: verdict, stages, benchmarks and compile resources."""
    stages = ledger.stage_results(row["id"])
    benchmarks = []
    for b in ledger.benchmark_results(row["id"]):
        sol = b["speed_of_light_us"]
        benchmarks.append(
            {
                "benchmark_result_id": b["id"],
                "index": b["benchmark"],
                "label": b["label"] or f"benchmark {b['benchmark']}",
                "before_us": b["base_median_us"],
                "after_us": b["cand_median_us"],
                "change_pct": (b["base_median_us"] - b["cand_median_us"]) / b["base_median_us"] * 100
                if b["base_median_us"]
                else None,
                "speedup": b["speedup"],
                "ci": [b["ci_low"], b["ci_high"]],
                "significant": bool(b["significant"]),
                "reps": b["reps"],
                "sol_us": sol,
                "sol_pct": sol / b["cand_median_us"] * 100 if sol and b["cand_median_us"] else None,
                **_clocks_and_audit(b),
            }
        )
    outcome = Outcome(row["outcome"])
    geomean = row["geomean_speedup"]
    screen = next((x for x in stages if x.stage == "screen"), None)
    clearance = ledger.clearance(row["id"]) if outcome == Outcome.IMPLAUSIBLE else None
    return {
        "id": row["id"],
        "run_id": row["run_id"],
        "outcome": outcome.value,
        "reason": row["reason"],
        "meaning": OUTCOME_MEANING[outcome],
        "eliminates": outcome.eliminates,
        "geomean": geomean,
        "geomean_ci": [row["geomean_ci_low"], row["geomean_ci_high"]] if row["geomean_ci_low"] is not None else None,
        "geomean_change_pct": _change_pct(geomean),
        "significant": row["geomean_ci_low"] is not None
        and (row["geomean_ci_low"] > 1.0 or row["geomean_ci_high"] < 1.0),
        "kernel_sha256": row["kernel_sha256"],
        "finished_at": row["finished_at"],
        "stages": [
            {"stage": s.stage, "status": s.status, "summary": s.summary, "seconds": s.seconds} for s in stages
        ],
        "benchmarks": benchmarks,
        "resources": _resources(ledger, row["id"], stages, base_resources),
        "flags": screen.detail.get("flags", []) if screen else [],
        "confinement": row.get("confinement"),
        "clearance": clearance,
        "held": outcome == Outcome.IMPLAUSIBLE and clearance is None,
    }


def _votes(ledger: Ledger, round: int, proposal_id: str, round_id: int) -> list[dict]:
    """Each shark's latest vote on the proposal in this round, re-scored: totals are computed, never copied."""
    latest: dict[str, dict] = {}
    for row in ledger.votes(round=round, proposal_id=proposal_id):
        known = latest.get(row["shark_name"])
        if known is None or (row["revision_id"], row["id"]) > (known["revision_id"], known["id"]):
            latest[row["shark_name"]] = row
    out = []
    for name in sorted(latest):
        row = latest[name]
        shark_row, shark = ledger.shark_by_id(row["shark_id"])
        vote = Vote.model_validate(
            {
                "shark": name,
                "proposal": proposal_id,
                "scores": json.loads(row["scores_json"]),
                "fund": bool(row["fund"]),
                "notes": row["notes"] or "",
                "stated_total": row["stated_total"],
            }
        )
        evaluation = ledger.latest_evaluation(round_id, row["revision_id"])
        card = score_vote(shark, vote, _measurement(evaluation))
        revision = ledger.revision(row["revision_id"])
        out.append(
            {
                "vote_id": row["id"],
                "shark": name,
                "shark_title": shark.title,
                "shark_version": shark_row["version"],
                "revision": revision["revision"],
                "lines": [
                    {
                        "criterion": line.criterion,
                        "weight": format_score(line.weight),
                        "score": format_score(line.score),
                        "weighted": format_score(line.weighted),
                        "source": line.source,
                    }
                    for line in card.lines
                ],
                "total": None if card.total is None else format_score(card.total),
                "stated_total": None if card.stated_total is None else str(card.stated_total),
                "flag": card.flag,
                "gated": card.gated,
                "fund": card.fund,
                "notes": vote.notes,
                "bounds": sorted({c.bound for c in shark.criteria if c.bound}),
            }
        )
    return out


def _mean_total(votes: list[dict]) -> Optional[str]:
    totals = [Decimal(v["total"]) for v in votes if v["total"] is not None]
    if not totals:
        return None
    mean = (sum(totals, Decimal(0)) / len(totals)).quantize(Decimal("0.001"), rounding=ROUND_HALF_UP)
    return format_score(mean)


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


# the round view -----------------------------------------------------------------------------


def _proposal(ledger: Ledger, revision: dict, round_row: dict, base_resources: dict[str, list[dict]]) -> dict:
    evaluation_row = ledger.latest_evaluation(round_row["id"], revision["id"])
    evaluation = _evaluation(ledger, evaluation_row, base_resources) if evaluation_row else None
    earlier = ledger.query(
        "select id, outcome from evaluations where round_id = ? and revision_id = ? and subject = 'candidate' "
        "and id < ? order by id",
        (round_row["id"], revision["id"], evaluation_row["id"] if evaluation_row else 0),
    )
    votes = _votes(ledger, round_row["round"], revision["proposal_id"], round_row["id"])
    has_patch = revision["patch"] is not None
    if evaluation is not None:
        state = "evaluated"
    else:
        state = "pitch" if not has_patch else "pending"
    return {
        "proposal_id": revision["proposal_id"],
        "revision": revision["revision"],
        "revision_id": revision["id"],
        "title": revision["title"],
        "author": revision["author"],
        "category": revision["category"],
        "confidence": revision["confidence"],
        "parent": revision["parent"],
        "claim": _claim(revision),
        "has_patch": has_patch,
        "patch_stats": _stats(revision["patch"]),
        "submitted_at": revision["submitted_at"],
        "state": state,
        "note": PITCH_ONLY if state == "pitch" else NOT_EVALUATED if state == "pending" else None,
        "evaluation": evaluation,
        "earlier_evaluations": earlier,
        "votes": votes,
        "mean_total": _mean_total(votes),
    }


def _ranking(proposals: list[dict], winner_revision_id: Optional[int]) -> list[dict]:
    """Measured proposals by geomean, faster first; then the rest by their mean computed shark total."""

    def measured(p):
        e = p["evaluation"]
        return e is not None and e["outcome"] in MEASURED and e["geomean"] is not None

    timed = sorted((p for p in proposals if measured(p)), key=lambda p: (-p["evaluation"]["geomean"], p["evaluation"]["id"]))
    rest = sorted(
        (p for p in proposals if not measured(p)),
        key=lambda p: (p["mean_total"] is None, -Decimal(p["mean_total"] or 0), p["proposal_id"]),
    )
    rows = []
    for rank, p in enumerate(timed + rest, start=1):
        e = p["evaluation"]
        rows.append(
            {
                "rank": rank,
                "proposal_id": p["proposal_id"],
                "revision": p["revision"],
                "author": p["author"],
                "measured": measured(p),
                "outcome": e["outcome"] if e else ("pitch only" if p["state"] == "pitch" else "not evaluated"),
                "geomean": e["geomean"] if e else None,
                "geomean_ci": e["geomean_ci"] if e else None,
                "mean_total": p["mean_total"],
                "votes": len(p["votes"]),
                "evaluation_id": e["id"] if e else None,
                "winner": p["revision_id"] == winner_revision_id,
            }
        )
    return rows


def _device_groups(ledger: Ledger, round_id: int) -> tuple[list[dict], bool, Optional[str]]:
    """The devices the round's evaluations ran on, whether any GPU stage ran, and why not when none did."""
    groups: dict[str, dict] = {}
    reason = None
    for e in ledger.evaluations(round_id):
        group = groups.setdefault(e["device_json"] or "", {"evaluation_ids": [], "gpu_ran": False})
        group["evaluation_ids"].append(e["id"])
        for s in ledger.stage_results(e["id"]):
            if s.stage in GPU_STAGES:
                if s.status == "not-run":
                    reason = reason or s.summary.removeprefix("not run: ")
                else:
                    group["gpu_ran"] = True
    devices = [{"device": json.loads(key) if key else None, **group} for key, group in groups.items()]
    return devices, any(d["gpu_ran"] for d in devices), reason


def _changed(ledger: Ledger, target: str, round: int) -> dict:
    """What the previous round contributed to this round's base: its winner, or nothing."""
    if round == 1:
        return {"previous_round": None, "winner": None}
    previous = ledger.round_row(target, round - 1)
    if previous is None:
        return {"previous_round": round - 1, "ran": False, "winner": None}
    winner = _winner(ledger, previous) if previous["winner_revision_id"] is not None else None
    return {"previous_round": round - 1, "ran": True, "winner": winner}


def _winner(ledger: Ledger, round_row: dict) -> dict:
    """A round's winning revision and its measured geomean, from the ledger rows that name it."""
    revision = ledger.revision(round_row["winner_revision_id"])
    evaluation = ledger.latest_evaluation(round_row["id"], revision["id"])
    return {
        "proposal_id": revision["proposal_id"],
        "revision": revision["revision"],
        "revision_id": revision["id"],
        "title": revision["title"],
        "author": revision["author"],
        "patch_stats": _stats(revision["patch"]),
        "geomean": evaluation["geomean_speedup"] if evaluation else None,
        "geomean_ci": [evaluation["geomean_ci_low"], evaluation["geomean_ci_high"]]
        if evaluation and evaluation["geomean_ci_low"] is not None
        else None,
        "evaluation_id": evaluation["id"] if evaluation else None,
    }


def _graveyard(ledger: Ledger, target: str, round: int) -> list[dict]:
    """Every proposal revision eliminated in this target's rounds so far, with its promise and what happened."""
    rows = []
    for round_row in ledger.rounds(target):
        if round_row["round"] > round:
            continue
        for e in _latest_candidates(ledger, round_row["id"]):
            outcome = Outcome(e["outcome"])
            if not outcome.eliminates:
                continue
            rows.append(
                {
                    "round": round_row["round"],
                    "proposal_id": e["proposal_id"],
                    "revision": e["revision"],
                    "author": e["author"],
                    "title": e["title"],
                    "claim": _claim(e),
                    "outcome": outcome.value,
                    "reason": e["reason"],
                    "geomean": e["geomean_speedup"],
                    "geomean_ci": [e["geomean_ci_low"], e["geomean_ci_high"]] if e["geomean_ci_low"] is not None else None,
                    "geomean_change_pct": _change_pct(e["geomean_speedup"]),
                    "evaluation_id": e["id"],
                }
            )
    return sorted(rows, key=lambda r: (r["round"], r["proposal_id"], r["evaluation_id"]))


def _claims(ledger: Ledger, target: str, round: int) -> list[dict]:
    """Per author, every proposal shown in this target's rounds so far: its claim against what was measured."""
    by_author: dict[str, list[dict]] = {}
    for round_row in ledger.rounds(target):
        if round_row["round"] > round:
            continue
        for revision in _round_revisions(ledger, target, round_row["round"]):
            e = ledger.latest_evaluation(round_row["id"], revision["id"])
            geomean = e["geomean_speedup"] if e and e["outcome"] in MEASURED else None
            claim = _claim(revision)
            if e is None:
                status = "pitch only" if revision["patch"] is None else "not evaluated"
            else:
                status = e["outcome"]
            by_author.setdefault(revision["author"], []).append(
                {
                    "round": round_row["round"],
                    "proposal_id": revision["proposal_id"],
                    "revision": revision["revision"],
                    "claim": claim,
                    "geomean": geomean,
                    "geomean_ci": [e["geomean_ci_low"], e["geomean_ci_high"]] if geomean is not None else None,
                    "status": status,
                    "landed": _landed(claim, geomean),
                    "evaluation_id": e["id"] if e else None,
                }
            )
    out = []
    for author in sorted(by_author):
        rows = by_author[author]
        counts = {k: sum(1 for r in rows if r["landed"] == k) for k in ("inside", "above", "below")}
        out.append({"author": author, "measured": sum(counts.values()), **counts, "rows": rows})
    return out


def _revision_changes(previous: Optional[dict], revision: dict) -> list[str]:
    if previous is None:
        return ["first revision"]
    changes = []
    if previous["title"] != revision["title"]:
        changes.append(f"title was \"{previous['title']}\"")
    if _claim(previous) != _claim(revision):
        changes.append(f"claim {fmt_claim(_claim(previous))} -> {fmt_claim(_claim(revision))}")
    if previous["patch"] != revision["patch"]:
        if revision["patch"] is None:
            changes.append("patch withdrawn")
        elif previous["patch"] is None:
            changes.append(f"patch added ({fmt_patch(_stats(revision['patch']))})")
        else:
            changes.append(f"patch changed (now {fmt_patch(_stats(revision['patch']))})")
    if previous["category"] != revision["category"]:
        changes.append(f"category {previous['category']} -> {revision['category']}")
    if previous["parent"] != revision["parent"]:
        changes.append(f"parent {previous['parent'] or 'none'} -> {revision['parent'] or 'none'}")
    if previous["pitch"] != revision["pitch"]:
        changes.append("pitch text")
    return changes or ["resubmitted (other fields)"]


def _lineage(ledger: Ledger, target: str, round: int) -> list[dict]:
    """Every revision of every proposal of this target up to this round, and the proposals each builds on."""
    rows = ledger.query(
        "select * from revisions where target = ? and round <= ? order by proposal_id, revision", (target, round)
    )
    out = []
    previous = None
    for revision in rows:
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


def _target_round(ledger: Ledger, round_row: dict) -> dict:
    target, round = round_row["target"], round_row["round"]
    base_row = ledger.latest_evaluation(round_row["id"], None, subject="base")
    base_resources = _resources_by_benchmarks(ledger, base_row["id"]) if base_row else {}
    base_evaluation = _evaluation(ledger, base_row, {}) if base_row else None
    if base_evaluation and all(stage["status"] == "passed" for stage in base_evaluation["stages"]):
        base_evaluation["outcome"] = "passed"  # stored as 'unchanged': the base measured against itself
    proposals = [_proposal(ledger, r, round_row, base_resources) for r in _round_revisions(ledger, target, round)]
    ranking = _ranking(proposals, round_row["winner_revision_id"])
    order = {(r["proposal_id"]): r["rank"] for r in ranking}
    proposals.sort(key=lambda p: order[p["proposal_id"]])
    winner = next((r for r in ranking if r["winner"]), None)
    if winner is None and round_row["winner_revision_id"] is not None:
        # The winner is a revision this report does not list (a later revision replaced it): name it anyway.
        winner = _winner(ledger, round_row)
    devices, gpu_ran, gpu_reason = _device_groups(ledger, round_row["id"])
    evaluations = ledger.evaluations(round_row["id"])
    bounds = {b for p in proposals for v in p["votes"] for b in v["bounds"]}
    runs = ledger.query("select id, status, host, started_at, finished_at from runs where round_id = ? order by id", (round_row["id"],))
    return {
        "target": target,
        "round": round,
        "round_id": round_row["id"],
        "next_round": round + 1,
        "base": {
            "origin": round_row["base_origin"],
            "sha256": round_row["base_sha256"],
            "sha256_short": round_row["base_sha256"][:12],
            "evaluation": base_evaluation,
        },
        "changed": _changed(ledger, target, round),
        "devices": devices,
        "gpu_ran": gpu_ran,
        "gpu_reason": gpu_reason,
        "created_at": round_row["created_at"],
        "last_finished_at": max((e["finished_at"] for e in evaluations if e["finished_at"]), default=None),
        "runs": runs,
        "conventions": CONVENTIONS,
        "speedup_rule": SPEEDUP_RULE if "speedup" in bounds else None,
        "correctness_rule": CORRECTNESS_RULE if "correctness" in bounds else None,
        "proposals": proposals,
        "ranking": ranking,
        "winner": winner,
        "graveyard": _graveyard(ledger, target, round),
        "claims": _claims(ledger, target, round),
        "lineage": _lineage(ledger, target, round),
    }


def round_view(ledger: Ledger, round: int, target: str | None = None) -> dict:
    """Everything one round's report shows, per target, as JSON-serialisable data with ledger ids."""
    rows = _target_rounds(ledger, round, target)
    return {"round": round, "targets": [_target_round(ledger, row) for row in rows]}


def render_round(ledger: Ledger, round: int, out_dir: Path, target: str | None = None) -> Path:
    """Write out_dir/round-<N>.md (round-<N>-<target>.md when the ledger has several targets)."""
    view = round_view(ledger, round, target)
    several = len({r["target"] for r in ledger.rounds()}) > 1
    name = f"round-{round}-{view['targets'][0]['target']}.md" if several and len(view["targets"]) == 1 else f"round-{round}.md"
    return _write(Path(out_dir) / name, _environment().get_template("round.md.j2").render(view=view))


# the leaderboard -------------------------------------------------------------------------------


def leaderboard_view(ledger: Ledger) -> dict:
    """Per target: each round's base and winner with the compounded speedup, and each author's record."""
    targets = []
    for target in sorted({r["target"] for r in ledger.rounds()}):
        rounds = []
        cumulative = 1.0
        records: dict[str, dict] = {}
        for round_row in ledger.rounds(target):
            winner = None
            if round_row["winner_revision_id"] is not None:
                revision = ledger.revision(round_row["winner_revision_id"])
                evaluation = ledger.latest_evaluation(round_row["id"], revision["id"])
                geomean = evaluation["geomean_speedup"] if evaluation else None
                if geomean:
                    cumulative *= geomean
                winner = {
                    "proposal_id": revision["proposal_id"],
                    "revision": revision["revision"],
                    "author": revision["author"],
                    "geomean": geomean,
                    "geomean_ci": [evaluation["geomean_ci_low"], evaluation["geomean_ci_high"]]
                    if evaluation and evaluation["geomean_ci_low"] is not None
                    else None,
                    "evaluation_id": evaluation["id"] if evaluation else None,
                }
            rounds.append(
                {
                    "round": round_row["round"],
                    "round_id": round_row["id"],
                    "base_origin": round_row["base_origin"],
                    "base_sha256_short": round_row["base_sha256"][:12],
                    "winner": winner,
                    "cumulative": cumulative,
                }
            )
            for e in _latest_candidates(ledger, round_row["id"]):
                record = records.setdefault(e["author"], {"faster": set(), "eliminated": set(), "best": None})
                if e["outcome"] == Outcome.FASTER.value:
                    record["faster"].add(e["proposal_id"])
                if Outcome(e["outcome"]).eliminates:
                    record["eliminated"].add(e["proposal_id"])
                if e["outcome"] in MEASURED and e["geomean_speedup"] is not None:
                    best = record["best"]
                    if best is None or e["geomean_speedup"] > best["geomean"]:
                        record["best"] = {
                            "geomean": e["geomean_speedup"],
                            "proposal_id": e["proposal_id"],
                            "revision": e["revision"],
                            "round": round_row["round"],
                            "evaluation_id": e["id"],
                        }
        proposals: dict[str, set] = {}
        for row in ledger.query("select distinct author, proposal_id from revisions where target = ?", (target,)):
            proposals.setdefault(row["author"], set()).add(row["proposal_id"])
        authors = []
        for author in sorted(set(proposals) | set(records)):
            record = records.get(author, {"faster": set(), "eliminated": set(), "best": None})
            authors.append(
                {
                    "author": author,
                    "proposals": len(proposals.get(author, ())),
                    "faster": len(record["faster"]),
                    "eliminated": len(record["eliminated"]),
                    "best": record["best"],
                }
            )
        targets.append({"target": target, "rounds": rounds, "authors": authors})
    return {"targets": targets}


def render_leaderboard(ledger: Ledger, out_dir: Path) -> Path:
    """Write out_dir/leaderboard.md."""
    view = leaderboard_view(ledger)
    return _write(Path(out_dir) / "leaderboard.md", _environment().get_template("leaderboard.md.j2").render(view=view))


def _write(path: Path, text: str) -> Path:
    """Write the Markdown with at most one blank line in a row (template blocks leave extra ones)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(re.sub(r"\n{3,}", "\n\n", text).rstrip("\n") + "\n")
    return path
