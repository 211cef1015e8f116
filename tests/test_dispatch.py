"""judge/dispatch.py: a round's GPU stages on Ray actors, one per (pretend) GPU of a local Ray, give the
verdicts a local run gives, each recorded by the driver with the worker that ran it."""

from __future__ import annotations

import difflib
import json
import importlib.util
from pathlib import Path

import pytest

from judge import actions
from judge.errors import JudgeError
from judge.ledger import Ledger
from judge.rounds import Settings, run_round

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs ray (pip install 'judge[ray]')")

ROOT = Path(__file__).resolve().parents[1]
BASE = (ROOT / "kernels" / "vecadd_cpu" / "submission.py").read_text()
ADD = "    torch.add(a, b, out=out)\n"
# Verdicts no timing noise can turn: a wrong answer, an exception, and ten times the work.
KERNELS = {
    "wrong-sign": BASE.replace(ADD, "    torch.sub(a, b, out=out)\n"),
    "raises": BASE.replace(ADD, "    raise RuntimeError('out of registers')\n"),
    "ten-times": BASE.replace(ADD, "    for _ in range(10):\n        torch.add(a, b, out=out)\n"),
}
EXPECTED = {
    "wrong-sign": "incorrect",
    "raises": "crashed",
    "ten-times": "slower",
}


@pytest.fixture
def local_ray():
    import ray

    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def submit(tmp_path: Path) -> Ledger:
    ledger = Ledger(tmp_path / "ledger.db")
    for name, source in KERNELS.items():
        folder = tmp_path / "proposals" / name
        folder.mkdir(parents=True)
        (folder / "proposal.toml").write_text(
            f'id = "{name}"\ntitle = "{name}"\nauthor = "contestant-1"\nround = 1\ntarget = "vecadd_cpu"\n\n'
            "[claim]\nlow = 1.1\nhigh = 1.2\n")
        (folder / "pitch.md").write_text(f"# {name}\n\nA kernel for the dispatch test.\n")
        (folder / "patch.diff").write_text("".join(difflib.unified_diff(
            BASE.splitlines(True), source.splitlines(True), "a/submission.py", "b/submission.py")))
        actions.submit(ledger, actions.load_submissions([str(folder)], None), ROOT / "kernels")
    return ledger


def test_ray_actors_give_the_local_verdicts_and_say_where_they_ran(local_ray, tmp_path):
    ledger = submit(tmp_path)
    settings = Settings(kernels_dir=ROOT / "kernels", work_dir=tmp_path / "work", cache_dir=tmp_path / "cache",
                        timing_budget_s=1.0, ray=True)
    events = []
    [summary] = run_round(ledger, 1, settings=settings, on_event=lambda kind, **kw: events.append((kind, kw)))
    assert {v.proposal_id: v.outcome for v in summary.verdicts} == EXPECTED
    [(_, workers)] = [e for e in events if e[0] == "workers"]
    assert sorted(p["gpus"] for p in workers["places"]) == ["0", "1"]  # one actor per GPU, each holding one
    rows = ledger.query("select e.subject, e.device_json from evaluations e order by e.id")
    assert [r["subject"] for r in rows] == ["base", "control"] + ["candidate"] * 3  # the A/A control on Ray too
    devices = [json.loads(r["device_json"]) for r in rows]
    assert all(d["gpus"] in ("0", "1") and d["host"] for d in devices)


def test_a_worker_killed_mid_round_loses_nothing_and_the_round_completes(local_ray, tmp_path):
    import os
    import signal

    ledger = submit(tmp_path)
    settings = Settings(kernels_dir=ROOT / "kernels", work_dir=tmp_path / "work", cache_dir=tmp_path / "cache",
                        timing_budget_s=1.0, ray=True)
    killed = []

    def on_event(kind, **info):
        if kind == "workers":
            killed.append(info["places"][0]["pid"])
        elif kind == "verdict" and len(killed) == 1:  # the first verdict: the next candidate is on its way
            os.kill(killed[0], signal.SIGKILL)
            killed.append("done")

    [summary] = run_round(ledger, 1, settings=settings, on_event=on_event)
    assert killed[1:] == ["done"]
    assert {v.proposal_id: v.outcome for v in summary.verdicts} == EXPECTED
    rows = ledger.query("select subject from evaluations order by id")
    assert [r["subject"] for r in rows] == ["base", "control"] + ["candidate"] * 3  # each recorded once
    assert ledger.query("select status from runs")[0]["status"] == "finished"


