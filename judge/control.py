"""The A/A control of a round: the round's base timed against an identical copy of itself, exactly as a candidate
is, before any candidate. What it measures goes into the ledger with the earlier controls of the same target and
device, and their spread sets the noise floor the round's verdicts must clear (judge.noise)."""

from __future__ import annotations

from typing import Optional

from .stages.job import Job
from .workspaces import fresh
from .ledger import now, sha256
from .ledger.noise import CONTROL
from .noise import Floor, device_name, floor_from, target_minimum
from .records import Outcome
from .verdicts import decide


def evaluate_control(run) -> Optional[object]:
    """Time the base against itself once per round (a standing control is kept); nothing where the base did not
    pass or the kernels cannot run here."""
    base = run.ledger.latest_evaluation(run.round_row["id"], None, subject="base")
    if base is None or base["outcome"] != Outcome.UNCHANGED.value or run.gate is not None:
        return None
    if not run.stale(run.ledger.control_evaluation(run.round_row["id"])):
        return None
    source = run.round_row["base_source"]
    workspace = run.root / "control"
    fresh(workspace)
    run.target.assemble(workspace, source)
    started = now()
    run.on_event("stage", proposal="(control)", stage="the base against an identical copy of itself")
    for job, stages, place in run.dispatch.evaluate([Job(None, "(control)", source, workspace)]):
        outcome, reason = decide(stages)
        return run.record(None, sha256(source), stages, started, (outcome, f"the base against itself: {reason}"),
                          place=place, subject=CONTROL)
    return None


def round_floor(run) -> Floor:
    """The floor this round's verdicts clear: from every control of this target on this device so far."""
    from .stages.timing.stage import MIN_PAIRS

    device = device_name(run.device)
    samples = run.ledger.control_samples(run.target.name, device)
    return floor_from(samples, target_minimum(run.target), MIN_PAIRS, device)
