"""Entry point of an isolated child.

    python -m judge.sandbox.child module:function args.json result.json      one call, result in a file
    python -m judge.sandbox.child serve CMD_FD REPLY_FD setup.json            a worker (judge.sandbox.worker) serving commands

Kept small on purpose: everything here runs beside candidate code. Confinement (judge.sandbox.confine) is applied
after judge's own code and torch are loaded and before any candidate code is imported.
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib
import json
import math
import os
import signal
import sys
import tempfile
import traceback
from pathlib import Path
from time import perf_counter as _clock  # CLOCK_MONOTONIC on Linux: the parent's clock too

from . import bytecode

# The exit code of a child whose reply channel was swapped in its own process (judge.sandbox.worker reads it).
REPLY_TAMPERED_EXIT = 86
RUNNER_OPS = {"load", "build", "warm_up", "calls", "audit", "profile"}
ORACLE_OPS = {"plan", "memory", "attach", "detach", "bind", "case", "stage", "verify_case", "check_again",
              "benchmark", "turn", "release", "facts"}
CALL_OPS = {"run"}
ERROR_CHARS = 2000
# Where judge's own imports keep their bytecode (judge.sandbox.bytecode), taken out of the environment at the start.
_bytecode: str | None = None


def _clean(value):
    """NaN and infinities as strings, so the result is strict JSON that SQLite's json functions accept."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _write(path: Path, text: str) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    os.replace(partial, path)


def _error_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")[:ERROR_CHARS]


def _start() -> str:
    import ctypes

    global _bytecode
    _bytecode = os.environ.pop(bytecode.ENV, None)  # a path of judge's: no kernel reads it from the environment
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: a child never outlives judge, frozen or not
    faulthandler.enable()  # a segfault prints the Python stack into the log
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the parent's "show me where you hang"
    workspace = os.getcwd()
    # The candidate sees its own files first, and never the directory judge was started from.
    sys.path[:] = [workspace] + [p for p in sys.path if p not in ("", workspace)]
    return workspace


_affinity = os.sched_getaffinity  # bound before candidate code exists


def _threads_follow_cores(last: frozenset | None) -> frozenset | None:
    """torch's intra-op threads (OpenMP's and MKL's) as many as the cores this process may run on, set again
    whenever judge has pinned it to other cores since the last time (judge.core_blocks.pin, from the parent): a
    pool sized for the cores a process saw at start and squeezed onto fewer spins at every barrier (a problem's
    QR check took 0.37 s on two cores, 20.7 s with its two threads pinned to one and 0.56 s with one thread). A
    process started on those cores gets as many; a kernel may still set its own number after (its own cores
    bound what it gains). Returns the cores now matched."""
    try:
        cores = frozenset(_affinity(0))
    except OSError:
        return last
    torch = sys.modules.get("torch")
    if torch is None:
        return last
    if cores != last:
        torch.set_num_threads(len(cores))
    return cores


def _confine(policy_json: dict | None) -> dict | None:
    if policy_json is None:
        return None
    from . import confine
    from .isolation import policy_from_json

    return confine.apply(policy_from_json(policy_json)).to_dict()


def call(func: str, args_file: str, result_file: str) -> None:
    _start()
    module_name, _, function_name = func.partition(":")
    args = json.loads(Path(args_file).read_text())
    confinement = None
    try:
        with bytecode.cached(_bytecode):
            for module in args.get("preload", []):  # named by judge (torch), imported before any contestant code
                with contextlib.suppress(ImportError):  # the kernel's own import says what is missing
                    importlib.import_module(module)
        # A call without confinement runs judge's own code only (the probe): its imports may keep their bytecode.
        with bytecode.cached(_bytecode if args.get("policy") is None else None):
            function = getattr(importlib.import_module(module_name), function_name)
            confinement = _confine(args.get("policy"))
            value = function(**args["kwargs"])
        text = json.dumps({"ok": True, "value": _clean(value), "confinement": confinement}, allow_nan=False)
    except Exception as error:  # the verdict is "crashed" with this line; the traceback goes to the log
        traceback.print_exc()
        text = json.dumps({"ok": False, "error": _error_line(error), "confinement": confinement})
    _write(Path(result_file), text)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown (CUDA context destruction, atexit hooks of candidate code): the result is in.
    os._exit(0)


