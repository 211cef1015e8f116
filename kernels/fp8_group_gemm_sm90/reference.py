"""Reference for the FP8 grouped GEMM with row scales: C_g = diag(sa_g) (A_g @ B_g^T) diag(sb_g)."""

import torch

from task import input_t, output_t
from utils import get_device, mismatch_report

# Same values as judge.toml's [tolerance]: bf16 output rounds at 2^-9 relative.
RTOL = 1e-2
ATOL = 1e-2


def generate_input(m: list[int], n: int, k: int, seed: int, **_) -> input_t:
    """Random FP8 operands and positive scales, sized so that |C| is about 1; c is poisoned with NaN."""
    device = get_device()
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    groups = len(m)
    m_total = sum(m)
    a = torch.randn(m_total, k, generator=gen, device=device).to(torch.float8_e4m3fn)
    b = torch.randn(groups, n, k, generator=gen, device=device).to(torch.float8_e4m3fn)
    sa = (torch.rand(m_total, generator=gen, device=device) + 0.5) * k**-0.5
    sb = torch.rand(groups, n, generator=gen, device=device) + 0.5
    offs = torch.tensor(m, dtype=torch.int64).cumsum(0).to(device=device, dtype=torch.int32)
    c = torch.full((m_total, n), float("nan"), dtype=torch.bfloat16, device=device)
    return a, b, sa, sb, offs, c


def ref_kernel(data: input_t) -> output_t:
    """fp32 arithmetic on the upcast inputs, group by group; returns fp32."""
    a, b, sa, sb, offs, c = data
    out = torch.empty(c.shape, dtype=torch.float32, device=c.device)
    start = 0
    for g, end in enumerate(offs.tolist()):
        if end > start:
            acc = a[start:end].float() @ b[g].float().t()
            out[start:end] = acc * sa[start:end, None] * sb[g][None, :]
        start = end
    return out


def check_implementation(data: input_t, output: output_t) -> tuple[bool, str]:
    expected = ref_kernel(data)
    return mismatch_report(output, expected, RTOL, ATOL)
