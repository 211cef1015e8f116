"""The oracle: the trusted side of every check. It runs in a process where no candidate code was ever
imported, from a directory no candidate can write, and it alone says what the right answer is.

It makes every input a kernel is called on (the task's generate_input from secret seeds), keeps them, and
writes one set into the memory a runner maps only when that set's call is next (judge.boundary.staging); it runs the
reference, reads each output back from the runner's outbox, compares it in full (correctness) or by projections
(timing), and gives the projections of the right answers.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from . import cuda_ipc, exchange, staging, tensors
from ..machine import facts_here

# Shown mismatches when the target sets no tolerance (its check_implementation then decides alone).
FALLBACK_RTOL = FALLBACK_ATOL = 1e-3
# The oracle keeps up to this much of torch's cached GPU memory between cases (judge.boundary.oracle._release).
RELEASE_ABOVE_BYTES = 4 << 30


class Oracle:
    """The reference of one target, loaded from a pristine copy of its files."""

    def __init__(self, directory: str, generators: dict[str, str], rtol: float | None, atol: float | None):
        sys.path[:] = [directory] + [p for p in sys.path if p not in ("", directory)]
        os.chdir(directory)
        import reference

        self.reference = reference
        self.generators = {name: _generator(reference, spec) for name, spec in generators.items()}
        self.checker = getattr(reference, "check_implementation", None)
        self.rtol, self.atol = rtol, atol
        self.files: dict[int, staging.RunnerFiles] = {}
        self.areas: dict[str, staging.Area] = {}
        self.cases: dict[str, tuple] = {}  # key -> (data, expected) of a correctness case
        self.expected: dict[str, list] = {}  # benchmark key -> each set's projection bounds
        self.projectors: dict[str, tensors.Projector] = {}
        self.device_outbox: cuda_ipc.Exported | None = None
        self.host_outbox = staging.OUTBOX_MIN_BYTES
        self.retired: list[cuda_ipc.Exported] = []

    @property
    def tolerance(self) -> tuple[float, float]:
        """The tolerance outputs are held to; without one, check_implementation decides and this is for display."""
        if self.rtol is not None or self.atol is not None:
            return self.rtol or 0.0, self.atol or 0.0
        return (FALLBACK_RTOL, FALLBACK_ATOL) if self.checker is not None else (1e-5, 1e-8)

    def _generate(self, spec: dict, distribution: str):
        data = self.generators[distribution](**spec)
        tensors.sync()
        return data

    def _reference(self, spec: dict, distribution: str):
        data = self._generate(spec, distribution)
        after = tensors.clone_data(data)
        expected = self.reference.ref_kernel(after)
        tensors.sync()
        return data, after, expected

    def plan(self, spec: dict, distribution: str) -> dict:
        """The output slots of a spec (paths of the inputs the reference writes), its inputs' bytes and its
        outputs' shapes."""
        import torch

        data, after, expected = self._reference(spec, distribution)
        return {"slots": tensors.output_slots(data, after, expected),
                "shapes": [list(t.shape) for _, t in tensors.leaves(expected) if isinstance(t, torch.Tensor)],
                "input_bytes": sum(t.numel() * t.element_size() for _, t in tensors.leaves(data)
                                   if isinstance(t, torch.Tensor))}

    # ---- runners' files and the outboxes --------------------------------------------------------------

    def attach(self, runner: int, directory: str, owner: int | None = None) -> dict:
        """The host files of a new runner, in the directory judge made for it, owned by the runner's user."""
        self.detach(runner)  # a pid used again: the earlier runner with it has ended
        self.files[runner] = staging.open_files(directory, owner)
        return {"inbox": str(self.files[runner].inbox.path), "outbox": str(self.files[runner].outbox.path)}

    def detach(self, runner: int) -> None:
        files = self.files.pop(runner, None)
        if files is not None:
            files.close()

    def collect(self) -> None:
        """Free the device memory retired since the last call: the parent calls this once every runner that
        mapped it has been closed (memory another process still maps must not be freed)."""
        for exported in self.retired:
            exported.free()
        self.retired = []
        _release()

    def _outbox(self, expected) -> dict:
        """The outboxes' sizes for outputs like `expected`, the shared device outbox grown to fit."""
        import torch

        need = staging.outbox_bytes(expected)
        self.host_outbox = max(self.host_outbox, need)
        outputs = [t for _, t in tensors.leaves(expected) if isinstance(t, torch.Tensor)]
        if torch.cuda.is_available() and any(t.is_cuda for t in outputs):
            if self.device_outbox is None or self.device_outbox.nbytes < need:
                if self.device_outbox is not None:
                    self.retired.append(self.device_outbox)
                self.device_outbox = staging.exported_zeroed(need)
        device = None
        if self.device_outbox is not None:
            device = {"handle": self.device_outbox.handle, "bytes": self.device_outbox.nbytes}
        return {"device": device, "host": self.host_outbox}

    # ---- correctness ----------------------------------------------------------------------------------

    def case(self, key: str, spec: dict, distribution: str, runner: int) -> dict:
        """Make a correctness case's inputs and answer, lay them out for `runner`; its `build` plan."""
        data, after, expected = self._reference(spec, distribution)
        slots = tensors.output_slots(data, after, expected)
        self._retire(key)
        area = staging.lay_out(data, slots, 1)
        area.sets["case"] = staging.tensors_of(data)
        self.areas[key] = area
        self.cases[key] = (data, expected)
        paths = [path for path, leaf in tensors.leaves(data) if _is_tensor(leaf)]
        return {"plan": staging.plan_for(area, self.files[runner], self._outbox(expected)),
                "poisoned": [paths[i] for i in area.poison]}

    def stage(self, key: str, name: Any, copies: list[int], runners: list[int], flush: bool = False) -> dict:
        """Write set `name` of `key` into each of `copies` for `runners` (judge.boundary.staging.stage)."""
        area = self.areas[key]
        for copy in copies:
            staging.stage(area, name, copy, [self.files[r] for r in runners], flush)
        return {"staged": len(copies)}

    def verify_case(self, key: str, runner: int, leaves: Any) -> dict:
        """Compare the output `runner` handed over for case `key` with the reference, ask check_implementation
        too, and drop the case (its device part wiped first)."""
        data, expected = self.cases.pop(key)
        area = self.areas[key]
        try:
            got = staging.received(leaves, self.files.get(runner), self.device_outbox)
        except exchange.ExchangeError as error:
            return _fail({"passed": True, "reason": ""}, str(error))
        finally:
            staging.wipe(area)
            self._retire(key)
        result = compare_outputs(got, expected, data, self.tolerance, self.rtol, self.atol, self.checker)
        del data, expected, got
        _release()
        return result

    # ---- timing -----------------------------------------------------------------------------------------

    def benchmark(self, key: str, spec: dict, distribution: str, seeds: list[int], projection_seed: int,
                  copies: int, runners: list[int], shift: int = 0, flush: bool = False) -> dict:
        """A benchmark's timing sets for one comparison: the warm-up set (seeds[0], never timed) and a set per
        later seed, kept here; their answers' projections; the area `copies` copies wide. Returns each runner's
        `build` plan."""
        started = time.perf_counter()
        sets = []
        for seed in seeds:
            sets.append(self._generate(_with_seed(spec, seed), distribution))
        _, after, expected = self._reference(_with_seed(spec, seeds[0]), distribution)
        slots = tensors.output_slots(sets[0], after, expected)
        self._retire(key)
        flush_bytes = 0
        if flush:
            from .runner import flush_bytes as l2_flush_bytes

            flush_bytes = l2_flush_bytes()
        area = staging.lay_out(sets[0], slots, copies, shift=shift, flush_bytes=flush_bytes)
        area.sets = {"warm": staging.tensors_of(sets[0])}
        area.sets.update({n: staging.tensors_of(data) for n, data in enumerate(sets[1:])})
        self.areas[key] = area
        projector = self.projectors[key] = tensors.Projector(projection_seed)
        rtol, atol = self.tolerance
        bounds = []
        for data in sets[1:]:
            answer = self.reference.ref_kernel(tensors.clone_data(data))
            bounds.append(projector.bounds(answer, rtol, atol))
        self.expected[key] = bounds
        outbox = self._outbox(expected)
        plans = {str(r): staging.plan_for(area, self.files[r], outbox) for r in runners}
        return {"plans": plans, "sets": len(sets) - 1, "copies": copies,
                "seconds": round(time.perf_counter() - started, 3)}

    def turn(self, key: str, verify: dict | None = None, stage: dict | None = None) -> dict:
        """One step between two timed calls: check the output of the call that just ran (`verify`: runner, set,
        copy and the leaves it reported), wipe the copy it used, then write the next call's set (`stage`)."""
        out: dict[str, Any] = {"problem": None}
        area = self.areas[key]
        if verify is not None:
            out["problem"] = self._check_timed(key, verify)
            if area.device is not None:
                staging.wipe(area)
        if stage is not None:
            self.stage(key, stage["set"], [stage["copy"]], stage["runners"], stage.get("flush", False))
        return out

    def _check_timed(self, key: str, verify: dict) -> str | None:
        try:
            got = staging.received(verify["leaves"], self.files.get(verify["runner"]), self.device_outbox)
        except exchange.ExchangeError as error:
            return str(error)
        problem = tensors.plain_tensors(got)
        if problem:
            return problem
        return tensors.projection_failure(self.projectors[key].project(got), self.expected[key][verify["set"]])

    def release(self, key: str) -> None:
        """Forget a benchmark's sets; its device memory is freed at the next `collect`."""
        self._retire(key)
        self.expected.pop(key, None)
        self.projectors.pop(key, None)

    def _retire(self, key: str) -> None:
        area = self.areas.pop(key, None)
        if area is not None and area.device is not None:
            self.retired.append(area.device)

    def facts(self) -> dict | None:
        """The GPU and its clocks as this trusted process sees them (None on a CPU)."""
        facts = facts_here()
        return facts.to_dict() if facts else None


