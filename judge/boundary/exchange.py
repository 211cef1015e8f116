"""Memory the trusted oracle and a runner both reach: where every input a kernel is called on arrives, and where its
output leaves.

A runner never makes its own inputs: the oracle generates them from secret seeds, keeps them in its own memory
and writes one input set into memory the runner maps only when that set's call is next, while the runner
waits (judge.boundary.callframe). The runner's process therefore holds no set before its call. Outputs go the other
way: the runner copies what the kernel returned into an outbox the oracle reads, and the oracle projects and
compares it. Two kinds of memory: device memory the runner allocates and exports by CUDA IPC, which the oracle
maps and writes in memory order (judge.boundary.cuda_ipc says why the runner owns it), and a host file per runner
for CPU tensors (judge.boundary.host_area).

Data reach the runner as a skeleton: the nesting of GPU MODE's data (tuples, lists, dicts), its plain values
and, for each tensor, a layout in one of the two areas. An output comes back described the same way (the runner's
call frame writes the description, judge.boundary.callframe), with named tuples' field names and dict keys that may
be ints; the oracle rebuilds it with classes of its own or the reference's (`build_output`), never the kernel's.

The description, one JSON object per node:
    {"tensor": i}                     the i-th tensor (layouts in that order; an output's in order of appearance)
    {"value": v}                      None, a bool, an int or a finite float
    {"float": "nan" | "inf" | "-inf"}
    {"dtype": "float16"}              (inputs only)
    {"tuple": [node, ...]}            with "fields": [name, ...] for a named tuple, and for an input's "class":
                                      "module:qualname" where a runner can import it by that name
    {"size": [n, ...]}                a torch.Size (inputs only)
    {"list": [node, ...]}
    {"dict": [[key, node], ...]}      keys str or int
    {"object": "module:qualname", "kind": "dataclass" | "module", "parts": [[name, role, node], ...]}
                                      a problem's own object (inputs only; judge.boundary.objects)
"""

from __future__ import annotations

import functools
import math
from typing import Any

from . import objects

ALIGN = 4096  # each tensor starts on its own 4 KiB boundary
DEVICE, HOST = "device", "host"


class ExchangeError(ValueError):
    """Data that cannot travel this way, or memory a runner handed over that is not what it said."""


# ---- skeletons --------------------------------------------------------------------------------------------
# _NO_CYCLE: a nested function that calls itself is a cycle through its closure, freed only by a collection with all
# it closes over (skeleton's walk: every tensor it described, each released set). Each is deleted once it has run.


def skeleton(data: Any, path: str = "", *, output: bool = False) -> tuple[Any, list]:
    """(tree, tensors): `data` as JSON-able nesting with each tensor replaced by its index in `tensors`.
    Trusted data only: this reads the objects freely. With `output`, as an output is described: strings, dtypes,
    sizes and objects are refused, and a named tuple keeps its field names but not its class."""
    tensors: list = []
    what = "output" if output else "input"

    def walk(node, where):
        import torch

        if type(node) is tuple:
            return {"tuple": [walk(x, f"{where}[{i}]") for i, x in enumerate(node)]}
        if not output and isinstance(node, torch.Size):
            return {"size": [int(n) for n in node]}
        if isinstance(node, tuple) and field_names(type(node)) is not None:
            described = {"fields": list(field_names(type(node))),
                         "tuple": [walk(x, f"{where}[{i}]") for i, x in enumerate(node)]}
            if not output:  # an input's own class where a runner finds it by name, else judge's with its fields
                try:
                    described["class"] = objects.class_name(node)
                except ValueError:
                    pass
            return described
        if type(node) is list:
            return {"list": [walk(x, f"{where}[{i}]") for i, x in enumerate(node)]}
        if type(node) is dict:
            if not all(type(k) in (str, int) for k in node):
                raise ExchangeError(f"{what}{where} is a dict with keys that are neither strings nor ints")
            return {"dict": [[k, walk(v, f"{where}[{k!r}]")] for k, v in node.items()]}
        if isinstance(node, torch.Tensor):
            tensors.append(node)
            return {"tensor": len(tensors) - 1}
        if node is None or type(node) in ((bool, int) if output else (bool, int, str)):
            return {"value": node}
        if type(node) is float:
            return {"float": repr(node)} if not math.isfinite(node) else {"value": node}
        if not output and isinstance(node, torch.dtype):
            return {"dtype": str(node).removeprefix("torch.")}
        named = None if output else objects.parts(node)
        if named is not None:
            try:
                name = objects.class_name(node)
            except ValueError as error:
                raise ExchangeError(f"input{where} is {error}") from None
            return {"object": name, "kind": objects.kind_of(node),
                    "parts": [[part, role, walk(value, f"{where}.{part}")] for part, role, value in named]}
        if output:
            raise ExchangeError(f"output{where} is a {type(node).__module__}.{type(node).__qualname__}: {OUTPUTS}")
        raise ExchangeError(f"input{where} is a {type(node).__module__}.{type(node).__qualname__}: judge hands "
                            "kernels tensors, numbers, strings, dtypes, tuples, lists and dicts of them, and "
                            "dataclasses and nn.Modules of the problem's own classes")

    try:
        return walk(data, path), tensors
    finally:  # see _NO_CYCLE
        del walk


