"""Does a kernel run slower on inputs mapped from another process than on memory of its own? A probe for one GPU
machine.

On 2026-11-28 cholesky_py's timed calls at n=16384 and n=32768 ran 20-100 times slower inside judge's timed pairs
than the same cholesky_ex in a plain process. This probe takes apart what a timed runner's call had that a plain
process's does not, one thing at a time, and found it (an H200, 2026-11-28, docs/judge_performance.md): reading memory
mapped from another process (CUDA IPC) across rows, as cholesky_ex's first copy does, ran a thousand times slower;
memory-order reads did not. Rows: the matrix in torch's allocation, the same seen through __cuda_array_interface__,
a cuMemAlloc of the process's own, its own cuMemAlloc written by another process that maps it (what judge does
now), and mapped from another process (what judge did); with --all-placements also a stopped second process mapping
it, pinning to two cores, the runner's confinement (judge.sandbox.confine) and offsets below a page.

    python3 benchmarks/shared_input_probe.py [--sizes 8192,16384,32768] [--reps 3] [--all-placements]

prints one line per size and placement: the medians of cholesky_ex, of a transposing copy and of a matmul, in ms.
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
    print(json.dumps(_three(torch, matrix, reps)), flush=True)


def _three(torch, matrix, reps: int) -> dict:
    """cholesky_ex, a transposing copy (what cholesky_ex does first: its result is column-major) and a matmul."""
    return {"cholesky_ms": round(_timed(torch, lambda: torch.linalg.cholesky_ex(matrix, check_errors=False), reps), 1),
            "transpose_ms": round(_timed(torch, lambda: matrix.mT.contiguous(), reps), 1),
            "matmul_ms": round(_timed(torch, lambda: matrix @ matrix, reps), 1)}


def owner(n: int, reps: int) -> None:
    """The other way round: this process allocates (cuMemAlloc) and exports the matrix's memory, the parent maps
    it and writes the matrix in, then this process times the calls on memory of its own."""
    import torch

    from judge.boundary import cuda_ipc

    torch.zeros(1, device="cuda")
    area = cuda_ipc.Exported(n * n * 4)
    print(area.handle, flush=True)
    sys.stdin.readline()
    matrix = cuda_ipc.view(area.pointer, {"offset": 0, "dtype": "float32", "shape": [1, n, n],
                                          "stride": [n * n, n, 1]})
    print(json.dumps(_three(torch, matrix, reps)), flush=True)


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
        return json.loads(lines[-1]) if lines else {"cholesky_ms": "-", "transpose_ms": "-", "matmul_ms": "-"}
    finally:
        if peer is not None:
            os.kill(peer.pid, signal.SIGKILL)
            peer.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8192,16384,32768")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--importer", nargs=5, metavar=("HANDLE", "N", "SHIFT", "REPS", "MODE"), help=argparse.SUPPRESS)
    parser.add_argument("--owner", nargs=2, metavar=("N", "REPS"), help=argparse.SUPPRESS)
    parser.add_argument("--all-placements", action="store_true",
                        help="also the stopped peer, the pinned cores, confinement and the offsets (each was no cause)")
    args = parser.parse_args()
    if args.owner:
        owner(int(args.owner[0]), int(args.owner[1]))
        return 0
    if args.importer:
        handle, n, shift, reps, mode = args.importer
        importer(handle, int(n), int(shift), int(reps), mode)
        return 0
    import torch

    from judge.boundary import cuda_ipc

    print(f"{torch.cuda.get_device_name()} · torch {torch.__version__} · {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print("| n | placement | cholesky_ex ms | transposing copy ms | matmul ms |\n|---:|---|---:|---:|---:|")

    def row(n: int, where: str, got: dict) -> None:
        print(f"| {n} | {where} | {got['cholesky_ms']} | {got['transpose_ms']} | {got['matmul_ms']} |", flush=True)

    layout = {"offset": 0, "dtype": "float32"}
    for n in (int(s) for s in args.sizes.split(",")):
        layout.update(shape=[1, n, n], stride=[n * n, n, 1])
        spd = _spd(torch, n)
        row(n, "its own allocation (torch's allocator)", _three(torch, spd, args.reps))
        row(n, "the same memory seen through __cuda_array_interface__ (cuda_ipc.view)",
            _three(torch, cuda_ipc.view(spd.data_ptr(), layout), args.reps))
        own = cuda_ipc.Exported(spd.numel() * 4)
        mine = cuda_ipc.view(own.pointer, layout)
        mine.copy_(spd)
        row(n, "a cuMemAlloc of its own, exported (cuda_ipc.Exported), not mapped elsewhere",
            _three(torch, mine, args.reps))
        mine = None
        own.free()
        owner_child = subprocess.Popen([sys.executable, __file__, "--owner", str(n), str(args.reps)],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        mapped = cuda_ipc.Imported(owner_child.stdout.readline().strip())
        theirs = cuda_ipc.view(mapped.pointer, layout)
        torch.cuda.synchronize()
        start = time.perf_counter()
        theirs.copy_(spd)
        torch.cuda.synchronize()
        write_ms = (time.perf_counter() - start) * 1e3
        owner_child.stdin.write("go\n")
        owner_child.stdin.flush()
        got = json.loads(owner_child.communicate(timeout=600)[0].strip().splitlines()[-1])
        row(n, f"the runner's own cuMemAlloc, mapped by the writer (its write of the matrix: {write_ms:.1f} ms)", got)
        theirs = None
        mapped.close()
        area = cuda_ipc.Exported(spd.numel() * 4 + 4096)
        for shift in SHIFTS if args.all_placements else (0,):
            view = cuda_ipc.view(area.pointer, {"offset": shift, "dtype": "float32", "shape": [1, n, n],
                                                "stride": [n * n, n, 1]})
            view.copy_(spd)
            torch.cuda.synchronize()
            for stopped_peer, mode in ((False, "plain"), (True, "plain"), (True, "pinned"), (True, "confined")):
                if (shift or not args.all_placements) and (mode != "plain" or stopped_peer):
                    continue  # the runner's setting is taken apart at offset 0; the offsets on their own
                got = _imported(area.handle, n, shift, args.reps, mode, stopped_peer)
                where = f"IPC-mapped, offset {shift} B" + (", a stopped peer maps it too" if stopped_peer else "")
                where += {"plain": "", "pinned": ", pinned to two cores", "confined": ", pinned and confined"}[mode]
                row(n, where, got)
        area.free()
        spd = None  # its memory back before the next size
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
