"""judge/boundary/tensors.py: output slots, poison, comparisons and projections on nested GPU MODE data."""

from pathlib import Path

import pytest

from judge.boundary import tensors

torch = pytest.importorskip("torch")


def test_output_slots_found_through_nested_data():
    a, c = torch.ones(4), torch.empty(3)
    data = (a, {"meta": 3, "out": [c]}, "name")
    after = tensors.clone_data(data)

    def reference(d):
        d[1]["out"][0].fill_(2.0)
        return d[1]["out"][0]

    returned = reference(after)
    slots = tensors.output_slots(data, after, returned)
    assert slots == ["[1]['out'][0]"]
    kernel_data = tensors.clone_data(data)
    assert tensors.poison(kernel_data, slots) == ["[1]['out'][0]"]
    assert torch.isnan(kernel_data[1]["out"][0]).all() and not torch.isnan(kernel_data[0]).any()


def test_nvfp4_outputs_are_found_among_packed_fp4_inputs(monkeypatch):
    """The SM100 target's data holds float4 tensors, which torch.equal cannot compare: the check must
    still find exactly the C tensors as outputs (this is the B200 path up to the kernel call)."""
    target_dir = Path(__file__).resolve().parents[1] / "kernels" / "nvfp4_group_gemm"
    monkeypatch.syspath_prepend(str(target_dir))
    for name in ("reference", "task", "utils"):
        monkeypatch.delitem(__import__("sys").modules, name, raising=False)
    import reference

    data = reference.generate_input(m=[128, 64], n=[128, 256], k=[256, 256], g=2, seed=1111)
    after = tensors.clone_data(data)
    returned = reference.ref_kernel(after)
    slots = tensors.output_slots(data, after, returned)
    assert slots == ["[0][0][2]", "[0][1][2]"]
    assert tensors.poison(tensors.clone_data(data), slots) == slots


def test_unchanged_nan_inputs_are_not_outputs():
    x = torch.tensor([1.0, float("nan")])
    assert tensors.output_slots((x,), tensors.clone_data((x,)), None) == []


def test_compare_exact_numbers():
    got = torch.tensor([[1.0, 2.0], [3.0, float("inf")]])
    want = torch.tensor([[1.0, 2.5], [3.0, 4.0]])
    comp = tensors.compare("", got, want, rtol=0.0, atol=0.1)
    assert comp["mismatched"] == 2 and comp["nonfinite"] == 1
    assert comp["max_abs_err"] == 0.5 and comp["max_rel_err"] == 0.2
    assert comp["first_mismatches"] == [
        {"index": [0, 1], "got": 2.0, "expected": 2.5},
        {"index": [1, 1], "got": "inf", "expected": 4.0},
    ]


class Lazy(torch.Tensor):
    """A tensor subclass: it could compute its values when the checker looks at them."""


def test_plain_tensors_only():
    assert tensors.plain_tensors((torch.ones(2), [torch.zeros(1)])) is None
    assert tensors.plain_tensors(torch.ones(2).as_subclass(Lazy)) == \
        "output is a test_tensors.Lazy (a tensor subclass)"
    assert tensors.plain_tensors((torch.ones(1), 3)) == "output[1] is a builtins.int (not a tensor)"


def test_projections_accept_honest_error_and_catch_wrong_outputs():
    gen = torch.Generator().manual_seed(3)
    expected = torch.randn(100_000, generator=gen)
    projector = tensors.Projector(seed=11)
    bounds = projector.bounds(expected, rtol=1e-3, atol=1e-3)
    # every element off by its whole tolerance, signs random: the worst honest output
    signs = torch.randint(0, 2, expected.shape, generator=gen) * 2 - 1
    honest = expected + signs * (1e-3 + 1e-3 * expected.abs())
    assert tensors.projection_failure(projector.project(honest), bounds) is None
    stale = torch.randn(100_000, generator=gen)
    assert tensors.projection_failure(projector.project(stale), bounds).startswith("output is far from the reference")
    one_in_a_hundred = expected.clone()
    one_in_a_hundred[::100] += 1.0
    assert tensors.projection_failure(projector.project(one_in_a_hundred), bounds) is not None
    poisoned = expected.clone()
    poisoned[7] = float("nan")
    assert tensors.projection_failure(projector.project(poisoned), bounds) == "output has 1 NaN/Inf elements"


def test_dense_and_chunked_projections_agree_and_come_back_together(monkeypatch):
    gen = torch.Generator().manual_seed(5)
    output = (torch.randn(3000, generator=gen), [torch.randn(40, 50, generator=gen).half()])
    dense = tensors.Projector(seed=11)
    expected = dense.project(output)
    monkeypatch.setattr(tensors.Projector, "DENSE_BYTES", 0)  # every leaf through the int8 chunks
    monkeypatch.setattr(tensors.Projector, "CHUNK", 1000)
    chunked = tensors.Projector(seed=11).project(output)
    assert [p["path"] for p in chunked] == ["[0]", "[1][0]"]
    for a, b in zip(expected, chunked):
        assert a["nonfinite"] == b["nonfinite"] == 0
        assert a["values"] == pytest.approx(b["values"], rel=1e-12, abs=1e-9)


def test_projections_of_values_past_float64s_range_fail_as_far_off():
    huge = torch.full((4,), 1e308, dtype=torch.float64)
    projector = tensors.Projector(seed=11)
    bounds = projector.bounds(torch.zeros(4, dtype=torch.float64), rtol=1e-3, atol=1e-3)
    got = projector.project(huge)
    assert got[0]["nonfinite"] == 0
    assert tensors.projection_failure(got, bounds).startswith("output is far from the reference")


def test_scrub_leaves_no_answer_in_the_output_slots():
    data = (torch.ones(3), torch.ones(2, dtype=torch.int32), {"out": torch.full((2,), 5.0)})
    tensors.scrub(data, ["[1]", "[2]['out']"])
    assert torch.equal(data[0], torch.ones(3))  # an input, not a slot: kept
    assert data[1].tolist() == [0, 0]  # integers: zeros
    assert torch.isnan(data[2]["out"]).all()  # floating: NaN


def test_arming_skips_only_the_slots_poison_fills():
    """A timed call's set is copied into a physical copy except where poison writes next: a floating output
    slot. An integer output slot (not poisoned) and every input are still copied."""
    dest = (torch.zeros(3), torch.zeros(3), torch.zeros(3, dtype=torch.int32))
    source = (torch.ones(3), torch.full((3,), 2.0), torch.full((3,), 7, dtype=torch.int32))
    skip = tensors.poisoned_slots(dest, ["[1]", "[2]"])
    assert skip == {"[1]"}
    tensors.copy_into(dest, source, skip=skip)
    assert dest[0].tolist() == [1.0, 1.0, 1.0]
    assert dest[1].tolist() == [0.0, 0.0, 0.0]
    assert dest[2].tolist() == [7, 7, 7]
    assert tensors.poison(dest, ["[1]", "[2]"]) == ["[1]"]
