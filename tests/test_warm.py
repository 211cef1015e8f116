"""Warm spare runners (judge/stages/evaluation.py, judge/sandbox/worker.py, judge/sandbox/child.py): a process that has loaded torch
before its kernel is known becomes the next candidate's runner, confined exactly as a cold start; while
something is timed, no spare touches the GPU or, on a CPU target, runs at all."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import torch

from judge.stages.check import check
from judge.sandbox.worker import CommandFailed, WorkerError
from judge.stages.evaluation import Evaluator
from judge.targets import load_target
from judge.stages.timing.stage import measure

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "kernels" / "vecadd_cpu"


def state(pid: int) -> str:
    """The process state letter of /proc/PID/stat: R, S, T (stopped)... A stop signal is delivered a moment
    after it is sent: a running process is looked at again for up to two seconds."""
    deadline = time.monotonic() + 2.0
    while True:
        letter = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if letter != "R" or time.monotonic() > deadline:
            return letter
        time.sleep(0.01)


def test_the_next_runner_is_the_spare_and_is_confined_like_a_cold_one(tmp_path):
    target = load_target(TARGET)
    source = target.kernel_source()
    first = target.assemble(tmp_path / "first", source)
    second = target.assemble(tmp_path / "second", source)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (second / ".judge").symlink_to(elsewhere)  # where runners' files once went: a kernel's link (issue 39)
    with Evaluator(target, tmp_path / "round") as warm, Evaluator(target, tmp_path / "cold", warm=False) as cold:
        runner = warm.runner(first)
        assert len(warm._pool) == warm.spares == 2  # a CPU target keeps two spares
        spare = warm._pool[0]
        spare.ready()
        assert spare.hello == {"pid": spare.pid, "ready": True}
        warm.close_runner(runner)
        taken = warm.runner(second, "second.log")
        assert taken is spare and spare not in warm._pool and len(warm._pool) == 2  # a new one loads behind it
        assert taken.call("load", 60).value is not None
        assert (second / "second.log").exists()
        # its files, made by the oracle in a directory of judge's, out of the workspace (issue 39)
        assert taken.exchange.parent == warm.root / "exchange" and (taken.exchange / "inbox").exists()
        assert list(elsewhere.iterdir()) == []
        cold_runner = cold.runner(target.assemble(tmp_path / "third", source))
        assert cold._pool == []
        # confined alike, but for the spare's own directory, which a bound spare may still write (spare_policy)
        warm_confinement = dict(taken.hello["confinement"])
        warm_confinement["filesystem"] = warm_confinement["filesystem"].replace("write only in 2 paths",
                                                                                "write only in 1 path")
        assert warm_confinement == cold_runner.hello["confinement"]
        if not torch.cuda.is_available():  # on a GPU the driver's threads start with the CUDA context, earlier
            assert "earlier threads" not in json.dumps(cold_runner.hello["confinement"])
        cold.close_runner(cold_runner)
        warm.close_runner(taken)


class _FailingOracle:
    def __init__(self, error: str):
        self.error = error

    def call(self, op, timeout_s, **args):
        raise CommandFailed(self.error)

    def close(self):
        pass


class _Runner:
    pid, exchange, closed, hello = 4321, None, False, None

    def close(self, wait=True):
        self.closed = True

    def log_tail(self):
        return "the runner's log"


@pytest.mark.parametrize("error, status", [
    ("ExchangeError: the exchange directory /r/exchange/ab was not empty", "tampered"),
    ("PermissionError: [Errno 13] Permission denied", "crashed"),
])
def test_a_runner_whose_files_the_oracle_cannot_make_is_that_runners_verdict(tmp_path, error, status):
    """Issue 39: the oracle's attach failing for a runner ended the round ('the reference failed in the oracle')."""
    with Evaluator(load_target(TARGET), tmp_path / "round", warm=False) as evaluator:
        evaluator._oracle = _FailingOracle(error)
        runner = _Runner()
        with pytest.raises(WorkerError) as raised:
            evaluator._attach(runner, tmp_path)
        assert (raised.value.status, raised.value.message) == (status, f"its exchange files could not be made: {error}")
        assert raised.value.log_tail == "the runner's log"
        assert runner.closed and not runner.exchange.exists()


