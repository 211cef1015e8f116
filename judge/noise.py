"""The noise floor: the smallest change of the geomean that a verdict must clear to say faster or slower.

One owner for the rule and for its words. A verdict records the floor it used (`Floor.to_json` in the timing
detail), and every report, the brief, the CLI and JSON read that record or `Floor.words()`, never a constant
of their own. The target's `min_effect` (judge.toml) is the floor's lower limit.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Optional

MIN_EFFECT = 0.01
"""The floor's lower limit where a target sets none. Batch medians drift by 0.2-0.8% between runs on an H100,
and the same round run twice on two machines (2026-11-23) measured one candidate at 1.006x [1.005, 1.007] and
then 0.998x [0.997, 0.999]: a change under 1% is not one judge can stand behind."""

MAX_FLOOR = 0.25
"""The widest floor a verdict of `unchanged` may rest on. Controls on the H100 set floors of 1.9-7.7%
(docs/judge_performance.md); on a loaded 2-core VM one wild control (1.484x [0.28, 7.87]) set 20702%, under
which a kernel doing ten times the work read `unchanged`. Past this ceiling (or the target's own minimum, where
that is higher) identical code strays too far for "no change" to mean anything: such verdicts are
`inconclusive`. A change that clears even that floor is still faster or slower."""


@dataclass(frozen=True)
class Floor:
    """The floor a verdict clears: `effect` as a fraction (0.01 is 1%), the target's lower limit, where it came
    from ("min_effect", or "controls" when the A/A controls of this target and device set it higher) and how
    many controls it rests on."""

    effect: float
    min_effect: float
    source: str = "min_effect"
    controls: int = 0
    device: Optional[str] = None

    @property
    def faster_at(self) -> float:
        """The smallest geomean speedup that can be called faster."""
        return 1.0 + self.effect

    @property
    def slower_at(self) -> float:
        """The largest geomean speedup that can be called slower (symmetric in log terms)."""
        return 1.0 / (1.0 + self.effect)

    @property
    def ceiling(self) -> float:
        """The widest floor an `unchanged` may rest on: MAX_FLOOR, or the target's minimum where that is higher."""
        return max(MAX_FLOOR, self.min_effect)

    @property
    def too_wide(self) -> bool:
        """Whether controls set the floor past its ceiling: no `unchanged` then."""
        return self.effect > self.ceiling

    def percent(self) -> str:
        return f"{self.effect:.1%}"

    def bounded(self, outcome: str) -> str:
        """`outcome` as this floor lets it stand: `unchanged` under a floor that is too wide is inconclusive."""
        return "inconclusive" if outcome == "unchanged" and self.too_wide else outcome

    def ceiling_words(self) -> str:
        """Why a verdict under this floor is inconclusive rather than unchanged."""
        return (f"the noise floor ({self.percent()}) is past judge's ceiling of {self.ceiling:.0%}: "
                f"identical code strays that far here, so no change can be called none")

    def words(self) -> str:
        """One line: the floor and where it came from."""
        if self.source == "controls":
            on = f" on {self.device}" if self.device else ""
            ceiling = f"; past the ceiling of {self.ceiling:.0%}, so no verdict says unchanged" \
                if self.too_wide else ""
            return (f"{self.percent()}, set by {self.controls} A/A control{'s' if self.controls != 1 else ''}{on} "
                    f"(an identical copy of the base judged the same way); the target's minimum is "
                    f"{self.min_effect:.1%}{ceiling}")
        return f"{self.percent()}, the target's minimum effect (no A/A control has raised it)"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def view(self) -> dict[str, Any]:
        """The record with what a reader needs beside it: its words and where faster and slower start (the
        scorecard, the brief, `--json` and the wire all show it so)."""
        return {**self.to_json(), "words": self.words(), "faster_at": self.faster_at, "slower_at": self.slower_at}

    @classmethod
    def from_json(cls, data: Optional[dict]) -> Optional["Floor"]:
        if not data:
            return None
        return cls(**{k: data[k] for k in ("effect", "min_effect", "source", "controls", "device") if k in data})


def target_minimum(target) -> float:
    """The target's lower limit: judge.toml's `min_effect`, else MIN_EFFECT."""
    value = getattr(target, "min_effect", None)
    return MIN_EFFECT if value is None else float(value)


def default_floor(target) -> Floor:
    """The floor where no control has been measured: the target's minimum effect."""
    minimum = target_minimum(target)
    return Floor(effect=minimum, min_effect=minimum)


