"""Which of a host's cores an evaluation's timed pairs take (a block per GPU) and which its oracle, spares and
compiles use; and blocks of cores for evaluations that share a host: Ray's CPU actors (judge.ray_dispatch) of a CPU
target.

Ray counts a node's CPUs but gives an actor no particular cores, so two actors on one host would both pin their
timed pairs to the same last core (placement). Here each evaluation on a host holds a block of
its own: its timed pair's cores and one more for its oracle and spares, so nothing of one evaluation runs on
another's timing cores. An actor claims the first free block with a lock file per core that its process holds
until it ends; an actor that dies frees its block for the one Ray starts in its place.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path
from typing import Optional

from .machine import host_gpu_count
from .targets import Target

# Cores an evaluation needs besides its timed pair's: one for the oracle and the spare runners.
OTHERS = 1


def block_size(target: Target) -> int:
    """The cores one evaluation of `target` holds: its timed pair's and one for its oracle and spares."""
    return target.cores_for_timing + OTHERS


def blocks_on_host(target: Target) -> int:
    """How many evaluations this host's cores hold, one block each."""
    return len(os.sched_getaffinity(0)) // block_size(target)


def block_placement(target: Target, block: int) -> Optional[dict[str, list[int]]]:
    """Block `block`'s cores, counted from the last ones this process may use: its timed pair's (the block's
    last) and the rest for the oracle and spares. None past the host's blocks: Ray's CPUs are logical, a
    cluster may hold more actors than a host has blocks, and those pin nothing."""
    allowed = sorted(os.sched_getaffinity(0))
    size, need = block_size(target), target.cores_for_timing
    end = len(allowed) - block * size
    if block < 0 or end - size < 0:
        return None
    cores = allowed[end - size:end]
    return {"timing": cores[-need:], "others": cores[:-need]}


def claim_block(target: Target, locks: Optional[Path] = None) -> tuple[int, list[int]]:
    """The first block of this host's cores that no live process holds, and the open lock files (one per core,
    so that targets with blocks of other sizes never overlap) that hold it: keep them open, they close with the
    process. Where no block is free: the number of blocks (no cores: nothing pinned) and no locks."""
    directory = locks or Path(tempfile.gettempdir()) / "judge-core-blocks"
    directory.mkdir(exist_ok=True)
    blocks = blocks_on_host(target)
    for block in range(blocks):
        cores = block_placement(target, block)
        locked = [_lock(directory / f"core-{core}.lock") for core in cores["others"] + cores["timing"]]
        held = [fd for fd in locked if fd is not None]
        if len(held) == block_size(target):
            return block, held
        release(held)
    return blocks, []


def release(held: list[int]) -> None:
    """Free a block's cores for the next evaluation on this host."""
    for fd in held:
        os.close(fd)


def _lock(path: Path) -> Optional[int]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def placement(target: Target, gpu_index: int = 0, host_gpus: int | None = None) -> dict[str, list[int]] | None:
    """The cores a timed pair runs on (the target's budget, the last ones this process may use, a block per
    GPU of the host) and the rest, for the oracle, the spares and compiles; None where there are too few cores to
    set any apart. The rest leaves out every GPU's block, not only this one's: on a host whose GPUs are judged
    at once (--gpus, Ray), one evaluator's spares importing torch must not share a core with another's timed pair.
    `host_gpus`: judge.machine.host_gpu_count unless given. The first core is never in a block, so the rest is
    never empty."""
    allowed = sorted(os.sched_getaffinity(0))
    need = target.cores_for_timing

    def block(gpu: int) -> list[int] | None:
        end = len(allowed) - gpu * need
        return allowed[end - need:end] if end - need >= 1 else None

    timing = block(gpu_index)
    if timing is None:
        return None
    reserved = set(timing)
    for gpu in range(max(gpu_index + 1, host_gpu_count() if host_gpus is None else host_gpus)):
        reserved.update(block(gpu) or [])
    return {"timing": timing, "others": [c for c in allowed if c not in reserved]}


def visible_gpu() -> int:
    """The host's index of the first GPU CUDA_VISIBLE_DEVICES leaves this process (0 where it names none), so
    that evaluators on different GPUs of one host put their timed pairs on different cores."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


def pin(pid: int, cores: list[int]) -> None:
    """Every thread of process `pid` on `cores` (threads it starts later inherit the main thread's)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for task in tasks:
        try:
            os.sched_setaffinity(int(task), cores)
        except OSError:
            pass  # a thread that has just ended
