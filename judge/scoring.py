"""Rubric arithmetic: weighted totals computed by judge, measurement-bound criteria, stated-total flags.

Totals are exact decimals: a shark's scores and weights are read as written (0.4 is 0.4), so a
total is never off by binary rounding and a stated total is compared with what it should be.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Optional

from .errors import JudgeError
from .records import Outcome, Shark, Vote

SPEEDUP_RULE = (
    "measured speedup s (geometric mean) scores 5 + 5*log2(s), clamped to 0-10 and rounded to 0.01: "
    "0.5x -> 0, 1.0x -> 5, 1.41x -> 7.5, 2x or more -> 10"
)
CORRECTNESS_RULE = (
    "correctness scores 10 when every test passed and 0 otherwise; an incorrect, crashed or "
    "non-compiling kernel gets a total of 0 from a shark whose rubric has a correctness criterion"
)


@dataclass
class Measurement:
    """What the judge measured for a proposal: None where a stage did not run (yet)."""

    correct: Optional[bool] = None
    geomean_speedup: Optional[float] = None


@dataclass
class ScoreLine:
    criterion: str
    weight: Decimal
    score: Optional[Decimal]
    source: str  # "shark", "measured" or "pending"

    @property
    def weighted(self) -> Optional[Decimal]:
        return None if self.score is None else self.weight * self.score


@dataclass
class Scorecard:
    """One shark's scored vote: every line, the total judge computed, and how the stated total compares."""

    shark: str
    proposal: str
    lines: list[ScoreLine]
    total: Optional[Decimal]
    stated_total: Optional[Decimal]
    flag: Optional[str]
    gated: bool
    fund: bool


def speedup_score(geomean: float) -> Decimal:
    """Map a measured geometric-mean speedup to 0-10 by SPEEDUP_RULE (monotone in the speedup)."""
    if not geomean > 0:
        raise ValueError(f"speedup must be positive, got {geomean}")
    raw = 5 + 5 * math.log2(geomean)
    clamped = min(max(raw, 0.0), 10.0)
    return Decimal(repr(clamped)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def check_vote(shark: Shark, vote: Vote, source: str) -> None:
    """Every unbound criterion scored, nothing unknown scored; the message names the file and field."""
    names = {c.name for c in shark.criteria}
    for name in vote.scores:
        if name not in names:
            raise JudgeError(
                f"{source}: field 'scores.{name}': not a criterion of shark '{shark.name}' "
                f"(criteria: {', '.join(sorted(names))})"
            )
    for criterion in shark.criteria:
        if criterion.bound is None and criterion.name not in vote.scores:
            raise JudgeError(f"{source}: field 'scores.{criterion.name}': required by shark '{shark.name}'")


def tolerance(stated: Decimal) -> Decimal:
    """Half a unit in the last place the shark wrote: 8.4 may stand for anything in [8.35, 8.45]."""
    exponent = stated.as_tuple().exponent
    places = -exponent if isinstance(exponent, int) and exponent < 0 else 0
    return Decimal(5) / (Decimal(10) ** (places + 1))


def total_flag(stated: Optional[Decimal], computed: Optional[Decimal]) -> Optional[str]:
    """A message when the stated total is not the computed one up to the stated precision."""
    if stated is None or computed is None:
        return None
    if abs(stated - computed) > tolerance(stated):
        return f"stated {stated}, computed {format_score(computed)}"
    return None


def format_score(value: Optional[Decimal]) -> str:
    if value is None:
        return "pending"
    text = format(value.normalize(), "f")
    return text if "." in text else text + ".0"


def score_vote(shark: Shark, vote: Vote, measurement: Measurement | None = None) -> Scorecard:
    """Compute a vote's total from its scores and the rubric's weights, filling bound criteria from measurements."""
    measurement = measurement or Measurement()
    lines: list[ScoreLine] = []
    gated = False
    for criterion in shark.criteria:
        if criterion.bound == "speedup":
            if measurement.geomean_speedup is not None:
                lines.append(ScoreLine(criterion.name, criterion.weight, speedup_score(measurement.geomean_speedup), "measured"))
            elif measurement.correct is False:
                lines.append(ScoreLine(criterion.name, criterion.weight, Decimal(0), "measured"))
            else:
                lines.append(ScoreLine(criterion.name, criterion.weight, None, "pending"))
        elif criterion.bound == "correctness":
            if measurement.correct is None:
                lines.append(ScoreLine(criterion.name, criterion.weight, None, "pending"))
            else:
                lines.append(ScoreLine(criterion.name, criterion.weight, Decimal(10 if measurement.correct else 0), "measured"))
                gated = gated or not measurement.correct
        else:
            lines.append(ScoreLine(criterion.name, criterion.weight, vote.scores[criterion.name], "shark"))
    if gated:
        total: Optional[Decimal] = Decimal(0)
    elif any(line.score is None for line in lines):
        total = None
    else:
        total = sum((line.weighted for line in lines), Decimal(0))
    return Scorecard(
        shark=shark.name,
        proposal=vote.proposal,
        lines=lines,
        total=total,
        stated_total=vote.stated_total,
        flag=total_flag(vote.stated_total, total),
        gated=gated,
        fund=vote.fund,
    )


MEASURED = (Outcome.FASTER.value, Outcome.SLOWER.value, Outcome.INCONCLUSIVE.value, Outcome.UNCHANGED.value)


def standing(row: dict) -> str:
    """The outcome an evaluation stands at: a person's clearance of an implausible result, else its own."""
    return row.get("cleared_outcome") or row["outcome"]


def standing_reason(row: dict) -> str:
    """The reason of the outcome an evaluation stands at: a cleared one's is its timing verdict's, not the hold's."""
    return (row.get("cleared_reason") or row["reason"]) if row.get("cleared_outcome") else row["reason"]


def measurement(evaluation_row: Optional[dict]) -> "Measurement":
    """What a shark's bound criteria see, from the outcome an evaluation stands at: an implausible kernel
    passed its correctness checks, and its time waits on a person's clearance."""
    outcome = standing(evaluation_row) if evaluation_row else Outcome.NOT_RUN.value
    if outcome == Outcome.NOT_RUN.value:
        return Measurement()
    if outcome in MEASURED:
        return Measurement(correct=True, geomean_speedup=evaluation_row["geomean_speedup"])
    if outcome == Outcome.IMPLAUSIBLE.value:
        return Measurement(correct=True)
    return Measurement(correct=False)
