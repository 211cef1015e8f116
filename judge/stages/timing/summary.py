"""The timing stage's measurements and their summary: what each process pair measured per benchmark, and the stage's
detail made of the pairs (per benchmark the pairs' log ratios and their interval, pooled medians per clock, the
audits; the geomean, its interval and the decision against the noise floor). judge.stages.timing.stage measures."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from . import audits
from .turns import member_view
from ... import stats
from ...noise import Floor
from ...targets import Target
from ..details import ABSENT, TimedBenchmark, TimingDetail


@dataclass
class PairBenchmark:
    """One benchmark as one process pair timed it: both runners' series per clock and the facts of its turns."""

    index: int
    series: dict[tuple[str, str], list[dict]]  # (who, clock) -> repetitions (PairTurns.series)
    spin_us: float
    sets: int
    copies: int
    placement: str  # "separate": each runner's inputs in its own memory (ledgers before 2026-11-28: GPU pairs "shared")
    measuring_s: float
    strays: list[int]  # processes a runner started that left its process group
    analysed: str  # the clock whose repetitions the verdict reads (PairTurns.analysed_clock)
    failure: str | None = None  # why the turns stopped, when they did not finish
    call_us: float = 0.0  # the shorter kernel's typical call, by which its repetitions were sized (_enter_frames)
    base_call_us: float = 0.0  # the base runner's own warm-up call, what later comparisons of the round may know
    failed_who: str | None = None  # in a group, the member whose call failed (PairTurns.failed_who)
    strays_of: dict[str, list[int]] | None = None  # in a group, each member's strays: a rival's are not its own
    step_us: float = 0.0  # judge's typical step around one of the base's calls (PairTurns.base_step_us)


@dataclass
class PairResult:
    """What one process pair measured: per benchmark its series and facts, and what its runners showed."""

    benchmarks: list[PairBenchmark] = field(default_factory=list)
    failure: str | None = None
    findings: list[str] = field(default_factory=list)  # the candidate's: its audit, its frame's flags
    base_findings: list[str] = field(default_factory=list)
    confinement: dict | None = None
    seconds: float = 0.0


@dataclass
class GroupResult:
    """What one process group measured: the base's runner and one runner per kernel timed beside it (a pair has one,
    "cand"), per benchmark every member's series, and what each runner showed."""

    benchmarks: list[PairBenchmark] = field(default_factory=list)
    failure: str | None = None
    failed_who: str | None = None  # the member whose call failed ("base" for the base's)
    findings: dict[str, list[str]] = field(default_factory=dict)  # per member, "base" included
    confinement: dict | None = None
    seconds: float = 0.0

    def of(self, who: str) -> PairResult:
        """The group as the pair of the base and `who`: what the summary, the audits and the verdict read. A failure
        of another member's is not `who`'s; the base's is everyone's."""
        failure = self.failure if self.failed_who in (who, "base", None) else None
        benchmarks = [replace(bench, series=member_view(bench.series, who), failure=bench.failure if failure else None,
                              strays=_strays(bench, who), strays_of=None) for bench in self.benchmarks]
        return PairResult(benchmarks=benchmarks, failure=failure, findings=list(self.findings.get(who, [])),
                          base_findings=list(self.findings.get("base", [])), confinement=self.confinement,
                          seconds=self.seconds)


def _strays(bench: PairBenchmark, who: str) -> list[int]:
    """The strays a member's pair with the base answers for: the base's and its own, never a rival's."""
    if bench.strays_of is None:
        return bench.strays
    return sorted(bench.strays_of.get("base", []) + bench.strays_of.get(who, []))


def strays_of(group: "GroupResult", who: str) -> bool:
    """Whether `who`'s own runner left a process running outside its process group in a benchmark of `group` (in a
    pair, whose strays are not told apart: either runner's)."""
    return any(bench.strays_of.get(who) if bench.strays_of is not None else bench.strays for bench in group.benchmarks)


def pair_geomeans(pairs: list[PairResult], target: Target) -> list[float]:
    """Each pair's log speedup on what the target ranks by (Target.ranking_by), on the analysed clock: the geomean
    of its benchmarks' ratios (which is the ratio of the geomeans of their times; with one benchmark, its ratio), or
    where the mean of the times ranks, the ratio of the summed medians, in which the longest benchmarks weigh most."""
    if target.ranking_by == "mean":
        medians = [[[stats.median(x) for x in audits.samples(b.series, b.analysed)[:2]] for b in pair.benchmarks]
                   for pair in pairs]
        return [math.log(sum(b for b, _ in pair) / sum(c for _, c in pair)) for pair in medians]
    return stats.geomean_logs([[_log_ratio(b) for b in pair.benchmarks] for pair in pairs])


def _noun(target: Target) -> str:
    return "speedup" if target.ranking_by == "mean" else "geomean"


def ranked_words(target: Target, timed: int) -> str:
    """What a timing summary's speedup is over: its benchmarks, and where the target ranks by something other than
    their geomean, that."""
    plural = "s" if timed != 1 else ""
    if target.ranking_by == "last" and len(target.benchmarks) > 1:
        return f"over {timed} benchmark{plural}, the last of {len(target.benchmarks)} (task.yml ranks by it)"
    if target.ranking_by == "mean":
        return f"over {timed} benchmark{plural}, the ratio of their summed times (task.yml ranks by the mean)"
    return f"over {timed} benchmark{plural}"


def _log_ratio(bench: PairBenchmark) -> float:
    base, cand, _ = audits.samples(bench.series, bench.analysed)
    return stats.pair_log_ratio(base, cand)


