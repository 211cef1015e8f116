"""The runner: judge's code inside a process that holds candidate (or base) code, driven by the parent.

Nothing this process says is trusted as it stands, and it holds nothing worth stealing. It never makes an input:
the oracle writes each input set into memory this process maps (judge.boundary.exchange) only while the process waits
for that set's call, in the frame that calls the kernel (judge.boundary.callframe), and reads the output back from an
outbox. It does not import the task's reference. Everything the frame measures and copies with is bound before
the candidate is imported, and judge.boundary.tamper names what the candidate changed of torch, builtins and judge.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from pathlib import Path
from typing import Any

from . import callframe, cuda_ipc, exchange, gpu_wait, host_area, tamper
from .memory import release as release_cached

WARMUP_CALLS = 3
WARMUP_S = 0.005
# A warm-up stops past this many seconds once it has made two calls (the first may compile), and where a call takes
# more than LONG_CALL_US its own launches size the spin instead of four more: a kernel of a second a call was warmed
# up for ten seconds a runner and benchmark.
WARMUP_MAX_S = 0.3
LONG_CALL_US = 50_000
LAUNCH_SAMPLES = 4
# The GPU clock's spin: this many times the typical launch (the median of the warm-up samples), plus a margin. It is
# the most a GPU wait lasts (judge.boundary.gpu_wait), and the spin itself in a runner that has no such wait.
# Sized from the slowest sample it ran up to 1.7 ms after one host hiccup in a warm-up on an H100, and
# benchmarks timed behind such spins came out 8-18% off.
SPIN_MARGIN_US = 40.0
SPIN_FACTOR = 3.0
NULL_SPIN_US = 60.0
# The GPU wait's least: this many times the slowest member's typical launch, plus SPIN_MARGIN_US. Every member's turn
# then holds the same wait (the parent's wall-clock audit, judge.stages.timing.audits, compares their turns less it),
# and a launch later than that is still hidden: the wait ends only when the runner says the launches are in.
WAIT_FACTOR = 1.25
# The spin never exceeds this: a call whose launch alone takes longer (a host loop over a batch, as torch's batched
# geqrf: a second of launching) would spin the GPU three times that for every GPU-clock call, to hide a launch that
# the call clock shows anyway. Past it, the GPU clock includes what of the launch the spin does not cover.
MAX_SPIN_US = 50_000.0

_perf = time.perf_counter


class Runner:
    """One kernel in one process: loads it, maps what the oracle hands it, and calls it in judge.boundary.callframe."""

    def __init__(self, workspace: str, kernel_file: str, forbidden: list[str] | None = None):
        import torch

        self.torch = torch
        self.cuda = torch.cuda.is_available()
        self.workspace = Path(workspace)
        self.kernel_file = kernel_file
        sys.path[:] = [workspace] + [p for p in sys.path if p not in ("", workspace)]
        self.kernel = None
        self.channel: tuple[int, int] | None = None  # the command and reply pipes (judge.sandbox.child sets them)
        self.inputs: cuda_ipc.Exported | None = None  # the device memory its inputs live in, its own, grown as needed
        self.host_maps: dict[str, host_area.MappedFile] = {}
        self.stretch: dict[str, Any] = {}
        self.threads_before: int | None = None  # Python threads alive when warm-up ended
        self.prims = callframe.Primitives()
        if self.cuda:
            self.events = tuple(torch.cuda.Event(enable_timing=True) for _ in range(3))
            # A runtime call on this thread makes CUDA's primary context current here: the driver calls that map
            # the oracle's memory (judge.boundary.cuda_ipc) need one, and nothing else of torch has run on the GPU yet.
            torch.zeros(1, device="cuda")
            torch.cuda.synchronize()
            self.prims.bind_wait(gpu_wait.load())  # made in the spare already, where it was one (judge.sandbox.child)
        self.guard = tamper.install_guard()
        tamper.settle_torch()  # after the guard: an audit hook a torch import adds is refused like any other
        _headers_with_caches()  # before the snapshot, as torch's own settling
        self.baseline = tamper.Snapshot.take(str(self.workspace.resolve()))

    # ---- the kernel -------------------------------------------------------------------------------------

    def load(self) -> dict:
        """Import the kernel file as GPU MODE does (`from submission import custom_kernel`)."""
        module = importlib.import_module(self.kernel_file.removesuffix(".py").replace("/", "."))
        self.kernel = module.custom_kernel
        return {"threads_after_import": len(sys._current_frames())}

    def audit(self) -> list[str]:
        """What the kernel changed of torch, builtins and judge in this process since before its import."""
        return self.baseline.changes() + self.guard.findings()

    # ---- what the oracle hands over ----------------------------------------------------------------------

    def build(self, plan: dict) -> dict:
        """Build each copy of `plan` (judge.boundary.oracle's: the skeleton, each copy's layouts, the host area and the
        outboxes) in memory this process holds: its own device memory for the device part and, after it, the device
        outbox (allocated here and exported, `device` in the reply: the oracle maps it, writes the inputs in and reads
        the outputs out) and its host files, mapped. The next `calls` stretch calls the kernel on them."""
        self.stretch = {}
        if self.cuda:  # the last benchmark's cached outputs, which a larger benchmark cannot reuse, go back first
            self.torch.cuda.empty_cache()
        device = plan.get("device")
        if device and (self.inputs is None or self.inputs.nbytes < device["bytes"]):
            if self.inputs is not None:  # the oracle let go of it before it sent this plan (RunnerFiles.want_device)
                self.inputs.free()
                self.inputs = None
            self.inputs = cuda_ipc.Exported(device["bytes"])
        host = plan["host"]
        views, copies = [], []
        for layouts in plan["copies"]:
            copies.append([self._view(layout, device, host) for layout in layouts])
            views.append(exchange.build(plan["skeleton"], copies[-1]))
        outboxes = {}
        box = plan["outbox"]
        if box.get("device") and self.inputs is not None:  # the tail of its own device memory (staging.plan_for)
            at, capacity = box["device"]["offset"], box["device"]["bytes"]
            outboxes["device"] = (cuda_ipc.view(self.inputs.pointer, exchange.raw_layout(capacity, at)), capacity)
        else:
            outboxes["device"] = (None, 0)
        host_box = self._host(box["host"]["path"], box["host"]["bytes"])
        outboxes["host"] = (host_box.view(exchange.raw_layout(box["host"]["bytes"], area=exchange.HOST)),
                            box["host"]["bytes"])
        # Objects (judge.boundary.objects) made again after each call: a KV cache's length a call raised is not the
        # next call's, whose input set is the oracle's as made.
        remake = None
        if exchange.holds_objects(plan["skeleton"]):
            def remake(copy: int, skeleton=plan["skeleton"], copies=copies) -> Any:
                return exchange.build(skeleton, copies[copy])
        self.stretch = {"datas": views, "outboxes": outboxes, "remake": remake}
        return {"copies": len(views), "device": self.inputs.handle if device else None}

    def _view(self, layout: dict, device: dict | None, host: dict):
        if layout["area"] == exchange.DEVICE:
            if device is None:
                raise exchange.ExchangeError("a device tensor without a device area")
            return cuda_ipc.view(self.inputs.pointer, layout)
        return self._host(host["path"], host["bytes"]).view(layout)

    def _host(self, path: str, nbytes: int) -> host_area.MappedFile:
        mapped = self.host_maps.get(path)
        if mapped is None or mapped.nbytes < nbytes:
            mapped = self.host_maps[path] = host_area.MappedFile(path, nbytes)
        return mapped

    # ---- calls -------------------------------------------------------------------------------------------

    def warm_up(self, known_us: float = 0.0) -> dict:
        """Warm-up calls on every copy (the oracle wrote the warm-up set, never timed, into all of them); the
        host's launch times afterwards size the GPU spin, and the spin's cycles per microsecond are measured
        now, with the GPU's clocks up after the calls. Where an earlier pair found the calls long (`known_us`,
        LONG_CALL_US or more: the parent sizes repetitions from what it knows), one call warms the process up: a
        second one of cholesky_py's 0.29 s calls cost 0.6 s of every 14 s pair (H200, 2026-11-29)."""
        datas = self.stretch["datas"]
        start = _perf()
        calls, launches, durations = 0, [], []
        known_long = known_us >= LONG_CALL_US
        while calls < max(2 * WARMUP_CALLS, len(datas)) or _perf() - start < WARMUP_S:
            if calls >= (1 if known_long else 2) and (known_long or _perf() - start > WARMUP_MAX_S):
                break
            began = _perf()
            launches.append(self._launch_time(calls % len(datas)))
            durations.append(_perf() - began)  # launch and GPU work: each call is synchronized after
            calls += 1
        # the first call may have compiled or loaded the kernel: the duration is the typical later one
        later = sorted(durations[1:]) or durations
        call_us = later[len(later) // 2] * 1e6
        # The spin is sized from launches after the first: the warm-up's own last LAUNCH_SAMPLES where it made them
        # (a call of 44 ms made four more, 0.18 s a runner and benchmark in every pair), else that many more calls.
        host = launches[1:][-LAUNCH_SAMPLES:]
        if call_us <= LONG_CALL_US and len(host) < LAUNCH_SAMPLES:  # past it, the spin is at its cap anyway
            more = [self._launch_time(i % len(datas)) for i in range(LAUNCH_SAMPLES - len(host))]
            host, calls = host + more, calls + len(more)
        rate = self._spin_rate() if self.cuda else 0.0
        # Libraries start their pools in a kernel's first calls (torch.compile's compile workers): the threads
        # alive now are the count a timed call must not raise. A thread that runs the kernel's own code is found
        # on every call whenever it started (judge.boundary.callframe).
        self.threads_before = len(sys._current_frames())
        return {"host_us": host, "calls": calls, "call_us": round(call_us, 2), "cycles_per_us": round(rate, 3),
                "threads": self.threads_before}

    def calls(self, entered_serial: int, count_threads: bool = True) -> dict:
        """A stretch of calls in judge.boundary.callframe: it answers the parent's records until told to stop. New
        threads are counted against those alive after warm-up, and not at all in a correctness stretch
        (`count_threads` False): a correctness call may be a shape's first and start a library's pool."""
        if self.channel is None:
            raise RuntimeError("judge.sandbox.child did not give the runner its pipes")
        stream = self.torch.cuda.current_stream() if self.cuda else None
        if self.prims.wait is not None:
            self.prims.wait.set_stream(stream.cuda_stream)
        result = callframe.serve_calls(
            self.prims, self.channel[0], self.channel[1], self.kernel, self.stretch["datas"],
            self.stretch["outboxes"], self.events if self.cuda else (), stream, str(self.workspace.resolve()),
            self.threads_before if count_threads else None, entered_serial, self.stretch["remake"])
        if not count_threads:  # a correctness call's working memory, cached here, is room the oracle's check needs
            release_cached()
        error = result.pop("error", None)
        if error is not None:
            import traceback

            traceback.print_exception(error)  # into the runner's log, which the verdict quotes
            result["error"] = _error_line(error)
        return result

    def profile(self, calls: int, mode: str) -> dict:
        """Profiled calls on the warm-up's data (judge.boundary.profiling), for the profile stage's runner only."""
        from .profiling import profile_calls

        datas = self.stretch["datas"]
        if self.stretch["remake"] is not None:  # objects a call changes, each call given them as made
            datas = _Remade(self.stretch["remake"], len(datas))
        return profile_calls(self.torch, self.kernel, datas, calls, mode, self.cuda)

    def _launch_time(self, copy: int) -> float:
        """The host's time to launch one call on copy `copy` (the warm-up's only measurement)."""
        if self.cuda:
            self.torch.cuda.synchronize()
        start = _perf()
        self.kernel(self.stretch["datas"][copy])
        host = (_perf() - start) * 1e6
        if self.cuda:
            self.torch.cuda.synchronize()
        if self.stretch["remake"] is not None:
            self.stretch["datas"][copy] = self.stretch["remake"](copy)
        return round(host, 2)

    def _spin_rate(self) -> float:
        """Cycles of `torch.cuda._sleep` per microsecond at the GPU's present clock (the median of three)."""
        start, _, end = self.events
        rates = []
        for _ in range(3):
            self.torch.cuda.synchronize()
            start.record()
            self.torch.cuda._sleep(200_000)
            end.record()
            end.synchronize()
            rates.append(200_000 / (start.elapsed_time(end) * 1e3))
        return sorted(rates)[1]


class _Remade:
    """The copies' data made again at each use (judge.boundary.objects): what a profile's calls are made on."""

    def __init__(self, remake, count: int):
        self.remake, self.count = remake, count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, copy: int) -> Any:
        return self.remake(copy)


