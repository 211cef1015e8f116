"""Formulas over a compiled config's knobs: what a static rule's parameters say in judge.toml (`bytes = "..."`),
checked when a target loads (judge/targets.py) and evaluated per config by the rules (judge/stages/static/rules.py).
Only + - * // %, integers, the knobs' names and indexing: nothing a formula says is run as Python."""

from __future__ import annotations

import ast
import operator
from typing import Any

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod}


def evaluate(formula: str, signature: dict) -> int:
    """An integer formula over the compile signature's knobs: + - * // %, numbers, names, name[index]."""
    try:
        tree = ast.parse(formula, mode="eval")
    except SyntaxError:
        raise ValueError(f"'{formula}' is not a formula") from None
    return int(_value(tree.body, signature, formula))


def _value(node: ast.AST, names: dict, formula: str) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise ValueError(f"'{formula}': the config has no knob '{node.id}' (it has {', '.join(sorted(names))})")
        return names[node.id]
    if isinstance(node, ast.Subscript):
        return _value(node.value, names, formula)[_value(node.slice, names, formula)]
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_value(node.left, names, formula), _value(node.right, names, formula))
    raise ValueError(f"'{formula}': only + - * // %, integers and the config's knobs are allowed")


def check_formula(formula: str) -> str | None:
    """Why `formula` cannot be a rule's formula, or None: checked when the target loads, before any knob."""
    try:
        tree = ast.parse(formula, mode="eval")
    except SyntaxError:
        return f"'{formula}' is not a formula"
    allowed = (ast.Expression, ast.Constant, ast.Name, ast.Subscript, ast.BinOp, ast.Load, *_OPS)
    bad = next((n for n in ast.walk(tree) if not isinstance(n, allowed)), None)
    if bad is not None or any(isinstance(n, ast.Constant) and not isinstance(n.value, int) for n in ast.walk(tree)):
        return f"'{formula}': only + - * // %, integers and the config's knobs are allowed"
    return None


def formulas_of(params: dict) -> list[str]:
    value = params.get("bytes", [])
    return [value] if isinstance(value, str) else list(value)


def knobs_text(signature: dict) -> str:
    """A compile signature's knobs on one line, `name=value, ...` (the kernel's name left out)."""
    return ", ".join(f"{k}={v}" for k, v in signature.items() if k != "kernel")
