"""A candidate's outcome from its stages: the first stage that stopped it, else the timing verdict (faster,
slower, unchanged), held as implausible when the measurement cannot be true."""

from __future__ import annotations

from typing import Optional

from .noise import Floor, recorded_floor
from .records import Outcome
from .stages.details import TimingDetail
from .stages.result import StageResult, not_run_reason


def decide(stages: list[StageResult], floor: Optional[Floor] = None) -> tuple[Outcome, str]:
    """The outcome that the first stage to stop a candidate dictates, with its one-line reason; `floor`: the noise
    floor where the timing detail records none (judge.noise.recorded_floor)."""
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
    outcome, reason = timing_verdict(timing, floor)
    held = implausible(timing.detail)
    if held:
        return Outcome.IMPLAUSIBLE, f"{'; '.join(held)} (timing said {outcome.value}: {reason}); held until a person clears it"
    return outcome, reason


def timing_verdict(timing: StageResult, floor: Optional[Floor] = None) -> tuple[Outcome, str]:
    """faster, slower, unchanged or inconclusive against the noise floor the timing detail records (judge.noise:
    one owner, so that every report states the floor the verdict used). Timing in process pairs decided itself
    (the detail's `decision`); an evaluation from before pairs is read from its interval."""
    detail = timing.detail
    floor = recorded_floor(detail, floor)
    if detail.decision:
        outcome = Outcome(detail.decision)
        if outcome is Outcome.UNCHANGED and detail.significant:
            return outcome, f"{timing.summary}; a change under the noise floor ({floor.percent()}) counts as none"
        if outcome is Outcome.INCONCLUSIVE and floor.too_wide:
            return outcome, f"{timing.summary}; {floor.ceiling_words()}"
        if outcome is Outcome.INCONCLUSIVE:
            return outcome, (f"{timing.summary}; undecided after {detail.pairs} process pairs: the interval reaches "
                             f"past the noise floor ({floor.percent()}) and across 1")
        return outcome, timing.summary
    low, high = detail.geomean_ci
    geomean = detail.geomean
    if low > 1.0 and geomean >= floor.faster_at:
        return Outcome.FASTER, timing.summary
    if high < 1.0 and geomean <= floor.slower_at:
        return Outcome.SLOWER, timing.summary
    if floor.too_wide:
        return Outcome.INCONCLUSIVE, f"{timing.summary}; {floor.ceiling_words()}"
    if low > 1.0 or high < 1.0:
        return Outcome.UNCHANGED, f"{timing.summary}; a change under {floor.percent()} is within run-to-run drift"
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
