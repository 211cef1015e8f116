"""The runner: judge's code inside a process that holds candidate (or base) code, driven by the parent.

Nothing this process says is trusted as it stands. It generates inputs from seeds the parent sends (so the
candidate never sees a fixed input set in advance), poisons the outputs, calls the kernel and hands back
outputs (correctness: a file the trusted oracle compares) or times and projections of the output (timing:
the parent checks them against the oracle and against its own wall clock). Everything it measures with is
bound before the candidate is imported, and tamper.Baseline names what the candidate changed.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

from . import cuda_ipc, tamper, tensors

WARMUP_CALLS = 3
WARMUP_S = 0.005
# The GPU clock's spin: this many times the typical launch (the median of the warm-up samples), plus a margin.
# Sized from the slowest sample it ran up to 1.7 ms after one host hiccup in a warm-up on an H100, and
# benchmarks timed behind such spins came out 8-18% off.
SPIN_MARGIN_US = 40.0
SPIN_FACTOR = 3.0
NULL_SPIN_US = 60.0

# Bound before any candidate code runs: the runner measures with these, whatever the candidate rebinds.
_perf = time.perf_counter
_monotonic = time.monotonic


class Runner:
    """One kernel in one process: loads it, checks cases, times repetitions; the parent's ops call these."""

    def __init__(self, workspace: str, kernel_file: str, generators: dict[str, str]):
        import torch

        self.torch = torch
        self.cuda = torch.cuda.is_available()
        self.workspace = Path(workspace)
        self.kernel_file = kernel_file
        sys.path[:] = [workspace] + [p for p in sys.path if p not in ("", workspace)]
        import reference  # the task's own, imported before any candidate code can touch the workspace

        self.reference = reference
        self.generators = {name: _generator(reference, spec) for name, spec in generators.items()}
        self.kernel = None
        self.bench: dict[str, Any] = {}
        self.imported: cuda_ipc.Imported | None = None  # the oracle's timing slots, mapped here
        self.outbox: tuple[str, cuda_ipc.Imported] | None = None  # the oracle's outbox (handle, mapping)
        self._save = torch.save
        if self.cuda:
            self._sync = torch.cuda.synchronize
            self._sleep = torch.cuda._sleep
            self._event = torch.cuda.Event
            self._elapsed = torch.cuda.Event.elapsed_time
            self._record = torch.cuda.Event.record
            self.flush = torch.empty(flush_bytes() // 4, dtype=torch.int32, device="cuda")
            self.events = [self._event(enable_timing=True) for _ in range(3)]
        self.baseline = tamper.Baseline(self.own_functions(), str(self.workspace.resolve()))
        # What this object holds that measures or makes inputs; audit() checks they are still the same objects.
        self._bound = {name: id(value) for name, value in vars(self).items()
                       if name not in ("bench", "kernel", "imported", "outbox")}
        self._generators = {name: tamper.fingerprint(fn) for name, fn in self.generators.items()}

    def own_functions(self) -> dict[str, tuple[Any, str]]:
        """Everything of judge's that measures, copies, poisons or hands over outputs in this process."""
        places = {f"Runner.{name}": (Runner, name) for name in (
            "case", "timed", "arm", "fire", "report", "warm_up", "load", "audit", "setup_benchmark", "prepare_set",
            "null_tail", "_gpu_time", "_call_time", "_host_time", "_flush", "_content", "_generate", "_shared_copies",
            "_hand_over")}
        places.update({f"tensors.{name}": (tensors, name) for name in (
            "copy_into", "poison", "poisoned_slots", "fits_layouts", "scrub", "plain_tensors", "leaves", "sync", "clone_data", "rebuild")})
        places.update({f"tensors.Projector.{name}": (tensors.Projector, name) for name in ("project", "values", "weights", "_dot")})
        places.update({f"runner.{name}": (sys.modules[__name__], name) for name in ("_perf", "_monotonic")})
        return places

    # ---- loading and correctness ----------------------------------------------------------------------

    def load(self) -> dict:
        """Import the kernel file as GPU MODE does (`from submission import custom_kernel`)."""
        module = importlib.import_module(self.kernel_file.removesuffix(".py").replace("/", "."))
        self.kernel = module.custom_kernel
        return {"threads_after_import": len(self.baseline.threads)}

    def case(self, spec: dict, distribution: str, slots: list[str], dump: str, outbox: dict | None = None) -> dict:
        """One correctness call: fresh inputs from the spec's (secret) seed, outputs poisoned, the kernel's output
        handed to the oracle: copied into the oracle's outbox where it is shaped as the reference's outputs
        (`placed`: outbox), else saved to `dump` (`placed`: file); the verdict is the oracle's, never this
        process's."""
        t0 = _perf()
        data = self.generators[distribution](**spec)
        tensors.sync()
        poisoned = tensors.poison(data, slots)
        start = _perf()
        output = self.kernel(data)
        tensors.sync()  # every stream: work left on a side stream must be finished before the output is taken
        seconds = _perf() - start
        problem = tensors.plain_tensors(output)
        placed = None
        if problem is None:
            placed = "outbox" if outbox and self._hand_over(output, outbox) else "file"
            if placed == "file":
                self._save([t.detach().cpu() for _, t in tensors.leaves(output)], dump)
        phases = {"inputs": round((start - t0) * 1e6, 1), "kernel": round(seconds * 1e6, 1),
                  "save": round((_perf() - start - seconds) * 1e6, 1)}
        return {"poisoned": poisoned, "kernel_s": round(seconds, 6), "problem": problem, "placed": placed,
                "phases_us": phases}

    def _hand_over(self, output, outbox: dict) -> bool:
        """Copy the output into the oracle's outbox when its tensors are CUDA tensors shaped and typed as the
        reference's outputs; False (the caller saves a file, and the oracle names what is wrong) otherwise."""
        got = [t for _, t in tensors.leaves(output)]
        if not self.cuda or not tensors.fits_layouts(got, outbox["layouts"]):
            return False
        try:
            if self.outbox is None or self.outbox[0] != outbox["handle"]:
                if self.outbox is not None:
                    self.outbox[1].close()
                    self.outbox = None
                self.outbox = (outbox["handle"], cuda_ipc.Imported(outbox["handle"]))
        except cuda_ipc.IpcError:
            return False
        for tensor, layout in zip(got, outbox["layouts"]):
            cuda_ipc.view(self.outbox[1].pointer, layout).copy_(tensor)
        tensors.sync()
        return True

    def audit(self) -> list[str]:
        """What the kernel changed of judge's in this process: tamper.Baseline's list, and this object's own
        bound primitives and methods (an instance attribute can shadow a method of the class)."""
        found = self.baseline.changes()
        found += [f"judge's runner.{name} replaced" for name, before in self._bound.items()
                  if id(vars(self).get(name)) != before]
        found += [f"judge's runner.{name} shadowed on the instance" for name in vars(self)
                  if callable(getattr(Runner, name, None)) and name not in self._bound]
        found += [f"judge's input generator '{name}' replaced" for name, before in self._generators.items()
                  if tamper.fingerprint(self.generators.get(name)) != before]
        return found

    # ---- timing ----------------------------------------------------------------------------------------

    def setup_benchmark(self, spec: dict, distribution: str, seeds: list[int], slots: list[str],
                        projection_seed: int, copies: int = 2, shared: dict | None = None) -> dict:
        """Inputs for one benchmark: physical copies (made from the warm-up seed) that the timed calls run on in
        turn, and input sets generated from `seeds[1:]` only when the parent asks (just before their first use),
        then copied into a physical copy before each call: a cache keyed on which tensor came back returns the
        wrong set's answer. With `shared` (the oracle's slots) the copies are views of memory the other runner
        maps too, so that both kernels run on the same physical memory; else, or where the driver refuses,
        `copies` buffers of this process's own."""
        self.bench = {}
        if self.cuda:
            self.torch.cuda.empty_cache()  # the previous benchmark's sets
        self.bench = {"spec": spec, "distribution": distribution, "seeds": seeds, "slots": slots, "sets": {},
                      "projector": tensors.Projector(projection_seed), "calls": {}, "timed": set()}
        warm = self._generate(seeds[0])
        if self.imported is not None:  # the previous benchmark's slots: the oracle frees them after the next share
            self.imported.close()
            self.imported = None
        placement, refused = "separate", None
        physical = None
        if shared:
            try:
                physical = self._shared_copies(warm, shared)
                placement = "shared"
            except (cuda_ipc.IpcError, ValueError) as error:
                refused = str(error)
        if physical is None:
            physical = [warm] + [tensors.clone_data(warm) for _ in range(max(1, copies) - 1)]
        self.bench["physical"] = physical
        self.bench["poisoned"] = tensors.poisoned_slots(warm, slots)
        self.bench["shared"] = placement == "shared"
        if self.bench["shared"]:
            self.bench["flush"] = cuda_ipc.view(self.imported.pointer, shared["flush"])
        out = {"sets": len(seeds) - 1, "copies": len(physical), "placement": placement}
        if refused:
            out["refused"] = refused
        return out

    def _shared_copies(self, warm, shared: dict) -> list:
        """The oracle's slots as copies of `warm`'s structure: its CUDA tensors viewed in the mapped memory
        (checked against the warm set's shapes and types), the rest cloned; each filled with the warm set."""
        self.imported = cuda_ipc.Imported(shared["handle"])
        copies = []
        for layouts in shared["slots"]:
            layouts = iter(layouts)
            flat = []
            for path, leaf in tensors.leaves(warm):
                if isinstance(leaf, self.torch.Tensor) and leaf.is_cuda:
                    placed = cuda_ipc.view(self.imported.pointer, next(layouts))
                    if placed.shape != leaf.shape or placed.dtype != leaf.dtype:
                        raise ValueError(f"the shared slot for input{path} is not shaped like it")
                    flat.append(placed)
                else:
                    flat.append(tensors.clone_data(leaf))
            copy = tensors.rebuild(warm, flat)
            tensors.copy_into(copy, warm)
            copies.append(copy)
        tensors.sync()
        return copies

    def warm_up(self) -> dict:
        """Warm-up calls on every physical copy; the host's launch times afterwards size the GPU spin, and the
        spin's cycles per microsecond are measured now, with the GPU's clocks up after the calls."""
        physical = self.bench["physical"]
        start = _monotonic()
        calls = 0
        while calls < max(2 * WARMUP_CALLS, len(physical)) or _monotonic() - start < WARMUP_S:
            self._call_time(physical[calls % len(physical)])
            calls += 1
        host = [self._call_time(physical[i % len(physical)])[1] for i in range(4)]
        rate = self._spin_rate() if self.cuda else 0.0
        return {"host_us": host, "calls": calls + 4, "cycles_per_us": round(rate, 3)}

    def timed(self, set_index: int, clock: str, spin_cycles: int, null_cycles: int) -> dict:
        """One timed call in one command: arm, fire, report. The parent's wall clock around the command then
        holds everything judge's runner did for the call, and a turn costs one round trip instead of three.
        `phases_us` is this process's own account, shown for diagnosis and never trusted."""
        t0 = _perf()
        armed = self.arm(set_index, clock, null_cycles)
        t1 = _perf()
        fired = self.fire(clock, spin_cycles)
        t2 = _perf()
        reported = self.report()
        t3 = _perf()
        phases = {"arm": round((t1 - t0) * 1e6, 1), "fire": round((t2 - t1) * 1e6, 1),
                  "report": round((t3 - t2) * 1e6, 1)}
        return {**armed, **fired, **reported, "phases_us": phases}

    def arm(self, set_index: int, clock: str, null_cycles: int) -> dict:
        """Ready one timed call: the set's content into a physical copy, outputs poisoned (and, for the GPU
        clock when `null_cycles` is given, the null tail measured behind a spin of that many cycles). Each clock
        takes the physical copies in turn, so that every copy's placement weighs the same in each clock's
        median."""
        content, cold = self._content(set_index)
        counts = self.bench["calls"]
        calls = counts.get(clock, 0)
        counts[clock] = calls + 1
        copy = calls % len(self.bench["physical"])
        data = self.bench["physical"][copy]
        # The floating output slots are poisoned right after: their copy would be a third of vecadd's traffic.
        tensors.copy_into(data, content, skip=self.bench["poisoned"])
        tensors.poison(data, self.bench["slots"])
        self.bench["armed"] = data
        null = round(self.null_tail(null_cycles), 3) if clock == "gpu" and null_cycles else None
        return {"cold": cold, "null_tail_us": null, "copy": copy}

    def fire(self, clock: str, spin_cycles: int) -> dict:
        """The timed call itself, on the armed inputs (the second step of `timed`), behind a spin of
        `spin_cycles` on the GPU clock."""
        data = self.bench["armed"]
        if clock == "gpu":
            measured, tail, host = self._gpu_time(data, spin_cycles)
        elif clock == "call":
            (measured, host), tail = self._call_time(data), 0.0
        else:
            (measured, host), tail = self._host_time(data), 0.0
        return {"us": round(measured, 3), "tail_us": round(tail, 3), "host_us": round(host, 2)}

    def report(self) -> dict:
        """What the call returned, as projections the parent checks against the oracle's (the last step of
        `timed`)."""
        output = self.bench.pop("output")
        problem = tensors.plain_tensors(output)
        projections = None if problem else self.bench["projector"].project(output)
        if self.bench["shared"]:  # the other runner uses this slot next: leave it no answer to find
            tensors.scrub(self.bench["armed"], self.bench["slots"])
        tensors.sync()
        return {"problem": problem, "projections": projections}

    def null_tail(self, spin_cycles: int) -> float:
        """The tail of a call that leaves no work behind, the tail a kernel's is compared with: behind the same
        spin as the timed call, so that the host waits in the device-wide sync when the GPU goes idle, as it does
        after a timed call (measured with the GPU idle instead, the sync's own cost made the tail 8-10 us longer
        than a real call's on an H100, and a kernel that left its work on a side stream was timed too fast)."""
        _, stream_end, end = self.events
        self._sync()
        self._sleep(int(spin_cycles))
        self._record(stream_end)
        self._sync()
        self._record(end)
        end.synchronize()
        return self._elapsed(stream_end, end) * 1e3

    def prepare_set(self, set_index: int) -> dict:
        """Generate input set `set_index` before the benchmark's warm-up (sent to every runner at once)."""
        self.bench["sets"][set_index] = self._generate(self.bench["seeds"][1 + set_index])
        return {"set": set_index}

    def _content(self, set_index: int):
        """The set's content, and whether this is the kernel's first timed call on it (its answer unseen)."""
        timed = self.bench["timed"]
        cold = set_index not in timed
        timed.add(set_index)
        return self.bench["sets"][set_index], cold

    def _generate(self, seed: int):
        spec = dict(self.bench["spec"])
        if "seed" in spec:
            spec["seed"] = seed
        data = self.generators[self.bench["distribution"]](**spec)
        tensors.sync()
        return data

    def _spin_rate(self) -> float:
        """Cycles of `torch.cuda._sleep` per microsecond at the GPU's present clock (the median of three)."""
        start, _, end = self.events
        rates = []
        for _ in range(3):
            self._sync()
            self._record(start)
            self._sleep(200_000)
            self._record(end)
            end.synchronize()
            rates.append(200_000 / (self._elapsed(start, end) * 1e3))
        return sorted(rates)[1]

    def _gpu_time(self, data, spin_cycles: int) -> tuple[float, float, float]:
        """GPU time with the host's launch hidden: flush L2, sync, spin the GPU for longer than the launch
        takes, then events around the call; the device-wide sync after `stream_end` catches side-stream work."""
        start, stream_end, end = self.events
        self._flush()
        self._sync()
        self._sleep(int(spin_cycles))
        self._record(start)
        host_start = _perf()
        self.bench["output"] = self.kernel(data)
        host = (_perf() - host_start) * 1e6
        self._record(stream_end)
        self._sync()
        self._record(end)
        end.synchronize()
        return self._elapsed(start, stream_end) * 1e3, self._elapsed(stream_end, end) * 1e3, host

    def _flush(self) -> None:
        """Empty L2 by writing twice its size: in the shared slots' allocation when there is one, so that both
        kernels start from the same dirty lines at the same physical addresses."""
        self.bench.get("flush", self.flush).zero_()

    def _call_time(self, data) -> tuple[float, float]:
        """The contest's clock: the GPU idle at `start`, events around the whole call, launch included, and the
        device-wide sync before `end` so that side-stream work counts."""
        if not self.cuda:
            return self._host_time(data)
        start, _, end = self.events
        self._flush()
        self._sync()
        self._record(start)
        host_start = _perf()
        self.bench["output"] = self.kernel(data)
        host = (_perf() - host_start) * 1e6
        self._sync()
        self._record(end)
        end.synchronize()
        return self._elapsed(start, end) * 1e3, host

    def _host_time(self, data) -> tuple[float, float]:
        """CPU targets: the host's clock around the call."""
        start = _perf()
        self.bench["output"] = self.kernel(data)
        seconds = (_perf() - start) * 1e6
        return seconds, seconds


def _generator(reference, spec: str):
    """A distribution's input generator: the reference's generate_input, or `file.py:function` in the workspace."""
    if not spec:
        return reference.generate_input
    file, _, function = spec.partition(":")
    path = Path(file)
    module_spec = importlib.util.spec_from_file_location(f"judge_inputs_{path.stem}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, function)


def flush_bytes() -> int:
    """The size of the buffer written before every timed call to empty L2: twice the L2, at least 8 MiB."""
    import torch

    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
    return max(2 * l2, 8 << 20)


def spin_for(host_us: list[float]) -> float:
    """A spin long enough to hide the launch: SPIN_FACTOR times the typical one, with margin; a rare slower
    launch shows in its own sample, which the median leaves out."""
    ordered = sorted(host_us)
    typical = ordered[len(ordered) // 2] if ordered else 0.0
    return SPIN_MARGIN_US + SPIN_FACTOR * typical


def spin_cycles(spin_us: float, cycles_per_us: float) -> dict[str, int]:
    """The GPU clock's spins in cycles, the same numbers for every runner of a benchmark: `spin` before the
    timed call, `null` before a null tail. Each runner sizing its spin from its own rate (measured when its CUDA
    context was made, sometimes with the GPU's clocks still low) gave spins 40-120 us apart on an H100, and
    identical kernels measured 0.2-0.6% apart with them."""
    return {"spin": int(spin_us * cycles_per_us), "null": int(max(spin_us, NULL_SPIN_US) * cycles_per_us)}

