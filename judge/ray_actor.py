"""Ray's actors for a round (judge.ray_dispatch drives them): how many a cluster holds, and what each one is, with
its own copy of the target, base and round state (judge.stages.evaluation.Evaluator) for the GPU or block of cores
it holds; the inbox the actors' progress waits in for the driver."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Optional

from .core_blocks import block_size, claim_block, release
from .dispatch import kernel_stages
from .errors import JudgeError
from .stages.progress import Progress, quiet
from .stages.result import StageResult, kernel_stages_not_run, not_run
from .target_files import write_target


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
