"""The JSON API under /api: each endpoint is one library call (judge.actions, judge.participants, the documents),
answered with what the CLI's `--json` prints. Who may call what is judge.participants' to say; what a caller reads of
proposals too (`access`): every call reads the ledger as its caller may (State.session hands out that ledger)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Callable, Optional

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response, StreamingResponse

from .. import actions, round_actions, participants
from ..errors import JudgeError
from ..ledger.migrations import applied
from ..proposals import load_votes, parse_json, proposal_from
from ..records import Shark, parse
from ..report.rendering import render_text
from ..rounds import Settings
from ..targets import find_target
from . import documents
from .state import State, answer, json_text
from .bodies import items_of, proposal_schema, shark_schema, vote_schema
from .jobs import round_work
from .limits import check_quota, read_body
from ..wire import (BaseAnswer, ClearAnswer, DocumentAnswer, ErrorAnswer, Event, JobAnswer, LedgerAnswer,
                    ParticipantAnswer, ProposalAnswer, ProposalRow, StatusAnswer, SubmittedAnswer, VoteAnswer, WhoAmI)

# Every error is the CLI's error object (judge.wire.ErrorAnswer), whatever the status.
router = APIRouter(prefix="/api", responses={"4XX": {"model": ErrorAnswer}, "5XX": {"model": ErrorAnswer}})


def _state(request: Request) -> State:
    return request.app.state.judge


def _read(request: Request, work: Callable) -> Response:
    """A read: `work(ledger, participant)` on this request's ledger, any participant's token."""
    with _state(request).session(request) as (ledger, who):
        return work(ledger, who)


async def _write(request: Request, work: Callable) -> Response:
    """A write: the body read within its limit, then `work(state, ledger, participant, body)` in a worker thread."""
    text = await read_body(request)

    def call() -> Response:
        state = _state(request)
        with state.session(request) as (ledger, who):
            return work(state, ledger, who, parse_json(text, "request body"))

    return await run_in_threadpool(call)


def _format(data: dict, format: str, key: Optional[str] = None) -> Response:
    """A document as JSON (its view, Markdown, file name and charts), or its Markdown alone (`format=md`)."""
    if format == "md":
        return Response(data["markdown"], media_type="text/markdown; charset=utf-8")
    if format != "json":
        raise JudgeError(f"format '{format}': expected json or md")
    return answer(data)


# who, and the ledger -------------------------------------------------------------------------------------------


@router.get("/whoami", summary="The participant this token belongs to", responses={200: {"model": WhoAmI}})
def whoami(request: Request):
    return _read(request, lambda ledger, who: answer({"name": who.name, "role": who.role}))


@router.get("/ledger", summary="The ledger served and its schema (judge init --json)", responses={200: {"model": LedgerAnswer}})
def ledger_info(request: Request):
    return _read(request, lambda ledger, who: answer({"ledger": str(ledger.path), "migrations": applied(ledger.db)}))


def _lookup(view: Any, template: str, format: str) -> Response:
    """A lookup's JSON as `--json` prints it, or (`format=md`) laid out in Markdown by one of judge's templates."""
    if format == "md":
        return Response(render_text(template, view=view), media_type="text/markdown; charset=utf-8")
    if format != "json":
        raise JudgeError(f"format '{format}': expected json or md")
    return answer(view)


@router.get("/status", summary="Counts and where each round stands (judge status --json)", responses={200: {"model": StatusAnswer}})
def status(request: Request, format: str = "json"):
    return _read(request, lambda ledger, who: _lookup(actions.status(ledger), "status.md.j2", format))


@router.get("/proposals", summary="Proposals, latest revisions, latest verdicts (judge list --json)", responses={200: {"model": list[ProposalRow]}})
def list_proposals(request: Request, round: Optional[int] = None, format: str = "json"):
    return _read(request, lambda ledger, who: _lookup(actions.list_proposals(ledger, round), "list.md.j2", format))


@router.get("/proposals/{proposal_id}", summary="One proposal: revisions, evaluations, votes (judge show --json)", responses={200: {"model": ProposalAnswer}})
def show_proposal(request: Request, proposal_id: str, format: str = "json"):
    return _read(request, lambda ledger, who: _lookup(actions.show_proposal(ledger, proposal_id), "show.md.j2", format))


@router.get("/base", summary="A round's base kernel: the exact source a patch for it is made against (judge base --json)",
            responses={200: {"model": BaseAnswer}})
def base(request: Request, target: Optional[str] = None, round: Optional[int] = None):
    """Default: the target's open round, the one that takes proposals; `target` is needed where the ledger has
    several. The source is the file byte for byte; its sha256 is the one the brief names."""
    kernels = _state(request).config.kernels
    return _read(request, lambda ledger, who: answer(BaseAnswer(**round_actions.base(ledger, kernels, target, round))))


@router.get("/sharks", summary="Sharks and their rubrics (judge shark list --json)")
def shark_list(request: Request):
    return _read(request, lambda ledger, who: answer(actions.shark_list(ledger)))


# writes ---------------------------------------------------------------------------------------------------------


def _submit(state: State, ledger, who, data: Any) -> Response:
    who.require_submitter()  # before the body is read, so that a role that may not submit hears only that
    items = []
    for raw, source in items_of(data, "proposal"):
        raw = who.fill_author(raw)
        if isinstance(raw, dict) and "pitch" not in raw:
            raise JudgeError(f"{source}: field 'pitch': required field is missing (every proposal needs a pitch)")
        if not isinstance(raw, dict):
            raise JudgeError(f"{source}: expected one JSON object with the proposal's fields")
        items.append((proposal_from(raw, source, {"pitch": f"{source}: field 'pitch'", "patch": f"{source}: field 'patch'"}),
                      source))
    with state.write_lock, ledger.transaction():
        who.check_proposals(ledger, items)
        if who.role == "contestant":
            check_quota(ledger, who.name, items, state.config.proposals_per_round)
        return answer([asdict(r) for r in actions.submit(ledger, items, state.config.kernels)])


@router.post("/proposals", summary="Submit proposals or revisions (judge submit --json)", openapi_extra=proposal_schema(), responses={200: {"model": list[SubmittedAnswer]}})
async def submit(request: Request):
    """The body: one proposal as `judge submit -` reads it, a list of them (all or none are recorded), or
    {"submissions": [{"source": NAME, "proposal": {...}}]}. A contestant's author is its own name."""
    return await _write(request, _submit)


