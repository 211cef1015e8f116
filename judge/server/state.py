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

from ..ledger import Ledger
from ..participants import Participant, authenticate, token_sha256
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
    rate_limit: int = 600  # requests per token in any minute
    gpus: Optional[list] = None
    ray_address: Optional[str] = None  # None: no Ray; "": the cluster this machine knows, or a local one


def answer(data: Any, status: int = 200) -> Response:
    """JSON exactly as the CLI's `--json` has it once parsed (non-JSON values as str, key order kept)."""
    return Response(json.dumps(data, default=str), status_code=status, media_type="application/json")


def error_answer(message: str, status: int, code: int = 2, headers: Optional[dict] = None) -> Response:
    return Response(json.dumps({"error": message, "exit": code}), status_code=status, media_type="application/json",
                    headers=headers)


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
        try:
            who = authenticate(ledger, bearer(request))
            self.limiter.admit(token_sha256(bearer(request)), who.name)
            yield ledger, who
        except sqlite3.DatabaseError as error:
            explained = ledger.explain(error)
            if explained is None:
                raise
            raise explained from None
        finally:
            ledger.close()

    @contextlib.contextmanager
    def public(self) -> Iterator[Ledger]:
        """The ledger for a page (pages are read-only and need no token)."""
        ledger = self.open_ledger()
        try:
            yield ledger
        finally:
            ledger.close()


def bearer(request: Request) -> Optional[str]:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None
