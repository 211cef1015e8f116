"""What crosses the network between `judge serve` and the CLI as its client: declared pydantic models, shared by
both ends, and judge.jsonform's `jsonable`, the one way any value becomes JSON (the server's answers and `--json`
alike).

Nothing is turned into a string because JSON cannot hold it (`json.dumps(default=str)` sent the noise floor as a
Python repr, and a client that read it as the floor crashed a round's progress): a value judge does not know how to
send is a TypeError where it is made, not a surprise where it is read. A round's events are typed by kind; a kind
this judge does not know (a newer server's) passes through as `Event`, its fields as sent, so that an older client
shows what it can and never fails on one. The server's OpenAPI document (/openapi.json) names these models.

Imports pydantic and judge's ground only (`noise`, `errors`): the client loads it on every command that talks to
a server."""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, SerializeAsAny

from .jsonform import jsonable  # noqa: F401 (the wire's one way to JSON, here for the server and the client)


class Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorAnswer(Wire):
    """Every error the server answers, as the CLI's `--json` prints it: one line, and the exit code it means."""

    error: str
    exit: int = 2
    errors: Optional[list[str]] = None


class WireFloor(Wire):
    """The noise floor (judge.noise.Floor) as sent: its fields, the thresholds it sets and its words."""

    effect: float
    min_effect: float
    source: str
    controls: int = 0
    device: Optional[str] = None
    faster_at: float
    slower_at: float
    words: str

    @classmethod
    def of(cls, floor) -> "WireFloor":
        return cls(**floor.view())

    def floor(self):
        """The judge.noise.Floor this was made of."""
        from .noise import Floor

        return Floor(effect=self.effect, min_effect=self.min_effect, source=self.source, controls=self.controls,
                     device=self.device)


# a round's events ---------------------------------------------------------------------------------------------


class Event(BaseModel):
    """One event of a round (judge.rounds' `on_event(kind, **fields)`): its kind and its fields. Kinds without a model
    of their own, known or not, keep their fields as sent."""

    model_config = ConfigDict(extra="allow")
    kind: str
    seq: int = 0  # its place among its job's events, from 0: a reader asks for those after the last it saw

    def fields(self) -> dict[str, Any]:
        """The keyword arguments the round gave `on_event`, with their Python values where judge has them (the
        floor as a judge.noise.Floor), as a local run's progress receives them."""
        return {k: v for k, v in self.model_dump().items() if k not in ("kind", "seq")}


class FloorEvent(Event):
    """The floor this run of a target's round judges by, once its A/A control has set it."""

    kind: Literal["floor"]
    target: str
    floor: WireFloor

    def fields(self) -> dict[str, Any]:
        return {**super().fields(), "floor": self.floor.floor()}


class VerdictEvent(Event):
    """A candidate judged: its verdict, as the ledger records it."""

    kind: Literal["verdict"]
    proposal: str
    outcome: str
    reason: str = ""
    where: Optional[str] = None


class EndEvent(Event):
    """The job ended: `state` done or failed (then `error`); the last event of every job."""

    kind: Literal["end"]
    state: str
    error: Optional[ErrorAnswer] = None


EVENT_MODELS: dict[str, type[Event]] = {"floor": FloorEvent, "verdict": VerdictEvent, "end": EndEvent}


def make_event(seq: int, kind: str, info: dict[str, Any]) -> Event:
    """The event a round's `on_event(kind, **info)` makes on the server. A field judge cannot send (no declared JSON
    form) is left out and named under `unsent`, so that a new kind of event never stops a round."""
    fields, unsent = {}, []
    for key, value in info.items():
        try:
            fields[key] = jsonable(value)
        except TypeError:
            unsent.append(key)
    if unsent:
        fields["unsent"] = unsent
    return read_event({**fields, "kind": kind, "seq": seq})


def read_event(data: dict[str, Any]) -> Event:
    """An event as read off the wire: its kind's model, or `Event` for a kind without one (or fields that do not fit
    its model: a newer server's), never an error."""
    model = EVENT_MODELS.get(str(data.get("kind")))
    if model is not None:
        try:
            return model.model_validate(data)
        except ValueError:
            pass
    return Event.model_validate(data)


# jobs ------------------------------------------------------------------------------------------------------------


class JobAnswer(Wire):
    """A round the server runs (`POST /api/rounds`, `GET /api/jobs/{job}`): its state, the events from the asked one
    on (`next`: the seq to ask for next), and once done each target's summary (as `judge run --json` prints them), or
    once failed the error."""

    job: int
    round: Optional[int] = None
    target: Optional[str] = None
    by: str
    state: Literal["running", "done", "failed"]
    started_at: str
    finished_at: Optional[str] = None
    events: list[Union[FloorEvent, VerdictEvent, EndEvent, SerializeAsAny[Event]]] = []  # each by its kind's model
    next: int = 0
    summaries: Optional[list[dict[str, Any]]] = None
    error: Optional[ErrorAnswer] = None

    @classmethod
    def read(cls, data: Any) -> "JobAnswer":
        """A job off the wire, each event by its kind's model."""
        job = cls.model_validate({**data, "events": []})
        job.events = [read_event(e) for e in data.get("events", [])]
        return job


