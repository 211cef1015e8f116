"""Correctness inputs kept for the round (judge.boundary.kept_inputs): made once where making them is slow, each use
a copy of its own, and only what a copy reproduces."""

import sys
from collections import namedtuple
from types import SimpleNamespace

import pytest
import torch

from judge.boundary import kept_inputs
from judge.boundary.kept_inputs import KeptInputs
from judge.stages.seeds import RoundSeeds, derive

Pair = namedtuple("Pair", "x y")


def test_a_slow_input_is_kept_and_each_use_gets_a_copy_of_its_own():
    kept = KeptInputs(budget_bytes=1 << 20)
    x = torch.arange(6, dtype=torch.float32).requires_grad_(True)
    data = (Pair(x, torch.ones(2, 3)), {"config": {"dim": 3}, "w": torch.zeros(4, dtype=torch.int64)}, 7)
    assert kept.offer("k", data, making_s=10.0)
    first, second = kept.get("k"), kept.get("k")
    for got in (first, second):
        assert type(got[0]) is Pair and got[1]["config"] == {"dim": 3} and got[2] == 7
        assert torch.equal(got[0].x, x.detach()) and got[0].x.requires_grad and not got[0].y.requires_grad
        assert torch.equal(got[1]["w"], data[1]["w"]) and got[1]["w"].dtype == torch.int64
    assert first[0].y.data_ptr() != second[0].y.data_ptr() != data[0].y.data_ptr()
    first[0].y.add_(1)  # what one use does to its copy no other use sees
    assert torch.equal(second[0].y, torch.ones(2, 3)) and torch.equal(kept.get("k")[0].y, torch.ones(2, 3))
    assert list(kept.kept) == ["k"] and kept.bytes == 6 * 4 + 6 * 4 + 4 * 8


@pytest.mark.parametrize("making_s, budget, data, why", [
    (kept_inputs.MIN_MAKING_S / 2, 1 << 20, (torch.ones(4),), "made faster than keeping would save"),
    (10.0, 15, (torch.ones(4),), "past the budget (16 bytes of 15)"),
    (10.0, 1 << 20, (torch.ones(4, 4).t(),), "a view that is not contiguous"),
    (10.0, 1 << 20, (lambda t: (t, t.view(2, 2)))(torch.ones(4)), "two tensors on one storage"),
    (10.0, 1 << 20, (torch.nn.Parameter(torch.ones(4)),), "a tensor subclass"),
])
def test_what_is_made_again_for_every_use(making_s, budget, data, why):
    kept = KeptInputs(budget_bytes=budget)
    assert not kept.offer("k", data, making_s), why
    assert kept.get("k") is None and kept.kept == {} and kept.bytes == 0


def test_inputs_that_fill_the_budget_leave_later_ones_made_again():
    kept = KeptInputs(budget_bytes=40)
    assert kept.offer("a", (torch.ones(8),), 10.0)  # 32 bytes
    assert not kept.offer("b", (torch.ones(4),), 10.0)  # 16 more would pass 40
    assert kept.offer("c", (torch.ones(2),), 10.0)  # 8 more fit
    assert kept.bytes == 40 and sorted(kept.kept) == ["a", "c"]


SLOW = '''
import time
import torch
made = []
def generate_input(size, seed):
    made.append(seed)
    time.sleep(0.12 if size > 8 else 0)
    g = torch.Generator().manual_seed(seed)
    return torch.randn(size, generator=g), torch.empty(size)
def ref_kernel(data):
    a, out = data
    torch.mul(a, 2, out=out)
    return out
def check_implementation(data, output):
    return True, ""
'''


@pytest.fixture
def oracle(oracle_over):
    """An oracle in this process over a reference whose large inputs are slow to make, with two runners."""
    return oracle_over(SLOW, runners=(1, 2))


