"""Walking GPU MODE data (nested tuples, lists and dicts of tensors): copies, output slots, poison, comparisons
and fingerprints. Shared by the trusted oracle and the runner beside candidate code; torch is imported lazily
so that the judge itself starts without it."""

from __future__ import annotations

import math
from typing import Any

MAX_MISMATCHES = 5
# Projections of an output that a timed call's result is checked by, and how many standard deviations of
# an honest output's error (|error| <= atol + rtol * |expected| element by element) one may be off.
PROJECTIONS = 2
PROJECTION_SIGMAS = 6.0


def leaves(obj, path: str = "") -> list[tuple[str, Any]]:
    """The tensors (and other non-container values) of nested tuples, lists and dicts, with their paths."""
    if isinstance(obj, (tuple, list)):
        return [leaf for i, item in enumerate(obj) for leaf in leaves(item, f"{path}[{i}]")]
    if isinstance(obj, dict):
        return [leaf for key, item in obj.items() for leaf in leaves(item, f"{path}[{key!r}]")]
    return [(path, obj)]


def rebuild(template, flat: list):
    """Put the values of `flat`, in leaves() order, back into the nesting of `template`."""
    it = iter(flat)

    def walk(node):
        if isinstance(node, tuple):
            return tuple(walk(x) for x in node)
        if isinstance(node, list):
            return [walk(x) for x in node]
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        return next(it)

    return walk(template)


def clone_data(obj):
    """A deep copy of the tensors in nested tuples, lists and dicts (GPU MODE inputs), other values as they are."""
    import torch

    if isinstance(obj, tuple):
        return tuple(clone_data(x) for x in obj)
    if isinstance(obj, list):
        return [clone_data(x) for x in obj]
    if isinstance(obj, dict):
        return {k: clone_data(v) for k, v in obj.items()}
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    return obj


def copy_into(dest, source, skip: frozenset[str] | set[str] = frozenset()) -> None:
    """Copy every tensor of `source` into the tensor at the same path of `dest` (same structure and shapes),
    except at the paths in `skip` (output slots that are poisoned next: copying them is wasted bandwidth)."""
    import torch

    for (path, d), (_, s) in zip(leaves(dest), leaves(source)):
        if isinstance(d, torch.Tensor) and path not in skip:
            d.copy_(s)


def poisoned_slots(data, slots: list[str]) -> set[str]:
    """The paths among `slots` that `poison` fills (floating tensors): their content before a call never counts."""
    return {path for path, tensor in leaves(data) if _poisonable(path, tensor, slots)}


def _poisonable(path: str, tensor, slots: list[str]) -> bool:
    """The one rule of what `poison` fills: a floating tensor at an output slot."""
    import torch

    return path in slots and isinstance(tensor, torch.Tensor) and tensor.is_floating_point()


def fits_layouts(tensors: list, layouts: list[dict]) -> bool:
    """Whether `tensors` are CUDA tensors of the shapes and dtypes of `layouts` (judge.boundary.cuda_ipc's), one for one."""
    import torch

    return len(tensors) == len(layouts) and all(
        isinstance(t, torch.Tensor) and t.is_cuda and list(t.shape) == layout["shape"]
        and str(t.dtype).removeprefix("torch.") == layout["dtype"] for t, layout in zip(tensors, layouts))


def output_slots(original, after_reference, returned) -> list[str]:
    """Paths of the input tensors that are outputs: those the reference wrote into or returned a view of."""
    import torch

    returned_storages = {
        t.untyped_storage().data_ptr() for _, t in leaves(returned) if isinstance(t, torch.Tensor)
    }
    slots = []
    for (path, before), (_, after) in zip(leaves(original), leaves(after_reference)):
        if not isinstance(after, torch.Tensor):
            continue
        aliased = after.untyped_storage().data_ptr() in returned_storages
        if aliased or not same_bytes(before, after):
            slots.append(path)
    return slots


