"""Warm compile workers (judge.stages.compile.workers): one candidate per worker, and the verdicts of a cold compile."""

import os
from pathlib import Path

import pytest

from judge.stages.compile.stage import run_compile
from judge.stages.compile.workers import CompileWorkers
from judge.targets import load_target
from test_compile import needs_dsl, workspace

AXPY = Path(__file__).parent / "fixtures" / "axpy"


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ")[1][0] not in "ZX"
    except FileNotFoundError:
        return False


def test_a_warm_worker_serves_one_call_then_is_gone(tmp_path):
    workers = CompileWorkers(tmp_path / "w", cores=None, spares=1, jobs=2)
    try:
        first = workers.run("os:getpid", {}, timeout_s=60, cwd=tmp_path)
        second = workers.run("os:getpid", {}, timeout_s=60, cwd=tmp_path)
        assert (first.status, second.status) == ("ok", "ok")
        assert first.value != second.value  # two candidates, two processes
        assert not alive(first.value) and not alive(second.value)
        assert workers._pool == []  # no spare beyond the jobs announced
    finally:
        workers.close()


@pytest.mark.parametrize("line, status, summary", [
    ("raise RuntimeError('boom')", "failed", "RuntimeError: boom (submission.py:6: `raise RuntimeError('boom')`)"),
    ("import os; os._exit(3)", "crashed", "crashed: exited with code 3 before returning importing submission.py"),
    ("import ctypes; ctypes.string_at(0)", "crashed",
     "crashed: killed by signal SIGSEGV importing submission.py"),
    ("import time; time.sleep(600)", "timed-out", "timed out after 15 s importing submission.py"),
    ("", "passed", "imported submission.py; no compile hook: the kernel compiles at its first call"),
])
def test_a_warm_import_gives_the_cold_verdict(tmp_path, line, status, summary):
    target = load_target(AXPY)
    source = target.kernel_source().replace("# knobs\n", f"# knobs\n{line}\n") if line else target.kernel_source()
    verdicts = []
    workers = CompileWorkers(tmp_path / "w", cores=[sorted(os.sched_getaffinity(0))[0]], spares=1, jobs=1)
    try:
        for how, pool in (("cold", None), ("warm", workers)):
            ws = target.assemble(tmp_path / how, source)
            limit = 15 if status == "timed-out" else 120  # a cold child's torch import took 10 s on a loaded 2-core VM
            result = run_compile(target, ws, cache_dir=tmp_path / "cache", timeout_s=limit, workers=pool)
            verdicts.append((result.status, result.summary, result.detail.error))
    finally:
        workers.close()
    assert verdicts[0] == verdicts[1]
    assert verdicts[0][:2] == (status, summary)


@needs_dsl
def test_a_warm_compile_gives_the_cold_configs_resources_and_cache_keys(tmp_path):
    target, cold_ws = workspace(tmp_path, name="cold")
    _, warm_ws = workspace(tmp_path, name="warm")
    workers = CompileWorkers(tmp_path / "w", cores=None, spares=1, jobs=2)
    try:
        cold = run_compile(target, cold_ws, cache_dir=tmp_path / "cold-cache")
        warm = run_compile(target, warm_ws, cache_dir=tmp_path / "warm-cache", workers=workers)
        hit = run_compile(target, warm_ws, cache_dir=tmp_path / "warm-cache", workers=workers)
        changed = target.kernel_source().replace("THREADS = 128", "THREADS = 256")
        miss = run_compile(target, target.assemble(tmp_path / "changed", changed), cache_dir=tmp_path / "warm-cache",
                           workers=workers)
    finally:
        workers.close()
    assert (cold.status, warm.status) == ("passed", "passed")
    assert warm.summary == cold.summary
    (c,), (w,) = cold.detail.configs, warm.detail.configs
    assert (w.signature, w.benchmarks, w.key, w.kernels, w.ptx_bytes, w.cubin_bytes, w.notes, w.cached) == \
        (c.signature, c.benchmarks, c.key, c.kernels, c.ptx_bytes, c.cubin_bytes, c.notes, False)
    assert hit.summary == cold.summary + " (1 cached)" and hit.detail.configs[0].cached is True
    (m,) = miss.detail.configs
    assert not m.cached and m.key != c.key and m.kernels[0].threads == 256


SWAP_WRITER = """
import sys
_frame = sys._getframe(0)
while _frame is not None and not (_frame.f_code.co_name == "serve" and "send" in _frame.f_locals):
    _frame = _frame.f_back
_send = _frame.f_locals["send"]
_send.__closure__[_send.__code__.co_freevars.index("_send")].cell_contents = lambda fd, data: len(data)
"""


def test_a_kernel_that_swaps_the_warm_workers_reply_writer_is_tampered(tmp_path):
    """The red team's forge_reply_silent, caught at its import: a warm compile serves in judge.sandbox.child's loop."""
    target = load_target(AXPY)
    ws = target.assemble(tmp_path / "ws", target.kernel_source().replace("# knobs\n", "# knobs\n" + SWAP_WRITER))
    workers = CompileWorkers(tmp_path / "w", cores=None, spares=1, jobs=1)
    try:
        result = run_compile(target, ws, cache_dir=tmp_path / "cache", timeout_s=120, workers=workers)
    finally:
        workers.close()
    assert (result.status, result.summary) == (
        "tampered", "tampered: replaced the writer of judge's reply channel in its process importing submission.py")
