"""judge/sandbox/isolation.py: every way a child process can end becomes a ChildOutcome, never an exception."""

import os
import shutil
import time
from pathlib import Path

import pytest

from judge.sandbox.isolation import run_isolated, tail

FIXTURE = Path(__file__).parent / "fixtures" / "children"


@pytest.fixture
def workspace(tmp_path):
    dest = tmp_path / "ws"
    shutil.copytree(FIXTURE, dest)
    return dest


def test_returns_value(workspace):
    outcome = run_isolated("childfuncs:returns", {"a": 2, "b": 3}, timeout_s=30, cwd=workspace)
    assert outcome.status == "ok"
    assert outcome.value == {"sum": 5, "nan": "nan"}
    assert outcome.exit_code == 0
    assert outcome.error == ""
    assert "adding" in outcome.log_tail


def test_hang_is_killed_within_the_limit(workspace):
    start = time.monotonic()
    outcome = run_isolated("childfuncs:hangs", {"seconds": 60}, timeout_s=2, cwd=workspace)
    assert time.monotonic() - start < 10
    assert outcome.status == "timed-out"
    assert outcome.value is None
    assert outcome.error == "killed after 2.0 s"
    assert "about to hang" in outcome.log_tail
    assert "hangs" in outcome.log_tail  # the stack dumped on SIGUSR1 names the function it hung in


def test_exception_is_a_crash_with_its_line(workspace):
    outcome = run_isolated("childfuncs:raises", {}, timeout_s=30, cwd=workspace)
    assert outcome.status == "crashed"
    assert outcome.error == "ValueError: bad input at row 3"
    assert "Traceback" in outcome.log_tail


def test_exit_mid_run(workspace):
    outcome = run_isolated("childfuncs:exits_mid_run", {"code": 3}, timeout_s=30, cwd=workspace)
    assert outcome.status == "crashed"
    assert outcome.exit_code == 3
    assert outcome.error == "exited with code 3 before returning"
    assert "half way" in outcome.log_tail


def test_exit_zero_mid_run_is_still_a_crash(workspace):
    outcome = run_isolated("childfuncs:exits_mid_run", {"code": 0}, timeout_s=30, cwd=workspace)
    assert outcome.status == "crashed"
    assert outcome.error == "exited with code 0 before returning"


def test_segfault(workspace):
    outcome = run_isolated("childfuncs:segfaults", {}, timeout_s=30, cwd=workspace)
    assert outcome.status == "crashed"
    assert outcome.exit_code == -11
    assert outcome.error == "killed by signal SIGSEGV"
    assert "Segmentation fault" in outcome.log_tail  # faulthandler's report


def test_child_sees_its_workspace_first_and_env(workspace):
    outcome = run_isolated(
        "childfuncs:where_am_i", {}, timeout_s=30, cwd=workspace, env={"JUDGE_TEST_VAR": "seven"}
    )
    assert outcome.status == "ok", outcome.log_tail
    assert outcome.value == {
        "cwd": str(workspace.resolve()),
        "path0": str(workspace.resolve()),
        "neighbour": "neighbour of childfuncs",
        "env": "seven",
    }


def test_missing_function_is_a_crash(workspace):
    outcome = run_isolated("childfuncs:nothing_here", {}, timeout_s=30, cwd=workspace)
    assert outcome.status == "crashed"
    assert outcome.error == "AttributeError: module 'childfuncs' has no attribute 'nothing_here'"


def test_unserialisable_value_is_a_crash(workspace):
    outcome = run_isolated("childfuncs:unserialisable", {}, timeout_s=30, cwd=workspace)
    assert outcome.status == "crashed"
    assert outcome.error.startswith("TypeError: Object of type object is not JSON serializable")


def test_grandchildren_die_with_the_group(workspace):
    outcome = run_isolated("childfuncs:spawns_and_hangs", {}, timeout_s=3, cwd=workspace)
    assert outcome.status == "timed-out"
    pid = int((workspace / "grandchild.pid").read_text())
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        # A killed grandchild is a zombie until init reaps it; /proc says so.
        status = Path(f"/proc/{pid}/status")
        if status.exists() and "zombie" in status.read_text():
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"grandchild {pid} still running")


def test_log_path_and_tail_of_forty_lines(workspace, tmp_path):
    log = tmp_path / "logs" / "child.log"
    outcome = run_isolated("childfuncs:many_lines", {"count": 100}, timeout_s=30, cwd=workspace, log_path=log)
    assert outcome.value == 100
    assert log.read_text().count("\n") == 100
    lines = outcome.log_tail.splitlines()
    assert len(lines) == 40
    assert lines[0] == "line 60" and lines[-1] == "line 99"


def test_a_tail_reads_only_the_end_of_a_huge_log(tmp_path):
    """One 8 MiB line with no newline: the tail is its last 64 KiB less room for the note, not the whole line."""
    log = tmp_path / "flood.log"
    log.write_bytes(b"z" * (8 << 20))
    text = tail(log)
    assert text == f"({(8 << 20) - (64 << 10) + 64} more bytes before)\n" + "z" * ((64 << 10) - 64)
    assert len(text) <= 64 << 10


def test_a_tail_of_short_lines_is_its_last_forty_whole_lines(tmp_path):
    log = tmp_path / "lines.log"
    log.write_bytes(b"".join(b"line %d\r\n" % i for i in range(100_000)))
    assert tail(log).splitlines() == [f"line {i}" for i in range(99_960, 100_000)]
    log.write_bytes(b"a\nb")
    assert tail(log) == "a\nb"
    assert tail(tmp_path / "missing.log") == ""


def test_a_window_that_cuts_into_long_lines_says_so(tmp_path):
    log = tmp_path / "long.log"
    log.write_bytes(b"".join(bytes([65 + i]) * 20_000 + b"\n" for i in range(10)))
    text = tail(log)
    first, *rest = text.split("\n")
    assert first == "(134538 more bytes before)"  # 10 lines of 20,001 bytes, less the 65,472 read
    assert rest[0] == "G" * 5468 and [line[0] for line in rest[1:-1]] == ["H", "I", "J"] and rest[-1] == ""
    assert len(text) <= 64 << 10


def test_strays_of_several_sessions_come_from_one_walk_of_proc(tmp_path):
    """judge.sandbox.isolation.session_strays: per session, the live processes that left its leader's group, which a
    stop of that group does not reach; a group's runners are looked at together after every benchmark."""
    import subprocess
    import sys

    from judge.sandbox.isolation import session_strays

    code = ("import os, subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import os, time; os.setpgid(0, 0); time.sleep(30)'])\n"
            "print(child.pid, flush=True)\n"
            "time.sleep(30)\n")
    straying = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    staying = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        stray = int(straying.stdout.readline())
        deadline = time.monotonic() + 10
        while (found := session_strays([straying.pid, staying.pid]))[straying.pid] != [stray]:
            assert time.monotonic() < deadline, found  # the grandchild's setpgid may not have run yet
            time.sleep(0.05)
        assert found == {straying.pid: [stray], staying.pid: []}
    finally:
        for process in (straying, staying):
            os.killpg(process.pid, 9)
        try:
            os.kill(stray, 9)
        except (ProcessLookupError, UnboundLocalError):
            pass
        straying.wait(), staying.wait()
