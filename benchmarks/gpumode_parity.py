"""GPU MODE's own eval.py beside `judge run`, on the same submissions, on the same device, in one run.

For each selected problem of gpu-mode/reference-kernels (a directory with task.yml), in a scratch contest of its own
(its own ledger, work and cache directories):
  1. the submissions: an identical copy of the problem's submission.py, the problem's own example or correct (and
     wrong) solutions (`solutions/correct`, `solutions/wrong`, `submissions/`, ...: each a whole kernel file), and a
     deliberately wrong variant (submission.py with custom_kernel's result spoiled in one element); with
     --slow-variant F, a copy slowed by F of its own time in each call (SLOWED_VARIANT), which must be found slower;
  2. judge: each as a proposal (a unified diff against the kernel file; the identical copy adds a comment, since
     judge refuses an empty patch), `judge submit`, then `judge --json run --round 1 --target PROBLEM`, timed on the
     wall clock to its last verdict (the base's profile that follows has no counterpart in eval.py) and to its end,
     its verdicts read from the JSON and each candidate's stage seconds from the ledger;
  3. eval.py, unchanged, as GPU MODE's runner calls it (gpu-mode/kernelbot, run_eval.py): the task's files copied
     into a scratch directory with the submission as submission.py, the cases written one per line as
     `key: value; ...` (the benchmarks file holds only the last benchmark where task.yml's ranking_by is "last", its
     default, unless --all-benchmarks), `python eval.py MODE FILE` with POPCORN_FD naming a file it writes its
     `key: value` lines to (POPCORN_SEED from task.yml's `seed`, where it has one), in leaderboard and benchmark
     mode (--eval-modes), one submission at a time, each call timed on the wall clock;
  4. the peak of the whole GPU's used memory (NVML, else nvidia-smi, sampled every 50 ms) during judge's round and
     during each eval.py call.
It prints a Markdown table per problem and writes it to $OUT/parity.md and every number to $OUT/parity.json (when
$OUT is set, or --out). A problem that fails is a row with its error; problems past the time budget are skipped
with a line that says so.

    PYTHONPATH=$PWD python benchmarks/gpumode_parity.py --root .gpumode/problems --problems 'pmpp_v2/*' \
        [--limit-s 240] [--budget-s 510] [--eval-modes leaderboard,benchmark] [--all-benchmarks] [--dry-run]
        [--as-card-mib 81559]

--as-card-mib judges as on a smaller card (an 80 GB H100's 81,559 MiB on an H200): a ballast process holds 80% of
the memory past it, so that judge's plan is that card's, and every peak is read less the ballast, against that size.

--dry-run needs no GPU: it builds the proposals and the eval.py directories and commands, and has `judge submit`
accept every proposal (which loads the target and applies each patch to its base). Not a test: it prints numbers
for docs/judge_performance.md. It uses judge only through its command line.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import ctypes
import difflib
import json
import math
import os
import re
import shutil
import signal
import shlex
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PROBLEMS = ["pmpp_v2/*", "linalg/*", "bioml/*", "princeton/*", "helion/*"]
SUBMISSION = "@SUBMISSION@"
KERNEL_FILE = "submission.py"
# Folders of a problem that hold its own solutions, and what each kind of file is expected to get.
OWN_FOLDERS = ("solutions", "submissions", "examples")
TIMED = {"faster", "slower", "unchanged", "inconclusive", "implausible"}
SAME = {"unchanged", "inconclusive"}
IDENTICAL_COMMENT = "# judge parity benchmark: an identical copy of the kernel above"
# What the wrong variant appends: custom_kernel's result with one element of its first tensor spoiled (a float one
# moved by 1000 + 10x its size, an integer one by 1, a boolean one flipped), in a copy, so an output written in
# place into the inputs stays as the kernel left it. The copy is detached: spoiled in place through a view under
# autograd (trimul's output carries a graph), the graph saved that view of the copy, a cycle through autograd's
# nodes that no collection frees, and each call kept its output and activations (trimul's correctness runner held
# 63,344 MiB of an H200 by its twentieth case, 2026-11-29).
WRONG_VARIANT = '''

# judge parity benchmark: a deliberately wrong variant of the kernel above.
def _parity_spoil(value, spoiled):
    import torch
    if isinstance(value, torch.Tensor) and not spoiled and value.numel() > 0:
        spoiled.append(True)
        copy = value.detach().clone()
        first = (0,) * copy.dim()
        if copy.dtype == torch.bool:
            copy[first] = ~copy[first]
        elif copy.is_floating_point():
            element = copy[first].float()
            copy[first] = (element + 1000.0 + 10.0 * element.abs()).to(copy.dtype)
        elif copy.is_complex():
            copy[first] = copy[first] + 1000.0
        else:
            copy[first] = copy[first] + 1
        return copy
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*[_parity_spoil(v, spoiled) for v in value])
    if isinstance(value, (tuple, list)):
        return type(value)(_parity_spoil(v, spoiled) for v in value)
    if isinstance(value, dict):
        return {k: _parity_spoil(v, spoiled) for k, v in value.items()}
    return value


_parity_right_kernel = custom_kernel


def custom_kernel(data):
    return _parity_spoil(_parity_right_kernel(data), [])
'''


# What the slowed variant appends (--slow-variant F): custom_kernel followed, in the same call, by a delay of F times
# its own last call on inputs of the same shapes: on a GPU a `torch.cuda._sleep` on the call's stream, sized by the
# previous such call's events (no sync inside the call; the first call of a shape, a warm-up, is not delayed) at a
# rate of cycles per microsecond measured once; without CUDA a busy wait of F times this call's own host time. The
# wrapper and a delay kernel have fixed costs of their own (microseconds), so on microsecond calls the change is
# larger than F.
SLOWED_VARIANT = '''

# judge parity benchmark: the kernel above, slowed by a known fraction of its own time.
import time as _parity_time

import torch as _parity_torch

_PARITY_SLOWDOWN = {fraction!r}
_PARITY_ON_GPU = _parity_torch.cuda.is_available()
_parity_fast_kernel = custom_kernel
_parity_last = {{}}  # the shapes of a call's tensors -> its events, read at the next call of those shapes
_parity_rate = []


def _parity_shapes(value):
    if isinstance(value, _parity_torch.Tensor):
        return (tuple(value.shape), str(value.dtype), value.device.type)
    if isinstance(value, (tuple, list)):
        return tuple(_parity_shapes(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _parity_shapes(v)) for k, v in value.items())
    return None


def _parity_cycles_per_us():
    if not _parity_rate:
        start, end = (_parity_torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        _parity_torch.cuda._sleep(2_000_000)
        end.record()
        end.synchronize()
        _parity_rate.append(2_000_000 / (start.elapsed_time(end) * 1000.0))
    return _parity_rate[0]


def custom_kernel(data):
    if not _PARITY_ON_GPU:
        began = _parity_time.perf_counter()
        out = _parity_fast_kernel(data)
        ended = _parity_time.perf_counter()
        until = ended + _PARITY_SLOWDOWN * (ended - began)
        while _parity_time.perf_counter() < until:
            pass
        return out
    key = _parity_shapes(data)
    rate = _parity_cycles_per_us()
    last = _parity_last.get(key)
    start, end = (_parity_torch.cuda.Event(enable_timing=True) for _ in range(2))
    start.record()
    out = _parity_fast_kernel(data)
    end.record()
    if last is not None and last[1].query():
        _parity_torch.cuda._sleep(int(_PARITY_SLOWDOWN * last[0].elapsed_time(last[1]) * 1000.0 * rate))
    _parity_last[key] = (start, end)
    return out
'''


def log(message: str) -> None:
    print(f"[{datetime.now(timezone.utc).strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---- the pure parts: problems, submissions, proposals, eval.py's cases and output ----------------------------------

@dataclass
class Submission:
    """One kernel file both sides run: `kind` is identical, example (a problem's own correct one), wrong (a problem's
    own wrong one) or variant (ours, deliberately wrong); `source` is the file eval.py runs."""

    id: str
    kind: str
    origin: str
    source: str


def read_task(problem: Path) -> dict:
    import yaml

    task = yaml.safe_load((problem / "task.yml").read_text())
    if not isinstance(task, dict):
        raise ValueError(f"{problem / 'task.yml'}: not a mapping")
    return task


def find_problems(root: Path, patterns: list[str]) -> list[Path]:
    """The problem directories (those with a task.yml) the globs name, relative to `root`, each once, in order."""
    found: list[Path] = []
    for pattern in patterns:
        for path in sorted(root.glob(pattern)):
            if path.is_dir() and (path / "task.yml").is_file() and path not in found:
                found.append(path)
    return found


def slug(text: str) -> str:
    """A proposal id judge takes: lowercase letters, digits and hyphens."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", text.lower())).strip("-")[:60] or "x"


