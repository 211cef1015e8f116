"""The timing stage's checks of what runners report: the parent's wall clock against the times a runner claims,
calls on input sets seen before against first calls (replayed answers), and work a kernel leaves on a side
stream (which decides which samples are analysed). Runners are not trusted; these numbers are the parent's.
"""

from __future__ import annotations

from typing import Any

from ... import stats

MIN_US = 1e-3
SIDE_WORK_US = 3.0
SIDE_WORK_FRACTION = 0.05
# The wall-clock audit: a candidate's turns may take at most this much longer, beyond the time it reports,
# than the base's turns do beyond theirs (medians of paired turns). A turn also holds judge's own work around
# the call (the frame's syncs and the output's copy), which two processes do at slightly different speeds: a
# fraction of the base's share is allowed for that too.
WALL_SLACK_US = 50.0
WALL_SLACK_FRACTION = 0.10
RESIDUAL_SLACK_FRACTION = 0.15
# On a CPU the host's scheduler adds hundreds of microseconds to a command now and then, and a process that
# has just started pays for memory it touches first: the audits there catch only gross forgeries (the
# runner's own audit names the everyday ones on every clock).
HOST_WALL_SLACK_US = 1000.0
HOST_WALL_SLACK_FRACTION = 0.5
HOST_RESIDUAL_SLACK_FRACTION = 0.5
HOST_REPLAY_FACTOR = 3.0
# Replay: calls on input sets seen before may not be this much faster than calls on new ones, beyond the base.
# With first uses of the sets spread over the series (judge.stages.timing.stage.set_for), honest kernels' ratios on an H100
# were 0.980-1.015 for base and candidate alike over 72 benchmarks of identical and calibrated kernels
# (2026-11-25); with first uses bunched at the start they reached 1.10-1.75 now and then, so the factor had been
# 1.5. A replay whose own lookup costs more than the kernel (a content hash read back to the host on vecadd) is
# slower than honest code and barely faster than its first calls: 1.2 still names it. The base's ratio counts
# only above 1: a base whose first calls ran faster than its later ones (0.46x, a CPU round of the tests on a loaded VM,
# 2026-11-30) is noise, under which an honest kernel's first touch of a new set (1.15x) would clear the factor.
REPLAY_FACTOR = 1.2
# ... and by at least this many microseconds: a first touch of new memory costs a CPU kernel a little.
REPLAY_FLOOR_US = 20.0
# ... and the candidate's first calls must stand out against the base's by a rank test at this level: on an H100
# (2026-11-25) GPU MODE's matmul_py solution, the problem's own code, was judged a replay against that same code
# (1.57x against 1.26x) on one or two first calls of a 150 us call clock whose launches jitter by tens of
# microseconds; with so few first calls the test cannot reach this level, and a kernel that replays shows it in
# every first call, not in one.
REPLAY_P = 0.01
# A first call is compared with the later calls of the same kernel and clock within this many calls of it, not
# with the whole series: the start of a benchmark, where first calls bunched before judge.stages.timing.stage.set_for spread
# them, ran up to 7x slower for both kernels on an H100 now and then (2026-11-25), and a kernel that waits on the
# host inside its call was 1.1-2x slower there than later; against the whole series that read as replays.
REPLAY_WINDOW = 12
# A clock's first timed call of a benchmark in a process is not compared at all: it is slow for every kernel,
# and by how much depends on the kernel. On an H100 (2026-11-26) a kernel that syncs with the host in its call
# read 0.81-1.93x its neighbours there on the call clock (median 1.4x), the base 0.76-1.27x; with that call
# counted, the honest kernel was judged a replay (1.15x against 0.85x). Its later first calls read 0.93-1.06x.
SKIP_FIRST_CALLS = 1


def audit(pairs: list[dict], deciding: str) -> dict[str, Any]:
    """The wall-clock audit and the replay check of one benchmark over its process pairs (each a series dict:
    (who, clock) -> repetitions), with the reasons they failed, if any."""
    reasons = []
    excess, overhead = {}, {}
    clocks_seen = sorted({c for series in pairs for _, c in series})
    for clock in clocks_seen:
        unexplained = {"base": [], "cand": []}
        claimed_all = []
        per_pair = []  # each pair's paired residual differences: a forger's calls exceed in every pair
        for series in pairs:
            count = min(len(series.get(("base", clock), [])), len(series.get(("cand", clock), [])))
            for w in ("base", "cand"):
                unexplained[w] += [_residual(r) for r in series[(w, clock)][:count]]
            per_pair.append([_residual(c) - _residual(b) for b, c in zip(series[("base", clock)][:count],
                                                                          series[("cand", clock)][:count])])
            claimed_all += [r["us"] for r in series.get(("base", clock), [])[:count]]
        if not claimed_all:
            continue
        claimed = stats.median(claimed_all)
        judges_own = stats.median(unexplained["base"])
        if clock == "host":
            slack = max(HOST_WALL_SLACK_US, HOST_WALL_SLACK_FRACTION * claimed, HOST_RESIDUAL_SLACK_FRACTION * judges_own)
        else:
            slack = max(WALL_SLACK_US, WALL_SLACK_FRACTION * claimed, RESIDUAL_SLACK_FRACTION * judges_own)
        key = f"{clock} call"
        overhead[key] = {w: round(stats.median(v), 2) for w, v in unexplained.items()}
        # Paired by repetition: both ran the same input set at nearly the same moment, in the same pair. The
        # excess must hold in every pair: one candidate process slowed by something of its machine's (on an H100,
        # once, 144 us a call in one pair of a slowed but honest FP8 kernel, 2026-11-25) is not a lie about time.
        point, low, _ = stats.median_ci([c - b for b, c in zip(unexplained["base"], unexplained["cand"])])
        excess[key] = round(point, 2)
        lows = [stats.median_ci(diffs)[1] for diffs in per_pair if len(diffs) >= 2]
        if lows and min(lows) > slack and low > slack:
            reasons.append(
                f"its timed calls took {point:.1f} us longer on the parent's wall clock than the base's, beyond "
                f"what the times it reported account for ({clock} clock; {slack:.0f} us allowed): the times it "
                "reported are not the times its work took")
    first = {"base": [], "cand": []}
    for series in pairs:
        clocks = _clocks_with_the_work(series)
        for w in ("base", "cand"):
            first[w] += _first_calls([series[(w, c)] for c in clocks])
    ratios = {w: [cold / max(MIN_US, typical) for cold, typical in found] for w, found in first.items()}
    replay = {w: round(stats.median(r), 3) if r else None for w, r in ratios.items()}
    # How many microseconds a candidate's first call on a set takes beyond the later calls around it.
    cold_excess = stats.median([cold - typical for cold, typical in first["cand"]]) if first["cand"] else 0.0
    factor = HOST_REPLAY_FACTOR if clocks_seen == ["host"] else REPLAY_FACTOR
    if (replay["cand"] is not None and replay["base"] is not None
            and replay["cand"] > factor * max(1.0, replay["base"])
            and cold_excess > REPLAY_FLOOR_US and stats.rank_sum_p(ratios["cand"], ratios["base"]) < REPLAY_P):
        reasons.append(f"calls on input sets it had seen before ran {replay['cand']:.2f}x faster than calls on new "
                       f"ones (the base: {replay['base']:.2f}x): it replays answers it kept")
    return {"wall_excess_us": excess, "wall_overhead_us": overhead, "replay_ratio": replay,
            "first_calls": {w: len(r) for w, r in ratios.items()}, "between_calls_cpu_us": _between_calls(pairs),
            "reasons": reasons}


