"""Memory the trusted oracle owns and a runner maps: where every input a kernel is called on arrives, and where
its output leaves.

A runner never makes its own inputs: the oracle generates them from secret seeds, keeps them in its own memory
and writes one input set into memory the runner maps only when that set's call is next, while the runner
waits (judge.boundary.callframe). The runner's process therefore holds no set before its call. Outputs go the other
way: the runner copies what the kernel returned into an outbox the oracle reads, and the oracle projects and
compares it. Two kinds of memory: device memory exported by CUDA IPC (judge.boundary.cuda_ipc), which base and
candidate runners map at once so that both kernels run on the same physical memory, and a host file per runner
for CPU tensors, which the oracle reads and writes with pread/pwrite only (never mapped on its side, so that a
runner that truncates its file cannot fault the oracle).

Data reach the runner as a skeleton: the nesting of GPU MODE's data (tuples, lists, dicts), its plain values
and, for each tensor, a layout in one of the two areas.
"""

from __future__ import annotations

import functools
import math
import os
import stat
from pathlib import Path
from typing import Any

ALIGN = 4096  # each tensor starts on its own 4 KiB boundary
DEVICE, HOST = "device", "host"


class ExchangeError(ValueError):
    """Data that cannot travel this way, or memory a runner handed over that is not what it said."""


# ---- skeletons --------------------------------------------------------------------------------------------


def skeleton(data: Any, path: str = "") -> tuple[Any, list]:
    """(tree, tensors): `data` as JSON-able nesting with each tensor replaced by its index in `tensors`."""
    tensors: list = []

    def walk(node, where):
        import torch

        if type(node) is tuple:
            return {"tuple": [walk(x, f"{where}[{i}]") for i, x in enumerate(node)]}
        if type(node) is list:
            return {"list": [walk(x, f"{where}[{i}]") for i, x in enumerate(node)]}
        if type(node) is dict:
            if not all(type(k) is str for k in node):
                raise ExchangeError(f"input{where} is a dict with keys that are not strings")
            return {"dict": [[k, walk(v, f"{where}[{k!r}]")] for k, v in node.items()]}
        if isinstance(node, torch.Tensor):
            tensors.append(node)
            return {"tensor": len(tensors) - 1}
        if node is None or type(node) in (bool, int, str):
            return {"value": node}
        if type(node) is float:
            return {"float": repr(node)} if not math.isfinite(node) else {"value": node}
        if isinstance(node, torch.dtype):
            return {"dtype": str(node).removeprefix("torch.")}
        raise ExchangeError(f"input{where} is a {type(node).__module__}.{type(node).__qualname__}: judge hands "
                            "kernels tensors, numbers, strings, dtypes and tuples, lists and dicts of them")

    return walk(data, path), tensors


def build(tree: Any, tensors: list) -> Any:
    """The data a skeleton describes, with `tensors` (in index order) at its tensor places."""
    import torch

    if "tuple" in tree:
        return tuple(build(x, tensors) for x in tree["tuple"])
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
    return tree["value"]


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


# ---- the host area: a file per runner ---------------------------------------------------------------------


def open_own_directory(path: str) -> int:
    """A descriptor of directory `path`, opened from / one component at a time without following a link, that is
    this process's own, not writable by others and empty: the directory judge made for one runner's files. Anything
    else (a link anywhere on the way, another owner, a file already there) is an ExchangeError."""
    parts = Path(path).parts
    if not parts or parts[0] != "/":
        raise ExchangeError(f"the exchange directory {path} is not an absolute path")
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open("/", flags)
    try:
        for part in parts[1:]:
            try:
                child = os.open(part, flags, dir_fd=fd)
            except OSError as error:
                raise ExchangeError(f"the exchange directory {path} could not be opened at {part!r} without following "
                                    f"a link ({error.strerror})") from None
            os.close(fd)
            fd = child
        info = os.fstat(fd)
        if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise ExchangeError(f"the exchange directory {path} is not judge's own (owner {info.st_uid}, mode "
                                f"{stat.S_IMODE(info.st_mode):04o})")
        if os.listdir(fd):
            raise ExchangeError(f"the exchange directory {path} was not empty")
    except BaseException:
        os.close(fd)
        raise
    return fd