def _vote(state: State, ledger, who, data: Any) -> Response:
    who.require_voter()
    items = []
    for raw, source in items_of(data, "vote", split=False):
        votes = load_votes(raw, source)
        items.extend((vote, source if len(votes) == 1 else f"{source}[{i}]") for i, vote in enumerate(votes))
    who.check_votes(items)
    with state.write_lock:
        return answer([asdict(c) for c in actions.cast_votes(ledger, items)])


@router.post("/votes", summary="Record votes (judge vote --json)", openapi_extra=vote_schema(), responses={200: {"model": list[VoteAnswer]}})
async def vote(request: Request):
    """The body: votes as `judge vote -` reads them, or {"submissions": [{"source": NAME, "vote": {...}}]}.
    A shark votes only as itself."""
    return await _write(request, _vote)


def _add_sharks(state: State, ledger, who, data: Any) -> Response:
    who.require_organizer("add sharks")
    sharks = []
    for raw, source in items_of(data, "shark"):
        if not isinstance(raw, dict):
            raise JudgeError(f"{source}: expected a table of fields")
        sharks.append((parse(Shark, raw, source), source))
    with state.write_lock:
        return answer(actions.add_sharks(ledger, sharks))


@router.post("/sharks", summary="Add sharks, organizer only (judge shark add --json)", openapi_extra=shark_schema())
async def add_sharks(request: Request):
    return await _write(request, _add_sharks)


class RunRequest(BaseModel):
    """What `judge run` takes over the network; the machine's options (--gpus, --ray, folders) are the server's."""

    model_config = ConfigDict(extra="forbid")
    round: Optional[int] = Field(default=None, ge=1)
    target: Optional[str] = None
    again: bool = False
    workers: Optional[int] = Field(default=None, ge=1)
    timing_budget: Optional[float] = Field(default=None, gt=0)


def _start_round(state: State, ledger, who, data: Any) -> Response:
    who.require_organizer("run a round")
    run = parse(RunRequest, data if isinstance(data, dict) else {"round": data}, "request body")
    config = state.config
    state.jobs.refuse_if_busy()
    target = find_target(run.target, config.kernels) if run.target else None
    # run.round None: each target's own round (judge.schedule), as `judge run` picks it; planned here so that the
    # job names the round it runs and a round that may not run is refused before any job starts
    rounds = {plan.round for plan in round_actions.plan_run(ledger, run.round, target, config.kernels)}
    settings = Settings(kernels_dir=config.kernels, work_dir=config.work_dir, cache_dir=config.cache_dir,
                        workers=run.workers, timing_budget_s=run.timing_budget, again=run.again,
                        ray=config.ray_address is not None, ray_address=config.ray_address or None, gpus=config.gpus)
    job = state.jobs.start(rounds.pop() if len(rounds) == 1 else None, run.target, who.name,
                           round_work(run.round, settings, target, config.out_dir))
    return answer(job.answer(), 202)