def _between_calls(pairs: list[dict]) -> dict[str, float | None]:
    """The most CPU time each kernel's other Python threads spent between two of its timed calls (judge.boundary.callframe
    measures it). A fact, not a verdict: on an H200 honest torch.compile kernels' threads spent up to 0.63 ms there
    (2026-11-25), as much as a thread that watches for the next input set would."""
    out = {}
    for who in ("base", "cand"):
        spent = [r["others_cpu_us"] for series in pairs for (w, _), reps in series.items() if w == who
                 for r in reps if r.get("others_cpu_us") is not None]
        out[who] = round(max(spent), 1) if spent else None
    return out


def _clocks_with_the_work(series: dict) -> list[str]:
    """The clocks whose times hold the kernels' work, for the replay check: all of them, except the GPU clock's
    stream times where a kernel leaves its work on a side stream (they are then a microsecond or two, and on an
    H100 an honest side-stream kernel's first calls read 19x slower than its later ones there)."""
    clocks = sorted({c for _, c in series})
    if "call" in clocks and "gpu" in clocks and samples(series, "gpu")[2] == "device-wide":
        clocks.remove("gpu")
    return clocks


def _residual(rep: dict) -> float:
    """The parent's wall time around a timed command less the time the runner says it measured in it."""
    return rep["wall_us"] - rep["us"] - rep["tail_us"] - rep["spin_us"]


def _first_calls(per_clock: list[list[dict]]) -> list[tuple[float, float]]:
    """(time of a first call on an input set, median of the later calls around it): each first call against
    the calls on sets seen before, of the same kernel and clock, within REPLAY_WINDOW calls of it; a clock's
    first SKIP_FIRST_CALLS calls are left out."""
    pairs = []
    for reps in per_clock:
        for i, rep in enumerate(reps):
            if rep["cold"] and i >= SKIP_FIRST_CALLS:
                near = [r["us"] for r in reps[max(0, i - REPLAY_WINDOW):i + REPLAY_WINDOW + 1] if not r["cold"]]
                if near:
                    pairs.append((rep["us"], stats.median(near)))
    return pairs


def side_stream_work(stream_us: list[float], tail_us: list[float], null_tail_us: list[float]) -> bool:
    """Whether a kernel leaves work running after its current stream is done: its tail after the
    device-wide sync exceeds the null tail by more than SIDE_WORK_US + SIDE_WORK_FRACTION of its time."""
    excess = stats.median(tail_us) - stats.median(null_tail_us)
    return excess > SIDE_WORK_US + SIDE_WORK_FRACTION * stats.median(stream_us)


def samples(series: dict, clock: str) -> tuple[list[float], list[float], str]:
    """The samples to analyse on `clock`: for the GPU clock, stream times, or, when either kernel leaves work on
    a side stream, the call clock's (its end event follows a device-wide sync, so side work is inside it for
    both kernels alike); other clocks as measured. The GPU clock's own device-wide span less a null tail was
    tried: on an H100 the host's wake-up from the sync differed by 2-3 us between the two kernels (it waits
    longer behind the spin for one that launches fast), and an unjoined side stream was judged 1.03x faster."""
    base, cand = series[("base", clock)], series[("cand", clock)]
    count = min(len(base), len(cand))
    base, cand = base[:count], cand[:count]
    if clock != "gpu":
        return [r["us"] for r in base], [r["us"] for r in cand], clock
    nulls = [r["null_tail_us"] for r in base + cand if r["null_tail_us"] is not None]
    if not any(side_stream_work([r["us"] for r in s], [r["tail_us"] for r in s], nulls) for s in (base, cand)):
        return [r["us"] for r in base], [r["us"] for r in cand], "stream"
    base, cand, _ = samples(series, "call")
    return base, cand, "device-wide"