class HostFile:
    """The oracle's side of a runner's host area: a file it created in the runner's directory (owned by the
    runner's user so that a runner that dropped to uid nobody can map it), read and written by offset only.
    With `directory` (a descriptor, exchange.open_own_directory) the file is made relative to it."""

    def __init__(self, path: Path, owner: int | None = None, directory: int | None = None):
        self.path = Path(path)
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            if directory is None:
                self.fd = os.open(self.path, flags, 0o600)
            else:
                self.fd = os.open(self.path.name, flags, 0o600, dir_fd=directory)
        except OSError as error:
            raise ExchangeError(f"the host file {self.path} could not be made ({error.strerror})") from None
        if owner is not None and owner != os.geteuid():
            os.fchown(self.fd, owner, -1)
        self.nbytes = 0

    def reserve(self, nbytes: int) -> None:
        """At least `nbytes` long (a runner remaps when the plan it is sent says the area grew)."""
        if nbytes > self.nbytes:
            os.ftruncate(self.fd, nbytes)
            self.nbytes = nbytes

    def write(self, layout: dict, tensor) -> None:
        """`tensor` at `layout`, strides and all."""
        tensor = tensor.detach().cpu()
        if _dense_as(tensor, layout):  # the usual case: its own bytes are the span
            _pwrite_all(self.fd, memoryview(tensor.reshape(-1).view(_uint8()).numpy()), layout["offset"])
            return
        buffer = _span_buffer(layout)
        _strided(buffer, layout).copy_(tensor)
        _pwrite_all(self.fd, memoryview(buffer.numpy()), layout["offset"])

    def read(self, layout: dict):
        """A copy of the tensor at `layout`; a file the runner cut short is an ExchangeError."""
        buffer = _span_buffer(layout)
        view = memoryview(buffer.numpy())
        got = os.preadv(self.fd, [view], layout["offset"]) if len(view) else 0
        if got != len(view):
            raise ExchangeError("the output file was cut short in the kernel's process")
        return _strided(buffer, layout)

    def zero(self, start: int = 0, end: int | None = None) -> None:
        end = self.nbytes if end is None else min(end, self.nbytes)
        chunk = bytes(min(1 << 22, max(0, end - start)))
        while start < end:
            start += os.pwrite(self.fd, chunk[:end - start], start)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _span_buffer(layout: dict):
    import torch

    size = itemsize(layout["dtype"])
    count = span(layout["shape"], layout["stride"], size)
    return torch.empty(count, dtype=torch.uint8)


def _uint8():
    import torch

    return torch.uint8


def _dense_as(tensor, layout: dict) -> bool:
    """Whether `tensor` is contiguous and `layout` is its contiguous layout (same shape and dtype)."""
    return (tensor.is_contiguous() and list(tensor.shape) == layout["shape"] and dtype_name(tensor) == layout["dtype"]
            and list(tensor.stride()) == layout["stride"])


def _strided(buffer, layout: dict):
    import torch

    dtype = getattr(torch, layout["dtype"])
    if buffer.numel() == 0:
        return torch.empty_strided(layout["shape"], layout["stride"], dtype=dtype)
    return buffer.view(dtype).as_strided(layout["shape"], layout["stride"])


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    data = data.cast("B")
    while len(data):
        done = os.pwrite(fd, data, offset)
        data, offset = data[done:], offset + done


class MappedFile:
    """A runner's side of its host area: the file mapped shared, so that what the oracle writes is what the
    kernel reads, and what the runner copies out is what the oracle reads."""

    def __init__(self, path: str, nbytes: int):
        import mmap

        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ExchangeError("the host area is not a regular file")
            self.nbytes = nbytes
            self.map = mmap.mmap(fd, max(nbytes, 1), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        import ctypes

        self.pointer = ctypes.addressof(ctypes.c_char.from_buffer(self.map))

    def view(self, layout: dict):
        """The tensor at `layout` in the mapped file."""
        import torch

        size = itemsize(layout["dtype"])
        count = span(layout["shape"], layout["stride"], size)
        dtype = getattr(torch, layout["dtype"])
        if count == 0:
            return torch.empty_strided(layout["shape"], layout["stride"], dtype=dtype)
        raw = torch.frombuffer(self.map, dtype=torch.uint8, count=count, offset=layout["offset"])
        return raw.view(dtype).as_strided(layout["shape"], layout["stride"])
