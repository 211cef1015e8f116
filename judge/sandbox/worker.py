"""A long-lived child process that judge drives with one command at a time, over pipes of its own.

Workers hold either the trusted oracle or a runner beside candidate (or base) code. The parent times every
command with its own clock, can freeze a worker (SIGSTOP to its whole process group) while another one
measures, and kills the group when a command outlives its limit. Every command carries a number that the
reply must echo: a candidate that writes to the reply pipe itself shifts the stream and is caught.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import bytecode
from .child import REPLY_TAMPERED_EXIT
from .forkserver import ForkServer
from .isolation import DUMP_GRACE_S, JUDGE_ROOT, kill_group, tail

MAX_REPLY_BYTES = 64 << 20
# A child's error line is its own text: judge keeps this much of it (the log holds the rest).
MAX_ERROR_CHARS = 2000
START_TIMEOUT_S = 300.0
# On GPU targets the parent polls a reply pipe without sleeping for this long before it waits in select: on an
# H100 host the wake-up from select after a timed call's 1.4 ms took 189 us on average (2026-11-25), against
# 4-8 us polled. CPU targets never poll: a spinning parent would take a core from the kernel being timed.
POLL_S = 0.01
# A command is sent to a stopped worker before it is continued (it wakes once, to the command) only when it fits
# in a pipe's buffer with room to spare (Linux's is 64 KiB); a longer one is sent after.
FROZEN_SEND_BYTES = 16 << 10
# The parent's wall seconds and count per command name (the op), over every worker of this process: where a
# round's time goes, for judge's own benchmarks (benchmarks/judge_selfcheck.py); reset by whoever reads it.
COMMAND_SECONDS: dict[str, list] = {}
# The parts of a reply's own account that are tallied (a runner's code can write a reply line of its own): the first
# few, with names no longer than this.
MAX_PHASES, MAX_PHASE_CHARS = 8, 64


class WorkerError(Exception):
    """A worker stopped answering as it should: it died, hung, or broke the protocol."""

    def __init__(self, status: str, message: str, log_tail: str = ""):
        super().__init__(message)
        self.status = status  # "crashed" | "timed-out" | "tampered"
        self.message = message
        self.log_tail = log_tail


class CommandFailed(Exception):
    """The command raised inside the worker (e.g. the kernel raised): the worker itself is still usable."""

    def __init__(self, error: str, log_tail: str = ""):
        super().__init__(error)
        self.error = error
        self.log_tail = log_tail


def capped(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """A child's text as judge keeps it: at most `limit` characters, saying how many more there were."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} ({len(text) - limit} more characters)"


def tally(name: str, seconds: float) -> None:
    """Add one command's wall seconds to COMMAND_SECONDS under `name`."""
    entry = COMMAND_SECONDS.setdefault(name, [0, 0.0])
    entry[0] += 1
    entry[1] += seconds


def _tally_reply(name: str, reply: "Reply", start: float, end: float) -> None:
    """A reply's wall seconds from its send (`start`) to its arrival (`end`), set on it and tallied under `name`; where
    the worker says when the command arrived and its reply left (`at`, on the clock both processes share) and what
    its parts took (`phases_us`), those too: shown, never trusted (benchmarks/pair_breakdown.py prints them)."""
    reply.wall_s = end - start
    tally(name, reply.wall_s)
    at = reply.at
    if isinstance(at, list) and len(at) == 2 and all(isinstance(t, float) for t in at):
        tally(f"{name}.to the worker (its own account)", at[0] - start)
        tally(f"{name}.back from the worker (its own account)", end - at[1])
    phases = reply.value.get("phases_us") if isinstance(reply.value, dict) else None
    if isinstance(phases, dict):  # a kernel may write its own reply line: a few short names, or none of them
        for phase, us in list(phases.items())[:MAX_PHASES]:
            if isinstance(us, (int, float)) and len(phase) <= MAX_PHASE_CHARS:
                tally(f"{name}.{phase} (its own account)", us * 1e-6)


