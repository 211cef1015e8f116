"""Runs a round: each proposal's patch on a fresh copy of the round's base, its stages, its outcome.

The round's base is frozen in the ledger the first time the round runs: round 1's is the target's
kernel file, round N+1's is round N's base with round N's winning patch applied (compounding).
Each finished evaluation is written at once, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from .errors import JudgeError
from .ledger import Ledger, now, sha256
from .patching import apply_patch, check_paths, parse_patch
from .records import Outcome, Proposal
from .stages import StageResult, not_run
from .targets import Target, find_target

EventSink = Callable[..., None]

MIN_EFFECT = 0.01
"""The smallest geomean change that earns 'faster' or 'slower'. The 95% interval covers the noise within one
run only: the same H100 round run twice on two machines (2026-11-23) measured one candidate at 1.006x
[1.005, 1.007] and then 0.998x [0.997, 0.999]; batch medians drift 0.2-0.8% between runs."""


@dataclass
class Verdict:
    proposal_id: str
    revision: int
    outcome: Optional[str]
    reason: str
    skipped: bool = False


@dataclass
class RoundSummary:
    target: str
    round: int
    base_origin: str
    verdicts: list[Verdict] = field(default_factory=list)
    pitches: list[str] = field(default_factory=list)
    winner: Optional[str] = None


class Stages:
    """The stage functions a round calls; tests substitute fakes, the real ones load torch lazily."""

    def probe(self):
        from .devices import probed  # the same cached probe the correctness and timing stages gate on

        return probed()

    def arch_gate(self, arch: str, facts) -> Optional[str]:
        from .devices import arch_gate

        return arch_gate(arch, facts)

    def compile_many(self, jobs, *, cache_dir, workers, progress) -> list[StageResult]:
        from .compile import compile_many

        return compile_many(jobs, cache_dir=cache_dir, workers=workers, progress=progress)

    def correctness(self, target: Target, workspace: Path) -> StageResult:
        from .check import run_correctness

        return run_correctness(target, workspace)

    def timing(self, target: Target, candidate: Path, base: Path, budget_s: Optional[float]) -> StageResult:
        from .timing import run_timing

        return run_timing(target, candidate, base, budget_s=budget_s)


@dataclass
class Settings:
    """Where a round keeps its files and how hard it works; defaults suit the working directory."""

    kernels_dir: Path = Path("kernels")
    work_dir: Path = Path("work")
    cache_dir: Path = Path(".judge-cache")
    workers: Optional[int] = None
    timing_budget_s: Optional[float] = None
    min_effect: float = MIN_EFFECT
    again: bool = False
    stages: Stages = field(default_factory=Stages)


def _quiet(*_args, **_kwargs) -> None:
    pass


# bases and winners -----------------------------------------------------------


def winner_of(ledger: Ledger, round_id: int) -> Optional[dict]:
    """The round's best significantly-faster proposal by measured geomean, or None."""
    rows = ledger.query(
        """
        select e.*, r.proposal_id, r.revision, r.patch from evaluations e
        join revisions r on r.id = e.revision_id
        where e.id in (select max(id) from evaluations where round_id = ? and subject = 'candidate' group by revision_id)
          and e.outcome = 'faster'
        order by e.geomean_speedup desc, e.id
        """,
        (round_id,),
    )
    return rows[0] if rows else None


def base_for(ledger: Ledger, target: Target, round: int) -> tuple[str, str]:
    """The base kernel of a round and where it came from, frozen once the round has run."""
    row = ledger.round_row(target.name, round)
    if row:
        return row["base_source"], row["base_origin"]
    if round == 1:
        return target.kernel_source(), _shown(target.kernel_path)
    previous_source, _ = base_for(ledger, target, round - 1)
    previous = ledger.round_row(target.name, round - 1)
    winner = winner_of(ledger, previous["id"]) if previous else None
    if winner is None:
        return previous_source, f"round {round - 1} base (round {round - 1} had no winner)"
    source = apply_patch(previous_source, winner["patch"], target.kernel_file, f"{winner['proposal_id']} r{winner['revision']}")
    return source, f"round {round - 1} base + winner {winner['proposal_id']} r{winner['revision']}"


def check_submission(ledger: Ledger, proposal: Proposal, kernels_dir: Path, source: str) -> None:
    """Reject, before anything is written, a proposal whose target is unknown or whose patch cannot apply."""
    try:
        target = find_target(proposal.target, kernels_dir)
    except JudgeError as error:
        raise JudgeError(f"{source}: field 'target': {error}") from None
    if not proposal.has_patch:
        return
    where = str(Path(source).parent / "patch.diff") if source.endswith(".toml") else f"{source}: field 'patch'"
    # Paths first: a patch to the wrong file is wrong whatever the base, so its error names no base.
    check_paths(parse_patch(proposal.patch, where), target.kernel_file, where)
    base, origin = base_for(ledger, target, proposal.round)
    try:
        apply_patch(base, proposal.patch, target.kernel_file, where)
    except JudgeError as error:
        raise JudgeError(f"{error} (base: {origin})") from None