# the base ------------------------------------------------------------------------------------------------------


class BaseAnswer(Wire):
    """A round's base kernel (`judge base`, `GET /api/base`): the exact source a patch for that round is made
    against, its sha256, where it came from."""

    target: str
    round: int
    kernel_file: str
    origin: str
    sha256: str
    lines: int
    source: str


class WhoAmI(Wire):
    name: str
    role: str


# what the other endpoints answer ---------------------------------------------------------------------------------
#
# Declared for the OpenAPI document and checked against the server's answers in tests/test_wire.py; fields judge
# adds later pass (extra="allow"), so that an older client reads a newer server. The CLI reads these answers as the
# library's own values (judge.cli.client), which print the same bytes as a local ledger's.


class Answer(BaseModel):
    model_config = ConfigDict(extra="allow")


class LedgerAnswer(Answer):
    ledger: str
    migrations: list[str]


class SubmittedAnswer(Answer):
    proposal_id: str
    revision: int
    revision_id: int
    status: Literal["new", "revised", "unchanged"]


class VoteAnswer(Answer):
    vote_id: int
    status: str
    shark: str
    proposal: str
    revision: int
    computed_total: str
    stated_total: Optional[str] = None
    flag: Optional[str] = None
    fund: bool


class ProposalRow(Answer):
    """A proposal's latest revision the reader may read, with its latest verdict (`judge list --json`)."""

    id: str
    revision: int
    round: int
    target: str
    author: str
    title: str
    claim: Optional[list[float]] = None
    has_patch: bool
    outcome: str
    cleared: bool
    reason: Optional[str] = None
    geomean_speedup: Optional[float] = None
    evaluation_id: Optional[int] = None


class ProposalAnswer(Answer):
    """One proposal: its revisions the reader may read, each with its evaluations and stages, and its votes."""

    id: str
    revisions: list[dict[str, Any]]
    votes: list[dict[str, Any]]


class RoundStatus(Answer):
    target: str
    round: int
    base_origin: str
    outcomes: dict[str, int]
    winner: Optional[str] = None
    held: list[dict[str, Any]] = []
    closed: bool


class StatusAnswer(Answer):
    ledger: str
    counts: dict[str, int]
    rounds: list[RoundStatus]
    targets: list[dict[str, Any]]


class WireKernelShare(Wire):
    """One kernel (a CPU target: one op) of a profiled call (judge.stages.profile.model.KernelShare)."""

    name: str
    launches: float
    us: float
    share: Optional[float] = None
    dram_gbps: Optional[float] = None
    dram_of_peak: Optional[float] = None
    tensor_pct: Optional[float] = None
    tensor_of_peak: Optional[float] = None
    occupancy_pct: Optional[float] = None
    stalls: list[list[Any]] = []


class WireBenchmarkProfile(Wire):
    index: int
    label: str
    call_us: Optional[float] = None
    gpu_us: Optional[float] = None
    kernels: list[WireKernelShare] = []
    bounds: list[str] = []
    io_gbps: Optional[float] = None
    error: Optional[str] = None
    more: int = 0  # kernels the report left out


class WireProfile(Wire):
    """A base's profile as the brief serves it under `profile` (judge.report.profile's view of a stored Profile)."""

    status: Literal["ok", "unavailable"]
    tool: Optional[str] = None
    reason: Optional[str] = None
    notes: list[str] = []
    device: Optional[str] = None
    versions: dict[str, Optional[str]] = {}
    peaks: Optional[dict[str, Any]] = None
    benchmarks: list[WireBenchmarkProfile] = []
    line: str
    created_at: Optional[str] = None
    from_ncu: bool = False


class DocumentAnswer(Answer):
    """A document the server rendered: its file name, its Markdown, its charts (SVG by file name) and its view (under
    `round`, `leaderboard` or `brief`; a brief's `profile` is a WireProfile)."""

    name: str
    markdown: str
    charts: dict[str, str] = {}


class ClearAnswer(Answer):
    clearance_id: int
    evaluation_id: int
    target: str
    round: int
    outcome: str
    reason: str
    round_winner: Optional[str] = None
    reports: list[str] = []


class ParticipantAnswer(Answer):
    name: str
    role: Literal["contestant", "shark", "organizer"]
    created_at: str
    token: Optional[str] = None  # only in the answer that added it
    revoked_at: Optional[str] = None
