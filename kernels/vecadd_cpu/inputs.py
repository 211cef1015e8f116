"""A second input distribution for the CPU example target: values spread over [-1e4, 1e4] instead of randn's
few units, so that a kernel that assumes small values (clamps, low precision) fails correctness."""

import torch


def wide(size: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    a = (torch.rand(size, generator=gen) * 2 - 1) * 1e4
    b = (torch.rand(size, generator=gen) * 2 - 1) * 1e4
    return a, b, torch.empty(size)