def base_and_candidate(tmp_path):
    """The CPU target, and its base kernel assembled twice: as the round's base and as a candidate."""
    target = load_target(TARGET)
    source = target.kernel_source()
    return target, target.assemble(tmp_path / "base", source), target.assemble(tmp_path / "candidate", source)


def ready_spares(evaluator: Evaluator, count: int) -> None:
    """Start runners until `count` spares have imported torch."""
    while len(evaluator._pool) < count:
        evaluator._pool.append(evaluator._new_spare())
    for spare in evaluator._pool:
        spare.ready()


def test_the_first_pairs_are_bound_for_base_and_candidate_alike_while_the_cases_run(tmp_path):
    target, base, candidate = base_and_candidate(tmp_path)
    with Evaluator(target, tmp_path / "round", base_dir=base, spares=7) as evaluator:
        ready_spares(evaluator, 7)
        checker = evaluator._pool[0]
        result = check(evaluator, candidate, timing_next=True, nonce=1)
        assert result.passed, result.summary
        assert checker.process.wait(timeout=10) is not None  # the correctness runner is closed: never timed
        bound = {workspace.name: len(workers) for workspace, workers in evaluator._prebound.items()}
        assert bound == {"base": 3, "candidate": 3}
        assert all([op for _, op in w._pending] == ["bind", "load"] for ws in evaluator._prebound.values() for w in ws)
        timing = measure(evaluator, candidate, budget_s=0.5, nonce=1)
        assert timing.passed, timing.summary
        assert all(workers == [] for workers in evaluator._prebound.values())
        assert evaluator.cores is None or timing.detail.cores == evaluator.cores["timing"]
        # the spares started behind them were stopped while the pairs were timed
        assert all(state(spare.pid) == "T" for spare in evaluator._pool if spare.hello is not None)


def test_binding_ahead_tops_up_to_the_pairs_count_as_spares_become_ready(tmp_path):
    """A check asks before each of its cases (judge.stages.check) for runners bound ahead until the timing's first
    pairs have theirs: spares that became ready meanwhile are bound, and no more than the pairs take."""
    target, base, candidate = base_and_candidate(tmp_path)
    with Evaluator(target, tmp_path / "round", base_dir=base, spares=5, warm=False) as evaluator:
        ready_spares(evaluator, 2)
        assert evaluator.prebind(candidate, 3) == 2  # two ready of the three wanted
        ready_spares(evaluator, 2)
        assert evaluator.prebind(candidate, 3) == 1  # the third, and no fourth
        assert evaluator.prebind(candidate, 3) == 0 and len(evaluator._pool) == 1
        assert [len(w) for w in evaluator._prebound.values()] == [3]


def test_a_pair_without_runners_bound_ahead_binds_both_before_it_waits_for_either(tmp_path, monkeypatch):
    """A pair whose runners no check bound (the control's later pairs, a candidate's fourth) sends both binds and
    loads before it reads either: the two kernels import at once, not one after the other."""
    from judge.stages.timing import stage

    target, base, candidate = base_and_candidate(tmp_path)
    events = []
    with Evaluator(target, tmp_path / "round", base_dir=base, spares=2, warm=False) as evaluator:
        ready_spares(evaluator, 2)
        prebind, prebound = evaluator.prebind, evaluator.prebound
        monkeypatch.setattr(evaluator, "prebind", lambda w, n, prefix="timing": events.append(
            f"bind {Path(w).name}") or prebind(w, n, prefix))
        monkeypatch.setattr(evaluator, "prebound", lambda w: events.append(f"read {Path(w).name}") or prebound(w))
        result = stage.time_pair(evaluator, candidate, 0, 1, time.monotonic() + 120)
        assert not result.failure, result.failure
    assert sorted(events[:2]) == ["bind base", "bind candidate"] and sorted(events[2:]) == ["read base",
                                                                                             "read candidate"]