def test_the_oracle_makes_a_slow_case_once_for_every_evaluation_and_a_fast_one_each_time(oracle, capfd):
    slow, fast = {"size": 64, "seed": 11}, {"size": 4, "seed": 12}
    for runner, key in ((1, "c1-0"), (2, "c2-0")):  # two evaluations' runners, the same round's cases
        oracle.case(key + "s", slow, "default", runner)
        oracle.case(key + "f", fast, "default", runner)
    assert sys.modules["reference"].made == [11, 12, 12]
    first, second = oracle.cases["c1-0s"][0], oracle.cases["c2-0s"][0]
    assert torch.equal(first[0], second[0]) and first[0].data_ptr() != second[0].data_ptr()
    assert torch.equal(oracle.cases["c2-0s"][1], 2 * second[0])  # answered on the copy
    assert list(oracle.inputs.kept) == ['["default", {"seed": 11, "size": 64}]']
    line = capfd.readouterr().err.strip()
    assert line.startswith("judge oracle: inputs kept for the round (0.1 s to make; 0 MiB kept in all): ")
    assert line.endswith('["default", {"seed": 11, "size": 64}]')


SLOW_ANSWER = SLOW.replace("    a, out = data\n", "    a, out = data\n    answered.append(a.numel())\n"
                            "    time.sleep(0.12 if a.numel() > 8 else 0)\n").replace("made = []", "made, answered = [], []")


def test_a_slow_answer_is_kept_with_its_output_slots_for_every_evaluation(oracle_over):
    """The reference ran for every evaluation's copy of each case; an answer slow to make is now kept as its input
    is (with the output slots read off its run), and each check gets a copy of its own."""
    oracle = oracle_over(SLOW_ANSWER, runners=(1, 2))
    slow, fast = {"size": 64, "seed": 11}, {"size": 4, "seed": 12}
    plans = {}
    for runner, key in ((1, "c1-0"), (2, "c2-0")):
        plans[key] = oracle.case(key + "s", slow, "default", runner)
        oracle.case(key + "f", fast, "default", runner)
    # the slow case answered once, and its poisoned copy once (judge.boundary.slot_reads); the fast one each time
    assert sys.modules["reference"].answered == [64, 64, 4, 4, 4]
    assert plans["c1-0"]["poisoned"] == plans["c2-0"]["poisoned"] == ["[1]"]
    first, second = oracle.cases["c1-0s"][1], oracle.cases["c2-0s"][1]
    assert torch.equal(first, second) and first.data_ptr() != second.data_ptr()
    assert list(oracle.inputs.kept) == ['["default", {"seed": 11, "size": 64}]',
                                        'answer ["default", {"seed": 11, "size": 64}]']


class _Seeds(RoundSeeds):
    def __init__(self, confined: bool):
        self.secret, self._nonces, self.runners_leave_nothing = 7, 0, confined
        self.target = SimpleNamespace(distributions=[SimpleNamespace(name="default")],
                                      tests=[{"size": 3, "seed": 1}, {"size": 5, "seed": 2}],
                                      benchmarks=[{"size": 9, "seed": 3}])


def test_confined_evaluations_are_checked_on_the_rounds_cases_and_unconfined_ones_on_their_own():
    confined, unconfined = _Seeds(True), _Seeds(False)
    first, second = (confined.cases(confined.nonce()) for _ in range(2))
    assert [c.spec for c in first] == [c.spec for c in second]
    assert [c.spec["seed"] for c in first] == [
        derive(7, "case", "test", 0, 1, "default"), derive(7, "case", "test", 0, 2, "default"),
        derive(7, "case", "test", 1, 1, "default"), derive(7, "case", "test", 1, 2, "default"),
        derive(7, "case", "benchmark", 0, "default")]
    assert len({c.spec["seed"] for c in first}) == 5  # each test on two seeds still
    mine, theirs = (unconfined.cases(unconfined.nonce()) for _ in range(2))
    assert not {c.spec["seed"] for c in mine} & {c.spec["seed"] for c in theirs}
    assert not {c.spec["seed"] for c in mine} & {c.spec["seed"] for c in first}


class _TimingSeeds(_Seeds):
    def __init__(self, shares: bool, kept: tuple[bool, ...]):
        super().__init__(shares)
        self.keep_sets, self.kept = shares, kept

    def keeps(self, index: int) -> bool:
        return self.kept[index]


