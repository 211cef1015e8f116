"""The memory plan of a round's timing (judge.stages.budget): sets and copies sized from a benchmark's measured
bytes and the device's memory, and the one line that refuses a benchmark that cannot fit."""

import pytest

from judge.errors import JudgeError
from judge.stages import budget
from judge.stages.budget import BenchmarkBytes, BenchmarkPlan, DeviceMemory, plan_memory

GIB = 1 << 30
H100 = DeviceMemory("NVIDIA H100 80GB HBM3", 80 * GIB, 79 * GIB)


def test_small_benchmarks_get_the_most_sets_and_copies_their_caps_allow():
    sizes = [BenchmarkBytes(16 << 20, 16 << 20, 0), BenchmarkBytes(1 * GIB, 1 * GIB, 0)]
    plan = plan_memory(H100, sizes, ["small", "large"])
    assert plan.benchmarks == [BenchmarkPlan(sets=8, copies=8), BenchmarkPlan(sets=4, copies=2)]


def test_a_large_benchmark_is_sized_to_the_card_so_the_round_stays_under_80_percent():
    # GPU MODE's bioml/trimul benchmarks (seqlen, bs, dim): input and output seqlen^2 * bs * dim float32 each; the
    # reference's working memory taken as twice that
    shapes = [(256, 2, 128), (768, 1, 128), (256, 2, 384), (512, 1, 128), (1024, 1, 128), (768, 1, 384), (1024, 1, 384)]
    sizes = [BenchmarkBytes(s * s * b * d * 4, s * s * b * d * 4, 2 * s * s * b * d * 4) for s, b, d in shapes]
    plan = plan_memory(H100, sizes, [f"b{i}" for i in range(7)])
    assert plan.need <= int(0.8 * H100.total) - GIB
    assert all(b.copies >= budget.MIN_COPIES and b.sets >= budget.MIN_SETS for b in plan.benchmarks)
    kept = plan_memory(H100, sizes, [f"b{i}" for i in range(7)], kept=True)
    assert kept.need <= int(0.8 * H100.total) - GIB


def test_a_benchmark_that_cannot_fit_is_refused_in_one_line_with_its_size_and_the_cards():
    sizes = [BenchmarkBytes(GIB, GIB, 0), BenchmarkBytes(20 * GIB, 10 * GIB, 4 * GIB)]
    with pytest.raises(JudgeError) as error:
        plan_memory(H100, sizes, ["n=1024", "n=32768"])
    assert str(error.value) == (
        "benchmark 1 (n=32768) needs 154.0 GiB of device memory to be timed (2 input sets of its 20.0 GiB input, a copy "
        "and an outbox in each of the pair's 2 runners, its 10.0 GiB output in 3 processes, 4.0 GiB of working memory in each); "
        "NVIDIA H100 80GB HBM3 has "
        "80.0 GiB, of which judge may use 63.0 GiB (80% of it less 1.0 GiB in use)")


def test_a_benchmark_that_cannot_fit_an_empty_card_ends_the_round_before_the_bases_check(monkeypatch):
    """Issue 38: refused at the start, in the plan's one line, not after the base's check and the A/A control."""
    from types import SimpleNamespace

    from judge.stages import check as check_module
    from judge.stages.result import StageResult

    sizes = [BenchmarkBytes(GIB, GIB, 0), BenchmarkBytes(20 * GIB, 10 * GIB, 4 * GIB)]
    busy = {"name": "NVIDIA H100 80GB HBM3", "total": 80 * GIB, "free": 20 * GIB}  # 60 GiB held by others
    target = SimpleNamespace(benchmarks=[{}, {}], ranked_benchmarks=[0, 1],
                             benchmark_label=["n=1024", "n=32768"].__getitem__)
    evaluator = SimpleNamespace(bytes_of=lambda i: sizes[i], ask=lambda op: busy, target=target)
    checked = []
    passed = StageResult("correctness", "passed", "3 of 3 checks passed")
    monkeypatch.setattr(check_module, "check", lambda *args, **kwargs: checked.append(args) or passed)
    with pytest.raises(JudgeError) as error:
        check_module.check_base(evaluator, "base")
    assert str(error.value) == (
        "benchmark 1 (n=32768) needs 154.0 GiB of device memory to be timed (2 input sets of its 20.0 GiB input, a copy "
        "and an outbox in each of the pair's 2 runners, its 10.0 GiB output in 3 processes, 4.0 GiB of working memory in each); "
        "NVIDIA H100 80GB HBM3 has "
        "80.0 GiB, of which judge may use 64.0 GiB at most (80% of it)")
    assert checked == []
    sizes[1] = BenchmarkBytes(4 * GIB, 4 * GIB, 0)  # 24 GiB: fits the card, though not beside the 60 GiB held now
    assert check_module.check_base(evaluator, "base") is passed and checked == [(evaluator, "base")]


def test_the_base_s_check_says_which_benchmark_it_sizes_before_its_first_case_in_the_log_s_own_words(monkeypatch):
    """Issue 38: sizing runs the reference once on each benchmark the target ranks by (Oracle.plan), which on a CPU copy
    of amd/moe kept a round silent for minutes before its first case. Each one now says so as it starts."""
    from types import SimpleNamespace

    from judge.cli.progress import progress_line
    from judge.stages import check as check_module
    from judge.stages.result import StageResult

    target = SimpleNamespace(benchmarks=[{}, {}, {}], ranked_benchmarks=[0, 2],
                             benchmark_label=["n=1024", "n=2048", "n=32768"].__getitem__)
    sized, said = [], []
    evaluator = SimpleNamespace(bytes_of=lambda i: sized.append(i) or BenchmarkBytes(GIB, GIB, 0), target=target,
                                ask=lambda op: {"name": "GPU", "total": 80 * GIB, "free": 79 * GIB})
    monkeypatch.setattr(check_module, "check", lambda *args, **kwargs: said.append("first case") or
                        StageResult("correctness", "passed", "3 of 3 checks passed"))
    check_module.check_base(evaluator, "base", progress=lambda **info: said.append(
        progress_line({"proposal": "(base)", **info, "seconds": 0.0})))
    assert sized == [0, 2]  # the benchmark it does not rank by is never timed, so never sized
    assert said == ["  (base): sizing the memory plan: the reference on benchmark 1 of 2 (n=1024), 0.0 s so far",
                    "  (base): sizing the memory plan: the reference on benchmark 2 of 2 (n=32768), 0.0 s so far",
                    "first case"]


