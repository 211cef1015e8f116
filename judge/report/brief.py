"""The brief for a round: what a contestant needs to write a good proposal against its base.

The scorecard says what happened; the brief says where things stand now: the base kernel (where it came
from, its sha256, its knobs), its time per benchmark and how far that is from the speed of light, where a
call's time goes inside it (its profile, judge.report.profile), what it asks of an SM and what limits its
occupancy, what was tried and how it ended, what is still open, and the rules a proposal is judged by. Markdown for people, the same view as JSON for agents.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from ..ledger import Ledger, sha256
from ..noise import Floor, round_floor, target_minimum
from ..records import Outcome, meaning
from .profile import profile_view
from .rendering import write_template
from ..schedule import base_for, clear_command
from ..scoring import standing_reason
from ..targets import Target

PATCH_RULES = [
    "a unified diff (`diff -u`, `git diff`) of the kernel file only, against this round's base, LF line endings",
    "a pitch (`pitch.md`) with every proposal; a proposal without a patch is a pitch the sharks score",
    "a claim is the range of the geomean speedup you expect, before / after, over the benchmarks; "
    "per-benchmark ranges are optional and are compared with the measurement",
    "size limits: pitch 1 MiB, patch 4 MiB (JUDGE_MAX_PITCH_BYTES, JUDGE_MAX_PATCH_BYTES)",
]


def brief_view(ledger: Ledger, target: Target, round: int) -> dict[str, Any]:
    """Everything the brief shows for `round` of `target`, from the ledger and the target's files."""
    source, origin = base_for(ledger, target, round)
    rows = [r for r in ledger.rounds(target.name) if r["round"] < round]
    started = ledger.round_row(target.name, round) is not None
    previous = rows[-1] if rows else None
    measured = _base_measurement(ledger, previous, target) if previous else None
    return {
        "target": target.name,
        "round": round,
        "base": {"origin": origin, "kernel_file": target.kernel_file, "sha256": sha256(source),
                 "lines": len(source.splitlines()),
                 "command": f"judge base --target {target.name} --round {round} --out {target.kernel_file}"},
        "started": started,
        "benchmarks": _benchmarks(target, measured),
        "timed": any(b is not None for b in (measured or {}).get("times", {}).values()),
        "timed_on": measured["device"] if measured else None,
        "profile": profile_view(ledger, target.name, source),
        "resources": measured["resources"] if measured else [],
        "knobs": measured["knobs"] if measured else None,
        "held": _held(ledger, previous) if previous and previous["round"] == round - 1 and not started else [],
        "tried": _tried(ledger, target, round),
        "open": _open(ledger, target, round),
        "rules": _rules(target, _floor(ledger, target, round)),
    }


def _floor(ledger: Ledger, target: Target, round: int) -> Floor:
    """The floor this round's verdicts use: recorded, once the round has judged; else the one its next verdict
    will use as the target's controls so far set it (judge.noise.round_floor)."""
    row = ledger.round_row(target.name, round)
    return round_floor(ledger, target.name, row["id"] if row else None, target_minimum(target))


def render_brief(view: dict[str, Any], out_dir: Path) -> Path:
    """Write out_dir/brief-round-<N>-<target>.md and return its path."""
    return write_template("brief.md.j2", Path(out_dir) / f"brief-round-{view['round']}-{view['target']}.md", view=view)


def _base_measurement(ledger: Ledger, row: dict, target: Target) -> Optional[dict]:
    """The times and resources of this round's base as the previous round measured them: its winner's
    ('after'), or, without a winner, the previous base's ('before' in any of its timed evaluations)."""
    winner = ledger.round_winner(row["id"])
    timed = winner or next((e for e in reversed(ledger.latest_candidate_evaluations(row["id"]))
                            if ledger.benchmark_results(e["id"])), None)
    base_eval = ledger.latest_evaluation(row["id"], None, "base")
    resources_from = winner or base_eval
    out: dict[str, Any] = {"times": {}, "device": None, "resources": [], "knobs": None}
    if timed is not None:
        column = "cand_median_us" if winner else "base_median_us"
        out["times"] = {b["benchmark"]: b[column] for b in ledger.benchmark_results(timed["id"])}
        out["device"] = json.loads(timed["device_json"]) if timed.get("device_json") else None
    if resources_from is not None:
        kernels = [r for r in ledger.kernel_resources(resources_from["id"]) if r["ok"]]
        out["resources"] = [{k: r[k] for k in ("kernel", "registers", "smem_bytes", "spill_bytes", "threads_per_cta",
                                               "ctas_per_sm", "limiter")} for r in kernels]
        out["knobs"] = json.loads(kernels[0]["signature"]) if kernels else None
    return out


