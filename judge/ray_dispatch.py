"""Ray's share of a round: actors on a cluster, one per GPU (`num_gpus=1`) or, for a CPU target, one per block of a
node's CPUs (judge.core_blocks); the target's files and each kernel travel as data.

Ray schedules; judge never does. Each actor holds its own round state (judge.stages.evaluation.Evaluator: oracle,
base runner, warm spares) for the GPU or cores it holds, so a candidate is always timed against the base by the
same actor, and one GPU (or core) never times two things at once. A candidate is checked on whichever actor is idle
as its compile ends; those that pass wait on the actor that checked them, and once every candidate of the run is
checked each actor times those it holds together, in process groups (judge.stages.timing.group), as a local round
does. The round's control is timed before them (beside the base's check where there is a second actor), so that its
floor is read before any actor's groups start. Only the driver writes the ledger: results come back to it as they
finish and are recorded at once, so a killed driver resumes as a local run does.
"""

from __future__ import annotations

import math
import os
import shutil
import socket
import tempfile
import threading
from pathlib import Path
from typing import Iterable, Iterator, Optional

from .core_blocks import block_size, claim_block, release
from .dispatch import BaseCheck, kernel_stage_words, kernel_stages
from .errors import JudgeError
from .local_groups import timing_words
from .stages.job import Job
from .stages.progress import Progress, quiet
from .stages.result import StageResult, kernel_stages_not_run, not_run
from .target_files import target_files, write_target

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
        passes waits on the actor that checked it until every job is in, and is then timed there (_time_held).
        `control` is never given here: the control is timed before the candidates (control_in_groups)."""
        assert control is None, "a Ray round times its control before the candidates"
        by_key: dict[str, Job] = {}
        held: dict[int, dict[str, StageResult]] = {}
        for job in jobs:
            key = str(len(by_key))
            by_key[key] = job
            words = kernel_stage_words(job) if job.control else "correctness"
            self.run.on_event("stage", proposal=job.name, stage=f"{words} (sent to Ray)")
            self.pool.submit(self._send, (key, job))
            while self.pool.has_next():  # what has come back meanwhile, so that its actor takes the next job
                try:
                    done = self.pool.get_next_unordered(timeout=0)
                except TimeoutError:
                    break
                yield from self._came_back(by_key[done[0]], held, *done)
        while self.pool.has_next():
            done = self.pool.get_next_unordered()
            yield from self._came_back(by_key[done[0]], held, *done)
        yield from self._time_held(by_key, held)

    def _came_back(self, job: Job, held: dict[int, dict[str, StageResult]], key: str, stages: list[StageResult],
                   place: Optional[dict]) -> Iterator[tuple[Job, list[StageResult], Optional[dict]]]:
        """A job's result from its actor: final for a control and for a candidate that failed its check (or that
        the actor could not run); a passed check is held for that actor's groups."""
        if job.control or len(stages) != 1 or not stages[0].passed:
            self._evaluated(job.name, stages)
            yield job, stages, place
            return
        held.setdefault(self._checked_on[key], {})[key] = stages[0]

    def _time_held(self, by_key: dict[str, Job], held: dict[int, dict[str, StageResult]]
                   ) -> Iterator[tuple[Job, list[StageResult], Optional[dict]]]:
        """Every actor times the candidates it checked together, in process groups as large as its memory plan
        holds (EvaluationActor.group_size), against the round's floor, or leaves them untimed where the round's
        control ran out of time (judge.control.timing_gate); each actor's verdicts come back as its groups end."""
        if not held:
            return
        floor = self.run.floor.to_json() if self.run.floor else None
        sizes = self.ray.get([self.actors[i].group_size.remote(len(checked)) for i, checked in held.items()])
        timing: dict = {}
        for (i, checked), size in zip(held.items(), sizes):
            for key in checked:
                self.run.on_event("stage", proposal=by_key[key].name, stage=timing_words(size, len(checked)))
            items = [(key, by_key[key].name, by_key[key].source) for key in checked]
            timing[self.actors[i].time_group.remote(items, floor, self.run.timing_gate)] = checked
        while timing:
            [done], _ = self.ray.wait(list(timing), num_returns=1)
            checked = timing.pop(done)
            for key, result, place in self.ray.get(done):
                stages = [checked[key], result]
                self._evaluated(by_key[key].name, stages)
                yield by_key[key], stages, place

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
        floor = self.run.floor.to_json() if self.run.floor else None
        return actor.evaluate.remote(key, job.name, job.source, floor, True, self.run.timing_gate, job.serves)

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


