from typing import TypedDict, TypeVar

import torch

# (a, b, sa, sb, offs, c):
#   a    float8_e4m3fn [sum(M_g), K]  every group's rows one after another, K-major
#   b    float8_e4m3fn [G, N, K]      K-major
#   sa   float32 [sum(M_g)]           one scale per row of a
#   sb   float32 [G, N]               one scale per row of b
#   offs int32 [G]                    end row of each group in a (cumulative M_g)
#   c    bfloat16 [sum(M_g), N]       output buffer, poisoned with NaN
input_t = TypeVar(
    "input_t",
    bound=tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
)
output_t = TypeVar("output_t", bound=torch.Tensor)


class TestSpec(TypedDict):
    m: list[int]
    n: int
    k: int
    seed: int
