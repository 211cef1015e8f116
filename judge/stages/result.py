"""The result every stage returns, so rounds, the ledger and reports treat stages alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import contain
from .details import Detail, detail_type

STATUSES = ("passed", "failed", "crashed", "timed-out", "tampered", "not-run")
STAGES = ("patch", "screen", "compile", "static", "correctness", "timing")


@dataclass
class StageResult:
    """What one stage did to one candidate: a status, a one-line summary, and its typed detail for the ledger
    (judge/stages/details.py: one type per stage; None stands for that type with nothing recorded)."""

    stage: str
    status: str
    summary: str
    seconds: float = 0.0
    detail: Detail | None = None
    log_tail: str = ""

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"stage status must be one of {STATUSES}, got {self.status!r}")
        kind = detail_type(self.stage)
        if self.detail is None:
            self.detail = kind.from_json({})
        elif not isinstance(self.detail, kind):
            raise TypeError(f"a {self.stage} stage's detail is a {kind.__name__}, got {type(self.detail).__name__}")

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def bounded(self) -> "StageResult":
        """This result as the ledger keeps it: its summary and every string of its detail capped at a line
        (contain.LINE_CAP), its log tail to its last contain.LOG_CAP characters; each cut says how much it left out."""
        detail = self.detail.to_json()
        capped = contain.cap_strings(detail, contain.LINE_CAP)
        return StageResult(self.stage, self.status, contain.cap(self.summary, contain.LINE_CAP), self.seconds,
                           self.detail if capped == detail else type(self.detail).from_json(capped),
                           contain.cap_tail(self.log_tail, contain.LOG_CAP))

    def to_dict(self) -> dict[str, Any]:
        """As `judge show --json` prints it: the detail as the ledger stores it."""
        return {"stage": self.stage, "status": self.status, "summary": self.summary, "seconds": self.seconds,
                "detail": self.detail.to_json(), "log_tail": self.log_tail}


NOT_RUN = "not run: "  # a not-run stage's summary is this and its reason: written by not_run, read by not_run_reason


def not_run(stage: str, reason: str) -> StageResult:
    """A stage that this machine cannot run, with the reason stated for the report."""
    return StageResult(stage=stage, status="not-run", summary=f"{NOT_RUN}{reason}")


def kernel_stages_not_run(reason: str) -> list[StageResult]:
    """A candidate's correctness and timing, neither run here, for one reason (no GPU, a failed base)."""
    return [not_run("correctness", reason), not_run("timing", reason)]


def not_run_reason(summary: str) -> str:
    """The reason of a not-run stage's summary (as not_run wrote it, in this run or in a ledger's row)."""
    return summary.removeprefix(NOT_RUN)
