"""Runs one function in a fresh child process with a wall-clock limit, so that a candidate's hang, crash,
CUDA fault or early exit becomes a verdict for the report instead of taking the judge down with it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOG_TAIL_LINES = 40
# How long a hung child gets to print its Python stacks (faulthandler on SIGUSR1) before it is killed.
DUMP_GRACE_S = 1.0
_JUDGE_ROOT = str(Path(__file__).resolve().parent.parent)


@dataclass
class ChildOutcome:
    """What happened to one child process: ok with a value, crashed, or timed out."""

    status: str  # "ok" | "crashed" | "timed-out"
    value: Any
    exit_code: int | None
    seconds: float
    log_tail: str
    error: str

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def run_isolated(
    func: str,
    kwargs: dict,
    *,
    timeout_s: float,
    cwd: Path,
    env: dict[str, str] | None = None,
    log_path: Path | None = None,
) -> ChildOutcome:
    """Call `func` ("module:function") with `kwargs` in a fresh `python -m judge.child` in its own session.

    The child's cwd is `cwd` and it comes first on the child's `sys.path`; `env` adds to (or overrides) this
    process's environment. Arguments and result travel as JSON files; stdout+stderr go to `log_path` (a
    temporary file when None). Never raises for anything the child does: every ending is a ChildOutcome.
    """
    cwd = Path(cwd).resolve()
    if ":" not in func:
        raise ValueError(f"func must be 'module:function', got {func!r}")
    with tempfile.TemporaryDirectory(prefix="judge-child-") as tmp:
        tmp_dir = Path(tmp)
        args_file = tmp_dir / "kwargs.json"
        result_file = tmp_dir / "result.json"
        args_file.write_text(json.dumps(kwargs))
        log_file = Path(log_path) if log_path is not None else tmp_dir / "child.log"
        log_file.parent.mkdir(parents=True, exist_ok=True)

        child_env = dict(os.environ)
        child_env.update(env or {})
        child_env["PYTHONUNBUFFERED"] = "1"
        # The judge package must be importable in the child; the workspace still comes first (python -m puts
        # the cwd at sys.path[0], ahead of PYTHONPATH).
        paths = [p for p in child_env.get("PYTHONPATH", "").split(os.pathsep) if p]
        if _JUDGE_ROOT not in paths:
            paths.append(_JUDGE_ROOT)
        child_env["PYTHONPATH"] = os.pathsep.join(paths)

        command = [sys.executable, "-m", "judge.child", func, str(args_file), str(result_file)]
        start = time.monotonic()
        with open(log_file, "wb") as log:
            process = subprocess.Popen(
                command,
                cwd=cwd,
                env=child_env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            timed_out = False
            try:
                exit_code = process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _dump_stacks(process)
                _kill_group(process.pid)
                exit_code = process.wait()
            seconds = time.monotonic() - start
            # Grandchildren the candidate left behind die with the group, whatever the ending.
            _kill_group(process.pid)
        tail = _tail(log_file)

        if timed_out:
            return ChildOutcome("timed-out", None, None, seconds, tail, f"killed after {timeout_s:.1f} s")
        result = _read_result(result_file)
        if result is None:
            if exit_code < 0:
                error = f"killed by signal {_signal_name(-exit_code)}"
            else:
                error = f"exited with code {exit_code} before returning"
            return ChildOutcome("crashed", None, exit_code, seconds, tail, error)
        if result.get("ok"):
            return ChildOutcome("ok", result.get("value"), exit_code, seconds, tail, "")
        return ChildOutcome("crashed", None, exit_code, seconds, tail, result.get("error", "unknown error"))


def _dump_stacks(process: subprocess.Popen) -> None:
    """Ask a hung child for its Python stacks (judge.child registers faulthandler on SIGUSR1) for the log."""
    try:
        process.send_signal(signal.SIGUSR1)
        process.wait(timeout=DUMP_GRACE_S)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_result(path: Path) -> dict | None:
    # judge.child writes the result atomically (rename), so a file present is a whole file.
    if not path.exists():
        return None
    return json.loads(path.read_text())


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    if not path.exists():
        return ""
    with open(path, "rb") as handle:
        last = deque(handle, maxlen=lines)
    return b"".join(last).decode("utf-8", errors="replace")
