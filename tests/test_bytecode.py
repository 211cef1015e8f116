"""judge/sandbox/bytecode.py: where a machine keeps no bytecode, judge's own imports keep theirs in judge's cache,
and a contestant's process never writes there."""

import os
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest

from judge.sandbox import bytecode
from judge.sandbox.confine import Policy
from judge.sandbox.isolation import run_isolated
from judge.sandbox.worker import worker_env

TAG = sys.implementation.cache_tag


@pytest.fixture
def sentinel(tmp_path, monkeypatch):
    """An installed package with no bytecode beside it, as the sentinel."""
    site = tmp_path / "site"
    (site / "heavypkg").mkdir(parents=True)
    (site / "heavypkg" / "__init__.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(site))
    return site / "heavypkg" / "__init__.py"


def test_no_cache_where_python_keeps_the_bytecode_beside_the_source(sentinel, tmp_path):
    py_compile.compile(str(sentinel), cfile=str(sentinel.parent / "__pycache__" / f"__init__.{TAG}.pyc"))
    environ = {"HOME": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    assert bytecode.cache_dir(environ, sentinel="heavypkg") is None


def test_no_cache_where_the_first_import_writes_it_beside_the_source(sentinel, tmp_path):
    assert bytecode.cache_dir({"HOME": str(tmp_path)}, sentinel="heavypkg") is None


def test_judges_cache_where_python_may_not_write_bytecode(sentinel, tmp_path):
    where = bytecode.cache_dir({"HOME": str(tmp_path / "home"), "PYTHONDONTWRITEBYTECODE": "1"}, sentinel="heavypkg")
    assert where == (tmp_path / "home" / ".cache" / "judge" / "bytecode").resolve()
    assert where.is_dir()
    xdg = bytecode.cache_dir({"XDG_CACHE_HOME": str(tmp_path / "xdg"), "PYTHONDONTWRITEBYTECODE": "1"},
                             sentinel="heavypkg")
    assert xdg == (tmp_path / "xdg" / "judge" / "bytecode").resolve()


def test_the_users_choice_comes_first(sentinel, tmp_path):
    needed = {"HOME": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    assert bytecode.cache_dir(needed | {bytecode.ENV: "off"}, sentinel="heavypkg") is None
    assert bytecode.cache_dir(needed | {"PYTHONPYCACHEPREFIX": str(tmp_path / "theirs")}, sentinel="heavypkg") is None
    chosen = bytecode.cache_dir({bytecode.ENV: str(tmp_path / "mine")}, sentinel="heavypkg")
    assert chosen == (tmp_path / "mine").resolve() and chosen.is_dir()


def test_imports_inside_cached_write_there_and_pythons_settings_come_back(tmp_path, monkeypatch):
    source = tmp_path / "src"
    source.mkdir()
    (source / "inside_cached.py").write_text("X = 1\n")
    (source / "after_cached.py").write_text("Y = 2\n")
    monkeypatch.syspath_prepend(str(source))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    prefix = tmp_path / "cache"
    with bytecode.cached(str(prefix)):
        import inside_cached  # noqa: F401
    import after_cached  # noqa: F401

    written = sorted(p.name for p in prefix.rglob("*.pyc"))
    assert written == [f"inside_cached.{TAG}.pyc"]
    assert not (source / "__pycache__").exists()
    assert sys.dont_write_bytecode is True and sys.pycache_prefix is None


def _call_tree(tmp_path: Path) -> Path:
    cwd = tmp_path / "call"
    cwd.mkdir(parents=True)
    (cwd / "helper_for_call.py").write_text("VALUE = 41\n")
    (cwd / "call_entry.py").write_text(
        "import os\n\ndef run():\n    import helper_for_call\n"
        "    return {'value': helper_for_call.VALUE + 1, 'env': os.environ.get('JUDGE_BYTECODE_CACHE')}\n")
    return cwd


def test_a_call_of_judges_own_code_keeps_its_bytecode_a_confined_one_does_not(tmp_path, monkeypatch):
    prefix = tmp_path / "cache"
    monkeypatch.setenv(bytecode.ENV, str(prefix))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    own = _call_tree(tmp_path / "own")
    outcome = run_isolated("call_entry:run", {}, timeout_s=60, cwd=own)
    assert outcome.status == "ok", outcome.log_tail
    assert outcome.value == {"value": 42, "env": None}  # the path never reaches the called code's environment
    assert (prefix / own.relative_to("/") / f"helper_for_call.{TAG}.pyc").is_file()

    confined = _call_tree(tmp_path / "confined")
    outcome = run_isolated("call_entry:run", {}, timeout_s=60, cwd=confined, policy=Policy(writable=[confined], readable=[]))
    assert outcome.status == "ok", outcome.log_tail
    assert outcome.value == {"value": 42, "env": None}
    assert not list(prefix.rglob("*confined*"))  # a contestant's process writes no bytecode in judge's cache
    assert not list(confined.rglob("*.pyc"))


def test_workers_are_told_where_the_cache_is_and_not_when_it_is_off(tmp_path, monkeypatch):
    monkeypatch.setenv(bytecode.ENV, str(tmp_path / "cache"))
    assert worker_env({})[bytecode.ENV] == str((tmp_path / "cache").resolve())
    monkeypatch.setenv(bytecode.ENV, "off")
    assert bytecode.ENV not in worker_env({bytecode.ENV: "off"})


def test_the_judge_command_keeps_its_own_bytecode(tmp_path):
    prefix = tmp_path / "cache"
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **{bytecode.ENV: str(prefix)})
    done = subprocess.run([sys.executable, "-m", "judge", "--version"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    package = Path(bytecode.__file__).resolve().parents[1]
    assert (prefix / package.relative_to("/") / "cli" / f"main.{TAG}.pyc").is_file()


def test_a_cache_directory_that_cannot_be_made_is_said_and_the_command_runs(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **{bytecode.ENV: str(blocker / "cache")})
    done = subprocess.run([sys.executable, "-m", "judge", "--version"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == (
        f"judge: JUDGE_BYTECODE_CACHE={blocker / 'cache'} cannot be made (Not a directory): judge keeps no bytecode "
        "of its own, and its processes compile what they import from source where the machine keeps none")
    assert bytecode.unmade({bytecode.ENV: "off"}) is None and bytecode.unmade({}) is None
    assert bytecode.unmade({bytecode.ENV: str(tmp_path / "fine")}) is None


def test_a_confined_call_keeps_only_the_bytecode_of_what_judge_preloads(tmp_path, monkeypatch):
    """A fresh compile child (judge.stages.compile.stage's FRESH_PRELOAD): torch first, with the cache, before its
    confinement; the kernel's own imports after it keep nothing there. A preload that is not installed is no error."""
    prefix = tmp_path / "cache"
    monkeypatch.setenv(bytecode.ENV, str(prefix))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    cwd = _call_tree(tmp_path / "compile")
    (cwd / "judges_preload.py").write_text("READY = True\n")
    outcome = run_isolated("call_entry:run", {}, timeout_s=60, cwd=cwd, policy=Policy(writable=[cwd], readable=[]),
                           preload=("judges_preload", "not_installed_anywhere"))
    assert outcome.status == "ok", outcome.log_tail
    assert outcome.value == {"value": 42, "env": None}
    assert sorted(p.name for p in prefix.rglob("*.pyc")) == [f"judges_preload.{TAG}.pyc"]