def time_left(deadline: float) -> float:
    """Seconds until a stage's deadline (time.monotonic), for the next command's limit; past it, the stage
    has run out of time."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise WorkerError("timed-out", "ran past the stage's time limit")
    return left


def worker_env(env: dict[str, str] | None) -> dict[str, str]:
    """A worker's environment: `env` (judge's own when None), unbuffered, with the judge package importable, and
    judge's bytecode cache named for the imports it makes first (judge.sandbox.bytecode)."""
    child_env = bytecode.for_children(dict(env if env is not None else os.environ))
    child_env["PYTHONUNBUFFERED"] = "1"
    paths = [p for p in child_env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if JUDGE_ROOT not in paths:
        paths.append(JUDGE_ROOT)
    child_env["PYTHONPATH"] = os.pathsep.join(paths)
    return child_env


@dataclass
class Reply:
    value: Any
    wall_s: float
    at: Any = None  # the worker's own [command arrived, reply left], on the parent's monotonic clock


class Worker:
    """One child process serving `role` ("runner" or "oracle"); see judge.sandbox.child.serve."""

    def __init__(self, role: str, init: dict | None, *, cwd: Path, log_path: Path, policy: dict | None = None,
                 env: dict[str, str] | None = None, start_timeout_s: float = START_TIMEOUT_S, poll_s: float = 0.0,
                 preload: tuple[str, ...] = (), forks: "ForkServer | None" = None, launcher: tuple[str, ...] = ()):
        """With `init` None the worker is a spare: it loads torch (and CUDA) now, and the modules `preload` names
        (judge's own, what its bind will run), and waits for `bind`; with `forks` it is forked from that template,
        which has loaded them (judge.sandbox.forkserver). A reply is polled for `poll_s` seconds before the parent
        sleeps until it comes (POLL_S on GPU targets). `launcher` goes before a fresh worker's command: a program
        that starts it (ncu, judge.stages.profile.ncu), whose pid `pid` then is."""
        self.role = role
        self.poll_s = poll_s
        self.launcher = tuple(launcher)
        self.exchange: Path | None = None  # a runner's host files' directory (judge.stages.evaluation)
        self.home = Path(cwd)  # where it started: a spare's scratch directories (TMPDIR, caches) lie under it
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = tempfile.TemporaryDirectory(prefix="judge-worker-")
        setup = Path(self._tmp.name) / "setup.json"
        setup.write_text(json.dumps({"role": role, "init": init, "policy": policy, "deferred": init is None,
                                     "preload": list(preload)}))
        cmd_read, self._cmd = os.pipe()
        self._reply, reply_write = os.pipe()
        child_env = worker_env(env)
        if forks is not None and init is None:
            try:
                self.process = forks.spawn(home=Path(cwd), env=child_env, log_path=self.log_path, setup=setup,
                                           fds=(cmd_read, reply_write))
            except OSError:
                for fd in (self._cmd, self._reply):
                    os.close(fd)
                self._tmp.cleanup()
                raise
            finally:
                os.close(cmd_read)
                os.close(reply_write)
        else:
            self.process = self._popen(child_env, cwd, setup, cmd_read, reply_write)
        os.set_blocking(self._reply, False)  # polled first (POLL_S), then waited for in select
        self._buffer = b""
        self._serial = 0
        self._pending: list[tuple[int, str]] = []  # (serial, op) of commands sent with `start`, replies not yet read
        self.frozen = False
        self.hello: dict | None = None
        self._start_timeout_s = start_timeout_s
        if init is not None:
            self.hello = self._read(0, start_timeout_s).value

    def _popen(self, env: dict[str, str], cwd: Path, setup: Path, cmd_read: int, reply_write: int
               ) -> subprocess.Popen:
        """The worker as a fresh interpreter (`python -m judge.sandbox.child serve`), its own session's leader."""
        with open(self.log_path, "ab") as log:
            process = subprocess.Popen(
                [*self.launcher, sys.executable, "-m", "judge.sandbox.child", "serve", str(cmd_read), str(reply_write),
                 str(setup)],
                cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, pass_fds=(cmd_read, reply_write),
            )
        os.close(cmd_read)
        os.close(reply_write)
        return process

    def ready(self) -> None:
        """Wait until a spare has loaded what it loads before its workspace is known (then it only waits)."""
        if self.hello is None:
            if self.frozen:
                self.thaw()
            self.hello = self._read(0, self._start_timeout_s).value

    def is_ready(self) -> bool:
        """Whether a spare has loaded, without waiting for it."""
        if self.hello is None and self._line_waiting():
            self.ready()
        return self.hello is not None

    def start(self, op: str, **args) -> None:
        """Send a command without waiting. Commands sent this way queue in order; `finish` reads their replies,
        and so does the next `call` before its own."""
        self._pending.append((self._send(op, args), op))
        if self.frozen:
            self.thaw()

    def finish(self, timeout_s: float | None = None) -> Reply | None:
        """Wait for the replies of the commands sent with `start`, in order; the last one (None if none was
        outstanding). A `bind` among them gives the worker its hello, as `bind` does."""
        reply = None
        while self._pending:
            if self.frozen:
                self.thaw()
            serial, op = self._pending.pop(0)
            reply = self._read(serial, self._start_timeout_s if timeout_s is None else timeout_s)
            if op == "bind":
                self.hello = reply.value
        return reply

    @property
    def busy(self) -> bool:
        """A command sent with `start` is still outstanding."""
        return bool(self._pending)

    def bind(self, init: dict, *, workspace: Path, log_path: Path, policy: dict | None, env: dict[str, str],
             wait: bool = True) -> "Worker":
        """Give a spare its kernel's workspace: from here on it is the runner a cold start would have made.
        With `wait` False the bind is only sent (`finish` reads its answer), so that it runs while something
        else does."""
        waited = time.perf_counter()
        self.ready()
        tally("bind.waiting for the spare to load torch", time.perf_counter() - waited)
        self.log_path = Path(log_path)
        args = dict(init=init, workspace=str(workspace), log_path=str(log_path), policy=policy, env=env)
        if not wait:
            self.start("bind", **args)
            return self
        self.hello = self.call("bind", self._start_timeout_s, **args).value
        return self

    @property
    def pid(self) -> int:
        return self.process.pid

    def call(self, op: str, timeout_s: float, **args) -> Reply:
        """Run one command; its value and the parent's wall-clock time from sending it to the reply."""
        self.finish()
        start = time.perf_counter()
        serial = self._send(op, args)
        if self.frozen:  # after the send: a frozen worker wakes once, to a command already waiting for it
            self.thaw()
        reply = self._read(serial, timeout_s)
        _tally_reply(op, reply, start, time.perf_counter())
        return reply

    def enter(self, op: str, timeout_s: float, **args) -> tuple[int, Reply]:
        """Send a command that puts the worker into a stretch of binary records (judge.boundary.callframe): its serial
        and the worker's first line, which says it entered (and what it found on entry)."""
        serial = self._serial + 1
        self.finish()
        if self._send(op, dict(args, entered_serial=serial)) != serial:
            raise AssertionError("a command was sent in between")
        if self.frozen:
            self.thaw()
        return serial, self._read(serial, timeout_s)

    def record(self, record_for, timeout_s: float, name: str = "call") -> Reply:
        """One binary record to a worker in its stretch (`record_for(serial)` makes it) and its reply line,
        timed by the parent's clock like `call`."""
        start = time.perf_counter()
        self._serial += 1
        try:
            os.write(self._cmd, record_for(self._serial))
        except (BrokenPipeError, OSError):
            raise self._died() from None
        if self.frozen:
            self.thaw()
        reply = self._read(self._serial, timeout_s)
        _tally_reply(name, reply, start, time.perf_counter())
        return reply

    def leave(self, stop_record: bytes, serial: int, timeout_s: float) -> Reply:
        """End a stretch: the stop record, then the reply of the command that began it (`serial`)."""
        try:
            os.write(self._cmd, stop_record)
        except (BrokenPipeError, OSError):
            raise self._died() from None
        if self.frozen:
            self.thaw()
        return self._read(serial, timeout_s)

    def read_reply(self, serial: int, timeout_s: float) -> Reply:
        """The reply of an earlier command (a stretch that ended on its own)."""
        if self.frozen:
            self.thaw()
        return self._read(serial, timeout_s)

    def _send(self, op: str, args: dict) -> int:
        self._serial += 1
        message = json.dumps({"serial": self._serial, "op": op, "args": args}).encode() + b"\n"
        if self.frozen and len(message) > FROZEN_SEND_BYTES:
            self.thaw()  # a stopped worker cannot drain the pipe: the write would wait for it forever
        try:
            os.write(self._cmd, message)
        except (BrokenPipeError, OSError):
            raise self._died() from None
        return self._serial

    def freeze(self) -> None:
        """Stop every process of the worker's group, so that nothing it runs can disturb another's turn."""
        self._signal(signal.SIGSTOP)
        self.frozen = True

    def thaw(self) -> None:
        self._signal(signal.SIGCONT)
        self.frozen = False

    def close(self, wait: bool = True, grace_s: float = 2.0) -> None:
        """End the worker and everything it started. With `wait` False a runner that is done is killed at once
        and not waited for: its CUDA context takes ~0.12 s to tear down on an H100, which the next candidate's
        correctness stage, not the round, can absorb. With `wait`, it is told to exit and given `grace_s` (a
        launcher such as ncu writes its report after its child exits)."""
        if not wait:
            self._kill_group()
        elif self.process.poll() is None:
            try:
                if self.frozen:
                    self.thaw()
                os.write(self._cmd, json.dumps({"serial": -1, "op": "exit", "args": {}}).encode() + b"\n")
                self.process.wait(timeout=grace_s)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if wait:
            self._kill_group()
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
        for fd in (self._cmd, self._reply):
            try:
                os.close(fd)
            except OSError:
                pass
        self._tmp.cleanup()

    def log_tail(self) -> str:
        return tail(self.log_path)

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- internals -------------------------------------------------------------------------------------

    def _signal(self, number: int) -> None:
        if self.process.pid is None:
            return
        try:
            os.killpg(self.process.pid, number)
        except (ProcessLookupError, PermissionError):
            pass

    def _kill_group(self) -> None:
        """Kill the worker's group and session; a spare whose template never forked it has none."""
        if self.process.pid is not None:
            kill_group(self.process.pid)

    def _line_waiting(self) -> bool:
        """Whether a whole reply line, or the end of the pipe, can be read now (reads what the pipe holds, never
        waits); a worker that floods the channel is killed here."""
        while b"\n" not in self._buffer:
            try:
                chunk = os.read(self._reply, 1 << 20)
            except BlockingIOError:
                return False
            if not chunk:
                return True  # end of file: _read says how the worker died
            self._buffer += chunk
            if len(self._buffer) > MAX_REPLY_BYTES:
                self._kill()
                raise WorkerError("tampered", "wrote more than 64 MiB to judge's reply channel", self.log_tail())
        return True

    def _read(self, serial: int, timeout_s: float) -> Reply:
        deadline = time.monotonic() + timeout_s
        poll_until = time.perf_counter() + min(self.poll_s, timeout_s)
        while not self._line_waiting():
            if time.perf_counter() < poll_until:
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._hung(timeout_s)
            ready, _, _ = select.select([self._reply], [], [], min(left, 1.0))
            if not ready and self.process.poll() is not None:
                raise self._died()
        if b"\n" not in self._buffer:
            raise self._died()
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: a line of brackets nested past Python's limit
            self._kill()
            raise WorkerError("tampered", "wrote something other than judge's replies to judge's reply channel",
                              self.log_tail()) from None
        if not isinstance(message, dict) or message.get("serial") != serial:
            self._kill()
            raise WorkerError("tampered", "answered out of turn on judge's reply channel (a forged reply)",
                              self.log_tail())
        if not message.get("ok"):
            raise CommandFailed(capped(str(message.get("error", "unknown error"))), self.log_tail())
        return Reply(message.get("value"), 0.0, message.get("at"))

    def _hung(self, timeout_s: float) -> WorkerError:
        if self.process.pid is not None:
            try:
                os.kill(self.process.pid, signal.SIGUSR1)  # faulthandler: the Python stacks go to the log
                time.sleep(DUMP_GRACE_S)
            except ProcessLookupError:
                pass
        self._kill()
        return WorkerError("timed-out", f"killed after {timeout_s:.1f} s", self.log_tail())

    def _died(self) -> WorkerError:
        self._kill()
        code = self.process.returncode
        if code == REPLY_TAMPERED_EXIT:
            return WorkerError("tampered", "replaced the writer of judge's reply channel in its process",
                               self.log_tail())
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            message = f"killed by signal {name}"
        else:
            message = f"exited with code {code} before returning"
        return WorkerError("crashed", message, self.log_tail())

    def _kill(self) -> None:
        if self.frozen:
            self._signal(signal.SIGCONT)
            self.frozen = False
        self._kill_group()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