def _headers_with_caches() -> None:
    """torch inductor's precompiled C++ header kept where the runner's caches are (TORCHINDUCTOR_CACHE_DIR, set by
    judge), not under the temp directory torch saw when its compiler was imported (a spare's, a timed runner's own):
    a timed runner then finds the header its correctness runner built, as it finds its compiled graphs. CPU kernels
    only; a first call of pmpp_v2/sort_py's torch.compile kernel, ported to the CPU, took 6.4 s with a warm cache and
    a new temp directory, 1.5 s with both (2-core VM, 2026-11-29). A torch without that module or name is left as is;
    nothing is created here (the directory is made by torch, once the runner is confined)."""
    codecache = sys.modules.get("torch._inductor.codecache")
    caches = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if codecache is None or not caches or not isinstance(getattr(codecache, "_HEADER_DIR", None), str):
        return
    codecache._HEADER_DIR = os.path.join(caches, "precompiled_headers")
    codecache._HEADER_LOCK_DIR = os.path.join(codecache._HEADER_DIR, "locks")


def _error_line(error: BaseException) -> str:
    try:
        lines = str(error).strip().splitlines()
        text = f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    except Exception:  # noqa: BLE001 - an exception whose message itself fails
        text = type(error).__name__
    return text[:callframe.ERROR_CHARS]


