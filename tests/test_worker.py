"""The parent's end of a worker (judge/sandbox/worker.py): replies polled on GPU targets or waited for, the worker's own
account of when a command arrived and its reply left, and limits that hold while the parent polls."""

from __future__ import annotations

from pathlib import Path

import pytest

from judge.sandbox import worker
from judge.stages.evaluation import Evaluator
from judge.targets import load_target

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "kernels" / "vecadd_cpu"


def test_cpu_targets_never_poll_and_gpu_targets_do(tmp_path):
    target = load_target(TARGET)
    with Evaluator(target, tmp_path / "round", warm=False) as ev:
        assert ev.poll_s == 0.0
        runner = ev.runner(target.assemble(tmp_path / "cand", target.kernel_source()))
        assert runner.poll_s == 0.0
        runner.close()
    target.arch = "sm_90"  # what the Evaluator reads to tell a GPU target; nothing here touches a GPU
    assert not target.on_cpu
    assert Evaluator(target, tmp_path / "gpu", warm=False).poll_s == worker.POLL_S == 0.01


@pytest.mark.parametrize("poll_s", [0.0, 0.5])
def test_a_reply_is_read_polled_or_not_and_both_legs_are_tallied(tmp_path, poll_s):
    target = load_target(TARGET)
    with Evaluator(target, tmp_path / "round", warm=False) as ev:
        runner = ev.runner(target.assemble(tmp_path / "cand", target.kernel_source()))
        runner.poll_s = poll_s
        runner.freeze()  # the command waits in the pipe; the thaw after the send wakes the worker to it
        worker.COMMAND_SECONDS.clear()
        reply = runner.call("load", 60)
        runner.close()
    assert reply.value is not None and not runner.frozen
    tally = worker.COMMAND_SECONDS
    assert tally["load"][0] == tally["load.to the worker (its own account)"][0] == 1
    assert tally["load.back from the worker (its own account)"][0] == 1
    legs = tally["load.to the worker (its own account)"][1] + tally["load.back from the worker (its own account)"][1]
    assert 0 <= legs <= reply.wall_s == tally["load"][1]


def test_a_reply_s_own_account_is_tallied_for_its_first_few_short_names_only():
    """A kernel may write a reply line of its own: the parts of its account that judge tallies are the first
    MAX_PHASES, each named in at most MAX_PHASE_CHARS characters, so no reply can grow judge's tally without bound."""
    worker.COMMAND_SECONDS.clear()
    phases = {"x" * (worker.MAX_PHASE_CHARS + 1): 5.0, **{f"part {i}": 1.0 for i in range(1000)}}
    reply = worker.Reply({"phases_us": phases}, 0.0, [0.5, 0.75])
    worker._tally_reply("timed", reply, 0.25, 1.0)
    assert reply.wall_s == 0.75
    assert worker.COMMAND_SECONDS == {
        "timed": [1, 0.75], "timed.to the worker (its own account)": [1, 0.25],
        "timed.back from the worker (its own account)": [1, 0.25],
        **{f"timed.part {i} (its own account)": [1, 1e-6] for i in range(worker.MAX_PHASES - 1)}}


def test_a_command_that_hangs_is_timed_out_while_the_parent_polls(tmp_path):
    target = load_target(TARGET)
    source = "import time\ntime.sleep(30)\n" + target.kernel_source()
    with Evaluator(target, tmp_path / "round", warm=False) as ev:
        runner = ev.runner(target.assemble(tmp_path / "cand", source))
        runner.poll_s = 5.0  # longer than the limit: the limit still holds
        with pytest.raises(worker.WorkerError) as caught:
            runner.call("load", 0.5)
        runner.close()
    assert (caught.value.status, caught.value.message) == ("timed-out", "killed after 0.5 s")


def test_a_command_longer_than_a_pipe_holds_reaches_a_stopped_worker(tmp_path):
    target = load_target(TARGET)
    with Evaluator(target, tmp_path / "round", warm=False) as ev:
        runner = ev.runner(target.assemble(tmp_path / "cand", target.kernel_source()))
        runner.freeze()
        with pytest.raises(worker.CommandFailed) as caught:  # 256 KiB of arguments: sent after the thaw
            runner.call("load", 30, padding="x" * (256 << 10))
        runner.close()
    assert caught.value.error == "TypeError: Runner.load() got an unexpected keyword argument 'padding'"
