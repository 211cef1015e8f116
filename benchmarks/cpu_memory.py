"""Issue 38's memory half without a GPU: a CPU problem whose one benchmark has a 1 GiB input and a 1 GiB output,
judged as `judge run --target` judges it (an identical copy of its kernel as the one proposal), in a cgroup with a
memory limit where this machine lets one be made (root and cgroup v2), else with the peak resident memory of judge's
process tree sampled. Prints the round's verdict, its seconds and the peak beside the limit.

On 2026-11-27 (before the memory plan) such a problem ran 15 minutes and lost its oracle to the out-of-memory killer
at 17.8 GB under an 18 GiB limit, and `judge run` exited 2.

    .venv/bin/python benchmarks/cpu_memory.py [--limit-gib 18] [--elements 268435456]

Not a test: it takes minutes and several GiB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CGROUP = Path("/sys/fs/cgroup")

REFERENCE = '''import torch


def generate_input(size: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(size, generator=gen),)


def ref_kernel(data):
    (x,) = data
    return x * 2.0


def check_implementation(data, output):
    return bool(torch.equal(output, ref_kernel(data))), ""
'''
KERNEL = '''import torch


def custom_kernel(data):
    (x,) = data
    return x * 2.0
'''


def problem(root: Path, elements: int) -> Path:
    """The problem directory: GPU MODE's layout, a CPU target, tests of a few thousand elements, one big benchmark."""
    target = root / "kernels" / "double_cpu"
    target.mkdir(parents=True)
    (target / "reference.py").write_text(REFERENCE)
    (target / "submission.py").write_text(KERNEL)
    (target / "task.yml").write_text(
        'files:\n  - {"name": "submission.py", "source": "@SUBMISSION@"}\n'
        '  - {"name": "reference.py", "source": "reference.py"}\nlang: "py"\n'
        'tests:\n  - {"size": 1000, "seed": 1}\n  - {"size": 4097, "seed": 2}\n'
        f'benchmarks:\n  - {{"size": {elements}, "seed": 3}}\nranking_by: "geom"\n')
    (target / "judge.toml").write_text('arch = "cpu"\n\n[tolerance]\nrtol = 0\natol = 0\n\n'
                                       '[limits]\ncheck_s = 1200\ntiming_s = 1800\n')
    proposal = root / "proposals" / "identical"
    proposal.mkdir(parents=True)
    (proposal / "proposal.toml").write_text('id = "identical"\ntitle = "The base, unchanged"\nauthor = "bench"\n'
                                            'round = 1\ntarget = "double_cpu"\n')
    (proposal / "pitch.md").write_text("An identical copy of the base kernel.\n")
    (proposal / "patch.diff").write_text(
        "--- a/submission.py\n+++ b/submission.py\n@@ -1,3 +1,4 @@\n+# an identical copy\n import torch\n \n \n")
    return target


def tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and every descendant."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        stack.extend(children.get(current, []))
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def limited_group(limit: int) -> Path | None:
    """A cgroup v2 with memory.max = `limit`, or None where this machine has no cgroup v2 memory controller or
    this process may not make one."""
    try:
        if "memory" not in (CGROUP / "cgroup.controllers").read_text().split():
            return None
    except OSError:
        return None
    group = CGROUP / f"judge-memory-{os.getpid()}"
    try:
        group.mkdir()
        (group / "memory.max").write_text(str(limit))
        return group
    except OSError:
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-gib", type=float, default=18.0)
    parser.add_argument("--elements", type=int, default=1 << 28, help="float32 elements of the benchmark's input")
    args = parser.parse_args()
    limit = int(args.limit_gib * (1 << 30))
    with tempfile.TemporaryDirectory(prefix="judge-cpu-memory-") as scratch:
        root = Path(scratch)
        target = problem(root, args.elements)
        judge = [sys.executable, "-m", "judge.cli.main", "--ledger", str(root / "ledger.db"), "--kernels",
                 str(root / "kernels")]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        subprocess.run(judge + ["submit", str(root / "proposals" / "identical")], check=True, env=env, cwd=root,
                       capture_output=True)
        group = limited_group(limit)
        started = time.monotonic()
        proc = subprocess.Popen(judge + ["--json", "run", "--round", "1", "--target", str(target)], env=env,
                                cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if group is not None:
            (group / "cgroup.procs").write_text(str(proc.pid))
        peak = [0]

        def sample():
            while proc.poll() is None:
                peak[0] = max(peak[0], tree_rss(proc.pid))
                time.sleep(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        out, err = proc.communicate()
        seconds = time.monotonic() - started
        sampler.join()
        group_peak = None
        if group is not None:
            try:
                group_peak = int((group / "memory.peak").read_text())
            except OSError:
                pass
            try:
                group.rmdir()
            except OSError:
                pass
        try:
            answer = json.loads(out)
        except ValueError:
            answer = None
        if isinstance(answer, list):
            verdicts = [(v["proposal_id"], v["outcome"]) for s in answer for v in s.get("verdicts", [])]
        else:  # judge's error object (or nothing): its line is printed below
            verdicts = []
            err = (answer or {}).get("error", err) if isinstance(answer, dict) else err
        gib = 1 << 30
        print("| elements | limit | exit | verdicts | seconds | peak RSS (tree) | cgroup memory.peak |")
        print("|---:|---:|---:|---|---:|---:|---:|")
        print(f"| {args.elements:,} ({args.elements * 4 / gib:.2f} GiB in, as much out) | "
              f"{args.limit_gib if group else '-'} GiB | {proc.returncode} | {verdicts} | {seconds:.0f} | "
              f"{peak[0] / gib:.2f} GiB | {'-' if group_peak is None else f'{group_peak / gib:.2f} GiB'} |")
        if proc.returncode:
            print(err.strip().splitlines()[-1] if err.strip() else "(no error line)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