def flush_bytes() -> int:
    """The size of the buffer written before every timed call to empty L2: twice the L2, at least 8 MiB."""
    import torch

    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
    return max(2 * l2, 8 << 20)


def spin_for(host_us: list[float]) -> float:
    """A spin long enough to hide the launch: SPIN_FACTOR times the typical one, with margin, at most MAX_SPIN_US;
    a rare slower launch shows in its own sample, which the median leaves out."""
    return min(MAX_SPIN_US, SPIN_MARGIN_US + SPIN_FACTOR * _typical(host_us))


def wait_least(host_us_by_member: list[list[float]]) -> float:
    """The GPU wait's least: WAIT_FACTOR times the slowest member's typical launch (each member's median), with
    margin, at most MAX_SPIN_US."""
    return min(MAX_SPIN_US, SPIN_MARGIN_US + WAIT_FACTOR * max(map(_typical, host_us_by_member), default=0.0))


def _typical(host_us: list[float]) -> float:
    """The typical launch of `host_us` (the upper median; 0 where there is none)."""
    ordered = sorted(host_us)
    return ordered[len(ordered) // 2] if ordered else 0.0


def spin_cycles(spin_us: float, cycles_per_us: float, least_us: float | None = None) -> dict[str, int]:
    """The GPU clock's waits in cycles, the same numbers for every runner of a benchmark: at most `spin` and at
    least `least` (`least_us`, else all of it) before the timed call, and a spin of `null` before a null tail, which
    only has to outlast the host's way into its sync. Each runner sizing its spin from its own rate (measured when
    its CUDA context was made, sometimes with the GPU's clocks still low) gave spins 40-120 us apart on an H100, and
    identical kernels measured 0.2-0.6% apart with them."""
    least = spin_us if least_us is None else least_us  # judge.stages.timing.stage._spin keeps it within `spin`
    return {"spin": int(spin_us * cycles_per_us), "least": int(least * cycles_per_us),
            "null": int(max(least, NULL_SPIN_US) * cycles_per_us)}
