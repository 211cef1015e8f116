"""GPU memory one process allocates and another maps: a runner's inputs, which the oracle writes in, and after them
in the same allocation the runner's device outbox, which the oracle reads its outputs from.

Which side allocates matters. A kernel that reads its input across rows (a transposing copy, which
torch.linalg.cholesky_ex makes first) ran 1,000 times slower on memory mapped from another process than on memory
of its own (an H200, 2026-11-28: a 16384x16384 float32 transpose 2,637 ms against 1.9 ms, cholesky_ex 2,681 ms
against 44 ms), while reads and writes in memory order ran at full speed either way (a matmul 164 ms both; the
oracle's write of the matrix into a runner's memory 0.7 ms). So a runner allocates the memory its kernel reads
(cuMemAlloc: nothing else of its lives in it) and exports it; the oracle maps it (cuIpcOpenMemHandle) and
writes each set in, in memory order. CUDA's driver API through ctypes, so nothing but libcuda is needed.
"""

from __future__ import annotations

import ctypes
from typing import Any

ALIGN = 4096  # each tensor of a slot starts on its own 4 KiB boundary
_IPC_LAZY_PEER = 1  # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
_HANDLE_BYTES = 64


class IpcError(RuntimeError):
    """The driver refused: shared memory cannot be had here (the caller keeps buffers of its own)."""


_driver: Any = None


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * _HANDLE_BYTES)]


def _cuda() -> Any:
    global _driver
    if _driver is None:
        try:
            driver = ctypes.CDLL("libcuda.so.1")
        except OSError as error:
            raise IpcError(f"no CUDA driver library: {error}") from None
        pointer, size, result = ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t, ctypes.c_int
        for name, args in (("cuMemAlloc_v2", [pointer, size]), ("cuMemFree_v2", [ctypes.c_uint64]),
                           ("cuIpcGetMemHandle", [ctypes.POINTER(_Handle), ctypes.c_uint64]),
                           ("cuIpcOpenMemHandle_v2", [pointer, _Handle, ctypes.c_uint]),
                           ("cuIpcCloseMemHandle", [ctypes.c_uint64]),
                           ("cuMemGetAddressRange_v2", [pointer, ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]),
                           ("cuGetErrorName", [result, ctypes.POINTER(ctypes.c_char_p)])):
            function = getattr(driver, name)
            function.argtypes, function.restype = args, result
        _driver = driver
    return _driver


def _check(result: int, what: str) -> None:
    if result != 0:
        name = ctypes.c_char_p()
        _cuda().cuGetErrorName(result, ctypes.byref(name))
        raise IpcError(f"{what} failed: {(name.value or b'CUDA error').decode()} ({result})")


def encode(handle: _Handle) -> str:
    """A handle as text for the parent's JSON channel: every byte, NULs too (a c_char array's value stops at
    the first NUL)."""
    return ctypes.string_at(ctypes.addressof(handle), _HANDLE_BYTES).hex()


def decode(text: str) -> _Handle:
    raw = bytes.fromhex(text)
    if len(raw) != _HANDLE_BYTES:
        raise IpcError(f"a memory handle is {_HANDLE_BYTES} bytes, this one {len(raw)}")
    handle = _Handle()
    ctypes.memmove(ctypes.addressof(handle), raw, _HANDLE_BYTES)
    return handle


class Exported:
    """A dedicated device allocation in this process, with the handle other processes map it by."""

    def __init__(self, nbytes: int):
        self.nbytes = max(1, nbytes)
        pointer = ctypes.c_uint64()
        _check(_cuda().cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(self.nbytes)), "cuMemAlloc")
        self.pointer = pointer.value
        handle = _Handle()
        try:
            _check(_cuda().cuIpcGetMemHandle(ctypes.byref(handle), ctypes.c_uint64(self.pointer)), "cuIpcGetMemHandle")
        except IpcError:
            self.free()
            raise
        self.handle = encode(handle)

    def free(self) -> None:
        if self.pointer:
            _cuda().cuMemFree_v2(ctypes.c_uint64(self.pointer))
            self.pointer = 0


class Imported:
    """Another process's exported allocation, mapped into this one; `nbytes` is the allocation's size as the
    driver knows it, not as the exporter says it."""

    def __init__(self, handle_hex: str):
        handle = decode(handle_hex)
        pointer = ctypes.c_uint64()
        _check(_cuda().cuIpcOpenMemHandle_v2(ctypes.byref(pointer), handle, ctypes.c_uint(_IPC_LAZY_PEER)),
               "cuIpcOpenMemHandle")
        self.pointer = pointer.value
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        try:
            _check(_cuda().cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size),
                                                   ctypes.c_uint64(self.pointer)), "cuMemGetAddressRange")
        except IpcError:
            self.close()
            raise
        self.nbytes = size.value if base.value == self.pointer else 0

    def close(self) -> None:
        if self.pointer:
            _cuda().cuIpcCloseMemHandle(ctypes.c_uint64(self.pointer))
            self.pointer = 0


class _Bytes:
    """What torch.as_tensor needs to view raw device memory as a byte tensor."""

    def __init__(self, pointer: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (pointer, False),
                                         "version": 3, "strides": None}


def span(shape: list[int], stride: list[int], itemsize: int) -> int:
    """The bytes a strided tensor reaches from its first element."""
    if any(size == 0 for size in shape):
        return 0
    return (1 + sum((size - 1) * step for size, step in zip(shape, stride))) * itemsize


def view(pointer: int, layout: dict) -> Any:
    """The tensor of `layout` (offset, dtype, shape, stride, as `layouts` writes it) in mapped memory."""
    import torch

    dtype = getattr(torch, layout["dtype"])
    itemsize = torch.empty(0, dtype=dtype).element_size()
    nbytes = span(layout["shape"], layout["stride"], itemsize)
    if nbytes == 0:
        return torch.empty_strided(layout["shape"], layout["stride"], dtype=dtype, device="cuda")
    raw = torch.as_tensor(_Bytes(pointer + layout["offset"], nbytes), device="cuda")
    return raw.view(dtype).as_strided(layout["shape"], layout["stride"])


def layouts(tensors: list, copies: int) -> tuple[list[list[dict]], int]:
    """Where each of `tensors` (the CUDA leaves of one input set) lives in each of `copies` slots of one
    allocation, and the allocation's size."""
    offset, slots = 0, []
    for _ in range(copies):
        slot = []
        for tensor in tensors:
            nbytes = span(list(tensor.shape), list(tensor.stride()), tensor.element_size())
            slot.append({"offset": offset, "dtype": str(tensor.dtype).removeprefix("torch."),
                         "shape": list(tensor.shape), "stride": list(tensor.stride())})
            offset += -(-max(nbytes, 1) // ALIGN) * ALIGN
        slots.append(slot)
    return slots, offset
