"""Spare runners forked from one template process that has imported torch and judge's runner code once.

Why: a spare that imports torch itself takes seconds of a core (2-4 s on an H100 host, 7 s on a 2-core VM). With a
pool per GPU on a host judged at once, the spares did not keep up: in a round of 24 candidates on two H100s
(2026-11-26) each Ray actor waited 17-23 s for them. A fork of the template takes about 20 ms.

What a forked spare is: a process that never held a kernel, in a session of its own, with only its own command and
reply pipes, its log and /dev/null open, its own home where the template had its home, and the template's imports.
From there judge.sandbox.child.serve runs in it as in a spare started cold, and judge.sandbox.worker drives it the
same way. The template never imports contestant code, never makes a CUDA context (one does not survive a fork) and
holds nothing of judge's: no secret, no seed, no ledger. It is the spares' parent, so it reaps them and writes each
one's exit status where judge asked. Judge holds a pidfd of each (Linux 5.3 and later), so it waits for and kills a
process that is not its child without racing a reused pid. Where pidfds are missing, or the template has ended,
spares start cold as before.

    python -m judge.sandbox.forkserver CONTROL_FD setup.json      the template (started by ForkServer)
"""

from __future__ import annotations

import json
import os
import select
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from .isolation import kill_group

# How long judge waits for the template's status of a spare that has ended (it reaps in its loop, within
# milliseconds) before it takes the spare as killed: the template itself has gone, and PR_SET_PDEATHSIG killed it.
STATUS_WAIT_S = 2.0
_REQUEST_BYTES = 1 << 20


def available() -> bool:
    """Whether this Python and kernel can hold pidfds and pass them over a socket (Linux 5.3 and later)."""
    if not (hasattr(os, "pidfd_open") and hasattr(socket, "send_fds") and hasattr(signal, "pidfd_send_signal")):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return False
    return True


class ForkServer:
    """Judge's end of one template process: `spawn` asks it for a spare and returns at once."""

    def __init__(self, *, home: Path, env: dict[str, str], log_path: Path, preload: tuple[str, ...] = ()):
        self.home = Path(home).resolve()
        self._socket, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._tmp = tempfile.TemporaryDirectory(prefix="judge-forks-")
        setup = Path(self._tmp.name) / "setup.json"
        setup.write_text(json.dumps({"preload": list(preload)}))
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "judge.sandbox.forkserver", str(theirs.fileno()), str(setup)],
                cwd=self.home, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, pass_fds=(theirs.fileno(),),
            )
        theirs.close()
        self._lock = threading.Lock()
        self._waiting: deque[ForkedProcess] = deque()  # spawned, the template's answer not yet read (in order)
        self._ended = False
        self._statuses = 0

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return not self._ended and self.process.poll() is None

    def spawn(self, *, home: Path, env: dict[str, str], log_path: Path, setup: Path, fds: tuple[int, int]
              ) -> "ForkedProcess":
        """Ask for a spare started in `home` with `env`, writing to `log_path`, serving `setup` (judge.sandbox.child)
        on the command and reply pipe ends `fds`, which the caller closes after. Raises OSError when the template
        has ended. The spare's pid is known when the template answers (ForkedProcess.pid)."""
        with self._lock:
            self._statuses += 1
            status = Path(self._tmp.name) / f"status-{self._statuses}"
            request = {"home": str(Path(home).resolve()), "env": env, "log": str(log_path), "setup": str(setup),
                       "status": str(status)}
            if self._ended:
                raise OSError("the spares' template process has ended")
            socket.send_fds(self._socket, [json.dumps(request).encode()], list(fds))
            handle = ForkedProcess(self, status)
            self._waiting.append(handle)
        return handle

    def answer(self, handle: "ForkedProcess", timeout_s: float | None = None) -> None:
        """Read the template's answers, in order, until `handle` has its pid (None: the template ended first), or
        for `timeout_s` seconds (None: as long as the template lives; it answers once it has imported torch)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._lock:
            while not handle.answered:
                if not self._ended and not self._wait_readable(deadline):
                    return
                pid, pidfd = self._read_answer()
                first = self._waiting.popleft()
                first.answered, first._pid, first._pidfd = True, pid, pidfd

    def _wait_readable(self, deadline: float | None) -> bool:
        """Whether an answer (or the template's end) can be read before `deadline`."""
        while True:
            left = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._socket], [], [], max(0.0, left))
            if ready or self.process.poll() is not None:
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def _read_answer(self) -> tuple[int | None, int | None]:
        if not self._ended:
            try:
                message, fds, _, _ = socket.recv_fds(self._socket, 1 << 16, 1, socket.MSG_DONTWAIT)
            except OSError:
                message, fds = b"", []
            if message and fds:
                return json.loads(message)["pid"], fds[0]
            for fd in fds:
                os.close(fd)
            self._ended = True
        return None, None

    def close(self) -> None:
        """End the template and, through their parent-death signal, every spare it forked that is still alive."""
        with self._lock:
            self._ended = True
            kill_group(self.process.pid)
            self.process.wait()
            self._socket.close()
            for handle in self._waiting:
                handle.answered = True
            self._waiting.clear()
        self._tmp.cleanup()


