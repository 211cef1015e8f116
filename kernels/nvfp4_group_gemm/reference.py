"""Inputs and the reference for NVFP4 block-scaled grouped GEMM: C_g = (A_g * SFA_g) @ (B_g * SFB_g)^T, fp16 out.

Per group, A is M x K and B is N x K, both K-major FP4 e2m1 packed two per byte (`torch.float4_e2m1fn_x2`,
the even K index in the low nibble), with one FP8 e4m3 scale per 16 consecutive K elements.
"""

import torch

from task import input_t, output_t
from utils import make_match_reference, pick_device

SF_VEC_SIZE = 16
RTOL = 1e-3
ATOL = 1e-3

# The eight magnitudes of e2m1 (1 sign, 2 exponent, 1 mantissa bit), indexed by the low three bits of a nibble.
E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)

# Keeping each nibble's sign bit and its two low bits limits values to 0, +-0.5, +-1, +-1.5, so that with
# scales of 1 or 2 the largest possible sum over K = 7168 (1.5 * 1.5 * 2 * 2 * 7168 = 64512) stays finite in fp16;
# every product and partial sum is then a small dyadic number, exact in fp32 whatever the summation order.
NIBBLE_MASK = 0b1011_1011

# The tensor core's scale-factor atom: 128 rows x 4 scale columns, stored as 32 x 16 bytes.
SF_ATOM_ROWS = 128
SF_ATOM_COLS = 4


def ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


# ---------------------------------------------------------------------------------------------------------
# e2m1 packing


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """Float32 values of 4-bit e2m1 codes (an integer tensor with values 0..15)."""
    table = torch.tensor(E2M1_MAGNITUDES + tuple(-v for v in E2M1_MAGNITUDES), dtype=torch.float32)
    return table.to(codes.device)[codes.long()]


def e2m1_encode(values: torch.Tensor) -> torch.Tensor:
    """4-bit codes (uint8, 0..15) of values that e2m1 represents exactly; anything else is an error."""
    values = values.float()
    magnitudes = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float32, device=values.device)
    hit = values.abs().unsqueeze(-1) == magnitudes
    if not bool(hit.any(-1).all()):
        raise ValueError("value not representable in e2m1 (allowed: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives)")
    codes = hit.to(torch.uint8).argmax(-1).to(torch.uint8)
    negative = torch.signbit(values) & (values != 0)
    return codes | (negative.to(torch.uint8) << 3)


def pack_e2m1(values: torch.Tensor) -> torch.Tensor:
    """Pack an (R, K) tensor of e2m1-exact values into (R, K/2) `float4_e2m1fn_x2`, even K in the low nibble."""
    codes = e2m1_encode(values)
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return packed.view(torch.float4_e2m1fn_x2)


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """Float32 (R, K) values of an (R, K/2) packed e2m1 tensor."""
    raw = packed.view(torch.uint8)
    low = e2m1_decode(raw & 0x0F)
    high = e2m1_decode(raw >> 4)
    return torch.stack((low, high), dim=-1).flatten(-2)


# ---------------------------------------------------------------------------------------------------------
# Scale-factor layouts


def to_blocked(sf: torch.Tensor) -> torch.Tensor:
    """The blocked ("block scaling factors") layout of a (rows, cols) scale matrix, flattened to 1-D.

    Rows pad to a multiple of 128 and columns to a multiple of 4 with zeros; each 128 x 4 atom is stored as
    32 x 16 bytes in which byte (r, 4 * j + c) holds row r + 32 * j, column c. Atoms run along the columns
    first, then down the rows.
    """
    rows, cols = sf.shape
    row_blocks, col_blocks = ceil_div(rows, SF_ATOM_ROWS), ceil_div(cols, SF_ATOM_COLS)
    padded = torch.zeros(
        (row_blocks * SF_ATOM_ROWS, col_blocks * SF_ATOM_COLS), dtype=sf.dtype, device=sf.device
    )
    padded[:rows, :cols] = sf
    # (row_block, j, r, col_block, c) -> (row_block, col_block, r, j, c), with row = 128 rb + 32 j + r
    atoms = padded.view(row_blocks, 4, 32, col_blocks, SF_ATOM_COLS).permute(0, 3, 2, 1, 4)
    return atoms.reshape(-1)


