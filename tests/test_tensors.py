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


def test_numbers_are_compared_exactly_or_within_the_tolerance_and_nan_never_passes():
    assert not tensors.number_mismatched(3, 3, 0.1, 0.1) and tensors.number_mismatched(4, 3, 0.5, 0.5)
    assert not tensors.number_mismatched(True, True, 0, 0) and tensors.number_mismatched(False, True, 0, 0)
    assert not tensors.number_mismatched(None, None, 0, 0) and tensors.number_mismatched(0, None, 0, 0)
    assert tensors.number_mismatched(None, 0.0, 1.0, 1.0)
    assert not tensors.number_mismatched(1.0005, 1.0, 1e-3, 0.0) and tensors.number_mismatched(1.002, 1.0, 1e-3, 0.0)
    assert tensors.number_mismatched(float("nan"), float("nan"), 1.0, 1.0)
    assert tensors.number_mismatched(float("inf"), float("inf"), 1.0, 1.0)
    compared = tensors.compare_number("[1]", 2.5, 2.0, 1e-3, 1e-3)
    assert compared == {"path": "[1]", "dtype": "float", "elements": 1, "nonfinite": 0, "mismatched": 1,
                        "max_abs_err": 0.5, "max_rel_err": 0.25, "rtol": 1e-3, "atol": 1e-3,
                        "first_mismatches": [{"index": [], "got": 2.5, "expected": 2.0}]}
    exact = tensors.compare_number("", 7, 7, 1e-3, 1e-3)  # an int is held to no tolerance
    assert (exact["dtype"], exact["mismatched"], exact["rtol"], exact["atol"]) == ("int", 0, 0.0, 0.0)
    assert tensors.compare_number("", float("nan"), 1.0, 1e-3, 1e-3)["nonfinite"] == 1


def test_leaves_pair_by_path_so_a_plain_tuple_meets_a_named_one_and_a_dict_meets_its_keys():
    x, y = torch.ones(2), torch.zeros(2)
    named = torch.max(torch.eye(2), dim=1)
    pairs, problem = tensors.paired(tensors.leaves(((x, y), {"b": 2, "a": 1.5})),
                                    tensors.leaves((named, {"a": 1.5, "b": 2})))
    assert problem == "" and [(p, g) for p, g, _ in pairs] == [("[0][0]", x), ("[0][1]", y), ("[1]['a']", 1.5),
                                                               ("[1]['b']", 2)]
    assert tensors.paired(tensors.leaves(named), tensors.leaves((named, 1.5)))[1] == \
        "returned 2 tensors, the reference returns 2 tensors and 1 number"
    assert tensors.paired(tensors.leaves((x, y, 1)), tensors.leaves((named, 1)))[1] == \
        "the output has nothing at output[0][0], where the reference's has a value (nested otherwise)"


def test_a_timed_call_s_numbers_and_its_tensors_in_a_dict_of_another_order_are_checked():
    gen = torch.Generator().manual_seed(3)
    a, b = torch.randn(1000, generator=gen), torch.randn(10, generator=gen)
    projector = tensors.Projector(seed=11)
    bounds = projector.bounds({"a": a, "n": 3, "b": b, "t": 0.5}, rtol=1e-3, atol=1e-3)
    order = [w["path"] for w in bounds]
    honest = projector.project({"t": 0.5004, "b": b.clone(), "n": 3, "a": a.clone()}, order=order)
    assert tensors.projection_failure(honest, bounds) is None
    assert tensors.projection_failure(projector.project({"a": a, "n": 4, "b": b, "t": 0.5}, order=order), bounds) \
        == "output['n'] is 4, the reference's is 3"
    assert tensors.projection_failure(projector.project({"a": a, "n": 3, "b": b, "t": float("nan")}, order=order),
                                      bounds) == "output['t'] is nan, the reference's is 0.5"
    assert tensors.projection_failure(projector.project({"a": a, "n": b, "b": b, "t": 0.5}, order=order), bounds) \
        == "output['n'] is a tensor, the reference's is a number"


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


def test_a_comparison_in_chunks_finds_what_one_piece_finds(monkeypatch):
    torch = pytest.importorskip("torch")
    from judge.boundary import tensors

    want = torch.arange(20.0).reshape(4, 5)
    got = want.clone()
    got[0, 3], got[3, 0], got[3, 4] = float("nan"), 16.0, 19.5
    whole = tensors.compare("", got, want, 1e-3, 1e-3)
    monkeypatch.setattr(tensors, "COMPARE_CHUNK", 7)
    assert tensors.compare("", got, want, 1e-3, 1e-3) == whole
    assert (whole["nonfinite"], whole["mismatched"], whole["max_abs_err"]) == (1, 3, 1.0)
    assert [m["index"] for m in whole["first_mismatches"]] == [[0, 3], [3, 0], [3, 4]]


def test_a_references_answer_is_kept_without_its_autograd_graph():
    """GPU MODE's trimul reference runs an nn.Module with parameters: its output's graph keeps every activation
    alive (25 GiB at seqlen 1024) while the oracle keeps the answer. The answer keeps its values and structure."""
    import collections

    import torch

    from judge.boundary.tensors import detached

    weight = torch.nn.Parameter(torch.ones(3))
    out = torch.arange(3.0) * weight
    pair = collections.namedtuple("Pair", "out count")(out, 3)
    answer = detached({"result": (pair, torch.max(out.reshape(1, 3), dim=1)), "plain": [torch.zeros(2)]})
    got, most = answer["result"]
    assert type(got).__name__ == "Pair" and got.count == 3 and not got.out.requires_grad and got.out.grad_fn is None
    assert got.out.untyped_storage().data_ptr() == out.untyped_storage().data_ptr()  # shared, not copied
    assert type(most) is torch.return_types.max and not most.values.requires_grad
    plain = {"a": [torch.zeros(2)]}
    assert detached(plain) is plain  # nothing to drop: the same object


def test_answers_and_checks_run_without_a_graph_unless_the_reference_takes_gradients():
    import torch

    from judge.boundary.memory import without_graph

    weight = torch.nn.Parameter(torch.ones(3))
    assert not without_graph(lambda x: x * weight, torch.arange(3.0)).requires_grad  # no graph built, none kept

    def gradient(x):  # a reference that takes gradients: autograd on, on a copy its first run never wrote
        x = x.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad((x * x).sum(), x)
        return grad

    made = []
    data = torch.arange(3.0)
    assert without_graph(gradient, data, fresh=lambda: (made.append(1) or data.clone(),)).tolist() == [0.0, 2.0, 4.0]
    assert made == [1]
    with pytest.raises(RuntimeError, match="shape"):  # any other failure is the reference's own
        without_graph(lambda x: x.view(7), data)