def recorded_floor(detail, default: Optional[Floor] = None) -> Floor:
    """The floor a timing verdict used, read from its timing detail: the `floor` record where timing wrote one;
    else the target's `min_effect` that the detail carries (null: MIN_EFFECT); else `default` (a detail that has
    neither, from a test's fakes or an older judge), else MIN_EFFECT."""
    extra = getattr(detail, "_extra", None) or {}
    floor = Floor.from_json(getattr(detail, "floor", None) or extra.get("floor"))
    if floor is not None:
        return floor
    minimum = getattr(detail, "min_effect", None)
    if minimum is not None:
        return Floor(effect=float(minimum), min_effect=float(minimum))
    return default or Floor(effect=MIN_EFFECT, min_effect=MIN_EFFECT)


# ---- the floor from A/A controls ----------------------------------------------------------------------------
#
# Every round times the base against an identical copy of itself, judged as a candidate is (judge.control), and
# `judge calibrate` does the same several times. Each such comparison gives one geomean log ratio per process
# pair: what identical code reads in one pair. The floor is how far an identical kernel's estimate can stray:
# the controls' mean (a bias the design did not remove) plus FLOOR_SIGMAS standard errors of an estimate over
# the fewest pairs a verdict can rest on, with the target's minimum effect as its lower limit. The standard
# deviation is taken at the upper end of its own 90% range (few controls know it only roughly: from one control
# of three pairs it is 0.3-2.2 times the true one), so a lucky quiet start does not set a floor too low.
# Simulated (tests/test_stats.py), 4,000 comparisons of identical kernels with per-process offsets, order
# effects and a bias gave no verdict, and 2% slowdowns were found where a process's offset is 0.3% or less.

MIN_PAIRS = 3
"""The fewest process pairs a timing verdict rests on (judge.stages.timing.stage stops no sooner): the floor is
sized for an estimate over this many."""
MAX_PAIRS = 8
"""The most process pairs a comparison takes: one still undecided then is inconclusive."""

CHEAP_CONTROL_SHARE = 0.1
WIDE_FLOOR_MINIMA = 5
"""A control whose own floor is past WIDE_FLOOR_MINIMA times the target's minimum goes on, up to MAX_PAIRS, while its
pairs so far and one more fit CHEAP_CONTROL_SHARE of the stage's limit. From three pairs the spread is known only
within a factor of three (its 90% bound): pmpp/histogram_py's control of three 1.5 s pairs set a floor of 13.8%
(H200, 2026-11-29), under which the round could call no change smaller, where five more pairs would have cost 8 s.
Floors of 2% (matmul_py's, prefixsum_py's) and long pairs (cholesky_py's 10 s, qr_v2's 27 s) stop at three."""
VERDICTS_PER_EXTRA_PAIR = 2
"""A round's control takes at most one pair past MIN_PAIRS for every VERDICTS_PER_EXTRA_PAIR candidates the round may
time, by whichever rule would add it (a wide floor's cheap pairs, or an undecided A/A within its budget); only a
floor past the ceiling goes on regardless. The extra pairs are bought for the verdicts the floor serves, and it is
pooled with every later control of the target and device (FLOOR_HISTORY), so a small round's wide floor is narrowed
by the next round's control. Most of what more pairs buy comes first: the 90% bound on the spread is 3.19 times its
estimate from three pairs, 2.28 from four, 1.94 from five, 1.57 from eight. A two-candidate round's control of
amd/identity (19 us calls) took all eight pairs, 18.5 s of its 36.7 s to the last verdict (H200, 2026-11-30, 08:22);
bounding the wide floor's rule alone, a three-candidate round's took all eight again (11:14), each pair added by
the budget's rule: its A/A interval, [0.994, 1.017], was undecided against the 1% minimum, and eight pairs of 2.6 s
stayed within its 35 s."""
FLOOR_SIGMAS = 4.0
SIGMA_BOUND = 0.1  # the lower tail of chi-square that bounds the standard deviation from above
FLOOR_HISTORY = 20  # the most recent controls of a target and device that set its floor


def floor_from(samples: list[list[float]], minimum: float, min_pairs: int, device: Optional[str] = None) -> Floor:
    """The floor that controls' per-pair log ratios (one list per control) set above `minimum`."""
    import math

    usable = [s for s in samples[-FLOOR_HISTORY:] if len(s) >= 2]
    if not usable:
        return Floor(effect=minimum, min_effect=minimum, device=device)
    from .stats import chi2_low

    spread = sum(sum((x - sum(s) / len(s)) ** 2 for x in s) for s in usable)
    dof = sum(len(s) - 1 for s in usable)
    sd = math.sqrt(spread / chi2_low(SIGMA_BOUND, dof))
    bias = abs(sum(sum(s) for s in usable) / sum(len(s) for s in usable))
    effect = math.expm1(bias + FLOOR_SIGMAS * sd / math.sqrt(min_pairs))
    if effect <= minimum:
        return Floor(effect=minimum, min_effect=minimum, source="min_effect", controls=len(usable), device=device)
    return Floor(effect=round(effect, 5), min_effect=minimum, source="controls", controls=len(usable), device=device)