class ForkedProcess:
    """A forked spare as judge.sandbox.worker.Worker uses a subprocess.Popen: pid, poll, wait, kill, returncode.
    `pid` is None for a spare its template never forked (it ended first); such a spare reads as killed."""

    def __init__(self, server: ForkServer, status: Path):
        self._server = server
        self._status = status
        self.answered = False
        self._pid: int | None = None
        self._pidfd: int | None = None
        self.returncode: int | None = None

    @property
    def pid(self) -> int | None:
        if not self.answered:
            self._server.answer(self)
        return self._pid

    def poll(self) -> int | None:
        try:
            return self.wait(0)
        except subprocess.TimeoutExpired:
            return None

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is not None:
            return self.returncode
        started = time.monotonic()
        self._server.answer(self, timeout)
        if not self.answered:  # still queued behind the template's imports: alive, as far as judge can tell
            raise subprocess.TimeoutExpired(f"spare (not yet forked) of {self._server.pid}", timeout or 0)
        if self._pid is None:
            self.returncode = -signal.SIGKILL
            return self.returncode
        left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
        ready, _, _ = select.select([self._pidfd], [], [], left)
        if not ready:
            raise subprocess.TimeoutExpired(f"spare {self._pid}", timeout or 0)
        self.returncode = self._read_status()
        self._release()
        return self.returncode

    def kill(self) -> None:
        if self.pid is not None and self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _release(self) -> None:
        """Close judge's pidfd of the spare, once: a runner closed without waiting (Worker.close(wait=False)) lets
        go of it when it is dropped, as a Popen does of its zombie, or a round of a hundred candidates would hold
        seven hundred of them."""
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def __del__(self) -> None:
        self._release()

    def _read_status(self) -> int:
        deadline = time.monotonic() + STATUS_WAIT_S
        while time.monotonic() < deadline:
            try:
                return int(self._status.read_text())
            except (OSError, ValueError):
                if not self._server.running:
                    break  # its parent is gone, and with it the spare (killed by its parent-death signal)
                time.sleep(0.002)
        return -signal.SIGKILL


# ---- the template's side --------------------------------------------------------------------------------------


def serve(control_fd: str, setup_file: str) -> None:
    """The template: import once, then fork a spare for each request and reap the spares, until judge hangs up."""
    import warnings

    from . import child

    child._start()
    setup = json.loads(Path(setup_file).read_text())
    child._import_heavy("runner", setup["preload"])
    warnings.simplefilter("ignore", DeprecationWarning)  # os.fork in a process with torch's native thread
    control = socket.socket(fileno=int(control_fd))
    template = _Template(os.getcwd(), fixed_under(os.getcwd()), control)
    import gc

    gc.collect()
    gc.freeze()  # no collection in a spare walks the template's objects, copying every page that holds one
    events = selectors.DefaultSelector()
    events.register(control, selectors.EVENT_READ)
    while True:
        for key, _ in events.select():
            if key.fileobj is control:
                message, fds, _, _ = socket.recv_fds(control, _REQUEST_BYTES, 2)
                if not message:
                    os._exit(0)  # judge hung up: the spares die with the template (their parent-death signal)
                request = json.loads(message)
                pid, pidfd = _fork(request, fds, template)
                events.register(pidfd, selectors.EVENT_READ, data=(pid, request["status"]))
                socket.send_fds(control, [json.dumps({"pid": pid}).encode()], [pidfd])
            else:
                events.unregister(key.fileobj)
                _reap(key.fileobj, *key.data)