def same_bytes(before, after) -> bool:
    """Bitwise equality: works for every dtype (torch.equal has no kernel for packed FP4) and treats an
    unchanged NaN as unchanged."""
    import torch

    if before.shape != after.shape or before.dtype != after.dtype:
        return False
    as_bytes = lambda t: t.contiguous().reshape(-1).view(torch.uint8)  # noqa: E731
    return torch.equal(as_bytes(before), as_bytes(after))


def poison(data, slots: list[str]) -> list[str]:
    """Fill the floating output tensors at `slots` with NaN, so that elements the kernel never writes fail."""
    poisoned = []
    for path, tensor in leaves(data):
        if _poisonable(path, tensor, slots):
            tensor.fill_(float("nan"))
            poisoned.append(path)
    return poisoned


def scrub(data, slots: list[str]) -> None:
    """Overwrite the output tensors at `slots` (NaN where floating, zeros otherwise): a slot that another
    process uses next must not hold the answer this one computed."""
    import torch

    for path, tensor in leaves(data):
        if path in slots and isinstance(tensor, torch.Tensor):
            tensor.fill_(float("nan") if tensor.is_floating_point() else 0)


def plain_tensors(output) -> str | None:
    """None when every leaf of an output is a plain torch.Tensor, else what is wrong: a tensor subclass or a
    proxy object can compute its values later, when the checker looks, instead of inside the timed call."""
    import torch

    for path, leaf in leaves(output):
        if type(leaf) is not torch.Tensor:
            kind = "a tensor subclass" if isinstance(leaf, torch.Tensor) else "not a tensor"
            return f"output{path} is a {type(leaf).__module__}.{type(leaf).__qualname__} ({kind})"
    return None


def compare(path: str, got, want, rtol: float, atol: float) -> dict:
    """Elementwise |got - want| <= atol + rtol * |want| in float64; NaN and Inf in `got` never pass."""
    import torch

    g = got.detach().to(torch.float64).flatten()
    w = want.detach().to(device=got.device, dtype=torch.float64).flatten()
    finite = torch.isfinite(g)
    diff = (g - w).abs()
    bad = ~finite | ~(diff <= atol + rtol * w.abs())
    ok_diff = torch.where(finite, diff, torch.zeros_like(diff))
    rel = ok_diff / w.abs().clamp_min(torch.finfo(torch.float64).tiny)
    first = torch.nonzero(bad).flatten()[:MAX_MISMATCHES].tolist()
    shape = tuple(got.shape)
    return {
        "path": path,
        "dtype": str(got.dtype).removeprefix("torch."),
        "elements": g.numel(),
        "nonfinite": int((~finite).sum()),
        "mismatched": int(bad.sum()),
        "max_abs_err": float(ok_diff.max()) if g.numel() else 0.0,
        "max_rel_err": float(rel.max()) if g.numel() else 0.0,
        "rtol": rtol,
        "atol": atol,
        "first_mismatches": [
            {"index": list(_unravel(i, shape)), "got": number(g[i]), "expected": number(w[i])} for i in first
        ],
    }


def number(x) -> float | str:
    value = float(x)
    return value if math.isfinite(value) else repr(value)


def _unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat //= size
    return tuple(reversed(index))


