"""Runs a round: each proposal's patch on a fresh copy of the round's base, its stages, its outcome.

The round's base is frozen in the ledger the first time the round runs: round 1's is the target's kernel file, round
N+1's is round N's base with round N's winning patch applied (compounding). Each finished evaluation is written at
once, so a killed run resumes where it stopped."""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Union

from . import contain
from .errors import JudgeError
from .workspaces import fresh
from .ledger import Ledger, now, sha256
from .ledger.rows import EvaluationRow, RoundRow
from .stages.compile.pipeline import CompilePipeline, PreparedCandidate, ReadyJobs
from .devices import may_run
from .control import ControlJob, announce_floor, control_job, evaluate_control, needs_control, round_floor
from .noise import Floor, default_floor
from .peer import evaluate_peer
from .prepare import Refused, prepare
from .profiles import profile_round_base
from .records import Outcome
from .schedule import base_failure, base_for, kernels_to_run, require_runnable
from .stages.details import CheckDetail, TimingDetail
from .stages.result import StageResult, kernel_stages_not_run, not_run
from .stage_calls import StageCalls
from .targets import Target, find_target
from .verdicts import decide
from .warm import WarmStart

if TYPE_CHECKING:  # the names alone: the dispatches and the evaluator's module are imported where they are used
    from .dispatch import LocalDispatch
    from .ray_dispatch import RayDispatch
    from .stages.evaluation import Evaluator

EventSink = Callable[..., None]


@dataclass
class Verdict:
    proposal_id: str
    revision: int
    outcome: Optional[str]
    reason: str
    skipped: bool = False
    evaluation_id: Optional[int] = None  # the ledger row of this verdict


@dataclass
class RoundSummary:
    target: str
    round: int
    base_origin: str
    verdicts: list[Verdict] = field(default_factory=list)
    pitches: list[str] = field(default_factory=list)
    winner: Optional[str] = None
    # Where the time went: the run's wall clock, and seconds per stage summed over every evaluation it wrote
    # (with several GPUs, stage seconds add up to more than the wall clock).
    time: dict = field(default_factory=dict)


@dataclass
class Settings:
    """Where a round keeps its files and how hard it works; defaults suit the working directory."""

    kernels_dir: Path = Path("kernels")
    work_dir: Path = Path("work")
    cache_dir: Path = Path(".judge-cache")
    workers: Optional[int] = None  # candidates compiling at once; None: one per core no timed pair uses
    # Candidates go to correctness and timing as each compiles (judge.stages.compile.pipeline), in warm compile
    # children (never for a CPU target, timed on the host); False: every compile first, for comparisons.
    overlap: bool = True
    warm_compiles: bool = True
    timing_budget_s: Optional[float] = None
    # Spare runners forked from a template that imported torch (True), or each importing it itself (False); None:
    # judge.stages.evaluation's default (forked on a GPU target, not on a CPU one, whose timing they spread wider).
    fork_spares: Optional[bool] = None
    again: bool = False
    stages: StageCalls = field(default_factory=StageCalls)
    # Ray (judge.ray_dispatch): the GPU stages on actors that each hold one GPU (or, for a CPU target, a block of
    # cores); off unless one of these is set.
    ray: bool = False
    ray_address: Optional[str] = None
    gpus: Optional[list[int]] = None
    # The base profiled once its round's timing is over (judge.profiles); JUDGE_PROFILE=0 (the test suite's) skips it.
    profile: bool = field(default_factory=lambda: os.environ.get("JUDGE_PROFILE", "1") != "0")

    @property
    def on_ray(self) -> bool:
        return self.ray or self.ray_address is not None or self.gpus is not None


def _quiet(*_args, **_kwargs) -> None:
    pass


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


