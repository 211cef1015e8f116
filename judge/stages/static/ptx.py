"""Reads PTX as the static rules need it: functions, instructions in program order, operands, constants.

Only what the rules ask is modelled: which registers an instruction writes and reads, and what constant a
register holds when a `mov` of an immediate defines it. Nothing here executes or rewrites PTX.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_FUNCTION = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+|\.extern\s+)*\.(entry|func)\s+(?:\([^)]*\)\s*)?([\w$.]+)")
_REGISTER = re.compile(r"%[A-Za-z_][\w$]*")
_LABEL = re.compile(r"^\s*([\w$]+):\s*$")
_PREDICATE = re.compile(r"^@!?%?[\w$]+\s+")
# Instructions whose first operand is read, not written: stores, barriers, async copies, tensor-core issue.
_NO_DESTINATION = (
    "st.", "st ", "red.", "bar.", "bar ", "barrier.", "fence", "membar", "cp.", "tcgen05.st", "tcgen05.cp",
    "tcgen05.mma", "tcgen05.commit", "tcgen05.dealloc", "tcgen05.relinquish", "tcgen05.wait", "tcgen05.alloc",
    "tcgen05.fence", "tcgen05.shift", "wgmma.fence", "wgmma.commit", "wgmma.wait", "mbarrier.init",
    "mbarrier.inval", "mbarrier.expect_tx", "mbarrier.try_wait", "mbarrier.test_wait", "prefetch", "bra", "ret",
    "exit", "trap", "call", "setmaxnreg", "tensormap.", "griddepcontrol", "elect", "stmatrix", "discard",
    "applypriority", "createpolicy", "nanosleep", "@",
)


@dataclass
class Instruction:
    line: int  # 1-based line in the PTX file
    opcode: str  # e.g. "tcgen05.ld.sync.aligned.32x32b.x32.b32"
    operands: list[str]
    text: str

    @property
    def writes(self) -> list[str]:
        if not self.operands or self.opcode.startswith(_NO_DESTINATION) or self.operands[0].startswith("["):
            return []
        return registers(self.operands[0])

    @property
    def reads(self) -> list[str]:
        skip = 1 if self.writes else 0
        # wgmma.mma_async reads its accumulators when it accumulates: the rules treat them separately.
        return [r for operand in self.operands[skip:] for r in registers(operand)]

    def is_(self, prefix: str) -> bool:
        return self.opcode == prefix or self.opcode.startswith(prefix + ".")


@dataclass
class Function:
    name: str
    entry: bool
    line: int
    instructions: list[Instruction] = field(default_factory=list)

    def constant(self, operand: str, before: int | None = None) -> int | None:
        """The integer an operand holds: an immediate, or a register last set by `mov` of an immediate (before
        instruction index `before`, in program order)."""
        operand = operand.strip()
        value = immediate(operand)
        if value is not None or not operand.startswith("%"):
            return value
        stop = len(self.instructions) if before is None else before
        for instruction in reversed(self.instructions[:stop]):
            if operand in instruction.writes:
                if instruction.is_("mov") and len(instruction.operands) == 2:
                    return immediate(instruction.operands[1])
                if instruction.is_("cvt") and len(instruction.operands) == 2:
                    return self.constant(instruction.operands[1], self.instructions.index(instruction))
                return None
        return None


def registers(operand: str) -> list[str]:
    return _REGISTER.findall(operand)


def immediate(text: str) -> int | None:
    text = text.strip()
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


def parse(ptx: str) -> list[Function]:
    """Every .entry and .func with a body, its instructions in the order they appear."""
    functions: list[Function] = []
    current: Function | None = None
    depth = 0
    pending, first = "", 0
    for number, raw in enumerate(ptx.splitlines(), start=1):
        line = raw.split("//", 1)[0].strip()
        if not line:
            continue
        header = _FUNCTION.match(line)
        if header and depth == 0:
            current = Function(header.group(2), header.group(1) == "entry", number)
            functions.append(current)
            continue
        if line in ("{", "}"):  # a function body or a scoping block (inline asm)
            depth += 1 if line == "{" else -1
            if depth == 0:
                current = None
            continue
        if current is None or depth == 0 or _LABEL.match(line) or line.startswith("."):
            continue
        first = first if pending else number
        pending = f"{pending} {line}" if pending else line
        if pending.endswith(";"):  # else an instruction split over lines
            current.instructions.append(_instruction(first, pending))
            pending = ""
    return [f for f in functions if f.instructions]


def _instruction(number: int, text: str) -> Instruction:
    body = _PREDICATE.sub("", text.rstrip(";").strip())
    opcode, _, rest = body.partition(" ")
    opcode = opcode.strip()
    return Instruction(number, opcode, _split_operands(rest.strip()), text)


def _split_operands(text: str) -> list[str]:
    """Top-level comma split that keeps {vectors} and [addresses] whole."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i].strip())
            start = i + 1
    if text[start:].strip():
        out.append(text[start:].strip())
    return out
