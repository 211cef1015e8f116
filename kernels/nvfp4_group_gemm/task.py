"""Types of the NVFP4 block-scaled grouped GEMM task, as the GPU MODE harness names them."""

from typing import TypedDict, TypeVar

import torch

# (abc_tensors, sfasfb_tensors, sfasfb_reordered_tensors, problem_sizes); see reference.generate_input.
input_t = TypeVar(
    "input_t",
    bound=tuple[
        list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
        list[tuple[torch.Tensor, torch.Tensor]],
        list[tuple[torch.Tensor, torch.Tensor]],
        list[tuple[int, int, int, int]],
    ],
)
# One fp16 C tensor of shape (M, N, 1) per group.
output_t = TypeVar("output_t", bound=list[torch.Tensor])


class TestSpec(TypedDict):
    m: list[int]
    n: list[int]
    k: list[int]
    g: int
    seed: int
