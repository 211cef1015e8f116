"""Runs a round: each proposal's patch on a fresh copy of the round's base, its stages, its outcome.

The round's base is frozen in the ledger the first time the round runs: round 1's is the target's kernel file, round
N+1's is round N's base with round N's winning patch applied (compounding). Each finished evaluation is written at
once, so a killed run resumes where it stopped."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Union

from . import contain
from .errors import JudgeError
from .machine import facts_dict, host_facts
from .workspaces import fresh
from .ledger import Ledger, now, sha256
from .ledger.rows import EvaluationRow, RoundRow
from .stages.compile.pipeline import CompilePipeline, PreparedCandidate, ready_jobs
from .control import ControlJob, control_job, evaluate_control, round_floor
from .noise import Floor, default_floor
from .stages.patch import apply_patch
from .peer import evaluate_peer
from .profiles import profile_round_base
from .records import Outcome
from .schedule import base_failure, base_for, base_words, kernels_to_run, require_runnable
from .stages.screen.stage import screen_stage
from .stages.details import CheckDetail, TimingDetail
from .stages.progress import Progress, quiet
from .stages.result import StageResult, kernel_stages_not_run, not_run
from .targets import Target, find_target
from .verdicts import decide

if TYPE_CHECKING:  # the names alone: judge.dispatch and the evaluator's module are imported where they are used
    from .dispatch import LocalDispatch, RayDispatch
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


class StageCalls:
    """The stage functions a round calls; tests substitute fakes, the real ones load torch lazily."""

    def probe(self):
        from .devices import probed  # the same cached probe the correctness and timing stages gate on

        return probed()

    def arch_gate(self, arch: str, facts) -> Optional[str]:
        from .devices import arch_gate

        return arch_gate(arch, facts)

    def compile_many(self, jobs, *, cache_dir, workers, progress) -> list[StageResult]:
        from .stages.compile.stage import compile_many

        return compile_many(jobs, cache_dir=cache_dir, workers=workers, progress=progress)

    def compile_workers(self, target: Target, root: Path, cores, spares: int, jobs: int):
        """Warm compile children for `jobs` candidates, pinned to `cores` (judge.stages.compile.workers)."""
        from .stages.compile.workers import CompileWorkers

        return CompileWorkers(root, cores=cores, spares=spares, jobs=jobs)

    def compile_one(self, target: Target, workspace: Path, *, cache_dir, workers) -> StageResult:
        from .stages.compile.stage import run_compile

        return run_compile(target, workspace, cache_dir=cache_dir, workers=workers)

    def static_check(self, target: Target, workspace: Path, compile_stage: StageResult) -> StageResult:
        from .stages.static.stage import run_static

        return run_static(target, workspace, compile_stage)

    def open_round(self, target: Target, root: Path, base_dir: Path, fork_spares: Optional[bool] = None) -> Evaluator:
        """The round's trusted state (judge.stages.evaluation.Evaluator): secret seeds, oracle, base runner."""
        from .stages.evaluation import Evaluator

        return Evaluator(target, fresh(root / ".judge-round"), base_dir=base_dir, fork_spares=fork_spares)

    def check_base(self, evaluator: Evaluator, base_dir: Path, progress: Optional[Progress] = None) -> StageResult:
        from .stages.check import check_base

        return check_base(evaluator, base_dir, progress=progress or quiet)

    def evaluate(self, evaluator: Evaluator, workspace: Path, budget_s: Optional[float], floor: Optional[Floor] = None,
                 progress: Optional[Progress] = None, control: bool = False) -> list[StageResult]:
        """Correctness, then timing against the base in process pairs, against the noise floor `floor` (a
        `control` by noise.enough_pairs' rule); `progress` hears of each case and timed benchmark as it starts."""
        from .dispatch import kernel_stages

        return kernel_stages(evaluator, workspace, budget_s, floor, progress or quiet, control)


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
    # Ray (judge.dispatch): the GPU stages on actors that each hold one GPU (or, for a CPU target, a block of
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
    dispatch: Union[LocalDispatch, RayDispatch, None] = None  # judge.dispatch: where correctness and timing run
    floor: Optional[Floor] = None  # the effect faster and slower must clear in this run
    timing_gate: Optional[str] = None  # why no candidate is timed in this run: its control ran out of time
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

    def open_evaluator(self) -> Evaluator:
        """The trusted state of the kernel-running stages, opened at the first one that runs here."""
        if self.evaluator is None:
            self.evaluator = self.settings.stages.open_round(self.target, self.root, self.base_dir,
                                                             self.settings.fork_spares)
        return self.evaluator

    def close(self) -> None:
        if self.evaluator is not None:
            self.evaluator.close()
            self.evaluator = None

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
    run = RoundRun(ledger, target, settings, on_event, round_row, run_id, root, base_dir, *_machine(target, settings, on_event))
    status = "interrupted"
    try:
        run.dispatch = _dispatch(run)
        run.gate = run.dispatch.gate()
        if kernels_to_run(ledger, round_row["id"], run.stale, revisions):
            run.dispatch.warm()
        run.floor = round_floor(run)  # from the controls before this run: what the control itself is measured against
        early = _evaluate_base(run)
        evaluate_control(run, early)
        run.floor = round_floor(run)
        on_event("floor", target=target.name, floor=run.floor)
        evaluate_peer(run)
        _evaluate_candidates(run, [r for r in revisions if r["patch"]], base_source, summary)
        status = "finished"
    finally:
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


