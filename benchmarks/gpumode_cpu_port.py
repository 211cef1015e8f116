"""A CPU copy of GPU MODE problems, so that judge's whole round (the boundary, the oracle, the checks, the timing)
meets their real contracts and checkers on a machine without a GPU.

For each selected problem of a gpu-mode/reference-kernels checkout it writes, under OUT, the problem's family
folder (its utils.py and eval.py beside it, as task.yml's `../` sources expect) with:
  - every Python file's CUDA device strings made "cpu" (`device="cuda"`, `'cuda'`, `.cuda()`) and
    `torch.cuda.synchronize()` made a no-op: a heuristic, enough for problems written in plain torch; a
    reference that needs the GPU itself (FP8 scaled matmuls, Triton) does not port and fails its base check;
  - a submission.py that imports a GPU-only package (helion, triton) replaced by the reference run as the kernel;
  - task.yml's tests cut to the first --tests and its benchmarks to the first --benchmarks tests (a CPU copy of
    a benchmark sized for an H100 would take hours);
  - a judge.toml with `arch = "cpu"`.
Nothing of the problems is kept in this repository; the copy is made where it is run.

    python benchmarks/gpumode_cpu_port.py --root .gpumode/problems --out /tmp/cpu-problems linalg/qr_py 'helion/*'
    PYTHONPATH=$PWD python benchmarks/gpumode_parity.py --root /tmp/cpu-problems --problems 'linalg/qr_py' \\
        --eval-modes= --scratch /tmp/cpu-scratch

(the second runs judge alone on the copies: GPU MODE's eval.py needs a GPU). Not a test: it found, on a 2-core VM
on 2026-11-28, that judge's oracle ran qr_py's check 56 times slower than a plain process (torch's threads
sized for two cores, pinned to one).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

import yaml

GPU_ONLY_IMPORTS = re.compile(r"^\s*(import|from)\s+(helion|triton)\b", re.M)
REFERENCE_AS_KERNEL = "\n\ndef custom_kernel(data):\n    return ref_kernel(data)\n"


def on_cpu(text: str) -> str:
    """A problem's Python file with its CUDA device strings made "cpu" and its syncs made no-ops."""
    text = re.sub(r"torch\.cuda\.synchronize\(\)", "None", text)
    return text.replace('"cuda"', '"cpu"').replace("'cuda'", "'cpu'").replace(".cuda()", ".cpu()")


def port(root: Path, out: Path, problem: str, tests: int, benchmarks: int) -> Path:
    """Write the CPU copy of `problem` (FAMILY/NAME under `root`) under `out`; its directory."""
    family, name = problem.split("/")
    source = root / family / name
    (out / family).mkdir(parents=True, exist_ok=True)
    for shared in (root / family).iterdir():  # utils.py, eval.py and the like, which task.yml takes from ../
        if shared.is_file():
            (out / family / shared.name).write_text(on_cpu(shared.read_text()))
    copy = out / family / name
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(source, copy)
    for path in copy.rglob("*.py"):
        path.write_text(on_cpu(path.read_text()))
    submission = copy / "submission.py"
    if GPU_ONLY_IMPORTS.search(submission.read_text()):
        submission.write_text((copy / "reference.py").read_text() + REFERENCE_AS_KERNEL)
    task = yaml.safe_load((copy / "task.yml").read_text())
    task["benchmarks"] = task["tests"][:benchmarks]
    task["tests"] = task["tests"][:tests]
    (copy / "task.yml").write_text(yaml.safe_dump(task, sort_keys=False))
    (copy / "judge.toml").write_text('arch = "cpu"  # a CPU copy (benchmarks/gpumode_cpu_port.py)\n')
    return copy


def selected(root: Path, patterns: list[str]) -> list[str]:
    """FAMILY/NAME of each problem directory (one with a task.yml) that a pattern names."""
    found = []
    for pattern in patterns:
        found += sorted(str(p.parent.relative_to(root)) for p in root.glob(f"{pattern}/task.yml"))
    return list(dict.fromkeys(found))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problems", nargs="+", help="FAMILY/NAME, or a glob such as 'linalg/*'")
    parser.add_argument("--root", type=Path, required=True, help="the checkout's problems/ folder")
    parser.add_argument("--out", type=Path, required=True, help="where the CPU copies go")
    parser.add_argument("--tests", type=int, default=3, help="how many of each problem's tests to keep")
    parser.add_argument("--benchmarks", type=int, default=2, help="how many of its first tests to time")
    args = parser.parse_args(argv)
    problems = selected(args.root, args.problems)
    if not problems:
        print(f"no problem under {args.root} matches {' '.join(args.problems)}", file=sys.stderr)
        return 2
    for problem in problems:
        print(port(args.root, args.out, problem, args.tests, args.benchmarks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