def test_memory_others_hold_is_left_to_them():
    busy = DeviceMemory("GPU", 80 * GIB, 20 * GIB)  # someone holds 60 GiB
    assert busy.usable == 4 * GIB
    with pytest.raises(JudgeError, match="of which judge may use 4.0 GiB"):
        plan_memory(busy, [BenchmarkBytes(GIB, GIB, 0)], ["b"])


def test_kept_sets_count_every_benchmark_at_once():
    sizes = [BenchmarkBytes(GIB, 0, 0)] * 3
    plans = [BenchmarkPlan(2, 2)] * 3
    # each runner's two copies of one benchmark, in memory it reuses for the next (4 GiB), then one benchmark's three
    # sets and its one spare input (4 GiB), or all nine sets
    assert budget.need_of(sizes, plans) == 8 * GIB
    assert budget.need_of(sizes, plans, kept=True) == 4 * GIB + 9 * GIB + GIB


def test_kept_sets_hold_the_projection_weights_of_their_answers_all_round():
    """The oracle keeps a kept benchmark's projector, and its weights with it, from one pair to the next."""
    sizes = [BenchmarkBytes(GIB, 0, 0, 0, GIB)] * 2  # 1 GiB of weights each
    plans = [BenchmarkPlan(2, 2)] * 2
    # each runner's two copies (4 GiB); one benchmark timed: its input and its weights in three holders (4 GiB), its
    # sets (3 GiB), and the other's sets and weights held all round (4 GiB)
    assert budget.need_of(sizes, plans, kept=True) == 4 * GIB + 4 * GIB + 3 * GIB + 4 * GIB
    # made again for every pair, nothing of the other's is held
    assert budget.need_of(sizes, plans) == 4 * GIB + 4 * GIB + 3 * GIB


# ---- what a verdict costs: sets made once, repetitions from the kernel's duration -----------------------------

import random  # noqa: E402
import time  # noqa: E402

from judge.sandbox.worker import Reply  # noqa: E402
from judge.stages.timing import stage as timing, turns  # noqa: E402

COUNTED = '''
import torch
made = []
def generate_input(size, seed):
    made.append(seed)
    g = torch.Generator().manual_seed(seed)
    return torch.randn(size, generator=g), torch.randn(size, generator=g), torch.empty(size)
def ref_kernel(data):
    a, b, out = data
    torch.add(a, b, out=out)
    return out
def check_implementation(data, output):
    return True, ""
'''


@pytest.fixture
def oracle(oracle_over):
    """An oracle in this process over a reference that counts the inputs it makes."""
    return oracle_over(COUNTED)


def _bench(oracle, key, seeds, keep=""):
    return oracle.benchmark(key, {"size": 64, "seed": 0}, "default", seeds, 99, 2, [1], keep=keep)


def test_a_benchmark_makes_each_set_at_its_first_use_and_answers_it_at_its_first_check(oracle):
    answer = _bench(oracle, "t-0-0", [10, 11, 12, 13])
    assert answer["sets"] == 3 and oracle.reference.made == [10, 11]  # the warm-up set and the first timed set
    assert oracle.areas["t-0-0"].poison == [2]  # the slot read off the first timed set's reference call
    assert list(oracle.timing["t-0-0"].bounds) == [0]
    oracle.turn("t-0-0", stage={"set": 2, "copy": 0, "runners": [1]})
    assert oracle.reference.made == [10, 11, 13] and list(oracle.timing["t-0-0"].bounds) == [0]
    assert len(oracle._bounds("t-0-0", 2)) == 1 and list(oracle.timing["t-0-0"].bounds) == [0, 2]
    oracle.turn("t-0-0", stage={"set": 2, "copy": 1, "runners": [1]})
    assert oracle.reference.made == [10, 11, 13]  # set 1 never used: never made


def test_what_making_and_answering_a_set_left_cached_is_given_back_at_once(oracle, monkeypatch):
    """The plan counts a set's making and answering only while they run: their cached memory goes back right after
    (cholesky_py's oracle kept 12 GiB of a set's making cached beside the runners' outputs on an H100)."""
    from judge.boundary import oracle as oracle_module

    released = []
    monkeypatch.setattr(oracle_module, "release_cached", lambda always=False: released.append(always))
    _bench(oracle, "t-0-0", [10, 11, 12, 13])
    released.clear()
    oracle.turn("t-0-0", stage={"set": 2, "copy": 0, "runners": [1]})  # set 2 made now
    assert released == [False]
    oracle._bounds("t-0-0", 2)  # and answered at its first check
    assert released == [False, False]
    oracle.turn("t-0-0", stage={"set": 2, "copy": 1, "runners": [1]})
    oracle._bounds("t-0-0", 2)
    assert released == [False, False]  # made and answered once: nothing more to give back