def test_a_kernel_whose_second_process_fails_to_load_it_crashes_in_timing(tmp_path):
    target, base, _ = base_and_candidate(tmp_path)
    # The first process to import it leaves a mark; the next (a timing runner) raises on it.
    once = ("import os as _os\n"
            "if _os.path.exists('.imported'):\n"
            "    raise RuntimeError('second import refused')\n"
            "open('.imported', 'w').close()\n")
    candidate = target.assemble(tmp_path / "once", once + target.kernel_source())
    with Evaluator(target, tmp_path / "round", base_dir=base, spares=3) as evaluator:
        result = check(evaluator, candidate, timing_next=True, nonce=1)
        assert result.passed, result.summary
        timing = measure(evaluator, candidate, budget_s=0.5, nonce=1)
    assert (timing.stage, timing.status) == ("timing", "crashed")
    assert timing.summary.startswith("crashed: RuntimeError: second import refused"), timing.summary


def test_a_candidate_that_fails_its_cases_leaves_no_runner_bound_for_timing(tmp_path):
    target, base, _ = base_and_candidate(tmp_path)
    wrong = target.kernel_source() + "\n\n_honest = custom_kernel\ncustom_kernel = lambda data: _honest(data) * 2\n"
    with Evaluator(target, tmp_path / "round", base_dir=base, spares=4) as evaluator:
        ready_spares(evaluator, 4)
        bound = evaluator._pool[1:]
        result = check(evaluator, target.assemble(tmp_path / "wrong", wrong), timing_next=True, nonce=1)
        assert result.status == "failed"
        assert evaluator._prebound == {}
        assert all(w.process.wait(timeout=10) is not None for w in bound)  # killed: no candidate process runs on


def test_a_spare_that_died_gives_way_to_a_cold_start(tmp_path):
    target = load_target(TARGET)
    source = target.kernel_source()
    with Evaluator(target, tmp_path / "round") as evaluator:
        evaluator.close_runner(evaluator.runner(target.assemble(tmp_path / "first", source)))
        dead = evaluator._pool[0]
        dead.ready()
        os.kill(dead.pid, signal.SIGKILL)
        runner = evaluator.runner(target.assemble(tmp_path / "second", source))
        assert runner is not dead and runner.process.poll() is None
        assert runner.call("load", 60).value is not None
        evaluator.close_runner(runner)


def test_on_a_gpu_target_spares_make_their_cuda_context_only_when_nothing_is_timed(tmp_path):
    """A GPU target (run here on the CPU, where `cuda` does nothing): spares that have imported torch are told
    to make their CUDA context when a runner is started; before timing, that finishes and they are stopped,
    while a spare still importing torch (CPU work only) goes on."""
    target = load_target(ROOT / "tests" / "fixtures" / "gpumode" / "vecadd")
    source = target.kernel_source()
    with Evaluator(target, tmp_path / "round", spares=2) as evaluator:
        evaluator.close_runner(evaluator.runner(target.assemble(tmp_path / "first", source)))
        assert len(evaluator._pool) == 2
        for spare in evaluator._pool:
            spare.ready()
        second = evaluator.runner(target.assemble(tmp_path / "second", source))
        told, new = evaluator._pool
        assert told.busy and not new.busy  # the older one was told to make its context; the new one imports
        evaluator.settle()
        assert not told.busy and state(told.pid) == "T"
        assert state(new.pid) == "T" if new.hello is not None else state(new.pid) != "T"
        evaluator.close_runner(second)