@dataclass
class RoundRun:
    """Everything one run of one target's round shares: where its files are, what it runs on, its ledger rows."""

    ledger: Ledger
    target: Target
    settings: Settings
    on_event: EventSink
    round_row: RoundRow
    run_id: int
    root: Path
    base_dir: Path
    gate: Optional[str]
    device: Optional[dict]
    evaluator: Optional[Evaluator] = None  # opened by the first kernel stage that runs here (open_evaluator)
    warming: Optional[WarmStart] = None  # the thread that started the evaluator (warm), kept until close
    dispatch: Union[LocalDispatch, RayDispatch, None] = None  # judge.dispatch, judge.ray_dispatch: where the kernels run
    floor: Optional[Floor] = None  # the effect faster and slower must clear in this run
    timing_gate: Optional[str] = None  # why no candidate is timed in this run: its control ran out of time
    candidates: int = 0  # how many this run may time: the verdicts its control's floor serves (noise.enough_pairs)
    spent: dict = field(default_factory=dict)  # seconds per stage (and inside them) over this run's evaluations

    def stale(self, previous: Optional[EvaluationRow]) -> bool:
        """Whether to redo an earlier evaluation: asked to, or not run for a reason now gone (gate, failed base)."""
        if previous is None or self.settings.again:
            return True
        return previous["outcome"] == Outcome.NOT_RUN.value and previous["reason"] != self.gate and \
            previous["reason"] != base_failure(self.ledger, self.round_row["id"])

    def _count(self, stages: list[StageResult]) -> None:
        for stage in stages:
            parts = [(stage.stage, stage.seconds)]
            if isinstance(stage.detail, CheckDetail):
                parts.append(("runner starts", stage.detail.runner_start_s))
            elif isinstance(stage.detail, TimingDetail):
                parts.append(("measuring", stage.detail.measuring_s))
            for key, seconds in parts:
                if seconds is not None:
                    self.spent[key] = self.spent.get(key, 0.0) + seconds

    def warm(self) -> None:
        """Open the evaluator and start its oracle and spares on a thread (judge.warm) while the driver goes on."""
        if self.evaluator is None and self.warming is None:
            self.warming = WarmStart(self.settings.stages.open_round(self.target, self.root, self.base_dir,
                                                                     self.settings.fork_spares))

    def open_evaluator(self) -> Evaluator:
        """The trusted state of the kernel-running stages, opened at the first one that runs here (or by `warm`,
        once its start has ended)."""
        if self.evaluator is None and self.warming is not None:
            self.evaluator = self.warming.ready()
        if self.evaluator is None:
            self.evaluator = self.settings.stages.open_round(self.target, self.root, self.base_dir,
                                                             self.settings.fork_spares)
        return self.evaluator

    def close(self) -> None:
        if self.warming is not None:
            self.evaluator = self.warming.ready()
        if self.evaluator is not None:
            self.evaluator.close()
            self.evaluator = None
        if self.warming is not None:
            self.warming.end()
            self.warming = None

    def record(self, revision: Optional[dict], kernel_sha: Optional[str], stages: list[StageResult],
               started: str, outcome: Optional[tuple[Outcome, str]] = None, place: Optional[dict] = None,
               subject: Optional[str] = None) -> Verdict:
        """Write one evaluation; `place` is the Ray worker that ran its GPU stages, when one did; `subject` is
        'candidate' with a revision, else 'base' unless named ('peer')."""
        stages = [s.bounded() for s in stages]  # the reason, the ledger and the terminal see the same capped text
        outcome, reason = outcome or decide(stages, default_floor(self.target))
        reason = contain.cap(reason, contain.REASON_CAP)
        self._count(stages)
        device = self.device if place is None else {**(place.get("device") or {}), "host": place["host"],
                                                    "gpus": place["gpus"],
                                                    **({"cpus": place["cpus"]} if "cpus" in place else {})}
        evaluation_id = self.ledger.record_evaluation(
            run_id=self.run_id, round_id=self.round_row["id"], revision_id=revision["id"] if revision else None,
            subject=subject or ("candidate" if revision else "base"), kernel_sha256=kernel_sha, outcome=outcome.value,
            reason=reason, stages=stages, device=device, started_at=started, confinement=_confinement(stages),
        )
        if revision is None:
            return Verdict(f"({subject or 'base'})", 0, outcome.value, reason, evaluation_id=evaluation_id)
        where = None
        if place is not None:
            from .dispatch import describe_place

            where = describe_place(place)
        self.on_event("verdict", proposal=revision["proposal_id"], outcome=outcome.value, reason=reason, where=where)
        return Verdict(revision["proposal_id"], revision["revision"], outcome.value, reason, evaluation_id=evaluation_id)