def defines_custom_kernel(source: str) -> bool:
    """Whether the module binds `custom_kernel` at its top level (a def, an assignment or an import)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "custom_kernel":
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "custom_kernel" for t in targets):
                return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name) == "custom_kernel" for a in node.names):
                return True
    return False


def wrong_variant(source: str) -> Optional[str]:
    """The kernel with its result spoiled, or None where it defines no custom_kernel to wrap."""
    if not defines_custom_kernel(source):
        return None
    return source.rstrip("\n") + "\n" + WRONG_VARIANT


def own_solutions(problem: Path) -> list[tuple[str, Path]]:
    """(kind, file) for each of the problem's own solutions: `wrong` where a folder on its path says so."""
    found = []
    for folder in OWN_FOLDERS:
        for path in sorted((problem / folder).rglob("*.py")) if (problem / folder).is_dir() else []:
            parts = {p.lower() for p in path.relative_to(problem).parts[:-1]}
            found.append(("wrong" if parts & {"wrong", "incorrect", "bad"} else "example", path))
    return found


def slowed_variant(source: str, fraction: float) -> Optional[str]:
    """The kernel slowed by `fraction` of its own time on every call after a shape's first, or None where it defines
    no custom_kernel to wrap."""
    if not defines_custom_kernel(source):
        return None
    return source.rstrip("\n") + "\n" + SLOWED_VARIANT.format(fraction=float(fraction))


def build_submissions(problem: Path, kernel_file: str = KERNEL_FILE, copies: int = 1,
                      slowdown: float = 0.0) -> tuple[list[Submission], list[str]]:
    """The submissions of one problem, and a note for each that could not be made; with `slowdown`, a slowed variant
    too."""
    base = normalized((problem / kernel_file).read_text())
    subs = [Submission("identical" if copies == 1 else f"identical-{n}", "identical", kernel_file, base)
            for n in range(1, copies + 1)]
    notes = []
    taken = {s.id for s in subs}
    for kind, path in own_solutions(problem):
        rel = path.relative_to(problem)
        name = slug(f"{kind}-{rel.with_suffix('').as_posix().split('/', 1)[-1]}")
        while name in taken:
            name += "-2"
        taken.add(name)
        subs.append(Submission(name, kind, rel.as_posix(), normalized(path.read_text())))
    variant = wrong_variant(base)
    if variant is None:
        notes.append(f"no wrong variant: {kernel_file} defines no custom_kernel to wrap")
    else:
        subs.append(Submission("wrong-variant", "variant", f"{kernel_file} + spoiled result", variant))
    slowed = slowed_variant(base, slowdown) if slowdown > 0 else None
    if slowed is not None:
        subs.append(Submission("slowed-variant", "slowed", f"{kernel_file} + {slowdown:.0%} delay", slowed))
    return subs, notes


def normalized(text: str) -> str:
    """LF line endings (judge takes LF patches only) and one final newline."""
    return text.replace("\r\n", "\n").rstrip("\n") + "\n"


def kernel_patch(base: str, new: str, kernel_file: str = KERNEL_FILE) -> str:
    """A unified diff that turns `base` into `new`; where they are the same, one that adds a comment (judge refuses
    an empty patch)."""
    old_lines, new_lines = base.splitlines(), new.splitlines()
    if old_lines == new_lines:
        new_lines = new_lines + [IDENTICAL_COMMENT]
    diff = difflib.unified_diff(old_lines, new_lines, f"a/{kernel_file}", f"b/{kernel_file}", lineterm="")
    return "\n".join(diff) + "\n"


EXPECTED = {"identical": "unchanged or inconclusive", "example": "as eval.py says", "wrong": "incorrect",
            "variant": "incorrect", "slowed": "slower"}
PITCH = {"identical": "An identical copy of the kernel (a comment added): judge must find it neither faster, slower "
                      "nor incorrect.",
         "example": "One of the problem's own solutions ({origin}), as a whole kernel file.",
         "wrong": "One of the problem's own wrong solutions ({origin}): it must be found incorrect.",
         "variant": "The kernel with one element of its result spoiled: it must be found incorrect.",
         "slowed": "The kernel followed in each call by a delay of a known fraction of its own time ({origin}): it "
                   "must be found slower."}


def write_proposal(folder: Path, target: str, sub: Submission, base: str, kernel_file: str = KERNEL_FILE) -> Path:
    """A proposal directory (proposal.toml, pitch.md, patch.diff) for `sub` against `base`."""
    where = folder / sub.id
    where.mkdir(parents=True, exist_ok=True)
    fields = {"id": sub.id, "title": f"{sub.kind}: {sub.origin}", "author": "parity", "target": target}
    (where / "proposal.toml").write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items())
                                         + 'round = 1\ncategory = "other"\n')
    (where / "pitch.md").write_text(PITCH[sub.kind].format(origin=sub.origin) + "\n")
    (where / "patch.diff").write_text(kernel_patch(base, sub.source, kernel_file))
    return where


def case_lines(specs: list[dict]) -> str:
    """Test or benchmark cases the way GPU MODE's runner writes them for eval.py: `key: value; key: value`."""
    return "".join("; ".join(f"{k}: {v}" for k, v in spec.items()) + "\n" for spec in specs)


def cases_for(task: dict, mode: str, all_benchmarks: bool = False) -> str:
    """What eval.py reads in `mode`: the tests, or the benchmarks (only the last where ranking_by is "last", GPU MODE's
    default, unless `all_benchmarks`)."""
    if mode == "test":
        return case_lines(task.get("tests") or [])
    text = case_lines(task.get("benchmarks") or [])
    if task.get("ranking_by", "last") == "last" and not all_benchmarks and text:
        return text.splitlines(keepends=True)[-1]
    return text


def eval_files(problem: Path, task: dict) -> list[tuple[str, Optional[Path]]]:
    """task.yml's files as (name, path), None standing for the submission; refuses a task without a files list."""
    files = task.get("files")
    if not isinstance(files, list) or not files:
        raise ValueError("task.yml has no files list, so GPU MODE could not run it")
    out = []
    for entry in files:
        name, source = entry["name"], entry["source"]
        out.append((name, None if source == SUBMISSION else (problem / source).resolve()))
    return out


def parse_popcorn(text: str) -> dict[str, str]:
    """eval.py's `key: value` lines, as GPU MODE's runner reads them (split at the first colon, stripped)."""
    result = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key or value:
            result[key.strip()] = value.strip()
    return result