@dataclass
class _Template:
    home: str  # the template's own home (its cwd, TMPDIR and caches)
    fixed: list[tuple[dict, str]]  # where its imports hold paths under it (fixed_under)
    control: socket.socket  # judge's requests


def _fork(request: dict, fds: list[int], template: _Template) -> tuple[int, int]:
    """A spare for `request`: its pid and a pidfd of it (taken before it can be reaped: only this process reaps)."""
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            _become_spare(request, fds, template, parent)
        finally:
            os._exit(1)  # never back into the template's loop
    for fd in fds:
        os.close(fd)
    return pid, os.pidfd_open(pid)


def _reap(pidfd: int, pid: int, status_path: str) -> None:
    """Collect an ended spare and write its exit status (subprocess's returncode) where judge reads it."""
    _, status = os.waitpid(pid, 0)
    os.close(pidfd)
    try:
        partial = f"{status_path}.partial"
        with open(partial, "w") as handle:
            handle.write(str(os.waitstatus_to_exitcode(status)))
        os.replace(partial, status_path)
    except OSError:
        pass  # judge has closed the spare and dropped its directory: nobody asks any more


def _become_spare(request: dict, fds: list[int], template: _Template, parent: int) -> None:
    """In the forked child: judge.sandbox.child.serve's start, as `python -m judge.sandbox.child serve` would have
    had it, with the template's home moved to the spare's own."""
    import ctypes

    from . import child

    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: dies with the template...
    if os.getppid() != parent:
        os._exit(1)  # ...which may have died before the line above
    os.setsid()
    template.control.detach()
    cmd, reply = fds
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    for entry in os.listdir("/proc/self/fd"):  # only its own pipes: never the template's socket or pidfds
        if int(entry) not in (0, 1, 2, cmd, reply):
            try:
                os.close(int(entry))
            except OSError:
                pass
    os.chdir(request["home"])
    os.environ.clear()
    os.environ.update(request["env"])
    move_home(template.home, request["home"], template.fixed)
    sys.argv[:] = [child.__file__, "serve", str(cmd), str(reply), request["setup"]]  # as a cold spare's
    child.serve(str(cmd), str(reply), request["setup"])


def fixed_under(home: str) -> list[tuple[dict, str]]:
    """Where the loaded modules hold a path under `home` (what the template's imports fixed under its TMPDIR and
    caches: tempfile's directory, torch's compiler's header directory, site's user directories), as (module
    namespace, name). Looked for once, in the template: in a forked spare the same walk took 95 ms, most of it
    copying the pages whose objects it touched."""
    found = []
    for module in list(sys.modules.values()):
        try:
            namespace = vars(module)
        except TypeError:
            continue
        for name, value in list(namespace.items()):
            if _under(value, home):
                found.append((namespace, name))
    return found


def move_home(old: str, new: str, found: list[tuple[dict, str]]) -> None:
    """Point the paths `found` under the template's home at the spare's home instead, and take the template's
    home off the import path: the spare may write its own home, never the template's."""
    sys.path[:] = [p for p in sys.path if p != old]
    for namespace, name in found:
        value = namespace.get(name)
        if _under(value, old):
            namespace[name] = new + value[len(old):]


def _under(value, home: str) -> bool:
    """A string naming `home` or a path in it; type(), not isinstance(): a module's lazy proxy runs no code."""
    return type(value) is str and (value == home or value.startswith(home + os.sep))


if __name__ == "__main__":
    serve(*sys.argv[1:])