def _hello(confinement: dict | None, phases: dict[str, float]) -> dict:
    """A child's start or bind reply, sent before any kernel code runs: its pid, its uid as confined (the owner its
    host files need: judge.stages.evaluation), what confines it and its start's own account of its phases."""
    return {"pid": os.getpid(), "uid": os.getuid(), "confinement": confinement, "phases_us": phases}


def serve(cmd_fd: str, reply_fd: str, setup_file: str) -> None:
    """Answer the parent's commands one at a time until it says exit (judge.sandbox.worker is the other end)."""
    _start()
    setup = json.loads(Path(setup_file).read_text())
    commands = os.fdopen(int(cmd_fd), "rb")
    reply = int(reply_fd)
    _send = os.write  # bound before candidate code exists
    send_id = id(_send)

    def send(message: dict) -> None:
        if id(_send) != send_id:  # the kernel swapped the writer this closure holds: its replies cannot be trusted
            sys.stderr.write("judge: the reply channel's writer was replaced in this process\n")
            sys.stderr.flush()
            os._exit(REPLY_TAMPERED_EXIT)
        data = json.dumps(_clean(message), allow_nan=False).encode() + b"\n"
        while data:
            data = data[_send(reply, data):]

    serial = 0
    phases: dict[str, float] = {}  # the start's (or bind's) own account of its parts, in us: shown, never trusted
    if setup.get("deferred"):  # a warm spare: the heavy imports now, CUDA when told, the kernel's workspace later
        _import_heavy(setup["role"], setup.get("preload", []))
        send({"serial": 0, "ok": True, "value": {"pid": os.getpid(), "ready": True}})
        serial, setup = _wait_for_bind(commands, send, setup, phases, cuda=setup["role"] != "call")
    try:
        started = _clock()
        if not setup.get("deferred"):  # torch, judge's import, before a reference's or a kernel's
            with bytecode.cached(_bytecode):
                import torch  # noqa: F401
        server, allowed = _server(setup)
        if setup["role"] == "runner":
            server.channel = (commands.fileno(), reply)  # judge.boundary.callframe reads and answers records on them
        made = _clock()
        confinement = _confine(setup.get("policy"))
        phases.update(runner=round((made - started) * 1e6, 1), confine=round((_clock() - made) * 1e6, 1))
    except Exception as error:
        traceback.print_exc()
        send({"serial": serial, "ok": False, "error": _error_line(error)})
        os._exit(1)
    send({"serial": serial, "ok": True, "value": _hello(confinement, phases)})
    cores = None
    for line in commands:
        received = _clock()
        message = json.loads(line)
        if message["op"] == "exit":
            break
        try:
            cores = _threads_follow_cores(cores)
            if message["op"] not in allowed:
                raise ValueError(f"unknown command {message['op']!r}")
            value = getattr(server, message["op"])(**message["args"])
            answer = {"serial": message["serial"], "ok": True, "value": value}
        except Exception as error:
            traceback.print_exc()
            answer = {"serial": message["serial"], "ok": False, "error": _error_line(error)}
        answer["at"] = [received, _clock()]  # when the command arrived and its reply left: shown, never trusted
        send(answer)
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(0)


class _OneCall:
    """A warm compile worker's server (role "call"): the function its bind names, imported before confinement as
    judge.sandbox.child.call imports it, then run once with the arguments judge sends (judge.stages.compile.workers)."""

    def __init__(self, func: str):
        module_name, _, function_name = func.partition(":")
        self.function = getattr(importlib.import_module(module_name), function_name)

    def run(self, kwargs: dict):
        return self.function(**kwargs)


