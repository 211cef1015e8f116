"""The nvfp4_group_gemm target on CPU: e2m1 packing, the blocked scale layout, the generator and the
reference against values worked out by hand, and the task's metadata."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import torch
import yaml

from target_modules import load_from

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "kernels" / "nvfp4_group_gemm"


ref = load_from(TARGET, "reference")


def fp8(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32).to(torch.float8_e4m3fn)


def one_group(a_values, b_values, sfa_values, sfb_values):
    """A GPU MODE data tuple for one group from plain values: A (M x K), B (N x K), scales (rows x K/16)."""
    a = ref.pack_e2m1(torch.tensor(a_values, dtype=torch.float32)).unsqueeze(-1)
    b = ref.pack_e2m1(torch.tensor(b_values, dtype=torch.float32)).unsqueeze(-1)
    sfa, sfb = fp8(sfa_values).unsqueeze(-1), fp8(sfb_values).unsqueeze(-1)
    m, n, k = a.shape[0], b.shape[0], 2 * a.shape[1]
    c = torch.full((m, n, 1), float("nan"), dtype=torch.float16)
    reordered = (ref.to_reordered(sfa[:, :, 0]), ref.to_reordered(sfb[:, :, 0]))
    return ([(a, b, c)], [(sfa, sfb)], [reordered], [(m, n, k, 1)])


# ---- e2m1 ---------------------------------------------------------------------------------------------


def test_e2m1_codes_decode_to_the_sixteen_values():
    decoded = ref.e2m1_decode(torch.arange(16)).tolist()
    assert decoded == [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6]


def test_packing_puts_the_even_k_element_in_the_low_nibble():
    packed = ref.pack_e2m1(torch.tensor([[0.5, 6.0, -1.0, 3.0]]))
    assert packed.dtype == torch.float4_e2m1fn_x2
    assert packed.shape == (1, 2)
    # 0.5 is code 1, 6 is code 7, -1 is code 8 + 2 = 10, 3 is code 5.
    assert packed.view(torch.uint8).tolist() == [[0x71, 0x5A]]


def test_unpack_inverts_pack_for_every_value():
    values = torch.tensor([ref.E2M1_MAGNITUDES + tuple(-v for v in ref.E2M1_MAGNITUDES[1:]) + (0.0,)])
    assert torch.equal(ref.unpack_e2m1(ref.pack_e2m1(values)), values)


def test_every_byte_survives_unpack_and_pack():
    raw = torch.arange(256, dtype=torch.uint8).reshape(1, 256)
    values = ref.unpack_e2m1(raw.view(torch.float4_e2m1fn_x2))
    repacked = ref.pack_e2m1(values).view(torch.uint8)
    # Negative zero (code 8) comes back as code 0; every other nibble is kept.
    canonical = torch.where((raw & 0x0F) == 8, raw & 0xF0, raw)
    canonical = torch.where((canonical >> 4) == 8, canonical & 0x0F, canonical)
    assert torch.equal(repacked, canonical)


def test_values_e2m1_cannot_hold_are_refused():
    with pytest.raises(ValueError, match="not representable"):
        ref.pack_e2m1(torch.tensor([[2.5, 1.0]]))


# ---- blocked scale layout -----------------------------------------------------------------------------


def test_blocked_layout_interleaves_rows_32_apart_in_each_16_byte_row():
    sf = torch.arange(128 * 4, dtype=torch.int32).reshape(128, 4).to(torch.uint8)
    blocked = ref.to_blocked(sf)
    assert blocked.shape == (512,)
    for r in (0, 5, 31):
        for j in range(4):
            for c in range(4):
                assert blocked[16 * r + 4 * j + c] == sf[r + 32 * j, c]
    # Bytes 0-3 are row 0, bytes 4-7 row 32, bytes 8-11 row 64, bytes 12-15 row 96.
    assert blocked[:16].tolist() == [v % 256 for v in [0, 1, 2, 3, 128, 129, 130, 131, 256, 257, 258, 259, 384, 385, 386, 387]]


def test_blocked_atoms_run_along_columns_first_then_rows():
    sf = torch.zeros((256, 8), dtype=torch.uint8)
    sf[0, 4] = 1  # atom (row block 0, column block 1): the second atom
    sf[128, 0] = 2  # atom (row block 1, column block 0): the third atom
    blocked = ref.to_blocked(sf)
    assert blocked[512].item() == 1
    assert blocked[1024].item() == 2
    assert int(blocked.count_nonzero()) == 2


@pytest.mark.parametrize("shape", [(128, 4), (96, 16), (200, 12), (40, 128), (384, 448)])
def test_blocked_layout_round_trips(shape):
    generator = torch.Generator().manual_seed(7)
    sf = torch.randint(1, 255, shape, dtype=torch.uint8, generator=generator)
    blocked = ref.to_blocked(sf)
    rows = -(-shape[0] // 128) * 128
    cols = -(-shape[1] // 4) * 4
    assert blocked.numel() == rows * cols
    assert torch.equal(ref.from_blocked(blocked, *shape), sf)
    # Padding is zero: all the non-zero bytes are the matrix's own.
    assert int(blocked.count_nonzero()) == sf.numel()


def test_blocked_layout_keeps_fp8_values():
    sf = fp8([[1.0, 2.0, 0.5, 448.0]] * 3)
    back = ref.from_blocked(ref.to_blocked(sf), 3, 4)
    assert back.dtype == torch.float8_e4m3fn
    assert torch.equal(back.float(), sf.float())


def test_reordered_view_names_the_axes_of_the_blocked_storage():
    generator = torch.Generator().manual_seed(3)
    sf = torch.randint(0, 256, (200, 12), dtype=torch.uint8, generator=generator)
    reordered = ref.to_reordered(sf)
    assert reordered.shape == (32, 4, 2, 4, 3, 1)
    for r, c in [(0, 0), (31, 3), (32, 0), (127, 11), (128, 5), (199, 7)]:
        assert reordered[r % 32, (r % 128) // 32, r // 128, c % 4, c // 4, 0] == sf[r, c]
    assert torch.equal(reordered.permute(5, 2, 4, 0, 1, 3).reshape(-1), ref.to_blocked(sf))


# ---- reference against hand-worked values -------------------------------------------------------------


def test_one_by_one_with_two_scale_blocks():
    # K = 32: two blocks of 16. Block 0: 0.5 * 2 (SFA) times 6 * 1 (SFB) = 6 per element, 16 elements: 96.
    # Block 1: 1.5 * 1 times -0.5 * 4 = -3 per element, 16 elements: -48. C = 48.
    data = one_group([[0.5] * 16 + [1.5] * 16], [[6.0] * 16 + [-0.5] * 16], [[2, 1]], [[1, 4]])
    (out,) = ref.ref_kernel(data)
    assert out.dtype == torch.float16
    assert out.shape == (1, 1, 1)
    assert out.item() == 48.0


def test_two_by_three_with_k_16():
    a = [[1.0] * 16, [-0.5] * 8 + [2.0] * 8]
    b = [[1.0] * 16, [0.0] * 15 + [6.0], [3.0, -3.0] * 8]
    # Row 0 of A is scaled by 0.5, row 1 by 2; the rows of B by 1, 2 and 0.25.
    data = one_group(a, b, [[0.5], [2.0]], [[1.0], [2.0], [0.25]])
    (out,) = ref.ref_kernel(data)
    expected = torch.tensor(
        [
            # a0 = 0.5 x ones: . b0 = 16 * 0.5 = 8; . 2 b1 = 0.5 * 6 * 2 = 6; . 0.25 b2 = 0 (the +3 and -3 cancel)
            [8.0, 6.0, 0.0],
            # a1 = 2 x [-0.5 x 8, 2 x 8]: . b0 = 2 * (-4 + 16) = 24; . 2 b1 = 2 * 2 * 6 * 2 = 48;
            # . 0.25 b2 = 0: each half of a1 is constant, and b2's alternating signs cancel within it
            [24.0, 48.0, 0.0],
        ],
        dtype=torch.float16,
    ).unsqueeze(-1)
    assert torch.equal(out, expected)


def test_reference_writes_into_the_preallocated_c_and_returns_it():
    data = one_group([[1.0] * 16], [[1.0] * 16], [[1.0]], [[1.0]])
    (out,) = ref.ref_kernel(data)
    assert out is data[0][0][2]
    assert out.item() == 16.0


def test_check_is_not_fooled_by_an_output_that_aliases_the_inputs_c():
    data = small_input()
    untouched = [c.clone() for _, _, c in data[0]]
    output = [c for _, _, c in data[0]]  # a kernel that returns C without writing it
    ok, message = ref.check_implementation(data, output)
    assert not ok
    assert message.startswith("group 0:")
    assert all(torch.equal(c, before) for (_, _, c), before in zip(data[0], untouched))


def test_groups_are_independent():
    first = one_group([[1.0] * 16], [[2.0] * 16], [[1.0]], [[1.0]])
    second = one_group([[0.5] * 16, [1.0] * 16], [[-4.0] * 16], [[1.0], [2.0]], [[0.5]])
    data = tuple(x + y for x, y in zip(first, second))
    out = ref.ref_kernel(data)
    assert [o.shape for o in out] == [(1, 1, 1), (2, 1, 1)]
    assert out[0].flatten().tolist() == [32.0]
    assert out[1].flatten().tolist() == [-16.0, -64.0]


# ---- the checker -------------------------------------------------------------------------------------


def small_input():
    return ref.generate_input(m=[40, 128], n=[128, 256], k=[256, 512], g=2, seed=1111)


def test_the_reference_passes_its_own_check():
    data = small_input()
    assert ref.check_implementation(data, ref.ref_kernel(data)) == (True, "")


def test_a_wrong_element_fails_and_is_located():
    data = small_input()
    out = ref.ref_kernel(data)
    out[1][3, 5, 0] += 4.0 + 0.01 * abs(out[1][3, 5, 0].item())
    ok, message = ref.check_implementation(data, out)
    assert not ok
    assert message.startswith("group 1: 1 of 32768 elements differ")
    assert "(3, 5, 0)" in message


def test_differences_within_tolerance_pass():
    data = small_input()
    out = ref.ref_kernel(data)
    value = out[0][0, 0, 0].item()
    out[0][0, 0, 0] = value + 0.5 * (1e-3 + 1e-3 * abs(value))
    assert ref.check_implementation(data, out)[0]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_inf_never_pass(bad):
    data = small_input()
    out = ref.ref_kernel(data)
    out[0][1, 2, 0] = bad
    ok, message = ref.check_implementation(data, out)
    assert not ok
    assert "group 0" in message


def test_a_missing_group_fails():
    data = small_input()
    ok, message = ref.check_implementation(data, ref.ref_kernel(data)[:1])
    assert (ok, message) == (False, "expected 2 outputs, got 1")


# ---- the generator -----------------------------------------------------------------------------------


def test_generator_lays_out_tensors_as_gpu_mode_does():
    abc, sf, sf_reordered, sizes = ref.generate_input(m=[96, 40], n=[128, 256], k=[256, 512], g=2, seed=1111)
    assert sizes == [(96, 128, 256, 1), (40, 256, 512, 1)]
    a, b, c = abc[1]
    assert (a.shape, a.dtype) == ((40, 256, 1), torch.float4_e2m1fn_x2)
    assert (b.shape, b.dtype) == ((256, 256, 1), torch.float4_e2m1fn_x2)
    assert (c.shape, c.dtype) == ((40, 256, 1), torch.float16)
    assert a.stride() == (256, 1, 40 * 256)
    sfa, sfb = sf[1]
    assert (sfa.shape, sfa.dtype) == ((40, 32, 1), torch.float8_e4m3fn)
    assert sfb.shape == (256, 32, 1)
    sfa_r, sfb_r = sf_reordered[1]
    assert sfa_r.shape == (32, 4, 1, 4, 8, 1)
    assert sfb_r.shape == (32, 4, 2, 4, 8, 1)
    assert torch.equal(sfa_r.view(torch.uint8), ref.to_reordered(sfa[:, :, 0]).view(torch.uint8))


def test_generator_values_stay_in_the_exact_range():
    abc, sf, _, _ = ref.generate_input(m=[64], n=[128], k=[512], g=1, seed=5)
    values = ref.unpack_e2m1(abc[0][0][:, :, 0])
    assert set(values.abs().unique().tolist()) <= {0.0, 0.5, 1.0, 1.5}
    assert set(sf[0][0].float().unique().tolist()) == {1.0, 2.0}


def test_generator_is_deterministic_by_seed():
    def raw(seed):
        abc, sf, _, _ = ref.generate_input(m=[72], n=[128], k=[256], g=1, seed=seed)
        a, b, c = abc[0]
        return [a.view(torch.uint8), b.view(torch.uint8), c, sf[0][0].view(torch.uint8)]

    first, again, other = raw(1111), raw(1111), raw(1112)
    assert all(torch.equal(x, y) for x, y in zip(first, again))
    assert not torch.equal(first[0], other[0])


def test_generator_refuses_mismatched_lists():
    with pytest.raises(ValueError, match="g = 3"):
        ref.generate_input(m=[64, 64], n=[128, 128], k=[256, 256], g=3, seed=1)


# ---- the task's metadata -----------------------------------------------------------------------------


def test_task_yml_has_the_public_contest_shapes():
    task = yaml.safe_load((TARGET / "task.yml").read_text())
    assert [f["source"] for f in task["files"]] == ["@SUBMISSION@", "task.py", "utils.py", "reference.py"]
    assert len(task["tests"]) == 10
    assert len(task["benchmarks"]) == 4
    assert task["ranking_by"] == "geom"
    for spec in task["tests"] + task["benchmarks"]:
        assert spec["seed"] == 1111
        assert len(spec["m"]) == len(spec["n"]) == len(spec["k"]) == spec["g"]
        assert all(k % 256 == 0 for k in spec["k"])
    assert task["benchmarks"][2] == {"m": [192, 320], "n": [3072, 3072], "k": [4096, 4096], "g": 2, "seed": 1111}


def test_judge_toml_states_arch_speed_of_light_and_tolerance():
    meta = tomllib.loads((TARGET / "judge.toml").read_text())
    assert meta["arch"] == "sm_100a"
    assert meta["speed_of_light_us"] == [18.833, 10.667, 2.406, 1.525]
    assert meta["tolerance"] == {"rtol": 1e-3, "atol": 1e-3}
    assert meta["compile"]["entry"] == "compile_kernel"
    assert (TARGET / meta["kernel_file"]).is_file()