def _benchmarks(target: Target, measured: Optional[dict]) -> list[dict]:
    times = measured["times"] if measured else {}
    out = []
    for index, _spec in enumerate(target.benchmarks):
        sol = target.speed_of_light_us[index] if target.speed_of_light_us else None
        time = times.get(index)
        out.append({"index": index, "label": target.benchmark_label(index), "median_us": time,
                    "speed_of_light_us": sol, "sol_pct": 100.0 * sol / time if sol and time else None})
    return out


def _tried(ledger: Ledger, target: Target, round: int) -> list[dict]:
    """Every proposal that left the contest in an earlier round, with its outcome and reason (compile errors
    carry their source line); a result still held (the previous round's, while this one has not started) is in the
    brief's held section instead."""
    out = []
    started = ledger.round_row(target.name, round) is not None
    for row in ledger.rounds(target.name):
        if row["round"] >= round:
            continue
        for e in ledger.latest_candidate_evaluations(row["id"]):
            outcome = Outcome(e.get("cleared_outcome") or e["outcome"])
            if outcome == Outcome.IMPLAUSIBLE and row["round"] == round - 1 and not started:
                continue
            if outcome.eliminates or outcome == Outcome.FASTER:
                out.append({"round": row["round"], "proposal": e["proposal_id"], "revision": e["revision"],
                            "outcome": outcome.value, "cleared": bool(e.get("cleared_outcome")),
                            "reason": standing_reason(e), "geomean": e["geomean_speedup"],
                            "won": row["winner_revision_id"] == e["revision_id"]})
    return sorted(out, key=lambda t: (t["round"], t["proposal"]))


def _held(ledger: Ledger, previous: dict) -> list[dict]:
    """The previous round's results held as implausible: each can be cleared only until this round starts."""
    return [{"proposal": e["proposal_id"], "revision": e["revision"], "evaluation_id": e["id"],
             "reason": e["reason"], "command": clear_command(e["id"])}
            for e in ledger.held(previous["id"])]


def _open(ledger: Ledger, target: Target, round: int) -> list[dict]:
    """Proposals still in play: pitches without a patch, and patches not evaluated on a machine that runs them."""
    out = []
    for rev in ledger.current_revisions(target=target.name):
        if rev["round"] > round:
            continue
        latest = ledger.latest_evaluation_of_revision(rev["id"])
        state = "pitch" if rev["patch"] is None else ("pending" if latest is None else latest["outcome"])
        if state in ("pitch", "pending", Outcome.NOT_RUN.value):
            closed = ledger.round_row(target.name, rev["round"] + 1) is not None
            out.append({"proposal": rev["proposal_id"], "revision": rev["revision"], "round": rev["round"],
                        "author": rev["author"], "title": rev["title"], "state": state,
                        "reason": latest["reason"] if latest else None, "closed": closed})
    return out


def _rules(target: Target, floor: Floor) -> dict[str, Any]:
    return {
        "patch": PATCH_RULES,
        "arch": target.arch,
        "clock": target.deciding_clock,
        "min_effect": floor.min_effect,
        "floor": floor.view(),
        "tolerance": {"rtol": target.rtol, "atol": target.atol},
        "limits_s": {"compile": target.limits.compile_s, "correctness": target.limits.check_s,
                     "timing": target.limits.timing_s},
        "max_speedup": target.max_speedup,
        "static_rules": sorted(target.static.rules) if target.static else [],
        "layout_checks": target.static.layout_checks if target.static else None,
        "forbidden_calls": [{"call": f.call, "why": f.why} for f in target.forbidden],
        "outcomes": {o.value: meaning(o, floor) for o in Outcome},
    }