def sync() -> None:
    """Wait for every stream of the device (not just the current one)."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


class Projector:
    """Random projections <w, y> of outputs, with weights of +-1 drawn from a seed, so that the result of every
    timed call can be checked by a few numbers: the runner projects what the kernel returned, the oracle
    projects the reference's answer and bounds how far an honest output's projection can be from it.

    Weights are drawn as int8 (one byte per element and projection). Up to DENSE_BYTES they are also kept in
    float64, so that a timed call's projections are one matrix-vector product (on an H100, 16M elements in
    0.33 ms instead of 0.73 ms converting the int8 weights at every call); beyond, the int8 weights are applied
    in float64 chunks, so that outputs of hundreds of millions of elements fit beside the kernel's own data."""

    CHUNK = 1 << 24
    DENSE_BYTES = 1 << 30
    _LARGEST = 1.7976931348623157e308

    def __init__(self, seed: int):
        self.seed = seed
        self._weights: dict[tuple, Any] = {}
        self._dense: dict[tuple, Any] = {}

    def weights(self, index: int, tensor) -> Any:
        import torch

        key = (index, tensor.numel(), str(tensor.device))
        if key not in self._weights:
            gen = torch.Generator(device=tensor.device).manual_seed(self.seed + 7919 * index)
            bits = torch.randint(0, 2, (PROJECTIONS, tensor.numel()), generator=gen, device=tensor.device,
                                 dtype=torch.int8)
            self._weights[key] = bits.mul_(2).sub_(1)
        return self._weights[key]

    def _dot(self, index: int, flat) -> Any:
        """The projections of one flat leaf as a float64 tensor on its device (no host synchronisation)."""
        import torch

        key = (index, flat.numel(), str(flat.device))
        if key not in self._dense:
            fits = PROJECTIONS * flat.numel() * 8 <= self.DENSE_BYTES
            self._dense[key] = self.weights(index, flat).double() if fits else None
        dense = self._dense[key]
        if dense is not None:
            return torch.mv(dense, flat.double())
        weights = self.weights(index, flat)
        total = torch.zeros(PROJECTIONS, dtype=torch.float64, device=flat.device)
        for start in range(0, flat.numel(), self.CHUNK):
            part = flat[start:start + self.CHUNK].double()
            total += torch.mv(weights[:, start:start + self.CHUNK].double(), part)
        return total

    def values(self, flats: list) -> list[list[float]]:
        """The projections of several flat leaves, brought to the host together (one wait for the device)."""
        import torch

        dots = [self._dot(index, flat) for index, flat in enumerate(flats)]
        if not dots:
            return []
        if len({d.device for d in dots}) == 1:
            return torch.stack(dots).tolist()
        return [d.tolist() for d in dots]

    def project(self, output) -> list[dict]:
        """Per output leaf: the projections (in float64: float32's rounding over a million elements is already
        larger than a tight tolerance allows) and the count of non-finite elements, which fail on their own.
        A NaN or infinity in a leaf makes its projections non-finite, so the elements are counted only then."""
        import torch

        paths, flats = [], []
        for path, tensor in leaves(output):
            paths.append(path)
            flats.append(tensor.detach().reshape(-1))
        out = []
        for path, flat, values in zip(paths, flats, self.values(flats)):
            nonfinite = 0
            if not all(math.isfinite(v) for v in values):
                nonfinite = flat.numel() - int(torch.isfinite(flat).sum()) if flat.is_floating_point() else 0
                # no NaN or infinity in it: finite elements past float64's range; they fail as far off
                values = [0.0] * PROJECTIONS if nonfinite else [self._LARGEST] * PROJECTIONS
            out.append({"path": path, "nonfinite": nonfinite, "values": values})
        return out

    def bounds(self, expected, rtol: float, atol: float) -> list[dict]:
        """Per expected leaf: its projections and the honest spread, PROJECTION_SIGMAS * ||atol + rtol*|e|||."""
        out = []
        for index, (path, tensor) in enumerate(leaves(expected)):
            flat = tensor.detach().reshape(-1)
            values = self._dot(index, flat).tolist()
            spread = 0.0
            for start in range(0, flat.numel(), self.CHUNK):
                part = flat[start:start + self.CHUNK].double()
                spread += float(((atol + rtol * part.abs()) ** 2).sum())
            out.append({"path": path, "values": values, "allowed": PROJECTION_SIGMAS * max(spread ** 0.5, 1e-30)})
        return out


def projection_failure(got: list[dict], want: list[dict]) -> str | None:
    """None when every projection of a call's output is within its bound, else the first reason it is not."""
    if len(got) != len(want):
        return f"returned {len(got)} tensors, the reference returns {len(want)}"
    for g, w in zip(got, want):
        if g["nonfinite"]:
            return f"output{g['path']} has {g['nonfinite']} NaN/Inf elements"
        for a, b in zip(g["values"], w["values"]):
            if not abs(a - b) <= w["allowed"]:
                return (f"output{g['path']} is far from the reference: projection {a:.6g} vs {b:.6g} "
                        f"(an honest output is within {w['allowed']:.3g})")
    return None
