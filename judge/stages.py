"""The result every stage returns, so rounds, the ledger and reports treat stages alike."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

STATUSES = ("passed", "failed", "crashed", "timed-out", "tampered", "not-run")
STAGES = ("patch", "screen", "compile", "static", "correctness", "timing")


@dataclass
class StageResult:
    """What one stage did to one candidate: a status, a one-line summary, and JSON detail for the ledger."""

    stage: str
    status: str
    summary: str
    seconds: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)
    log_tail: str = ""

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"stage status must be one of {STATUSES}, got {self.status!r}")

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def not_run(stage: str, reason: str) -> StageResult:
    """A stage that this machine cannot run, with the reason stated for the report."""
    return StageResult(stage=stage, status="not-run", summary=f"not run: {reason}")
