"""One round's trusted state for the stages that run kernels: the secret the inputs come from, the oracle
worker, the base's runner worker, and how candidate runners are started and confined.

Every process that holds contestant code (candidates, and the base, which a past round's winner wrote) is
a confined runner of its own; the oracle holds only the task's files and is the one judge believes. The
secret is drawn fresh for each run: seeds in task.yml are public, the ones used are not until the run is
over (they are recorded with the results).
"""

from __future__ import annotations

import hashlib
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import JudgeError
from .oracle import oracle_dir
from .targets import Target
from .worker import POLL_S, CommandFailed, Worker, WorkerError

# Timing input sets per benchmark: as many as fit in this many bytes per process, within these bounds.
SET_MEMORY_BYTES = 4 << 30
MIN_SETS, MAX_SETS = 2, 8
# Physical copies the timed calls run on in turn (each set is copied into one before its call): as many as fit
# in this many bytes per process, within these bounds. More copies average out where buffers land in memory,
# which moved one vecadd's time by up to 1.6% among eight allocations in one process on an H100.
COPY_MEMORY_BYTES = 2 << 30
MIN_COPIES, MAX_COPIES = 2, 8
ORACLE_LIMIT_S = 600.0
MAX_SPARES = 3


def derive(secret: int, *parts: Any) -> int:
    """A 31-bit seed from the run's secret and a case's coordinates (31 bits suit every generator)."""
    digest = hashlib.sha256(repr((secret, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def with_seed(spec: dict, seed: int) -> dict:
    """The spec with its seed replaced; a spec without a seed has fixed inputs and stays as it is."""
    return {**spec, "seed": seed} if "seed" in spec else dict(spec)


@dataclass
class Case:
    """One correctness call: which task.yml entry, under which input distribution, with which seed."""

    kind: str  # "test" | "benchmark"
    index: int
    call: int
    distribution: str
    spec: dict

    @property
    def key(self) -> tuple:
        return (self.kind, self.index, self.distribution)


@dataclass
class Evaluator:
    """Starts and keeps the oracle and the base runner for one round run; see the module docstring."""

    target: Target
    root: Path
    base_dir: Path | None = None
    secret: int = field(default_factory=lambda: secrets.randbits(62))
    confine: bool = True
    warm: bool = True  # keep spare runners that have loaded torch before their kernel is known
    spares: int | None = None  # how many; None: default_spares(target)
    processes: int | None = None  # runner processes per kernel in timing; None: default_processes(target)

    def __post_init__(self):
        self.root = Path(self.root).resolve()
        _not_dumpable()
        self._oracle: Worker | None = None
        self._bases: list[Worker] = []
        self._pool: list[Worker] = []  # spares, oldest first
        self._prebound: dict[Path, list[Worker]] = {}  # spares bound (and loading) for a workspace's timing
        self._told_cuda: set[int] = set()  # pids of the spares told to make their CUDA context
        self._started = 0
        if self.spares is None:
            self.spares = default_spares(self.target)
        if self.processes is None:
            self.processes = default_processes(self.target)
        self._plans: dict[tuple, dict] = {}
        self._expect: dict[int, list] = {}
        self._outbox: dict | None = None  # the oracle's answer to "outbox": its handle and size, or an error

    # ---- cases and seeds -------------------------------------------------------------------------------

    def cases(self) -> list[Case]:
        """Every test twice (two seeds: a kernel that keeps an answer fails the second) and every benchmark
        once, under every input distribution of the target."""
        out = []
        for dist in self.target.distributions:
            for i, spec in enumerate(self.target.tests):
                for call in (1, 2):
                    seed = derive(self.secret, "test", i, call, dist.name)
                    out.append(Case("test", i, call, dist.name, with_seed(spec, seed)))
            for j, spec in enumerate(self.target.benchmarks):
                seed = derive(self.secret, "benchmark", j, dist.name)
                out.append(Case("benchmark", j, 1, dist.name, with_seed(spec, seed)))
        return out

    def timing_seeds(self, index: int, sets: int) -> list[int]:
        """The warm-up seed, then one seed per timing input set of benchmark `index`."""
        return [derive(self.secret, "timing", index, n) for n in range(sets + 1)]

    def projection_seed(self, index: int) -> int:
        return derive(self.secret, "projection", index)

    @property
    def poll_s(self) -> float:
        """How long the parent polls for a worker's reply before it sleeps (judge.worker.POLL_S on a GPU)."""
        return 0.0 if self.target.on_cpu else POLL_S

    @property
    def generators(self) -> dict[str, str]:
        return {d.name: d.generator for d in self.target.distributions}

    # ---- the oracle ------------------------------------------------------------------------------------

    @property
    def oracle(self) -> Worker:
        if self._oracle is None:
            directory = oracle_dir(self.target, self.root / "oracle")
            self._oracle = Worker(
                "oracle",
                {"directory": str(directory), "generators": self.generators,
                 "rtol": self.target.rtol, "atol": self.target.atol},
                cwd=directory, log_path=self.root / "oracle.log", env=self.env(), poll_s=self.poll_s,
            )
        return self._oracle

    def ask(self, op: str, **args) -> Any:
        """A command to the oracle. Its failure is the target's (its reference), never a candidate's."""
        try:
            return self.oracle.call(op, ORACLE_LIMIT_S, **args).value
        except (WorkerError, CommandFailed) as error:
            message = error.message if isinstance(error, WorkerError) else error.error
            raise JudgeError(f"{self.target.path}: the reference failed in the oracle ({op}): {message}; "
                             f"see {self.root / 'oracle.log'}") from None

    def plan(self, case: Case) -> dict:
        """Output slots and shapes of a case's spec, from the oracle, once per spec and distribution."""
        if case.key not in self._plans:
            self._plans[case.key] = self.ask("plan", spec=case.spec, distribution=case.distribution)
        return self._plans[case.key]

    def outbox(self, plan: dict) -> dict | None:
        """Where a runner hands a case's outputs to the oracle in device memory ({"handle", "layouts"}), or None:
        a CPU target, outputs that are not all CUDA tensors, or an oracle that cannot export memory here (the
        runner then saves a file, as it always may)."""
        wanted = plan.get("outbox")
        if self.target.on_cpu or not wanted:
            return None
        if self._outbox is None or ("bytes" in self._outbox and self._outbox["bytes"] < wanted["bytes"]):
            self._outbox = self.ask("outbox", nbytes=wanted["bytes"])
        if "error" in self._outbox:
            return None
        return {"handle": self._outbox["handle"], "layouts": wanted["layouts"]}

    def clear_outbox(self) -> None:
        """Zero the outbox before a candidate's cases: whatever an earlier runner left there is not this one's."""
        if self._outbox is not None and "handle" in self._outbox:
            self._outbox = self.ask("outbox", nbytes=self._outbox["bytes"], clear=True)

    def sets_for(self, index: int) -> int:
        return max(MIN_SETS, min(MAX_SETS, SET_MEMORY_BYTES // self._input_bytes(index)))

    def copies_for(self, index: int) -> int:
        return max(MIN_COPIES, min(MAX_COPIES, COPY_MEMORY_BYTES // self._input_bytes(index)))

    def _input_bytes(self, index: int) -> int:
        spec = with_seed(self.target.benchmarks[index], 0)
        plan = self.plan(Case("benchmark", index, 1, self.target.distributions[0].name, spec))
        return max(1, plan.get("input_bytes", 1))

    def expectations(self, index: int, sets: int) -> list:
        """For each timing input set of benchmark `index`: the reference's projections and their bounds."""
        if index not in self._expect:
            spec = self.target.benchmarks[index]
            self._expect[index] = self.ask(
                "expect", spec=spec, distribution=self.target.distributions[0].name,
                seeds=self.timing_seeds(index, sets)[1:], projection_seed=self.projection_seed(index))
        return self._expect[index]

    # ---- runners ---------------------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """The children's environment: what torch and CUDA need, none of the user's other variables (a kernel
        could read the oracle's). CPU targets never touch a GPU and run single-threaded, so that base and
        candidate do not fight over the cores."""
        import os

        from .confine import minimal_env

        env = minimal_env(dict(os.environ))
        if self.target.on_cpu:
            env.update(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        return env

    def runner(self, workspace: Path, log_name: str = "worker.log") -> Worker:
        """A confined runner for the kernel assembled in `workspace`, with its kernel not yet imported: the
        oldest spare when there is one (new spares start loading behind it), else a cold start."""
        workspace = Path(workspace).resolve()
        (workspace / ".judge").mkdir(exist_ok=True)
        init, policy, env = self._runner_setup(workspace)
        worker = None
        while worker is None and self._pool:
            spare = self._pool.pop(0)
            try:
                worker = spare.bind(init, workspace=workspace, log_path=workspace / log_name, policy=policy, env=env)
            except (WorkerError, CommandFailed):
                spare.close()  # a spare that broke is judge's loss, never the kernel's: the next one, or a cold start
        if worker is None:
            worker = Worker("runner", init, cwd=workspace, log_path=workspace / log_name, policy=policy, env=env,
                            poll_s=self.poll_s)
        if self.warm:
            self._top_up()
        return worker

    def prebind(self, workspace: Path, count: int) -> None:
        """Bind up to `count` spares that have loaded torch to `workspace` and have them import its kernel,
        without waiting: the timing stage's further runners (judge.timing.measure) get ready while the
        correctness stage runs in the first one (a bind took 106-165 ms on an H100, 2026-11-25). Nothing is
        timed meanwhile; `prebound` hands them over, and `discard_prebound` closes those not taken."""
        workspace = Path(workspace).resolve()
        self.discard_prebound()
        init, policy, env = self._runner_setup(workspace)
        ready = [spare for spare in self._pool if spare.is_ready()][:count]
        for n, spare in enumerate(ready, start=1):
            self._pool.remove(spare)
            try:
                spare.bind(init, workspace=workspace, log_path=workspace / f"timing-{n}.log", policy=policy, env=env,
                           wait=False)
                spare.start("load")
            except (WorkerError, CommandFailed):
                spare.close()
                continue
            self._prebound.setdefault(workspace, []).append(spare)
        if ready and self.warm:
            self._top_up()

    def prebound(self, workspace: Path) -> Worker | None:
        """A runner `prebind` started for `workspace` (the caller reads its bind and load replies with
        `finish`, where a failure raises as a cold runner's would), or None when there is none left."""
        waiting = self._prebound.get(Path(workspace).resolve())
        if not waiting:
            return None
        return waiting.pop(0)

    def discard_prebound(self, keep: Path | None = None) -> None:
        """Close the runners `prebind` started, except those for `keep`: none may run while another kernel is
        timed."""
        keep = Path(keep).resolve() if keep is not None else None
        for workspace in [w for w in self._prebound if w != keep]:
            for worker in self._prebound.pop(workspace):
                worker.close(wait=False)

    def _top_up(self) -> None:
        """Start spares until the pool is full, and have those that have imported torch make their CUDA
        context now: a runner is being started, so nothing is being timed."""
        while len(self._pool) < self.spares:
            self._pool.append(self._new_spare())
        if self.target.on_cpu:
            return
        for spare in self._pool:
            if spare.pid not in self._told_cuda and spare.is_ready():
                spare.start("cuda")
                self._told_cuda.add(spare.pid)

    def settle(self) -> None:
        """Before timing: no spare may touch the GPU or, on a CPU target, take a core from a measurement. A
        spare making its CUDA context finishes it (a fraction of a second); spares that wait are stopped.
        On a GPU target a spare still importing torch goes on (CPU work, on other cores); on a CPU target it
        is waited for."""
        for spare in list(self._pool):
            try:
                if self.target.on_cpu:
                    spare.ready()
                spare.finish()
                if spare.is_ready():
                    spare.freeze()
            except (WorkerError, CommandFailed):
                spare.close()
                self._pool.remove(spare)

    def _runner_setup(self, workspace: Path) -> tuple[dict, dict | None, dict[str, str]]:
        """What a runner for `workspace` is given, cold or bound from a spare: its init, its confinement policy
        (JSON, None when unconfined) and its environment."""
        from .isolation import policy_to_json

        rules, env = self._rules(workspace)
        init = {"workspace": str(workspace), "kernel_file": self.target.kernel_file, "generators": self.generators}
        return init, policy_to_json(rules) if rules else None, env

    def _rules(self, workspace: Path):
        """The confinement of a runner in `workspace` (None when unconfined) and its environment."""
        from .confine import Policy, child_env, prepare

        env = self.env()
        if not self.confine:
            return None, env
        rules = Policy(writable=[workspace], readable=[])
        prepare(rules)
        return rules, child_env(rules, env)

    def _new_spare(self) -> Worker:
        self._started += 1
        home = fresh(self.root / "spares" / str(self._started))
        _, env = self._rules(home)
        return Worker("runner", None, cwd=home, log_path=home / "spare.log", env=env, poll_s=self.poll_s)

    @property
    def base(self) -> Worker:
        """The base's first runner."""
        return self.bases[0]

    @property
    def bases(self) -> list[Worker]:
        """The base's runners (`processes` of them), started once per round run and shared by every
        candidate's timing."""
        if self.base_dir is None:
            raise ValueError("this evaluator has no base")
        while len(self._bases) < self.processes:
            suffix = f"-{len(self._bases)}" if self._bases else ""
            worker = self.runner(self.base_dir, f"timing-base{suffix}.log")
            self._bases.append(worker)
            worker.call("load", ORACLE_LIMIT_S)
        return self._bases

    def drop_base(self) -> None:
        """Forget base runners after one failed, so the next candidate starts fresh ones."""
        for worker in self._bases:
            worker.close()
        self._bases = []

    def close(self) -> None:
        self.discard_prebound()
        for worker in (self._oracle, *self._bases, *self._pool):
            if worker is not None:
                worker.close()
        self._oracle = None
        self._bases = []
        self._pool = []

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def default_processes(target: Target) -> int:
    """Runner processes per kernel in timing: two on a GPU (an identical kernel measured 0.1-0.3 us per call
    apart in two processes on an H100, even on shared memory; two processes each halve that offset's
    variance), one for a CPU target, whose cores the processes would share."""
    return 1 if target.on_cpu else 2


def default_spares(target: Target) -> int:
    """Spare runners to keep loading ahead: on a GPU host, as many as half the cores allow, up to six. A
    candidate takes two spares and a few seconds, and a spare is told to make its CUDA context only when a
    runner is started after its torch import (3.6-5.5 s on the H100 machine) is done: with four, the spare a
    correctness stage took had rarely been told, and its bind made the context then (a bind took 204-287 ms,
    of which the context 250 ms, H100, 2026-11-25). On a CPU target one, which timing waits for (it would take
    a core from the measurement)."""
    import os

    if target.on_cpu:
        return 1
    return max(1, min(MAX_SPARES * default_processes(target), (os.cpu_count() or 1) // 2))


def _not_dumpable() -> None:
    """Make judge's own /proc entries (its environment, its memory) unreadable to the kernels' processes, which
    give up every capability when they stay root (judge.confine)."""
    import ctypes

    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0


def fresh(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path
