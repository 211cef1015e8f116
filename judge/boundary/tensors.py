"""Walking GPU MODE data (nested tuples, named tuples, lists and dicts of tensors and Python numbers): copies,
output slots, poison, comparisons and projections. Used by the trusted oracle on objects it made itself; torch is
imported lazily so that the judge itself starts without it."""

from __future__ import annotations

import math
from typing import Any

from . import objects

MAX_MISMATCHES = 5
# Projections of an output that a timed call's result is checked by, and how many standard deviations of
# an honest output's error (|error| <= atol + rtol * |expected| element by element) one may be off.
PROJECTIONS = 2
PROJECTION_SIGMAS = 6.0
# Elements compared at once in float64 (judge.boundary.tensors.compare): 256 MiB a temporary.
COMPARE_CHUNK = 1 << 25


def leaves(obj, path: str = "") -> list[tuple[str, Any]]:
    """The tensors (and other non-container values) of nested tuples, lists, dicts and input objects
    (judge.boundary.objects: a part's path is `.name`), with their paths."""
    if isinstance(obj, (tuple, list)):
        return [leaf for i, item in enumerate(obj) for leaf in leaves(item, f"{path}[{i}]")]
    if isinstance(obj, dict):
        return [leaf for key, item in obj.items() for leaf in leaves(item, f"{path}[{key!r}]")]
    named = objects.parts(obj)
    if named is not None:
        return [leaf for name, _, item in named for leaf in leaves(item, f"{path}.{name}")]
    return [(path, obj)]


def is_number(value) -> bool:
    """A leaf an output may hold besides tensors: None or a Python int, float or bool (exact types)."""
    return value is None or type(value) in (int, float, bool)


def counted(values: list) -> str:
    """How many tensors and numbers a list of leaves holds, in words ("2 tensors and 1 number")."""
    numbers = sum(1 for value in values if is_number(value))
    tensors = len(values) - numbers
    text = f"{tensors} tensor{'' if tensors == 1 else 's'}"
    return text + (f" and {numbers} number{'' if numbers == 1 else 's'}" if numbers else "")


def paired(got: list[tuple[str, Any]], want: list[tuple[str, Any]]) -> tuple[list[tuple[str, Any, Any]], str]:
    """(path, got, wanted) for every leaf of the reference's output, matched by path, or ([], why they do not
    pair). Paths index tuples, named tuples and lists alike, so a plain tuple where the reference returns a named
    one pairs leaf for leaf, as a checker that unpacks or indexes would see it; a dict pairs by key."""
    if len(got) != len(want):
        return [], f"returned {counted([v for _, v in got])}, the reference returns {counted([v for _, v in want])}"
    by_path = dict(got)
    for path, _ in want:
        if path not in by_path:
            return [], f"the output has nothing at output{path}, where the reference's has a value (nested otherwise)"
    return [(path, by_path[path], value) for path, value in want], ""


def number_tolerance(want, rtol: float, atol: float) -> tuple[float, float]:
    """The tolerance a number is held to: a float's is the output's, an int's, a bool's or None's is none."""
    return (rtol, atol) if type(want) is float else (0.0, 0.0)


def number_mismatched(got, want, rtol: float, atol: float) -> bool:
    """Whether a number of the output is off the reference's: None, bools and ints exactly (by value, as `==`
    says), floats within atol + rtol * |want|; NaN or infinity in the output never passes."""
    if want is None or got is None:
        return got is not want
    if type(got) is float and not math.isfinite(got):
        return True
    if type(want) is float:
        return not abs(got - want) <= atol + rtol * abs(want)
    return got != want


def compare_number(path: str, got, want, rtol: float, atol: float) -> dict:
    """A number of the output against the reference's, in the shape `compare` gives a tensor's comparison."""
    rtol, atol = number_tolerance(want, rtol, atol)
    nonfinite = int(type(got) is float and not math.isfinite(got))
    mismatched = number_mismatched(got, want, rtol, atol)
    error = 0.0
    if not nonfinite and type(got) in (int, float) and type(want) in (int, float):
        error = float(abs(got - want)) if math.isfinite(want) else 0.0
    return {
        "path": path,
        "dtype": "None" if got is None else type(got).__name__,
        "elements": 1,
        "nonfinite": nonfinite,
        "mismatched": int(mismatched),
        "max_abs_err": error,
        "max_rel_err": error / max(abs(want), 2.2250738585072014e-308) if error else 0.0,
        "rtol": rtol,
        "atol": atol,
        "first_mismatches": [{"index": [], "got": _shown(got), "expected": _shown(want)}] if mismatched else [],
    }