def gpu_actors(ray, target, address: Optional[str]) -> tuple[dict, int]:
    """A GPU target's actors: one per GPU of the cluster, each holding it (and one CPU)."""
    count = int(ray.cluster_resources().get("GPU", 0))
    if count < 1:
        raise JudgeError(f"the Ray cluster{' at ' + address if address else ''} has no GPU: nothing to run the "
                         "kernels on (start its workers with GPUs, or run without --ray)")
    return {"num_gpus": 1, "num_cpus": 1}, count


def cpu_actors(ray, target, address: Optional[str]) -> tuple[dict, int]:
    """A CPU target's actors: each asks Ray for a block of CPUs (its timed pair's cores and one for its oracle and
    spares, judge.core_blocks), and each live node gets as many as its CPUs hold blocks. Fewer would leave cores
    idle; more would put two timed pairs on one core, or time a kernel beside another actor's oracle."""
    size = block_size(target)
    count = sum(int(node["Resources"].get("CPU", 0)) // size for node in ray.nodes() if node.get("Alive"))
    if count < 1:
        raise JudgeError(f"the Ray cluster{' at ' + address if address else ''} has no node with {size} CPUs: "
                         f"an evaluation of {target.name} needs {size} (its timed pair's {target.cores_for_timing} "
                         "and one for its oracle and spares)")
    return {"num_cpus": size}, count


class ProgressInbox:
    """A Ray actor that holds the progress the evaluation actors' stages send (judge.stages.progress) until the
    driver takes it: the actors send without waiting, the driver takes all there is while it waits on them."""

    def __init__(self):
        self.items: list[dict] = []

    def put(self, item: dict) -> None:
        self.items.append(item)

    def take(self) -> list[dict]:
        items, self.items = self.items, []
        return items


class EvaluationActor:
    """One GPU's (or block of cores') share of a round on a Ray worker: its own copy of the target, base and
    round state. A CPU target's actor claims a block of its host's cores first and holds it while it lives."""

    def __init__(self, files: dict[str, bytes], name: str, base_source: str, budget_s: Optional[float],
                 fork_spares: Optional[bool] = None, inbox=None):
        from .devices import arch_gate, probed
        from .machine import facts_dict, host_facts
        from .stages.evaluation import Evaluator
        from .targets import load_target

        self.inbox = inbox  # the driver's ProgressInbox, where the stages' progress goes
        self.root = Path(tempfile.mkdtemp(prefix="judge-ray-"))
        self.target = load_target(write_target(files, self.root / "target", name))
        self.base_dir = self.target.assemble(self.root / "base", base_source)
        self.budget_s = budget_s
        if self.target.on_cpu:  # as a local round: this host's CPU, no GPU looked for (StageCalls.machine)
            self.facts, self.gate_reason = host_facts(), None
        else:
            facts = probed()
            self.facts, self.gate_reason = facts_dict(facts), arch_gate(self.target.arch, facts)
        self.core_block, self._block_locks = claim_block(self.target) if self.target.on_cpu else (None, [])
        self.evaluator = Evaluator(self.target, self.root / ".judge-round", base_dir=self.base_dir,
                                   core_block=self.core_block, fork_spares=fork_spares)

    def where(self) -> dict:
        place = {"host": socket.gethostname(), "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                 "device": self.facts, "gate": self.gate_reason, "pid": os.getpid()}
        if self.target.on_cpu:  # its cores, as taskset writes them: '' where it holds none
            cores = self.evaluator.cores
            place["cpus"] = ",".join(str(c) for c in cores["others"] + cores["timing"]) if cores else ""
        return place

    def warm(self) -> None:
        """Start the oracle and spares every candidate here needs while the driver still compiles: Ray runs an
        actor's calls in order, so the first candidate (or the control) waits only for what is left of them. No
        base runner is kept (each timed pair starts fresh ones). A failure is met again, and recorded, by the
        stage that needs it."""
        if self.gate_reason:
            return
        try:
            self.evaluator.start()
        except Exception:  # noqa: BLE001 - judge's stages report it where it matters
            pass

    def check_base(self) -> tuple[StageResult, dict]:
        from .stages.check import check_base

        if self.gate_reason:
            return not_run("correctness", self.gate_reason), self.where()
        return check_base(self.evaluator, self.base_dir, progress=self._progress("(base)")), self.where()

    def _progress(self, name: str) -> Progress:
        """The stages' progress, named `name`, sent to the driver's inbox without waiting for it."""
        if self.inbox is None:
            return quiet

        def send(**info) -> None:
            try:
                self.inbox.put.remote({"proposal": name, **info})
            except Exception:  # noqa: BLE001 - progress is never a candidate's failure
                pass

        return send

    def evaluate(self, key: str, name: str, source: str, floor: Optional[dict] = None, control: bool = False,
                 timing_gate: Optional[str] = None, serves: int = 0) -> tuple[str, list[StageResult], dict]:
        from .noise import Floor

        if self.gate_reason:
            return key, kernel_stages_not_run(self.gate_reason), self.where()
        self.evaluator.timing_gate = self.evaluator.timing_gate or timing_gate
        workspace = self._workspace(name, source)
        stages = kernel_stages(self.evaluator, workspace, self.budget_s, Floor.from_json(floor), self._progress(name),
                               control, serves)
        return key, stages, self.where()

    def expect(self, kernels: int) -> None:
        """How many candidates this actor's process groups may time: the memory plan, made once per round by its
        first timing (the control's, where it runs here), is made for groups of that many (Evaluator.group_hint)."""
        self.evaluator.group_hint = max(1, kernels)

    def check(self, key: str, name: str, source: str) -> tuple[str, list[StageResult], dict]:
        """A candidate's correctness alone; its timing comes in this actor's process groups (time_group)."""
        from .stages.check import check

        if self.gate_reason:
            return key, kernel_stages_not_run(self.gate_reason), self.where()
        workspace = self._workspace(name, source)
        return key, [check(self.evaluator, workspace, progress=self._progress(name))], self.where()

    def group_size(self, kernels: int) -> int:
        """How many of `kernels` one process group here times beside the base (the memory plan's room)."""
        from .stages.timing.group import group_size

        return group_size(self.evaluator, kernels)

    def time_group(self, items: list[tuple[str, str, str]], floor: Optional[dict] = None,
                   timing_gate: Optional[str] = None) -> list[tuple[str, StageResult, dict]]:
        """The candidates `items` (key, name, kernel source) this actor checked, timed together against its base in
        process groups, each against `floor`; untimed where the round's control ran out of time. An actor Ray
        started again after its check assembles them again (the check's verdict stands: it came back already)."""
        from .noise import Floor
        from .stages.timing.group import measure_group

        self.evaluator.timing_gate = self.evaluator.timing_gate or timing_gate
        workspaces = [self._workspace(name, source, keep=True) for _, name, source in items]
        timed = measure_group(self.evaluator, workspaces, budget_s=self.budget_s, floor=Floor.from_json(floor),
                              progress=[self._progress(name) for _, name, _ in items])
        place = self.where()
        return [(key, result, place) for (key, _, _), result in zip(items, timed)]

    def _workspace(self, name: str, source: str, keep: bool = False) -> Path:
        """Where candidate `name` is assembled here: afresh, or (`keep`) as its check left it where it holds this
        very source."""
        from .workspaces import fresh

        path = self.root / "candidates" / name
        kernel = path / self.target.kernel_file
        if keep and kernel.is_file() and kernel.read_text() == source:
            return path
        return self.target.assemble(fresh(path), source)

    def close(self) -> dict[str, list]:
        """End the actor's runners and oracle, free its cores, and drop its copy of the round (a round's spares and
        workspaces came to 1.3 GB a round in /tmp, and 92 were left behind on a test machine). Returns the
        seconds its runner commands took, by command (judge.sandbox.worker.COMMAND_SECONDS)."""
        from .sandbox.worker import COMMAND_SECONDS

        self.evaluator.close()
        release(self._block_locks)  # its cores are free for the next actor on this host
        self._block_locks = []
        shutil.rmtree(self.root, ignore_errors=True)
        return {name: list(entry) for name, entry in COMMAND_SECONDS.items()}