def test_kept_sets_are_made_once_for_every_pair_and_made_again_for_other_seeds(oracle):
    _bench(oracle, "t-0-0", [10, 11, 12], keep="timing-0")
    oracle.turn("t-0-0", stage={"set": 1, "copy": 0, "runners": [1]})
    oracle.release("t-0-0")
    _bench(oracle, "t-1-0", [10, 11, 12], keep="timing-0")
    oracle.turn("t-1-0", stage={"set": 1, "copy": 0, "runners": [1]})
    assert oracle.reference.made == [10, 11, 12]  # the second pair found them kept
    assert oracle.timing["t-1-0"] is oracle.kept["timing-0"]
    _bench(oracle, "t-2-0", [20, 21, 22], keep="timing-0")
    assert oracle.reference.made == [10, 11, 12, 20, 21]
    _bench(oracle, "t-3-0", [20, 21, 22])
    assert oracle.reference.made[-2:] == [20, 21] and len(oracle.reference.made) == 7  # not kept: made again


SLOW_TO_MAKE = '''
import time
import torch
made, answered = [], []
def generate_input(size, seed, slow):
    made.append(seed)
    time.sleep(slow)
    g = torch.Generator().manual_seed(seed)
    return torch.randn(size, generator=g), torch.empty(size)
def ref_kernel(data):
    answered.append(1)
    a, out = data
    torch.mul(a, 2, out=out)
    return out
def check_implementation(data, output):
    return True, ""
'''


def test_sets_the_round_shares_come_back_from_host_memory_with_their_answers_known(oracle_over):
    """Where the round shares its sets but the device keeps none of them, a set that is slow to make comes back
    from host memory in the next pair, and its answer's bounds with it: trimul's seqlen-768 Cauchy sets took 3.4 s
    each to draw on the CPU, and on an H100's plan were drawn again in every pair (about 10 s of a 22 s pair)."""
    import torch

    oracle = oracle_over(SLOW_TO_MAKE)
    spec = {"size": 4096, "seed": 0, "slow": 0.2}

    def pair(key: str, seeds: list[int]) -> None:
        oracle.benchmark(key, spec, "default", seeds, 99, 2, [1], hold="timing-0")
        oracle.turn(key, stage={"set": 1, "copy": 0, "runners": [1]})
        oracle._bounds(key, 1)

    pair("t-0-0", [10, 11, 12])
    first = oracle.timing["t-0-0"].sets[1][0].clone()
    oracle.release("t-0-0")
    answered = len(oracle.reference.answered)  # sets 0 and 1 answered, the output slots read off set 0's
    assert oracle.reference.made == [10, 11, 12] and answered >= 2
    pair("t-1-0", [10, 11, 12])
    assert oracle.reference.made == [10, 11, 12] and len(oracle.reference.answered) == answered  # none again
    assert torch.equal(oracle.timing["t-1-0"].sets[1][0], first)
    assert oracle.timing["t-1-0"].sets[1][0].data_ptr() != first.data_ptr()  # a copy of its own for the pair
    oracle.release("t-1-0")
    pair("t-2-0", [20, 21, 22])  # other seeds: made and answered again
    assert oracle.reference.made[3:] == [20, 21, 22] and len(oracle.reference.answered) >= answered + 2


def test_repetitions_follow_the_kernels_duration():
    assert [turns.reps_for(us) for us in (0.0, 8.0, 10_000.0, 41_700.0, 230_000.0, 1e6)] == [50, 50, 25, 6, 2, 1]
    # steady calls may stop at twenty up to 2.5 ms a call, then at as many as take 50 ms, never under eight
    assert [turns.steady_reps_for(us) for us in (0.0, 8.0, 2_500.0, 2_600.0, 5_300.0, 14_600.0, 1e6)] == \
        [20, 20, 20, 20, 10, 8, 8]
    # a repetition costs its turn: the call and judge's step around it (4.4 ms a turn of amd/fp8-mm's calls on an
    # H200), so short calls stop as soon as PRECISE_S of turns; a step not yet measured (0) or negative counts none
    assert [turns.steady_reps_for(us, 3_400.0) for us in (8.0, 1_000.0, 2_500.0, 14_600.0)] == [15, 12, 9, 8]
    assert turns.steady_reps_for(1_000.0, -500.0) == turns.steady_reps_for(1_000.0) == 20


def test_a_runner_cannot_claim_longer_calls_than_its_warm_up_took_nor_a_number_that_is_none():
    assert timing._claimed_call_us(Reply({"calls": 10, "call_us": 300_000.0}, 0.05)) == 5000.0  # wall: 5 ms a call
    assert timing._claimed_call_us(Reply({"calls": 10, "call_us": 800.0}, 0.05)) == 800.0
    for value in ({"calls": 10, "call_us": float("nan")}, {"calls": "x", "call_us": 1.0}, {"calls": 10}):
        assert timing._claimed_call_us(Reply(value, 1.0)) == 0.0  # all repetitions


class _Runner:
    def __init__(self, pid):
        self.pid, self.sent = pid, 0

    def record(self, record_for, timeout_s, name="call"):
        self.sent += 1
        record_for(self.sent)
        value = {"status": 0, "us": 10.0, "tail_us": 5.0, "host_us": 3.0, "null_tail_us": -1.0, "leaves": [],
                 "problem": "", "modes": 0, "hooks": 0, "monitoring": 0, "dispatch_changed": 0, "threads": 0,
                 "thread_in_kernel": "", "release": 0}
        return Reply(value, 0.0002)

    def freeze(self):
        pass


class _Oracle:
    target = None

    def ask(self, op, **args):
        return {"problem": None}


