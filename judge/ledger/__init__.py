"""The SQLite ledger: every proposal revision, shark, vote, round, run and evaluation judge has seen.

Results are append-only: a re-run adds a new evaluation and never rewrites an old one. Each
multi-row write is one transaction, so killing judge at any moment loses no finished result.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

import sqlite_utils

from .. import __version__
from ..errors import JudgeError
from .migrations import migrate
from ..records import Proposal, Shark, Vote
from .common import _json, now, sha256  # noqa: F401 (now, sha256: judge.rounds and judge.actions)
from .evaluations import EvaluationRecords
from .rows import RoundRow
from .noise import NoiseRecords
from .participants import ParticipantRecords
from .profiles import ProfileRecords


@dataclass
class Submitted:
    """What `submit` did: a new proposal, a new revision of one, or nothing (same content as the latest)."""

    proposal_id: str
    revision: int
    revision_id: int
    status: str  # "new" | "revised" | "unchanged"


BUSY_S = 60  # how long a write waits for another process's write lock before it fails


class Ledger(EvaluationRecords, NoiseRecords, ParticipantRecords, ProfileRecords):
    """One ledger.db: open it, and every table is migrated to the current schema. A write that has to wait for
    another process's lock calls `on_wait(ledger)` first, and the wait adds to `waited_s`."""

    on_wait: Optional[Callable[["Ledger"], None]] = None
    waited_s: float = 0.0

    def __init__(self, path: str | Path, create: bool = True):
        """Open the ledger, creating it only if `create` (so that a mistyped path that is only read is an error,
        not an empty ledger); a file we may not write is opened read-only, so that reading it still works."""
        self.path = Path(path)
        exists = self.path.exists()
        if not exists and not create:
            raise JudgeError(f"{self.path}: no ledger here (create one with 'judge init'; --ledger or JUDGE_LEDGER picks another)")
        if exists and not self.path.is_file():
            raise JudgeError(f"{self.path}: not a ledger (not a regular file)")
        writable = not exists or os.access(self.path, os.W_OK)
        try:
            conn = sqlite3.connect(str(self.path) if writable else f"{self.path.absolute().as_uri()}?mode=ro",
                                   timeout=BUSY_S, uri=not writable)
        except sqlite3.OperationalError as error:
            raise JudgeError(f"{self.path}: cannot open ledger: {error}") from None
        self.db = sqlite_utils.Database(conn)
        try:
            self.db.execute(f"PRAGMA busy_timeout = {BUSY_S * 1000}")
            self.db.execute("PRAGMA foreign_keys = ON")
            migrate(self.db, str(self.path))  # refuses a later judge's ledger before writing anything
            if writable:
                self.db.execute("PRAGMA journal_mode = WAL")
        except sqlite3.DatabaseError as error:
            conn.close()
            raise (self.explain(error) or JudgeError(f"{self.path}: cannot open ledger: {error}")) from None
        except JudgeError:
            conn.close()
            raise

    def close(self) -> None:
        self.db.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite_utils.Database]:
        """One write transaction, taken immediately so two processes queue instead of failing."""
        if self.db.conn.in_transaction:
            with self.db.atomic():
                yield self.db
            return
        self._begin()
        try:
            yield self.db
        except BaseException:
            if self.db.conn.in_transaction:
                self.db.execute("ROLLBACK")
            raise
        else:
            self.db.execute("COMMIT")

    def _begin(self) -> None:
        """BEGIN IMMEDIATE at once where no other process writes; else say so (on_wait), wait, and count the wait."""
        self.db.execute("PRAGMA busy_timeout = 0")
        try:
            self.db.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as error:
            if getattr(error, "sqlite_errorname", "") != "SQLITE_BUSY":
                raise
        finally:
            self.db.execute(f"PRAGMA busy_timeout = {BUSY_S * 1000}")
        if self.on_wait is not None:
            self.on_wait(self)
        start = time.monotonic()
        try:
            self.db.execute("BEGIN IMMEDIATE")
        finally:
            self.waited_s += time.monotonic() - start

    def query(self, sql: str, params: dict | tuple = ()) -> list[dict]:
        return list(self.db.query(sql, params))

    # proposals ------------------------------------------------------------

    def submit(self, proposal: Proposal, source: str) -> Submitted:
        """Record a proposal; changed content becomes a new revision, nothing is overwritten. Whether its round takes
        proposals is judge.schedule's to say (actions.submit asks it, again inside its write transaction)."""
        digest = _digest(proposal)
        with self.transaction() as db:
            latest = self.latest_revision(proposal.id)
            if latest and latest["content_sha256"] == digest:
                return Submitted(proposal.id, latest["revision"], latest["id"], "unchanged")
            if latest is None:
                db["proposals"].insert(
                    {"id": proposal.id, "author": proposal.author, "first_round": proposal.round, "created_at": now()}
                )
            number = 1 if latest is None else latest["revision"] + 1
            claim = proposal.claim
            row = {
                "proposal_id": proposal.id,
                "revision": number,
                "round": proposal.round,
                "title": proposal.title,
                "author": proposal.author,
                "target": proposal.target,
                "category": proposal.category,
                "confidence": proposal.confidence,
                "parent": proposal.parent,
                "claim_low": claim.low if claim else None,
                "claim_high": claim.high if claim else None,
                "claim_json": _json(claim.model_dump(mode="json")) if claim else None,
                "risks_json": _json(proposal.risks),
                "references_json": _json(proposal.references),
                "pitch": proposal.pitch,
                "patch": proposal.patch if proposal.has_patch else None,
                "content_sha256": digest,
                "source": source,
                "submitted_at": now(),
            }
            revision_id = db["revisions"].insert(row).last_pk
        return Submitted(proposal.id, number, revision_id, "new" if latest is None else "revised")

    def unchanged(self, proposal: Proposal) -> bool:
        """Whether the proposal's latest revision has exactly this content (submitting it again writes nothing)."""
        latest = self.latest_revision(proposal.id)
        return latest is not None and latest["content_sha256"] == _digest(proposal)

    def latest_revision(self, proposal_id: str) -> dict | None:
        rows = self.query(
            "select * from revisions where proposal_id = ? order by revision desc limit 1", (proposal_id,)
        )
        return rows[0] if rows else None

    def revision(self, revision_id: int) -> dict:
        return self.db["revisions"].get(revision_id)

    def revision_by_number(self, proposal_id: str, revision: int) -> dict | None:
        rows = self.query("select * from revisions where proposal_id = ? and revision = ?", (proposal_id, revision))
        return rows[0] if rows else None

    def counts(self) -> dict[str, int]:
        """Rows per table of what users record, for `judge status`."""
        return {name: self.query(f"select count(*) as n from {name}")[0]["n"]
                for name in ("proposals", "revisions", "sharks", "votes", "evaluations", "timings")}

    def recent_runs(self, limit: int = 5) -> list[dict]:
        return self.query("select id, status, started_at, finished_at from runs order by id desc limit ?", (limit,))

    def latest_round_number(self) -> int | None:
        """The latest round that has run (has a rounds row)."""
        return self.query("select max(round) as r from rounds")[0]["r"]

    def latest_proposal_round(self) -> int | None:
        """The latest round any proposal revision was submitted for."""
        return self.query("select max(round) as r from revisions")[0]["r"]

    def revision_history(self, proposal_id: str) -> list[dict]:
        return self.query("select * from revisions where proposal_id = ? order by revision", (proposal_id,))

    def current_revisions(self, round: int | None = None, target: str | None = None) -> list[dict]:
        """The latest revision of each proposal, optionally only those of one round and target."""
        sql = """
            select r.* from revisions r
            join (select proposal_id, max(revision) as revision from revisions group by proposal_id) latest
              on latest.proposal_id = r.proposal_id and latest.revision = r.revision
            where (:round is null or r.round = :round) and (:target is null or r.target = :target)
            order by r.round, r.proposal_id
        """
        return self.query(sql, {"round": round, "target": target})

    # sharks and votes -----------------------------------------------------

    def add_shark(self, shark: Shark, source: str) -> tuple[int, int, str]:
        """Record a shark; a changed rubric becomes a new version, earlier votes keep theirs."""
        content = shark.model_dump(mode="json")
        digest = sha256(_json(content))
        with self.transaction() as db:
            rows = self.query("select * from sharks where name = ? order by version desc limit 1", (shark.name,))
            if rows and rows[0]["content_sha256"] == digest:
                return rows[0]["id"], rows[0]["version"], "unchanged"
            version = rows[0]["version"] + 1 if rows else 1
            shark_id = db["sharks"].insert(
                {
                    "name": shark.name,
                    "version": version,
                    "title": shark.title,
                    "description": shark.description,
                    "rubric_json": _json([c.model_dump(mode="json") for c in shark.criteria]),
                    "content_sha256": digest,
                    "created_at": now(),
                }
            ).last_pk
        return shark_id, version, "new" if not rows else "revised"

    def shark(self, name: str, version: int | None = None) -> tuple[dict, Shark]:
        if version is None:
            rows = self.query("select * from sharks where name = ? order by version desc limit 1", (name,))
        else:
            rows = self.query("select * from sharks where name = ? and version = ?", (name, version))
        if not rows:
            raise JudgeError(f"shark '{name}' is not in the ledger (add it with 'judge shark add FILE')")
        return rows[0], shark_from_row(rows[0])

    def shark_by_id(self, shark_id: int) -> tuple[dict, Shark]:
        row = self.db["sharks"].get(shark_id)
        return row, shark_from_row(row)

    def sharks(self) -> list[dict]:
        return self.query(
            "select s.* from sharks s join (select name, max(version) v from sharks group by name) l "
            "on l.name = s.name and l.v = s.version order by s.name"
        )

    def cast_vote(self, vote: Vote, shark_id: int, revision_id: int, round: int, source: str) -> tuple[int, str]:
        """Record a vote; the same vote again is 'unchanged', a changed one is a new row that supersedes."""
        row = {
            "shark_id": shark_id,
            "revision_id": revision_id,
            "proposal_id": vote.proposal,
            "round": round,
            "scores_json": _json({k: str(v) for k, v in vote.scores.items()}),
            "fund": int(vote.fund),
            "notes": vote.notes,
            "stated_total": str(vote.stated_total) if vote.stated_total is not None else None,
        }
        with self.transaction() as db:
            latest = self.query(
                "select * from votes where shark_id = ? and revision_id = ? order by id desc limit 1",
                (shark_id, revision_id),
            )
            if latest and all(latest[0][k] == v for k, v in row.items()):
                return latest[0]["id"], "unchanged"
            vote_id = db["votes"].insert({**row, "source": source, "cast_at": now()}).last_pk
        return vote_id, "new" if not latest else "revised"

    def votes(self, round: int | None = None, proposal_id: str | None = None) -> list[dict]:
        """Each shark's latest vote per proposal revision (a re-vote is kept but supersedes the earlier)."""
        sql = """
            select v.*, s.name as shark_name, s.version as shark_version from votes v
            join sharks s on s.id = v.shark_id
            where v.id in (select max(v2.id) from votes v2 join sharks s2 on s2.id = v2.shark_id
                           group by s2.name, v2.revision_id)
              and (:round is null or v.round = :round)
              and (:proposal is null or v.proposal_id = :proposal)
            order by v.round, v.proposal_id, s.name
        """
        return self.query(sql, {"round": round, "proposal": proposal_id})

    # rounds and runs -------------------------------------------------------

    def round_row(self, target: str, round: int) -> RoundRow | None:
        rows = self.query("select * from rounds where target = ? and round = ?", (target, round))
        return rows[0] if rows else None

    def rounds(self, target: str | None = None) -> list[RoundRow]:
        return self.query(
            "select * from rounds where (:t is null or target = :t) order by target, round", {"t": target}
        )

    def create_round(self, target: str, round: int, base_source: str, base_origin: str) -> RoundRow:
        """Freeze a round's base kernel the first time the round runs; later calls return it unchanged."""
        with self.transaction() as db:
            existing = self.round_row(target, round)
            if existing:
                return existing
            db["rounds"].insert(
                {
                    "target": target,
                    "round": round,
                    "base_sha256": sha256(base_source),
                    "base_source": base_source,
                    "base_origin": base_origin,
                    "created_at": now(),
                }
            )
        return self.round_row(target, round)

    def set_winner(self, round_id: int, revision_id: int | None) -> None:
        with self.transaction() as db:
            db["rounds"].update(round_id, {"winner_revision_id": revision_id})

    def start_run(self, round_id: int, argv: list[str], check: Optional[Callable[["Ledger"], None]] = None) -> int:
        """Record that this process runs the round, the lock of `judge run`: refused while a live judge process on
        this host runs it (checked and inserted in one write transaction, so two starting together cannot both pass);
        `check(ledger)`, run in the same transaction, may refuse it too (judge.schedule: a round closed meanwhile)."""
        with self.transaction() as db:
            running = self.running_run(round_id)
            if running:
                raise JudgeError(self.running_message(running))
            if check is not None:
                check(self)
            return db["runs"].insert(
                {
                    "round_id": round_id,
                    "status": "running",
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "argv_json": _json(argv),
                    "judge_version": __version__,
                    "started_at": now(),
                }
            ).last_pk

    def finish_run(self, run_id: int, status: str) -> None:
        with self.transaction() as db:
            db["runs"].update(run_id, {"status": status, "finished_at": now()})

    def mark_interrupted_runs(self) -> int:
        """Runs left 'running' by a process on this host that no longer exists were killed: say so."""
        host = socket.gethostname()
        stale = []
        for row in self.query("select id, pid, host from runs where status = 'running'"):
            if row["host"] == host and row["pid"] != os.getpid() and not _alive(row["pid"]):
                stale.append(row["id"])
        if stale:
            with self.transaction() as db:
                for run_id in stale:
                    db["runs"].update(run_id, {"status": "interrupted"})
        return len(stale)

    def running_run(self, round_id: int) -> dict | None:
        """The run of this round by another judge process on this host that is still alive, if any. A run left
        'running' on another host cannot be checked, and (as in mark_interrupted_runs) does not count."""
        host = socket.gethostname()
        rows = self.query(
            "select r.id, r.pid, r.host, r.started_at, d.target, d.round from runs r join rounds d on d.id = r.round_id "
            "where r.status = 'running' and r.round_id = ? order by r.id", (round_id,))
        return next((r for r in rows if r["host"] == host and r["pid"] != os.getpid() and _alive(r["pid"])), None)

    @staticmethod
    def running_message(row: dict) -> str:
        return (f"round {row['round']} of {row['target']} is already being run by judge pid {row['pid']} "
                f"(started {row['started_at']}): wait for it to finish, or stop that process")

    def explain(self, error: sqlite3.DatabaseError) -> JudgeError | None:
        """SQLite's error as one line naming the ledger where it is the user's to fix; None for judge's own bugs."""
        name = getattr(error, "sqlite_errorname", "") or ""
        if name.startswith("SQLITE_READONLY"):
            return JudgeError(f"{self.path}: the ledger is read-only, nothing was written ({error})")
        if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
            return JudgeError(f"{self.path}: the ledger is locked by another judge process, nothing was written ({error})")
        if name.startswith(("SQLITE_NOTADB", "SQLITE_CORRUPT")):
            return JudgeError(f"{self.path}: not a judge ledger (SQLite: {error})")
        if name.startswith(("SQLITE_CANTOPEN", "SQLITE_IOERR", "SQLITE_FULL", "SQLITE_PERM")):
            return JudgeError(f"{self.path}: cannot use the ledger ({error})")
        return None

    # evaluations ----------------------------------------------------------


    # what the reports ask ------------------------------------------------------


def shark_from_row(row: dict) -> Shark:
    return Shark.model_validate(
        {
            "name": row["name"],
            "title": row["title"] or "",
            "description": row["description"] or "",
            "criteria": json.loads(row["rubric_json"]),
        }
    )


def _digest(proposal: Proposal) -> str:
    return sha256(_json(proposal.model_dump(mode="json")))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
