"""The server's application: its settings, its shared state (jobs, rate limiter, charts, the write lock), who a
request comes from, and every error as the CLI's one-line JSON object with an HTTP status."""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from .. import __version__
from ..errors import JudgeError, NotFound
from ..ledger import Ledger
from ..participants import Forbidden, Participant, Unauthenticated, authenticate, token_sha256
from .jobs import Busy, Jobs
from .limits import RateLimited, RateLimiter, TooLarge

log = logging.getLogger("judge.server")

STATUS = [(Unauthenticated, 401), (Forbidden, 403), (NotFound, 404), (Busy, 409), (TooLarge, 413), (RateLimited, 429)]


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


def _judge_error(request: Request, error: JudgeError) -> Response:
    status = next((code for kind, code in STATUS if isinstance(error, kind)), 400)
    headers = {"Retry-After": str(error.retry_after)} if isinstance(error, RateLimited) else None
    if isinstance(error, Unauthenticated):
        headers = {"WWW-Authenticate": "Bearer"}
    return error_answer(error.message, status, headers=headers)


def _validation_error(request: Request, error: RequestValidationError) -> Response:
    first = error.errors()[0]
    where = " ".join(str(part) for part in first["loc"])
    return error_answer(f"{request.method} {request.url.path}: {where}: {first['msg']}", 400)


def _http_error(request: Request, error: HTTPException) -> Response:
    if error.status_code == 404:
        return error_answer(f"no such endpoint: {request.method} {request.url.path} (see /docs)", 404)
    if error.status_code == 405:
        return error_answer(f"{request.url.path} does not take {request.method} (see /docs)", 405)
    return error_answer(str(error.detail), error.status_code)


def _internal_error(request: Request, error: Exception) -> Response:
    log.exception("internal error on %s %s", request.method, request.url.path)
    return error_answer(f"internal error: {type(error).__name__}: {error}", 500, code=1)


def create_app(config: Config) -> FastAPI:
    """The application `judge serve` runs: the JSON API under /api, the pages under /pages, the OpenAPI schema."""
    from .api import router as api_router
    from .pages import router as pages_router

    app = FastAPI(title="judge", version=__version__,
                  description="The referee of a GPU-kernel optimization contest, over the network. Every /api endpoint "
                              "needs 'Authorization: Bearer TOKEN' (judge participant add); every error is "
                              "{\"error\": \"...\", \"exit\": 2} with an HTTP status.")
    app.state.judge = State(config)
    app.add_exception_handler(JudgeError, _judge_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _internal_error)
    app.include_router(api_router)
    app.include_router(pages_router)
    return app