@router.post("/rounds", status_code=202, summary="Run a round in the background, organizer only (judge run)",
             responses={202: {"model": JobAnswer}}, openapi_extra={"requestBody": {"content": {"application/json": {"schema": RunRequest.model_json_schema()}}}})
async def run_round(request: Request):
    """Answers 202 with the job; read its progress and, once done, its summaries at /api/jobs/{job}."""
    return await _write(request, _start_round)


# A running round's events name its proposals before they are judged: an organizer reads them all, any other
# participant those about the round itself and about the proposals it may read now (judge.participants.access,
# through the request's VisibleLedger): its own as they are judged, another's once judged, and never the
# round's summaries (they name every proposal, pitches included), which it reads in the scorecard instead.

ROUND_EVENTS = {"probe", "cpu", "floor", "end"}  # about the round and its machine: they name no proposal
JUDGES_OWN = {"(base)", "(control)", "(peer)"}  # what judge times beside the proposals
LONGEST_WAIT_S = 30.0


def _reader_filter(ledger, who) -> Optional[Callable[[Event], bool]]:
    if who.role == "organizer":
        return None
    seen: dict[str, bool] = {}

    def shown(event: Event) -> bool:
        proposal = getattr(event, "proposal", None)
        if not isinstance(proposal, str):
            return event.kind in ROUND_EVENTS  # a kind without a proposal that this judge does not know: left out
        if proposal in JUDGES_OWN:
            return True
        if proposal not in seen:
            seen[proposal] = ledger.latest_revision(proposal) is not None
        return seen[proposal]

    return shown


def _job_answer(ledger, who, job, since: int) -> JobAnswer:
    return job.answer(max(0, since), _reader_filter(ledger, who), summaries=who.role == "organizer")


@router.get("/jobs", summary="The rounds this server ran or runs, each with the events its reader may read",
            responses={200: {"model": list[JobAnswer]}})
def jobs(request: Request):
    return _read(request, lambda ledger, who: answer(
        [_job_answer(ledger, who, j, 0) for j in _state(request).jobs.jobs.values()]))


def _wakes(ledger, who) -> Optional[Callable[[Event], bool]]:
    """What wakes a reader's long poll, judged without the ledger while it waits: an event about the round, or about
    a proposal it could read when the wait began, or a verdict (it may make another's proposal readable). The answer
    is then filtered as every answer is (`_reader_filter`); the others' progress does not wake it, so that a
    contestant following a busy round does not spend its rate on answers with nothing in them."""
    if who.role == "organizer":
        return None
    readable = {r["proposal_id"] for r in ledger.current_revisions()} | JUDGES_OWN

    def wakes(event: Event) -> bool:
        proposal = getattr(event, "proposal", None)
        return event.kind in ROUND_EVENTS or event.kind == "verdict" or proposal in readable

    return wakes


async def _job(request: Request, find: Callable, since: int, wait: float) -> Response:
    """A job's answer from event `since` on; with `wait`, held up to that many seconds (30 at most) until an event
    its reader may read lands past `since` or the job ends: a long poll, so that a follower hears each event as it
    lands. The token is checked first; the wait holds no ledger and no thread."""

    def found():
        with _state(request).session(request) as (ledger, who):
            return find(_state(request).jobs), (_wakes(ledger, who) if wait > 0 else None)

    job, wakes = await run_in_threadpool(found)
    if wait > 0:
        await job.wait(max(0, since), min(wait, LONGEST_WAIT_S), wakes)
    return await run_in_threadpool(_read, request, lambda ledger, who: answer(_job_answer(ledger, who, job, since)))


@router.get("/jobs/latest", summary="The running round, else the last one started; its events as /api/jobs/{job_id}",
            responses={200: {"model": JobAnswer}})
async def latest_job(request: Request, since: int = 0, wait: float = 0):
    return await _job(request, lambda jobs: jobs.latest(), since, wait)


@router.get("/jobs/{job_id}", summary="A round's progress (its events from `since` on, those its reader may read; "
                                      "`wait` seconds for the next) and, once done, its summaries (organizers)",
            responses={200: {"model": JobAnswer}})
async def job(request: Request, job_id: int, since: int = 0, wait: float = 0):
    return await _job(request, lambda jobs: jobs.get(job_id), since, wait)


@router.get("/jobs/{job_id}/events", summary="A round's events as server-sent events, as they land, until it ends "
                                             "(the same events /api/jobs/{job_id} gives its reader)",
            response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {"schema": {"type": "string"}}},
                             "description": "'id: SEQ', 'event: KIND' and 'data: EVENT' (JSON, as in JobAnswer.events) "
                                           "per event; a comment line every 30 s while nothing lands; the stream ends "
                                           "after the event 'end'. Resumes after the Last-Event-ID header's event."}})