def _shown(value):
    """A number as the detail's JSON holds it (NaN and infinities as text)."""
    return number(value) if type(value) is float else value


def clone_data(obj):
    """A deep copy of the tensors in nested tuples, lists, dicts and input objects (GPU MODE inputs; an object is
    made again, so that a reference that changes its state leaves the original as it was), other values as they
    are."""
    import torch

    if isinstance(obj, tuple):
        return same_tuple(obj, [clone_data(x) for x in obj])
    if isinstance(obj, list):
        return [clone_data(x) for x in obj]
    if isinstance(obj, dict):
        return {k: clone_data(v) for k, v in obj.items()}
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    named = objects.parts(obj)
    if named is not None:
        return objects.remade(obj, [clone_data(value) for _, _, value in named])
    return obj


def same_tuple(like: tuple, items: list) -> tuple:
    """`items` as a tuple of `like`'s class: a plain tuple, a named tuple (collections' or torch's return types) or a
    torch.Size."""
    if type(like) is tuple:
        return tuple(items)
    return like._make(items) if hasattr(like, "_make") else type(like)(items)


def detached(obj):
    """`obj` with the autograd history of its tensors dropped (the values shared, not copied), nested tuples (named
    ones and torch's return types kept as such), lists and dicts rebuilt only where a tensor changed. A reference
    that runs an nn.Module with parameters returns an output whose graph keeps every activation alive: trimul's, 25
    GiB at seqlen 1024, for as long as the oracle keeps the answer."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach() if obj.requires_grad else obj
    if isinstance(obj, (tuple, list)):
        items = [detached(x) for x in obj]
        if all(a is b for a, b in zip(items, obj)):
            return obj
        return items if type(obj) is list else same_tuple(obj, items)
    if isinstance(obj, dict):
        values = {k: detached(v) for k, v in obj.items()}
        return obj if all(values[k] is v for k, v in obj.items()) else type(obj)(values)
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


def compare(path: str, got, want, rtol: float, atol: float) -> dict:
    """Elementwise |got - want| <= atol + rtol * |want| in float64; NaN and Inf in `got` never pass. Compared a
    chunk of COMPARE_CHUNK elements at a time: in one piece, a 4 GiB float32 output took about 50 GiB of float64
    temporaries, and the oracle ran out of memory on an 80 GB H100 (GPU MODE's linalg/cholesky_py, n=32768)."""
    import torch

    g_all, w_all = got.detach().flatten(), want.detach().to(device=got.device).flatten()
    elements = g_all.numel()
    nonfinite = mismatched = 0
    max_abs = max_rel = 0.0
    first: list[int] = []
    shown: list[tuple[float, float]] = []
    for start in range(0, elements, COMPARE_CHUNK):
        g = g_all[start:start + COMPARE_CHUNK].to(torch.float64)
        w = w_all[start:start + COMPARE_CHUNK].to(torch.float64)
        finite = torch.isfinite(g)
        diff = (g - w).abs()
        bad = ~finite | ~(diff <= atol + rtol * w.abs())
        ok_diff = torch.where(finite, diff, torch.zeros_like(diff))
        rel = ok_diff / w.abs().clamp_min(torch.finfo(torch.float64).tiny)
        nonfinite += int((~finite).sum())
        mismatched += int(bad.sum())
        if g.numel():
            max_abs, max_rel = max(max_abs, float(ok_diff.max())), max(max_rel, float(rel.max()))
        if len(first) < MAX_MISMATCHES:
            for i in torch.nonzero(bad).flatten()[:MAX_MISMATCHES - len(first)].tolist():
                first.append(start + i)
                shown.append((number(g[i]), number(w[i])))
        del g, w, finite, diff, bad, ok_diff, rel
    shape = tuple(got.shape)
    return {
        "path": path,
        "dtype": str(got.dtype).removeprefix("torch."),
        "elements": elements,
        "nonfinite": nonfinite,
        "mismatched": mismatched,
        "max_abs_err": max_abs,
        "max_rel_err": max_rel,
        "rtol": rtol,
        "atol": atol,
        "first_mismatches": [
            {"index": list(_unravel(i, shape)), "got": g_value, "expected": w_value}
            for i, (g_value, w_value) in zip(first, shown)
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

    @classmethod
    def held_bytes(cls, elements: int) -> int:
        """What a projector keeps for outputs of `elements` elements in all: the int8 weights, and their float64
        copy where it is kept (judge.stages.budget counts it in every process that checks or reports outputs)."""
        dense = PROJECTIONS * elements * 8
        return PROJECTIONS * elements + (dense if dense <= cls.DENSE_BYTES else 0)

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
        return self._values(list(range(len(flats))), flats)

    def _values(self, indices: list[int], flats: list) -> list[list[float]]:
        import torch

        dots = [self._dot(index, flat) for index, flat in zip(indices, flats)]
        if not dots:
            return []
        if len({d.device for d in dots}) == 1:
            return torch.stack(dots).tolist()
        return [d.tolist() for d in dots]

    def project(self, output, order: list[str] | None = None) -> list[dict]:
        """Per output leaf: the projections (in float64: float32's rounding over a million elements is already
        larger than a tight tolerance allows) and the count of non-finite elements, which fail on their own.
        A NaN or infinity in a leaf makes its projections non-finite, so the elements are counted only then.
        A number is kept as it is (`number`). Each tensor's weights are those of its place in `order` (the
        reference's leaves' paths; default: its own place), so that a dict's keys in another order project alike."""
        import torch

        out, tensor_at, flats, indices = [], [], [], []
        place = {path: index for index, path in enumerate(order or [])}
        for index, (path, value) in enumerate(leaves(output)):
            if isinstance(value, torch.Tensor):
                tensor_at.append(len(out))
                flats.append(value.detach().reshape(-1))
                indices.append(place.get(path, index))
                out.append({"path": path})
            else:
                out.append({"path": path, "number": value})
        for at, flat, values in zip(tensor_at, flats, self._values(indices, flats)):
            nonfinite = 0
            if not all(math.isfinite(v) for v in values):
                nonfinite = flat.numel() - int(torch.isfinite(flat).sum()) if flat.is_floating_point() else 0
                # no NaN or infinity in it: finite elements past float64's range; they fail as far off
                values = [0.0] * PROJECTIONS if nonfinite else [self._LARGEST] * PROJECTIONS
            out[at].update(nonfinite=nonfinite, values=values)
        return out

    def bounds(self, expected, rtol: float, atol: float) -> list[dict]:
        """Per expected leaf: its projections and the honest spread, PROJECTION_SIGMAS * ||atol + rtol*|e|||; a
        number as it is, with the tolerance it is held to (number_tolerance)."""
        import torch

        out = []
        for index, (path, tensor) in enumerate(leaves(expected)):
            if not isinstance(tensor, torch.Tensor):
                out.append({"path": path, "number": tensor, "tolerance": number_tolerance(tensor, rtol, atol)})
                continue
            flat = tensor.detach().reshape(-1)
            values = self._dot(index, flat).tolist()
            spread = 0.0
            for start in range(0, flat.numel(), self.CHUNK):
                part = flat[start:start + self.CHUNK].double()
                spread += float(((atol + rtol * part.abs()) ** 2).sum())
            out.append({"path": path, "values": values, "allowed": PROJECTION_SIGMAS * max(spread ** 0.5, 1e-30)})
        return out


def projection_failure(got: list[dict], want: list[dict]) -> str | None:
    """None when every projection of a call's output is within its bound and every number matches, else the first
    reason it does not. Leaves pair by path (`paired`)."""
    def leaf(entry):
        return entry["number"] if "number" in entry else entry

    pairs, problem = paired([(g["path"], leaf(g)) for g in got], [(w["path"], leaf(w)) for w in want])
    if problem:
        return problem
    for (path, g, _), w in zip(pairs, want):
        if "number" in w or is_number(g):
            if not (is_number(g) and "number" in w):
                return (f"output{path} is a {'number' if is_number(g) else 'tensor'}, the reference's is a "
                        f"{'number' if 'number' in w else 'tensor'}")
            if number_mismatched(g, w["number"], *w["tolerance"]):
                return f"output{path} is {g!r}, the reference's is {w['number']!r}"
            continue
        if g["nonfinite"]:
            return f"output{g['path']} has {g['nonfinite']} NaN/Inf elements"
        for a, b in zip(g["values"], w["values"]):
            if not abs(a - b) <= w["allowed"]:
                return (f"output{g['path']} is far from the reference: projection {a:.6g} vs {b:.6g} "
                        f"(an honest output is within {w['allowed']:.3g})")
    return None
