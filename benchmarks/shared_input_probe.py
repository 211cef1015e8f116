"""Does a kernel run slower on judge's shared inputs than on memory of its own? A probe for one GPU machine.

On 2026-11-28 cholesky_py's timed calls at n=16384 and n=32768 ran 20-100 times slower inside judge's timed pairs
(the runner waited 17.5 s in torch.cuda.synchronize during a warm-up of two calls) than the same cholesky_ex in a
plain process (44 ms and 289 ms on an H200, pinned to two cores or not), while the same runners' correctness calls
were fast. A timed pair's inputs differ from a correctness case's in three ways this probe takes one at a time:
they sit in the oracle's allocation mapped by CUDA IPC (judge.boundary.cuda_ipc, as a case's block does), at an
offset below a page drawn per pair (judge.stages.seeds.SHIFT_STEP), and a second runner maps them too and is
stopped (SIGSTOP) while the first calls.

    python3 benchmarks/shared_input_probe.py [--sizes 8192,16384,32768] [--reps 3]

prints one line per size and placement: the medians of cholesky_ex and of a matmul on the same matrix, in ms.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SHIFTS = (0, 256, 3840)


def _timed(torch, call, reps: int) -> float:
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1e3


def importer(handle: str, n: int, shift: int, reps: int, hold: bool) -> None:
    """In a process of its own: map the exporter's allocation and time calls on the matrix at `shift` (or, with
    `hold`, only map it and wait, as a pair's stopped runner does)."""
    import torch

    from judge.boundary import cuda_ipc

    torch.zeros(1, device="cuda")
    mapped = cuda_ipc.Imported(handle)
    matrix = cuda_ipc.view(mapped.pointer, {"offset": shift, "dtype": "float32", "shape": [1, n, n],
                                            "stride": [n * n, n, 1]})
    if hold:
        print("mapped", flush=True)
        time.sleep(3600)
    cholesky = _timed(torch, lambda: torch.linalg.cholesky_ex(matrix, check_errors=False), reps)
    matmul = _timed(torch, lambda: matrix @ matrix, reps)
    print(json.dumps({"cholesky_ms": round(cholesky, 1), "matmul_ms": round(matmul, 1)}), flush=True)


def _spd(torch, n: int):
    a = torch.randn((1, n, n), device="cuda")
    out = (a @ a.transpose(-1, -2)) / n
    out.diagonal(dim1=-2, dim2=-1).add_(1e-2)
    return (0.5 * (out + out.transpose(-1, -2))).contiguous()


def _child(args: list[str], **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, "--importer", *args], stdout=subprocess.PIPE, text=True,
                            **kwargs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8192,16384,32768")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--importer", nargs=5, metavar=("HANDLE", "N", "SHIFT", "REPS", "HOLD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.importer:
        handle, n, shift, reps, hold = args.importer
        importer(handle, int(n), int(shift), int(reps), hold == "1")
        return 0
    import torch

    from judge.boundary import cuda_ipc

    print(f"{torch.cuda.get_device_name()} · torch {torch.__version__} · {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| n | placement | cholesky_ex ms | matmul ms |\n|---:|---|---:|---:|")
    for n in (int(s) for s in args.sizes.split(",")):
        spd = _spd(torch, n)
        own = _timed(torch, lambda: torch.linalg.cholesky_ex(spd, check_errors=False), args.reps)
        print(f"| {n} | its own allocation | {own:.1f} | {_timed(torch, lambda: spd @ spd, args.reps):.1f} |", flush=True)
        area = cuda_ipc.Exported(spd.numel() * 4 + 4096)
        for shift in SHIFTS:
            view = cuda_ipc.view(area.pointer, {"offset": shift, "dtype": "float32", "shape": [1, n, n],
                                                "stride": [n * n, n, 1]})
            view.copy_(spd)
            torch.cuda.synchronize()
            for stopped_peer in (False, True):
                peer = None
                if stopped_peer:
                    peer = _child([area.handle, str(n), str(shift), "1", "1"], start_new_session=True)
                    peer.stdout.readline()
                    os.kill(peer.pid, signal.SIGSTOP)
                try:
                    done = _child([area.handle, str(n), str(shift), str(args.reps), "0"])
                    line = done.communicate(timeout=600)[0].strip().splitlines()
                    got = json.loads(line[-1]) if line else {"cholesky_ms": "-", "matmul_ms": "-"}
                finally:
                    if peer is not None:
                        os.kill(peer.pid, signal.SIGKILL)
                        peer.wait()
                where = f"IPC-mapped, offset {shift} B" + (", a stopped peer maps it too" if stopped_peer else "")
                print(f"| {n} | {where} | {got['cholesky_ms']} | {got['matmul_ms']} |", flush=True)
        area.free()
        spd = None  # its memory back before the next size
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