# outcomes ------------------------------------------------------------------------


def decide(stages: list[StageResult], min_effect: float = MIN_EFFECT) -> tuple[Outcome, str]:
    """The outcome that the first stage to stop a candidate dictates, with its one-line reason."""
    for stage in stages:
        if stage.status == "passed":
            continue
        if stage.status == "not-run":
            return Outcome.NOT_RUN, stage.summary.removeprefix("not run: ")
        if stage.status == "timed-out":
            return Outcome.TIMED_OUT, f"{stage.stage}: {stage.summary}"
        if stage.status == "crashed":
            return Outcome.CRASHED, f"{stage.stage}: {stage.summary}"
        failed = {"patch": Outcome.PATCH_FAILED, "compile": Outcome.COMPILE_ERROR, "correctness": Outcome.INCORRECT}
        return failed.get(stage.stage, Outcome.CRASHED), stage.summary
    timing = next((s for s in stages if s.stage == "timing"), None)
    if timing is None:
        return Outcome.NOT_RUN, "no timing stage ran"
    low, high = timing.detail["geomean_ci"]
    geomean = timing.detail["geomean"]
    if low > 1.0 and geomean >= 1.0 + min_effect:
        return Outcome.FASTER, timing.summary
    if high < 1.0 and geomean <= 1.0 / (1.0 + min_effect):
        return Outcome.SLOWER, timing.summary
    if low > 1.0 or high < 1.0:
        return Outcome.UNCHANGED, f"{timing.summary}; a change under {min_effect:.1%} is within run-to-run drift"
    return Outcome.UNCHANGED, timing.summary


# the round ---------------------------------------------------------------------


def run_round(
    ledger: Ledger,
    round: int,
    *,
    target: Optional[Target] = None,
    settings: Optional[Settings] = None,
    on_event: EventSink = _quiet,
) -> list[RoundSummary]:
    """Evaluate every proposal of `round` that has a patch, per target; return what happened to each.

    With an explicit `target` only its proposals run, and its base is evaluated even when it has none.
    """
    settings = settings or Settings()
    ledger.mark_interrupted_runs()
    revisions = ledger.current_revisions(round=round)
    if target is not None:
        targets = {target.name: target}
    else:
        names = sorted({r["target"] for r in revisions})
        if not names:
            raise JudgeError(f"round {round} has no proposals (submit some with 'judge submit')")
        targets = {name: find_target(name, settings.kernels_dir) for name in names}
    return [
        _run_target_round(ledger, t, round, [r for r in revisions if r["target"] == name], settings, on_event)
        for name, t in targets.items()
    ]


def _run_target_round(
    ledger: Ledger, target: Target, round: int, revisions: list[dict], settings: Settings, on_event: EventSink
) -> RoundSummary:
    base_source, base_origin = base_for(ledger, target, round)
    round_row = ledger.create_round(target.name, round, base_source, base_origin)
    base_source = round_row["base_source"]
    summary = RoundSummary(target.name, round, round_row["base_origin"])
    summary.pitches = [r["proposal_id"] for r in revisions if not r["patch"]]
    candidates = [r for r in revisions if r["patch"]]

    root = settings.work_dir / target.name / f"round-{round}"
    base_dir = root / "base"
    _fresh(base_dir)
    target.assemble(base_dir, base_source)

    on_event("probe", target=target.name)
    facts = settings.stages.probe()
    gate = settings.stages.arch_gate(target.arch, facts)
    device = _facts_dict(facts)

    run_id = ledger.start_run(round_row["id"], sys.argv)
    status = "interrupted"
    try:
        _evaluate_base(ledger, target, round_row, run_id, base_dir, gate, device, settings, on_event)

        pending = []
        for revision in candidates:
            previous = ledger.latest_evaluation(round_row["id"], revision["id"])
            if previous and not settings.again and (previous["outcome"] != Outcome.NOT_RUN.value or previous["reason"] == gate):
                summary.verdicts.append(
                    Verdict(revision["proposal_id"], revision["revision"], previous["outcome"], previous["reason"], skipped=True)
                )
                on_event("skip", proposal=revision["proposal_id"], outcome=previous["outcome"])
                continue
            started = now()
            t0 = time.monotonic()
            try:
                source = apply_patch(base_source, revision["patch"], target.kernel_file, f"patch of {revision['proposal_id']} r{revision['revision']}")
            except JudgeError as error:
                stage = StageResult("patch", "failed", str(error), time.monotonic() - t0)
                summary.verdicts.append(
                    _record(ledger, run_id, round_row, revision, None, [stage], device, started, on_event, settings)
                )
                continue
            workspace = root / revision["proposal_id"]
            _fresh(workspace)
            target.assemble(workspace, source)
            patch_stage = StageResult("patch", "passed", f"applied to {round_row['base_origin']}", time.monotonic() - t0)
            pending.append((revision, source, workspace, patch_stage, started))

        compiled = _compile_all(target, [p[2] for p in pending], settings, on_event)
        for (revision, source, workspace, patch_stage, started), compile_stage in zip(pending, compiled):
            stages = [patch_stage, compile_stage]
            if compile_stage.passed or compile_stage.status == "not-run":
                stages += _gpu_stages(target, workspace, base_dir, gate, settings, on_event, revision["proposal_id"])
            summary.verdicts.append(
                _record(ledger, run_id, round_row, revision, sha256(source), stages, device, started, on_event, settings)
            )
        status = "finished"
    finally:
        ledger.finish_run(run_id, status)

    winner = winner_of(ledger, round_row["id"])
    ledger.set_winner(round_row["id"], winner["revision_id"] if winner else None)
    summary.winner = winner["proposal_id"] if winner else None
    return summary


