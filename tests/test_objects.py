"""Inputs that are objects of a problem's own classes (judge/boundary/objects.py), as GPU MODE's amd/mla-decode hands
its kernel a dataclass of weights and a KV cache nn.Module: described and made again by class name, copied with their
state, an output slot the reference reads left unpoisoned, and each call handed the object as made (the kvdecode
fixture: a decode step that appends a row to the cache and attends over it)."""

import collections
import re
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from judge.boundary import exchange, objects, tensors  # noqa: E402
from judge.boundary.slot_reads import SlotReads  # noqa: E402
from judge.stages.check import check  # noqa: E402
from judge.stages.evaluation import Evaluator  # noqa: E402
from judge.stages.timing.stage import measure  # noqa: E402
from judge.targets import load_target  # noqa: E402

KVDECODE = Path(__file__).parent / "fixtures" / "gpumode" / "kvdecode"
Shapes = collections.namedtuple("Shapes", ["rows", "cols"])
SPEC = {"batch": 2, "dim": 4, "prefill": 3, "capacity": 8, "seed": 5}


@pytest.fixture
def reference(tmp_path, monkeypatch):
    """The fixture's reference imported as a runner imports it (`reference`, from the assembled directory)."""
    target = load_target(KVDECODE)
    directory = target.assemble(tmp_path / "problem", target.kernel_source())
    for name in ("reference", "task", "utils"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(directory))
    import reference as module

    yield module
    for name in ("reference", "task", "utils"):
        sys.modules.pop(name, None)


def test_a_dataclass_and_a_module_are_described_by_class_and_made_again_with_their_state(reference):
    data = reference.generate_input(**SPEC)
    tree, found = exchange.skeleton(data)
    config, cache = tree["tuple"][0], tree["tuple"][2]
    assert (config["object"], config["kind"]) == ("reference:Config", "dataclass")
    assert [part[:2] for part in config["parts"]] == [["batch", "attribute"], ["dim", "attribute"],
                                                      ["weight", "attribute"]]
    assert (cache["object"], cache["kind"]) == ("reference:KVCache", "module")
    assert [part[:2] for part in cache["parts"]] == [["training", "attribute"], ["length", "attribute"],
                                                     ["data", "buffer"]]
    assert [path for path, _ in tensors.leaves(data)] == ["[0].batch", "[0].dim", "[0].weight", "[1]",
                                                          "[2].training", "[2].length", "[2].data"]
    assert exchange.holds_objects(tree) and not exchange.holds_objects(exchange.skeleton((data[1], 3))[0])
    built = exchange.build(tree, found)
    assert type(built[0]) is reference.Config and (built[0].batch, built[0].dim) == (2, 4)
    assert built[0].weight is found[0] and built[1] is found[1]
    assert type(built[2]) is reference.KVCache and built[2].length == 3 and built[2].data is found[2]
    assert torch.equal(reference.ref_kernel(built)[0], reference.ref_kernel(tensors.clone_data(data))[0])


def test_a_copy_of_an_object_input_is_independent_of_the_original(reference):
    """The oracle runs the reference on a copy: the original's cache keeps its length and rows."""
    data = reference.generate_input(**SPEC)
    rows = data[2].data.clone()
    reference.ref_kernel(tensors.clone_data(data))
    assert data[2].length == 3 and torch.equal(data[2].data, rows)


def test_parameters_keep_their_role_and_whether_they_take_gradients(reference):
    layer = torch.nn.Linear(3, 2)
    layer.bias.requires_grad_(False)
    tree, found = exchange.skeleton((layer,))
    assert [part[:2] for part in tree["tuple"][0]["parts"]] == [["training", "attribute"], ["in_features", "attribute"],
                                                                ["out_features", "attribute"], ["weight", "parameter"],
                                                                ["bias", "fixed-parameter"]]
    built = exchange.build(tree, [t.detach().clone() for t in found])[0]
    assert type(built.weight) is torch.nn.Parameter and built.weight.requires_grad
    assert not built.bias.requires_grad and torch.equal(built(torch.ones(1, 3)), layer(torch.ones(1, 3)))


def test_an_object_whose_class_a_runner_cannot_import_by_name_is_refused_with_its_place():
    from dataclasses import dataclass

    @dataclass
    class Local:
        size: int

    with pytest.raises(exchange.ExchangeError) as raised:
        exchange.skeleton((1, Local(3)))
    assert str(raised.value) == (
        f"input[1] is a {__name__}.test_an_object_whose_class_a_runner_cannot_import_by_name_is_refused_with_"
        "its_place.<locals>.Local, a class a kernel's process cannot import by that name (judge carries dataclasses "
        "and nn.Modules defined at the top of a problem's files)")
    with pytest.raises(exchange.ExchangeError, match=re.escape(
            "input[0] is a builtins.object: judge hands kernels tensors, numbers, strings, dtypes, tuples, lists and "
            "dicts of them, and dataclasses and nn.Modules of the problem's own classes")):
        exchange.skeleton((object(),))