def build(tree: Any, tensors: list) -> Any:
    """The data a skeleton describes, with `tensors` (in index order) at its tensor places."""
    import torch

    if "fields" in tree:  # a named tuple among the inputs (judge.boundary.objects.class_name)
        values = [build(x, tensors) for x in tree["tuple"]]
        cls = objects.find_class(tree["class"]) if "class" in tree else _namedtuple(tuple(tree["fields"]))
        return cls(values) if hasattr(cls, "n_sequence_fields") else cls(*values)
    if "tuple" in tree:
        return tuple(build(x, tensors) for x in tree["tuple"])
    if "size" in tree:
        return torch.Size(tree["size"])
    if "list" in tree:
        return [build(x, tensors) for x in tree["list"]]
    if "dict" in tree:
        return {k: build(v, tensors) for k, v in tree["dict"]}
    if "tensor" in tree:
        return tensors[tree["tensor"]]
    if "float" in tree:
        return float(tree["float"])
    if "dtype" in tree:
        return getattr(torch, tree["dtype"])
    if "object" in tree:  # the class imported by name where it is first met (a runner: the problem's own file)
        return objects.made(objects.find_class(tree["object"]), tree["kind"], [(n, r) for n, r, _ in tree["parts"]],
                            [build(node, tensors) for _, _, node in tree["parts"]])
    return tree["value"]


def holds_objects(tree: Any) -> bool:
    """Whether a skeleton describes an input object anywhere: a kernel may change its state, so each call is handed
    one made again (judge.boundary.runner)."""
    if "object" in tree:
        return True
    items = tree.get("tuple") or tree.get("list") or [v for _, v in tree.get("dict", [])]
    return any(holds_objects(item) for item in items)


# ---- outputs ----------------------------------------------------------------------------------------------

OUTPUTS = ("an output is made of plain tensors, Python numbers (int, float, bool), None, and tuples (torch's "
           "and collections' named tuples included), lists and dicts of them")
# Bounds on an output's description, kept by the runner's frame and checked again here.
MAX_OUTPUT_DEPTH = 16
MAX_OUTPUT_NODES = 1024
MAX_NAME_CHARS = 200
INT_BOUND = 1 << 64  # ints in an output lie strictly between -INT_BOUND and INT_BOUND
_UNREADABLE = "the kernel's process described its output in a way judge does not write"


def field_names(cls) -> tuple[str, ...] | None:
    """The field names of a named tuple class (collections.namedtuple's `_fields`, a torch.return_types struct
    sequence's `__match_args__`), or None for any other class. Trusted classes only: this reads attributes."""
    if not (isinstance(cls, type) and issubclass(cls, tuple)):
        return None
    fields = getattr(cls, "_fields", None)
    if fields is None and isinstance(getattr(cls, "n_sequence_fields", None), int):
        fields = getattr(cls, "__match_args__", None)
    if isinstance(fields, tuple) and all(type(f) is str for f in fields):
        return fields
    return None


def torch_named_outputs() -> dict[type, tuple[str, ...]]:
    """torch's named tuples (torch.return_types: what torch.max(dim), torch.geqrf, torch.linalg.eigh ... return),
    each with its field names; the runner takes these before the kernel is imported."""
    import torch

    found = {}
    for name in dir(torch.return_types):
        cls = getattr(torch.return_types, name)
        if isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "n_sequence_fields"):
            fields = field_names(cls)
            if fields is not None and len(fields) == cls.n_sequence_fields:
                found[cls] = fields
    return found


