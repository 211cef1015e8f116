"""The oracle: the trusted side of every check. It runs in a process where no candidate code was ever
imported, from a directory no candidate can write, and it alone says what the right answer is.

It regenerates each case's inputs from the case's seed (the task's generate_input is deterministic for a
seed), runs the reference, finds the output slots the runner must poison, compares the outputs a runner
saved, and gives the projections that every timed call's output is checked against.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path
from typing import Any

from . import tensors

# Shown mismatches when the target sets no tolerance (its check_implementation then decides alone).
FALLBACK_RTOL = FALLBACK_ATOL = 1e-3
MAX_DUMP_BYTES = 16 << 30
# The oracle keeps up to this much of torch's cached GPU memory between cases (judge.oracle._release).
RELEASE_ABOVE_BYTES = 4 << 30


class Oracle:
    """The reference of one target, loaded from a pristine copy of its files."""

    def __init__(self, directory: str, generators: dict[str, str], rtol: float | None, atol: float | None):
        from .runner import _generator

        sys.path[:] = [directory] + [p for p in sys.path if p not in ("", directory)]
        os.chdir(directory)
        import reference

        self.reference = reference
        self.generators = {name: _generator(reference, spec) for name, spec in generators.items()}
        self.checker = getattr(reference, "check_implementation", None)
        self.rtol, self.atol = rtol, atol
        self.expected_cache: dict[str, Any] = {}
        self._shared: list = []  # exported allocations of timing slots, newest last
        self._outbox = None  # the exported allocation runners hand correctness outputs over in

    @property
    def tolerance(self) -> tuple[float, float]:
        """The tolerance outputs are held to; without one, check_implementation decides and this is for display."""
        if self.rtol is not None or self.atol is not None:
            return self.rtol or 0.0, self.atol or 0.0
        return (FALLBACK_RTOL, FALLBACK_ATOL) if self.checker is not None else (1e-5, 1e-8)

    def _reference(self, spec: dict, distribution: str):
        data = self.generators[distribution](**spec)
        tensors.sync()
        after = tensors.clone_data(data)
        expected = self.reference.ref_kernel(after)
        tensors.sync()
        return data, after, expected

    def plan(self, spec: dict, distribution: str) -> dict:
        """The output slots of a spec (paths of the inputs the reference writes) and its outputs' shapes."""
        import torch

        data, after, expected = self._reference(spec, distribution)
        return {"slots": tensors.output_slots(data, after, expected),
                "shapes": [list(t.shape) for _, t in tensors.leaves(expected) if isinstance(t, torch.Tensor)],
                "input_bytes": sum(t.numel() * t.element_size() for _, t in tensors.leaves(data)
                                   if isinstance(t, torch.Tensor)),
                "outbox": _outbox_layouts(expected)}

    def outbox(self, nbytes: int, clear: bool = False) -> dict:
        """An allocation of at least `nbytes` that runners map to hand their correctness outputs over in device
        memory (a 64 MB output took 33 ms to save to a file and 13 ms to load on an H100), zeroed: memory the
        driver hands out again can hold what this process freed, the reference's answers among it. With `clear`
        an existing one is zeroed whole: a runner of an earlier candidate kept the handle and could have written
        an answer there after its own cases."""
        import torch

        from . import cuda_ipc

        if not torch.cuda.is_available():
            return {"error": "no GPU"}
        if self._outbox is None or self._outbox.nbytes < nbytes:
            if self._outbox is not None:
                self._outbox.free()
                self._outbox = None
            try:
                self._outbox = cuda_ipc.Exported(nbytes)
            except cuda_ipc.IpcError as error:
                return {"error": str(error)}
            clear = True
        if clear:
            self._scrub_outbox()
        return {"handle": self._outbox.handle, "bytes": self._outbox.nbytes}

    def _scrub_outbox(self) -> None:
        """Zero the whole outbox."""
        from . import cuda_ipc

        nbytes = self._outbox.nbytes
        cuda_ipc.view(self._outbox.pointer, {"offset": 0, "dtype": "uint8", "shape": [nbytes], "stride": [1]}).zero_()
        tensors.sync()

    def _received(self, layouts: list[dict]) -> list:
        """A runner's outputs from the outbox, copied out at once; the whole outbox is zeroed after, so that the
        next runner to map it finds no answer there."""
        from . import cuda_ipc

        if self._outbox is None:
            raise ValueError("the kernel's process said it handed its output over, and nothing was asked for")
        got = [cuda_ipc.view(self._outbox.pointer, layout).clone() for layout in layouts]
        self._scrub_outbox()
        return got

    def verify(self, spec: dict, distribution: str, dump: str, outbox: list[dict] | None = None) -> dict:
        """Compare what a runner saved for this case (in `dump`, or in the outbox at `outbox`'s layouts) with the
        reference, and ask check_implementation too."""
        import torch

        lap = _Laps()
        data, _, expected = self._reference(spec, distribution)
        lap("reference")
        result: dict[str, Any] = {"passed": True, "reason": ""}
        try:
            got = self._received(outbox) if outbox is not None else _load_dump(dump)
        except ValueError as error:
            return _fail(result, str(error))
        lap("load")
        want = tensors.leaves(expected)
        if len(got) != len(want):
            return _fail(result, f"returned {len(got)} tensors, the reference returns {len(want)}")
        rtol, atol = self.tolerance
        strict = self.rtol is not None or self.atol is not None or self.checker is None
        device = next((t.device for _, t in want if isinstance(t, torch.Tensor)), None)
        comparisons, outputs = [], []
        for tensor, (path, reference_value) in zip(got, want):
            if not isinstance(tensor, torch.Tensor) or not isinstance(reference_value, torch.Tensor):
                return _fail(result, f"output{path} is not a tensor")
            tensor = tensor.to(device) if device is not None else tensor
            outputs.append(tensor)
            if tuple(tensor.shape) != tuple(reference_value.shape):
                if strict:
                    return _fail(result, f"output{path} has shape {tuple(tensor.shape)}, "
                                         f"expected {tuple(reference_value.shape)}")
                # GPU MODE's checkers compare with broadcasting (a sum returned as shape (1,) against ()):
                # without a tolerance of judge's own, the problem's checker decides.
                continue
            comparisons.append(tensors.compare(path, tensor, reference_value, rtol, atol))
        result["outputs"] = comparisons
        lap("compare")
        reasons = _mismatches(comparisons, strict)
        if self.checker is not None:
            # check_implementation gets pristine inputs: GPU MODE's own checkers recompute the reference from them.
            shaped = outputs[0] if len(want) == 1 and want[0][0] == "" else tensors.rebuild(expected, outputs)
            ok, message = verdict(self.checker(data, shaped))
            result["check_implementation"] = {"passed": ok, "message": message[:2000]}
            if not ok:
                reasons.append(f"check_implementation: {message.splitlines()[0][:300] if message else 'failed'}")
        lap("checker")
        del data, expected, outputs, got
        _release()
        lap("release")
        result["phases_us"] = lap.phases
        return _fail(result, "; ".join(reasons)) if reasons else result

    def facts(self) -> dict | None:
        """The GPU and its clocks as this trusted process sees them (None on a CPU)."""
        from .devices import facts_here

        facts = facts_here()
        return facts.to_dict() if facts else None

    def share(self, spec: dict, distribution: str, copies: int) -> dict:
        """Slots for a benchmark's timed calls, `copies` input sets' worth of device memory in one allocation of
        its own that base and candidate runners both map: both kernels then run on the same physical memory.
        The two newest allocations are kept (runners move to a new one before the next is asked for)."""
        import torch

        from . import cuda_ipc
        from .runner import flush_bytes

        if not torch.cuda.is_available():
            return {"error": "no GPU"}
        data = tensors.clone_data(self.generators[distribution](**spec))
        leaves = [t for _, t in tensors.leaves(data) if isinstance(t, torch.Tensor) and t.is_cuda]
        slots, nbytes = cuda_ipc.layouts(leaves, copies)
        # the L2 flush too: where its dirty lines are written back to moved the kernels after it
        flush = {"offset": nbytes, "dtype": "int32", "shape": [flush_bytes() // 4], "stride": [1]}
        nbytes += flush_bytes()
        del data, leaves
        try:
            exported = cuda_ipc.Exported(nbytes)
        except cuda_ipc.IpcError as error:
            return {"error": str(error)}
        self._shared.append(exported)
        while len(self._shared) > 2:
            self._shared.pop(0).free()
        return {"handle": exported.handle, "slots": slots, "flush": flush, "bytes": nbytes}

    def expect(self, spec: dict, distribution: str, seeds: list[int], projection_seed: int) -> list[list[dict]]:
        """For each timing input set (seed), the reference output's projections and their honest bounds."""
        projector = tensors.Projector(projection_seed)
        rtol, atol = self.tolerance
        out = []
        for seed in seeds:
            case = dict(spec)
            if "seed" in case:
                case["seed"] = seed
            _, _, expected = self._reference(case, distribution)
            out.append(projector.bounds(expected, rtol, atol))
            del expected
        _release()
        return out


class _Laps:
    """Microseconds between calls, by name: this process's own account of where a verify's time goes, which
    judge.worker tallies for judge's benchmarks (the verdict never uses it)."""

    def __init__(self):
        self.last = time.perf_counter()
        self.phases: dict[str, float] = {}

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.phases[name] = round((now - self.last) * 1e6, 1)
        self.last = now


def _mismatches(comparisons: list[dict], strict: bool) -> list[str]:
    """A reason per output with NaN/Inf, and per output out of tolerance where judge's tolerance decides."""
    reasons = []
    for comp in comparisons:
        if comp["nonfinite"]:
            reasons.append(f"output{comp['path']} has {comp['nonfinite']} NaN/Inf of {comp['elements']} elements")
        elif comp["mismatched"] and strict:
            reasons.append(
                f"output{comp['path']}: {comp['mismatched']} of {comp['elements']} elements differ "
                f"(max abs err {comp['max_abs_err']:.3g}, max rel err {comp['max_rel_err']:.3g})")
    return reasons


def _outbox_layouts(expected) -> dict | None:
    """Where each output of the reference goes in the outbox (contiguous, each on its own boundary) and the bytes
    they take, or None where an output is not a CUDA tensor (the runner then saves its outputs to a file)."""
    import torch

    from . import cuda_ipc

    outputs = [t for _, t in tensors.leaves(expected)]
    if not outputs or not all(isinstance(t, torch.Tensor) and t.is_cuda for t in outputs):
        return None
    shapes = [torch.empty(t.shape, dtype=t.dtype, device="meta") for t in outputs]
    slots, nbytes = cuda_ipc.layouts(shapes, 1)
    return {"layouts": slots[0], "bytes": nbytes}


def _release() -> None:
    """Give cached GPU memory back once this process holds more than RELEASE_ABOVE_BYTES: the runners beside it
    need the memory for their input sets. Below that the cache is kept for the next case: emptying it after every
    verify took 4-5 ms of the 13-16 ms a verify took on an H100 (vecadd, 2026-11-25)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.memory_reserved() > RELEASE_ABOVE_BYTES:
        torch.cuda.empty_cache()


def _load_dump(path: str) -> list:
    """A runner's saved outputs: a regular file (not a link the candidate planted) of plain tensors only."""
    import torch

    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise ValueError("the kernel's process saved no output") from None
    if not stat.S_ISREG(info.st_mode):
        raise ValueError("the saved output is not a regular file (the kernel's process replaced it)")
    if info.st_size > MAX_DUMP_BYTES:
        raise ValueError(f"the saved output is {info.st_size} bytes, over the {MAX_DUMP_BYTES} limit")
    try:
        value = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as error:  # weights_only refuses anything but tensors and plain containers
        raise ValueError(f"the saved output cannot be read safely: {type(error).__name__}") from None
    if not isinstance(value, list):
        raise ValueError("the saved output is not what the runner writes (the kernel's process replaced it)")
    return value


def _fail(result: dict, reason: str) -> dict:
    result["passed"] = False
    result["reason"] = reason
    return result


def verdict(value) -> tuple[bool, str]:
    """GPU MODE's checkers return (ok, message), a message that is empty when ok, or a bool."""
    if isinstance(value, tuple) and len(value) == 2:
        return bool(value[0]), str(value[1] or "")
    if isinstance(value, str):
        return value == "", value
    if value is None:
        return True, ""
    return bool(value), ""


def oracle_dir(target, dest: Path) -> Path:
    """A pristine copy of the task's files (the base kernel included, for problems whose reference imports
    from it), written by judge for the oracle alone."""
    target.assemble(dest, target.kernel_source())
    return dest
