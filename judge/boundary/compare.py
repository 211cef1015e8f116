"""Whether an output is right: each tensor of it against the reference's, each number exactly or within the
tolerance, then the problem's own check_implementation. The oracle's alone (judge.boundary.oracle)."""

from __future__ import annotations

from typing import Any

from . import tensors
from .memory import without_graph


def compare_outputs(got, expected, data, tolerance: tuple[float, float], rtol, atol, checker) -> dict:
    """A correctness verdict on the output the oracle rebuilt (`got`, judge.boundary.staging.output): each tensor
    against the reference's in float64, each number exactly (int, bool, None) or within the tolerance (float),
    leaves paired by path; then check_implementation on the pristine inputs and `got` as the kernel returned it."""
    import torch

    result: dict[str, Any] = {"passed": True, "reason": ""}
    pairs, problem = tensors.paired(tensors.leaves(got), tensors.leaves(expected))
    if problem:
        return failed(problem)
    rtol_, atol_ = tolerance
    strict = not checker_decides(rtol, atol, checker)
    comparisons = []
    for path, value, reference_value in pairs:
        if isinstance(reference_value, torch.Tensor) != isinstance(value, torch.Tensor):
            what = "a tensor" if isinstance(value, torch.Tensor) else "a Python number" if tensors.is_number(
                value) else "no tensor"
            wanted = "a tensor" if isinstance(reference_value, torch.Tensor) else "a number"
            return failed(f"output{path} is {what}, where the reference returns {wanted}")
        if not isinstance(reference_value, torch.Tensor):
            if not tensors.is_number(reference_value):
                return failed(f"output{path} of the reference is neither a tensor nor a number")
            comparisons.append(tensors.compare_number(path, value, reference_value, rtol_, atol_))
            continue
        if tuple(value.shape) != tuple(reference_value.shape):
            if strict:
                return failed(f"output{path} has shape {tuple(value.shape)}, "
                                     f"expected {tuple(reference_value.shape)}")
            # GPU MODE's checkers compare with broadcasting (a sum returned as shape (1,) against ()): without a
            # tolerance of judge's own, the problem's checker decides.
            continue
        comparisons.append(tensors.compare(path, value, reference_value, rtol_, atol_))
    result["outputs"] = comparisons
    reasons = _mismatches(comparisons, strict)
    if checker is not None:
        # check_implementation gets pristine inputs (GPU MODE's own checkers recompute the reference from them)
        # and the output with the nesting the kernel returned, named tuples as the reference's own classes
        ok, message = verdict(without_graph(checker, data, got))
        result["check_implementation"] = {"passed": ok, "message": message[:2000]}
        if not ok:
            reasons.append(_checker_failed(message))
    return failed("; ".join(reasons), result) if reasons else result


def checker_decides(rtol, atol, checker) -> bool:
    """Whether the problem's check_implementation alone says an output is right: it has one, and judge.toml sets no
    tolerance of its own (judge's comparison with the reference's answer then only shows the mismatches)."""
    return checker is not None and rtol is None and atol is None


def checked_instead(problem: str, checker, data, got) -> str | None:
    """A timed call's output whose projections are far from the reference's answer, where the checker decides:
    right if check_implementation passes it on a copy of the call's inputs (an eigenvector is right with either
    sign, a QR factorization in more than one form: the reference's answer is one of the right ones, as in the
    correctness stage); else the projections' reason and the checker's."""
    ok, message = verdict(without_graph(checker, tensors.clone_data(data), got))
    if ok:
        return None
    return f"{problem}; {_checker_failed(message)}"


def _checker_failed(message: str) -> str:
    """The reason a failed check_implementation gives: its message's first line, capped."""
    return f"check_implementation: {message.splitlines()[0][:300] if message else 'failed'}"


def _mismatches(comparisons: list[dict], strict: bool) -> list[str]:
    """A reason per output with NaN/Inf, and per output out of tolerance where judge's tolerance decides."""
    reasons = []
    for comp in comparisons:
        if comp["nonfinite"]:
            reasons.append(f"output{comp['path']} has {comp['nonfinite']} NaN/Inf of {comp['elements']} elements")
        elif comp["mismatched"] and strict:
            reasons.append(
                f"output{comp['path']}: {comp['mismatched']} of {comp['elements']} elements differ "
                f"(max abs err {comp['max_abs_err']:.3g}, max rel err {comp['max_rel_err']:.3g})")
    return reasons


def failed(reason: str, result: dict | None = None) -> dict:
    """A failed check's result, with its one-line reason."""
    result = {"passed": True, "reason": ""} if result is None else result
    result["passed"] = False
    result["reason"] = reason
    return result


def verdict(value) -> tuple[bool, str]:
    """GPU MODE's checkers return (ok, message), a message that is empty when ok, or a bool."""
    if isinstance(value, tuple) and len(value) == 2:
        return bool(value[0]), str(value[1] or "")
    if isinstance(value, str):
        return value == "", value
    if value is None:
        return True, ""
    return bool(value), ""