def enough_pairs(logs: list[float], floor: Floor, elapsed: float, budget: float, control: bool = False,
                 limit: float = math.inf, longest_pair: float = 0.0, serves: int = 0) -> bool:
    """Whether a comparison stops after these pairs' geomean log ratios: at MAX_PAIRS; else once it has MIN_PAIRS
    and is decided or has spent its budget. A control goes on past its budget while the floor its own pairs
    would set is past the ceiling (noise.Floor.too_wide) and the stage's limit leaves room for two more pairs of
    the longest so far: its spread sets the floor of every verdict of the round, and from three pairs one stray
    pair sets a floor that hides a threefold slowdown (a 1.35x pair of identical code beside two of 1.0x sets
    296%), where a few more pairs show it for the stray it was. It also goes on while that floor is wide and its
    pairs are cheap (WIDE_FLOOR_MINIMA, CHEAP_CONTROL_SHARE). Past the ceiling's rule, a control stops at the pairs
    its round's `serves` candidates buy (VERDICTS_PER_EXTRA_PAIR; 0, as for `judge calibrate`: no such bound)."""
    from .stats import settled

    if control and MIN_PAIRS <= len(logs) < MAX_PAIRS:
        own = floor_from([logs], floor.min_effect, MIN_PAIRS)
        if own.too_wide and elapsed + 2 * longest_pair < limit:
            return False
        if serves and len(logs) + 1 - MIN_PAIRS > math.ceil(serves / VERDICTS_PER_EXTRA_PAIR):
            return True
        if own.effect > WIDE_FLOOR_MINIMA * floor.min_effect and elapsed + longest_pair < CHEAP_CONTROL_SHARE * limit:
            return False
    return settled(logs, floor.effect, MIN_PAIRS, MAX_PAIRS) or (len(logs) >= MIN_PAIRS and elapsed > budget)


def kept_words(kept: dict, device: str) -> str:
    """Which earlier A/A measurement of this very base on `device` a round kept instead of timing a control of its
    own (Ledger.measured_base's answer)."""
    where = (f"round {kept['round']}'s control (evaluation #{kept['evaluation_id']})" if "round" in kept
             else f"`judge calibrate` run #{kept['calibration']}")
    return f"{where} timed this very base on {device}, so this round times no control of its own"


def device_name(facts: Optional[dict]) -> str:
    """What a floor belongs to: the GPU's name, or on a CPU target the CPU's model."""
    if facts and facts.get("name"):
        return str(facts["name"])
    return cpu_model()


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (or the platform's word for it)."""
    import platform

    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


# ---- the floor a verdict will use ---------------------------------------------------------------------------


def controls_floor(ledger, target_name: str, minimum: float, device: str, more: tuple[list[float], ...] = ()) -> Floor:
    """The floor that every A/A control and calibration of `target_name` on `device` in the ledger sets: what a
    round's verdicts clear once its own control is in (judge.control.round_floor), and what the next round's will
    clear as far as the ledger can tell before that control has run; with `more`, the per-pair log ratios of
    controls not yet recorded (a control still timing: judge.control.floor_with)."""
    return floor_from(ledger.control_samples(target_name, device) + list(more), minimum, MIN_PAIRS, device)


def next_floor(ledger, target_name: str, minimum: float) -> Floor:
    """The floor the next verdict on `target_name` will use, as the ledger knows it: from its controls on the
    device the latest of them ran on; the target's minimum where none has run. The next round's own control, run
    first, adds one more sample (it may raise or lower this), unless one timed that round's very base on the same
    device already (judge.control.kept_control)."""
    device = ledger.latest_control_device(target_name)
    if device is None:
        return Floor(effect=minimum, min_effect=minimum)
    return controls_floor(ledger, target_name, minimum, device)


def round_floor(ledger, target_name: str, round_id, minimum: float) -> Floor:
    """The floor of a round's verdicts: the one its timed verdicts recorded once it has run, else (a round still
    to run) `next_floor`."""
    recorded = Floor.from_json(ledger.verdict_floor(round_id)) if round_id is not None else None
    return recorded or next_floor(ledger, target_name, minimum)