def _evaluate_base(ledger, target, round_row, run_id, base_dir, gate, device, settings, on_event) -> None:
    """Compile (and, on a suitable GPU, check) the base once per round: the report's deltas start here."""
    previous = ledger.latest_evaluation(round_row["id"], None, subject="base")
    if previous and not settings.again and (previous["outcome"] != Outcome.NOT_RUN.value or previous["reason"] == gate):
        return
    started = now()
    on_event("stage", proposal="(base)", stage="compile")
    stages = _compile_all(target, [base_dir], settings, _quiet)
    if stages[0].passed and gate is None:
        on_event("stage", proposal="(base)", stage="correctness")
        stages.append(settings.stages.correctness(target, base_dir))
    elif stages[0].passed:
        stages.append(not_run("correctness", gate))
    # A base that passed every stage it ran is recorded as 'unchanged' against itself; the report says 'passed'.
    if all(s.passed for s in stages):
        outcome, reason = Outcome.UNCHANGED, "compiled and correct"
    else:
        outcome, reason = decide(stages, settings.min_effect)
    ledger.record_evaluation(
        run_id=run_id,
        round_id=round_row["id"],
        revision_id=None,
        subject="base",
        kernel_sha256=round_row["base_sha256"],
        outcome=outcome.value,
        reason=reason,
        stages=stages,
        device=device,
        started_at=started,
    )


def _compile_all(target: Target, workspaces: list[Path], settings: Settings, on_event: EventSink) -> list[StageResult]:
    if not workspaces:
        return []
    on_event("compile-start", total=len(workspaces))
    results = settings.stages.compile_many(
        [(target, w) for w in workspaces],
        cache_dir=settings.cache_dir,
        workers=settings.workers,
        progress=lambda done, total: on_event("compile-progress", done=done, total=total),
    )
    return results


def _gpu_stages(target, workspace, base_dir, gate, settings, on_event, proposal_id) -> list[StageResult]:
    if gate is not None:
        return [not_run("correctness", gate), not_run("timing", gate)]
    on_event("stage", proposal=proposal_id, stage="correctness")
    check = settings.stages.correctness(target, workspace)
    if not check.passed:
        return [check]
    on_event("stage", proposal=proposal_id, stage="timing")
    return [check, settings.stages.timing(target, workspace, base_dir, settings.timing_budget_s)]


def _record(ledger, run_id, round_row, revision, kernel_sha, stages, device, started, on_event, settings) -> Verdict:
    outcome, reason = decide(stages, settings.min_effect)
    ledger.record_evaluation(
        run_id=run_id,
        round_id=round_row["id"],
        revision_id=revision["id"],
        subject="candidate",
        kernel_sha256=kernel_sha,
        outcome=outcome.value,
        reason=reason,
        stages=stages,
        device=device,
        started_at=started,
    )
    on_event("verdict", proposal=revision["proposal_id"], outcome=outcome.value, reason=reason)
    return Verdict(revision["proposal_id"], revision["revision"], outcome.value, reason)


def _shown(path: Path) -> str:
    """A path as the user would type it: relative to the working directory when it is below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _fresh(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)


def _facts_dict(facts) -> Optional[dict]:
    if facts is None:
        return None
    from dataclasses import asdict, is_dataclass

    return asdict(facts) if is_dataclass(facts) else dict(facts)
