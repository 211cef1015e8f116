"""The GPU clock's wait before a timed call, which the runner's host ends once the call's launches are in.

The GPU clock times a call on its stream, so the stream must hold the call's launches before the GPU reaches
them: a wait queued ahead of the call keeps the GPU from starting on the first launch while the host is still
making the next. A fixed spin (torch.cuda._sleep) has to outlast the slowest launch it may meet, so judge spun three
times a launch's typical time (a launch of 0.44 ms cost fp8-mm's every timed call 1.4 ms of spin, H200,
2026-12-01). This wait is a one-thread kernel that reads a word of host memory over the bus: it ends once that word
holds the call's code and at least `least` cycles have passed, and at `most` cycles whatever the word holds. The
runner writes the code after the call returns, so a late launch is still hidden and a kernel that synchronizes
inside its call waits no longer than it did behind the fixed spin.

The wait's start and end lie outside the timed interval: on an H200 a kernel's time was the same after waits of
0.3, 1.4 and 4 ms (within 0.3%), and a word written after 100 and 1,000 us of host work ended waits of 122 and
1,024 us (2026-12-01, benchmarks/gpu_wait_check.py; docs/judge_performance.md).

The kernel is PTX, which the CUDA driver compiles when the runner loads it (87 ms on an H200), before any contestant
code runs in the process; a nonce in the PTX keeps the driver's compile cache, which lives in the workspace a
contestant can write, from ever handing back a kernel of its making for judge's own. The launch goes through the
driver with ctypes; the frame (judge.boundary.callframe) checks before each launch that none of the ctypes objects
it reads was changed, and spins as before when one was.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Any

# The page the wait reads, in 64-bit words: the word the runner writes after the call, the call's code, and the
# least and most cycles of the wait.
FLAG, CODE, LEAST, MOST = 0, 1, 2, 3
PAGE_BYTES = 64
_CU_MEMHOSTALLOC_PORTABLE, _CU_MEMHOSTALLOC_DEVICEMAP = 0x1, 0x2
KERNEL = b"judge_gpu_wait"

PTX = """.version 7.0
.target sm_70
.address_size 64
// judge.boundary.gpu_wait: %s
.visible .entry judge_gpu_wait(.param .u64 page)
{
    .reg .pred %%p<4>;
    .reg .b64 %%rd<12>;
    ld.param.u64 %%rd1, [page];
    ld.volatile.global.u64 %%rd2, [%%rd1+8];
    ld.volatile.global.u64 %%rd3, [%%rd1+16];
    ld.volatile.global.u64 %%rd4, [%%rd1+24];
    mov.u64 %%rd5, %%clock64;
WAIT:
    mov.u64 %%rd6, %%clock64;
    sub.u64 %%rd7, %%rd6, %%rd5;
    setp.ge.u64 %%p1, %%rd7, %%rd4;
    @%%p1 bra DONE;
    setp.lt.u64 %%p2, %%rd7, %%rd3;
    @%%p2 bra WAIT;
    ld.volatile.global.u64 %%rd8, [%%rd1];
    setp.ne.u64 %%p3, %%rd8, %%rd2;
    @%%p3 bra WAIT;
DONE:
    ret;
}
"""


@dataclass
class GpuWait:
    """What the frame needs to queue the wait and end it: the ctypes objects of the launch, and the page."""

    launch: Any  # cuLaunchKernel, a ctypes function with no argtypes, no errcheck, its restype c_int
    function: ctypes.c_void_p  # the CUfunction
    stream: ctypes.c_void_p  # the stream the frame times on (set for each stretch: set_stream)
    params: Any  # the kernel's parameter array: one pointer, to `address`
    address: ctypes.c_uint64  # the page's device address
    page: memoryview  # the page, as 64-bit words the host writes
    host: int  # the page's host address (kept allocated for the process's life)

    def pins(self) -> tuple:
        """The ctypes objects whose bytes the launch reads, each as a byte view (the frame compares them with
        what they held when the stretch began)."""
        return tuple(memoryview(obj) for obj in (self.launch, self.function, self.stream, self.params, self.address))

    def set_stream(self, handle: int) -> None:
        self.stream.value = handle or None


_made: GpuWait | None = None
_tried = False


def load() -> GpuWait | None:
    """The process's wait, made on first use; None where it cannot be (no CUDA driver library, a driver that
    refuses the PTX, no host memory the device maps): the frame then spins for `most` cycles, as it did before.
    Call only with the process's CUDA context current and before any contestant code is imported."""
    global _made, _tried
    if _tried:
        return _made
    _tried = True
    try:
        _made = _load()
    except (OSError, AttributeError, RuntimeError):
        _made = None
    return _made


def _load() -> GpuWait | None:
    cuda = ctypes.CDLL("libcuda.so.1")
    context = ctypes.c_void_p()
    if cuda.cuCtxGetCurrent(ctypes.byref(context)) != 0 or not context.value:
        return None
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    source = (PTX % os.urandom(16).hex()).encode() + b"\0"
    if cuda.cuModuleLoadData(ctypes.byref(module), source) != 0:
        return None
    if cuda.cuModuleGetFunction(ctypes.byref(function), module, KERNEL) != 0:
        return None
    host = ctypes.c_void_p()
    if cuda.cuMemHostAlloc(ctypes.byref(host), PAGE_BYTES, _CU_MEMHOSTALLOC_PORTABLE | _CU_MEMHOSTALLOC_DEVICEMAP):
        return None
    address = ctypes.c_uint64()
    if cuda.cuMemHostGetDevicePointer_v2(ctypes.byref(address), host, 0) != 0:
        return None
    page = memoryview((ctypes.c_char * PAGE_BYTES).from_address(host.value)).cast("B").cast("Q")
    for word in range(len(page)):
        page[word] = 0
    params = (ctypes.c_void_p * 1)(ctypes.addressof(address))
    launch = cuda.cuLaunchKernel  # argtypes None: ints pass as C ints, ctypes objects as what they hold
    return GpuWait(launch, function, ctypes.c_void_p(), params, address, page, host.value)



def frame_primitives(wait: GpuWait) -> tuple[dict, dict]:
    """What judge.boundary.callframe binds before the kernel's import: the C-level callables it launches the wait
    and checks its objects with, and the objects, with the bytes they hold now."""
    import _ctypes

    getsets = _ctypes.CFuncPtr.__dict__
    values = {"c_call": _ctypes.CFuncPtr.__call__, "tobytes": memoryview.tobytes,
              "errcheck_of": getsets["errcheck"].__get__, "argtypes_of": getsets["argtypes"].__get__,
              "restype_of": getsets["restype"].__get__}
    pins = wait.pins()
    objects = {"c_int": ctypes.c_int, "wait_pins": pins, "wait_held": tuple(pin.tobytes() for pin in pins),
               "wait_launch": wait.launch, "wait_page": wait.page,
               "wait_args": (wait.function, 1, 1, 1, 1, 1, 1, 0, wait.stream, wait.params, None)}
    return values, objects