def test_a_pair_of_long_calls_takes_the_repetitions_it_was_given_and_first_uses_every_set():
    runners = {"base": _Runner(1), "cand": _Runner(2)}
    pair = turns.PairTurns(_Oracle(), "k", 0, runners, ["host"], "host", 4, 2, {"us": 0, "cycles": {}},
                           random.Random(1), "base", time.monotonic() + 60, reps=10)
    pair.run()
    assert runners["base"].sent == 10 and runners["cand"].sent == 10
    assert pair.used == {0, 1, 2, 3}


def test_sets_grow_only_where_making_one_is_quick():
    """A set more is made again in every pair (or once a round, where kept): trimul's seqlen-768 Cauchy inputs take
    2.9 s each on an H200, and eight of them cost 22.6 s of every pair (2026-11-29). Two sets still give the replay
    check first uses to compare."""
    quick, slow = BenchmarkBytes(16 << 20, 16 << 20, making_s=0.01), BenchmarkBytes(16 << 20, 16 << 20, making_s=2.9)
    plan = plan_memory(H100, [quick, slow], ["quick", "slow"])
    assert plan.benchmarks == [BenchmarkPlan(sets=8, copies=8), BenchmarkPlan(sets=budget.MIN_SETS, copies=8)]
    kept = budget.plan_round(H100, [quick, slow], ["quick", "slow"], keep=True)
    assert kept.kept == (True, True) and kept.benchmarks[1].sets == budget.MIN_SETS


def test_an_input_too_large_for_two_copies_gets_one():
    # GPU MODE's linalg/cholesky_py n=32768: a 4 GiB input and output; two copies in each of the pair's runners (16
    # GiB) would not fit beside the rest (64 GiB in all, 58 usable), one in each does (56 GiB)
    device = DeviceMemory("NVIDIA H100 80GB HBM3", 80 * GIB, 74 * GIB)
    plan = plan_memory(device, [BenchmarkBytes(4 * GIB, 4 * GIB, 4 * GIB)], ["n=32768"])
    assert plan.benchmarks == [BenchmarkPlan(sets=2, copies=1)] and plan.need <= device.usable


def test_a_launch_of_a_second_spins_the_gpu_50_ms_not_three_seconds():
    from judge.boundary.runner import spin_for

    assert spin_for([20.0, 20.0, 21.0]) == 100.0  # 40 us of margin and three typical launches
    assert spin_for([1_000_000.0, 1_010_000.0]) == 50_000.0  # torch's batched geqrf launches for about a second


def test_a_round_keeps_its_sets_only_where_every_benchmarks_sets_fit_at_once():
    sizes = [BenchmarkBytes(GIB, 0, 0)] * 4
    # at the minimum: 2 copies in each of 2 runners, then 4 x 3 sets kept (or one benchmark's 3 made per pair), and one
    # spare input
    assert budget.need_of(sizes, [BenchmarkPlan(2, 2)] * 4, kept=True) == 17 * GIB
    assert budget.need_of(sizes, [BenchmarkPlan(2, 2)] * 4) == 8 * GIB
    roomy = DeviceMemory("GPU", 80 * GIB, 80 * GIB)
    assert budget.plan_round(roomy, sizes, ["b"] * 4, keep=True).kept == (True,) * 4
    assert budget.plan_round(roomy, sizes, ["b"] * 4, keep=False).kept == (False,) * 4
    # 14.4 GiB usable: too little to keep all four even with one copy in each runner (15 GiB), enough to keep two
    # (14 GiB) and make the others again for every pair
    tight = DeviceMemory("GPU", 18 * GIB, 18 * GIB)
    plan = budget.plan_round(tight, sizes, ["b"] * 4, keep=True)
    assert plan.kept == (True, True, False, False) and plan.need <= tight.usable


def test_a_round_keeps_the_sets_that_take_longest_to_make_where_not_all_fit():
    """cholesky_py on an H200 (2026-11-28): its 15 benchmarks' sets did not fit at once, so every pair made its
    n=32768 sets again (4 GiB each, a 32768-wide float32 product: a large part, not timed apart, of the 8 s that
    benchmark cost a pair). The sets that are slow to make are kept first; quick ones are made again where the room
    runs out."""
    slow, quick = BenchmarkBytes(4 * GIB, 4 * GIB, making_s=1.5), BenchmarkBytes(2 * GIB, 0, making_s=0.01)
    sizes, labels = [quick, quick, slow], ["quick", "quick", "slow"]
    # all kept: a copy of 4 GiB in each runner, 6 + 6 + 12 GiB of sets held, the slow one's calls 16 GiB
    plans = [BenchmarkPlan(2, 2), BenchmarkPlan(2, 2), BenchmarkPlan(2, 1, True)]
    assert budget.need_of(sizes, plans, True) == 48 * GIB
    plan = budget.plan_round(DeviceMemory("GPU", 80 * GIB, 56 * GIB), sizes, labels, keep=True)  # 40 GiB usable
    assert plan.kept == (False, False, True) and plan.benchmarks == plans and plan.need == 36 * GIB
    # a quick one's sets kept beside it need 42 GiB
    assert budget.plan_round(DeviceMemory("GPU", 80 * GIB, 58 * GIB), sizes, labels, keep=True).kept == (
        True, False, True)


def test_long_calls_are_timed_on_the_call_clock_alone_and_others_on_both():
    assert turns.clocks_for(False, "gpu", 1_007_000.0) == (["call"], "call")  # qr_py's batched geqrf: a second
    assert turns.clocks_for(False, "gpu", 49_999.0) == (["gpu", "call"], "gpu")
    assert turns.clocks_for(True, "host", 2e6) == (["host"], "host")


