"""The server's settings and shared state (jobs, rate limiter, charts, the write lock), who a request comes from,
and the JSON answers every endpoint gives: what the API and the pages take from the application."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

from fastapi import Request
from starlette.responses import Response

from ..contain import json_safe
from ..ledger import Ledger
from ..ledger.visible import VisibleLedger
from ..inputs import SERVED
from ..jsonform import jsonable
from ..participants import HIDDEN, Participant, access, authenticate, token_sha256
from .jobs import Jobs
from .limits import RateLimiter


@dataclass
class Config:
    """What `judge serve` was started with: the ledger and targets it serves, where rounds work and write."""

    ledger: Path
    kernels: Path = Path("kernels")
    out_dir: Path = Path("reports")
    work_dir: Path = Path("work")
    cache_dir: Path = Path(".judge-cache")
    rate_limit: int = 120  # requests per contestant's or shark's token in any minute (organizers: no limit)
    proposals_per_round: int = 20  # proposals a contestant may have in one round of one target (revisions are free)
    judged_visible_to: str = "everyone"  # who sees a judged proposal: "everyone" (the pages too) or "participants"
    gpus: Optional[list] = None
    ray_address: Optional[str] = None  # None: no Ray; "": the cluster this machine knows, or a local one


def answer(data: Any, status: int = 200) -> Response:
    """JSON as the CLI's `--json` has it once parsed (judge.jsonform.jsonable: declared forms only, key order kept), every string without
    escapes, control or format characters (bidi overrides, zero-width spaces), as everywhere judge shows text: not
    capped (judge.contain.json_safe)."""
    return Response(json_text(data), status_code=status, media_type="application/json")


def error_answer(message: str, status: int, code: int = 2, headers: Optional[dict] = None) -> Response:
    return Response(json_text({"error": message, "exit": code}), status_code=status, media_type="application/json",
                    headers=headers)


def json_text(data: Any) -> str:
    """The JSON text of every answer (and of each server-sent event)."""
    return json.dumps(json_safe(jsonable(data), capped=False))


class State:
    """What every request shares. Writes from requests take `write_lock` one at a time, so that clients queue here
    rather than in SQLite's busy loop; a round's own writes wait in SQLite (busy_timeout, 60 s)."""

    def __init__(self, config: Config):
        self.config = config
        self.jobs = Jobs(self.open_ledger)
        self.limiter = RateLimiter(config.rate_limit)
        self.write_lock = threading.Lock()
        self.charts: dict[str, bytes] = {}  # the charts of the pages served so far, by file name

    def open_ledger(self) -> Ledger:
        return Ledger(self.config.ledger, create=False)

    @contextlib.contextmanager
    def session(self, request: Request) -> Iterator[tuple[Ledger, Participant]]:
        """The ledger, opened for this request, and the participant its token names (refused: no token, an unknown
        or revoked one, or one past its rate)."""
        ledger = self.open_ledger()
        served = SERVED.set(True)
        try:
            who = authenticate(ledger, bearer(request))
            if who.role != "organizer":
                self.limiter.admit(token_sha256(bearer(request)), who.name)
            yield self.as_read_by(ledger, who), who
        except sqlite3.DatabaseError as error:
            explained = ledger.explain(error)
            if explained is None:
                raise
            raise explained from None
        finally:
            SERVED.reset(served)
            ledger.close()

    @contextlib.contextmanager
    def public(self) -> Iterator[VisibleLedger]:
        """The ledger for a page, as a reader without a token reads it (pages are read-only and need no token)."""
        ledger = self.open_ledger()
        try:
            yield self.as_read_by(ledger, None)
        finally:
            ledger.close()

    def as_read_by(self, ledger: Ledger, reader: Optional[Participant]) -> VisibleLedger:
        """The ledger as `reader` (None: no token) may read it: proposals by judge.participants.access, the ledger's
        path for organizers only. Writes through it reach the ledger; what they read first is read as the reader."""
        def sees(revision: dict, judged: bool) -> bool:
            return access(reader, revision["author"], judged, self.config.judged_visible_to) != HIDDEN

        return VisibleLedger(ledger, sees, shows_path=reader is not None and reader.role == "organizer")


def bearer(request: Request) -> Optional[str]:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None