def _machine(target: Target, settings: Settings, on_event: EventSink) -> tuple[Optional[str], Optional[dict]]:
    """Why the kernel stages cannot run here (None: they can) and the device they run on: this machine's CPU for a
    CPU target (no GPU is looked for), else the GPU the probe finds."""
    if target.on_cpu:
        device = host_facts()
        on_event("cpu", target=target.name, device=device)
        return None, device
    on_event("probe", target=target.name)
    facts = settings.stages.probe()
    return settings.stages.arch_gate(target.arch, facts), facts_dict(facts)


def _evaluate_candidates(run: RoundRun, revisions: list[dict], base_source: str, summary: RoundSummary) -> None:
    """Every revision without a standing verdict: patched, then compiled and statically checked on other cores while
    earlier ones run their GPU stages wherever the dispatch runs them (judge.stages.compile.pipeline); each verdict written
    as soon as it is known, and listed as before: compile and static failures first, then the rest."""
    pending: list[PreparedCandidate] = []
    for revision in revisions:
        previous = run.ledger.latest_evaluation(run.round_row["id"], revision["id"])
        if not run.stale(previous):
            summary.verdicts.append(Verdict(revision["proposal_id"], revision["revision"], previous["outcome"],
                                            previous["reason"], skipped=True, evaluation_id=previous["id"]))
            run.on_event("skip", proposal=revision["proposal_id"], outcome=previous["outcome"])
            continue
        prepared = _prepare(run, revision, base_source)
        if isinstance(prepared, Verdict):
            summary.verdicts.append(prepared)
        else:
            pending.append(prepared)
    failed, judged = [], []
    why_not = base_failure(run.ledger, run.round_row["id"])  # a failed base leaves nothing to time against
    if why_not and pending:
        run.on_event("base-failed", proposal="(base)", reason=why_not)  # read by every contestant, as the base is
    # A CPU target's timing shares the host's memory and caches with compiles: they all end before it starts.
    pipeline = CompilePipeline(run, pending, overlap=run.settings.overlap and not run.target.on_cpu)
    try:
        jobs = ready_jobs(run, pipeline, failed)
        if pending:
            run.on_event("gpu-start", total=len(pending))
        kernel_stages_of = (((job, kernel_stages_not_run(why_not), None) for job in jobs) if why_not
                            else run.dispatch.evaluate(jobs))
        for job, kernel_stages, place in kernel_stages_of:
            revision, stages, started = job.key
            judged.append(run.record(revision, sha256(job.source), stages + kernel_stages, started, place=place))
    finally:
        pipeline.close()
    summary.verdicts.extend(failed + judged)


def _time_spent(wall_s: float, spent: dict, ledger_wait_s: float = 0.0) -> dict:
    """The run's wall clock, seconds per stage, and how long its writes waited for another process's ledger lock."""
    return {"wall_s": round(wall_s, 3), "stages_s": {k: round(v, 3) for k, v in spent.items()},
            "ledger_wait_s": round(ledger_wait_s, 3)}


def _prepare(run: RoundRun, revision: dict, base_source: str) -> Verdict | PreparedCandidate:
    """Patch the base into a fresh workspace; a patch that does not apply, or a forbidden call, is the verdict at once."""
    started, t0 = now(), time.monotonic()
    target = run.target
    try:
        source = apply_patch(base_source, revision["patch"], target.kernel_file,
                             f"patch of {revision['proposal_id']} r{revision['revision']}")
    except JudgeError as error:
        row = run.round_row
        words = base_words(target.name, row["round"], row["base_origin"], row["base_sha256"])
        stage = StageResult("patch", "failed", f"{error}; {words}", time.monotonic() - t0)
        return run.record(revision, None, [stage], started)
    patch_stage = StageResult("patch", "passed", f"applied to {run.round_row['base_origin']}", time.monotonic() - t0)
    screened = screen_stage(base_source, source, revision["patch"], target.forbidden, target.kernel_file)
    if not screened.passed:  # a forbidden call: the verdict, before anything is compiled
        return run.record(revision, sha256(source), [patch_stage, screened], started)
    # Under candidates/: a proposal id is any slug, and 'base', 'control' or 'peer' beside them would be judge's own
    # workspaces (a proposal 'base' replaced the kernel every candidate was timed against).
    workspace = run.root / "candidates" / revision["proposal_id"]
    fresh(workspace)
    target.assemble(workspace, source)
    return PreparedCandidate(revision, source, workspace, [patch_stage, screened], started)


def _evaluate_base(run: RoundRun) -> Optional[ControlJob]:
    """Compile (and, where the target runs, check) the base once per round: the report's deltas start here. Where
    the dispatch has a second worker, the round's control runs on it during the check; it is handed back, to be
    recorded after the base (judge.control.evaluate_control)."""
    if not run.stale(run.ledger.latest_evaluation(run.round_row["id"], None, subject="base")):
        return None
    started = now()
    run.on_event("stage", proposal="(base)", stage="compile")
    stages = _compile_all(run.target, [run.base_dir], run.settings, _quiet)
    stages += _static_stages(run, run.base_dir, stages[0], "(base)")
    place, early = None, None
    if all(s.passed for s in stages) and run.gate is None:
        early = control_job(run) if run.dispatch.workers > 1 else None
        run.on_event("stage", proposal="(base)", stage="correctness")
        if early is not None:
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
    from .dispatch import LocalDispatch, RayDispatch

    settings = run.settings
    if settings.on_ray:
        return RayDispatch(run, settings.ray_address, settings.gpus)
    return LocalDispatch(run)
