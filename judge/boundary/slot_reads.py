"""Which output slots the oracle may fill with NaN before a call. An output slot is an input the reference writes
into or returns a view of (judge.boundary.tensors.output_slots); NaN written there first makes an element the kernel
never writes fail its check. That holds only where the reference never reads the slot's content: amd/mla-decode's
KV cache is an output the reference appends one row to, after the rows it attends over. Filled with NaN, that
cache would leave every honest kernel's answer NaN, so a slot the reference reads keeps the content it was made
with.

Tried once per spec shape (its seed aside): the reference runs on a copy with the slots filled with NaN, and a
slot is read where NaN then reaches an answer tensor that had none; with more than one slot, each is tried alone."""

from __future__ import annotations

import json
from typing import Any, Callable

from . import tensors


class SlotReads:
    """The oracle's record of the slots each spec shape may have filled with NaN."""

    def __init__(self):
        self.poisonable: dict[str, list[str]] = {}

    def slots_to_poison(self, spec: dict, distribution: str, data: Any, slots: list[str], answer: Any,
                        run: Callable[[Any], Any]) -> list[str]:
        """The output `slots` of `data` whose content `run` (the reference on a copy) does not read, given its
        `answer` on `data` as made."""
        floating = sorted(tensors.poisoned_slots(data, slots))
        if not floating:
            return slots
        key = json.dumps([distribution, {k: v for k, v in spec.items() if k != "seed"}], sort_keys=True, default=repr)
        if key not in self.poisonable:
            clean = _nan_free(answer)
            read = set() if not _reads(data, floating, clean, run) else {
                slot for slot in floating if len(floating) == 1 or _reads(data, [slot], clean, run)}
            self.poisonable[key] = [slot for slot in slots if slot not in read]
        return self.poisonable[key]


def _reads(data: Any, slots: list[str], clean: list[bool], run: Callable[[Any], Any]) -> bool:
    copy = tensors.clone_data(data)
    tensors.poison(copy, slots)
    after = _nan_free(run(copy))
    return len(after) != len(clean) or any(was and not now for was, now in zip(clean, after))


def _nan_free(obj: Any) -> list[bool]:
    """For each floating tensor of `obj`, whether it holds no NaN."""
    import torch

    return [not bool(torch.isnan(t).any()) for _, t in tensors.leaves(obj)
            if isinstance(t, torch.Tensor) and t.is_floating_point()]