def test_a_round_that_shares_its_sets_times_the_same_ones_in_every_pair_kept_on_the_device_or_not():
    shared = _TimingSeeds(True, (True, False))
    one, other = shared.nonce(), shared.nonce()
    for index in (0, 1):
        assert shared.timing_seeds(index, one, 0, 2) == shared.timing_seeds(index, other, 3, 2) == [
            derive(7, "timing", index, n) for n in range(3)]
        assert shared.projection_seed(index, one, 0) == shared.projection_seed(index, other, 3)
    assert (shared.kept_name(0), shared.held_name(0)) == ("timing-0", "")  # on the device
    assert (shared.kept_name(1), shared.held_name(1)) == ("", "timing-1")  # in host memory, where making them pays
    own = _TimingSeeds(False, (False, False))
    nonce = own.nonce()
    assert own.timing_seeds(1, nonce, 0, 2) != own.timing_seeds(1, nonce, 1, 2)  # each pair's own
    assert (own.kept_name(1), own.held_name(1)) == ("", "")


def test_a_copy_out_that_does_not_pay_is_made_once_and_not_tried_where_the_rate_says_so(monkeypatch):
    """trimul's answers, 1.5-3 GiB computed in 0.05 s, were copied to host memory and dropped again in every
    evaluation's check: 18-22 s of each on an H200 (2026-11-29)."""
    copies = []
    real = kept_inputs._Held

    def counted(tensor):
        copies.append(tensor.numel())
        return real(tensor)

    monkeypatch.setattr(kept_inputs, "_Held", counted)
    clock = iter(range(0, 1000, 2))  # every copy out takes 2 s of this clock
    monkeypatch.setattr(kept_inputs.time, "perf_counter", lambda: float(next(clock)))
    kept = KeptInputs(budget_bytes=1 << 30)
    big = (torch.ones(kept_inputs.MEASURED_BYTES // 4),)
    assert not kept.offer("a", big, making_s=1.0)  # 1 s to make, 2 s to copy out: does not pay
    assert not kept.offer("a", big, making_s=1.0) and len(copies) == 1  # not copied again
    assert not kept.offer("b", big, making_s=3.0) and len(copies) == 1  # the rate says 4 s would be needed
    assert kept.offer("c", big, making_s=5.0) and len(copies) == 2 and list(kept.kept) == ["c"]


def test_inputs_made_on_a_gpu_are_kept_there_within_its_share_until_the_timing_plans_the_device(monkeypatch):
    """Copied back through pageable host memory, cholesky_py's 4 GiB input cost about what making it again did, so it
    was made again for every evaluation's check; on the GPU, each use is a copy at the device's own speed. A CPU
    copy stands in for the GPU here (the GPU test below keeps them on one)."""
    monkeypatch.setattr(kept_inputs, "_on_gpu", lambda leaves: True)
    monkeypatch.setattr(kept_inputs, "_gpu_total", lambda: 1000)
    kept = KeptInputs(budget_bytes=0, device_share=0.1)  # 100 of the GPU's 1000 bytes; nothing in host memory
    big, small = (torch.ones(16),), (torch.ones(8),)  # 64 and 32 bytes
    assert kept.offer("big", big, making_s=1.7) and kept.offer("small", small, making_s=0.2)
    assert not kept.offer("more", (torch.ones(2),), making_s=1.0)  # 8 more would pass 100 bytes
    assert kept.on_device == {"big": 64, "small": 32} and kept.bytes == 0
    big[0].add_(1)  # the input as made is the first use's: what it does to it the kept copy never sees
    first, second = kept.get("big"), kept.get("big")
    assert torch.equal(first[0], torch.ones(16)) and first[0].data_ptr() != second[0].data_ptr()
    assert kept.leave_device() == 96
    assert kept.kept == {} and kept.get("big") is None
    assert not kept.offer("big", big, making_s=1.7)  # none kept on the device once the timing has planned it


def test_a_cpu_targets_inputs_are_never_kept_as_a_gpus():
    kept = KeptInputs(budget_bytes=0, device_share=0.5)
    assert not kept.offer("k", (torch.ones(4),), making_s=1.0)  # made on the CPU: the host budget (none) decides
    assert kept.on_device == {} and kept.device_budget is None  # and the GPU's memory was never asked


def test_the_timings_plan_asks_the_oracle_to_give_its_gpu_copies_back(oracle_over, monkeypatch, capfd):
    oracle = oracle_over(SLOW, runners=(1,))
    monkeypatch.setattr(kept_inputs, "_on_gpu", lambda leaves: True)
    monkeypatch.setattr(kept_inputs, "_gpu_total", lambda: 1 << 30)
    oracle.inputs.device_share = 0.5
    oracle.case("c1-0s", {"size": 64, "seed": 11}, "default", 1)
    assert list(oracle.inputs.on_device) == ['["default", {"seed": 11, "size": 64}]']
    oracle.memory()  # a look at the device (the start of a round's check) keeps them
    assert oracle.inputs.on_device
    capfd.readouterr()
    oracle.memory(timing=True)
    assert oracle.inputs.on_device == {} and oracle.inputs.kept == {}
    assert capfd.readouterr().err == ("judge oracle: 0 MiB of correctness inputs and answers kept on the device given "
                                      "back for the timing's plan\n")


@pytest.mark.gpu
def test_on_a_gpu_an_input_is_kept_there_and_each_use_is_a_copy_on_it():
    kept = KeptInputs(budget_bytes=0, device_share=kept_inputs.DEVICE_SHARE)
    made = (torch.full((1 << 20,), 3.0, device="cuda"), {"n": 4})
    assert kept.offer("k", made, making_s=1.0) and kept.on_device == {"k": 4 << 20}
    before = torch.cuda.memory_allocated()
    first = kept.get("k")
    assert first[0].is_cuda and first[1] == {"n": 4} and torch.equal(first[0], made[0])
    assert first[0].data_ptr() != made[0].data_ptr() and torch.cuda.memory_allocated() == before + (4 << 20)
    del first
    assert kept.leave_device() == 4 << 20 and torch.cuda.memory_allocated() == before - (4 << 20)


def test_a_benchmark_sized_on_the_rounds_own_case_is_made_once_for_sizing_and_every_check(oracle, capfd):
    """The round sizes each benchmark on the correctness case its checks make (Evaluator.bytes_of): the input made
    to size it is the one the base's check and every later check get a copy of."""
    spec = {"size": 64, "seed": 11}
    planned = oracle.plan(spec, "default", keep=True)
    assert planned["input_bytes"] == 2 * 64 * 4 and planned["making_s"] >= 0.12  # a and out
    oracle.case("c1-0", spec, "default", 1)
    oracle.case("c2-0", spec, "default", 2)
    assert sys.modules["reference"].made == [11]
    oracle.plan({"size": 64, "seed": 0}, "default")  # sized on a seed of its own (runners not confined): not kept
    assert sys.modules["reference"].made == [11, 0] and list(oracle.inputs.kept) == [KeptInputs.key(spec, "default")]


def test_the_round_sizes_a_benchmark_on_the_case_its_checks_make_where_runners_are_confined(tmp_path, monkeypatch):
    from judge.stages.evaluation import Evaluator
    from judge.targets import load_target
    from pathlib import Path

    target = load_target(Path(__file__).parent.parent / "kernels" / "vecadd_cpu")
    evaluator = Evaluator(target, tmp_path)
    asked = []
    monkeypatch.setattr(Evaluator, "ask", lambda self, op, **options: asked.append((op, options)) or {})
    for confined in (True, False):
        monkeypatch.setattr(Evaluator, "runners_leave_nothing", property(lambda self: confined))
        evaluator._plans.clear()
        evaluator.bytes_of(1)
        case = next(c for c in evaluator.cases() if c.kind == "benchmark" and c.index == 1)
        assert asked.pop() == ("plan", {"spec": case.spec if confined else {**case.spec, "seed": 0},
                                        "distribution": case.distribution, "keep": confined})
