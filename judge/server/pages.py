"""The pages for people under /pages: the contest, the leaderboard, each round's scorecard, each target's brief
and each proposal (proposal-ID.html, a link that stays) as HTML, with their charts beside them. Read-only, and they need no token: they show what a reader without a
token may see (judge.participants.access: judged proposals, none before they are judged). Where judged proposals are
for participants only (`judge serve --judged-visible-to participants`) there are no pages: the API serves them."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ..errors import NotFound
from ..participants import Unauthenticated
from . import documents
from .state import State

router = APIRouter(include_in_schema=False)


def _state(request: Request) -> State:
    return request.app.state.judge


def _html(page: str) -> HTMLResponse:
    # No script runs on judge's pages, none may be brought in, and images come only from here.
    return HTMLResponse(page, headers={"Content-Security-Policy": "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'",
                                       "X-Content-Type-Options": "nosniff"})


@router.get("/")
def root():
    return RedirectResponse("/pages/index.html")


@router.get("/pages/")
def pages_root():
    return RedirectResponse("/pages/index.html")


@router.get("/pages/{name}")
async def page(request: Request, name: str):
    state = _state(request)
    return await run_in_threadpool(_page, state, name)


def _page(state: State, name: str) -> Response:
    if state.config.judged_visible_to != "everyone":
        raise Unauthenticated("this contest shows its proposals to participants only ('judge serve --judged-visible-to "
                              "participants'): read them through /api with a token (the judge CLI's --server)")
    if name.endswith(".svg"):
        return _chart(state, name)
    with state.public() as ledger:
        if name == "index.html":
            return _html(documents.index_page(ledger))
        if name == "leaderboard.html":
            page, charts = documents.leaderboard_page(ledger)
        elif name.startswith("round-") and name.endswith(".html") and name[6:-5].isdigit():
            page, charts = documents.round_page(ledger, int(name[6:-5]))
        elif name.startswith("proposal-") and name.endswith(".html"):
            return _html(documents.proposal_page(ledger, name[len("proposal-"):-5]))
        elif name.startswith("brief-") and name.endswith(".html"):
            return _html(documents.brief_page(ledger, state.config.kernels, name[6:-5]))
        else:
            raise NotFound(f"no page '{name}' (see /pages/index.html)")
    state.charts.update(charts)
    return _html(page)


def _chart(state: State, name: str) -> Response:
    """A chart a page showed; one not drawn since the server started is drawn with every page that may show it."""
    if name not in state.charts:
        with state.public() as ledger:
            state.charts.update(documents.leaderboard_page(ledger)[1])
            for n in sorted({r["round"] for r in ledger.rounds()}):
                state.charts.update(documents.round_page(ledger, n)[1])
    if name not in state.charts:
        raise NotFound(f"no chart '{name}'")
    return Response(state.charts[name], media_type="image/svg+xml", headers={"X-Content-Type-Options": "nosniff"})
