"""What the brief and the scorecard show of a base's profile (judge.stages.profile): the latest stored profile of
that exact kernel text, on whichever device profiled it, a usable one before the latest failure's line."""

from __future__ import annotations

from typing import Optional

from ..ledger import sha256
from ..stages.profile.model import Profile

KERNELS_SHOWN = 8


def profile_view(ledger, target_name: str, source: str) -> Optional[dict]:
    """The profile's JSON with its `line`, device and date, each benchmark's kernels cut to KERNELS_SHOWN (with
    `more`, how many were left out); None where this text was never profiled."""
    sha = sha256(source)
    stored = ledger.stored_profile(target_name, sha) or ledger.stored_profile(target_name, sha, usable_only=False)
    if stored is None:
        return None
    profile = Profile.from_json({k: v for k, v in stored.items() if k not in ("id", "created_at")})
    data = profile.to_json()
    for bench in data["benchmarks"]:
        bench["more"] = max(0, len(bench["kernels"]) - KERNELS_SHOWN)
        bench["kernels"] = bench["kernels"][:KERNELS_SHOWN]
    return {**data, "line": profile.line, "device": stored["device"], "created_at": stored["created_at"],
            "from_ncu": profile.tool == "ncu"}
