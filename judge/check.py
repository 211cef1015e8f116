"""Correctness stage: every test of task.yml, on fresh inputs, output poisoned, each test on two seeds.

Runs in an isolated child whose cwd is the candidate's workspace. A kernel passes a test only when its
output matches the reference within the target's tolerance (and the reference's own check_implementation
agrees), contains no NaN or Inf, and stays right on a second call with other inputs (no stale caches).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from .devices import gate
from .isolation import run_isolated
from .stages import StageResult, not_run
from .targets import Target

STAGE = "correctness"
MAX_MISMATCHES = 5
# Displayed mismatches when the target sets no tolerance (its check_implementation then decides alone).
FALLBACK_RTOL = FALLBACK_ATOL = 1e-3


def run_correctness(target: Target, workspace: Path, *, timeout_s: float | None = None) -> StageResult:
    """Check the kernel assembled in `workspace` against the target's reference on every test case."""
    reason = gate(target.arch)
    if reason:
        return not_run(STAGE, reason)
    limit = timeout_s if timeout_s is not None else target.limits.check_s
    workspace = Path(workspace)
    outcome = run_isolated(
        "judge.check:_child_correctness",
        {"kernel_module": module_name(target.kernel_file), "tests": target.tests,
         "rtol": target.rtol, "atol": target.atol},
        timeout_s=limit,
        cwd=workspace,
        log_path=workspace / "correctness.log",
    )
    if outcome.status == "timed-out":
        return StageResult(STAGE, "timed-out", f"timed out: {outcome.error}", outcome.seconds,
                           {"error": outcome.error}, outcome.log_tail)
    if outcome.status == "crashed":
        return StageResult(STAGE, "crashed", f"crashed: {outcome.error}", outcome.seconds,
                           {"error": outcome.error}, outcome.log_tail)
    detail = outcome.value
    cases = detail["cases"]
    failed = [c for c in cases if not c["passed"]]
    if failed:
        summary = f"{len(failed)} of {len(cases)} checks failed; first: {describe_failure(failed[0])}"
        return StageResult(STAGE, "failed", summary, outcome.seconds, detail, outcome.log_tail)
    summary = f"{len(cases)} of {len(cases)} checks passed ({len(target.tests)} tests x 2 seeds)"
    return StageResult(STAGE, "passed", summary, outcome.seconds, detail, outcome.log_tail)


def module_name(kernel_file: str) -> str:
    """The import name of the kernel file inside a workspace ("submission.py" -> "submission")."""
    return kernel_file.removesuffix(".py").replace("/", ".")


def describe_failure(case: dict[str, Any]) -> str:
    where = f"test {case['test']} ({case['label']}), {'first' if case['call'] == 1 else 'second'} call (seed {case['seed']})"
    return f"{where}: {case['reason']}"


# ---------------------------------------------------------------------------------------------------------
# In the child. torch is imported here only, so that the judge itself starts without it.


def _child_correctness(kernel_module: str, tests: list[dict], rtol: float | None, atol: float | None) -> dict:
    import importlib

    import reference  # the workspace's own

    from .targets import spec_label

    kernel = importlib.import_module(kernel_module).custom_kernel
    checker = getattr(reference, "check_implementation", None)
    cases = []
    for index, spec in enumerate(tests):
        # The second call gets other inputs: a kernel that caches its first answer is caught there.
        for call, seed_shift in ((1, 0), (2, 1)):
            case_spec = dict(spec)
            if "seed" in case_spec:
                case_spec["seed"] = int(case_spec["seed"]) + seed_shift
            result = _check_case(kernel, reference, checker, case_spec, rtol, atol)
            result.update(test=index, label=spec_label(spec), call=call, seed=case_spec.get("seed"))
            cases.append(result)
    return {
        "cases": cases,
        "tolerance": {"rtol": rtol, "atol": atol} if rtol is not None or atol is not None else None,
        "check_implementation": checker is not None,
    }


def _check_case(kernel, reference, checker, spec, rtol, atol) -> dict:
    import torch

    data = reference.generate_input(**spec)
    sync()
    expected_data = clone_data(data)
    expected = reference.ref_kernel(expected_data)
    sync()
    slots = output_slots(data, expected_data, expected)

    kernel_data = clone_data(data)
    poisoned = poison(kernel_data, slots)
    _poison_allocator(expected)
    start = time.perf_counter()
    output = kernel(kernel_data)
    sync()  # every stream: work the kernel left on a side stream must be finished before we look
    kernel_s = time.perf_counter() - start

    result: dict[str, Any] = {"passed": True, "reason": "", "poisoned": poisoned, "kernel_s": round(kernel_s, 6)}
    got_leaves, exp_leaves = leaves(output), leaves(expected)
    if len(got_leaves) != len(exp_leaves):
        return _fail(result, f"returned {len(got_leaves)} tensors, the reference returns {len(exp_leaves)}")
    use_rtol = rtol if rtol is not None else (FALLBACK_RTOL if checker is not None else 1e-5)
    use_atol = atol if atol is not None else (FALLBACK_ATOL if checker is not None else 1e-8)
    comparisons = []
    for (path, got), (_, want) in zip(got_leaves, exp_leaves):
        if not isinstance(got, torch.Tensor):
            return _fail(result, f"output{path} is a {type(got).__name__}, not a tensor")
        if tuple(got.shape) != tuple(want.shape):
            return _fail(result, f"output{path} has shape {tuple(got.shape)}, expected {tuple(want.shape)}")
        comparisons.append(compare(path, got, want, use_rtol, use_atol))
    result["outputs"] = comparisons

    reasons = []
    for comp in comparisons:
        if comp["nonfinite"]:
            reasons.append(f"output{comp['path']} has {comp['nonfinite']} NaN/Inf of {comp['elements']} elements")
        elif comp["mismatched"] and (rtol is not None or atol is not None or checker is None):
            reasons.append(
                f"output{comp['path']}: {comp['mismatched']} of {comp['elements']} elements differ "
                f"(max abs err {comp['max_abs_err']:.3g}, max rel err {comp['max_rel_err']:.3g})"
            )
    if checker is not None:
        # check_implementation gets untouched inputs: GPU MODE's own checkers recompute the reference from them.
        ok, message = _verdict(checker(clone_data(data), output))
        result["check_implementation"] = {"passed": ok, "message": message[:2000]}
        if not ok:
            reasons.append(f"check_implementation: {message.splitlines()[0][:300] if message else 'failed'}")
    if reasons:
        return _fail(result, "; ".join(reasons))
    return result


