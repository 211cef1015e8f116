"""The view of a round's A/A control: what an identical copy of the base read when judged as a candidate is, the
noise floor the round's verdicts cleared, and whether the round was noisy enough to say so at the top."""

from __future__ import annotations

import math
from typing import Optional

from ..ledger import Ledger
from ..noise import Floor, kept_words

# A round is called noisy where identical code's interval reaches this far from 1 (either way), or where the
# floor its controls set is this many times the target's own minimum.
NOISY_REACH = 0.05
NOISY_FLOOR_TIMES = 3.0


def control_view(ledger: Ledger, round_row: dict, floor: Optional[Floor]) -> Optional[dict]:
    """The round's latest control and the floor of its verdicts; None where no control was recorded."""
    row = ledger.control_evaluation(round_row["id"])
    if row is None:
        return kept_view(ledger, round_row, floor)
    timing = next((s for s in ledger.stage_results(row["id"]) if s.stage == "timing"), None)
    detail = timing.detail if timing is not None and timing.status == "passed" else None
    low, high = row["geomean_ci_low"], row["geomean_ci_high"]
    reach = max(abs(math.log(low)), abs(math.log(high))) if low and high else None
    view = {"evaluation_id": row["id"], "kept": "", "outcome": row["outcome"], "reason": row["reason"],
            "geomean": row["geomean_speedup"], "ci": [low, high] if low and high else None,
            "pairs": detail.pairs if detail is not None else None,
            "pair_geomeans": detail.pair_geomeans if detail is not None else None,
            "floor": floor.view() if floor else None}
    view["noisy"] = noisy_words(floor, f"identical code read {low:.3f}x to {high:.3f}x"
                                if reach is not None and reach > math.log1p(NOISY_REACH) else "")
    return view


def noisy_words(floor: Optional[Floor], control_reach: str = "") -> str:
    """Why the round is called noisy at the top of its page: how far its own control strayed (`control_reach`,
    where it timed one), and a floor far past the target's minimum; "" where it is not."""
    noisy = [control_reach] if control_reach else []
    if floor is not None and floor.effect > NOISY_FLOOR_TIMES * floor.min_effect:
        noisy.append(f"verdicts needed a change of {floor.percent()}, {floor.effect / floor.min_effect:.0f} times the "
                     f"target's minimum")
    return "; ".join(noisy)


def kept_view(ledger: Ledger, round_row: dict, floor: Optional[Floor]) -> Optional[dict]:
    """A round that timed no control of its own: the earlier control or calibration of this very base on the device
    its verdicts were timed on, which it kept (judge.control.kept_control: the latest one finished when the round's
    base had been checked, not one a later round or calibration timed); None where it timed nothing."""
    base = ledger.latest_evaluation(round_row["id"], None, subject="base")
    if floor is None or not floor.device or base is None:
        return None
    kept = ledger.measured_base(round_row["target"], round_row["base_sha256"], floor.device, round_row["id"],
                                before=base["finished_at"])
    if kept is None:
        return None
    return {"kept": kept_words(kept, floor.device),
            "floor": floor.view(), "noisy": noisy_words(floor), "kept_from": kept}


def round_floor(ledger: Ledger, round_id: int) -> Optional[Floor]:
    """The floor the round's candidates' timing verdicts recorded (the latest one)."""
    return Floor.from_json(ledger.verdict_floor(round_id))