def _server(setup: dict):
    if setup["role"] == "call":
        return _OneCall(**setup["init"]), CALL_OPS
    if setup["role"] == "oracle":
        from ..boundary.oracle import Oracle

        return Oracle(**setup["init"]), ORACLE_OPS
    from ..boundary.runner import Runner

    return Runner(**setup["init"]), RUNNER_OPS


def _import_heavy(role: str = "runner", preload: list[str] | tuple[str, ...] = ()) -> None:
    """What every runner pays before it knows its kernel and that touches no GPU: torch's import (seconds) and
    the compiler modules the runner settles before its snapshot (2.4 s of each bind on an H100 before they moved
    here); a compile worker's judge code instead, the modules its parent names in `preload` (judge.stages.compile's
    imports took 0.45 s of a bind on a 2-core VM). All of it judge's: its bytecode may be cached."""
    with bytecode.cached(_bytecode):
        import torch  # noqa: F401

        from ..boundary import runner  # noqa: F401

        for module in preload:  # judge's own modules, named by judge (judge.stages.compile.workers), never a kernel's
            importlib.import_module(module)
        if role == "runner":
            from ..boundary.tamper import preload_torch

            preload_torch()

    try:  # finding libseccomp runs ldconfig: done here, not while a candidate waits for its runner's bind
        import pyseccomp  # noqa: F401
    except (ImportError, OSError, RuntimeError):
        pass  # judge.sandbox.confine says so in the runner's confinement


def _init_cuda(runner: bool) -> None:
    """The CUDA context (a fraction of a second) and, in a runner, the GPU clock's wait: only when the parent says,
    never while another runner is timed."""
    import torch

    if not torch.cuda.is_available():
        return
    torch.cuda.init()
    torch.empty(1, device="cuda")
    if runner:
        from ..boundary import gpu_wait

        gpu_wait.load()  # the driver compiles its PTX (87 ms on an H200): here, not while a candidate waits for a bind


def _wait_for_bind(commands, send, setup: dict, phases: dict, cuda: bool = True) -> tuple[int, dict]:
    """A spare's commands before its workspace is known: `cuda` (make the context now), then `bind` or `exit`.
    A bind's own account of its CUDA context (none when it was made earlier) goes into `phases`; a compile
    worker (`cuda` False) never makes one: a compile touches no GPU."""
    while True:
        message = json.loads(commands.readline())
        op = message.get("op")
        if op == "exit":  # a spare closed unused
            os._exit(0)
        if op == "cuda":
            _init_cuda(setup["role"] == "runner")
            send({"serial": message["serial"], "ok": True, "value": {"cuda": True}})
            continue
        if op != "bind":
            raise SystemExit(f"judge: a spare worker takes cuda, bind or exit, got {op!r}")
        started = _clock()
        if cuda:
            _init_cuda(setup["role"] == "runner")
        phases["cuda"] = round((_clock() - started) * 1e6, 1)
        return _bind(message, setup)


def _bind(message: dict, setup: dict) -> tuple[int, dict]:
    """A spare takes its workspace: the environment, log, directory and import path a cold start would have
    had, before the runner is made and the process confined."""
    args = message["args"]
    os.environ.clear()
    os.environ.update(args["env"])
    # Python keeps the temp directory it found first (tempfile.tempdir): the spare's own, when its imports (torch's
    # compiler) asked for it before the bind. Forgotten here, it is found again under the workspace's TMPDIR; the
    # spare's directory is out of the kernel's reach once confined, so a kernel writing a temp file crashed there.
    tempfile.tempdir = None
    log = os.open(args["log_path"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    previous = os.getcwd()
    os.chdir(args["workspace"])
    sys.path[:] = [args["workspace"]] + [p for p in sys.path if p not in ("", previous, args["workspace"])]
    return message["serial"], {**setup, "init": args["init"], "policy": args["policy"], "deferred": False}


def main(argv: list[str]) -> None:
    if argv and argv[0] == "serve":
        serve(*argv[1:])
    else:
        call(*argv)


if __name__ == "__main__":
    main(sys.argv[1:])
