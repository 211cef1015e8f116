"""A timed runner leaves nothing behind for a later one (judge.stages.evaluation: its workspace only readable, a
scratch of its own, its log in judge's directory): what lets a round time the same input sets in every pair."""

import os
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


def candidate(tmp_path, kernel_tail: str, caches=None):
    """vecadd_cpu's kernel with `kernel_tail` appended, assembled in a workspace whose `.cache` holds what its
    correctness runner compiled (or is the link `caches`, where given)."""
    target = load_target(ROOT / "kernels" / "vecadd_cpu")
    workspace = target.assemble(tmp_path / "cand", target.kernel_source() + kernel_tail)
    if caches is not None:
        (workspace / ".cache").symlink_to(caches)
    else:
        (workspace / ".cache").mkdir()
        (workspace / ".cache" / "compiled").write_text("from the correctness runner")
    return target, workspace


def confined_evaluator(target, tmp_path, workspace) -> Evaluator:
    evaluator = Evaluator(target, tmp_path / "round", base_dir=workspace, warm=False)
    if not evaluator.runners_leave_nothing:
        evaluator.close()
        pytest.skip("no Landlock on this kernel: timed runners cannot be kept from their workspace")
    return evaluator


def test_a_timed_runner_writes_only_in_a_scratch_of_its_own_that_goes_with_it(tmp_path):
    target, workspace = candidate(tmp_path, LEAVES)
    with confined_evaluator(target, tmp_path, workspace) as evaluator:
        with RunnerLease(evaluator) as lease:
            worker = lease.acquire_loaded(workspace, "timing-0.log", 60)
            scratch = evaluator._scratch[worker.pid]
            assert (scratch / "home-works").read_text() == "ok"  # its HOME is the scratch
            # the uid it said it has once confined, which its host files are given to (Evaluator._attach)
            dropped = worker.hello["confinement"]["user"].startswith("uid 65534")
            assert worker.hello["uid"] == (65534 if dropped else os.getuid())
            assert (scratch / ".cache" / "compiled").read_text() == "from the correctness runner"
            log = evaluator.timing_logs(workspace) / "timing-0.log"
            assert f"HOME {scratch}" in log.read_text()
        assert not (workspace / "left-behind").exists()
        assert not scratch.exists()  # removed with its runner
        assert not list(workspace.glob("*.log"))
        with RunnerLease(evaluator) as lease:  # a correctness runner still writes in its workspace
            lease.acquire(workspace).call("load", 60)
        assert (workspace / "left-behind").exists()


# Appended to the kernel: at import, what a build does with its caches (torch's extension build): it reads what the
# correctness runner built there, writes beside it, and says where it found them.
BUILDS = '''
import os as _os, pathlib as _pathlib
_cache = _pathlib.Path(_os.environ["XDG_CACHE_HOME"])
print("CACHE", _cache, (_cache / "compiled").read_text(), flush=True)
(_cache / "built-again").write_text(str(_os.getpid()))
'''


def test_a_timed_runner_finds_its_caches_where_its_correctness_runner_left_them(tmp_path):
    """Its own copy, seen at the workspace's path in its own mount namespace, so that a build finds the paths its
    correctness runner's build wrote into its files: ninja built a cuda-inline kernel again in every timed runner,
    30 s a pair (H200, 2026-11-29). What it writes there stays its own."""
    target, workspace = candidate(tmp_path, BUILDS)
    with confined_evaluator(target, tmp_path, workspace) as evaluator:
        with RunnerLease(evaluator) as lease:
            worker = lease.acquire_loaded(workspace, "timing-0.log", 60)
            filesystem = worker.hello["confinement"]["filesystem"]
            if "a private /dev/shm" not in filesystem:
                pytest.skip("no mount namespace of its own here: a timed runner's caches stay in its scratch")
            assert "its caches shown at its workspace's" in filesystem
            scratch = evaluator._scratch[worker.pid]
            log = (evaluator.timing_logs(workspace) / "timing-0.log").read_text()
            assert f"CACHE {workspace / '.cache'} from the correctness runner" in log
            assert (scratch / ".cache" / "built-again").read_text() == str(worker.pid)
        assert not (workspace / ".cache" / "built-again").exists()


@pytest.mark.skipif(not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() != 0,
                    reason="gives a directory to uid nobody")
