"""The noise floor: the smallest change of the geomean that a verdict must clear to say faster or slower.

One owner for the rule and for its words. A verdict records the floor it used (`Floor.to_json` in the timing
detail), and every report, the brief, the CLI and JSON read that record or `Floor.words()`, never a constant
of their own. The target's `min_effect` (judge.toml) is the floor's lower limit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional

MIN_EFFECT = 0.01
"""The floor's lower limit where a target sets none. Batch medians drift by 0.2-0.8% between runs on an H100,
and the same round run twice on two machines (2026-11-23) measured one candidate at 1.006x [1.005, 1.007] and
then 0.998x [0.997, 0.999]: a change under 1% is not one judge can stand behind."""


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

    def percent(self) -> str:
        return f"{self.effect:.1%}"

    def words(self) -> str:
        """One line: the floor and where it came from."""
        if self.source == "controls":
            on = f" on {self.device}" if self.device else ""
            return (f"{self.percent()}, set by {self.controls} A/A control{'s' if self.controls != 1 else ''}{on} "
                    f"(an identical copy of the base judged the same way); the target's minimum is "
                    f"{self.min_effect:.1%}")
        return f"{self.percent()}, the target's minimum effect (no A/A control has raised it)"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

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