def test_the_device_running_out_of_memory_in_a_pair_leaves_the_candidate_not_run_and_other_failures_the_rounds():
    from judge.errors import JudgeError

    oom = JudgeError("t: the reference failed in the oracle (benchmark): IpcError: cuMemAlloc failed: "
                     "CUDA_ERROR_OUT_OF_MEMORY (2); see oracle.log")
    stopped = timing.out_of_memory(oom, 14)
    assert (stopped.status, stopped.who) == ("not-run", "cand")
    assert stopped.message == ("the device had no room left for benchmark 14's input sets and answers beside this "
                               "pair's runners (IpcError: cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (2))")
    other = JudgeError("t: the reference failed in the oracle (benchmark): ValueError: bad spec")
    assert timing.out_of_memory(other, 0) is other


def test_the_oracle_gives_back_kept_sets_when_the_device_has_less_free_than_a_benchmark_needs(oracle, monkeypatch,
                                                                                                capsys):
    import torch

    _bench(oracle, "t-0-0", [10, 11, 12], keep="timing-0")
    oracle.release("t-0-0")
    free = {"bytes": 10 * GIB}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (free["bytes"], 80 * GIB))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    assert not oracle._make_room(4 * GIB, "timing-1")  # room enough: kept
    assert not oracle._make_room(12 * GIB, "timing-0")  # its own sets are never given back for itself
    assert list(oracle.kept) == ["timing-0"]
    assert oracle._make_room(12 * GIB, "timing-1")
    assert oracle.kept == {}
    assert capsys.readouterr().err == ("judge oracle: 10240 MiB free of the 12288 MiB a benchmark needs: the sets kept "
                                       "for 1 other benchmarks given back, 10240 MiB free now\n")


def test_an_input_whose_making_does_not_fit_beside_the_runners_is_made_before_them():
    # cholesky_py's n=32768 on an H100 (2026-11-27): generate_input holds a product and its symmetrisation (12 GiB)
    # beside the 4 GiB input; made at first use, beside both runners' 4 GiB outputs, the round needed 57.1 GiB of 53.8
    size = BenchmarkBytes(4 * GIB, 4 * GIB, 0, 12 * GIB)
    assert size.peak(eager=False) == size.fixed() + 12 * GIB == 28 * GIB
    # made and answered first: the larger of the making (12 GiB) and the calls' needs (the runners' outputs), not the
    # oracle's answer beside them
    assert size.peak(eager=True) == 12 * GIB
    device = DeviceMemory("NVIDIA H100 80GB HBM3", 80 * GIB, 64 * GIB)  # 48 GiB usable
    plan = plan_memory(device, [size], ["n=32768"])
    assert plan.benchmarks == [BenchmarkPlan(sets=2, copies=2, eager=True)]  # made first: room for two copies
    # two copies and the outbox in each runner, three sets, the making; made at first use even one copy each would
    # not fit
    assert plan.need == 24 * GIB + 12 * GIB + 12 * GIB <= device.usable < 16 * GIB + 12 * GIB + 28 * GIB
    with pytest.raises(JudgeError) as refused:
        plan_memory(DeviceMemory("NVIDIA H100 80GB HBM3", 80 * GIB, 40 * GIB), [size], ["n=32768"])
    assert str(refused.value) == (
        "benchmark 0 (n=32768) needs 40.0 GiB of device memory to be timed (2 input sets of its 4.0 GiB input, a copy "
        "and an outbox in each of the pair's 2 runners, its 4.0 GiB output in 3 processes, 0.0 GiB of working memory "
        "in each, 12.0 GiB to make an input before them); NVIDIA H100 80GB HBM3 has 80.0 GiB, of which judge may use "
        "24.0 GiB (80% of it less 40.0 GiB in use)")


def test_a_benchmark_planned_eager_makes_every_set_when_it_is_laid_out(oracle):
    oracle.benchmark("t-0-0", {"size": 64, "seed": 0}, "default", [10, 11, 12, 13], 99, 2, [1], eager=True)
    assert oracle.reference.made == [10, 11, 12, 13]  # the warm-up set and all three timed sets, before any call
    assert list(oracle.timing["t-0-0"].bounds) == [0, 1, 2]  # and answered, before the runners hold anything
    oracle.turn("t-0-0", stage={"set": 2, "copy": 0, "runners": [1]})
    assert oracle.reference.made == [10, 11, 12, 13]


def test_a_pairs_runners_hold_the_copies_of_one_benchmark_and_reuse_that_memory_for_the_next():
    # cholesky_py on an H100 (2026-11-28): its 15 benchmarks' copies, all in the oracle's areas until the pair closed,
    # helped refuse the round; each runner now builds every benchmark in one allocation of its own, grown as needed
    large, small = BenchmarkBytes(4 * GIB, 4 * GIB, 0, 12 * GIB), BenchmarkBytes(GIB, GIB, 0, 3 * GIB)
    # one copy of the large input and its outbox in each runner (16 GiB), its three sets and its calls' needs (40
    # GiB): the small benchmark's two copies and outbox fit in the same memory
    assert budget.need_of([small, large], [BenchmarkPlan(2, 2), BenchmarkPlan(2, 1)]) == 56 * GIB
    device = DeviceMemory("NVIDIA H100 80GB HBM3", 80 * GIB, 69 * GIB)  # 53 GiB usable
    plan = plan_memory(device, [small, large], ["n=16384", "n=32768"])
    assert plan.benchmarks[1] == BenchmarkPlan(sets=2, copies=2, eager=True)
    assert plan.benchmarks[0].copies >= 2 and not plan.benchmarks[0].eager
    assert plan.need == 24 * GIB + 12 * GIB + 12 * GIB


