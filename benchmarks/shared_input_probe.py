"""Does a kernel run slower on judge's shared inputs than on memory of its own? A probe for one GPU machine.

On 2026-11-28 cholesky_py's timed calls at n=16384 and n=32768 ran 20-100 times slower inside judge's timed pairs
(the runner waited 17.5 s in torch.cuda.synchronize during a warm-up of two calls) than the same cholesky_ex in a
plain process (44 ms and 289 ms on an H200, pinned to two cores or not), while the same runners' correctness calls
were fast. This probe takes apart what a timed runner's call has that a plain process's does not, one thing at a time: the
input in the oracle's allocation mapped by CUDA IPC (judge.boundary.cuda_ipc, as a correctness case's block is), at
an offset below a page drawn per pair (judge.stages.seeds.SHIFT_STEP), a second runner that maps it too and is
stopped (SIGSTOP) while the first calls, the pair's two cores, and the runner's confinement (seccomp, Landlock,
namespaces: judge.sandbox.confine).

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


def importer(handle: str, n: int, shift: int, reps: int, mode: str) -> None:
    """In a process of its own: map the exporter's allocation and time calls on the matrix at `shift`; `mode`:
    "hold" only maps it and waits, as a pair's stopped runner does; "pinned" runs on the last two cores, as a
    timed pair does; "confined" also confines itself as a runner does (judge.sandbox.confine: seccomp, Landlock,
    namespaces) after mapping, before the calls."""
    import torch

    from judge.boundary import cuda_ipc

    torch.zeros(1, device="cuda")
    mapped = cuda_ipc.Imported(handle)
    matrix = cuda_ipc.view(mapped.pointer, {"offset": shift, "dtype": "float32", "shape": [1, n, n],
                                            "stride": [n * n, n, 1]})
    if mode == "hold":
        print("mapped", flush=True)
        time.sleep(3600)
    if mode in ("pinned", "confined"):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[-2:])
    if mode == "confined":
        import tempfile

        from judge.sandbox import confine

        scratch = Path(tempfile.mkdtemp())
        print(json.dumps({"confinement": confine.apply(confine.Policy(
            writable=[scratch], readable=confine.system_readable(), network=False)).to_dict()}), file=sys.stderr)
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


def _imported(handle: str, n: int, shift: int, reps: int, mode: str, stopped_peer: bool) -> dict:
    """One importer's times, with a stopped peer mapping the same allocation where `stopped_peer`."""
    peer = None
    if stopped_peer:
        peer = _child([handle, str(n), str(shift), "1", "hold"], start_new_session=True)
        peer.stdout.readline()
        os.kill(peer.pid, signal.SIGSTOP)
    try:
        done = _child([handle, str(n), str(shift), str(reps), mode])
        lines = done.communicate(timeout=600)[0].strip().splitlines()
        return json.loads(lines[-1]) if lines else {"cholesky_ms": "-", "matmul_ms": "-"}
    finally:
        if peer is not None:
            os.kill(peer.pid, signal.SIGKILL)
            peer.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8192,16384,32768")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--importer", nargs=5, metavar=("HANDLE", "N", "SHIFT", "REPS", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.importer:
        handle, n, shift, reps, mode = args.importer
        importer(handle, int(n), int(shift), int(reps), mode)
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
            for stopped_peer, mode in ((False, "plain"), (True, "plain"), (True, "pinned"), (True, "confined")):
                if shift and mode != "plain":
                    continue  # the runner's setting is taken apart at offset 0; the offsets on their own
                got = _imported(area.handle, n, shift, args.reps, mode, stopped_peer)
                where = f"IPC-mapped, offset {shift} B" + (", a stopped peer maps it too" if stopped_peer else "")
                where += {"plain": "", "pinned": ", pinned to two cores", "confined": ", pinned and confined"}[mode]
                print(f"| {n} | {where} | {got['cholesky_ms']} | {got['matmul_ms']} |", flush=True)
        area.free()
        spd = None  # its memory back before the next size
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