def _confinement(stages: list[StageResult]) -> Optional[str]:
    """The report's line for the first confinement record a correctness or timing stage kept, if any."""
    from .report.formatting import confinement_summary  # the report's wording; its templates load only here

    record = next((s.detail.confinement for s in stages
                   if isinstance(s.detail, (CheckDetail, TimingDetail)) and s.detail.confinement), None)
    return confinement_summary(record)


def _run_target_round(
    ledger: Ledger, target: Target, round: int, revisions: list[dict], settings: Settings, on_event: EventSink
) -> RoundSummary:
    require_runnable(ledger, target.name, round)
    base_source, base_origin = base_for(ledger, target, round)
    round_row = ledger.create_round(target.name, round, base_source, base_origin)
    base_source = round_row["base_source"]
    summary = RoundSummary(target.name, round, round_row["base_origin"])
    summary.pitches = [r["proposal_id"] for r in revisions if not r["patch"]]

    root = settings.work_dir / target.name / f"round-{round}"
    base_dir = root / "base"
    # Before the workspace is reset: a second run stops here, and so does one of a round that closed meanwhile.
    run_id = ledger.start_run(round_row["id"], sys.argv, check=lambda again: require_runnable(again, target.name, round))
    wall_start, waited_before = time.monotonic(), ledger.waited_s
    fresh(base_dir)
    target.assemble(base_dir, base_source)
    run = RoundRun(ledger, target, settings, on_event, round_row, run_id, root, base_dir, None, None)
    status, candidates = "interrupted", None
    try:
        if not settings.on_ray and may_run(target.arch):
            run.warm()  # NVML lists a GPU this target runs on: its oracle and spares start while the probe runs
        with ThreadPoolExecutor(1, thread_name_prefix="judge-probe") as probing:
            machine = probing.submit(settings.stages.machine, target, on_event)
            unjudged = settings.again or ledger.latest_evaluation(round_row["id"], None, subject="base") is None
            compiled = _compile_base(run) if unjudged else None  # meanwhile, the base's compile needs no GPU
            run.gate, run.device = machine.result()
        run.dispatch = _dispatch(run)
        run.gate = run.dispatch.gate()
        if run.gate is None and kernels_to_run(ledger, round_row["id"], run.stale, revisions, needs_control(run)):
            run.dispatch.warm()
        else:
            run.close()  # an early start this run has no use for
        candidates = _candidates(run, [r for r in revisions if r["patch"]], base_source)
        run.candidates = len(candidates.pending)
        candidates.compile(run, early=True)  # during the base's check and the control (judge.stages.compile.pipeline)
        run.floor = round_floor(run)  # from the controls before this run: what the control itself is measured against
        _evaluate_after_base(run, _evaluate_base(run, compiled), candidates, summary)
        status = "finished"
    finally:
        if candidates is not None and candidates.pipeline is not None:
            candidates.pipeline.close()
        if run.dispatch is not None:
            run.dispatch.close()
        run.close()
        ledger.finish_run(run.run_id, status)
    profile_round_base(run, status == "finished", on_event, time.monotonic() - wall_start)  # after the dispatch's close
    winner = ledger.round_winner(round_row["id"])  # best significantly faster; an implausible one once cleared
    ledger.set_winner(round_row["id"], winner["revision_id"] if winner else None)
    summary.winner = winner["proposal_id"] if winner else None
    summary.time = _time_spent(time.monotonic() - wall_start, run.spent, ledger.waited_s - waited_before)
    return summary