def test_a_ray_cluster_without_gpus_is_refused(tmp_path):
    import ray

    ray.init(num_cpus=1, num_gpus=0, include_dashboard=False, log_to_driver=False)
    try:
        ledger = submit(tmp_path)
        settings = Settings(kernels_dir=ROOT / "kernels", work_dir=tmp_path / "work", cache_dir=tmp_path / "cache",
                            ray=True)
        with pytest.raises(JudgeError) as error:
            run_round(ledger, 1, settings=settings)
        assert str(error.value) == ("the Ray cluster has no GPU: nothing to run the kernels on (start its workers "
                                    "with GPUs, or run without --ray)")
    finally:
        ray.shutdown()


@pytest.mark.parametrize("text,message", [
    ("0,x", "--gpus: '0,x' is neither 'all' nor a list of GPU indices such as 0,1"),
    ("1,1", "--gpus: '1,1' names a GPU twice or a negative index"),
    ("-1", "--gpus: '-1' names a GPU twice or a negative index"),
])
def test_gpus_that_cannot_be_meant_are_refused(text, message):
    from judge.dispatch import parse_gpus

    with pytest.raises(JudgeError) as error:
        parse_gpus(text)
    assert str(error.value) == message


def test_gpus_lists_and_all(monkeypatch):
    import subprocess

    from judge import dispatch

    assert dispatch.parse_gpus("2,0") == [2, 0]
    listing = "GPU 0: NVIDIA H200 (UUID: GPU-1)\nGPU 1: NVIDIA H200 (UUID: GPU-2)\n"
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, listing, ""))
    assert dispatch.parse_gpus("all") == [0, 1]
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, "", ""))
    with pytest.raises(JudgeError, match=r"^--gpus all: this machine has no NVIDIA GPU \(nvidia-smi lists none\)$"):
        dispatch.parse_gpus("all")


def test_a_target_travels_with_the_files_its_task_takes_from_beside_it(tmp_path):
    """GPU MODE's task.yml names `../utils.py`: an actor on another machine must get it too (on the two-H200
    machine the first Ray round failed in every actor with "source '../utils.py' of 'utils.py' not found")."""
    from judge.dispatch import target_files, write_target
    from judge.targets import load_target

    target = load_target(ROOT / "tests" / "fixtures" / "gpumode" / "vecadd")
    files = target_files(target)
    assert files["../utils.py"] == (ROOT / "tests" / "fixtures" / "gpumode" / "utils.py").read_bytes()
    assert {"task.yml", "reference.py", "submission.py"} <= set(files)
    copy = load_target(write_target(files, tmp_path / "target", "vecadd"))
    assert copy.kernel_source() == target.kernel_source() and (tmp_path / "target" / "utils.py").is_file()
    with pytest.raises(JudgeError, match="would land outside"):
        write_target({"../../escape.py": b""}, tmp_path / "other", "vecadd")


def test_an_actor_starts_its_oracle_before_its_first_candidate(tmp_path):
    """`warm` runs while the driver compiles; without a GPU for a GPU target it starts nothing. No base runner is
    kept: each timed pair starts a fresh base and candidate runner."""
    from judge.dispatch import EvaluationActor, target_files
    from judge.targets import load_target

    cpu = load_target(ROOT / "kernels" / "vecadd_cpu")
    actor = EvaluationActor(target_files(cpu), "vecadd_cpu", cpu.kernel_source(), 0.5)
    try:
        actor.warm()
        assert actor.session._oracle is not None and actor.session._oracle.is_ready()
        key, stages, _ = actor.evaluate("0", "same", cpu.kernel_source())
        assert [s.status for s in stages] == ["passed", "passed"]
    finally:
        actor.close()
    gpu = load_target(ROOT / "tests" / "fixtures" / "gpumode" / "vecadd")
    idle = EvaluationActor(target_files(gpu), "vecadd", gpu.kernel_source(), 0.5)
    try:
        if idle.gate_reason:
            idle.warm()
            assert idle.session._oracle is None and idle.session._pool == []
    finally:
        idle.close()
