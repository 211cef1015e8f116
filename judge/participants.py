"""Participants and roles: who may do what when judge is reached over the network (`judge serve`).

A participant has a name, one role (contestant, shark or organizer) and a token. `add_participant` makes the token and
returns it once; the ledger keeps only its sha256. A contestant submits and revises only its own proposals
(the author is its name), a shark votes only as itself, and only an organizer runs rounds, clears results and
adds sharks or participants. What each may read of a proposal is `access`'s to say, for every route and page.
Locally, without a server, none of this applies: whoever holds the ledger file is the organizer.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import JudgeError, NotFound

if TYPE_CHECKING:  # the CLI reads ROLES and JUDGED_VISIBLE_TO from here without loading the ledger
    from .ledger import Ledger
    from .records import Proposal, Vote

ROLES = ("contestant", "shark", "organizer")
TOKEN_PREFIX = "judge_"

# What a reader may see of one proposal revision (`access`): all of it, all but its patch, or not that it exists.
FULL, PITCH, HIDDEN = "full", "pitch", "hidden"
# Who sees a judged revision (`judge serve --judged-visible-to`): everyone, the pages without a token included (as
# before proposals had an access rule), or only participants with a token.
JUDGED_VISIBLE_TO = ("everyone", "participants")


class Unauthenticated(JudgeError):
    """A request without a token, or with one that no participant holds (any more): the server answers 401."""


class Forbidden(JudgeError):
    """A participant asked for what its role does not allow, or to act as someone else: the server answers 403."""


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Participant:
    name: str
    role: str

    def require_organizer(self, what: str) -> None:
        """Refuse an organizer's action (running a round, clearing a result, adding sharks or participants)."""
        if self.role != "organizer":
            raise Forbidden(f"only the organizer may {what}: participant '{self.name}' is a {self.role}")

    def require_submitter(self) -> None:
        if self.role not in ("contestant", "organizer"):
            raise Forbidden(f"only contestants and the organizer submit proposals: participant '{self.name}' is a {self.role}")

    def require_voter(self) -> None:
        if self.role not in ("shark", "organizer"):
            raise Forbidden(f"only sharks and the organizer vote: participant '{self.name}' is a {self.role}")

    def fill_author(self, data: dict) -> dict:
        """A contestant's proposal may leave `author` out: its token says who it is."""
        if self.role == "contestant" and isinstance(data, dict) and "author" not in data:
            return {**data, "author": self.name}
        return data

    def check_proposals(self, ledger: Ledger, items: list[tuple[Proposal, str]]) -> None:
        """A contestant submits under its own name, and revises only proposals first submitted under it; a shark
        submits nothing. Call it inside the write transaction, so that no one takes an id between check and write."""
        self.require_submitter()
        if self.role == "organizer":
            return
        for proposal, source in items:
            if proposal.author != self.name:
                raise Forbidden(f"{source}: field 'author': '{proposal.author}' is not you: participant '{self.name}' "
                                f"submits only as '{self.name}' (the author comes from your token)")
            owner = ledger.proposal_owner(proposal.id)
            if owner is not None and owner != self.name:  # not named: the proposal may be one this reader may not see
                raise Forbidden(f"{source}: field 'id': proposal '{proposal.id}' is another participant's: participant "
                                f"'{self.name}' revises only its own proposals (pick another id)")

    def check_votes(self, items: list[tuple[Vote, str]]) -> None:
        """A shark votes only as its own shark; a contestant does not vote."""
        self.require_voter()
        if self.role == "organizer":
            return
        for vote, source in items:
            if vote.shark != self.name:
                raise Forbidden(f"{source}: field 'shark': '{vote.shark}' is not you: participant '{self.name}' "
                                f"votes only as shark '{self.name}'")


def access(reader: "Participant | None", author: str, judged: bool, judged_visible_to: str = "everyone") -> str:
    """What `reader` (None: a request without a token, e.g. a page) may see of a proposal revision by `author`: FULL
    (pitch and patch), PITCH (everything but the patch) or HIDDEN (not even that it exists).

    Until it is judged (its round has run and judged it: judge.ledger's `judged_revision_ids`), a revision is its
    author's and the organizers' (FULL); the sharks see its pitch, which they vote on (PITCH); other contestants and
    readers without a token see nothing. Once judged, it is FULL for whom `judged_visible_to` names, and as before
    for the rest. The one rule every API route, page and CLI command through the server reads proposals by."""
    if judged and (judged_visible_to == "everyone" or reader is not None):
        return FULL
    if reader is None:
        return HIDDEN
    if reader.role == "organizer" or reader.name == author:
        return FULL
    return PITCH if reader.role == "shark" else HIDDEN


def add_participant(ledger: Ledger, name: str, role: str) -> dict:
    """Add a participant; the answer holds its token, which is never shown again (the ledger keeps its sha256)."""
    from .records import SLUG

    if not SLUG.match(name):
        raise JudgeError(f"participant name '{name}': must be a slug: lowercase letters, digits and hyphens "
                         "(it is the author of a contestant's proposals, the name of a shark)")
    if role not in ROLES:
        raise JudgeError(f"role '{role}': must be one of {', '.join(ROLES)}")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ledger.add_participant(name, role, token_sha256(token))
    return {"name": row["name"], "role": row["role"], "token": token, "created_at": row["created_at"]}


def participant_list(ledger: Ledger) -> list[dict]:
    """Every participant ever added, revoked ones included; never a token."""
    return [{"name": r["name"], "role": r["role"], "created_at": r["created_at"], "revoked_at": r["revoked_at"]}
            for r in ledger.participants()]


def revoke_participant(ledger: Ledger, name: str) -> dict:
    """Revoke a participant's token at once; its proposals and votes stay."""
    row = ledger.participant(name)
    if row is None:
        raise NotFound(f"participant '{name}' is not in the ledger, or is revoked already (see 'judge participant list')")
    row = ledger.revoke_participant(row["id"])
    return {"name": row["name"], "role": row["role"], "created_at": row["created_at"], "revoked_at": row["revoked_at"]}


def authenticate(ledger: Ledger, token: str | None) -> Participant:
    """The participant a request's token belongs to; a missing, unknown or revoked token is refused."""
    if not token:
        raise Unauthenticated("no token: send 'Authorization: Bearer TOKEN' (the judge CLI sends JUDGE_TOKEN); "
                              "the organizer gives each participant one with 'judge participant add'")
    row = ledger.participant_by_token(token_sha256(token))
    if row is None:
        raise Unauthenticated("unknown token: no participant of this contest holds it (check JUDGE_TOKEN)")
    if row["revoked_at"] is not None:
        raise Unauthenticated(f"the token of participant '{row['name']}' was revoked at {row['revoked_at']}: "
                              "ask the organizer for a new one")
    return Participant(row["name"], row["role"])
