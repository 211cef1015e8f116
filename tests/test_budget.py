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
        "benchmark 1 (n=32768) needs 202.0 GiB of device memory to be timed (2 input sets and 2 copies of its 20.0 GiB "
        "input, its 10.0 GiB output in 3 processes, 4.0 GiB of working memory in each); NVIDIA H100 80GB HBM3 has "
        "80.0 GiB, of which judge may use 63.0 GiB (80% of it less 1.0 GiB in use)")


def test_memory_others_hold_is_left_to_them():
    busy = DeviceMemory("GPU", 80 * GIB, 20 * GIB)  # someone holds 60 GiB
    assert busy.usable == 4 * GIB
    with pytest.raises(JudgeError, match="of which judge may use 4.0 GiB"):
        plan_memory(busy, [BenchmarkBytes(GIB, GIB, 0)], ["b"])


def test_kept_sets_count_every_benchmark_at_once():
    sizes = [BenchmarkBytes(GIB, 0, 0)] * 3
    plans = [BenchmarkPlan(2, 2)] * 3
    # copies of all three (6 GiB), then one benchmark's three sets and its one spare input (4 GiB), or all nine sets
    assert budget.need_of(sizes, plans) == 10 * GIB
    assert budget.need_of(sizes, plans, kept=True) == 6 * GIB + 9 * GIB + GIB