def popcorn_verdict(result: dict[str, str], rc: Optional[int], mode: str) -> dict:
    """pass / fail / crashed / timed-out from what eval.py wrote and its exit status, with the first failure's
    message, the number of cases that passed, and each benchmark's mean in microseconds. The first pmpp family's
    eval.py says a leaderboard run's failed check as a test's (`test.0.status: fail`) and writes no `check` line."""
    prefix = "test" if mode == "test" else "benchmark"
    count = int(result.get(f"{prefix}-count", "0") or 0)
    failures = [(f"{kind} {i}", result.get(f"{kind}.{i}.error", "")) for kind in dict.fromkeys((prefix, "test"))
                for i in range(int(result.get(f"{kind}-count", "0") or 0)) if result.get(f"{kind}.{i}.status") == "fail"]
    if mode == "test":
        passed = sum(result.get(f"test.{i}.status") == "pass" for i in range(count))
    else:
        passed = sum(f"benchmark.{i}.mean" in result for i in range(count))
    means = [float(result[f"benchmark.{i}.mean"]) / 1000.0 for i in range(count) if f"benchmark.{i}.mean" in result]
    if rc is None:
        verdict = "timed-out"
    elif result.get("check") == "pass":
        verdict = "pass"
    elif result.get("check") == "fail" or failures:
        verdict = "fail"
    else:
        verdict = "crashed"
    message = f"{failures[0][0]}: {failures[0][1]}" if failures else ""
    return {"verdict": verdict, "cases": count, "passed": passed, "message": message[:300],
            "means_us": means, "geomean_us": geomean(means) if len(means) == count else None}


def geomean(values: list[float]) -> Optional[float]:
    good = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in good) / len(good)) if good and len(good) == len(values) else None


def judge_check(outcome: Optional[str]) -> Optional[bool]:
    """Whether judge found the kernel right (it reached a timing verdict), wrong, or neither (not run, errors)."""
    if outcome in TIMED:
        return True
    if outcome in {"incorrect", "crashed", "timed-out", "tampered", "compile-error"}:
        return False
    return None


def honest(kind: str, outcome: Optional[str], eval_pass: Optional[bool]) -> str:
    """`ok`, or what is wrong: an identical copy must be unchanged or inconclusive, a wrong one incorrect, and an
    example must be right for judge exactly where it is right for eval.py."""
    if kind == "identical":
        return "ok" if outcome in SAME else f"NO: an identical copy is {outcome}"
    if kind == "slowed":
        return "ok" if outcome == "slower" else f"NO: a slowed copy is {outcome}"
    if kind in {"wrong", "variant"}:
        if outcome == "incorrect":
            return "ok" if eval_pass is not True else "ok (eval.py passes it)"
        return f"NO: a wrong kernel is {outcome}" + (" (eval.py passes it too)" if eval_pass else "")
    right = judge_check(outcome)
    if right is None or eval_pass is None:
        return f"? judge {outcome}, eval.py {'-' if eval_pass is None else 'pass' if eval_pass else 'fail'}"
    if right == eval_pass:
        return "ok"
    return f"NO: judge {outcome}, eval.py {'pass' if eval_pass else 'fail'}"


# ---- the device: the GPU's used memory, sampled ---------------------------------------------------------------------

