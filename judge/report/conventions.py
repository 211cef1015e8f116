"""The conventions a report states once, at its end: only those that apply to what the report shows.

A round where nothing was timed states no timing conventions; one without votes states no shark rules.
"""

from __future__ import annotations

from ..scoring import CORRECTNESS_RULE, SPEEDUP_RULE

LEDGER = (
    "\"evaluation #N\" is row N of the ledger's `evaluations`; its stages, benchmarks and compile resources are "
    "the rows of `stage_results`, `benchmark_results` and `kernel_resources` with `evaluation_id` = N; "
    "\"vote #N\" is row N of `votes`."
)

SPEEDUPS = [
    "speedup = before / after: above 1.000x is faster; change = (before - after) / before, in %: positive is "
    "faster, negative is slower.",
    "geomean: the geometric mean of the per-benchmark speedups (every benchmark weighs the same).",
    "95% intervals: paired bootstrap of the ratio of medians per benchmark, and of the geomean over all "
    "benchmarks; \"significant\" means the interval excludes 1.000x. An outcome is faster (slower) only when "
    "the geomean's interval lies wholly above (below) 1 and the geomean clears the noise floor: within one run the "
    "interval can exclude 1 for a change smaller than the drift between runs. inconclusive: correct, and still "
    "undecided after the most process pairs judge runs.",
    "speedups 3 decimals with \"x\"; changes 1 decimal; halves round up.",
]

TIMING_GPU = (
    "before/after: median time in microseconds (us) of the round's base and of the candidate, each in confined "
    "processes of its own (two per kernel on a GPU, taken in pairs), taking turns on the device (order and input "
    "sets alternated, the idle ones stopped), each call after an L2 flush, on fresh input sets from secret seeds "
    "copied into inputs both kernels share on the device (inputs: shared) or each its own (separate); shown to 3 "
    "significant digits (whole us from 1000 us up). The deciding clock is the target's: gpu (the call queued "
    "behind a short GPU spin, so the host's launch time is excluded) or call (the GPU idle at the start, events "
    "around the whole call, launch included, as GPU MODE times). GPU targets measure both GPU clocks, the one that "
    "does not decide on one round in eight; a kernel that leaves work on a side stream is compared on the call "
    "clock, then measured every other round."
)

TIMING_CPU = (
    "before/after: median time in microseconds (us) of the round's base and of the candidate, each in a confined "
    "process of its own on this machine's CPU, taking turns (order and input sets alternated, the idle one "
    "stopped), on fresh input sets from secret seeds; shown to 3 significant digits (whole us from 1000 us up). "
    "The deciding clock is host: the host's clock around each call."
)

TIMING = [
    "% of SoL = speed of light / after, 1 decimal (100% is the hardware bound).",
    "trust: every timed call's output is checked against the oracle (a process that never imported contestant "
    "code); the parent's wall clock must account for the times a process reports (wall-clock excess: how much "
    "longer its commands took than the base's, beyond the reported times); a kernel much faster on inputs it has "
    "seen before than on new ones is replaying answers (replay: first-call time over later-call time, "
    "candidate/base).",
]

RESOURCES = [
    "compile resources: value (change against the base's kernel that serves the same benchmarks); \"knobs "
    "changed\" lists the compile configuration's knobs that differ from that base configuration's; smem, PTX and "
    "cubin sizes in KiB (1024 bytes, 1 decimal), spills (store + load) and stack in bytes; CTAs/SM is CUDA's "
    "occupancy arithmetic over registers, shared memory, threads and barriers and names the resource that limits "
    "it; it does not model tensor memory (sm_100) or cluster scheduling, so on a B200 it is an upper bound.",
]

SHARKS = (
    "shark totals: computed by judge as the sum of weight x score, in exact decimals; a stated total that differs "
    "from it by more than half a unit of its last written digit is flagged; a vote whose measured criteria wait "
    "on a measurement is pending and counts in no mean."
)


def floor_line(target: str, floors: list[dict]) -> str:
    """The noise floor the verdicts of a target's evaluations used (judge.noise), as they recorded it."""
    each = "; ".join(f"{f['words']}: faster from {f['faster_at']:.3f}x, slower from {f['slower_at']:.3f}x"
                     for f in floors)
    return f"noise floor of {target}: {each}."


def next_floor_line(target: str, floor: dict) -> str:
    """The floor the target's next verdict will use, from its controls so far (judge.noise.next_floor)."""
    return (f"the next verdict on {target} clears {floor['words']}: faster from {floor['faster_at']:.3f}x, slower "
            f"from {floor['slower_at']:.3f}x (its round's own A/A control, run first, adds one more unless an earlier "
            "control or calibration timed this very base on the same device).")


def conventions(shown: dict) -> list[str]:
    """The convention lines for what a report shows: `shown` says whether it holds speedups (and the noise floors
    their verdicts used, per target), timing tables (and on which clocks), compile resources, votes, and which
    measurements the voting sharks' criteria are bound to."""
    lines = [LEDGER]
    if shown["speedups"]:
        lines += SPEEDUPS
        lines += [floor_line(target, floors) for target, floors in sorted(shown["floors"].items()) if floors]
        lines += [next_floor_line(target, floor) for target, floor in sorted(shown.get("next_floors", {}).items())]
    if shown["timing"]:
        clocks = shown["clocks"]
        if clocks - {"host"}:
            lines.append(TIMING_GPU)
        if "host" in clocks or not clocks:
            lines.append(TIMING_CPU)
        lines += TIMING
    if shown["resources"]:
        lines += RESOURCES
    if shown["votes"]:
        lines.append(SHARKS)
        bounds = shown["bounds"]
        if "speedup" in bounds:
            lines.append(f"speedup score (a criterion bound to \"speedup\"): {SPEEDUP_RULE}.")
        if "correctness" in bounds:
            lines.append(f"correctness score (a criterion bound to \"correctness\"): {CORRECTNESS_RULE}.")
        if not bounds:
            lines.append("no shark voting here binds a criterion to a measurement: every score is the shark's own.")
    return lines
