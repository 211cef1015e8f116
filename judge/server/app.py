"""The server's application: its routers, and every error as the CLI's one-line JSON object with an HTTP status
(its settings and shared state are judge.server.state's)."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from .. import __version__
from ..errors import JudgeError, NotFound
from ..participants import Forbidden, Unauthenticated
from .jobs import Busy
from .limits import RateLimited, TooLarge
from .state import Config, State, error_answer

log = logging.getLogger("judge.server")

STATUS = [(Unauthenticated, 401), (Forbidden, 403), (NotFound, 404), (Busy, 409), (TooLarge, 413), (RateLimited, 429)]


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