async def job_events(request: Request, job_id: int, since: int = 0):
    """For `curl -N` and any language's SSE client: no polling, and a reconnect resumes where it left off."""
    state = _state(request)
    resume = request.headers.get("last-event-id", "")
    since = int(resume) + 1 if resume.isdigit() else max(0, since)

    def found():
        with state.session(request) as (ledger, who):
            return state.jobs.get(job_id), who, _wakes(ledger, who)

    job, who, wakes = await run_in_threadpool(found)

    def page(at: int) -> JobAnswer:
        ledger = state.open_ledger()  # one connection per batch, counted against no rate: the stream was admitted
        try:
            return _job_answer(state.as_read_by(ledger, who), who, job, at)
        finally:
            ledger.close()

    async def stream():
        at = since
        while True:
            await job.wait(at, LONGEST_WAIT_S, wakes)
            ended = job.state != "running"
            answer_ = await run_in_threadpool(page, at)
            for event in answer_.events:
                yield f"id: {event.seq}\nevent: {event.kind}\ndata: {json_text(event)}\n\n"
            if at == answer_.next and not ended:
                yield ": nothing new\n\n"
            at = answer_.next
            if ended and at >= len(job.events):
                return

    return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})


def _clear(evaluation_id: int) -> Callable:
    def work(state: State, ledger, who, data: Any) -> Response:
        who.require_organizer("clear a result")
        note = data.get("note") if isinstance(data, dict) else None
        if not isinstance(note, str):
            raise JudgeError("request body: field 'note': required field is missing (say why the result is real)")
        with state.write_lock:
            result = actions.clear_evaluation(ledger, evaluation_id, note, who.name, state.config.kernels)
            result["reports"] = [str(p) for p in round_actions.refresh_reports(
                ledger, state.config.kernels, result["target"], result["round"], state.config.out_dir)]
            return answer(result)

    return work


@router.post("/evaluations/{evaluation_id}/clear", summary="Clear an implausible result, organizer only (judge clear)", responses={200: {"model": ClearAnswer}})
async def clear(request: Request, evaluation_id: int):
    """The body: {"note": "why the result is real"}; the clearance is recorded as the organizer's."""
    return await _write(request, _clear(evaluation_id))


# participants -------------------------------------------------------------------------------------------------


def _add_participant(state: State, ledger, who, data: Any) -> Response:
    who.require_organizer("add participants")
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not isinstance(data.get("role"), str):
        raise JudgeError("request body: expected {\"name\": NAME, \"role\": \"contestant\" | \"shark\" | \"organizer\"}")
    with state.write_lock:
        return answer(participants.add_participant(ledger, data["name"], data["role"]), 201)


@router.post("/participants", status_code=201, summary="Add a participant, organizer only; its token is in the answer, once",
             responses={201: {"model": ParticipantAnswer}})
async def add_participant(request: Request):
    return await _write(request, _add_participant)


@router.get("/participants", summary="Every participant, revoked ones too, organizer only", responses={200: {"model": list[ParticipantAnswer]}})
def participant_list(request: Request):
    def work(ledger, who):
        who.require_organizer("list participants")
        return answer(participants.participant_list(ledger))

    return _read(request, work)


@router.delete("/participants/{name}", summary="Revoke a participant's token, organizer only", responses={200: {"model": ParticipantAnswer}})
def revoke_participant(request: Request, name: str):
    def work(ledger, who):
        who.require_organizer("revoke participants")
        with _state(request).write_lock:
            return answer(participants.revoke_participant(ledger, name))

    return _read(request, work)


# documents ----------------------------------------------------------------------------------------------------


def _document(request: Request, make: Callable, format: str) -> Response:
    # Its charts are not kept for the pages: they were drawn for this caller, who may see more than a page's reader.
    return _read(request, lambda ledger, who: _format(make(ledger), format))


@router.get("/scorecards", summary="A round's scorecard: view, Markdown, charts (judge report --round)", responses={200: {"model": DocumentAnswer}})
def scorecard(request: Request, round: Optional[int] = None, target: Optional[str] = None, format: str = "json"):
    return _document(request, lambda ledger: documents.scorecard(ledger, round, target), format)


@router.get("/leaderboard", summary="The leaderboard: view, Markdown, charts (judge report --leaderboard)", responses={200: {"model": DocumentAnswer}})
def leaderboard(request: Request, format: str = "json"):
    return _document(request, documents.leaderboard, format)


@router.get("/brief", summary="A round's brief: view and Markdown (judge brief)", responses={200: {"model": DocumentAnswer}})
def brief(request: Request, round: Optional[int] = None, target: Optional[str] = None, format: str = "json"):
    kernels = _state(request).config.kernels
    return _document(request, lambda ledger: documents.brief(ledger, kernels, target, round), format)