def test_benchmarks_that_fit_alone_but_not_together_step_down_the_largest_first():
    # one with a large input (its copies and sets), one with a large output (its outbox in each runner, its calls'
    # needs): each fits alone, not together
    wide, deep = BenchmarkBytes(8 * GIB, 0, 0), BenchmarkBytes(GIB, 8 * GIB, 0)
    assert budget.need_of([wide], [BenchmarkPlan(2, 1)]) == 48 * GIB
    assert budget.need_of([deep], [BenchmarkPlan(2, 1, True)]) == 37 * GIB
    assert budget.need_of([wide, deep], [BenchmarkPlan(2, 1), BenchmarkPlan(2, 1, True)]) == 50 * GIB
    with pytest.raises(JudgeError) as refused:
        plan_memory(DeviceMemory("GPU", 80 * GIB, 65 * GIB), [wide, deep], ["wide", "deep"])  # 49 GiB usable
    assert str(refused.value) == ("the benchmarks need 50.0 GiB of device memory together to be timed; GPU has 80.0 "
                                  "GiB, of which judge may use 49.0 GiB")
    plan = plan_memory(DeviceMemory("GPU", 80 * GIB, 66 * GIB), [wide, deep], ["wide", "deep"])  # 50 GiB usable
    # the wide one steps down to one copy first and still leaves no room for the deep one's two; the deep one's
    # sets then grow in the room the wide one's sets take anyway
    assert plan.benchmarks == [BenchmarkPlan(2, 1), BenchmarkPlan(4, 1)] and plan.need == 50 * GIB


class _Mapped:
    """cuda_ipc.Imported as the driver would map a handle: `sizes` says each handle's allocation's bytes."""

    sizes: dict = {}

    def __init__(self, handle):
        self.handle, self.nbytes, self.closed = handle, self.sizes[handle], False

    def close(self):
        self.closed = True


def test_the_oracle_maps_only_memory_a_runner_allocated_large_enough_for_its_inputs(monkeypatch, tmp_path):
    """A runner allocates the device memory its inputs live in (reading mapped memory across rows ran a thousand
    times slower, an H200, 2026-11-28); its process can hand the oracle any handle, and the oracle writes every byte
    the plan lays out, so the driver's size of what it maps must hold them."""
    from judge.boundary import cuda_ipc, host_area, staging

    monkeypatch.setattr(cuda_ipc, "Imported", _Mapped)
    _Mapped.sizes = {"small": 1 << 20, "large": 3 << 30, "larger": 4 << 30}
    files = staging.RunnerFiles(host_area.HostFile(tmp_path / "in"), host_area.HostFile(tmp_path / "out"))
    assert files.bind("anything") is None and files.device is None  # a plan without a device part maps nothing
    files.want_device(2 << 30)
    assert files.bind(None) == "the runner handed over no device memory for its inputs"
    assert files.bind("small") == ("the runner handed over 1048576 bytes of device memory for inputs that need "
                                   "2147483648")
    assert files.device is None
    assert files.bind("large") is None and files.device.handle == "large"
    large = files.device
    files.want_device(1 << 30)  # a smaller benchmark: the runner keeps its memory, the oracle its mapping
    assert files.bind("large") is None and files.device is large and not large.closed
    files.want_device(4 << 30)  # a larger one: let go before the runner frees it for a larger allocation
    assert large.closed and files.device is None
    assert files.bind("larger") is None and files.device.nbytes == 4 << 30
    larger = files.device
    files.close()
    assert larger.closed and files.device is None


def test_a_timed_call_out_of_device_memory_is_no_verdict_on_either_kernel():
    from judge.sandbox.worker import CommandFailed

    oom = CommandFailed("OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity "
                        "of 79.18 GiB of which 920.88 MiB is free. Process 1197 has 10.32 GiB memory in use.")
    stopped = timing._stopped(oom, "base")
    assert (stopped.status, stopped.who) == ("not-run", "base")
    assert stopped.message == ("the base's call ran out of device memory beside judge's own processes "
                               "(OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total "
                               "capacity of 79.18 GiB of which 920.88 MiB is free)")
    assert timing._stopped(CommandFailed("IndexError: index 9 is out of bounds"), "cand").status == "crashed"


def test_growth_past_the_floor_leaves_the_oracle_its_cache_and_each_runner_an_eighth_of_its_plan():
    # cholesky_py's 15 benchmarks (batch, n; float32 in and out, making three times the input): grown to the last
    # byte of 53.8 GiB, its oracle alone held 55.5 GiB on an H100 (2026-11-28) with the torch caches beside it
    shapes = [(4096, 32), (1024, 64), (256, 128), (64, 256), (16, 512), (640, 512), (4, 1024), (60, 1024), (2, 2048),
              (8, 2048), (1, 4096), (2, 4096), (1, 8192), (1, 16384), (1, 32768)]
    sizes = [BenchmarkBytes(b * n * n * 4, b * n * n * 4, 0, 3 * b * n * n * 4) for b, n in shapes]
    device = DeviceMemory("NVIDIA H100 80GB HBM3", int(79.2 * GIB), int(69.6 * GIB), cache=4 * GIB)
    plan = budget.plan_round(device, sizes, [f"n={n}" for _, n in shapes], keep=True)
    floors = budget.need_of(sizes, [BenchmarkPlan(2, 1, True)] * len(sizes), plan.kept)
    # each runner is planned 12 GiB (a copy and an outbox of n=32768, and a call's output): 1.5 GiB of margin each
    assert budget.runner_need(sizes, plan.benchmarks) == 12 * GIB
    assert floors <= plan.need <= device.usable - 4 * GIB - 2 * 1.5 * GIB
    assert plan.benchmarks[-1].eager and not all(plan.kept)  # all kept, they would have needed the floors' edge