def test_a_timed_runners_host_files_belong_to_the_owner_of_its_scratch_not_of_its_workspace(tmp_path):
    # On an H100 (2026-11-27) `judge profile` gave a timed runner, dropped to nobody, files owned by root: its
    # workspace had never had a runner of its own, and every benchmark failed with "Permission denied: .../outbox".
    import os
    from types import SimpleNamespace

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    os.chown(scratch, 65534, 65534)
    asked = []
    evaluator = Evaluator.__new__(Evaluator)
    evaluator._oracle = SimpleNamespace(call=lambda op, limit, **args: asked.append((op, args)))
    evaluator._scratch = {7: scratch}
    evaluator._attach(SimpleNamespace(pid=7, exchange=tmp_path / "x", hello=None), tmp_path)
    evaluator._attach(SimpleNamespace(pid=8, exchange=tmp_path / "y", hello=None), tmp_path)
    assert [(op, args["runner"], args["owner"]) for op, args in asked] == [("attach", 7, 65534), ("attach", 8, 0)]
    # What a runner says of itself once confined decides: one that stayed root (without capabilities, it cannot
    # open a file of nobody's) beside a scratch given to nobody, and one that dropped beside a workspace of root's.
    asked.clear()
    evaluator._attach(SimpleNamespace(pid=7, exchange=tmp_path / "x", hello={"pid": 7, "uid": 0}), tmp_path)
    evaluator._attach(SimpleNamespace(pid=8, exchange=tmp_path / "y", hello={"pid": 8, "uid": 65534}), tmp_path)
    # a spare's hello before its bind says no uid: the owner of what it writes
    evaluator._attach(SimpleNamespace(pid=7, exchange=tmp_path / "x", hello={"pid": 7, "ready": True}), tmp_path)
    assert [args["owner"] for _, args in asked] == [0, 65534, 65534]



def test_a_link_in_place_of_the_workspaces_caches_is_neither_copied_nor_covered(tmp_path):
    """A correctness runner that made its `.cache` a link to another tree: the timed runner's caches are its own
    scratch's, and nothing is bound over where the link points."""
    says = 'import os as _os\nprint("CACHE", _os.environ["XDG_CACHE_HOME"], flush=True)\n'
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "compiled").write_text("not the workspace's")
    target, workspace = candidate(tmp_path, says, caches=elsewhere)
    with confined_evaluator(target, tmp_path, workspace) as evaluator:
        with RunnerLease(evaluator) as lease:
            worker = lease.acquire_loaded(workspace, "timing-0.log", 60)
            scratch = evaluator._scratch[worker.pid]
            assert "its caches shown" not in worker.hello["confinement"]["filesystem"]
            log = (evaluator.timing_logs(workspace) / "timing-0.log").read_text()
            assert f"CACHE {scratch / '.cache'}" in log
            assert not (scratch / ".cache" / "compiled").exists()
    assert [p.name for p in elsewhere.iterdir()] == ["compiled"]


def test_a_timed_runners_caches_are_copied_without_following_any_link(tmp_path):
    """The correctness runner writes in its workspace while judge copies its caches for a timed runner: a link in
    them (or `.cache` itself a link) to a tree only judge may read is copied as a link, never as what it points at."""
    import os

    from judge.stages.runner_places import copy_unfollowed, new_scratch

    secret = tmp_path / "judge-only"
    (secret / "inside").mkdir(parents=True)
    (secret / "inside" / "seeds").write_text("42")
    workspace = tmp_path / "cand"
    (workspace / ".cache" / "triton").mkdir(parents=True)
    (workspace / ".cache" / "triton" / "kernel.so").write_bytes(b"\x7fELF")
    os.utime(workspace / ".cache" / "triton" / "kernel.so", ns=(1_000_000_000, 2_000_000_000))
    (workspace / ".cache" / "tree").symlink_to(secret)
    (workspace / ".cache" / "file").symlink_to(secret / "inside" / "seeds")
    scratch = new_scratch(tmp_path / "round", workspace)
    copied = scratch / ".cache"
    assert (copied / "triton" / "kernel.so").read_bytes() == b"\x7fELF"
    assert (copied / "triton" / "kernel.so").stat().st_mtime_ns == 2_000_000_000  # a build's outputs keep their times
    assert os.readlink(copied / "tree") == str(secret) and os.readlink(copied / "file") == str(secret / "inside" / "seeds")
    assert sorted(p.name for p in copied.rglob("*")) == ["file", "kernel.so", "tree", "triton"]  # nothing followed
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / ".cache").symlink_to(secret)
    copy_unfollowed(linked / ".cache", tmp_path / "copy")
    copy_unfollowed(tmp_path / "no-caches-yet", tmp_path / "copy")  # a workspace whose runner compiled nothing
    assert not (tmp_path / "copy").exists()