@dataclass
class RoundCandidates:
    """A run's candidates between their patches and their verdicts: those with a standing verdict (skipped) or
    refused before any compile, in proposal order, and the rest, prepared, compiling once `compile` has started
    their pipeline (a GPU target's before its base's check: judge.stages.compile.pipeline)."""

    listed: list[Union[Verdict, Refused]]
    pending: list[PreparedCandidate]
    pipeline: Optional[CompilePipeline] = None

    def compile(self, run: RoundRun, early: bool = False) -> Optional[CompilePipeline]:
        """Start the compiles (once); `early`, before the base's check, only where they overlap the kernel stages: a
        CPU target's all end before its timing, so they start after its control."""
        overlap = run.settings.overlap and not run.target.on_cpu
        if self.pipeline is None and (overlap or not early):
            self.pipeline = CompilePipeline(run, self.pending, overlap=overlap)
        return self.pipeline


def _candidates(run: RoundRun, revisions: list[dict], base_source: str) -> RoundCandidates:
    """Every revision with a patch: its standing verdict, else patched and screened (judge.prepare)."""
    candidates = RoundCandidates([], [])
    for revision in revisions:
        previous = run.ledger.latest_evaluation(run.round_row["id"], revision["id"])
        if not run.stale(previous):
            candidates.listed.append(Verdict(revision["proposal_id"], revision["revision"], previous["outcome"],
                                             previous["reason"], skipped=True, evaluation_id=previous["id"]))
            run.on_event("skip", proposal=revision["proposal_id"], outcome=previous["outcome"])
            continue
        prepared = prepare(run, revision, base_source)
        (candidates.pending if isinstance(prepared, PreparedCandidate) else candidates.listed).append(prepared)
    return candidates


def _evaluate_after_base(run: RoundRun, early: Optional[ControlJob], candidates: RoundCandidates,
                         summary: RoundSummary) -> None:
    """The control, the floor, the peer and the candidates. Where the candidates are timed in process groups, the
    control is a kernel of their first group, and the peer (whose timing clears the floor the control sets) comes
    after them."""
    grouped = evaluate_control(run, early, beside=run.dispatch.control_in_groups and bool(candidates.pending))
    if grouped is None:
        announce_floor(run)
        evaluate_peer(run)
    _evaluate_candidates(run, candidates, summary, grouped)
    if grouped is not None:
        evaluate_peer(run)


def _evaluate_candidates(run: RoundRun, candidates: RoundCandidates, summary: RoundSummary,
                         control: Optional[ControlJob] = None) -> None:
    """Every candidate without a standing verdict: compiled and checked statically on other cores while others run
    their GPU stages wherever the dispatch runs them (judge.stages.compile.pipeline); each verdict written once known,
    listed as before: refusals, compile and static failures, then the rest, each in proposal order. A `control` is
    timed with them (LocalDispatch.evaluate), and recorded as soon as it is done."""
    for item in candidates.listed:
        summary.verdicts.append(item if isinstance(item, Verdict) else run.record(*item))
    failed, judged = [], []
    why_not = base_failure(run.ledger, run.round_row["id"])  # a failed base leaves nothing to time against
    if why_not and candidates.pending:
        run.on_event("base-failed", proposal="(base)", reason=why_not)  # read by every contestant, as the base is
    jobs = ReadyJobs(run, candidates.compile(run), failed)
    if candidates.pending:
        run.on_event("gpu-start", total=len(candidates.pending))
    kernel_stages_of = (((job, kernel_stages_not_run(why_not), None) for job in jobs) if why_not
                        else run.dispatch.evaluate(jobs, control))
    for job, kernel_stages, place in kernel_stages_of:
        revision, stages, started = job.key
        judged.append(run.record(revision, sha256(job.source), stages + kernel_stages, started, place=place))
    order = {prepared.revision["proposal_id"]: i for i, prepared in enumerate(candidates.pending)}
    summary.verdicts.extend(sorted(failed, key=lambda v: order[v.proposal_id]) +
                            sorted(judged, key=lambda v: order[v.proposal_id]))


