"""The seeds of a round's inputs, drawn from its secret: correctness cases, timing sets, projections and offsets.
Seeds in task.yml are public, the ones used are not. Correctness cases are the round's where runners are
confined: every evaluation is checked on the same secret cases, so that the oracle makes each input once
(judge.boundary.kept_inputs) and no candidate pays again for a slow generate_input; each test still runs on two
seeds. No runner can learn another's cases: runners share no process, file or writable name (docs/architecture.md,
"What a runner shares"), and a workspace is made fresh for each evaluation; unconfined, each evaluation has cases
of its own. Timing sets are the round's where runners are
confined (`shares_sets`): every pair and comparison times the same sets, which no runner sees before its call and
none carries to the next; the oracle then keeps them on the device where the plan has room (`keeps`), else in host
memory where making one costs more than copying it back (judge.boundary.kept_inputs). Unconfined, each pair has sets
of its own (each evaluation has a nonce of its own)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

# The offsets of a pair's inputs move by a multiple of this, below a page: where buffers land is drawn per pair.
SHIFT_STEP = 256


def derive(secret: int, *parts: Any) -> int:
    """A 31-bit seed from the run's secret and a case's coordinates (31 bits suit every generator)."""
    digest = hashlib.sha256(repr((secret, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def with_seed(spec: dict, seed: int) -> dict:
    """The spec with its seed replaced; a spec without a seed has fixed inputs and stays as it is."""
    return {**spec, "seed": seed} if "seed" in spec else dict(spec)


@dataclass
class Case:
    """One correctness call: which task.yml entry, under which input distribution, with which seed."""

    kind: str  # "test" | "benchmark"
    index: int
    call: int
    distribution: str
    spec: dict

    @property
    def key(self) -> tuple:
        return (self.kind, self.index, self.distribution)


class RoundSeeds:
    """What an Evaluator derives from its `secret` (it provides `secret`, `target`, `_nonces`, `keeps(index)`,
    `keep_sets` and `runners_leave_nothing`)."""

    @property
    def shares_sets(self) -> bool:
        """Whether every pair and comparison of the round times the round's own sets: where the evaluator keeps
        sets (`keep_sets`: its runners confined), on the device or in host memory."""
        return bool(self.keep_sets)

    def nonce(self) -> int:
        """A number of one evaluation's own, from which its seeds are derived."""
        self._nonces += 1
        return derive(self.secret, "evaluation", self._nonces)

    def cases(self, nonce: int = 0) -> list[Case]:
        """The correctness cases: every test twice (two seeds: a kernel that keeps an answer fails the second) and
        every benchmark once, under every input distribution of the target. The round's, the same for every
        evaluation, where runners are confined so that none can read what another left (runners_leave_nothing);
        else the evaluation's own (`nonce`)."""
        whose = "case" if self.runners_leave_nothing else nonce
        out = []
        for dist in self.target.distributions:
            for i, spec in enumerate(self.target.tests):
                for call in (1, 2):
                    seed = derive(self.secret, whose, "test", i, call, dist.name)
                    out.append(Case("test", i, call, dist.name, with_seed(spec, seed)))
            out += [self.benchmark_case(j, dist.name, nonce) for j in range(len(self.target.benchmarks))]
        return out

    def benchmark_case(self, index: int, distribution: str, nonce: int = 0) -> Case:
        """Benchmark `index`'s correctness case under `distribution` (cases): the round's, or the evaluation's own."""
        whose = "case" if self.runners_leave_nothing else nonce
        seed = derive(self.secret, whose, "benchmark", index, distribution)
        return Case("benchmark", index, 1, distribution, with_seed(self.target.benchmarks[index], seed))

    def timing_seeds(self, index: int, nonce: int, pair: int, sets: int) -> list[int]:
        """The warm-up seed, then one seed per timing input set of benchmark `index` in one process pair: the
        round's own where the round shares its sets (every pair and comparison of the round times the same sets),
        else the pair's."""
        if self.shares_sets:
            return [derive(self.secret, "timing", index, n) for n in range(sets + 1)]
        return [derive(self.secret, nonce, "timing", pair, index, n) for n in range(sets + 1)]

    def projection_seed(self, index: int, nonce: int, pair: int) -> int:
        if self.shares_sets:
            return derive(self.secret, "projection", index)
        return derive(self.secret, nonce, "projection", pair, index)

    def kept_name(self, index: int) -> str:
        """The name the oracle keeps benchmark `index`'s timing sets under on the device ('' where they are not)."""
        return f"timing-{index}" if self.keeps(index) else ""

    def held_name(self, index: int) -> str:
        """The name the oracle holds benchmark `index`'s sets under between pairs, in host memory where making them
        pays, and their answers' bounds ('' where each pair's sets are its own, or the device keeps them)."""
        return f"timing-{index}" if self.shares_sets and not self.keeps(index) else ""

    def shift(self, nonce: int, pair: int, index: int) -> int:
        """Where a pair's inputs start below a page (drawn): both kernels of the pair share it."""
        return SHIFT_STEP * (derive(self.secret, nonce, "shift", pair, index) % (4096 // SHIFT_STEP))