@pytest.mark.gpu
def test_on_a_gpu_the_spare_has_cuda_before_its_kernel_and_times_like_a_cold_runner(tmp_path):
    """The spare makes its CUDA context before bind; the candidate it becomes must check and time as a cold one."""
    target = load_target(ROOT / "tests" / "fixtures" / "gpumode" / "vecadd")
    source = target.kernel_source()
    base = target.assemble(tmp_path / "base", source)
    with Evaluator(target, tmp_path / "round", base_dir=base) as evaluator:
        for name in ("first", "second"):  # every runner after the first is a spare
            workspace = target.assemble(tmp_path / name, source)
            result = check(evaluator, workspace, timing_next=True)
            assert result.passed, result.summary + result.log_tail
            timing = measure(evaluator, workspace, budget_s=2)
            assert timing.passed, timing.summary + timing.log_tail
            assert 0.98 < timing.detail.geomean < 1.02, timing.summary
        assert result.detail.runner_start_s < 1.0  # bound, not started


def test_a_kernel_on_a_spare_writes_its_temp_files_in_its_own_workspace(tmp_path):
    """A spare imports torch's compiler before it knows its kernel, and that import fixes Python's temp directory
    (tempfile.tempdir) under the spare's own environment; the FP8 kernel's first call then crashed on the H100
    with PermissionError, since the confined kernel may not write there. After the bind, the temp directory is
    the workspace's. torch's precompiled C++ header goes with the runner's caches (judge.boundary.runner), where
    a timed runner of the same kernel finds it."""
    target = load_target(TARGET)
    source = target.kernel_source()
    probe = ("import tempfile as _t\n"
             "_fd, _path = _t.mkstemp()\n"
             "open('tempdir.txt', 'w').write(_t.gettempdir() + '\\n' + _path)\n"
             # a path torch's compiler fixed at its import in the spare (where this torch has it): still writable
             "import os as _os\n"
             "import torch._inductor.codecache as _cc\n"
             "_headers = getattr(_cc, '_HEADER_DIR', None)\n"
             "if _headers:\n"
             "    _os.makedirs(_headers, exist_ok=True)\n"
             "    open(_os.path.join(_headers, 'written'), 'w').close()\n"
             "open('headers.txt', 'w').write(str(_headers))\n")
    with Evaluator(target, tmp_path / "round") as evaluator:
        evaluator.close_runner(evaluator.runner(target.assemble(tmp_path / "first", source)))
        spare = evaluator._pool[0]
        spare.ready()
        workspace = target.assemble(tmp_path / "second", probe + source)
        runner = evaluator.runner(workspace)
        assert runner is spare
        assert runner.call("load", 60).value is not None
        evaluator.close_runner(runner)
    tempdir, path = (workspace / "tempdir.txt").read_text().splitlines()
    assert Path(tempdir) == (workspace / ".tmp").resolve()
    assert Path(path).parent == (workspace / ".tmp").resolve()
    headers = (workspace / "headers.txt").read_text()
    if headers != "None":  # a torch that has the name
        assert Path(headers) == (workspace / ".cache" / "inductor" / "precompiled_headers").resolve()
        assert (workspace / ".cache" / "inductor" / "precompiled_headers" / "written").is_file()


def test_only_the_oracle_of_a_gpu_target_gets_expandable_segments(tmp_path, monkeypatch):
    """The oracle's allocator grows in segments on a GPU (its checks and answers of gigabytes left blocks no later
    step could reuse); the runners keep torch's default, as a kernel's own process has it, and a setting of the
    user's is kept for both."""
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    target = load_target(TARGET)
    evaluator = Evaluator(target, tmp_path / "cpu", warm=False)
    assert "PYTORCH_CUDA_ALLOC_CONF" not in evaluator.oracle_env()
    target.arch = "sm_90"
    evaluator = Evaluator(target, tmp_path / "gpu", warm=False)
    assert evaluator.oracle_env()["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert "PYTORCH_CUDA_ALLOC_CONF" not in evaluator.env()
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:512")
    assert evaluator.oracle_env()["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:512"
    assert evaluator.env()["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:512"
