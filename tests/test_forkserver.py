"""Spares forked from a template (judge/sandbox/forkserver.py): what a forked spare holds, how its end reads to
judge though it is not judge's child, and spares that start cold where the template is missing or gone. A GPU
target's spares are forked by default; these tests ask for it on the CPU target, which runs anywhere."""

from __future__ import annotations

import os
import signal
import sys
import time
import types
from pathlib import Path

import pytest

from judge.sandbox import forkserver
from judge.sandbox.worker import WorkerError
from judge.stages.evaluation import Evaluator
from judge.targets import load_target

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "kernels" / "vecadd_cpu"

pytestmark = pytest.mark.skipif(not forkserver.available(), reason="this kernel has no pidfds: spares start cold")


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def gone(pid: int) -> bool:
    """Ended: no such process, or a zombie that nothing has reaped yet (an orphan, in a container without init)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_spare_is_forked_from_the_template_and_holds_only_its_own_pipes(tmp_path):
    target = load_target(TARGET)
    with Evaluator(target, tmp_path / "round", spares=1, fork_spares=True) as ev:
        ev.start()
        spare = ev._pool[0]
        spare.ready()
        template = ev._forks.pid
        assert parent_of(spare.pid) == template and parent_of(template) == os.getpid()
        links = sorted(os.readlink(f"/proc/{spare.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{spare.pid}/fd"))
        assert spare.home.parent == tmp_path / "round" / "spares" and spare.home.name.startswith("1-")  # unguessable
        log = str(spare.home / "spare.log")
        assert links[:3] == ["/dev/null", log, log] and len(links) == 5  # no socket to the template, no pidfd
        assert all(link.startswith("pipe:") for link in links[3:])
        assert Path(f"/proc/{spare.pid}/cwd").resolve() == spare.home
        runner = ev.runner(target.assemble(tmp_path / "cand", target.kernel_source()))
        assert runner is spare and runner.call("load", 60).value is not None
        ev.close_runner(runner)
        pids = [template, spare.pid, *(s.pid for s in ev._pool)]
    deadline = time.monotonic() + 5
    while not all(gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [gone(pid) for pid in pids] == [True] * len(pids)


@pytest.mark.parametrize("line, status, message", [
    ("import os\nos._exit(7)\n", "crashed", "exited with code 7 before returning"),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", "crashed", "killed by signal SIGSEGV"),
])
def test_a_forked_runner_that_dies_reads_as_a_cold_one_would(tmp_path, line, status, message):
    """The template, not judge, is the spare's parent: it reaps it and hands judge the exit status."""
    target = load_target(TARGET)
    with Evaluator(target, tmp_path / "round", spares=1, fork_spares=True) as ev:
        ev.start()
        ev._pool[0].ready()
        runner = ev.runner(target.assemble(tmp_path / "cand", line + target.kernel_source()))
        assert parent_of(runner.pid) == ev._forks.pid
        with pytest.raises(WorkerError) as caught:
            runner.call("load", 60)
        ev.close_runner(runner)
    assert (caught.value.status, caught.value.message) == (status, message)


def test_a_forked_runner_has_the_command_line_of_a_cold_one(tmp_path):
    """A kernel sees `python -m judge.sandbox.child serve CMD_FD REPLY_FD setup.json` in sys.argv either way, so a
    cheat that reads judge's channel from it meets the same defence (the red team's forge_reply: tampered, where
    an argv of the template's own made it crash instead)."""
    target = load_target(TARGET)
    probe = ("import os, sys\n"
             "if sys.argv[1] != 'serve' or not os.readlink(f'/proc/self/fd/{sys.argv[3]}').startswith('pipe:'):\n"
             "    raise RuntimeError(f'not a cold runner command line: {sys.argv}')\n")
    with Evaluator(target, tmp_path / "round", spares=1, fork_spares=True) as ev:
        ev.start()
        ev._pool[0].ready()
        runner = ev.runner(target.assemble(tmp_path / "cand", probe + target.kernel_source()))
        assert parent_of(runner.pid) == ev._forks.pid
        assert runner.call("load", 60).value is not None
        ev.close_runner(runner)


def test_runners_closed_without_waiting_leave_no_descriptor_open(tmp_path):
    """Judge holds a pidfd of each forked runner; a runner closed at once (close_runner) lets go of it when it is
    dropped, so a long round does not run out of file descriptors."""
    import gc

    target = load_target(TARGET)
    with Evaluator(target, tmp_path / "round", spares=1, fork_spares=True) as ev:
        ev.start()
        workspace = target.assemble(tmp_path / "cand", target.kernel_source())
        counts = []
        for _ in range(6):
            runner = ev.runner(workspace)
            assert parent_of(runner.pid) == ev._forks.pid
            ev.close_runner(runner)
            del runner
            gc.collect()
            ev._pool[0].ready()
            counts.append(len(os.listdir("/proc/self/fd")))
    assert counts == [counts[0]] * 6


