"""Calls a target forbids (judge.toml `[rules] forbidden_calls`), found in a kernel however it spells them: the
dotted name, `from torch import x as f`, module aliases, `getattr(torch, "x")` with a constant (or constant-built)
name, torch's op namespaces (`torch.ops.aten.x.default`, `torch._C._VariableFunctions.x`, `torch._VF.x`) and code
in constant strings that exec runs. Only the uses a patch adds count: a call the base kernel already makes was the
target author's choice. A name computed at run time that could reach a forbidden call is a flag, not a verdict
(judge.stages.screen.indirection)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..details import Flag

# Where torch keeps its top-level operators under other names: torch.x is torch.ops.aten.x (and its overloads).
_OP_NAMESPACES = ("torch.ops.aten.", "torch._ops.ops.aten.", "torch._C._VariableFunctions.", "torch._VF.")


@dataclass(frozen=True)
class Use:
    """One place a kernel names a forbidden call."""

    call: str  # the forbidden call, as judge.toml names it
    line: int
    text: str
    why: str  # the flag's words: what the line does, and the target's reason


def spellings(call: str) -> list[str]:
    """Every dotted name under which `call` can be reached at run time: for a top-level torch operator, its op
    namespaces too (a runtime tripwire wraps each of them)."""
    full = call if "." in call else f"builtins.{call}"
    head, _, last = full.partition(".")
    if head == "torch" and "." not in last:
        return [full] + [prefix + last for prefix in _OP_NAMESPACES]
    return [full]


def canonical(name: str) -> str:
    for prefix in _OP_NAMESPACES:
        if name.startswith(prefix):
            return "torch." + name[len(prefix):]
    return name


def matches(name: str, call: str) -> bool:
    """Does a resolved dotted name (`torch.ops.aten._grouped_mm.default`) name `call` (`torch._grouped_mm`)?"""
    name, call = canonical(name), canonical(call if "." in call else f"builtins.{call}")
    return name == call or name.startswith(call + ".")


def find(forbidden, name: str, verb: str, line: int, text: str) -> list[Use]:
    """The uses that one resolved name at one line makes of the target's forbidden calls."""
    out = []
    for rule in forbidden:
        if verb in ("calls", "uses", "imports") and matches(name, rule.call):
            shown = name.removeprefix("builtins.")
            alias = "" if name == rule.call else f" (that is {rule.call})"
            out.append(Use(rule.call, line, text, f"{verb} {shown}{alias}, which this target forbids ({rule.why})"))
    return out


def added(base: list[Use], patched: list[Use]) -> list[Use]:
    """The uses the patch adds: per forbidden call, as many as the patched file has beyond the base's, taken from
    those whose line the base does not have (so a base's call whose arguments a patch edits is not one)."""
    out = []
    for call in sorted({u.call for u in patched}):
        mine = [u for u in patched if u.call == call]
        theirs = Counter(u.text for u in base if u.call == call)
        extra = len(mine) - sum(theirs.values())
        unmatched = []
        for use in mine:
            if theirs[use.text] > 0:
                theirs[use.text] -= 1
            else:
                unmatched.append(use)
        out += unmatched[:max(extra, 0)]
    return sorted(out, key=lambda u: u.line)


def flags(uses: list[Use]) -> list[Flag]:
    """One 'forbidden-call' flag per line (the first use on it)."""
    seen, out = set(), []
    for use in uses:
        if use.line not in seen:
            seen.add(use.line)
            out.append(Flag("forbidden-call", use.line, use.text, use.why))
    return out
