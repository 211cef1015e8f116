"""Correctness inputs, and their answers, that the oracle keeps for the rest of the round: on the GPU they were made
on until the round's timing plans its memory, else in host memory.

Every evaluation of a round is checked on the round's own secret cases (judge.stages.seeds), so an input made for
the base's check is the same input the A/A control and every candidate are checked on. Making one can cost far
more than the check: trimul's Cauchy inputs are drawn on the CPU one number at a time, 16-32 s for one of 1.5-3 GiB
on an H200 (2026-11-28), and its 43 cases took 310 of a round's 430 s in the oracle. An input is kept where making
it took more than PAYS times what copying it out took (copying it back in costs about the same), while everything
kept stays within SHARE of the host memory that was available when the oracle started. Each use gets a copy of its
own, on the device the input was made on: no two evaluations share a tensor. A case's answer (the reference run on
a copy of its input, and the output slots read off that run) is kept the same way: each evaluation's check then
runs the problem's checker without judge's own reference run before it.

Only inputs that a copy reproduces are kept: nested tuples (named ones too), lists, dicts and input objects
(judge.boundary.objects, made again for each use) of plain, contiguous tensors with storages of their own, and
other values (numbers, strings, a config dict's entries) as they are.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

from . import objects
from .tensors import same_tuple, sync

# What keeping may take of the host memory available when the oracle starts.
SHARE = 0.25
# Making an input must take this many times its copy out (about its copy back in, for each later use).
PAYS = 2.0
# Inputs made faster than this are made again: keeping them would save nothing a round would notice.
MIN_MAKING_S = 0.05
# A copy out of at least this many bytes sets the rate later copies are judged by (a small one is mostly latency).
MEASURED_BYTES = 16 << 20
# What keeping may take of a GPU's memory until the round's timing plans the device (leave_device): an input or answer
# kept there is copied for each use at the device's own speed, where a copy through pageable host memory costs about
# what making it again does. cholesky_py's n=32768 input (4 GiB, 1.7 s to make) and its answer were made again for
# every evaluation's check (H200, 2026-12-01), and its checks held at most 37 GiB of the 140 GiB with the spares.
DEVICE_SHARE = 0.125


class KeptInputs:
    """The inputs kept by (distribution, spec): on the GPU they were made on, within `device_share` of its memory,
    until leave_device; else in host memory within `budget_bytes`."""

    def __init__(self, budget_bytes: int, device_share: float = 0.0):
        self.budget_bytes = max(0, int(budget_bytes))
        self.device_share = device_share
        self.device_budget: int | None = None  # bytes, read off the GPU at the first input made on one
        self.kept: dict[str, Any] = {}  # key -> the kept copy
        self.bytes = 0  # of those in host memory
        self.on_device: dict[str, int] = {}  # key -> the bytes of a copy kept on its GPU
        self.unpaid: set[str] = set()  # keys whose copy out cost more than keeping would save: never offered again
        self.bytes_per_s = 0.0  # the last copy out's rate, by which a copy that would not pay is not even tried

    @staticmethod
    def key(spec: dict, distribution: str) -> str:
        return json.dumps([distribution, spec], sort_keys=True, default=repr)

    def get(self, key: str) -> Any | None:
        """A fresh copy of a kept input on the device it was made on, or None where none is kept."""
        held = self.kept.get(key)
        if held is None:
            return None
        data = _copied(held, _to_origin, _Held)
        sync()
        return data

    def made(self, key: str, make: Callable[[], Any], on_kept: Callable[[float], None] | None = None) -> Any:
        """What `make()` makes for `key`: a fresh copy of the one kept, else made now and offered (`on_kept` told
        the seconds making took where it is kept)."""
        kept = self.get(key)
        if kept is not None:
            return kept
        started = time.perf_counter()
        made = make()
        making_s = time.perf_counter() - started
        if self.offer(key, made, making_s) and on_kept is not None:
            on_kept(making_s)
        return made

    def offer(self, key: str, data: Any, making_s: float) -> bool:
        """Keep `data` (which took `making_s` to make) where it pays and fits; whether it was kept. Made on a GPU, it
        is kept there while the device's share allows (DEVICE_SHARE); else in host memory, where a copy out that
        does not pay is made once per key at most, and not at all where the last copy's rate says it would not:
        trimul's answers, 1.5-3 GiB computed in 0.05 s, were copied out and dropped again for every evaluation's
        check, 18-22 s of each (H200, 2026-11-29)."""
        if key in self.kept or key in self.unpaid or making_s < MIN_MAKING_S:
            return False
        leaves = _tensors(data)
        if leaves is None:
            return False
        nbytes = sum(t.numel() * t.element_size() for t in leaves)
        import torch

        if _on_gpu(leaves) and sum(self.on_device.values()) + nbytes <= self._device_budget():
            self.kept[key] = _copied(data, lambda tensor: _Held(tensor, on_device=True), torch.Tensor)
            self.on_device[key] = nbytes
            sync()
            return True
        if self.bytes + nbytes > self.budget_bytes:
            return False
        if self.bytes_per_s > 0 and making_s <= PAYS * nbytes / self.bytes_per_s:
            self.unpaid.add(key)
            return False
        started = time.perf_counter()
        host = _copied(data, _Held, torch.Tensor)
        sync()
        copy_s = time.perf_counter() - started
        if nbytes >= MEASURED_BYTES:
            self.bytes_per_s = nbytes / max(copy_s, 1e-9)
        if making_s <= PAYS * copy_s:
            self.unpaid.add(key)
            return False
        self.kept[key] = host
        self.bytes += nbytes
        return True

    def _device_budget(self) -> int:
        if self.device_budget is None:
            self.device_budget = int(self.device_share * _gpu_total()) if self.device_share > 0 else 0
        return self.device_budget

    def leave_device(self) -> int:
        """Give back every copy kept on a GPU and keep none there from now on: the round's timing plans the device's
        memory without them (judge.stages.budget). The bytes given back."""
        freed = sum(self.on_device.values())
        for key in self.on_device:
            del self.kept[key]
        self.on_device, self.device_budget = {}, 0
        return freed


def host_budget(share: float = SHARE) -> int:
    """SHARE of the host memory available now (the cgroup's limit where it is lower)."""
    from ..machine import host_memory

    try:
        return int(share * host_memory()["free"])
    except (OSError, KeyError, ValueError):
        return 0


def _tensors(data: Any) -> list | None:
    """The tensors of `data` where a copy reproduces it, else None: a tensor subclass, a view that is not
    contiguous, or two tensors that share a storage (a copy would part them) is made again for every use."""
    import torch

    found, storages = [], set()

    def walk(obj) -> bool:
        if isinstance(obj, (tuple, list)):
            return all(walk(x) for x in obj)
        if isinstance(obj, dict):
            return all(walk(v) for v in obj.values())
        named = objects.parts(obj)
        if named is not None:
            return all(walk(value) for _, _, value in named)
        if isinstance(obj, torch.Tensor):
            if type(obj) is not torch.Tensor or not obj.is_contiguous() or obj.is_sparse:
                return False
            storage = obj.untyped_storage().data_ptr()
            if obj.numel() and storage in storages:
                return False
            storages.add(storage)
            found.append(obj)
        return True

    try:
        return found if walk(data) else None
    finally:
        del walk  # a recursive closure is a cycle that would hold `found` until a collection (exchange._NO_CYCLE)


def _copied(obj: Any, move, leaf: type) -> Any:
    """`obj` rebuilt with `move` applied to each `leaf`: tuples (named ones as such), lists, dicts and input objects
    (judge.boundary.objects) rebuilt, other values as they are."""
    if isinstance(obj, leaf):
        return move(obj)
    if isinstance(obj, _HeldObject):
        return objects.made(obj.cls, obj.kind, obj.roles, [_copied(value, move, leaf) for value in obj.values])
    named = objects.parts(obj)
    if named is not None:
        return _HeldObject(obj, named, [_copied(value, move, leaf) for _, _, value in named])
    if isinstance(obj, tuple):
        return same_tuple(obj, [_copied(x, move, leaf) for x in obj])
    if isinstance(obj, list):
        return [_copied(x, move, leaf) for x in obj]
    if isinstance(obj, dict):
        return type(obj)((k, _copied(v, move, leaf)) for k, v in obj.items())
    return obj


class _HeldObject:
    """An input object kept as its class and parts, made again for each use (judge.boundary.objects)."""

    def __init__(self, obj, named: list, values: list):
        self.cls, self.kind = type(obj), objects.kind_of(obj)
        self.roles = [(name, role) for name, role, _ in named]
        self.values = values


class _Held:
    """A copy of a tensor, in host memory or (`on_device`) on the device it was made on, which no use writes into,
    with where it came from and whether it took gradients."""

    def __init__(self, tensor, on_device: bool = False):
        self.copy = tensor.detach().clone() if on_device else tensor.detach().to("cpu", copy=True)
        self.device = tensor.device
        self.requires_grad = tensor.requires_grad


def _on_gpu(leaves: list) -> bool:
    """Whether every tensor of an input is on a GPU (a CPU target's inputs are kept in host memory, as made)."""
    return bool(leaves) and all(t.is_cuda for t in leaves)


def _gpu_total() -> int:
    """The current GPU's total memory (an input was just made on it)."""
    import torch

    return torch.cuda.mem_get_info()[1]


def _to_origin(held: _Held) -> Any:
    tensor = held.copy.to(held.device, copy=True)
    return tensor.requires_grad_(True) if held.requires_grad else tensor
