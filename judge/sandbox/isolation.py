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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..contain import LOG_CAP
from . import bytecode

if TYPE_CHECKING:
    from .confine import Policy

LOG_TAIL_LINES = 40
# How long a hung child gets to print its Python stacks (faulthandler on SIGUSR1) before it is killed.
DUMP_GRACE_S = 1.0
JUDGE_ROOT = str(Path(__file__).resolve().parents[2])


@dataclass
class ChildOutcome:
    """What happened to one child process: ok with a value, crashed, or timed out."""

    status: str  # "ok" | "crashed" | "timed-out"
    value: Any
    exit_code: int | None
    seconds: float
    log_tail: str
    error: str
    confinement: dict | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def entry_point(func: Callable | str) -> str:
    """'module:function' for a module-level function, so that a rename fails here and not in the child."""
    if isinstance(func, str):
        if ":" not in func:
            raise ValueError(f"func must be 'module:function', got {func!r}")
        return func
    if "." in func.__qualname__ or func.__module__ == "__main__":
        raise ValueError(f"{func.__qualname__} is not a module-level function a child can import")
    return f"{func.__module__}:{func.__qualname__}"


def run_isolated(
    func: Callable | str,
    kwargs: dict,
    *,
    timeout_s: float,
    cwd: Path,
    env: dict[str, str] | None = None,
    log_path: Path | None = None,
    policy: "Policy | None" = None,
    preload: tuple[str, ...] = (),
) -> ChildOutcome:
    """Call `func` with `kwargs` in a fresh `python -m judge.sandbox.child` in its own session.

    The child's cwd is `cwd` and it comes first on the child's `sys.path`; `env` adds to (or overrides) this
    process's environment. With a confinement `policy` (judge.sandbox.confine) the child is confined before `func`
    is imported, and its environment is the policy's; the modules `preload` names (judge's choice, such as torch) are
    imported before that, with judge's bytecode cache (judge.sandbox.bytecode). Arguments and result travel as JSON files;
    stdout+stderr go to `log_path` (a temporary file when None). Never raises for anything the child does:
    every ending is a ChildOutcome.
    """
    cwd = Path(cwd).resolve()
    func = entry_point(func)
    with tempfile.TemporaryDirectory(prefix="judge-child-") as tmp:
        tmp_dir = Path(tmp)
        args_file = tmp_dir / "kwargs.json"
        result_file = tmp_dir / "result.json"
        log_file = Path(log_path) if log_path is not None else tmp_dir / "child.log"
        log_file.parent.mkdir(parents=True, exist_ok=True)
        child_env, policy_json = child_environment(policy, env, tmp_dir, cached=policy is None or bool(preload))
        args_file.write_text(json.dumps({"kwargs": kwargs, "policy": policy_json, "preload": list(preload)}))

        command = [sys.executable, "-m", "judge.sandbox.child", func, str(args_file), str(result_file)]
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
                kill_group(process.pid)
                exit_code = process.wait()
            seconds = time.monotonic() - start
            # Grandchildren the candidate left behind die with the group, whatever the ending.
            kill_group(process.pid)
        log_tail = tail(log_file)

        return _outcome(timed_out, timeout_s, exit_code, seconds, log_tail, result_file)


def _outcome(timed_out: bool, timeout_s: float, exit_code: int, seconds: float, log_tail: str,
             result_file: Path) -> ChildOutcome:
    """How a child ended, read from its exit and its result file."""
    if timed_out:
        return ChildOutcome("timed-out", None, None, seconds, log_tail, f"killed after {timeout_s:.1f} s")
    result = _read_result(result_file)
    if result is None:
        if exit_code < 0:
            error = f"killed by signal {_signal_name(-exit_code)}"
        else:
            error = f"exited with code {exit_code} before returning"
        return ChildOutcome("crashed", None, exit_code, seconds, log_tail, error)
    if result.get("ok"):
        return ChildOutcome("ok", result.get("value"), exit_code, seconds, log_tail, "", result.get("confinement"))
    return ChildOutcome("crashed", None, exit_code, seconds, log_tail, result.get("error", "unknown error"),
                        result.get("confinement"))


