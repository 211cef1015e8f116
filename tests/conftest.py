"""Shared test setup: GPU tests run only where a CUDA GPU is present; the modules that start real runner processes,
compile the contest kernels or start Ray are marked `slow`, so that `pytest -m "not slow"` is the quick subset.
The suite runs on one pytest-xdist worker per core (tests/scheduling.py), except the tests in EXCLUSIVE, which run
with every other worker idle. The `judge_env` fixture runs the judge CLI in a contest directory (tests/harness.py
has the helpers it shares with the test modules)."""

import os
from pathlib import Path

import pytest

from harness import FIXTURE, LIMIT_VARS
from judge.machine import host_gpu_count

# A round profiles its base once its timing is over (judge.profiles): a runner and an oracle more per round, which
# the suite's rounds do not need; tests/test_profile.py profiles on purpose.
os.environ["JUDGE_PROFILE"] = "0"

# Modules that run kernels for real (runners, the oracle, compiles of the contest kernels, a Ray cluster): marked
# `slow`, so that `pytest -m "not slow"` is the quick subset.
SLOW_MODULES = {
    "test_dispatch.py", "test_redteam.py", "test_redteam_untimed.py", "kernels/test_static_mutants.py", "test_warm.py",
    "test_timing.py", "test_check.py", "test_example_round.py", "test_compile.py", "kernels/test_layout_checks.py",
    "test_confine.py", "test_fp8_contest_example.py", "test_worker.py", "test_runner.py",
    "kernels/test_fp8_group_gemm_sm90.py", "test_compile_workers.py", "test_forkserver.py", "test_profile_cpu.py",
}
# Seconds of the modules that took 4 s or more in one serial run of the whole suite on the unloaded 2-core VM
# (2026-11-27, `--durations`, 2,366 s of tests; test_redteam.py then held both red-team rounds, 1,125 s, and
# test_dispatch.py ran its rounds on spares that import torch themselves): the scheduler hands out the longest first.
MODULE_SECONDS = {
    "test_redteam.py": 700, "test_redteam_untimed.py": 425, "test_dispatch.py": 404, "test_warm.py": 130,
    "test_timing.py": 113, "test_callframe.py": 110, "kernels/test_static_mutants.py": 100, "test_check.py": 83,
    "test_forkserver.py": 72, "test_compile_workers.py": 44, "test_compile_pipeline.py": 22, "test_worker.py": 19,
    "test_example_round.py": 19, "test_serve.py": 16, "kernels/test_layout_checks.py": 15, "test_compile.py": 15,
    "test_visibility.py": 15,  # measured alone (2026-11-27), not in the run above
    "test_client.py": 20,  # measured alone (2026-11-27) once the local/served matrix grew
    "test_history.py": 9, "report/test_report.py": 8, "test_isolation.py": 8,
    "test_screening.py": 6, "test_cli.py": 5, "test_charts.py": 5, "kernels/test_fp8_group_gemm_sm90.py": 4,
}
# Modules whose tests share no costly fixture (no module-scoped one): handed out one test at a time, so that the
# longest of them do not all land on one worker.
SPLIT_MODULES = {
    "test_callframe.py", "test_warm.py", "test_timing.py", "test_check.py", "test_forkserver.py",
    "test_compile_workers.py", "kernels/test_static_mutants.py", "test_serve.py", "test_client.py", "test_history.py",
    "test_worker.py", "test_compile.py", "test_compile_pipeline.py", "kernels/test_layout_checks.py",
    "test_isolation.py",
}
# Single slow tests of otherwise quick modules (also marked where they are defined), with their seconds there.
SLOW_TESTS = {
    "test_compile_pipeline.py::test_compiles_that_crash_or_hang_are_verdicts_and_the_others_go_on": 32,
}


# Tests that time kernels on this machine's CPU and assert verdicts that another test running beside them could
# sway (a CPU target's timed pair has one core, its oracle and spares the other): run alone, before the rest.
EXCLUSIVE_MODULES = {
    "test_redteam.py",  # every cheat's verdict in one real CPU round, the honest controls unchanged or slower
}
EXCLUSIVE_TESTS = {
    # the same CPU round sequential and on Ray: ten times the work slower, the base's own kernel unchanged
    "test_dispatch.py::test_cpu_actors_give_the_sequential_verdicts_lose_nothing_when_killed_and_say_where_they_ran",
}


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """One xdist worker per core where pytest-xdist is installed and -n was not given; serial where a GPU is, whose
    timing tests share the one device, and where the run is for one test's debugging (--pdb, --collect-only)."""
    if hasattr(config, "workerinput") or not config.pluginmanager.hasplugin("xdist"):
        return
    if config.option.numprocesses is not None or config.getoption("usepdb") or config.getoption("collectonly"):
        return
    cores = len(os.sched_getaffinity(0))
    if cores > 1 and not host_gpu_count():
        config.option.numprocesses = cores


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Modules whole (SPLIT_MODULES test by test), longest first, the EXCLUSIVE ones alone (tests/scheduling.py);
    another --dist than load is honoured."""
    if config.option.dist != "load":
        return None
    from scheduling import ExclusiveScheduling

    return ExclusiveScheduling(config, log, modules=EXCLUSIVE_MODULES, tests=EXCLUSIVE_TESTS, seconds=MODULE_SECONDS,
                               split=SPLIT_MODULES)


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
    slow, exclusive = pytest.mark.slow, pytest.mark.exclusive
    for item in items:
        if _module(item) in SLOW_MODULES or f"{_module(item)}::{item.name}" in SLOW_TESTS:
            item.add_marker(slow)
        if _module(item) in EXCLUSIVE_MODULES or f"{_module(item)}::{item.originalname}" in EXCLUSIVE_TESTS:
            item.add_marker(exclusive)
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


@pytest.fixture
def small_target():
    """GPU MODE's vecadd fixture as a CPU target with two small benchmarks: the timing stage's tests (pairs and
    groups) on the host clock."""
    from judge.targets import load_target

    target = load_target(Path(__file__).parent / "fixtures" / "gpumode" / "vecadd")
    target.arch = "cpu"
    target.benchmarks = [{"size": 20000, "seed": 1}, {"size": 40000, "seed": 2}]
    target.speed_of_light_us = []
    return target


@pytest.fixture
def oracle_over(tmp_path, monkeypatch):
    """An oracle in this process over a reference of the test's own: oracle_over(SOURCE, runners=(1,)) writes SOURCE
    as reference.py in tmp_path and attaches the runners (each an exchange directory x<N>); all are detached after
    the test."""
    import sys

    from judge.boundary.oracle import Oracle

    made = []

    def over(source: str, runners=(1,)):
        (tmp_path / "reference.py").write_text(source)
        monkeypatch.setattr(sys, "path", list(sys.path))
        monkeypatch.chdir(tmp_path)
        monkeypatch.delitem(sys.modules, "reference", raising=False)
        oracle = Oracle(str(tmp_path), {"default": ""}, 1e-5, 1e-5)
        for runner in runners:
            (tmp_path / f"x{runner}").mkdir()
            oracle.attach(runner, str(tmp_path / f"x{runner}"))
        made.append((oracle, runners))
        return oracle

    yield over
    for oracle, runners in made:
        for runner in runners:
            oracle.detach(runner)
    sys.modules.pop("reference", None)
