"""The A/A control of a round: the round's base timed against an identical copy of itself, exactly as a candidate
is, before any candidate. What it measures goes into the ledger with the earlier controls of the same target and
device, and their spread sets the noise floor the round's verdicts must clear (judge.noise)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .stages.job import Job
from .stages.details import TimingDetail
from .stages.result import StageResult
from .workspaces import fresh
from .ledger import now, sha256
from .ledger.noise import CONTROL
from .noise import Floor, controls_floor, device_name, kept_words, target_minimum
from .records import Outcome
from .verdicts import decide


@dataclass
class ControlJob:
    """A control about to run: its job (the base's source in a workspace of its own) and when it started; where it
    ran beside the base's check (judge.dispatch.BaseCheck), its kernel stages and place come with it."""

    job: Job
    started: str
    ran: Optional[tuple[list[StageResult], Optional[dict]]] = None


def needs_control(run) -> bool:
    """Whether this run must time a control: the kernels run here, the round has none standing (one that ran out of
    time is timed again: its round's candidates were left untimed on its account, and a run with a longer limit is
    how they get timed), and no earlier A/A measurement of this very base on this device stands (kept_control)."""
    standing = run.ledger.control_evaluation(run.round_row["id"])
    if run.gate is not None or not (run.stale(standing) or standing["outcome"] == Outcome.TIMED_OUT.value):
        return False
    return kept_control(run) is None


def kept_control(run) -> Optional[dict]:
    """An earlier round's control or a `judge calibrate` run that timed this round's very base on this device
    (Ledger.measured_base), which this round keeps instead of timing its own: its pairs already set the floor of
    the round's verdicts (round_floor), and timing the same kernel on the same device again cost a round 13-63 s
    (H200, 2026-11-30). None where there is none, or where the run was asked to judge again (`--again`)."""
    if run.settings.again:
        return None
    row = run.round_row
    return run.ledger.measured_base(run.target.name, row["base_sha256"], device_name(run.device), row["id"])


def control_job(run) -> Optional[ControlJob]:
    """The control this run must time, laid out; None where it need not (needs_control). Whether the base passed is
    the caller's to know (evaluate_control)."""
    if not needs_control(run):
        return None
    source = run.round_row["base_source"]
    workspace = run.root / "control"
    fresh(workspace)
    run.target.assemble(workspace, source)
    return ControlJob(Job(None, "(control)", source, workspace, control=True, serves=run.candidates), now())


def evaluate_control(run, early: Optional[ControlJob] = None, beside: bool = False) -> Optional[ControlJob]:
    """Time the base against itself once per round (a standing control is kept); nothing where the base did not
    pass or the kernels cannot run here. `early` is a control that already ran beside the base's check: it is
    recorded only now, and only if the base passed. `beside`: the control is handed back instead, to be timed in the
    candidates' first process group (judge.local_groups), which records it (record_control)."""
    base = run.ledger.latest_evaluation(run.round_row["id"], None, subject="base")
    if base is None or base["outcome"] != Outcome.UNCHANGED.value or run.gate is not None:
        return None
    control = early or control_job(run)
    if control is None:
        kept = kept_control(run) if run.ledger.control_evaluation(run.round_row["id"]) is None else None
        if kept is not None:
            run.on_event("control-kept", target=run.target.name, kept=kept,
                         words=kept_words(kept, device_name(run.device)))
        return None
    if control.ran is None and beside:
        return control
    if control.ran is None:
        control.started = now()  # laid out before the base's check, run only now
        run.on_event("stage", proposal="(control)", stage="the base against an identical copy of itself")
        [(_, stages, place)] = run.dispatch.evaluate([control.job])  # one job in, one result out
        control.ran = (stages, place)
    record_control(run, control, *control.ran)
    return None


def record_control(run, control: ControlJob, stages: list[StageResult], place: Optional[dict] = None) -> object:
    """Write the control's evaluation; where its timing ran out of time, no candidate of the round is timed after
    it (timing_gate)."""
    run.timing_gate = timing_gate(stages)
    outcome, reason = decide(stages)
    return run.record(None, sha256(control.job.source), stages, control.started,
                      (outcome, f"the base against itself: {reason}"), place=place, subject=CONTROL)


def announce_floor(run) -> Floor:
    """Read the floor this round's verdicts clear (round_floor) once its control is in, and say it."""
    run.floor = round_floor(run)
    run.on_event("floor", target=run.target.name, floor=run.floor)
    return run.floor


def timing_gate(stages: list[StageResult]) -> Optional[str]:
    """Why no candidate of the round is timed, where its control's timing ran out of time (judge.stages.timing):
    the round passes it with every job, so that an evaluator other than the control's (a Ray actor on another GPU)
    does not spend the limit on each candidate in turn."""
    for stage in stages:
        if stage.stage == "timing" and isinstance(stage.detail, TimingDetail) and stage.detail.gate:
            return stage.detail.gate
    return None


def floor_with(run, logs: list[float]) -> Floor:
    """The floor round_floor will read once this round's control, with these per-pair geomean log ratios, is in."""
    return controls_floor(run.ledger, run.target.name, target_minimum(run.target), device_name(run.device), (logs,))


def round_floor(run) -> Floor:
    """The floor this round's verdicts clear: from every control of this target on this device so far."""
    return controls_floor(run.ledger, run.target.name, target_minimum(run.target), device_name(run.device))
