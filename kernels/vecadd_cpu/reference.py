"""Reference of the CPU example target: out = a + b, float32, written into the preallocated output."""

import torch

from task import input_t, output_t


def generate_input(size: int, seed: int) -> input_t:
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(size, generator=gen)
    b = torch.randn(size, generator=gen)
    return a, b, torch.empty(size)


def ref_kernel(data: input_t) -> output_t:
    a, b, out = data
    torch.add(a, b, out=out)
    return out


def check_implementation(data: input_t, output: output_t) -> tuple[bool, str]:
    expected = ref_kernel(data)
    if output.shape != expected.shape:
        return False, f"shape {tuple(output.shape)}, expected {tuple(expected.shape)}"
    if not torch.allclose(output, expected, rtol=1e-6, atol=1e-6):
        return False, "mismatch against the reference"
    return True, ""