def summarise(pairs: list[PairResult], target: Target, confinement: dict | None, floor: Floor) -> TimingDetail:
    """Per benchmark: the pairs' log ratios, their mean and t interval, pooled medians per clock and the
    audits; the geomean, its interval and the decision against `floor`."""
    deciding = target.deciding_clock
    out, reasons = [], []
    for i in range(len(pairs[0].benchmarks)):
        benches = [pair.benchmarks[i] for pair in pairs]
        out.append(_timed_benchmark(benches, target, deciding, reasons))
    detail = TimingDetail(benchmarks=out, clock=deciding, confinement=confinement, max_speedup=target.max_speedup,
                          min_effect=target.min_effect, audit_reasons=reasons, method=METHOD[deciding],
                          floor=floor.to_json(), pairs=len(pairs))
    logs = pair_geomeans(pairs, target)
    geomeans = [round(math.exp(g), 5) for g in logs]
    if len(logs) < 2:
        point = math.exp(logs[0])
        return detail.updated(geomean=round(point, 5), geomean_ci=[round(point, 5), round(point, 5)],
                              significant=False, decision="inconclusive", pair_geomeans=geomeans,
                              summary=(f"{_noun(target)} {point:.3f}x {ranked_words(target, len(out))} (one "
                                       "process pair: no interval)"),
                              measuring_s=round(sum(b.measuring_s for b in out), 3))
    decided = stats.decide(logs, floor.effect)
    outcome = floor.bounded(stats.final(decided, floor.effect))
    n = len(out)
    return detail.updated(
        summary=(f"{_noun(target)} {decided.point:.3f}x [{decided.low:.3f}, {decided.high:.3f}] "
                 f"{ranked_words(target, n)}, {len(pairs)} process pairs"),
        geomean=round(decided.point, 5), geomean_ci=[round(decided.low, 5), round(decided.high, 5)],
        significant=decided.low > 1.0 or decided.high < 1.0, decision=outcome, pair_geomeans=geomeans,
        measuring_s=round(sum(b.measuring_s for b in out), 3))


def _timed_benchmark(benches: list[PairBenchmark], target: Target, deciding: str, reasons: list[str]) -> TimedBenchmark:
    i = benches[0].index
    logs = [_log_ratio(b) for b in benches]
    mean = sum(logs) / len(logs)
    low, high = (stats.t_interval(logs)[1:] if len(logs) > 1 else (mean, mean))
    analysed = benches[-1].analysed
    pooled = {}
    for b in benches:
        for key, reps in b.series.items():
            pooled.setdefault(key, []).extend(reps)
    base_us, cand_us, method = [], [], analysed
    rep_pairs = []
    for p, b in enumerate(benches):
        bu, cu, method = audits.samples(b.series, b.analysed)
        if deciding == "gpu" and b.analysed == "call":
            method = "device-wide"  # the turns found side-stream work and moved to the call clock (judge.stages.timing.turns)
        base_us += bu
        cand_us += cu
        rep_pairs += [p] * len(bu)
    clocks = {}
    for clock in sorted({c for _, c in pooled}):
        bs = [r["us"] for r in pooled[("base", clock)]]
        cs = [r["us"] for r in pooled[("cand", clock)]]
        if bs and cs:
            clocks[clock] = {"base_median_us": round(stats.median(bs), 3), "cand_median_us": round(stats.median(cs), 3),
                             "speedup": round(stats.median(bs) / stats.median(cs), 5), "reps": min(len(bs), len(cs))}
    audit = audits.audit([b.series for b in benches], deciding)
    reasons += [f"benchmark {i}: {r}" for r in audit.pop("reasons")]
    strays = sorted({pid for b in benches for pid in b.strays})
    if strays:
        reasons.append(f"benchmark {i}: processes it started left its process group and kept running while "
                       f"the base was timed (pids {', '.join(map(str, strays))})")
    return TimedBenchmark(
        index=i, label=target.benchmark_label(i), clock=deciding,
        base_median_us=round(stats.median(base_us), 3), cand_median_us=round(stats.median(cand_us), 3),
        speedup=round(math.exp(mean), 5), ci_low=round(math.exp(low), 5), ci_high=round(math.exp(high), 5),
        significant=len(logs) > 1 and (low > 0 or high < 0), reps=len(base_us), stopped="pairs",
        method=method if method in ("stream", "device-wide") else deciding, clocks=clocks, audit=audit,
        spin_us=benches[0].spin_us, sets=benches[0].sets, copies=benches[0].copies,
        placement=benches[0].placement, processes=len(benches),
        process_medians_us={"base": [round(stats.median(audits.samples(b.series, b.analysed)[0]), 3)
                                     for b in benches],
                            "cand": [round(stats.median(audits.samples(b.series, b.analysed)[1]), 3)
                                     for b in benches]},
        pair_log_ratios=[round(x, 6) for x in logs],
        measuring_s=round(sum(b.measuring_s for b in benches), 3), base_us=_rounded(base_us),
        cand_us=_rounded(cand_us), rep_pairs=rep_pairs,
        speed_of_light_us=target.speed_of_light_us[i] if target.speed_of_light_us else ABSENT,
    )


_PAIRS = ("process pairs (a fresh base and candidate process each, on the same cores, neither having run the correctness "
          "cases), taking turns (order alternated), inputs written in by the oracle before each call")
METHOD = {
    "gpu": f"{_PAIRS} into the runner's own memory, L2 flushed, launch hidden behind a GPU wait, CUDA events; device-wide "
           "span where a kernel leaves side-stream work; Student's t over the pairs",
    "call": f"{_PAIRS} into the runner's own memory, L2 flushed, GPU idle at the start, CUDA events around the whole call "
            "(launch included), device-wide; Student's t over the pairs",
    "host": f"{_PAIRS}, the host's clock around the call; Student's t over the pairs",
}


def _rounded(values: list[float]) -> list[float]:
    return [round(x, 3) for x in values]
