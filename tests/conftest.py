"""Shared test setup: GPU tests run only where a CUDA GPU is present; the modules that start real runner processes,
compile the contest kernels or start Ray are marked `slow`, so that `pytest -m "not slow"` is the quick subset.
The `judge_env` fixture runs the judge CLI in a contest directory (tests/harness.py has the helpers it shares with the
test modules)."""

import os

import pytest

from harness import FIXTURE, LIMIT_VARS

# Seconds each took in one full run on a loaded 2-core VM (2026-11-25, `--durations`, 49.5 min in all, 36% of the
# CPU): 2450 s of the suite's 2950 s. Each runs kernels for real (runners, the oracle, compiles, a Ray cluster).
SLOW_MODULES = {
    # Local Ray clusters and three real CPU rounds (sequential, on CPU actors, one actor killed), measured in parts
    # on 2026-11-26 at load 5-7 on the 2-core VM: sequential 630 s, killed worker 578 s, the other tests 319 s; the
    # round on CPU actors was not timed alone (about as long as the killed one).
    "test_dispatch.py": 840,  # a local Ray cluster; a CPU round sequential and on Ray (522 s unloaded)
    "test_redteam.py": 888,  # every cheat in one real CPU round
    "kernels/test_static_mutants.py": 300,  # compiles both contest kernels and their mutants
    "test_warm.py": 213,
    "test_timing.py": 184,
    "test_check.py": 126,
    "test_example_round.py": 109,  # the nvfp4 example round, compiled
    "test_compile.py": 89,
    "kernels/test_layout_checks.py": 76,
    "test_confine.py": 53,
    "test_fp8_contest_example.py": 44,
    "test_worker.py": 36,
    "test_runner.py": 24,
    "kernels/test_fp8_group_gemm_sm90.py": 16,
    "test_compile_workers.py": 90,  # cold and warm compile children side by side (2026-11-26, same VM, loaded)
    "test_forkserver.py": 70,  # templates importing torch, forked and cold runners (2026-11-26, same VM)
}
# Single slow tests of otherwise quick modules (also marked where they are defined), with their seconds there.
SLOW_TESTS = {
    "test_compile_pipeline.py::test_compiles_that_crash_or_hang_are_verdicts_and_the_others_go_on": 32,
}


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _module(item) -> str:
    path = item.path.as_posix()
    return path.split("/tests/", 1)[-1]


def pytest_collection_modifyitems(config, items):
    slow = pytest.mark.slow
    for item in items:
        if _module(item) in SLOW_MODULES or f"{_module(item)}::{item.name}" in SLOW_TESTS:
            item.add_marker(slow)
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; this machine has none")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def judge_env(tmp_path, monkeypatch):
    """The judge CLI in a fresh contest directory: tmp_path, made the working directory, with kernels/axpy linked to
    the axpy fixture and the size limits at their defaults. Returns (judge, root): judge(*args, input=None) runs
    `judge ARGS` in-process (click's CliRunner, exceptions not caught) and returns click's Result."""
    from click.testing import CliRunner

    from judge.cli.main import main

    monkeypatch.chdir(tmp_path)
    for name in LIMIT_VARS:
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "kernels").mkdir()
    os.symlink(FIXTURE, tmp_path / "kernels" / "axpy")
    runner = CliRunner()

    def judge(*args, input=None):
        return runner.invoke(main, list(args), input=input, catch_exceptions=False)

    return judge, tmp_path
