"""The ledger as one reader may read it: every query that hands back proposal revisions (or rows that name one:
evaluations, votes, authors) leaves out those the reader may not see, so that the server's routes and pages, and the
library calls and reports they make, show a reader only what judge.participants.access allows. Writes go to the
ledger itself, never through this."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

from . import Ledger


class VisibleLedger:
    """`ledger` read through `sees(revision_row, judged) -> bool`, its `path` only where `shows_path`; anything not
    overridden here is the ledger's own (counts, rounds, sharks, runs: no proposal's text). A round's winner is
    judged, so any reader who reads through this may see it (a reader without a token, where judged proposals are
    for participants only, reads no page: judge.server.pages)."""

    def __init__(self, ledger: Ledger, sees: Callable[[dict, bool], bool], shows_path: bool):
        self._ledger = ledger
        self._sees = sees
        self._visible: Optional[set[int]] = None
        # Where the ledger lies on the server's disk is the organizer's to know; others read its file name.
        self.path = ledger.path if shows_path else Path(ledger.path.name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger, name)

    def visible_ids(self) -> set[int]:
        """The ids of the revisions this reader may see (read once per request)."""
        if self._visible is None:
            judged = self._ledger.judged_revision_ids()
            rows = self._ledger.query("select id, proposal_id, revision, author, round, target from revisions")
            self._visible = {r["id"] for r in rows if self._sees(r, r["id"] in judged)}
        return self._visible

    def _keep(self, rows: list[dict], key: str = "id") -> list[dict]:
        visible = self.visible_ids()
        return [r for r in rows if r[key] in visible]

    def counts(self) -> dict[str, int]:
        """The ledger's counts, its proposals, revisions and votes only those this reader may see."""
        counts = dict(self._ledger.counts())
        visible = self.visible_ids()
        rows = self._ledger.query("select id, proposal_id from revisions")
        counts["proposals"] = len({r["proposal_id"] for r in rows if r["id"] in visible})
        counts["revisions"] = len(visible)
        counts["votes"] = sum(1 for r in self._ledger.query("select revision_id from votes") if r["revision_id"] in visible)
        return counts

    # revisions ---------------------------------------------------------------------------------------------------

    def revision_history(self, proposal_id: str) -> list[dict]:
        return self._keep(self._ledger.revision_history(proposal_id))

    def latest_revision(self, proposal_id: str) -> dict | None:
        history = self.revision_history(proposal_id)
        return history[-1] if history else None

    def revision_by_number(self, proposal_id: str, revision: int) -> dict | None:
        row = self._ledger.revision_by_number(proposal_id, revision)
        return row if row is not None and row["id"] in self.visible_ids() else None

    def current_revisions(self, round: int | None = None, target: str | None = None) -> list[dict]:
        """Each proposal's latest revision this reader may see (an earlier one where the latest is hidden)."""
        latest: dict[str, dict] = {}
        for row in self._keep(self._ledger.query("select * from revisions order by proposal_id, revision")):
            latest[row["proposal_id"]] = row
        rows = [r for r in latest.values()
                if (round is None or r["round"] == round) and (target is None or r["target"] == target)]
        return sorted(rows, key=lambda r: (r["round"], r["proposal_id"]))

    def revisions_of_round(self, target: str, round: int) -> list[dict]:
        return self._keep(self._ledger.revisions_of_round(target, round))

    def revisions_up_to_round(self, target: str, round: int) -> list[dict]:
        return self._keep(self._ledger.revisions_up_to_round(target, round))

    def proposal_authors(self, target: str) -> list[dict]:
        rows = self._keep(self._ledger.query("select id, author, proposal_id from revisions where target = ?", (target,)))
        return [{"author": a, "proposal_id": p} for a, p in sorted({(r["author"], r["proposal_id"]) for r in rows})]

    # rows that name a revision -----------------------------------------------------------------------------------

    def evaluations(self, round_id: int) -> list[dict]:
        rows = self._ledger.evaluations(round_id)
        visible = self.visible_ids()
        return [e for e in rows if e["revision_id"] is None or e["revision_id"] in visible]  # base, control, peer

    def latest_candidate_evaluations(self, round_id: int) -> list[dict]:
        return self._keep(self._ledger.latest_candidate_evaluations(round_id), "revision_id")

    def superseded_candidate_evaluations(self, round_id: int) -> list[dict]:
        return self._keep(self._ledger.superseded_candidate_evaluations(round_id), "revision_id")

    def held(self, round_id: int) -> list[dict]:
        return self._keep(self._ledger.held(round_id), "revision_id")

    def latest_evaluation_of_revision(self, revision_id: int) -> dict | None:
        return self._ledger.latest_evaluation_of_revision(revision_id) if revision_id in self.visible_ids() else None

    def evaluations_of_revision(self, revision_id: int) -> list[dict]:
        return self._ledger.evaluations_of_revision(revision_id) if revision_id in self.visible_ids() else []

    def votes(self, round: int | None = None, proposal_id: str | None = None) -> list[dict]:
        return self._keep(self._ledger.votes(round=round, proposal_id=proposal_id), "revision_id")
