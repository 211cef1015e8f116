"""A timed runner leaves nothing behind for a later one (judge.stages.evaluation: its workspace only readable, a
scratch of its own, its log in judge's directory): what lets a round time the same input sets in every pair."""

from pathlib import Path

import pytest

from judge.stages.evaluation import Evaluator
from judge.stages.lease import RunnerLease
from judge.targets import load_target

ROOT = Path(__file__).resolve().parents[1]
# Appended to the kernel: at import it tries to leave a file in its workspace and says where its HOME is.
LEAVES = '''
import os as _os, pathlib as _pathlib
try:
    _pathlib.Path(__file__).with_name("left-behind").write_text(str(_os.getpid()))
except OSError:
    pass
_pathlib.Path(_os.environ["HOME"], "home-works").write_text("ok")
print("HOME", _os.environ["HOME"], flush=True)
'''


def test_a_timed_runner_writes_only_in_a_scratch_of_its_own_that_goes_with_it(tmp_path):
    target = load_target(ROOT / "kernels" / "vecadd_cpu")
    workspace = target.assemble(tmp_path / "cand", target.kernel_source() + LEAVES)
    (workspace / ".cache").mkdir()
    (workspace / ".cache" / "compiled").write_text("from the correctness runner")
    with Evaluator(target, tmp_path / "round", base_dir=workspace, warm=False) as evaluator:
        if not evaluator.runners_leave_nothing:
            pytest.skip("no Landlock on this kernel: timed runners cannot be kept from their workspace")
        with RunnerLease(evaluator) as lease:
            worker = lease.acquire_loaded(workspace, "timing-0.log", 60)
            scratch = evaluator._scratch[worker.pid]
            assert (scratch / "home-works").read_text() == "ok"  # its HOME is the scratch
            assert (scratch / ".cache" / "compiled").read_text() == "from the correctness runner"
            log = evaluator.timing_logs(workspace) / "timing-0.log"
            assert f"HOME {scratch}" in log.read_text()
        assert not (workspace / "left-behind").exists()
        assert not scratch.exists()  # removed with its runner
        assert not list(workspace.glob("*.log"))
        with RunnerLease(evaluator) as lease:  # a correctness runner still writes in its workspace
            lease.acquire(workspace).call("load", 60)
        assert (workspace / "left-behind").exists()
