"""The static rules a target can declare over its compiled PTX (judge.toml `[static] rules`).

Each rule answers one question about code that compiled but may be wrong, without a GPU: a register read
before the asynchronous load that fills it has completed, a transaction count that does not match the
copies, tensor memory allocated and never freed. A rule reads instructions in program order (the order
they appear in the PTX), which is what CuTe DSL's unrolled kernels hand to ptxas; it reports the first
place it fails, with the PTX line, and what it checked when it passes.

Rules are a filter for honest mistakes in a patch, and a hostile patch cannot hide from them what its PTX
does; they do not prove a kernel right (that takes the GPU's correctness stage).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ...extensions import STATIC_RULES
from ...formulas import evaluate, formulas_of, knobs_text
from ..compile import resources
from .ptx import Function, Instruction, parse
from ..details import RuleResult  # what a rule returns is a part of the static stage's detail


@dataclass
class Code:
    """One compiled config as the rules see it: its PTX file, parsed, and the architecture it targets."""

    path: Path
    arch: str
    functions: list[Function]

    @classmethod
    def read(cls, path: Path, arch: str) -> "Code":
        return cls(path, arch, parse(path.read_text()))

    @property
    def entries(self) -> list[Function]:
        return [f for f in self.functions if f.entry] or self.functions


Rule = Callable[[Code, dict, dict], RuleResult]  # judge.extensions.StaticRule
RULES: dict[str, Rule] = {}


def rule(name: str):
    """Register a rule under its name in judge.extensions.STATIC_RULES, which declares the parameters it takes
    (the loader checks a target's tables against that declaration, without importing this module)."""
    if name not in STATIC_RULES:
        raise ValueError(f"static rule '{name}' is not declared in judge/extensions.py's STATIC_RULES")

    def register(fn: Rule) -> Rule:
        RULES[name] = fn
        return fn
    return register


# ---- asynchronous results read before they are waited for --------------------------------------------------


class _Pending:
    """Registers an asynchronous instruction will fill, carried through plain moves until their wait."""

    def __init__(self) -> None:
        self.origin: dict[str, int] = {}  # register -> PTX line of the instruction that fills it

    def fill(self, regs: list[str], line: int) -> None:
        self.origin.update({r: line for r in regs})

    def clear(self, regs: list[str] | None = None) -> None:
        if regs is None:
            self.origin.clear()
        for r in regs or []:
            self.origin.pop(r, None)

    def step(self, instruction: Instruction) -> tuple[str, int] | None:
        """A read of a pending register by `instruction`, or None. A `mov` only renames or packs registers
        (ptxas keeps them in place), so its destination inherits the wait instead."""
        hit = next((r for r in instruction.reads if r in self.origin), None)
        if hit and instruction.is_("mov"):
            self.fill(instruction.writes, self.origin[hit])
            return None
        if hit:
            return hit, self.origin[hit]
        self.clear(instruction.writes)  # a register written anew no longer holds the load's value
        return None


@rule("tmem-load-waited")
def tmem_load_waited(code: Code, params: dict, signature: dict) -> RuleResult:
    """Every register a tcgen05.ld fills is read only after a tcgen05.wait::ld (tcgen05.ld is asynchronous)."""
    loads = 0
    for function in code.entries:
        pending = _Pending()
        for instruction in function.instructions:
            if instruction.is_("tcgen05.ld"):
                loads += 1
                pending.fill(instruction.writes, instruction.line)
            elif instruction.opcode.startswith("tcgen05.wait::ld"):
                pending.clear()
            else:
                hit = pending.step(instruction)
                if hit:
                    return RuleResult("tmem-load-waited", False, (
                        f"PTX line {instruction.line}: `{instruction.opcode}` reads {hit[0]}, which the tcgen05.ld at "
                        f"line {hit[1]} fills, before any tcgen05.wait::ld: it reads a register the load may not "
                        "have written yet"), instruction.line)
    return RuleResult("tmem-load-waited", True, f"{loads} tcgen05.ld, each waited for (tcgen05.wait::ld) before "
                      "its registers are read")


@rule("wgmma-waited")
def wgmma_waited(code: Code, params: dict, signature: dict) -> RuleResult:
    """wgmma.mma_async: a wgmma.fence before the first one and after any other instruction touched its
    accumulators, every one committed, and its accumulators read only after a wgmma.wait_group covers it."""
    issued = 0
    for function in code.entries:
        pending, groups, uncommitted = _Pending(), [], []
        fenced, touched = False, set()  # touched: registers other instructions used since the last fence
        for instruction in function.instructions:
            op = instruction.opcode
            if instruction.is_("wgmma.mma_async"):
                issued += 1
                accumulators = instruction.writes
                if not fenced or touched & set(accumulators):
                    return RuleResult("wgmma-waited", False, (
                        f"PTX line {instruction.line}: wgmma.mma_async without a wgmma.fence "
                        f"{'before the first one' if not fenced else 'after other instructions used its accumulators'}"
                        ": the tensor core may read them before those writes land"), instruction.line)
                uncommitted += accumulators
                pending.fill(accumulators, instruction.line)
            elif op.startswith("wgmma.fence"):
                fenced, touched = True, set()
            elif op.startswith("wgmma.commit_group"):
                groups.append(uncommitted)
                uncommitted = []
            elif op.startswith("wgmma.wait_group"):
                keep = _wait_depth(function, instruction)
                for done in groups[:max(0, len(groups) - keep)]:
                    pending.clear(done)
                groups = groups[max(0, len(groups) - keep):] if keep else []
            else:
                hit = pending.step(instruction)
                if hit:
                    return RuleResult("wgmma-waited", False, (
                        f"PTX line {instruction.line}: `{op}` reads accumulator {hit[0]} of the wgmma.mma_async at "
                        f"line {hit[1]} before a wgmma.wait_group that covers it (committed with "
                        "wgmma.commit_group): the tensor core may still be writing it"), instruction.line)
                touched.update(instruction.reads + instruction.writes)
    return RuleResult("wgmma-waited", True, f"{issued} wgmma.mma_async, each fenced, committed, and waited for "
                      "before its accumulators are read")


def _wait_depth(function: Function, instruction: Instruction) -> int:
    depth = function.constant(instruction.operands[0]) if instruction.operands else 0
    return depth or 0


# ---- transaction counts and tensor memory ----------------------------------------------------------------


@rule("expect-tx-bytes")
def expect_tx_bytes(code: Code, params: dict, signature: dict) -> RuleResult:
    """Every mbarrier expect_tx counts the bytes the target's formula gives for this config: a count that is
    too high hangs the pipeline, one too low lets the consumer read a stage before its copies land."""
    expected = {formula: evaluate(formula, signature) for formula in formulas_of(params)}
    seen = 0
    for function in code.entries:
        for index, instruction in enumerate(function.instructions):
            if not (instruction.opcode.startswith("mbarrier.arrive.expect_tx")
                    or instruction.opcode.startswith("mbarrier.expect_tx")):
                continue
            seen += 1
            count = function.constant(instruction.operands[-1], index)
            if count is None:
                return RuleResult("expect-tx-bytes", False, (
                    f"PTX line {instruction.line}: the expect_tx byte count {instruction.operands[-1]} is computed at "
                    "run time; this target's rule needs a compile-time constant to compare"), instruction.line)
            if count not in expected.values():
                wanted = " or ".join(str(v) for v in sorted(set(expected.values())))
                return RuleResult("expect-tx-bytes", False, (
                    f"PTX line {instruction.line}: expect_tx of {count} bytes per stage, where the copies of this "
                    f"config bring {wanted} (the target's formula over {knobs_text(signature)})"), instruction.line)
    if not seen:
        return RuleResult("expect-tx-bytes", True, "no mbarrier expect_tx in the PTX: nothing to check")
    return RuleResult("expect-tx-bytes", True, f"{seen} expect_tx, each {' or '.join(map(str, sorted(set(expected.values()))))}"
                      " bytes as the target's formula gives")


@rule("tmem-alloc-paired")
def tmem_alloc_paired(code: Code, params: dict, signature: dict) -> RuleResult:
    """Tensor memory allocated is relinquished and deallocated, with the same constant column count, a power of
    two from 32 to 512: a leak blocks the next CTA on the SM, a wrong count is undefined."""
    kernels = 0
    for function in code.entries:
        found: dict[str, list[tuple[Instruction, int | None]]] = {"alloc": [], "dealloc": [], "relinquish": []}
        for index, instruction in enumerate(function.instructions):
            for kind in found:
                if instruction.opcode.startswith(f"tcgen05.{kind}"):
                    columns = function.constant(instruction.operands[-1], index) if kind != "relinquish" else None
                    found[kind].append((instruction, columns))
        if not found["alloc"]:
            continue
        kernels += 1
        first = found["alloc"][0][0]
        for kind in ("dealloc", "relinquish"):
            if not found[kind]:
                return RuleResult("tmem-alloc-paired", False, (
                    f"PTX line {first.line}: tensor memory allocated and never "
                    f"{'deallocated (tcgen05.dealloc)' if kind == 'dealloc' else 'relinquished (tcgen05.relinquish_alloc_permit)'}"),
                    first.line)
        for instruction, columns in found["alloc"] + found["dealloc"]:
            if columns is None or columns < 32 or columns > 512 or columns & (columns - 1):
                return RuleResult("tmem-alloc-paired", False, (
                    f"PTX line {instruction.line}: `{instruction.opcode.split('.')[1]}` of {columns if columns is not None else 'a run-time number of'} "
                    "columns: tensor memory is allocated in constant powers of two from 32 to 512"), instruction.line)
        sizes = {c for _, c in found["alloc"]}
        freed = {c for _, c in found["dealloc"]}
        if sizes != freed:
            line = found["dealloc"][0][0].line
            return RuleResult("tmem-alloc-paired", False, (
                f"PTX line {line}: deallocates {sorted(freed)} columns, allocated {sorted(sizes)}"), line)
    return RuleResult("tmem-alloc-paired", True, f"tensor memory allocated, relinquished and freed alike in {kernels} "
                      f"kernel{'s' if kernels != 1 else ''}")


# ---- what ptxas says ------------------------------------------------------------------------------------

# ptxas warnings that mean the code is wrong, not slow: ignored qualifiers, undefined or out-of-range values.
PTXAS_WRONG_CODE = (r"uninitiali[sz]ed", r"out of range", r"undefined", r"ignored", r"misaligned", r"truncat",
                    r"not a multiple", r"overflow")


@rule("ptxas-clean")
def ptxas_clean(code: Code, params: dict, signature: dict) -> RuleResult:
    """ptxas assembles the PTX for the target's architecture without a warning that means wrong code
    (`wrong_code` adds patterns to PTXAS_WRONG_CODE); other warnings are listed, not failed."""
    tool = resources.find_tool("ptxas")
    if tool is None:
        return RuleResult("ptxas-clean", True, "ptxas not found (pip install nvidia-cuda-nvcc)", ran=False)
    try:
        output = resources.run_ptxas(code.path, code.arch, tool)
    except RuntimeError as error:
        # Only a ptxas older than the PTX ISA is this machine's limit (the H100 machine's reads 9.0, CuTe DSL
        # 4.8 writes 9.4); any other failure to assemble the candidate's PTX stays a failure of the candidate.
        return RuleResult("ptxas-clean", True, str(error), ran=False) if "Unsupported .version" in str(error) \
            else RuleResult("ptxas-clean", False, str(error))
    patterns = [*PTXAS_WRONG_CODE, *params.get("wrong_code", [])]
    warnings = [line.strip() for line in output.splitlines() if "warning" in line.lower()]
    for warning in warnings:
        hit = next((p for p in patterns if re.search(p, warning, re.I)), None)
        if hit:
            line = re.search(r"\.ptx[,:] line (\d+)", warning)
            return RuleResult("ptxas-clean", False, f"ptxas: {warning}", int(line.group(1)) if line else None)
    if warnings:
        return RuleResult("ptxas-clean", True, f"ptxas: {len(warnings)} warning(s), none about wrong code: "
                          + "; ".join(warnings[:3]))
    return RuleResult("ptxas-clean", True, f"ptxas assembles it for {code.arch} without a warning")
