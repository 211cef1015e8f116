"""The trusted processes' use of device memory around what they run: torch's cache given back where others need
the room, and autograd kept off where an answer or a check needs no graph. Used by the oracle and, for its cache,
by the runner; torch is imported lazily."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager


# A process keeps up to this much of torch's cached GPU memory between cases (release).
RELEASE_ABOVE_BYTES = 4 << 30


def release(always: bool = False) -> None:
    """Give cached GPU memory back once this process holds more than RELEASE_ABOVE_BYTES (or `always`): the
    oracle and the runners beside it take their room from the same device, and one process's cache is no room to
    another. Below that the cache is kept for the next case: emptying it after every verify took 4-5 ms of the
    13-16 ms a verify took on an H100 (vecadd, 2026-11-25)."""
    import torch

    if torch.cuda.is_available() and (always or torch.cuda.memory_reserved() > RELEASE_ABOVE_BYTES):
        torch.cuda.empty_cache()


def working_memory(allocated_before: int, reserved_before: int, output_bytes: int) -> int:
    """A call's working memory beyond its output, from torch's counters reset before it: the most torch reserved
    for it, not only what its tensors held at their peak. Blocks of many sizes leave gaps the allocator cannot reuse,
    and a process holds what is reserved: trimul's seqlen-1024 runners held 25 GiB each on an H200 (2026-11-29),
    far past what the plan had counted from the tensors' peak."""
    import torch

    allocated = torch.cuda.max_memory_allocated() - allocated_before
    reserved = torch.cuda.max_memory_reserved() - reserved_before
    return max(0, max(allocated, reserved) - output_bytes)


def ran_out(error: BaseException | str) -> bool:
    """Whether a failure was the device running out of memory (torch's OutOfMemoryError, CUDA's out-of-memory
    error, in the oracle or a runner): room that judge's processes and a pair's runners share, not the reference's
    or the kernel's fault."""
    return "out of memory" in str(error).lower().replace("_", " ")


def without_graph(call, *args, fresh=None):
    """`call(*args)` with autograd off: an answer or a check needs no graph, and a reference that runs an nn.Module
    with parameters holds every activation through one while it runs (trimul's, 25 GiB at seqlen 1024). Where the
    call fails for want of autograd (a reference that takes gradients), it runs again with autograd on, on
    `fresh()`'s arguments where given (a copy the first run has not written into)."""
    import torch

    try:
        with torch.no_grad():
            return call(*args)
    except RuntimeError as error:
        if "grad" not in str(error):
            raise
    return call(*(fresh() if fresh is not None else args))


@contextmanager
def peak_noted(what: str, log=None):
    """Around one of the oracle's steps: where torch reserved more than RELEASE_ABOVE_BYTES for it at its peak, one
    line in the oracle's log with that peak and the device's free memory after it, so that a round's peak can be put
    on the step that made it (a sampler of the whole device sees only that some process grew)."""
    import torch

    if not torch.cuda.is_available():
        yield
        return
    torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    try:
        yield
    finally:
        reserved = torch.cuda.max_memory_reserved()
        if reserved > RELEASE_ABOVE_BYTES:
            free, total = torch.cuda.mem_get_info()
            print(f"judge oracle: {what} peaked at {reserved >> 20} MiB reserved by torch "
                  f"({torch.cuda.max_memory_allocated() >> 20} MiB of tensors) in {time.perf_counter() - started:.2f} "
                  f"s; the device has {free >> 20} of {total >> 20} MiB free after it", file=log or sys.stderr)


class Collections:
    """The oracle's full collections between benchmarks (collect_beyond), and what the last one could not free."""

    def __init__(self):
        self.unfreed = 0  # bytes beyond those kept on purpose that the last collection left: held by design elsewhere

    def collect_beyond(self, expected: int, what: str) -> None:
        """Where this process holds more than RELEASE_ABOVE_BYTES of tensors beyond the `expected` bytes it keeps on
        purpose and beyond what the last collection could not free (`unfreed`), run a collection and give the cache
        back, with a line on what it found: tensors reachable only through a reference cycle wait for a full
        collection, which a process that makes few Python objects seldom runs. trimul's oracle held 28 GiB of tensors
        as a pair began and 2 GiB one benchmark later (an H200, 2026-11-29). What a collection leaves is held on
        purpose outside the kept sets, and collecting again for it finds nothing: fp8-mm's oracle held 4.4 GiB so,
        and a collection and an emptied cache after every benchmark from the first pair's last on found 127 objects
        and freed nothing, 90 ms each, 1.1 s of each 6.8 s pair (H200, 2026-11-30)."""
        import gc

        import torch

        if not torch.cuda.is_available():
            return
        before = torch.cuda.memory_allocated()
        if before - expected - self.unfreed <= RELEASE_ABOVE_BYTES:
            return
        found = gc.collect()
        after = torch.cuda.memory_allocated()
        self.unfreed = max(0, after - expected)
        release(always=True)
        print(f"judge oracle: {what}: {before >> 20} MiB of tensors held ({expected >> 20} MiB kept on purpose), "
              f"{after >> 20} MiB after a collection that found {found} objects", file=sys.stderr)


def log_device_memory(what: str, reserve: int) -> None:
    """One line in the log (the oracle's): the device's memory after `what`, beside what judge's plan reserved for it
    (judge.stages.budget), so that a plan the processes outgrow shows where (cholesky_py's oracle held 60.5 GiB of
    an H100 where its plan counted far less)."""
    import torch

    if not torch.cuda.is_available():
        return
    free, total = torch.cuda.mem_get_info()
    print(f"judge oracle: {what}: this process holds {torch.cuda.memory_allocated() >> 20} MiB of tensors "
          f"({torch.cuda.memory_reserved() >> 20} MiB reserved by torch) and its areas; the device has "
          f"{free >> 20} of {total >> 20} MiB free; the plan reserved {reserve >> 20} MiB for this benchmark",
          file=sys.stderr)
