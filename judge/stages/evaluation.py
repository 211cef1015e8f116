"""One round's trusted state for the stages that run kernels: the secret the inputs come from, the oracle
worker, the spare runners, how runners are started, confined and placed on the CPU's cores.

Every process that holds contestant code (candidates, and the base, which a past round's winner wrote) is a
confined runner of its own; the oracle holds only the task's files and is the one judge believes. The secret is
drawn fresh for each run: seeds in task.yml are public, the ones used are not. Each candidate's inputs come from
seeds of its own (a nonce per evaluation), so nothing one candidate saw or left behind fits another's.
Base and candidate are treated alike: the timing stage takes both runners of each process pair from the same
spares, binds them the same way, pins them to the same cores, and neither ran the correctness cases.
"""

from __future__ import annotations

import math
import os
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core_blocks import block_placement, pin, placement, visible_gpu
from ..errors import JudgeError
from ..boundary.problem_files import oracle_dir
from ..boundary.tensors import Projector
from ..targets import Target
from ..sandbox import forkserver
from ..sandbox.forkserver import ForkServer
from ..sandbox.syscalls import not_dumpable
from ..sandbox.worker import POLL_S, CommandFailed, Worker, WorkerError, worker_env
from ..workspaces import fresh
from . import budget
from .seeds import Case, RoundSeeds, derive, with_seed  # noqa: F401 (Case, derive: the stages')
from . import runner_places as places

ORACLE_LIMIT_S = 600.0
MAX_SPARES = 12