def build_output(tree: Any, tensors: list, like: Any = None) -> Any:
    """The output a runner described (`tree`, from its untrusted reply, checked here node by node) with `tensors`
    at its tensor places. A named tuple is rebuilt as the class of `like`'s node at the same place (the reference's
    output) when their field names match, else as a namedtuple of judge's own with the described fields: no class
    of the kernel's ever reaches the oracle. Raises ExchangeError for a description judge's frame does not write."""
    used = [0, 0]  # tensors placed, nodes seen

    def walk(node, ref, depth):
        used[1] += 1
        if depth > MAX_OUTPUT_DEPTH or used[1] > MAX_OUTPUT_NODES or type(node) is not dict:
            raise ExchangeError(_UNREADABLE)
        keys = sorted(node)
        if keys == ["tensor"]:
            if type(node["tensor"]) is not int or node["tensor"] != used[0] or used[0] >= len(tensors):
                raise ExchangeError(_UNREADABLE)
            used[0] += 1
            return tensors[node["tensor"]]
        if keys == ["value"]:
            value = node["value"]
            if not (value is None or type(value) in (bool, int, float)) or (
                    type(value) is int and not -INT_BOUND < value < INT_BOUND) or (
                    type(value) is float and not math.isfinite(value)):
                raise ExchangeError(_UNREADABLE)
            return value
        if keys == ["float"]:
            if node["float"] not in ("nan", "inf", "-inf"):
                raise ExchangeError(_UNREADABLE)
            return float(node["float"])
        if keys in (["list"], ["tuple"], ["fields", "tuple"]):
            items = node["tuple" if "tuple" in node else "list"]
            if type(items) is not list:
                raise ExchangeError(_UNREADABLE)
            refs = list(ref) if isinstance(ref, (tuple, list)) and len(ref) == len(items) else [None] * len(items)
            values = [walk(item, r, depth + 1) for item, r in zip(items, refs)]
            if keys == ["list"]:
                return values
            if keys == ["tuple"]:
                return tuple(values)
            return _named(node["fields"], values, ref)
        if keys == ["dict"]:
            pairs = node["dict"]
            if type(pairs) is not list or not all(type(p) is list and len(p) == 2 for p in pairs):
                raise ExchangeError(_UNREADABLE)
            out = {}
            for key, item in pairs:
                if not (type(key) is str and len(key) <= MAX_NAME_CHARS
                        or type(key) is int and -INT_BOUND < key < INT_BOUND) or key in out:
                    raise ExchangeError(_UNREADABLE)
                out[key] = walk(item, ref.get(key) if isinstance(ref, dict) else None, depth + 1)
            return out
        raise ExchangeError(_UNREADABLE)

    try:
        built = walk(tree, like, 0)
    finally:  # see _NO_CYCLE
        del walk
    if used[0] != len(tensors):
        raise ExchangeError(_UNREADABLE)
    return built


def _named(fields: Any, values: list, ref: Any) -> tuple:
    """A named tuple of `values`: the reference's own class where its fields are `fields`, else judge's."""
    if not (type(fields) is list and len(fields) == len(values)
            and all(type(f) is str and 0 < len(f) <= MAX_NAME_CHARS for f in fields)):
        raise ExchangeError(_UNREADABLE)
    if isinstance(ref, tuple) and field_names(type(ref)) == tuple(fields):
        cls = type(ref)
        try:
            return cls(values) if hasattr(cls, "n_sequence_fields") else cls(*values)
        except Exception:  # noqa: BLE001 - a reference class that builds otherwise: judge's own class instead
            pass
    return _namedtuple(tuple(fields))(*values)


@functools.lru_cache(maxsize=256)
def _namedtuple(fields: tuple[str, ...]):
    """judge's own named tuple class for `fields` (a name that is no identifier, a keyword, a repeat or starts
    with an underscore becomes _0, _1, ...: collections.namedtuple's rename)."""
    import collections

    return collections.namedtuple("output", fields, rename=True)


# ---- layouts ----------------------------------------------------------------------------------------------


def dtype_name(tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


@functools.lru_cache(maxsize=None)
def itemsize(dtype: str) -> int:
    import torch

    return torch.empty(0, dtype=getattr(torch, dtype)).element_size()


def span(shape: list[int], stride: list[int], size: int) -> int:
    """The bytes a strided tensor reaches from its first element."""
    if any(n == 0 for n in shape):
        return 0
    return (1 + sum((n - 1) * step for n, step in zip(shape, stride))) * size


def aligned(nbytes: int) -> int:
    return -(-max(nbytes, 1) // ALIGN) * ALIGN


def raw_layout(nbytes: int, offset: int = 0, area: str = DEVICE) -> dict:
    """The layout of `nbytes` plain bytes from `offset` in an area: how an outbox, or a span of one, is viewed."""
    return {"area": area, "offset": offset, "dtype": "uint8", "shape": [nbytes], "stride": [1]}


def area_of(tensor) -> str:
    return DEVICE if tensor.is_cuda else HOST


def plan(tensors: list, copies: int, offsets: dict[str, int] | None = None) -> tuple[list[list[dict]], dict]:
    """Where each of `tensors` lives in each of `copies` copies: CUDA tensors in the device area, the rest in the
    host area, each with its own strides on an aligned span. Returns the layouts per copy and each area's end."""
    ends = dict(offsets or {DEVICE: 0, HOST: 0})
    copies_out = []
    for _ in range(copies):
        layouts = []
        for tensor in tensors:
            area = area_of(tensor)
            shape, stride = list(tensor.shape), list(tensor.stride())
            layouts.append({"area": area, "offset": ends[area], "dtype": dtype_name(tensor), "shape": shape,
                            "stride": stride})
            ends[area] += aligned(span(shape, stride, tensor.element_size()))
        copies_out.append(layouts)
    return copies_out, ends


def check_layout(layout: dict, capacity: int) -> None:
    """A layout (from a runner's reply) that stays inside an area of `capacity` bytes."""
    shape, stride = layout.get("shape"), layout.get("stride")
    if not (isinstance(shape, list) and isinstance(stride, list) and len(shape) == len(stride) <= 16
            and all(type(n) is int and n >= 0 for n in shape + stride)):
        raise ExchangeError("an output's shape or strides are not what a tensor has")
    offset = layout.get("offset")
    if type(offset) is not int or offset < 0 or offset + span(shape, stride, itemsize(layout["dtype"])) > capacity:
        raise ExchangeError("an output reaches past the outbox")
