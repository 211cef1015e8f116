"""The ledger's participants: who may reach judge over the network (`judge serve`), in which role, and the
sha256 of each one's token (the token itself is never stored)."""

from __future__ import annotations

from ..errors import JudgeError
from .common import now


class ParticipantRecords:
    """Mixed into Ledger: the SQL of the `participants` table."""

    def add_participant(self, name: str, role: str, token_sha256: str) -> dict:
        """Record a participant; refused while a participant of that name is not revoked (checked in the write)."""
        with self.transaction() as db:
            active = self.participant(name)
            if active is not None:
                raise JudgeError(f"participant '{name}' exists already, as a {active['role']} "
                                 f"(revoke it first to give it a new token: 'judge participant revoke {name}')")
            row_id = db["participants"].insert(
                {"name": name, "role": role, "token_sha256": token_sha256, "created_at": now()}).last_pk
        return self.db["participants"].get(row_id)

    def participant(self, name: str) -> dict | None:
        """The participant of this name that is not revoked, if any."""
        rows = self.query("select * from participants where name = ? and revoked_at is null", (name,))
        return rows[0] if rows else None

    def participant_by_token(self, token_sha256: str) -> dict | None:
        rows = self.query("select * from participants where token_sha256 = ?", (token_sha256,))
        return rows[0] if rows else None

    def participants(self) -> list[dict]:
        return self.query("select id, name, role, created_at, revoked_at from participants order by id")

    def revoke_participant(self, row_id: int) -> dict:
        with self.transaction() as db:
            db["participants"].update(row_id, {"revoked_at": now()})
        return self.db["participants"].get(row_id)

    def proposals_in_round(self, author: str, target: str, round: int) -> set[str]:
        """The proposals `author` has a revision of in one round of one target (what a contestant's quota counts)."""
        rows = self.query("select distinct proposal_id from revisions where author = ? and target = ? and round = ?",
                          (author, target, round))
        return {r["proposal_id"] for r in rows}

    def proposal_owner(self, proposal_id: str) -> str | None:
        """The author a proposal was first submitted under: the one participant who may revise it."""
        rows = self.query("select author from proposals where id = ?", (proposal_id,))
        return rows[0]["author"] if rows else None
