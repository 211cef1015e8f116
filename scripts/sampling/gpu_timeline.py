"""The GPU's used memory every 50 ms through NVML, with each process's share at the whole device's peak: what
`gpu_memory.py` (nvidia-smi every 2 s) cannot show, as a round's peaks last well under a second. For a device run;
stop it with a signal (it writes as it goes).

    python3 scripts/sampling/gpu_timeline.py OUT [GPU_INDEX] [LOG ...]

OUT.timeline: a line whenever the device's used memory moved by 256 MiB or more (time, used MiB, then each
process's MiB with judge's role for it, and the line counts of the LOG files, such as a round's --json events, so
that a moment can be put beside what judge was doing). OUT.peak: the same line at the highest used memory so far.
"""

import ctypes
import os
import sys
import time
from datetime import datetime, timezone

from gpu_memory import role

STEP_MIB = 256


class ProcessInfo(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong), ("gpu_instance", ctypes.c_uint),
                ("compute_instance", ctypes.c_uint)]


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def lines(path: str) -> int:
    try:
        with open(path, "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except OSError:
        return 0


def main(out: str, index: int, logs: list[str]) -> None:
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    assert nvml.nvmlInit_v2() == 0
    handle = ctypes.c_void_p()
    assert nvml.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(handle)) == 0
    processes = (getattr(nvml, "nvmlDeviceGetComputeRunningProcesses_v3", None)
                 or nvml.nvmlDeviceGetComputeRunningProcesses_v2)
    roles, last, peak = {}, -1 << 40, 0
    infos = (ProcessInfo * 256)()
    with open(out + ".timeline", "a") as timeline:
        while True:
            memory = Memory()
            nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory))
            used = memory.used >> 20
            if abs(used - last) >= STEP_MIB or used > peak:
                count = ctypes.c_uint(256)
                processes(handle, ctypes.byref(count), infos)
                shares = sorted(((infos[i].used >> 20, infos[i].pid) for i in range(count.value)), reverse=True)
                now = datetime.now(timezone.utc).strftime("%H:%M:%S.%f")[:-3]
                text = " ".join(f"{mib}:{role(pid, roles)}:{pid}" for mib, pid in shares)
                counts = " ".join(f"{os.path.basename(p)}={lines(p)}" for p in logs)
                line = f"{now} {used} | {text} | {counts}\n"
                if abs(used - last) >= STEP_MIB:
                    timeline.write(line)
                    timeline.flush()
                    last = used
                if used > peak:
                    peak = used
                    with open(out + ".peak", "w") as f:
                        f.write(line)
            time.sleep(0.05)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0, sys.argv[3:])
