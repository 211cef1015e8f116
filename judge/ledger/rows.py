"""The rows the ledger hands back, by kind: their columns as judge.ledger.migrations makes them. Types only: a row
is the dict sqlite-utils returns, read by these keys."""

from __future__ import annotations

from typing import Optional, TypedDict


class RoundRow(TypedDict):
    """A row of `rounds`: one round of one target and its frozen base."""

    id: int
    target: str
    round: int
    base_sha256: str
    base_source: str
    base_origin: str
    winner_revision_id: Optional[int]
    created_at: str


class EvaluationRow(TypedDict):
    """A row of `evaluations`: one finished evaluation of a candidate, the base, the control or the peer."""

    id: int
    run_id: int
    round_id: int
    revision_id: Optional[int]  # None for the base, the control and the peer
    subject: str  # 'candidate', 'base', 'control' or 'peer'
    kernel_sha256: Optional[str]
    outcome: str  # judge.records.Outcome's value
    reason: str
    geomean_speedup: Optional[float]
    geomean_ci_low: Optional[float]
    geomean_ci_high: Optional[float]
    device_json: Optional[str]
    started_at: str
    finished_at: str
    confinement: Optional[str]  # the line a report shows (judge.report.formatting.confinement_summary)


class WinnerRow(EvaluationRow):
    """An evaluation with its revision's proposal, number and patch (Ledger.round_winner)."""

    proposal_id: str
    revision: int
    patch: Optional[str]


class ClearedEvaluationRow(EvaluationRow):
    """An evaluation with the outcome and reason a person cleared it to; both None when nobody did."""

    cleared_outcome: Optional[str]
    cleared_reason: Optional[str]


class CandidateEvaluationRow(ClearedEvaluationRow):
    """A candidate's evaluation with its revision's fields (Ledger.latest_candidate_evaluations)."""

    proposal_id: str
    revision: int
    author: str
    title: str
    claim_low: Optional[float]
    claim_high: Optional[float]
