"""The host area of the exchange (judge.boundary.exchange): a file per runner for its CPU tensors, which the oracle
reads and writes with pread/pwrite only (never mapped on its side, so that a runner that truncates its file cannot
fault the oracle) and the runner maps shared."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .exchange import ExchangeError, dtype_name, itemsize, span


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