def from_blocked(blocked: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Inverse of `to_blocked`: the (rows, cols) scale matrix, padding dropped."""
    row_blocks, col_blocks = ceil_div(rows, SF_ATOM_ROWS), ceil_div(cols, SF_ATOM_COLS)
    atoms = blocked.reshape(row_blocks, col_blocks, 32, 4, SF_ATOM_COLS).permute(0, 3, 2, 1, 4)
    return atoms.reshape(row_blocks * SF_ATOM_ROWS, col_blocks * SF_ATOM_COLS)[:rows, :cols]


def to_reordered(sf: torch.Tensor) -> torch.Tensor:
    """The blocked layout as GPU MODE hands it to kernels: shape (32, 4, rest_mn, 4, rest_k, 1).

    Its storage is exactly `to_blocked(sf)`; the 6-D view names the axes (row % 32, (row % 128) // 32,
    row // 128, col % 4, col // 4, batch).
    """
    rows, cols = sf.shape
    rest_mn, rest_k = ceil_div(rows, SF_ATOM_ROWS), ceil_div(cols, SF_ATOM_COLS)
    storage = to_blocked(sf).view(1, rest_mn, rest_k, 32, 4, SF_ATOM_COLS)
    return storage.permute(3, 4, 1, 5, 2, 0)


def expand_scales(sf: torch.Tensor, k: int) -> torch.Tensor:
    """Float32 (R, K) per-element scales from an (R, K/16) scale matrix."""
    return sf.float().repeat_interleave(SF_VEC_SIZE, dim=1)[:, :k]


# ---------------------------------------------------------------------------------------------------------
# Inputs


def _random_fp4(rows: int, k: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    raw = torch.randint(0, 256, (1, rows, k // 2), dtype=torch.uint8, generator=generator, device=device)
    # (1, rows, K/2) -> (rows, K/2, 1): the L = 1 batch axis last, as GPU MODE lays it out.
    return (raw & NIBBLE_MASK).permute(1, 2, 0).view(torch.float4_e2m1fn_x2)


def _random_scales(rows: int, k: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    # Scales of 1 and 2 keep every product exact (see NIBBLE_MASK).
    ints = torch.randint(1, 3, (1, rows, k // SF_VEC_SIZE), dtype=torch.int8, generator=generator, device=device)
    return ints.to(torch.float8_e4m3fn).permute(1, 2, 0)


def generate_input(m: list[int], n: list[int], k: list[int], g: int, seed: int) -> input_t:
    """Seeded inputs for `g` groups, on CUDA when present, else CPU.

    Returns (abc_tensors, sfasfb_tensors, sfasfb_reordered_tensors, problem_sizes) with, per group,
    a: (M, K/2, 1) and b: (N, K/2, 1) float4_e2m1fn_x2, c: (M, N, 1) float16 (preallocated, random),
    sfa: (M, K/16, 1) and sfb: (N, K/16, 1) float8_e4m3fn, their blocked forms of shape
    (32, 4, rest, 4, K/64, 1), and the problem size (M, N, K, 1).
    """
    if not (len(m) == len(n) == len(k) == g):
        raise ValueError(f"m, n and k need g = {g} entries each; got {len(m)}, {len(n)}, {len(k)}")
    device = pick_device()
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    abc_tensors, sf_tensors, sf_reordered, problem_sizes = [], [], [], []
    for mi, ni, ki in zip(m, n, k):
        if ki % 64:
            raise ValueError(f"K = {ki}: the blocked scale layout needs K divisible by 64")
        a = _random_fp4(mi, ki, generator, device)
        b = _random_fp4(ni, ki, generator, device)
        c = torch.randn((1, mi, ni), dtype=torch.float16, generator=generator, device=device).permute(1, 2, 0)
        sfa = _random_scales(mi, ki, generator, device)
        sfb = _random_scales(ni, ki, generator, device)
        abc_tensors.append((a, b, c))
        sf_tensors.append((sfa, sfb))
        sf_reordered.append((to_reordered(sfa[:, :, 0]), to_reordered(sfb[:, :, 0])))
        problem_sizes.append((mi, ni, ki, 1))
    return abc_tensors, sf_tensors, sf_reordered, problem_sizes


# ---------------------------------------------------------------------------------------------------------
# Reference


def dequantize(packed: torch.Tensor, sf: torch.Tensor) -> torch.Tensor:
    """Float32 (R, K) values of one batch slice: packed (R, K/2) e2m1 times its (R, K/16) scales."""
    values = unpack_e2m1(packed)
    return values * expand_scales(sf, values.shape[1]).to(values.device)


def _has_fp4_tensor_cores(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 10


def _scaled_mm_fp4(a, b, sfa, sfb) -> torch.Tensor:
    return torch._scaled_mm(
        a,
        b.transpose(0, 1),
        to_blocked(sfa),
        to_blocked(sfb),
        bias=None,
        out_dtype=torch.float16,
    )


def ref_kernel(data: input_t) -> output_t:
    """Write each group's product into its preallocated fp16 C (M, N, 1) and return the C tensors.

    Dequantises to fp32 and multiplies in fp32 (any device); on SM100+ it uses the FP4 tensor cores
    through `torch._scaled_mm` with the blocked scales instead.
    """
    abc_tensors, sf_tensors, _, problem_sizes = data
    outputs = []
    for (a, b, c), (sfa, sfb), (_mi, _ni, _ki, batch) in zip(abc_tensors, sf_tensors, problem_sizes):
        for index in range(batch):
            a_l, b_l = a[:, :, index], b[:, :, index]
            sfa_l, sfb_l = sfa[:, :, index], sfb[:, :, index]
            if _has_fp4_tensor_cores(a.device):
                c[:, :, index] = _scaled_mm_fp4(a_l, b_l, sfa_l, sfb_l)
            else:
                product = dequantize(a_l, sfa_l) @ dequantize(b_l, sfb_l).T
                c[:, :, index] = product.to(torch.float16)
        outputs.append(c)
    return outputs


def _with_own_outputs(data: input_t) -> input_t:
    """The same inputs with new C tensors, so that the reference never writes into the output it checks."""
    abc_tensors, sf_tensors, sf_reordered, problem_sizes = data
    fresh = [(a, b, torch.empty_like(c)) for a, b, c in abc_tensors]
    return fresh, sf_tensors, sf_reordered, problem_sizes


_match = make_match_reference(ref_kernel, rtol=RTOL, atol=ATOL)


def check_implementation(data: input_t, output: output_t) -> tuple[bool, str]:
    """(ok, message): `output` against the reference within rtol = atol = 1e-3; NaN and Inf never pass."""
    return _match(_with_own_outputs(data), output)