def test_runners_start_cold_when_the_template_has_gone(tmp_path):
    """A template killed while its spares wait is judge's loss: its spares go with it, and the next runner is a
    cold one that judges the kernel as before."""
    target = load_target(TARGET)
    with Evaluator(target, tmp_path / "round", spares=2, fork_spares=True) as ev:
        ev.start()
        ev._pool[0].ready()
        forked = [spare.pid for spare in ev._pool]
        os.killpg(ev._forks.pid, signal.SIGKILL)
        ev._forks.process.wait()
        runner = ev.runner(target.assemble(tmp_path / "cand", target.kernel_source()))
        assert parent_of(runner.pid) == os.getpid() and runner.pid not in forked
        assert runner.call("load", 60).value is not None
        ev.close_runner(runner)
        assert all(parent_of(spare.pid) == os.getpid() for spare in ev._pool)  # the new spares import torch


def test_a_confined_runner_dies_with_its_template(tmp_path):
    """The drop to uid nobody clears a process's parent-death signal (where judge runs as root, as on the GPU
    hosts); confinement sets it again, so a runner whose template (or judge) has ended does not live on."""
    target = load_target(TARGET)
    with Evaluator(target, tmp_path / "round", spares=1, fork_spares=True) as ev:
        ev.start()
        ev._pool[0].ready()
        runner = ev.runner(target.assemble(tmp_path / "cand", target.kernel_source()))
        assert runner.call("load", 60).value is not None
        os.killpg(ev._forks.pid, signal.SIGKILL)
        ev._forks.process.wait()
        deadline = time.monotonic() + 5
        while not gone(runner.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gone(runner.pid), runner.hello["confinement"]["user"]
        ev.close_runner(runner)


def test_without_pidfds_spares_import_torch_themselves(tmp_path, monkeypatch):
    monkeypatch.setattr(forkserver, "available", lambda: False)
    target = load_target(TARGET)
    with Evaluator(target, tmp_path / "round", spares=1, fork_spares=True) as ev:
        ev.start()
        assert ev._forks is None and parent_of(ev._pool[0].pid) == os.getpid()


def test_by_default_a_gpu_targets_spares_are_forked_and_a_cpu_targets_are_not(tmp_path):
    target = load_target(TARGET)
    with Evaluator(target, tmp_path / "cpu", spares=1) as ev:
        ev.start()
        assert ev._forks is None and parent_of(ev._pool[0].pid) == os.getpid()
    target.arch = "sm_90"  # what the Evaluator reads to tell a GPU target; the template touches no GPU
    with Evaluator(target, tmp_path / "gpu", spares=1) as ev:
        assert ev._template() is ev._forks is not None


def test_a_rounds_settings_choose_forked_or_cold_spares_for_a_cpu_target(tmp_path):
    from judge.stage_calls import StageCalls

    target = load_target(TARGET)
    base = target.assemble(tmp_path / "base", target.kernel_source())
    for fork_spares, forked in ((True, True), (None, False), (False, False)):
        with StageCalls().open_round(target, tmp_path / str(fork_spares), base, fork_spares) as ev:
            assert (ev._template() is not None) is forked


def test_the_template_home_moves_to_the_spare_home_in_every_module(monkeypatch):
    """What the template's imports fixed under its home (tempfile's directory, torch's compiler's header
    directory) points at the spare's own home, which its confinement lets it write."""
    module = types.ModuleType("judge_test_fixed_paths")
    module.TMP = "/r/spares/template/.tmp"
    module.HEADERS = "/r/spares/template/.tmp/torchinductor_root/precompiled_headers"
    module.SIBLING = "/r/spares/template2/x"
    module.HOME = "/r/spares/template"
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(sys, "path", ["/r/spares/template", "/site"])
    forkserver.move_home("/r/spares/template", "/r/spares/7", forkserver.fixed_under("/r/spares/template"))
    assert (module.TMP, module.HEADERS, module.SIBLING, module.HOME) == (
        "/r/spares/7/.tmp", "/r/spares/7/.tmp/torchinductor_root/precompiled_headers", "/r/spares/template2/x",
        "/r/spares/7")
    assert sys.path == ["/site"]