class _Round:
    """What Evaluator.memory_plan reads of an evaluator: a device that frees 8 GiB once its spares are closed."""

    def __init__(self, spares: int):
        self.spares, self.closed, self._memory_plan, self.keep_sets = spares, 0, None, False
        self.group_hint = 1  # no group announced before the plan (a Ray actor's `expect`)
        self.target = type("T", (), {"benchmarks": [{}], "ranked_benchmarks": [0], "benchmark_label": lambda self, i: "n=32768"})()

    def bytes_of(self, index):
        return BenchmarkBytes(4 * GIB, 4 * GIB, 0, 12 * GIB)

    def ask(self, op, **options):
        assert (op, options) == ("memory", {"timing": True})  # the plan's: kept correctness inputs given back first
        return {"name": "GPU", "total": 80 * GIB, "free": (48 + 8 * self.closed) * GIB, "cache": 4 * GIB}

    def give_back_spares(self):
        if not self.spares:
            return False
        self.spares, self.closed = 0, 1
        return True


def test_a_plan_the_device_cannot_hold_gives_back_the_spares_before_it_refuses():
    from judge.stages.evaluation import Evaluator

    # 32 GiB usable with the spares, 40 without: the floor (made up front, a copy and the outbox in each runner) needs
    # 40 GiB
    spared = _Round(spares=12)
    assert Evaluator.memory_plan(spared).benchmarks == [BenchmarkPlan(sets=2, copies=1, eager=True)]
    assert spared.closed == 1
    with pytest.raises(JudgeError, match=r"needs 40\.0 GiB .* judge may use 32\.0 GiB"):
        Evaluator.memory_plan(_Round(spares=0))


def test_the_oracle_logs_a_benchmarks_memory_beside_its_plan(monkeypatch, capfd):
    import torch

    from judge.boundary import memory

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (3 << 30, 80 << 30))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda: 40 << 30)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda: 44 << 30)
    memory.log_device_memory("benchmark t1-0-14 laid out (2 sets, 2 copies)", 24 << 30)
    assert capfd.readouterr().err == (
        "judge oracle: benchmark t1-0-14 laid out (2 sets, 2 copies): this process holds 40960 MiB of tensors "
        "(45056 MiB reserved by torch) and its areas; the device has 3072 of 81920 MiB free; the plan reserved "
        "24576 MiB for this benchmark\n")


def test_a_runner_warms_up_with_one_call_where_an_earlier_pair_found_its_calls_long():
    """cholesky_py's n=32768 calls take 0.29 s: a second warm-up call in each runner cost 0.6 s of every 14 s pair on
    an H200 (2026-11-29). The first call may compile: the repetitions are then sized by what the earlier pair knew."""
    from judge.boundary.runner import Runner

    runner = Runner.__new__(Runner)
    called = []
    runner.kernel = lambda data: (called.append(data), time.sleep(0.06))
    runner.stretch, runner.cuda = {"datas": [0, 1, 2, 3], "remake": None}, False
    warm = runner.warm_up(known_us=60_000.0)
    assert warm["calls"] == 1 and called == [0] and warm["call_us"] >= 60_000.0
    called.clear()
    warm = runner.warm_up(known_us=1_000.0)  # short: until the warm-up's 0.3 s are spent
    assert warm["calls"] >= 5 and called[:4] == [0, 1, 2, 3]
    assert timing.sizing_call_us([2_500_000.0, 310_000.0], 288_000.0) == 288_000.0  # the first call compiled
    assert timing.sizing_call_us([30_000.0, 31_000.0], 20_000.0) == 30_000.0  # not long: the warm-ups decide
    assert timing.sizing_call_us([0.0, 300_000.0], 288_000.0) == 0.0  # a reply without numbers: all repetitions


def test_a_comparisons_first_pair_starts_from_the_bases_own_calls_in_the_round_never_a_rivals():
    """qr_v2's 1 s calls were warmed up twice in the first pair of every candidate, though the control had timed the
    base's (H200, 2026-11-29): the base's warm-up calls of the round's earlier pairs now start each comparison."""
    from judge.stages.timing.summary import PairBenchmark, PairResult

    def pair(*calls):  # (index, the pair's sizing call, the base runner's warm-up call)
        return PairResult(benchmarks=[PairBenchmark(i, {}, 0.0, 2, 2, "separate", 0.0, [], "call", call_us=sized,
                                                    base_call_us=base) for i, sized, base in calls])

    base_calls: dict[int, float] = {}
    timing.note_base_calls(base_calls, pair((0, 990_000.0, 1_010_000.0), (1, 200.0, 0.0)))  # 0: a reply without
    assert base_calls == {0: 1_010_000.0}  # numbers says nothing
    timing.note_base_calls(base_calls, pair((0, 400_000.0, 995_000.0), (1, 150.0, 160.0)))
    assert base_calls == {0: 995_000.0, 1: 160.0}  # the shortest, not what a faster candidate's pair was sized by
    timing.note_base_calls(base_calls, pair((0, 1_500_000.0, 1_400_000.0)))  # a first call's costs: kept out
    assert base_calls == {0: 995_000.0, 1: 160.0}
    assert timing.known_calls([], base_calls) == {0: 995_000.0, 1: 160.0}
    assert timing.known_calls([], base_calls) is not base_calls  # a comparison's own copy
    # from its second pair on, a comparison starts from its own previous pair
    assert timing.known_calls([pair((0, 400_000.0, 995_000.0))], base_calls) == {0: 400_000.0}
    # a candidate far faster than the base, whose one warm-up call compiled: sized by the base's 1 s calls in its
    # first pair, by its own timed calls (10 ms) from the next one on
    fast = pair((0, 1_000_000.0, 1_000_000.0))
    fast.benchmarks[0].series = {("base", "call"): [{"us": 1_000_000.0}], ("cand", "call"): [{"us": 10_000.0}]}
    assert timing.known_calls([fast], base_calls) == {0: 10_000.0}