def compare_outputs(got: list, expected, data, tolerance: tuple[float, float], rtol, atol, checker) -> dict:
    """A correctness verdict: each output against the reference's in float64, then check_implementation on the
    pristine inputs."""
    import torch

    result: dict[str, Any] = {"passed": True, "reason": ""}
    want = tensors.leaves(expected)
    if len(got) != len(want):
        return _fail(result, f"returned {len(got)} tensors, the reference returns {len(want)}")
    rtol_, atol_ = tolerance
    strict = rtol is not None or atol is not None or checker is None
    device = next((t.device for _, t in want if isinstance(t, torch.Tensor)), None)
    comparisons, outputs = [], []
    for tensor, (path, reference_value) in zip(got, want):
        if not isinstance(reference_value, torch.Tensor):
            return _fail(result, f"output{path} is not a tensor")
        tensor = tensor.to(device) if device is not None else tensor
        outputs.append(tensor)
        if tuple(tensor.shape) != tuple(reference_value.shape):
            if strict:
                return _fail(result, f"output{path} has shape {tuple(tensor.shape)}, "
                                     f"expected {tuple(reference_value.shape)}")
            # GPU MODE's checkers compare with broadcasting (a sum returned as shape (1,) against ()): without a
            # tolerance of judge's own, the problem's checker decides.
            continue
        comparisons.append(tensors.compare(path, tensor, reference_value, rtol_, atol_))
    result["outputs"] = comparisons
    reasons = _mismatches(comparisons, strict)
    if checker is not None:
        # check_implementation gets pristine inputs: GPU MODE's own checkers recompute the reference from them.
        shaped = outputs[0] if len(want) == 1 and want[0][0] == "" else tensors.rebuild(expected, outputs)
        ok, message = verdict(checker(data, shaped))
        result["check_implementation"] = {"passed": ok, "message": message[:2000]}
        if not ok:
            reasons.append(f"check_implementation: {message.splitlines()[0][:300] if message else 'failed'}")
    return _fail(result, "; ".join(reasons)) if reasons else result


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


def _is_tensor(value) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _with_seed(spec: dict, seed: int) -> dict:
    return {**spec, "seed": seed} if "seed" in spec else dict(spec)


def _generator(reference, spec: str):
    """A distribution's input generator: the reference's generate_input, or `file.py:function` in its directory."""
    import importlib.util
    from pathlib import Path

    if not spec:
        return reference.generate_input
    file, _, function = spec.partition(":")
    path = Path(file)
    module_spec = importlib.util.spec_from_file_location(f"judge_inputs_{path.stem}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, function)


def _release() -> None:
    """Give cached GPU memory back once this process holds more than RELEASE_ABOVE_BYTES: the runners beside it
    need the memory. Below that the cache is kept for the next case: emptying it after every verify took 4-5 ms
    of the 13-16 ms a verify took on an H100 (vecadd, 2026-11-25)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.memory_reserved() > RELEASE_ABOVE_BYTES:
        torch.cuda.empty_cache()


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


def oracle_dir(target, dest) -> Any:
    """A pristine copy of the task's files (the base kernel included, for problems whose reference imports
    from it), written by judge for the oracle alone."""
    target.assemble(dest, target.kernel_source())
    return dest