def test_only_slots_the_reference_does_not_read_are_filled_with_nan(reference):
    data = reference.generate_input(**SPEC)
    after = tensors.clone_data(data)
    answer = reference.ref_kernel(after)
    slots = tensors.output_slots(data, after, answer)
    assert slots == ["[2].data"]  # written (a row appended) and returned
    reads = SlotReads()
    assert reads.slots_to_poison(SPEC, "default", data, slots, answer, reference.ref_kernel) == []
    out_param = (torch.ones(4), torch.zeros(4), torch.zeros(4))  # a reads its input; b and c only written
    run = lambda d: (torch.add(d[0], 1, out=d[1]), torch.mul(d[0], 2, out=d[2]))  # noqa: E731
    assert reads.slots_to_poison({"n": 4}, "default", out_param, ["[1]", "[2]"], run(tensors.clone_data(out_param)),
                                 run) == ["[1]", "[2]"]
    both = lambda d: (torch.add(d[0], d[1], out=d[1]), torch.mul(d[0], 2, out=d[2]))  # noqa: E731
    assert reads.slots_to_poison({"n": 5}, "default", out_param, ["[1]", "[2]"], both(tensors.clone_data(out_param)),
                                 both) == ["[2]"]


def test_a_kv_cache_problem_is_checked_and_timed_with_each_call_given_the_cache_as_made(tmp_path):
    """The fixture's cache holds 8 rows and its benchmark fills 5: a runner that handed the same cache object to
    every call would raise 'KV cache exceeded' on the fourth (warm-up included), and a cache filled with NaN would
    leave every answer NaN. An identical copy passes its checks and is timed; a kernel that ignores the cache's
    earlier rows fails."""
    target = load_target(KVDECODE)
    target.arch = "cpu"
    base_dir = target.assemble(tmp_path / "base", target.kernel_source())
    wrong = (KVDECODE / "variants" / "forgets_prefill.py").read_text()
    with Evaluator(target, tmp_path / "round", secret=7, base_dir=base_dir) as evaluator:
        same = check(evaluator, target.assemble(tmp_path / "same", target.kernel_source()), nonce=0)
        forgets = check(evaluator, target.assemble(tmp_path / "forgets", wrong), nonce=1)
        timed = measure(evaluator, target.assemble(tmp_path / "timed", target.kernel_source()), budget_s=1,
                        timeout_s=300)
    assert (same.status, same.summary) == ("passed", "5 of 5 checks passed (2 tests x 2 seeds + 1 benchmarks)")
    assert same.detail.cases[0].poisoned == []
    assert forgets.status == "failed"
    assert "check_implementation: the output differs from the reference's" in forgets.summary, forgets.summary
    assert timed.status == "passed", timed.summary + timed.log_tail
    assert timed.detail.pairs >= 3 and len(timed.detail.benchmarks) == 1


def test_named_tuples_and_sizes_among_the_inputs_arrive_as_their_own_class():
    """An input's named tuple is made again as its own class where a runner finds it by name, else as judge's with
    the same fields; a torch.Size stays one; the oracle's copies keep both (a reference that reads `.rows` of a
    plain tuple would fail)."""
    def local():
        return collections.namedtuple("Local", ["scale"])(2.0)

    data = (Shapes(3, 4), torch.Size([3, 4]), local(), torch.max(torch.ones(2, 2), dim=1))
    tree, found = exchange.skeleton(data)
    assert tree["tuple"][0] == {"fields": ["rows", "cols"], "tuple": [{"value": 3}, {"value": 4}],
                                "class": f"{__name__}:Shapes"}
    assert tree["tuple"][1] == {"size": [3, 4]} and "class" not in tree["tuple"][2]
    assert tree["tuple"][3]["class"] == "torch.return_types:max"
    built = exchange.build(tree, found)
    assert type(built[0]) is Shapes and built[0].rows == 3
    assert type(built[1]) is torch.Size and built[1] == torch.Size([3, 4])
    assert built[2]._fields == ("scale",) and built[2].scale == 2.0
    assert type(built[3]) is torch.return_types.max and built[3].values is found[0]
    copy = tensors.clone_data(data)
    assert [type(x) for x in copy] == [type(x) for x in data] and copy[0].cols == 4


def test_a_kernel_that_patches_its_input_class_to_start_a_thread_as_objects_are_made_again_is_named(tmp_path):
    """The runner makes a call's objects again before its reply, with the problem's class, which the kernel can
    patch: code of the kernel's runs there. A thread it starts then is counted on that call's reply, as after the
    call itself, so it cannot wait there for the next input set."""
    target = load_target(KVDECODE)
    target.arch = "cpu"
    base_dir = target.assemble(tmp_path / "base", target.kernel_source())
    patched = target.kernel_source() + (
        "\n\nimport threading, time\nimport reference\n\n\ndef _rt_new(cls, *args, **kwargs):\n"
        "    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n    return object.__new__(cls)\n\n\n"
        "reference.KVCache.__new__ = _rt_new\n")
    with Evaluator(target, tmp_path / "round", secret=7, base_dir=base_dir) as evaluator:
        timed = measure(evaluator, target.assemble(tmp_path / "patched", patched), budget_s=1, timeout_s=300)
    assert (timed.status, timed.summary) == (
        "tampered", "tampered: its call started a Python thread that was still alive after it")
