"""The GPU clock's wait (judge.boundary.gpu_wait): what the frame binds of it is C code, and on a GPU it ends at the
runner's word, never before its least, and at its most where the host never writes (a kernel that syncs inside)."""

from __future__ import annotations

import ctypes
import time

import pytest

from judge.boundary import callframe, gpu_wait


def _wait_over(launch) -> gpu_wait.GpuWait:
    page = memoryview(bytearray(gpu_wait.PAGE_BYTES)).cast("Q")
    address = ctypes.c_uint64(0)
    params = (ctypes.c_void_p * 1)(ctypes.addressof(address))
    return gpu_wait.GpuWait(launch, ctypes.c_void_p(1), ctypes.c_void_p(), params, address, page, 0)


def test_the_frame_takes_the_waits_primitives_as_c_code_and_sees_a_changed_launch():
    libc = ctypes.CDLL(None)
    wait = _wait_over(libc.getpid)
    values, objects = gpu_wait.frame_primitives(wait)
    assert callframe.not_c_level(values) == []  # else the frame would refuse to enter at all
    launch, pins = objects["wait_launch"], objects["wait_pins"]
    assert values["c_call"](launch) == libc.getpid()
    assert tuple(values["tobytes"](pin) for pin in pins) == objects["wait_held"]
    wait.function.value = 2  # what a kernel that found the object through the garbage collector could do
    launch.errcheck = lambda result, func, args: result
    assert values["tobytes"](pins[1]) != objects["wait_held"][1]
    assert values["errcheck_of"](launch) is not None
    assert values["argtypes_of"](launch) is None and values["restype_of"](launch) is objects["c_int"]
    # judge.boundary.callframe writes the page's words by number (it looks nothing up after entry)
    assert (gpu_wait.FLAG, gpu_wait.CODE, gpu_wait.LEAST, gpu_wait.MOST) == (0, 1, 2, 3)


@pytest.mark.gpu
def test_the_wait_ends_at_the_runners_word_not_before_its_least_and_at_its_most_without_it():
    torch = pytest.importorskip("torch")
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    wait = gpu_wait.load()
    assert wait is not None, "the CUDA driver did not load judge's GPU wait"
    wait.set_stream(torch.cuda.current_stream().cuda_stream)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)
    start.record()
    torch.cuda._sleep(1_000_000)
    end.record()
    end.synchronize()
    cycles_per_us = 1_000_000 / (start.elapsed_time(end) * 1e3)

    def waited(code: int, least_us: float, most_us: float, word_after_us: float | None) -> float:
        torch.cuda.synchronize()
        wait.page[gpu_wait.CODE], wait.page[gpu_wait.LEAST] = code, int(least_us * cycles_per_us)
        wait.page[gpu_wait.MOST] = int(most_us * cycles_per_us)
        start.record()
        assert wait.launch(wait.function, 1, 1, 1, 1, 1, 1, 0, wait.stream, wait.params, None) == 0
        end.record()
        if word_after_us is None:
            torch.cuda.synchronize()  # as a kernel that syncs inside its call: only the most ends the wait
        else:
            began = time.perf_counter()
            while time.perf_counter() - began < word_after_us * 1e-6:
                pass
            wait.page[gpu_wait.FLAG] = code
        end.synchronize()
        return start.elapsed_time(end) * 1e3

    assert 1_000 <= waited(1, 0, 20_000, 1_000) < 1_500  # ends 2-3 us after the word (H200, 2026-12-01)
    assert 800 <= waited(2, 800, 20_000, 0) < 1_200  # the word came first: the least holds it
    assert 2_000 * 0.95 <= waited(3, 0, 2_000, None) < 2_500  # no word (the last call's 2 is not 3): its most
