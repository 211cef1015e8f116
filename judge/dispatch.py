"""Where a round's kernel-running stages (correctness, timing) run: on this machine, one candidate after
another, or on Ray, candidates spread over actors: one per GPU of the cluster for a GPU target, one per block
of a node's CPUs for a CPU target (judge.core_blocks).

Ray schedules; judge never does. Each actor holds its own round state (judge.stages.evaluation.Evaluator: oracle,
base runner, warm spare) for the GPU or cores it holds, so a candidate is always timed against the base by
the same actor, and one GPU (or core) never times two things at once. Only the driver writes the ledger:
results come back to it as they finish and are recorded at once, so a killed driver resumes as a local run
does.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterable, Iterator, NamedTuple, Optional

from .core_blocks import block_size, claim_block, release
from .target_files import target_files, write_target
from .errors import JudgeError
from .stages.job import Job
from .stages.progress import Progress, quiet
from .stages.result import StageResult, kernel_stages_not_run, not_run

# How many times Ray starts a dead evaluation actor again (and resends the evaluation it held) before the round
# stops with the error; what was recorded stays, and `judge run` again resumes.
ACTOR_RESTARTS = 3
# How often the driver passes on the progress Ray's actors' stages sent meanwhile.
PROGRESS_POLL_S = 0.5


def parse_gpus(text: str) -> list[int]:
    """`--gpus`: 'all' (every GPU nvidia-smi lists) or a comma-separated list of indices."""
    if text.strip() == "all":
        import subprocess

        try:
            listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            listed = ""
        count = sum(1 for line in listed.splitlines() if line.startswith("GPU "))
        if not count:
            raise JudgeError("--gpus all: this machine has no NVIDIA GPU (nvidia-smi lists none)")
        return list(range(count))
    try:
        gpus = [int(part) for part in text.split(",")]
    except ValueError:
        raise JudgeError(f"--gpus: '{text}' is neither 'all' nor a list of GPU indices such as 0,1") from None
    if len(set(gpus)) != len(gpus) or min(gpus) < 0:
        raise JudgeError(f"--gpus: '{text}' names a GPU twice or a negative index")
    return gpus


def describe_place(place: dict) -> str:
    """Where a Ray actor runs, for progress lines: its host, and its GPU and what that GPU is, or (a CPU
    target's actor) its cores."""
    gate = f"; {place['gate']}" if place.get("gate") else ""
    device = place.get("device") or {}
    if "cpus" in place:
        where = f"{place['host']}, CPU {place['cpus'] or 'unpinned'} ({device.get('name') or 'unknown CPU'})"
        return where + ("" if place["cpus"] else ": no block of its host's cores was free") + gate
    name = device.get("name") or "no GPU"
    return f"{place['host']}, GPU {place['gpus'] or '-'} ({name})" + gate


def kernel_stages(evaluator, workspace: Path, budget_s: Optional[float], floor=None,
                  progress: Progress = quiet, control: bool = False, serves: int = 0) -> list[StageResult]:
    """Correctness in a runner of the candidate's, then timing against the base in process pairs (both with
    inputs from the candidate's own seeds); the noise floor `floor` decides faster or slower. `progress` hears
    of each case and each timed benchmark as it starts (judge.stages.progress). A `control` is timed by the
    controls' rule (judge.noise.enough_pairs), and timed only: it is judge's own copy of the base, whose check is the
    round's first (a control whose base fails is never recorded), and checking it again cost qr_v2's round 16.6 s
    (H200, 2026-11-29). Its timed calls are checked as every pair's are."""
    from .stages.check import check
    from .stages.timing.stage import measure

    nonce = evaluator.nonce()
    checked = [] if control else [check(evaluator, workspace, timing_next=evaluator.timing_gate is None, nonce=nonce,
                                        progress=progress)]
    if checked and not checked[0].passed:
        return checked
    return checked + [measure(evaluator, Path(workspace), budget_s=budget_s, floor=floor, nonce=nonce,
                              progress=progress, control=control, serves=serves)]


def kernel_stage_words(job: Job) -> str:
    """What a job's kernel stages are, as a round's `stage` event says it: a control is timed only."""
    return "timing" if job.control else "correctness and timing"


def progress_of(on_event, name: str) -> Progress:
    """A stage's progress as `progress` events of a round (or a calibration), named for the candidate (or
    "(base)", ...)."""
    return lambda **info: on_event("progress", proposal=name, **info)


class BaseCheck(NamedTuple):
    """The base's correctness as a dispatch checked it, where it ran, and the control's kernel stages and place
    where the control ran beside it (on another worker); None where it did not."""

    result: StageResult
    place: Optional[dict]
    control: Optional[tuple[list[StageResult], Optional[dict]]] = None


class LocalDispatch:
    """This machine, its GPU (or CPU for a CPU target), one candidate at a time: the round's own evaluator. Like
    every dispatch it takes its jobs as they come: a candidate runs while the next ones compile
    (judge.stages.compile.pipeline)."""

    workers = 1  # the control waits for the base's check: one GPU times one thing at a time

    def __init__(self, run):
        self.run = run

    def check_base(self, control: Optional[Job] = None) -> BaseCheck:
        """The base's check; the `control`, timed next on this one GPU, has its first pairs bound meanwhile."""
        run = self.run
        started = time.monotonic()
        checked = run.settings.stages.check_base(run.open_evaluator(), run.base_dir,
                                                 progress=progress_of(run.on_event, "(base)"),
                                                 timed_next=control.workspace if control is not None else None)
        run.on_event("evaluated", proposal="(base)", seconds=round(time.monotonic() - started, 1))
        return BaseCheck(checked, None)

    def gate(self) -> Optional[str]:
        return self.run.gate

    def warm(self) -> None:
        """Start the round's oracle and spares on a thread while the driver compiles the base (judge.warm); a round
        that saw a GPU for it before its probe has started them already."""
        if self.run.gate is None:
            self.run.warm()

    @property
    def groups(self) -> bool:
        """Whether this round's candidates are timed together in process groups, the control with them."""
        return self.run.settings.stages.groups and self.run.gate is None

    def evaluate(self, jobs: Iterable[Job], control=None) -> Iterator[tuple[Job, list[StageResult], Optional[dict]]]:
        """Each job's kernel stages: candidates checked as they come and timed together, the round's `control`
        (judge.control.ControlJob) in their first group, where given (judge.local_groups); a control that comes
        alone, or any job where the stages time no groups, one after another."""
        run = self.run
        first = next(iter_jobs := iter(jobs), None)
        jobs = itertools.chain([first] if first else [], iter_jobs)
        if (first or control) and self.groups and not (first and first.control):
            from .local_groups import evaluate_in_groups
            yield from evaluate_in_groups(run, jobs, progress_of, control)
            return
        for job in jobs:
            if run.gate is not None:
                yield job, kernel_stages_not_run(run.gate), None
                continue
            run.on_event("stage", proposal=job.name, stage=kernel_stage_words(job))
            started = time.monotonic()
            stages = run.settings.stages.evaluate(run.open_evaluator(), job.workspace, run.settings.timing_budget_s,
                                                  run.floor, progress=progress_of(run.on_event, job.name),
                                                  control=job.control, serves=job.serves)
            run.on_event("evaluated", proposal=job.name, seconds=round(time.monotonic() - started, 1))
            yield job, stages, None

    def close(self) -> None:
        self.run.close()


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
        run.on_event("workers", places=self.places)
        # A thread of the driver's passes the progress on while the driver waits on the actors or on compiles; the
        # lock keeps an evaluation's progress before its `evaluated` event (_evaluated).
        self._passing = threading.RLock()
        self._closing = threading.Event()
        self._forwarder = threading.Thread(target=self._forward_until_closed, name="judge-progress", daemon=True)
        self._forwarder.start()

    groups = False  # each candidate in pairs of its own, on whichever actor is idle; the control before them

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

    def evaluate(self, jobs: Iterable[Job]) -> Iterator[tuple[Job, list[StageResult], Optional[dict]]]:
        """Each job goes to the pool as soon as the driver has it (its compile ended), and each verdict comes
        back as soon as an actor has it; Ray's ActorPool gives a job to the next idle actor."""
        by_key: dict[str, Job] = {}
        for job in jobs:
            key = str(len(by_key))
            by_key[key] = job
            self.run.on_event("stage", proposal=job.name, stage=f"{kernel_stage_words(job)} (sent to Ray)")
            self.pool.submit(self._send, (key, job))
            while self.pool.has_next():  # what has come back meanwhile, so that its actor takes the next job
                try:
                    key_done, stages, place = self.pool.get_next_unordered(timeout=0)
                except TimeoutError:
                    break
                self._evaluated(by_key[key_done].name, stages)
                yield by_key[key_done], stages, place
        while self.pool.has_next():
            key_done, stages, place = self.pool.get_next_unordered()
            self._evaluated(by_key[key_done].name, stages)
            yield by_key[key_done], stages, place

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
        """`actor` evaluates one job (its key, the job) against the round's floor, and untimed where the round's
        control ran out of time on another actor (judge.control.timing_gate): the pool's call, and the control's."""
        key, job = item
        floor = self.run.floor.to_json() if self.run.floor else None
        return actor.evaluate.remote(key, job.name, job.source, floor, job.control, self.run.timing_gate, job.serves)

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
        from .workspaces import fresh
        from .noise import Floor

        if self.gate_reason:
            return key, kernel_stages_not_run(self.gate_reason), self.where()
        self.evaluator.timing_gate = self.evaluator.timing_gate or timing_gate
        workspace = self.target.assemble(fresh(self.root / "candidates" / name), source)
        stages = kernel_stages(self.evaluator, workspace, self.budget_s, Floor.from_json(floor), self._progress(name),
                               control, serves)
        return key, stages, self.where()

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