def _time_spent(wall_s: float, spent: dict, ledger_wait_s: float = 0.0) -> dict:
    """The run's wall clock, seconds per stage, and how long its writes waited for another process's ledger lock."""
    return {"wall_s": round(wall_s, 3), "stages_s": {k: round(v, 3) for k, v in spent.items()},
            "ledger_wait_s": round(ledger_wait_s, 3)}


def _compile_base(run: RoundRun) -> tuple[str, list[StageResult]]:
    """The base's compile and static stages, and when they started: they need no GPU, so a round whose base has no
    verdict yet runs them while its probe runs."""
    started = now()
    run.on_event("stage", proposal="(base)", stage="compile")
    stages = _compile_all(run.target, [run.base_dir], run.settings, _quiet)
    return started, stages + _static_stages(run, run.base_dir, stages[0], "(base)")


def _evaluate_base(run: RoundRun, compiled: Optional[tuple[str, list[StageResult]]] = None) -> Optional[ControlJob]:
    """Compile (or take `compiled`) and, where the target runs, check the base once per round: the report's deltas
    start here. Where the dispatch has a second worker, the round's control runs on it during the check; else the
    check binds the control's first pairs while its cases run. The control is handed back, to be recorded (or run)
    after the base (judge.control.evaluate_control)."""
    if not run.stale(run.ledger.latest_evaluation(run.round_row["id"], None, subject="base")):
        return None
    started, stages = compiled or _compile_base(run)
    place, early = None, None
    if all(s.passed for s in stages) and run.gate is None:
        early = control_job(run)  # run beside the check by a second worker, else its first pairs bound during it
        run.on_event("stage", proposal="(base)", stage="correctness")
        if early is not None and run.dispatch.workers > 1:
            run.on_event("stage", proposal="(control)",
                         stage="the base against an identical copy of itself, beside the base's check")
        checked = run.dispatch.check_base(early.job if early else None)
        stages.append(checked.result)
        place = checked.place
        if early is not None:
            early.ran = checked.control
    elif all(s.passed for s in stages):
        stages.append(not_run("correctness", run.gate))
    # A base that passed every stage it ran is recorded as 'unchanged' against itself; the report says 'passed'.
    outcome = (Outcome.UNCHANGED, "compiled and correct") if all(s.passed for s in stages) else None
    run.record(None, run.round_row["base_sha256"], stages, started, outcome, place=place)
    return early


def _compile_all(target: Target, workspaces: list[Path], settings: Settings, on_event: EventSink) -> list[StageResult]:
    if not workspaces:
        return []
    on_event("compile-start", total=len(workspaces))
    return settings.stages.compile_many([(target, w) for w in workspaces], cache_dir=settings.cache_dir,
                                        workers=settings.workers,
                                        progress=lambda done, total: on_event("compile-progress", done=done, total=total))


def _static_stages(run: RoundRun, workspace: Path, compile_stage: StageResult, proposal_id: str) -> list[StageResult]:
    """The target's static rules and layout checks on a compiled kernel: none where it declares none."""
    if run.target.static is None or not compile_stage.passed:
        return []
    run.on_event("stage", proposal=proposal_id, stage="static")
    return [run.settings.stages.static_check(run.target, workspace, compile_stage)]


def _dispatch(run: RoundRun) -> Union[LocalDispatch, RayDispatch]:
    """Where correctness and timing run: Ray actors when the settings ask for them, else this machine."""
    from .dispatch import LocalDispatch
    from .ray_dispatch import RayDispatch

    settings = run.settings
    return RayDispatch(run, settings.ray_address, settings.gpus) if settings.on_ray else LocalDispatch(run)