def _fail(result: dict, reason: str) -> dict:
    result["passed"] = False
    result["reason"] = reason
    return result


def _verdict(value) -> tuple[bool, str]:
    """GPU MODE's checkers return (ok, message), a message that is empty when ok, or a bool."""
    if isinstance(value, tuple) and len(value) == 2:
        return bool(value[0]), str(value[1] or "")
    if isinstance(value, str):
        return value == "", value
    if value is None:
        return True, ""
    return bool(value), ""


def compare(path: str, got, want, rtol: float, atol: float) -> dict:
    """Elementwise |got - want| <= atol + rtol * |want| in float64; NaN and Inf in `got` never pass."""
    import torch

    g = got.detach().to(torch.float64).flatten()
    w = want.detach().to(device=got.device, dtype=torch.float64).flatten()
    finite = torch.isfinite(g)
    diff = (g - w).abs()
    bad = ~finite | ~(diff <= atol + rtol * w.abs())
    ok_diff = torch.where(finite, diff, torch.zeros_like(diff))
    rel = ok_diff / w.abs().clamp_min(torch.finfo(torch.float64).tiny)
    first = torch.nonzero(bad).flatten()[:MAX_MISMATCHES].tolist()
    shape = tuple(got.shape)
    return {
        "path": path,
        "dtype": str(got.dtype).removeprefix("torch."),
        "elements": g.numel(),
        "nonfinite": int((~finite).sum()),
        "mismatched": int(bad.sum()),
        "max_abs_err": float(ok_diff.max()) if g.numel() else 0.0,
        "max_rel_err": float(rel.max()) if g.numel() else 0.0,
        "rtol": rtol,
        "atol": atol,
        "first_mismatches": [
            {"index": list(_unravel(i, shape)), "got": _num(g[i]), "expected": _num(w[i])} for i in first
        ],
    }


def _num(x) -> float | str:
    value = float(x)
    return value if math.isfinite(value) else repr(value)


def _unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat //= size
    return tuple(reversed(index))


def sync() -> None:
    """Wait for every stream of the device (not just the current one)."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def leaves(obj, path: str = "") -> list[tuple[str, Any]]:
    """The tensors (and other non-container values) of nested tuples, lists and dicts, with their paths."""
    if isinstance(obj, (tuple, list)):
        return [leaf for i, item in enumerate(obj) for leaf in leaves(item, f"{path}[{i}]")]
    if isinstance(obj, dict):
        return [leaf for key, item in obj.items() for leaf in leaves(item, f"{path}[{key!r}]")]
    return [(path, obj)]


def clone_data(obj):
    """A deep copy of the tensors in nested tuples, lists and dicts (GPU MODE inputs), other values as they are."""
    import torch

    if isinstance(obj, tuple):
        return tuple(clone_data(x) for x in obj)
    if isinstance(obj, list):
        return [clone_data(x) for x in obj]
    if isinstance(obj, dict):
        return {k: clone_data(v) for k, v in obj.items()}
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    return obj


def output_slots(original, after_reference, returned) -> list[str]:
    """Paths of the input tensors that are outputs: those the reference wrote into or returned a view of."""
    import torch

    returned_storages = {
        t.untyped_storage().data_ptr() for _, t in leaves(returned) if isinstance(t, torch.Tensor)
    }
    slots = []
    for (path, before), (_, after) in zip(leaves(original), leaves(after_reference)):
        if not isinstance(after, torch.Tensor):
            continue
        aliased = after.untyped_storage().data_ptr() in returned_storages
        if aliased or not _same_bytes(before, after):
            slots.append(path)
    return slots


def _same_bytes(before, after) -> bool:
    """Bitwise equality: works for every dtype (torch.equal has no kernel for packed FP4) and treats an
    unchanged NaN as unchanged."""
    import torch

    if before.shape != after.shape or before.dtype != after.dtype:
        return False
    as_bytes = lambda t: t.contiguous().reshape(-1).view(torch.uint8)  # noqa: E731
    return torch.equal(as_bytes(before), as_bytes(after))


def poison(data, slots: list[str]) -> list[str]:
    """Fill the floating output tensors at `slots` with NaN, so that elements the kernel never writes fail."""
    import torch

    poisoned = []
    for path, tensor in leaves(data):
        if path in slots and isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
            tensor.fill_(float("nan"))
            poisoned.append(path)
    return poisoned


def _poison_allocator(expected) -> None:
    """Leave NaN in freed blocks the size of each output: a kernel that allocates its own output with
    torch.empty most likely gets one of them, instead of memory that happens to hold a right answer."""
    import torch

    for _, tensor in leaves(expected):
        if isinstance(tensor, torch.Tensor) and tensor.is_floating_point():
            block = torch.full_like(tensor, float("nan"))
            del block