class _NvmlMemory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class GpuMemory:
    """The whole GPU's used and total memory in MiB: NVML through ctypes, else nvidia-smi, else nothing."""

    def __init__(self, index: int = 0, probe: bool = True):
        self.index, self.how, self.name = index, "none", ""
        if not probe:
            return
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            handle = ctypes.c_void_p()
            if lib.nvmlInit_v2() == 0 and lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)) == 0:
                self._lib, self._handle, self.how = lib, handle, "nvml"
                name = ctypes.create_string_buffer(96)
                if lib.nvmlDeviceGetName(handle, name, 96) == 0:
                    self.name = name.value.decode(errors="replace")
        except OSError:
            pass
        if self.how == "none" and shutil.which("nvidia-smi"):
            try:
                out = subprocess.run(["nvidia-smi", "-i", str(index), "--query-gpu=name", "--format=csv,noheader"],
                                     capture_output=True, text=True, timeout=20)
                if out.returncode == 0:
                    self.how, self.name = "nvidia-smi", out.stdout.strip()
            except (OSError, subprocess.TimeoutExpired):
                pass

    def as_card(self, card_mib: float, ballast_mib: float) -> None:
        """From now on read as a card of `card_mib`: the used memory less the ballast's `ballast_mib`
        (--as-card-mib)."""
        self.card_mib, self.ballast_mib = card_mib, ballast_mib
        self.name = f"{self.name} as a card of {card_mib:,.0f} MiB (a ballast of {ballast_mib:,.0f} MiB beside it)"

    def read(self) -> Optional[tuple[float, float]]:
        """(used, total) in MiB, or None; on an emulated card (as_card), its share of them."""
        reading = self._read()
        if reading is None or getattr(self, "card_mib", None) is None:
            return reading
        return max(0.0, reading[0] - self.ballast_mib), self.card_mib

    def _read(self) -> Optional[tuple[float, float]]:
        if self.how == "nvml":
            memory = _NvmlMemory()
            if self._lib.nvmlDeviceGetMemoryInfo(self._handle, ctypes.byref(memory)) == 0:
                return memory.used / 2**20, memory.total / 2**20
            return None
        if self.how == "nvidia-smi":
            out = subprocess.run(["nvidia-smi", "-i", str(self.index), "--query-gpu=memory.used,memory.total",
                                  "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20)
            used, total = (float(x) for x in out.stdout.strip().split(","))
            return used, total
        return None


# Of a card's memory, what judge's plan may use (judge.stages.budget.ROUND_SHARE): a ballast of this share of the
# memory past a smaller card leaves judge's plan what it would have on that card.
PLAN_SHARE = 0.8
BALLAST = """
import sys, torch
x = torch.empty(int(sys.argv[1]), dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.read()
"""


def ballast_bytes(total_mib: float, card_mib: float) -> int:
    """What the ballast allocates so that judge's plan on a card of `total_mib` is the plan on one of `card_mib`:
    PLAN_SHARE of the difference (judge takes PLAN_SHARE of the total less what others hold)."""
    return int(PLAN_SHARE * (total_mib - card_mib) * 2**20)


@contextlib.contextmanager
def emulated_card(memory: "GpuMemory", card_mib: Optional[float]):
    """A process holding ballast_bytes on the GPU while the block runs, `memory` read as the smaller card meanwhile
    (its used memory less what the ballast's process holds, context included). A GPU MODE problem's 80 GB H100
    measured on an H200: 2026-11-29, docs/judge_performance.md. The larger card's physical room stays: a round that
    would run the smaller one out of memory may not run out here (its peak says so), and what judge refuses before
    the base's check, from the card's total, is still the larger card's."""
    reading = memory.read() if memory.how != "none" else None
    if card_mib is None or reading is None:
        yield
        return
    if card_mib >= reading[1]:
        raise SystemExit(f"--as-card-mib {card_mib:.0f}: the GPU has {reading[1]:,.0f} MiB, no more than that")
    ballast = subprocess.Popen([sys.executable, "-c", BALLAST, str(ballast_bytes(reading[1], card_mib))],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        if ballast.stdout.readline().strip() != "ready":
            raise SystemExit("--as-card-mib: the ballast process could not allocate its memory")
        memory.as_card(card_mib, memory.read()[0] - reading[0])
        yield
    finally:
        ballast.stdin.close()
        ballast.wait(timeout=60)


class PeakSampler:
    """The peak of the GPU's used memory while a `with` block runs, sampled every `every_s` in a thread."""

    def __init__(self, memory: GpuMemory, every_s: float = 0.05):
        self.memory, self.every_s = memory, every_s
        self.before = self.peak = self.total = None
        self._stop = threading.Event()

    def _sample(self) -> None:
        reading = self.memory.read()
        if reading is not None:
            used, self.total = reading
            self.peak = used if self.peak is None else max(self.peak, used)

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self._sample()
            except Exception:  # a failed reading is a missing sample, never the end of the run
                pass

    def __enter__(self) -> "PeakSampler":
        if self.memory.how != "none":
            self._sample()
            self.before = self.peak
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.memory.how != "none":
            self._stop.set()
            self._thread.join()
            self._sample()

    def summary(self) -> dict:
        return {"peak_mib": rounded(self.peak), "before_mib": rounded(self.before), "total_mib": rounded(self.total)}


def rounded(value: Optional[float], digits: int = 1) -> Optional[float]:
    return None if value is None else round(value, digits)


# ---- running the two sides ------------------------------------------------------------------------------------------

@dataclass
class Ran:
    rc: Optional[int]  # None: killed at its time limit
    seconds: float
    stdout: str
    stderr_tail: str
    memory: dict = field(default_factory=dict)
    marks: dict = field(default_factory=dict)  # each mark asked for: the seconds of its last line on stderr


def run_process(argv: list[str], *, cwd: Path, env: dict, timeout_s: float, memory: GpuMemory, log_path: Path,
                pass_fds: tuple = (), interrupt_first: bool = False, marks: tuple[str, ...] = ()) -> Ran:
    """Run one command in a session of its own, timed on the wall clock with the GPU's memory sampled; past its
    limit it gets SIGINT first where `interrupt_first` (judge then stops its runners itself), then its group SIGKILL.
    Its stderr goes to `log_path`, as it is or, with `marks`, each line after its second since the start; `marks`: texts whose last line's time Ran.marks keeps (a judge run's last
    verdict, which a run stopped in its base's profile reached in honest seconds)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    seen: dict[str, float] = {}
    with open(log_path, "w") as err, tempfile.TemporaryFile("w+") as out, PeakSampler(memory) as sampler:
        started = time.monotonic()
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.PIPE if marks else err,
                                pass_fds=pass_fds, start_new_session=True, text=bool(marks),
                                errors="replace" if marks else None)
        pump = None
        if marks:
            def copy_lines() -> None:
                for line in proc.stderr:  # each line stamped with its second since the start: the round's timeline
                    err.write(f"{time.monotonic() - started:8.2f} {line}")
                    err.flush()
                    for mark in marks:
                        if mark in line:
                            seen[mark] = round(time.monotonic() - started, 2)

            pump = threading.Thread(target=copy_lines, daemon=True)
            pump.start()
        try:
            rc: Optional[int] = proc.wait(timeout=max(timeout_s, 1.0))
        except subprocess.TimeoutExpired:
            rc = None
            if interrupt_first:
                os.kill(proc.pid, signal.SIGINT)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        seconds = time.monotonic() - started
        if pump is not None:
            pump.join(timeout=30)
        out.seek(0)
        stdout = out.read()
    tail = log_path.read_text(errors="replace")[-2000:]
    return Ran(rc, round(seconds, 2), stdout, tail, sampler.summary(), dict(seen))


def judge_argv(ledger: Path, kernels: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "judge", "--ledger", str(ledger), "--kernels", str(kernels), "--json", *args]


def judge_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def ledger_evaluations(ledger: Path) -> dict[str, dict]:
    """Each evaluation's outcome, geomean with its interval (None where it was not timed) and stage seconds summed,
    by proposal id (the control's and the base's by their subject), the latest where there are several: what a run
    stopped at its time limit had finished."""
    with contextlib.closing(sqlite3.connect(f"file:{ledger}?mode=ro", uri=True)) as db:
        rows = db.execute(
            "select e.subject, r.proposal_id, e.outcome, e.reason, e.geomean_speedup, e.geomean_ci_low, "
            "e.geomean_ci_high, (select sum(s.seconds) from stage_results s where s.evaluation_id = e.id) "
            "from evaluations e left join revisions r on r.id = e.revision_id order by e.id").fetchall()
    return {(name if subject == "candidate" and name else subject):
            {"outcome": outcome, "reason": (reason or "")[:300], "seconds": round(seconds or 0.0, 2),
             "geomean": None if None in (geomean, low, high) else [geomean, low, high]}
            for subject, name, outcome, reason, geomean, low, high, seconds in rows}


def run_eval(problem: Path, task: dict, sub: Submission, mode: str, scratch: Path, timeout_s: float,
             memory: GpuMemory, all_benchmarks: bool = False, dry_run: bool = False,
             bytecode_dir: Optional[Path] = None) -> dict:
    """eval.py in `mode` on one submission, as GPU MODE's runner calls it; with `bytecode_dir`, its imports read and
    write their bytecode there, as judge's own do on a machine that keeps none (judge.sandbox.bytecode)."""
    where = scratch / "eval" / sub.id / (mode + ("-cached" if bytecode_dir else ""))
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    for name, path in eval_files(problem, task):
        (where / name).write_text(sub.source if path is None else path.read_text())
    cases = where / f"{mode}.txt"
    cases.write_text(cases_for(task, mode, all_benchmarks))
    main = (task.get("config") or {}).get("main", "eval.py")
    argv = [sys.executable, main, mode, cases.name]
    out = {"mode": mode, "command": f"cd {where} && POPCORN_FD=<fd> python {main} {mode} {cases.name}",
           "given": len(cases.read_text().splitlines())}
    if dry_run:
        return out | {"verdict": "dry-run"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("POPCORN_")}
    if bytecode_dir is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(bytecode_dir)
        out["command"] = f"PYTHONPYCACHEPREFIX={bytecode_dir} " + out["command"]
    if task.get("seed") is not None:
        env["POPCORN_SEED"] = str(task["seed"])
    with open(where / "popcorn.txt", "w+") as popcorn:
        env["POPCORN_FD"] = str(popcorn.fileno())
        ran = run_process(argv, cwd=where, env=env, timeout_s=timeout_s, memory=memory,
                          log_path=where / "stderr.log", pass_fds=(popcorn.fileno(),))
    result = parse_popcorn((where / "popcorn.txt").read_text(errors="replace"))
    verdict = popcorn_verdict(result, ran.rc, mode)
    if verdict["verdict"] in {"crashed", "timed-out"} and not verdict["message"]:
        verdict["message"] = last_line(ran.stderr_tail)
    return out | verdict | {"rc": ran.rc, "seconds": ran.seconds, "memory": ran.memory}


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


# A verdict's line among `judge run --json`'s events on stderr.
VERDICT_EVENT = '"kind": "verdict"'


def run_judge(problem: Path, subs: list[Submission], scratch: Path, timeout_s: float, memory: GpuMemory,
              dry_run: bool, timing_budget: Optional[float], run_args: tuple[str, ...] = ()) -> dict:
    """The submissions as proposals in a scratch contest, then one `judge run` of round 1 on the problem."""
    ledger, kernels, env = scratch / "ledger.db", problem.parent, judge_env()
    base = normalized((problem / KERNEL_FILE).read_text())
    proposals = scratch / "proposals"
    for sub in subs:
        write_proposal(proposals, problem.name, sub, base)
    out: dict[str, Any] = submit(ledger, kernels, proposals, [s.id for s in subs], scratch, min(timeout_s, 300))
    if not out["submitted"]:
        return out | {"error": "judge submit: " + "; ".join(out["refused"].values())}
    if dry_run:
        return out
    args = ["run", "--round", "1", "--target", str(problem), "--work-dir", str(scratch / "work"),
            "--cache-dir", str(scratch / "cache"), "--out", str(scratch / "reports")]
    if timing_budget:
        args += ["--timing-budget", str(timing_budget)]
    args += list(run_args)
    ran = run_process(judge_argv(ledger, kernels, *args), cwd=scratch, env=env, timeout_s=timeout_s, memory=memory,
                      log_path=scratch / "run.log", interrupt_first=True, marks=(VERDICT_EVENT,))
    out |= {"rc": ran.rc, "seconds": ran.seconds, "memory": ran.memory,
            "last_verdict_s": ran.marks.get(VERDICT_EVENT)}
    out["parts_s"] = round_parts(scratch / "run.log")
    try:
        summaries = json.loads(ran.stdout)
    except json.JSONDecodeError:
        summaries = None
    if ran.rc != 0 or not isinstance(summaries, list) or not summaries:
        out["error"] = "judge run: " + ("timed out" if ran.rc is None else json_error(ran))
    else:
        summary = summaries[0]
        out["verdicts"] = {v["proposal_id"]: {"outcome": v["outcome"], "reason": (v.get("reason") or "")[:300]}
                           for v in summary.get("verdicts", [])}
        out["time"] = summary.get("time", {})
        out["report"] = summary.get("report")
    try:
        evaluations = ledger_evaluations(ledger)
    except sqlite3.Error as error:
        out["ledger_error"] = str(error)
        return out
    out["ledger_seconds"] = {name: e["seconds"] for name, e in evaluations.items()}
    out["geomeans"] = {name: e["geomean"] for name, e in evaluations.items() if e["geomean"]}
    if "base" in evaluations:
        out["base"] = {k: evaluations["base"][k] for k in ("outcome", "reason")}
    if "verdicts" not in out:  # a run stopped early: the verdicts it had written
        out["verdicts"] = {name: {"outcome": e["outcome"], "reason": e["reason"]} for name, e in evaluations.items()
                           if name in out["accepted"]}
    return out


def round_parts(log_path: Path) -> Optional[dict]:
    """Where a round's wall clock went up to its last verdict, from its event log (each line its second and a `judge
    run --json` event): the start (probe, the base's compile), the base's check, the candidates' checks up to the
    first timing, and the timing to the last verdict, each in seconds; None where the log does not show them."""
    events = []
    try:
        for line in log_path.read_text(errors="replace").splitlines():
            at, _, text = line.strip().partition(" ")
            try:
                events.append((float(at), json.loads(text)))
            except ValueError:
                continue
    except OSError:
        return None
    first = {}
    for at, event in events:
        kind, who, stage = event.get("kind"), event.get("proposal"), str(event.get("stage", ""))
        # the timing starts with the first timing stage after the base's check: a control started beside the check
        # (a dispatch of two workers) does not start it
        key = ("base check" if (kind, who, stage) == ("stage", "(base)", "correctness") else
               "base done" if (kind, who) == ("evaluated", "(base)") else
               "timing" if kind == "stage" and who != "(base)" and stage.startswith(("timing", "the base against"))
               and "base done" in first else None)
        if key is not None:
            first.setdefault(key, at)
    verdicts = [at for at, event in events if event.get("kind") == "verdict"]
    if not verdicts or not {"base check", "base done"} <= set(first):
        return None
    timing = first.get("timing", verdicts[-1])
    return {"start": round(first["base check"], 1), "base check": round(first["base done"] - first["base check"], 1),
            "candidates' checks": round(max(0.0, timing - first["base done"]), 1),
            "timing": round(max(0.0, verdicts[-1] - timing), 1)}


def submit(ledger: Path, kernels: Path, proposals: Path, ids: list[str], scratch: Path, timeout_s: float) -> dict:
    """`judge submit` of every proposal at once; where judge refuses that (it writes all or none), each alone, so that
    one it refuses leaves the others in the round."""
    env, quiet = judge_env(), GpuMemory(probe=False)
    ran = run_process(judge_argv(ledger, kernels, "submit", str(proposals)), cwd=scratch, env=env,
                      timeout_s=timeout_s, memory=quiet, log_path=scratch / "submit.log")
    if ran.rc == 0:
        return {"submitted": len(ids), "accepted": ids, "refused": {}}
    accepted, refused = [], {}
    for name in ids:
        alone = run_process(judge_argv(ledger, kernels, "submit", str(proposals / name)), cwd=scratch, env=env,
                            timeout_s=timeout_s, memory=quiet, log_path=scratch / f"submit-{name}.log")
        if alone.rc == 0:
            accepted.append(name)
        else:
            refused[name] = json_error(alone)
    return {"submitted": len(accepted), "accepted": accepted, "refused": refused}


def json_error(ran: Ran) -> str:
    try:
        return str(json.loads(ran.stdout).get("error"))[:500]
    except (json.JSONDecodeError, AttributeError):
        return f"exit {ran.rc}: {last_line(ran.stderr_tail)}"


# The last bytes of each log that keep_logs copies: the oracle's lines on its steps' memory run to a few hundred KiB.
LOG_TAIL_BYTES = 2 << 20


def keep_logs(scratch: Path, dest: Path) -> list[str]:
    """The round's event log and each oracle's log (its memory lines put a peak on a step) copied beside parity.md,
    their last LOG_TAIL_BYTES each, so that a device run returns them whatever its driver copies: the paths kept."""
    kept = []
    for log_file in [scratch / "run.log", *sorted((scratch / "work").rglob("oracle.log"))]:
        if not log_file.is_file():
            continue
        name = "run.log" if log_file == scratch / "run.log" else "oracle-" + slug(
            log_file.relative_to(scratch / "work").parent.as_posix()) + ".log"
        with log_file.open("rb") as f:
            f.seek(max(0, log_file.stat().st_size - LOG_TAIL_BYTES))
            data = f.read()
        dest.mkdir(parents=True, exist_ok=True)
        (dest / name).write_bytes(data)
        kept.append(str(dest / name))
    return kept


def parity(problem: Path, rel: str, args, memory: GpuMemory, scratch_root: Path, deadline: float) -> dict:
    """One problem, both sides: a row of results, or the error that stopped it."""
    scratch = scratch_root / slug(rel)
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    result: dict[str, Any] = {"problem": rel}
    try:
        task = read_task(problem)
        eval_files(problem, task)
        subs, notes = build_submissions(problem, copies=args.copies, slowdown=args.slow_variant)
    except Exception as error:  # a problem we cannot read is its row's error
        return result | {"error": f"{type(error).__name__}: {error}"}
    result |= {"notes": notes, "ranking_by": task.get("ranking_by", "last"),
               "benchmarks": len(task.get("benchmarks") or []),
               "submissions": [{"id": s.id, "kind": s.kind, "origin": s.origin} for s in subs]}
    log(f"{rel}: {len(subs)} submissions; judge run")
    limit = min(args.limit_s, deadline - time.monotonic())
    try:
        if args.no_judge:
            result["judge"] = {"error": "not run (--no-judge)"}
        else:
            result["judge"] = run_judge(problem, subs, scratch, limit, memory, args.dry_run, args.timing_budget,
                                        tuple(shlex.split(args.run_args)))
    except Exception as error:
        result["judge"] = {"error": f"{type(error).__name__}: {error}"}
    if args.out:
        result["logs"] = keep_logs(scratch, Path(args.out) / slug(rel))
    eval_end = min(time.monotonic() + args.limit_s, deadline)  # eval.py's calls get as long again

    def left() -> float:
        return eval_end - time.monotonic()

    result["eval"] = {}
    # Where judge keeps its own bytecode (this machine keeps none), eval.py's leaderboard runs again with the same
    # cache: judge's ratio is shown against both.
    cached = [CACHED] if args.bytecode_dir is not None and "leaderboard" in args.eval_modes else []
    for sub in subs:
        if sub.kind == "identical" and sub.id not in ("identical", "identical-1"):
            continue  # further identical copies are the same file for eval.py
        for mode in args.eval_modes + cached:
            cap = float(task.get("ranked_timeout" if mode.startswith("leaderboard") else f"{mode}_timeout", 600) or 600)
            if not args.dry_run and left() < 5:
                result["eval"].setdefault(sub.id, {})[mode] = {"mode": mode, "verdict": "skipped",
                                                               "message": "no time left in --limit-s / --budget-s"}
                continue
            log(f"{rel}: eval.py {mode} {sub.id}")
            try:
                result["eval"].setdefault(sub.id, {})[mode] = run_eval(
                    problem, task, sub, mode.removesuffix("-cached"), scratch, min(cap, left()), memory,
                    args.all_benchmarks, args.dry_run, args.bytecode_dir if mode == CACHED else None)
            except Exception as error:
                result["eval"].setdefault(sub.id, {})[mode] = {"mode": mode, "verdict": "error",
                                                               "message": f"{type(error).__name__}: {error}"}
    result["summary"] = summarize(result, subs)
    copy_report(result, scratch, args)
    return result


def summarize(result: dict, subs: list[Submission]) -> dict:
    """The problem's figures: judge's seconds per candidate (the round's wall clock to its last verdict, else to its
    end, over its candidates), eval.py's mean seconds per submission in each mode, their ratio, the peaks, and each
    row's honesty."""
    judge, evals = result.get("judge", {}), result.get("eval", {})
    out: dict[str, Any] = {}
    # A command killed at its limit took no honest number of seconds: it counts in no mean. A judge run counts to
    # its last verdict where every candidate has one: the round's profile of its base that follows has no
    # counterpart in eval.py (it ran 198 s of cholesky_py's 452 s on an H200), and a run stopped in that profile at
    # its limit counts alike.
    if judge.get("submitted") and judge.get("last_verdict_s") and all(
            name in judge.get("verdicts", {}) for name in judge.get("accepted", [])):
        out["judge_s_per_candidate"] = round(judge["last_verdict_s"] / judge["submitted"], 2)
        out["judge_to_last_verdict"] = True
        if judge.get("rc") is None:
            out["judge_stopped_after_verdicts"] = True
    elif judge.get("seconds") is not None and judge.get("rc") is not None and judge.get("submitted"):
        out["judge_s_per_candidate"] = round(judge["seconds"] / judge["submitted"], 2)
    for mode in ("test", "benchmark", "leaderboard", CACHED):
        seconds = [e[mode]["seconds"] for e in evals.values()
                   if e.get(mode, {}).get("seconds") is not None and e[mode].get("rc") is not None]
        if seconds:
            out[f"eval_{mode.replace('-', '_')}_s_per_submission"] = round(sum(seconds) / len(seconds), 2)
    in_turn = [sum(e[m]["seconds"] for m in ("test", "benchmark", "leaderboard")) for e in evals.values()
               if all(e.get(m, {}).get("rc") is not None for m in ("test", "benchmark", "leaderboard"))]
    if in_turn:  # what GPU MODE's runner spends on a leaderboard submission: the three modes in turn
        out["eval_in_turn_s_per_submission"] = round(sum(in_turn) / len(in_turn), 2)
    own = [judge.get("ledger_seconds", {}).get(name) for name in judge.get("verdicts", {})]
    own = [x for x in own if x is not None]
    if own:  # the candidates' own stage seconds, without judge's start, the base's check and the control
        out["judge_own_s_per_candidate"] = round(sum(own) / len(own), 2)
    lb = out.get("eval_leaderboard_s_per_submission")
    if out.get("judge_s_per_candidate") and lb:
        out["ratio"] = round(out["judge_s_per_candidate"] / lb, 2)
    if out.get("judge_own_s_per_candidate") and lb:
        out["ratio_own"] = round(out["judge_own_s_per_candidate"] / lb, 2)
    lb_cached = out.get("eval_leaderboard_cached_s_per_submission")
    if out.get("judge_s_per_candidate") and lb_cached:
        out["ratio_cached"] = round(out["judge_s_per_candidate"] / lb_cached, 2)
    peaks = [e.get("memory", {}).get("peak_mib") for per in evals.values() for e in per.values()]
    peaks = [p for p in peaks if p is not None]
    out["eval_peak_mib"] = max(peaks) if peaks else None
    out["judge_peak_mib"] = judge.get("memory", {}).get("peak_mib")
    if out.get("ratio") is not None:
        out["ratio_within_bar"] = out["ratio"] <= 1.5
    total = judge.get("memory", {}).get("total_mib")
    if total and out["judge_peak_mib"] is not None:
        out["memory_within_bar"] = max(out["judge_peak_mib"], out["eval_peak_mib"] or 0) <= 0.8 * total
    verdicts = judge.get("verdicts", {})
    base = judge.get("base") or {}
    if base.get("outcome") not in (None, "unchanged", "not-run"):  # on this machine the problem cannot be judged
        out["base_failed"] = f"{base['outcome']} ({base['reason']})"
        copy = evals.get("identical") or evals.get("identical-1") or {}
        if base["outcome"] == "incorrect" and copy and all(e.get("verdict") == "pass" for e in copy.values()):
            out["base_failed_why"] = ("eval.py passed its identical copy on task.yml's seeds; judge checks inputs "
                                      "drawn from seeds of its own, on one of which the base fails the problem's own "
                                      "check")
    rows = []
    for sub in subs:
        outcome = verdicts.get(sub.id, {}).get("outcome")
        first = evals.get(sub.id) or (evals.get("identical-1", {}) if sub.kind == "identical" else {})
        said = [e["verdict"] for e in first.values() if e.get("verdict") in {"pass", "fail", "crashed"}]
        eval_pass = None if not said else all(v == "pass" for v in said)
        said_of_judge = (f"- (the base is {base['outcome']})" if "base_failed" in out
                         else honest(sub.kind, outcome, eval_pass) if outcome else "-")
        rows.append({"id": sub.id, "outcome": outcome, "eval_pass": eval_pass, "honest": said_of_judge})
    out["rows"] = rows
    return out


def copy_report(result: dict, scratch: Path, args) -> None:
    """judge's scorecard of the round, appended to scorecards.md beside parity.md (one file, since a device run
    brings back only a few)."""
    report = (result.get("judge") or {}).get("report")
    if args.out and report and Path(report).is_file():
        Path(args.out).mkdir(parents=True, exist_ok=True)
        with open(Path(args.out) / "scorecards.md", "a") as scorecards:
            scorecards.write(f"\n\n<!-- {result['problem']}: judge's scorecard of its round -->\n\n")
            scorecards.write(Path(report).read_text())


# ---- the tables -----------------------------------------------------------------------------------------------------

def seconds(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.1f}"


def mib(value: Optional[float], total: Optional[float]) -> str:
    """`9,000 MiB (90%)` of the GPU's total; the number alone without a total (a table's MiB column)."""
    if value is None:
        return "-"
    if total is None:
        return f"{value:,.0f}"
    return f"{value:,.0f} MiB ({100 * value / total:.0f}%)"


def cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")[:160]


def problem_markdown(result: dict, total_mib: Optional[float]) -> str:
    lines = [f"### {result['problem']}", ""]
    if "error" in result:
        return "\n".join(lines + [f"error: {cell(result['error'])}", ""])
    judge, summary = result.get("judge", {}), result.get("summary", {})
    total_mib = total_mib or (judge.get("memory") or {}).get("total_mib")
    if judge.get("error"):
        lines.append(f"judge: error: {cell(judge['error'])}")
    elif "seconds" not in judge:
        lines.append(f"dry run: judge submit accepted {judge.get('submitted')} proposals; eval.py's folders and "
                     "commands are in parity.json")
    if summary.get("base_failed"):
        lines.append(f"judge: the base is {cell(summary['base_failed'])}: no verdict below tells whether judge is "
                     f"right ({summary.get('base_failed_why') or 'the problem cannot run here'})")
    lb = summary.get("eval_leaderboard_s_per_submission")
    lines += [f"judge submit refused {name}: {cell(why)}" for name, why in judge.get("refused", {}).items()]
    stopped = ""
    if summary.get("judge_to_last_verdict"):
        stopped = (f" ({'stopped at its limit; ' if summary.get('judge_stopped_after_verdicts') else ''}its last "
                   f"verdict at {seconds(judge.get('last_verdict_s'))} s, the base's profile after it)")
    lines.append(f"judge: {judge.get('submitted', 0)} candidates, round {seconds(judge.get('seconds'))} s wall"
                 f"{stopped}, "
                 f"{seconds(summary.get('judge_s_per_candidate'))} s per candidate (its setup, the base's check and "
                 f"the A/A control included); peak GPU memory {mib(summary.get('judge_peak_mib'), total_mib)}")
    lines.append(f"eval.py: leaderboard {seconds(lb)} s per submission, benchmark "
                 f"{seconds(summary.get('eval_benchmark_s_per_submission'))} s"
                 + (f", test {seconds(summary.get('eval_test_s_per_submission'))} s"
                    if "eval_test_s_per_submission" in summary else "")
                 + (f", the three in turn (a GPU MODE leaderboard submission) "
                    f"{seconds(summary['eval_in_turn_s_per_submission'])} s"
                    if "eval_in_turn_s_per_submission" in summary else "")
                 + f"; peak GPU memory {mib(summary.get('eval_peak_mib'), total_mib)}")
    ratio = summary.get("ratio")
    lines.append(f"judge / eval.py leaderboard: {'-' if ratio is None else f'{ratio:.2f}x'} (bar: at most 1.5x); "
                 f"peaks at most 80% of the GPU's memory: {yes_no(summary.get('memory_within_bar'))}; "
                 f"eval.py's benchmarks file: {cases_note(result)}")
    if summary.get("ratio_cached") is not None:
        lines.append(f"eval.py leaderboard with judge's bytecode cache (this machine keeps none of its own): "
                     f"{seconds(summary.get('eval_leaderboard_cached_s_per_submission'))} s per submission; judge / "
                     f"that: {summary['ratio_cached']:.2f}x")
    if summary.get("ratio_own") is not None:
        lines.append(f"judge's own seconds per candidate (its stages in the ledger; no start, base check or control): "
                     f"{seconds(summary.get('judge_own_s_per_candidate'))} s, {summary['ratio_own']:.2f}x eval.py "
                     "leaderboard")
    stages = (judge.get("time") or {}).get("stages_s") or {}
    own = judge.get("ledger_seconds", {})
    if stages:
        lines.append("judge's stages, summed over its evaluations: "
                     + ", ".join(f"{name} {value:.1f} s" for name, value in stages.items() if value)
                     + "".join(f"; the {who} {own[who]:.1f} s" for who in ("base", "control") if who in own))
    parts = judge.get("parts_s")
    if parts:
        lines.append("judge's round to its last verdict, from its event log: " + ", ".join(
            f"{name} {value:.1f} s" for name, value in parts.items()))
    lines += [f"note: {cell(n)}" for n in result.get("notes", [])]
    lines += ["", "| submission | kind | judge | judge s | eval.py leaderboard | lb s | benchmark s | eval.py peak MiB "
                  "| honest |", "|---|---|---|---:|---|---:|---:|---:|---|"]
    times, geomeans = judge.get("ledger_seconds", {}), judge.get("geomeans", {})
    rows = {r["id"]: r for r in summary.get("rows", [])}
    for sub in result["submissions"]:
        per = result.get("eval", {}).get(sub["id"], {})
        lb_run, bench = per.get("leaderboard", {}), per.get("benchmark", {})
        verdict = judge.get("verdicts", {}).get(sub["id"]) or (
            {"outcome": "refused by judge submit"} if sub["id"] in judge.get("refused", {}) else {})
        peaks = [e.get("memory", {}).get("peak_mib") for e in per.values() if e.get("memory", {}).get("peak_mib")]
        lines.append(f"| {sub['id']} | {sub['kind']} | {cell(judge_words(verdict, geomeans.get(sub['id'])))} | "
                     f"{seconds(times.get(sub['id']))} | {cell(eval_words(lb_run))} | "
                     f"{seconds(lb_run.get('seconds'))} | "
                     f"{seconds(bench.get('seconds'))} | {mib(max(peaks) if peaks else None, None)} | "
                     f"{cell(rows.get(sub['id'], {}).get('honest', '-'))} |")
    return "\n".join(lines + [""])


def judge_words(verdict: dict, geomean: Optional[list[float]] = None) -> str:
    """A verdict's outcome, with the geomean and interval the ledger holds for it where it was timed."""
    outcome = verdict.get("outcome", "-")
    if not geomean or outcome not in TIMED:
        return outcome
    return f"{outcome} {geomean[0]:.3f}x [{geomean[1]:.3f}, {geomean[2]:.3f}]"


def yes_no(value: Optional[bool]) -> str:
    return "-" if value is None else "yes" if value else "NO"


def cases_note(result: dict) -> str:
    n = result.get("benchmarks", 0)
    given = next((e["given"] for per in result.get("eval", {}).values() for m, e in per.items()
                  if m != "test" and "given" in e), None)
    return f"{'-' if given is None else given} of {n} benchmarks (ranking_by: {result.get('ranking_by')})"


def eval_words(run: dict) -> str:
    if not run:
        return "-"
    verdict = run.get("verdict", "-")
    if verdict == "pass" and run.get("geomean_us"):
        return f"pass, {run['geomean_us']:.1f} us"
    return f"{verdict}: {run['message']}" if run.get("message") else verdict


def report_markdown(results: list[dict], header: dict, skipped: list[str]) -> str:
    total = header.get("total_mib")
    out = ["# judge beside GPU MODE's eval.py", "",
           f"{header['started']} · {header['device']} · {header['memory_how']} · python {header['python']}"
           f" · modes {', '.join(header['eval_modes'])}" + (" · dry run" if header.get("dry_run") else "")
           + (f" · {header['bytecode']}" if header.get("bytecode") else "")
           + (f" · {header['warm']}" if header.get("warm") else ""), ""]
    for result in results:
        out.append(problem_markdown(result, total))
    out += [f"skipped: {s}" for s in skipped]
    return "\n".join(out).rstrip("\n") + "\n"


# ---- main -----------------------------------------------------------------------------------------------------------

# What the machine's first Python to use the GPU pays and no later one does: reading torch's and CUDA's libraries
# from disk into the page cache. judge's round ran first on a fresh H200 and paid it (amd/fp8-mm: its compile 4.9 s,
# the base's check 8.9 s, against 2.4 s and 5.3 s on a machine that had run a round before; 2026-12-01), eval.py
# after it did not.
WARM_CODE = "import torch; torch.cuda.init() if torch.cuda.is_available() else None; torch.zeros(1).sum()"


def warm_machine(timeout_s: float = 300.0) -> str:
    """Read the libraries both sides load into the page cache before either is timed (WARM_CODE in a child, its
    own bytecode cache off); the header's words for what it took."""
    started = time.monotonic()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        done = subprocess.run([sys.executable, "-c", WARM_CODE], env=env, capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"the machine's warm-up (torch imported, a CUDA context made) did not end in {timeout_s:.0f} s"
    seconds = time.monotonic() - started
    if done.returncode != 0:
        return f"the machine's warm-up failed after {seconds:.1f} s: {last_line(done.stderr.decode(errors='replace'))}"
    return f"machine warmed first ({seconds:.1f} s: torch imported, a CUDA context made, in a child of its own)"


CACHED = "leaderboard-cached"  # eval.py's leaderboard mode again, with judge's bytecode cache


def parse_args(argv: Optional[list[str]] = None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT / ".gpumode" / "problems",
                        help="gpu-mode/reference-kernels' problems/ folder")
    parser.add_argument("--problems", nargs="+", default=None,
                        help=f"globs relative to --root (default: {' '.join(DEFAULT_PROBLEMS)}); also PROBLEMS, "
                             "space-separated")
    parser.add_argument("--limit-s", type=float, default=240.0,
                        help="wall-clock seconds for judge's round of a problem, and again for its eval.py calls")
    parser.add_argument("--budget-s", type=float, default=510.0,
                        help="seconds for the whole run; problems that would start past it are skipped")
    parser.add_argument("--min-start-s", type=float, default=120.0,
                        help="a problem starts only with at least this many seconds of --budget-s left")
    parser.add_argument("--eval-modes", default="leaderboard,benchmark",
                        help="eval.py's modes, comma-separated: leaderboard, benchmark, test")
    parser.add_argument("--no-judge", action="store_true",
                        help="eval.py alone (judge's side run elsewhere, e.g. on another GPU of the host at once)")
    parser.add_argument("--all-benchmarks", action="store_true",
                        help="give eval.py every benchmark even where ranking_by is 'last'")
    parser.add_argument("--copies", type=int, default=1, help="identical copies of submission.py judge judges")
    parser.add_argument("--slow-variant", type=float, default=0.0, metavar="F",
                        help="also a copy slowed by F of its own time per call (0.1: 10%%), which must be found slower")
    parser.add_argument("--timing-budget", type=float, help="judge run --timing-budget")
    parser.add_argument("--no-warm-machine", dest="warm_machine", action="store_false",
                        help="skip the warm-up that reads torch's and CUDA's libraries into the page cache before "
                             "the first round (then the first side to run pays it)")
    parser.add_argument("--run-args", default="", metavar="ARGS",
                        help="more arguments for `judge run`, one string (e.g. '--gpus all' for a Ray round)")
    parser.add_argument("--gpu", type=int, help="the GPU whose memory is sampled (NVML index; default: the one "
                                                "CUDA_VISIBLE_DEVICES names first, else 0)")
    parser.add_argument("--as-card-mib", type=float,
                        help="judge as on a smaller card of this many MiB (an 80 GB H100: 81559): a ballast process "
                             "holds 80%% of the memory past it, so judge's plan is that card's; every peak is then "
                             "read less the ballast, against this size")
    parser.add_argument("--scratch", type=Path, help="where the scratch contests go (default: a temporary folder)")
    parser.add_argument("--out", default=os.environ.get("OUT"), help="folder for parity.md and parity.json ($OUT)")
    parser.add_argument("--dry-run", action="store_true",
                        help="no GPU: build proposals and eval.py's folders, have judge submit accept them")
    args = parser.parse_args(argv)
    args.problems = args.problems or (os.environ.get("PROBLEMS", "").split() or DEFAULT_PROBLEMS)
    args.eval_modes = [m.strip() for m in args.eval_modes.split(",") if m.strip()]
    args.bytecode_dir = None  # judge's bytecode cache on this machine (run_all looks)
    unknown = set(args.eval_modes) - {"test", "benchmark", "leaderboard"}
    if unknown:
        parser.error(f"--eval-modes: unknown {', '.join(sorted(unknown))}")
    # The rounds run where CUDA_VISIBLE_DEVICES says; a peak read off another GPU is another run's (an H200 host,
    # 2026-11-30: `--gpu 0` beside CUDA_VISIBLE_DEVICES=1 reported GPU 0's round's peak for GPU 1's).
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    first = visible.split(",")[0].strip()
    if args.gpu is None:
        args.gpu = int(first) if first.isdigit() else 0
    elif visible.isdigit() and args.gpu != int(visible):
        parser.error(f"--gpu {args.gpu}: the rounds run on GPU {visible} (CUDA_VISIBLE_DEVICES={visible}), whose "
                     f"memory is the one to sample; give --gpu {visible} or leave it out")
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    deadline = started + args.budget_s
    memory = GpuMemory(args.gpu, probe=not args.dry_run)
    with emulated_card(memory, None if args.dry_run else args.as_card_mib):
        return run_all(args, memory, deadline)


def run_all(args, memory: GpuMemory, deadline: float) -> int:
    """Every selected problem in turn, the tables written after each."""
    reading = memory.read() if memory.how != "none" else None
    header = {"started": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "device": memory.name or "no GPU found", "memory_how": f"memory: {memory.how}",
              "total_mib": rounded(reading[1]) if reading else None, "python": sys.version.split()[0],
              "eval_modes": args.eval_modes, "dry_run": args.dry_run, "root": str(args.root),
              "all_benchmarks": args.all_benchmarks}
    args.root = args.root.resolve()  # judge runs each contest from a scratch directory of its own
    sys.path.insert(0, str(ROOT))
    from judge.sandbox import bytecode

    args.bytecode_dir = None if args.dry_run else bytecode.cache_dir()
    if args.bytecode_dir is not None:  # a cache's first round fills it: say whether this run found it warm
        header["bytecode"] = (f"judge's bytecode cache {args.bytecode_dir}: "
                              f"{sum(1 for _ in args.bytecode_dir.rglob('*.pyc'))} files at the start")
    if not args.dry_run and args.warm_machine:
        header["warm"] = warm_machine()
    problems = find_problems(args.root, args.problems)
    if not problems:
        print(f"no problem directory (with a task.yml) matches {args.problems} under {args.root}", file=sys.stderr)
        return 2
    scratch_root = args.scratch or Path(tempfile.mkdtemp(prefix="judge-parity-"))
    if args.out and (Path(args.out) / "scorecards.md").exists():
        (Path(args.out) / "scorecards.md").unlink()  # this run's scorecards only
    results, skipped = [], []
    for problem in problems:
        rel = problem.relative_to(args.root).as_posix()
        if not args.dry_run and deadline - time.monotonic() < args.min_start_s:
            skipped.append(f"{rel}: not started, less than {args.min_start_s:.0f} s of --budget-s "
                           f"({args.budget_s:.0f} s) left")
            log(skipped[-1])
            continue
        try:
            results.append(parity(problem, rel, args, memory, scratch_root, deadline))
        except Exception as error:  # one problem's failure is its row, never the end of the run
            results.append({"problem": rel, "error": f"{type(error).__name__}: {error}"})
        write(results, header, skipped, args)
    text = write(results, header, skipped, args)
    print(text)
    return 0


def write(results: list[dict], header: dict, skipped: list[str], args) -> str:
    text = report_markdown(results, header, skipped)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "parity.md").write_text(text)
        (out / "parity.json").write_text(json.dumps({"header": header, "problems": results, "skipped": skipped},
                                                    indent=1, default=str) + "\n")
    return text


if __name__ == "__main__":
    sys.exit(main())
