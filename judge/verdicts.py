"""A candidate's outcome from its stages: the first stage that stopped it, else the timing verdict (faster,
slower, unchanged), held as implausible when the measurement cannot be true."""

from __future__ import annotations

from .noise import MIN_EFFECT, Floor
from .records import Outcome
from .stage_details import TimingDetail
from .stages import StageResult, not_run_reason


def decide(stages: list[StageResult], min_effect: float = MIN_EFFECT) -> tuple[Outcome, str]:
    """The outcome that the first stage to stop a candidate dictates, with its one-line reason."""
    for stage in stages:
        if stage.status == "passed":
            continue
        if stage.status == "not-run":
            return Outcome.NOT_RUN, not_run_reason(stage.summary)
        if stage.status == "timed-out":
            return Outcome.TIMED_OUT, f"{stage.stage}: {stage.summary}"
        if stage.status == "crashed":
            return Outcome.CRASHED, f"{stage.stage}: {stage.summary}"
        if stage.status == "tampered":
            return Outcome.TAMPERED, f"{stage.stage}: {stage.summary}"
        failed = {"patch": Outcome.PATCH_FAILED, "screen": Outcome.FORBIDDEN_CALL, "compile": Outcome.COMPILE_ERROR,
                  "static": Outcome.STATIC_CHECK_FAILED, "correctness": Outcome.INCORRECT, "timing": Outcome.INCORRECT}
        return failed.get(stage.stage, Outcome.CRASHED), stage.summary
    timing = next((s for s in stages if s.stage == "timing"), None)
    if timing is None:
        return Outcome.NOT_RUN, "no timing stage ran"
    outcome, reason = timing_verdict(timing, min_effect)
    held = implausible(timing.detail)
    if held:
        return Outcome.IMPLAUSIBLE, f"{'; '.join(held)} (timing said {outcome.value}: {reason}); held until a person clears it"
    return outcome, reason


def timing_verdict(timing: StageResult, min_effect: float = MIN_EFFECT) -> tuple[Outcome, str]:
    """faster, slower, unchanged or inconclusive. The timing stage decided against the noise floor it records
    (judge.noise); an evaluation from before process pairs is read with its interval and `min_effect`."""
    detail = timing.detail
    floor = Floor.from_json(detail.floor) if detail.floor else None
    if detail.decision and floor is not None:
        outcome = Outcome(detail.decision)
        if outcome is Outcome.UNCHANGED and detail.significant:
            return outcome, f"{timing.summary}; a change under the noise floor ({floor.percent()}) counts as none"
        if outcome is Outcome.INCONCLUSIVE:
            return outcome, (f"{timing.summary}; undecided after {detail.pairs} process pairs: the interval reaches "
                             f"past the noise floor ({floor.percent()}) and across 1")
        return outcome, timing.summary
    min_effect = max(min_effect, detail.min_effect or 0.0)
    low, high = detail.geomean_ci
    geomean = detail.geomean
    if low > 1.0 and geomean >= 1.0 + min_effect:
        return Outcome.FASTER, timing.summary
    if high < 1.0 and geomean <= 1.0 / (1.0 + min_effect):
        return Outcome.SLOWER, timing.summary
    if low > 1.0 or high < 1.0:
        return Outcome.UNCHANGED, f"{timing.summary}; a change under {min_effect:.1%} is within run-to-run drift"
    return Outcome.UNCHANGED, timing.summary


def implausible(detail: TimingDetail) -> list[str]:
    """Why a measurement cannot be true: a time below the speed of light, or a speedup past the target's bound."""
    reasons = []
    for bench in detail.benchmarks:
        sol = bench.speed_of_light_us
        if sol and bench.cand_median_us < sol:
            reasons.append(f"benchmark {bench.index} timed {bench.cand_median_us:.3f} us, below its speed of "
                           f"light {sol:.3f} us")
    bound = detail.max_speedup
    if bound and (detail.geomean or 0) > bound:
        reasons.append(f"geomean {detail.geomean:.3f}x is past the target's bound of {bound:g}x")
    return reasons
