"""Rounds the server runs in the background: one at a time, each with its events kept so that progress can be
read while it runs (`GET /api/jobs/ID?since=N`) and its answer once it is done."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from .. import actions
from ..errors import JudgeError, NotFound
from ..ledger import Ledger, now
from ..wire import ErrorAnswer, Event, JobAnswer, jsonable, make_event

log = logging.getLogger("judge.server")

WAKE_S = 0.1  # how often a long poll looks for a job's next event


class Busy(JudgeError):
    """A round is running on this server already: the server answers 409."""


@dataclass
class Job:
    id: int
    round: Optional[int]  # the round it runs; None where the targets it runs are at different rounds
    target: Optional[str]
    by: str
    started_at: str
    state: str = "running"  # running | done | failed
    finished_at: Optional[str] = None
    events: list[Event] = field(default_factory=list)
    summaries: Optional[list[dict]] = None
    error: Optional[ErrorAnswer] = None  # the CLI's error object: {"error": ..., "exit": ...}

    def event(self, kind: str, **info) -> None:
        # Made into its wire model at once, so a reader never sees an event that cannot be sent.
        self.events.append(make_event(len(self.events), kind, info))

    async def wait(self, since: int, timeout_s: float, wakes: Optional[Callable[[Event], bool]] = None) -> None:
        """Until the job has an event past `since` that `wakes` its reader (any, where None) or has ended, at most
        `timeout_s`: a long poll's wait, on the server's event loop (a thread held per waiting reader would starve
        the other requests of the pool)."""
        deadline = time.monotonic() + timeout_s
        looked = since
        while self.state == "running" and time.monotonic() < deadline:
            events = self.events[looked:]
            if any(wakes is None or wakes(e) for e in events):
                return
            looked += len(events)
            await asyncio.sleep(WAKE_S)

    def answer(self, since: int = 0, shown: Optional[Callable[[Event], bool]] = None, summaries: bool = True) -> JobAnswer:
        """The job from event `since` on; `shown` picks the events its reader may read (all: None); `summaries`,
        whether the reader reads its summaries (they name every proposal of the round)."""
        events = self.events[since:]  # one read of the list: a round's thread appends to it meanwhile
        kept = events if shown is None else [e for e in events if shown(e)]
        return JobAnswer(job=self.id, round=self.round, target=self.target, by=self.by, state=self.state,
                         started_at=self.started_at, finished_at=self.finished_at, events=kept,
                         next=since + len(events), summaries=self.summaries if summaries else None, error=self.error)


class Jobs:
    """The server's round runs. `work(ledger, job)` runs one round and returns its summaries (judge.actions.run)."""

    def __init__(self, open_ledger: Callable[[], Ledger]):
        self.open_ledger = open_ledger
        self.lock = threading.Lock()
        self.jobs: dict[int, Job] = {}
        self.ids = itertools.count(1)

    def refuse_if_busy(self) -> None:
        """Busy while a job runs (the ledger's run lock cannot tell two runs of one process apart)."""
        running = next((j for j in self.jobs.values() if j.state == "running"), None)
        if running is not None:
            what = f"round {running.round}" if running.round is not None else "a round of each target"
            raise Busy(f"{what} is already being run by this server (job {running.id}, started {running.started_at} "
                       f"by '{running.by}'): follow it with 'judge watch' (or 'judge run --follow'), or wait for it to finish")

    def start(self, round: Optional[int], target: Optional[str], by: str,
              work: Callable[[Ledger, Job], list[dict]]) -> Job:
        """Start a round in a thread of its own; refused while another runs."""
        with self.lock:
            self.refuse_if_busy()
            job = Job(next(self.ids), round, target, by, now())
            self.jobs[job.id] = job
        threading.Thread(target=self._run, args=(job, work), name=f"judge-round-{job.id}", daemon=True).start()
        return job

    def _run(self, job: Job, work: Callable[[Ledger, Job], list[dict]]) -> None:
        ledger = None
        state, error = "failed", None
        try:
            ledger = self.open_ledger()
            job.summaries = jsonable(work(ledger, job))
            state = "done"
        except JudgeError as failure:
            error = ErrorAnswer(error=failure.message, exit=getattr(failure, "exit", 2))
        except Exception as failure:  # a bug of judge's: the run fails, the server stays up, the log has it
            log.exception("round job %s failed", job.id)
            error = ErrorAnswer(error=f"internal error: {type(failure).__name__}: {failure}", exit=1)
        finally:
            if ledger is not None:
                ledger.close()
            # The end event first, then the state: a reader that sees the job ended has every event it had.
            job.error, job.finished_at = error, now()
            job.event("end", state=state, error=error)
            job.state = state

    def latest(self) -> Job:
        """The running job, else the last one started."""
        running = [j for j in self.jobs.values() if j.state == "running"]
        if running:
            return running[-1]
        if not self.jobs:
            raise NotFound("no round has been run by this server since it started (the organizer starts one with "
                           "'judge run')")
        return self.jobs[max(self.jobs)]

    def get(self, job_id: int) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise NotFound(f"job {job_id} is not on this server (it keeps the jobs it ran since it started)")
        return job


def round_work(round: Optional[int], settings, target, out_dir) -> Callable[[Ledger, Job], list[dict]]:
    """What a job does: `judge run` on the server's ledger (`round` as the request gave it, None for each target's
    own), its events kept on the job."""

    def work(ledger: Ledger, job: Job) -> list[dict]:
        return actions.run(ledger, round, target, settings, job.event, out_dir)

    return work