def child_environment(policy: "Policy | None", env: dict[str, str] | None, tmp_dir: Path,
                      cached: bool = False) -> tuple[dict, dict | None]:
    """The child's environment and its confinement (JSON, None when unconfined); its scratch `tmp_dir` is
    writable to it too. `cached`: the child makes imports of judge's own first, which may keep their bytecode."""
    child_env = dict(os.environ)
    policy_json = None
    if policy is not None:
        from . import confine

        policy = confine.Policy(writable=[*policy.writable, tmp_dir], readable=policy.readable, network=policy.network,
                                exchange=policy.exchange)
        confine.prepare(policy)
        child_env = confine.child_env(policy, child_env)
        policy_json = policy_to_json(policy)
    child_env.update(env or {})
    if cached:
        bytecode.for_children(child_env)
    else:
        child_env.pop(bytecode.ENV, None)
    child_env["PYTHONUNBUFFERED"] = "1"
    # The judge package must be importable in the child; the workspace still comes first (python -m puts the
    # cwd at sys.path[0], ahead of PYTHONPATH).
    paths = [p for p in child_env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if JUDGE_ROOT not in paths:
        paths.append(JUDGE_ROOT)
    child_env["PYTHONPATH"] = os.pathsep.join(paths)
    return child_env, policy_json


def policy_to_json(policy: "Policy") -> dict:
    return {"writable": [str(p) for p in policy.writable], "readable": [str(p) for p in policy.readable],
            "network": policy.network, "exchange": [str(p) for p in policy.exchange],
            "caches_at": str(policy.caches_at) if policy.caches_at is not None else None}


def policy_from_json(data: dict) -> "Policy":
    from .confine import Policy

    return Policy(writable=[Path(p) for p in data["writable"]], readable=[Path(p) for p in data["readable"]],
                  network=bool(data["network"]), exchange=[Path(p) for p in data.get("exchange", [])],
                  caches_at=Path(data["caches_at"]) if data.get("caches_at") else None)


def _dump_stacks(process: subprocess.Popen) -> None:
    """Ask a hung child for its Python stacks (judge.sandbox.child registers faulthandler on SIGUSR1) for the log."""
    try:
        process.send_signal(signal.SIGUSR1)
        process.wait(timeout=DUMP_GRACE_S)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass


def session_members(sid: int) -> list[tuple[int, int]]:
    """(pid, process group) of every live process in session `sid`: a child started with its own session keeps
    all its descendants there (confined children cannot call setsid), whatever groups they moved to."""
    return sessions_members([sid])[sid]


def sessions_members(sids: list[int]) -> dict[int, list[tuple[int, int]]]:
    """session_members of several sessions in one walk of /proc: a group's runners are looked at after every
    benchmark, and one walk each took 4.6 ms on an H200 host (1.0 s of an amd/fp8-mm round, 2026-11-30)."""
    members: dict[int, list[tuple[int, int]]] = {sid: [] for sid in sids}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2:].split()
        if int(fields[3]) in members and fields[0] != b"Z":
            members[int(fields[3])].append((int(entry), int(fields[2])))
    return members


def session_strays(sids: list[int]) -> dict[int, list[int]]:
    """Per session whose leader leads its own process group (a worker's): the live processes of the session in other
    groups, which a stop of the leader's group does not reach, so they must not run while another worker measures;
    one walk of /proc for all (sessions_members)."""
    return {sid: sorted(pid for pid, group in found if group != sid) for sid, found in sessions_members(sids).items()}


def kill_group(pgid: int) -> None:
    """Kill a child's process group and every other process left in its session."""
    for target in [pgid] + [pid for pid, group in session_members(pgid) if group != pgid]:
        try:
            (os.killpg if target == pgid else os.kill)(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _read_result(path: Path) -> dict | None:
    # judge.sandbox.child writes the result atomically (rename), so a file present is a whole file.
    if not path.exists():
        return None
    return json.loads(path.read_text())


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def tail(path: Path, lines: int = LOG_TAIL_LINES, limit: int = LOG_CAP) -> str:
    """The last `lines` lines of a log, read from at most its last `limit` bytes: a child that printed 100 MiB,
    or one line of 100 MiB, costs judge `limit` bytes here. Where the window cuts into a line, the tail starts
    with how many bytes of the log came before it."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            start = size - limit + 64 if size > limit else 0  # 64: room for the note, within `limit` in all
            handle.seek(start)
            split = list(handle)  # lines end at b"\n" only, as the log's reader sees them
    except FileNotFoundError:
        return ""
    text = b"".join(split[-lines:]).decode("utf-8", errors="replace")
    if start and len(split) <= lines:  # the window starts inside a line: say how much came before it
        return f"({start} more bytes before)\n{text}"
    return text