def test_a_benchmark_the_target_does_not_rank_by_is_neither_measured_nor_planned_for():
    """Timed only where ranked (Target.ranking_by "last"): the oracle makes no input to size the others, and the
    plan holds nothing for them, so a large unranked size cannot refuse or crowd a round."""
    from types import SimpleNamespace

    measured = []

    def bytes_of(index):
        measured.append(index)
        return BenchmarkBytes(input=1 << 30, output=1 << 30)

    target = SimpleNamespace(benchmarks=[{"size": 1}, {"size": 2}, {"size": 3}], ranked_benchmarks=[2],
                             benchmark_label=lambda i: f"size={i + 1}")
    sizes, labels = budget.benchmark_sizes(target, bytes_of)
    assert measured == [2] and labels == ["size=1", "size=2", "size=3"]
    assert sizes[:2] == [budget.UNTIMED] * 2 and budget.need_of(sizes[:2], [BenchmarkPlan(8, 8)] * 2) == 0


def test_a_round_plans_its_process_groups_runners_before_it_grows_copies_or_keeps_sets():
    # small benchmarks: a group of six kernels and the pair's own plan fit together
    small = [BenchmarkBytes(16 << 20, 16 << 20, 0, making_s=1.0)]
    pair = budget.plan_round(H100, small, ["small"], keep=True)
    group = budget.plan_round(H100, small, ["small"], keep=True, kernels=6)
    assert (pair.runners, group.runners) == (2, 7)
    assert (group.benchmarks, group.kept) == (pair.benchmarks, pair.kept) == ([BenchmarkPlan(2, 8)], (True,))
    assert budget.kernels_per_group(group, small) == 6
    # cholesky_py's n=32768 on an H100 (4 GiB in and out, 4 GiB of working memory): the pair's plan leaves no room
    # for a second kernel's runner; planned for three kernels, the largest group that fits is two, at one copy, its
    # sets made up front and kept
    large = [BenchmarkBytes(4 * GIB, 4 * GIB, 4 * GIB, making_s=1.4)]
    assert budget.kernels_per_group(budget.plan_round(H100, large, ["n=32768"], keep=True), large) == 1
    grouped = budget.plan_round(H100, large, ["n=32768"], keep=True, kernels=3)
    assert (grouped.runners, grouped.benchmarks, grouped.kept) == (3, [BenchmarkPlan(2, 1, True)], (True,))
    assert grouped.need == 60 * GIB and budget.fits(H100, large, grouped.benchmarks, grouped.kept, 3)
    assert budget.kernels_per_group(grouped, large) == 2


def test_cholesky_py_times_its_four_kernels_in_one_group_on_an_h200():
    """Its runners held what the plan gave them and their spares' contexts (13,022 MiB against 12,500 MiB and 520,
    H200, 2026-12-01): with each runner's margin an eighth of its plan, a fifth runner fits where a margin of 4 GiB
    each had timed the fourth kernel in three pairs of its own (24.6 s of a 119.4 s round)."""
    shapes = [(4096, 32), (1024, 64), (256, 128), (64, 256), (16, 512), (640, 512), (4, 1024), (60, 1024), (2, 2048),
              (8, 2048), (1, 4096), (2, 4096), (1, 8192), (1, 16384), (1, 32768)]
    sizes = [BenchmarkBytes(b * n * n * 4, b * n * n * 4, (212 << 20) if n >= 8192 else b * n * n // 2,
                            b * n * n * 4, making_s=1.7 if n == 32768 else 0.02) for b, n in shapes]
    mib = 1 << 20
    h200 = DeviceMemory("NVIDIA H200", 143_155 * mib, 143_155 * mib - 22 * GIB, cache=4 * GIB)
    plan = budget.plan_round(h200, sizes, [f"n={n}" for _, n in shapes], keep=True, kernels=4)
    assert (plan.runners, budget.kernels_per_group(plan, sizes)) == (5, 4)
    assert budget.runner_need(sizes, plan.benchmarks) == 12 * GIB + (212 << 20)
    assert budget.margins(h200, sizes, plan.benchmarks, 5) == 4 * GIB + 5 * ((12 * GIB + (212 << 20)) // 8)
    assert plan.need + budget.margins(h200, sizes, plan.benchmarks, 5) <= h200.usable
    # what judge's processes would hold at most: under 80% of the card with the 22 GiB in use beside them
    assert (plan.need + budget.margins(h200, sizes, plan.benchmarks, 5) + h200.in_use) / h200.total <= 0.8


def test_a_plan_gives_back_the_spares_where_the_device_is_short_never_for_a_larger_group():
    large = [BenchmarkBytes(4 * GIB, 4 * GIB, 4 * GIB, making_s=1.4)]
    spares = [DeviceMemory("GPU", 80 * GIB, 71 * GIB), DeviceMemory("GPU", 80 * GIB, 79 * GIB)]  # 8 GiB of contexts
    asked = []

    def give_back():
        asked.append(len(spares))
        return len(spares) > 1 and bool(spares.pop(0))

    # beside the spares a pair's plan fits, a group's does not: the pair, and the spares kept
    plan = budget.plan_device(lambda: spares[0], give_back, large, ["n=32768"], True, kernels=2)
    assert (plan.runners, asked) == (2, [])
    # a device too short even for the pair's plan gives the spares back
    short = [DeviceMemory("GPU", 80 * GIB, 30 * GIB), DeviceMemory("GPU", 80 * GIB, 79 * GIB)]
    plan = budget.plan_device(lambda: short[0], lambda: len(short) > 1 and bool(short.pop(0)), large, ["n=32768"],
                              True, kernels=2)
    assert plan.runners == 3 and len(short) == 1