@dataclass
class Evaluator(RoundSeeds):
    """Starts and keeps the oracle and the spare runners for one round run; see the module docstring."""

    target: Target
    root: Path
    base_dir: Path | None = None
    secret: int = field(default_factory=lambda: secrets.randbits(62))
    confine: bool = True
    warm: bool = True  # keep spare runners that have loaded torch before their kernel is known
    spares: int | None = None  # how many; None: default_spares(target)
    gpu_index: int | None = None  # which of the host's GPUs its runners use (for their cores); None: the first visible
    core_block: int | None = None  # a CPU target's evaluation on a shared host (Ray): its block (judge.core_blocks)
    fork_spares: bool | None = None  # spares forked from a template; None: on a GPU target (see _template)
    keep_sets: bool | None = None  # keep timing sets across pairs where they fit (None: where runners_leave_nothing)
    base_calls: dict[int, float] = field(default_factory=dict)  # the base's warm-up calls (timing.stage.known_calls)
    timing_gate: str | None = None  # why no candidate is timed in this round (timing.stage.measure: the control's)
    group_hint: int = 1  # the kernels a group may time, where known before the plan (a Ray actor's: its `expect`)

    def __post_init__(self):
        self.root = Path(self.root).resolve()
        not_dumpable()
        self._oracle: Worker | None = None
        self._pool: list[Worker] = []  # spares, oldest first
        self._forks: ForkServer | None = None  # the spares' template
        self._prebound: dict[Path, list[Worker]] = {}  # spares bound (and loading) ahead of their use
        self._told_cuda: set[int] = set()
        self._started = 0
        self._nonces = 0
        if self.spares is None:
            self.spares = default_spares(self.target)
        self._plans: dict[tuple, dict] = {}
        self._memory_plan: budget.MemoryPlan | None = None
        if self.keep_sets is None:
            self.keep_sets = self.runners_leave_nothing
        self._scratch: dict[int, Path] = {}  # a timed runner's pid -> its private scratch directory
        if self.gpu_index is None:
            self.gpu_index = visible_gpu()
        if self.core_block is not None:
            self.cores = block_placement(self.target, self.core_block)
        else:
            self.cores = placement(self.target, self.gpu_index)

    @property
    def poll_s(self) -> float:
        """How long the parent polls for a worker's reply before it sleeps (judge.sandbox.worker.POLL_S on a GPU)."""
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
                cwd=directory, log_path=self.root / "oracle.log", env=self.oracle_env(), poll_s=self.poll_s,
            )
            if self.cores:
                pin(self._oracle.pid, self.cores["others"])
        return self._oracle

    def oracle_env(self) -> dict[str, str]:
        """The runners' environment with torch's allocator in expandable segments: blocks cached for one step of the
        oracle's (an answer, a check, a set) were room no later one could reuse. Runners keep torch's default."""
        env = self.env()
        if not self.target.on_cpu:
            env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
        return env

    def start(self) -> None:
        """Start the spare runners (where warm) and the oracle now, before the first kernel stage asks for them: a
        round starts them while its driver probes and compiles (judge.warm), so that its first check does not wait
        for them. The spares' template first: it imports torch while the oracle does, which answers once it has."""
        if self.warm:
            self._top_up()
        self.oracle

    def ask(self, op: str, **args) -> Any:
        """A command to the oracle. Its failure is the target's (its reference), never a candidate's."""
        try:
            return self.oracle.call(op, ORACLE_LIMIT_S, **args).value
        except (WorkerError, CommandFailed) as error:
            message = error.message if isinstance(error, WorkerError) else error.error
            raise JudgeError(f"{self.target.path}: the reference failed in the oracle ({op}): {message}; "
                             f"see {self.root / 'oracle.log'}") from None

    def plan(self, case: Case, keep: bool = False) -> dict:
        """Output slots, shapes and input bytes of a case's spec, from the oracle, once per spec and distribution
        (`keep`: the oracle keeps the input it made, as it would the case's own, judge.boundary.kept_inputs)."""
        if case.key not in self._plans:
            self._plans[case.key] = self.ask("plan", spec=case.spec, distribution=case.distribution, keep=keep)
        return self._plans[case.key]

    def memory_plan(self, kernels: int = 1) -> budget.MemoryPlan:
        """Each benchmark's timing sets and copies, sized once per round (the first call's `kernels`: the most a
        process group of the round times beside the base) from the benchmarks' measured bytes and the device's
        memory as the oracle finds it (judge.stages.budget); sets are kept from one pair to the next where
        `keep_sets` and they fit. A benchmark that cannot fit is the round's JudgeError, before any timing."""
        if self._memory_plan is None:
            sizes, labels = budget.benchmark_sizes(self.target, self.bytes_of)
            self._memory_plan = budget.plan_device(lambda: budget.DeviceMemory(**self.ask("memory", timing=True)),
                                                   self.give_back_spares, sizes, labels, bool(self.keep_sets),
                                                   max(kernels, self.group_hint))
        return self._memory_plan

    def give_back_spares(self) -> bool:
        """Close the idle spares and start no more: on a GPU each holds a CUDA context (520-612 MiB on an H100;
        12-18 sat beside trimul's check), which only saves time. Whether any was closed."""
        idle, self._pool, self.spares = self._pool, [], 0
        for spare in idle:
            spare.close()
        return bool(idle)

    def keeps(self, index: int) -> bool:
        """Whether benchmark `index`'s timing sets are kept on the device from one pair to the next."""
        return self.memory_plan().kept[index]

    def bytes_of(self, index: int) -> budget.BenchmarkBytes:
        """Benchmark `index` measured on the round's own correctness case of it where there is one (its runners
        confined): the base's check then has the input the oracle made (cholesky_py's n=32768 took 1.4-1.7 s)."""
        distribution = self.target.distributions[0].name
        shared = self.runners_leave_nothing
        case = self.benchmark_case(index, distribution) if shared else Case(
            "benchmark", index, 1, distribution, with_seed(self.target.benchmarks[index], 0))
        plan = self.plan(case, keep=shared)
        return budget.BenchmarkBytes(max(1, plan.get("input_bytes", 1)), plan.get("output_bytes", 0),
                                     plan.get("work_bytes", 0), plan.get("making_bytes", 0),
                                     sum(Projector.held_bytes(math.prod(shape)) for shape in plan.get("shapes", [])),
                                     plan.get("making_s", 0.0))

    # ---- runners ---------------------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """The children's environment: what torch and CUDA need, none of the user's other variables (a kernel
        could read the oracle's). CPU targets never touch a GPU."""
        from ..sandbox.confine import minimal_env

        env = minimal_env(dict(os.environ))
        if self.target.on_cpu:
            env.update(CUDA_VISIBLE_DEVICES="")
        return env

    @property
    def runners_leave_nothing(self) -> bool:
        """Whether a timed runner can leave nothing behind for a later one: confined by Landlock to a scratch
        directory of its own, its workspace only readable (see `_runner_setup`)."""
        from ..sandbox.confine import landlock_abi

        return self.confine and landlock_abi() > 0

    def runner(self, workspace: Path, log_name: str = "worker.log", timed: bool = False,
               launcher: tuple[str, ...] = ()) -> Worker:
        """A confined runner for the kernel assembled in `workspace`, its kernel not yet imported, attached to
        the oracle: the oldest spare when there is one (new spares start loading behind it), else a cold start.
        A `timed` runner (a timed pair's) writes only in a scratch directory of its own (`_runner_setup`). With a
        `launcher` (ncu: judge.stages.profile) it is always a cold start, under that program."""
        workspace = Path(workspace).resolve()
        exchange = self.exchange_dir()
        init, policy, env, scratch = self._runner_setup(workspace, exchange, timed)
        log_path = places.log_path(self.root, workspace, log_name, scratch)
        worker = None
        while worker is None and self._pool and not launcher:
            spare = self._pool.pop(0)
            try:
                worker = spare.bind(init, workspace=workspace, log_path=log_path,
                                    policy=places.spare_policy(policy, spare), env=env)
            except (WorkerError, CommandFailed):
                spare.close()  # a spare that broke is judge's loss, never the kernel's: the next one, or a cold start
        if worker is None:
            worker = Worker("runner", init, cwd=workspace, log_path=log_path, policy=policy, env=env,
                            poll_s=self.poll_s, launcher=launcher)
        if scratch is not None:
            self._scratch[worker.pid] = scratch
        worker.exchange = exchange
        if self.warm:
            self._top_up()
        self._attach(worker, workspace)
        return worker

    def prebind(self, workspace: Path, count: int, prefix: str = "timing") -> int:
        """Bind ready spares to `workspace` until `count` are bound ahead for it, and have them import its kernel,
        without waiting, while nothing is timed; `prebound` hands them over. How many were bound now."""
        workspace = Path(workspace).resolve()
        wanted = count - len(self._prebound.get(workspace, []))
        ready = self._ready_spares()[:wanted] if wanted > 0 else []
        for spare in ready:
            self._pool.remove(spare)
            spare.exchange = self.exchange_dir()
            init, policy, env, scratch = self._runner_setup(workspace, spare.exchange, timed=True)
            log = places.log_path(self.root, workspace, f"{prefix}-{spare.pid}.log", scratch)
            if scratch is not None:
                self._scratch[spare.pid] = scratch
            try:
                spare.bind(init, workspace=workspace, log_path=log, policy=places.spare_policy(policy, spare), env=env,
                           wait=False)
                spare.start("load")
            except (WorkerError, CommandFailed):
                self._drop_scratch(spare.pid)
                spare.close()
                continue
            self._prebound.setdefault(workspace, []).append(spare)
        if ready and self.warm:
            self._top_up()
        return len(ready)

    def prebound(self, workspace: Path) -> Worker | None:
        """A runner `prebind` started for `workspace`, its bind and load read (a failure raises as a cold
        runner's would) and attached, or None when there is none left."""
        waiting = self._prebound.get(Path(workspace).resolve())
        if not waiting:
            return None
        worker = waiting.pop(0)
        worker.finish()
        self._attach(worker, Path(workspace).resolve())
        return worker

    def loaded(self, workspace: Path, log_name: str, deadline_s: float) -> Worker:
        """A runner for `workspace` with its kernel imported: a prebound one, else a new one that loads now."""
        worker = self.prebound(workspace)
        if worker is None:
            worker = self.runner(workspace, log_name, timed=True)
            worker.call("load", deadline_s)
        return worker

    def discard_prebound(self, keep: tuple[Path, ...] = ()) -> None:
        """Close the runners `prebind` started, except those for `keep`: none may run while another kernel is
        timed."""
        keep_paths = {Path(k).resolve() for k in keep}
        for workspace in [w for w in self._prebound if w not in keep_paths]:
            for worker in self._prebound.pop(workspace):
                self.close_runner(worker)

    def close_runner(self, worker: Worker, wait: bool = False) -> None:
        """End a runner (`wait`: until it has exited, its device memory freed) and drop its files at the oracle and
        its scratch directory."""
        worker.close(wait=wait)
        if self._oracle is not None:
            try:
                self.ask("detach", runner=worker.pid)
            except JudgeError:
                pass
        if worker.exchange is not None:
            shutil.rmtree(worker.exchange, ignore_errors=True)
        self._drop_scratch(worker.pid)

    def _drop_scratch(self, pid: int) -> None:
        if (scratch := self._scratch.pop(pid, None)) is not None:
            shutil.rmtree(scratch, ignore_errors=True)

    def exchange_dir(self) -> Path:
        return places.exchange_dir(self.root)

    def timing_logs(self, workspace: Path) -> Path:
        """Where the timed runners of the kernel in `workspace` write their logs."""
        return places.timing_logs(self.root, workspace)

    def _rules(self, workspace: Path, exchange: Path | None = None, scratch: Path | None = None):
        """The confinement of a runner in `workspace` (None when unconfined) and its environment."""
        if not self.confine:
            return None, self.env()
        return places.rules(self.env(), workspace, exchange, scratch)

    def _attach(self, worker: Worker, workspace: Path) -> None:
        """Have the oracle make the runner's host files in its exchange directory, owned by the uid the runner said
        it has once confined, before any kernel code ran (one left root has no capability to open others' files), or
        by the owner of what it writes. A failure there is the runner's verdict, never the round's: the runner is
        closed, WorkerError (`tampered` where the oracle found the directory or a file in it not as judge made it)."""
        directory = worker.exchange if worker.exchange is not None else self.exchange_dir()
        worker.exchange = directory
        uid = (worker.hello or {}).get("uid")
        owner = uid if isinstance(uid, int) else self._scratch.get(worker.pid, workspace).stat().st_uid
        try:
            self.oracle.call("attach", ORACLE_LIMIT_S, runner=worker.pid, directory=str(directory), owner=owner)
        except CommandFailed as error:
            self.close_runner(worker)
            status = "tampered" if error.error.startswith("ExchangeError") else "crashed"
            raise WorkerError(status, f"its exchange files could not be made: {error.error}", worker.log_tail())
        except WorkerError as error:
            raise JudgeError(f"{self.target.path}: the oracle failed (attach): {error.message}; "
                             f"see {self.root / 'oracle.log'}") from None

    def pin_timing(self, *workers: Worker) -> None:
        """Put the runners of a timed pair on the same cores (their threads too), the same for base and
        candidate; a kernel cannot widen its own (judge.sandbox.confine denies sched_setaffinity)."""
        if self.cores:
            for worker in workers:
                pin(worker.pid, self.cores["timing"])

    def _top_up(self) -> None:
        """Start spares until the pool is full, and have those that have imported torch make their CUDA
        context now: a runner is being started, so nothing is being timed."""
        while len(self._pool) < self.spares:
            self._pool.append(self._new_spare())
        if self.target.on_cpu:
            return
        for spare in self._ready_spares():
            if spare.pid not in self._told_cuda:
                spare.start("cuda")
                self._told_cuda.add(spare.pid)

    def _ready_spares(self) -> list[Worker]:
        """The spares that have loaded; one that broke while loading is closed and dropped (judge's loss)."""
        ready = []
        for spare in list(self._pool):
            try:
                if spare.is_ready():
                    ready.append(spare)
            except (WorkerError, CommandFailed):
                spare.close()
                self._pool.remove(spare)
        return ready

    def settle(self) -> None:
        """Before timing: no spare may touch the GPU or, on a CPU target, take a core from a measurement. A
        spare making its CUDA context finishes it; spares that wait are stopped. On a GPU target a spare still
        importing torch goes on (CPU work, on other cores than the timed pair's); on a CPU target it is waited
        for."""
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

    def _runner_setup(self, workspace: Path, exchange: Path, timed: bool = False
                      ) -> tuple[dict, dict | None, dict[str, str], Path | None]:
        """What a runner for `workspace` is given, cold or bound from a spare: its init, its confinement policy
        (JSON, None when unconfined), its environment and, for a timed runner, its scratch directory; `exchange`
        is its host files' directory.

        A timed runner may read its workspace and write only in a new scratch directory of its own (its HOME,
        TMPDIR and caches, which start as a copy of the workspace's caches, so that what its correctness runner
        compiled is found): nothing one pair's runner writes reaches a later runner, of this kernel or another.
        That is what lets a round time the same input sets in every pair (`keep_sets`)."""
        from ..sandbox.isolation import policy_to_json

        scratch = places.new_scratch(self.root, workspace) if timed and self.confine else None
        rules, env = self._rules(workspace, exchange, scratch)
        init = {"workspace": str(workspace), "kernel_file": self.target.kernel_file}
        return init, policy_to_json(rules) if rules else None, env, scratch

    def _new_spare(self) -> Worker:
        """A spare forked from the template (its cores are the template's), or one that imports torch itself
        where there is no template or it has ended: a broken template is judge's loss, never a kernel's."""
        self._started += 1
        # a name no kernel can guess: a runner bound from this spare may write here (spare_policy)
        home = fresh(self.root / "spares" / f"{self._started}-{secrets.token_hex(8)}")
        _, env = self._rules(home)
        forks = self._template()
        if forks is not None:
            try:
                return Worker("runner", None, cwd=home, log_path=home / "spare.log", env=env, poll_s=self.poll_s,
                              forks=forks)
            except OSError:
                pass
        worker = Worker("runner", None, cwd=home, log_path=home / "spare.log", env=env, poll_s=self.poll_s)
        if self.cores:
            pin(worker.pid, self.cores["others"])
        return worker

    def _template(self) -> ForkServer | None:
        """The process the spares are forked from (judge.sandbox.forkserver), started with the first spare; None
        where pidfds are missing or it has ended. By default only a GPU target's: there twelve spares a GPU must
        keep up with its pairs, where a CPU target keeps two. On the 2-core VM, identical vecadd_cpu kernels in
        forked runners compared up to 1.032-1.049x apart (16 runs), and 1.020x in runners that imported torch
        themselves (6 runs, 2026-11-26): until that is understood, CPU timing keeps the processes it had."""
        wanted = not self.target.on_cpu if self.fork_spares is None else self.fork_spares
        if self._forks is None and wanted and forkserver.available():
            home = fresh(self.root / "spares" / "template")
            _, env = self._rules(home)
            self._forks = ForkServer(home=home, env=worker_env(env), log_path=home / "template.log")
            if self.cores:
                pin(self._forks.pid, self.cores["others"])
        return self._forks if self._forks is not None and self._forks.running else None

    def close(self) -> None:
        self.discard_prebound()
        for pid in list(self._scratch):
            self._drop_scratch(pid)
        for worker in (self._oracle, *self._pool):
            if worker is not None:
                worker.close()
        if self._forks is not None:
            self._forks.close()
        self._oracle = None
        self._pool = []
        self._forks = None

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def default_spares(target: Target) -> int:
    """Spare runners to keep loading ahead: on a GPU host three for every four cores, up to twelve (a candidate
    takes seven; on an H100 a round of 8 vecadd candidates took 239 s with six, 164 s with twelve); on a CPU target
    two, which timing waits for (they would take a core from the measurement)."""
    return 2 if target.on_cpu else max(1, min(MAX_SPARES, (os.cpu_count() or 1) * 3 // 4))
