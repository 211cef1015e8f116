"""Ray's share of a round: actors on a cluster, one per GPU (`num_gpus=1`) or, for a CPU target, one per block of a
node's CPUs (judge.core_blocks); the target's files and each kernel travel as data.

Ray schedules; judge never does. Each actor holds its own round state (judge.stages.evaluation.Evaluator: oracle,
base runner, warm spares) for the GPU or cores it holds, so a candidate is always timed against the base by the
same actor, and one GPU (or core) never times two things at once. A candidate is checked on whichever actor is idle
as its compile ends; those that pass wait on the actor that checked them, and once every candidate of the run is
checked (or once the next compile keeps them waiting longer than a group of their own would cost) each actor times
those it holds together, in process groups (judge.stages.timing.group), as a local round does (judge.local_groups);
while it times it takes no check, and a later candidate is checked on another actor or after its groups. The
round's control is timed before them (beside the base's check where there is a second actor), so that its floor is
read before any actor's groups start. Only the driver writes the ledger: results come back to it as they finish and
are recorded at once, so a killed driver resumes as a local run does. The actors themselves: judge.ray_actor.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Optional

from .dispatch import BaseCheck, kernel_stage_words
from .errors import JudgeError
from .local_groups import LATER_WORDS, next_compile_wait_s, timing_words
from .ray_actor import EvaluationActor, ProgressInbox, cpu_actors, gpu_actors
from .stages.job import Job
from .stages.result import StageResult
from .target_files import target_files

# How many times Ray starts a dead evaluation actor again (and resends the evaluation it held) before the round
# stops with the error; what was recorded stays, and `judge run` again resumes.
ACTOR_RESTARTS = 3
# How often the driver passes on the progress Ray's actors' stages sent meanwhile.
PROGRESS_POLL_S = 0.5


class RayDispatch:
    """Actors on a Ray cluster, one per GPU (`num_gpus=1`), or for a CPU target one per block of a node's CPUs
    (`num_cpus`, no GPU); the target's files and each kernel travel as data."""

    def __init__(self, run, address: Optional[str] = None, gpus: Optional[list[int]] = None):
        try:
            import ray
            from ray.util import ActorPool
        except ImportError:
            raise JudgeError("--ray and --gpus need Ray: pip install 'judge[ray]'") from None
        self.run, self.ray = run, ray
        if not ray.is_initialized():
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                if gpus is not None:
                    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
                ray.init(num_gpus=len(gpus) if gpus is not None else None, include_dashboard=False,
                         log_to_driver=False)
        target = run.target
        resources, count = (cpu_actors if target.on_cpu else gpu_actors)(ray, target, address)
        # An actor that dies (its process killed, its machine gone) is started again and the evaluation it held
        # is sent again: the driver records only what comes back, so nothing is lost or recorded twice.
        actor = ray.remote(**resources, max_restarts=ACTOR_RESTARTS, max_task_retries=ACTOR_RESTARTS)(EvaluationActor)
        files, base_source = target_files(target), (run.base_dir / target.kernel_file).read_text()
        # The actors' progress (judge.stages.progress) waits here until the driver takes it: no CPU of Ray's is held.
        self.inbox = ray.remote(num_cpus=0)(ProgressInbox).remote()
        self.actors = [actor.remote(files, target.name, base_source, run.settings.timing_budget_s,
                                    run.settings.fork_spares, self.inbox) for _ in range(count)]
        self.places = ray.get([a.where.remote() for a in self.actors])
        self.pool = ActorPool(self.actors)
        self._checked_on: dict[str, int] = {}  # a candidate's key: the actor that checked it, which times it
        run.on_event("workers", places=self.places)
        # A thread of the driver's passes the progress on while the driver waits on the actors or on compiles; the
        # lock keeps an evaluation's progress before its `evaluated` event (_evaluated).
        self._passing = threading.RLock()
        self._closing = threading.Event()
        self._forwarder = threading.Thread(target=self._forward_until_closed, name="judge-progress", daemon=True)
        self._forwarder.start()

    control_in_groups = False  # the control is timed first: its floor serves every actor's groups

    def gate(self) -> Optional[str]:
        gates = {p["gate"] for p in self.places}
        return gates.pop() if len(gates) == 1 else None

    def warm(self) -> None:
        """Not waited for: each actor starts its oracle and spares while the driver compiles."""
        for actor in self.actors:
            actor.warm.remote()

    @property
    def workers(self) -> int:
        return len(self.actors)

    def check_base(self, control: Optional[Job] = None) -> BaseCheck:
        """The base's correctness on the first actor; with `control` and a second actor, the control's kernel
        stages on that one at the same time (the round drops them if the base fails): a round on two GPUs
        does not wait twice before its first candidate."""
        checking = self.actors[0].check_base.remote()
        beside = None
        if control is not None and len(self.actors) > 1:
            beside = self._send(self.actors[1], ("control", control))
        result, place = self.ray.get(checking)
        self._evaluated("(base)", [result])
        if beside is None:
            return BaseCheck(result, place)
        _, stages, control_place = self.ray.get(beside)
        self._evaluated(control.name, stages)
        return BaseCheck(result, place, (stages, control_place))

    def evaluate(self, jobs: Iterable[Job], control: None = None
                 ) -> Iterator[tuple[Job, list[StageResult], Optional[dict]]]:
        """Each job goes to the pool as soon as the driver has it (its compile ended): a control's stages, or a
        candidate's check, on the next idle actor (Ray's ActorPool). What fails its check comes back at once; what
        passes waits on the actor that checked it and is timed there (_start_groups) once no check is out and every
        job is in, or the next compile does not end within MIN_PAIRS times the held candidates' mean check (jobs'
        `wait_next`, judge.stages.compile.pipeline.ReadyJobs), as a local round waits (judge.local_groups).
        `control` is never given here: the control is timed before the candidates (control_in_groups)."""
        assert control is None, "a Ray round times its control before the candidates"
        flight, wait_next, pending = _Flight(), getattr(jobs, "wait_next", None), iter(jobs)
        while True:
            yield from self._meanwhile(flight, wait_next)
            job = next(pending, None)
            if job is None:
                break
            key = flight.sent(job)
            words = kernel_stage_words(job) if job.control else "correctness"
            self.run.on_event("stage", proposal=job.name, stage=f"{words} (sent to Ray)")
            self.pool.submit(self._send, (key, job))
            yield from self._collect(flight, 0)
        while flight.checks or flight.held or flight.timing:
            if flight.held and not flight.checks:
                self._start_groups(flight)
            yield from self._collect(flight, PROGRESS_POLL_S)

    def _meanwhile(self, flight: "_Flight", wait_next) -> Iterator[tuple[Job, list[StageResult], Optional[dict]]]:
        """Until the next job is ready (or none is left to wait for): what comes back, and the held candidates'
        groups started where no check is out and the next compile does not end within MIN_PAIRS times their mean
        check. Without `wait_next` (jobs that are not a round's compiles) the driver waits for the next job."""
        while wait_next is not None and (flight.checks or flight.held or flight.timing) and not wait_next(0):
            if flight.held and not flight.checks:
                seconds = [r.seconds or 0.0 for held in flight.held.values() for r in held.values()]
                if wait_next(next_compile_wait_s(seconds)) or self._start_groups(flight):
                    continue  # the next job is ready, or the held candidates' groups began
            yield from self._collect(flight, PROGRESS_POLL_S)

    def _collect(self, flight: "_Flight", timeout_s: float) -> Iterator[tuple[Job, list[StageResult], Optional[dict]]]:
        """What came back within `timeout_s`: checks (final ones yielded, passed ones held on their actor) and groups
        (their verdicts yielded, their actor back in the pool to take the next check)."""
        came = []
        while self.pool.has_next():
            try:
                came.append(self.pool.get_next_unordered(timeout=0 if came or flight.timing else timeout_s))
            except TimeoutError:
                break
        for key, stages, place in came:
            flight.checks -= 1
            yield from self._came_back(flight.by_key[key], flight.held, key, stages, place)
        if not flight.timing:
            return
        done, _ = self.ray.wait(list(flight.timing), num_returns=len(flight.timing), timeout=0 if came else timeout_s)
        for ref in done:
            index, checked = flight.timing.pop(ref)
            for key, result, place in self.ray.get(ref):
                stages = [checked[key], result]
                self._evaluated(flight.by_key[key].name, stages)
                yield flight.by_key[key], stages, place
            self.pool.push(self.actors[index])

    def _came_back(self, job: Job, held: dict[int, dict[str, StageResult]], key: str, stages: list[StageResult],
                   place: Optional[dict]) -> Iterator[tuple[Job, list[StageResult], Optional[dict]]]:
        """A job's result from its actor: final for a control and for a candidate that failed its check (or that
        the actor could not run); a passed check is held for that actor's groups."""
        if job.control or len(stages) != 1 or not stages[0].passed:
            self._evaluated(job.name, stages)
            yield job, stages, place
            return
        held.setdefault(self._checked_on[key], {})[key] = stages[0]

    def _start_groups(self, flight: "_Flight") -> int:
        """Every idle actor that holds checked candidates times them together now, in process groups as large as its
        memory plan holds (EvaluationActor.group_size), against the round's floor, or leaves them untimed where the
        round's control ran out of time (judge.control.timing_gate); out of the pool until its groups end, so that no
        check waits behind them. How many actors began."""
        idle = {id(actor) for actor in iter(self.pool.pop_idle, None)}
        starting = [i for i, actor in enumerate(self.actors) if i in flight.held and id(actor) in idle]
        for i, actor in enumerate(self.actors):
            if id(actor) in idle and i not in starting:
                self.pool.push(actor)
        floor = self._floor_json()
        sizes = self.ray.get([self.actors[i].group_size.remote(len(flight.held[i])) for i in starting])
        for i, size in zip(starting, sizes):
            checked = flight.held.pop(i)
            for key in checked:
                self.run.on_event("stage", proposal=flight.by_key[key].name,
                                  stage=timing_words(size, len(checked)) + (LATER_WORDS if flight.later else ""))
            items = [(key, flight.by_key[key].name, flight.by_key[key].source) for key in checked]
            flight.timing[self.actors[i].time_group.remote(items, floor, self.run.timing_gate)] = (i, checked)
        flight.later = flight.later or bool(starting)
        return len(starting)

    def _floor_json(self) -> Optional[dict]:
        """The round's floor as the actors take it (a control's and a group's verdicts are read against it)."""
        return self.run.floor.to_json() if self.run.floor else None

    def _forward_until_closed(self) -> None:
        while not self._closing.wait(PROGRESS_POLL_S):
            self._forward()

    def _forward(self) -> None:
        """The progress the actors' stages sent since the last time, as the round's `progress` events. Progress
        is never a round's failure: an inbox that cannot be read is passed over."""
        with self._passing:
            try:
                items = self.ray.get(self.inbox.take.remote())
            except Exception:  # noqa: BLE001 - an inbox gone (its node lost) leaves the verdicts as they were
                return
            for item in items:
                self.run.on_event("progress", **item)

    def _evaluated(self, name: str, stages: list[StageResult]) -> None:
        """An evaluation came back: the progress it sent first, then its `evaluated` event (the actor's seconds)."""
        with self._passing:
            self._forward()
            self.run.on_event("evaluated", proposal=name, seconds=round(sum(s.seconds or 0.0 for s in stages), 1))

    def _send(self, actor, item: tuple[str, Job]):
        """`actor` takes one job (its key, the job): a candidate's check, noting which actor holds it; the control's
        kernel stages, against the round's floor and untimed where the round's control ran out of time on another
        actor before (judge.control.timing_gate). The pool's call, and the control's. The control's actor first hears
        how many candidates its groups may time (EvaluationActor.expect): the control's timing, its first, makes the
        memory plan its groups use, and would make it for one kernel."""
        key, job = item
        if not job.control:
            self._checked_on[key] = next(i for i, held in enumerate(self.actors) if held is actor)
            return actor.check.remote(key, job.name, job.source)
        actor.expect.remote(math.ceil(self.run.candidates / len(self.actors)))
        return actor.evaluate.remote(key, job.name, job.source, self._floor_json(), True, self.run.timing_gate,
                                     job.serves)

    def close(self) -> None:
        """Close every actor; what each one's runner commands cost goes out as a `worker-tallies` event first
        (judge.sandbox.worker.COMMAND_SECONDS of its process: `judge_scale.py --events` prints it)."""
        self._closing.set()
        self._forwarder.join(timeout=10)
        for actor, place in zip(self.actors, self.places):
            try:
                tallies = self.ray.get(actor.close.remote())
            except Exception:  # an actor already gone has nothing left to close
                tallies = None
            self.ray.kill(actor)
            if tallies is not None:
                self.run.on_event("worker-tallies", place=place, tallies=tallies)
        self.ray.kill(self.inbox)


@dataclass
class _Flight:
    """What a Ray round's driver has out: the jobs by key, the checks sent and not back (one sent while every actor
    times waits in the pool), the passed candidates each actor holds (by its index), the groups timing (an object
    ref: its actor's index and candidates), and whether a group of the round began already."""

    by_key: dict[str, Job] = field(default_factory=dict)
    checks: int = 0
    held: dict[int, dict[str, StageResult]] = field(default_factory=dict)
    timing: dict = field(default_factory=dict)
    later: bool = False

    def sent(self, job: Job) -> str:
        key = str(len(self.by_key))
        self.by_key[key] = job
        self.checks += 1
        return key
