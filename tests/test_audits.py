"""judge/stages/timing/audits.py: the parent's checks of what runners report, on made-up series: the wall-clock audit, the
replay check and side-stream work."""

import random

from judge.stages.timing import audits
from judge.stages.timing.turns import SIDE_STREAM_OTHER_EVERY, first_uses


def test_side_stream_detection():
    nulls = [20.0, 21.0, 19.0]
    assert not audits.side_stream_work([40.0] * 3, [21.0, 22.0, 20.0], nulls)  # tail like the null's
    assert audits.side_stream_work([40.0] * 3, [60.0, 61.0, 59.0], nulls)  # 40 us left running

    def reps(stream, tail):
        return [{"us": s, "tail_us": t, "null_tail_us": 20.0} for s, t in zip(stream, tail)]

    series = {("base", "gpu"): reps([40.0, 41.0], [20.0, 20.0]), ("cand", "gpu"): reps([15.0, 15.0], [80.0, 82.0]),
              ("base", "call"): reps([60.0], [0.0]), ("cand", "call"): reps([95.0], [0.0])}
    # side work left running: both kernels are compared on the call clock, whose end follows a device-wide sync
    assert audits.samples(series, "gpu") == ([60.0], [95.0], "device-wide")
    series[("cand", "gpu")] = reps([15.0, 15.0], [20.0, 21.0])
    assert audits.samples(series, "gpu") == ([40.0, 41.0], [15.0, 15.0], "stream")
    # null tails are measured before some calls only; the others carry None and are left out of the yardstick
    series[("cand", "gpu")] = reps([15.0, 15.0], [60.0, 61.0])
    for rep in series[("base", "gpu")] + series[("cand", "gpu")][1:]:
        rep["null_tail_us"] = None
    assert audits.samples(series, "gpu") == ([60.0], [95.0], "device-wide")


def _rep(us, wall, cold=False):
    return {"us": us, "tail_us": 0.0, "spin_us": 0.0, "null_tail_us": 0.0, "wall_us": wall, "cold": cold}


def test_wall_clock_audit_catches_time_that_was_not_reported():
    # Both runners spend 100 us of judge's own work around each call beyond the call itself.
    honest = [_rep(20.0, 120.0 + (i % 3)) for i in range(60)]
    forged = [_rep(10.0, 100.0 + 50.0 + (i % 3)) for i in range(60)]  # reports 10 us, took 50 us
    audit = audits.audit([{("base", "gpu"): honest, ("cand", "gpu"): forged}], "gpu")
    assert audit["wall_excess_us"]["gpu call"] == 40.0
    assert audit["wall_overhead_us"]["gpu call"] == {"base": 101.0, "cand": 141.0}
    assert audit["reasons"] == []  # 40 us is within the 50 us floor
    forged = [_rep(10.0, 100.0 + 260.0 + (i % 3)) for i in range(60)]  # reports 10 us, took 260 us
    audit = audits.audit([{("base", "gpu"): honest, ("cand", "gpu"): forged}], "gpu")
    assert audit["reasons"] == [
        "its timed calls took 250.0 us longer on the parent's wall clock than the base's, beyond what the times "
        "it reported account for (gpu clock; 50 us allowed): the times it reported are not the times its work took"]


def test_wall_clock_audit_allows_for_judges_own_work_around_the_call():
    # 1000 us of copies, poison and projections around a 20 us call: 15% of it (150 us) is allowed for two
    # processes doing that work at different speeds, and no more.
    honest = [_rep(20.0, 1020.0 + (i % 3)) for i in range(60)]
    slower = [_rep(20.0, 1020.0 + 120.0 + (i % 3)) for i in range(60)]
    assert audits.audit([{("base", "call"): honest, ("cand", "call"): slower}], "call")["reasons"] == []
    forged = [_rep(10.0, 1010.0 + 210.0 + (i % 3)) for i in range(60)]  # reports 10 us, took 220 us
    assert audits.audit([{("base", "call"): honest, ("cand", "call"): forged}], "call")["reasons"] == [
        "its timed calls took 210.0 us longer on the parent's wall clock than the base's, beyond what the times "
        "it reported account for (call clock; 150 us allowed): the times it reported are not the times its work "
        "took"]


def test_replay_of_seen_inputs_is_caught():
    base = [_rep(20.0, 120.0, cold=i < 8) for i in range(100)]
    cand = [_rep(200.0 if i < 8 else 20.0, 300.0 if i < 8 else 120.0, cold=i < 8) for i in range(100)]
    audit = audits.audit([{("base", "call"): base, ("cand", "call"): cand}], "call")
    assert audit["replay_ratio"] == {"base": 1.0, "cand": 10.0}
    assert audit["reasons"][-1] == ("calls on input sets it had seen before ran 10.00x faster than calls on new "
                                    "ones (the base: 1.00x): it replays answers it kept")


def test_a_replay_that_costs_more_than_the_kernel_is_still_caught():
    # A content hash read back to the host costs 150 us a call; a first call also computes and keeps the answer
    # (+50 us): 1.33x, slower than the base's 20 us everywhere, and a replay all the same.
    base = [_rep(20.0, 120.0, cold=i % 12 == 0) for i in range(120)]
    cand = [_rep(200.0 if i % 12 == 0 else 150.0, 300.0, cold=i % 12 == 0) for i in range(120)]
    audit = audits.audit([{("base", "gpu"): base, ("cand", "gpu"): cand}], "gpu")
    assert audit["replay_ratio"] == {"base": 1.0, "cand": 1.333}
    assert audit["reasons"] == ["calls on input sets it had seen before ran 1.33x faster than calls on new ones "
                                "(the base: 1.00x): it replays answers it kept"]
    # The most an honest kernel's ratio strayed on an H100 (1.015) is not a replay.
    honest = [_rep(20.3 if i % 12 == 0 else 20.0, 120.0, cold=i % 12 == 0) for i in range(120)]
    audit = audits.audit([{("base", "gpu"): base, ("cand", "gpu"): honest}], "gpu")
    assert audit["reasons"] == [] and audit["replay_ratio"]["cand"] == 1.015


def test_a_slow_start_is_not_taken_for_replays():
    # First calls on the 8 input sets fall in the first 11 calls, among calls on sets seen already; the
    # candidate's first 16 calls all run 3x slower (on an H100: a kernel that waits on the host, early in a
    # benchmark). Against the whole series its first calls looked 3x slower than its later ones.
    cold = {0, 1, 3, 4, 6, 7, 9, 10}
    base = [_rep(20.0, 120.0, cold=i in cold) for i in range(100)]
    slow_start = [_rep(60.0 if i < 16 else 20.0, 160.0, cold=i in cold) for i in range(100)]
    audit = audits.audit([{("base", "gpu"): base, ("cand", "gpu"): slow_start}], "gpu")
    assert audit["replay_ratio"] == {"base": 1.0, "cand": 1.0}
    assert audit["reasons"] == []
    # A kernel that replays answers is still caught in the same slow start: 200 us for a first call, 20 us after.
    replays = [_rep((200.0 if i in cold else 20.0) * (3 if i < 16 else 1), 160.0, cold=i in cold) for i in range(100)]
    audit = audits.audit([{("base", "gpu"): base, ("cand", "gpu"): replays}], "gpu")
    assert audit["replay_ratio"] == {"base": 1.0, "cand": 10.0}
    assert audit["reasons"][-1].startswith("calls on input sets it had seen before ran 10.00x faster")


def test_side_stream_kernels_are_checked_for_replays_on_the_call_clock():
    # A kernel leaving its work on a side stream: 1-2 us of stream time on the GPU clock, its first calls on a set
    # 30 us there (as an honest one's did on an H100); its call clock holds the work, flat.
    cold = {0, 1, 3, 4, 6, 7, 9, 10}

    def gpu(us_cold, us_warm, tail):
        return [{**_rep(us_cold if i in cold else us_warm, 400.0, cold=i in cold), "tail_us": tail,
                 "null_tail_us": 20.0} for i in range(100)]

    # The call clock's first calls where judge.stages.timing.turns plans them once side-stream work is found.
    on_call = set(first_uses(8, ["gpu", "call"], "gpu", SIDE_STREAM_OTHER_EVERY)["call"])
    assert on_call == {1, 7, 13, 19}

    def call(first, later):
        return [_rep(first if i in on_call else later, 400.0, cold=i in on_call) for i in range(30)]

    series = {("base", "gpu"): gpu(40.0, 40.0, 20.0), ("cand", "gpu"): gpu(30.0, 1.5, 60.0),
              ("base", "call"): call(60.0, 60.0), ("cand", "call"): call(62.0, 62.0)}
    audit = audits.audit([series], "gpu")
    assert audit["replay_ratio"] == {"base": 1.0, "cand": 1.0}
    assert audit["reasons"] == []
    # Replaying answers shows on the call clock all the same: 200 us on a new set, 62 us after.
    series[("cand", "call")] = call(200.0, 62.0)
    audit = audits.audit([series], "gpu")
    assert audit["replay_ratio"] == {"base": 1.0, "cand": 3.226}
    assert audit["reasons"][-1].startswith("calls on input sets it had seen before ran 3.23x faster")


def test_one_or_two_first_calls_are_not_evidence_of_a_replay():
    # GPU MODE's matmul_py on an H100 (2026-11-25): the problem's own code against itself, judged on the call
    # clock's two first calls per kernel (the GPU clock's were set aside), 150 us calls whose launches jitter by
    # tens of microseconds. The candidate's first calls read 1.57x its later ones, the base's 1.26x.
    def call(first):
        return [_rep(first if i in (3, 40) else 150.0, 400.0, cold=i in (3, 40)) for i in range(60)]

    audit = audits.audit([{("base", "call"): call(189.0), ("cand", "call"): call(235.5)}], "call")
    assert audit["replay_ratio"] == {"base": 1.26, "cand": 1.57}
    assert audit["reasons"] == []


def test_noisy_first_calls_of_identical_kernels_are_not_a_replay_but_a_replay_in_the_same_noise_is():
    # Sixteen first calls per kernel drawn from the same heavy-tailed noise (a 10 us kernel whose single calls
    # ran 0.3-7x its median on an H100): medians of such ratios stray far apart, their ranks do not.
    noise = random.Random(7)
    cold = set(range(0, 160, 10))

    def series(first_factor):
        return [_rep(10.0 * noise.lognormvariate(0.0, 0.6) * (first_factor if i in cold else 1.0), 400.0,
                     cold=i in cold) for i in range(160)]

    base, same = series(1.0), series(1.0)
    audit = audits.audit([{("base", "gpu"): base, ("cand", "gpu"): same}], "gpu")
    assert audit["reasons"] == []
    replays = series(8.0)  # 80 us to compute and keep an answer, 10 us to hand a kept one back
    audit = audits.audit([{("base", "gpu"): base, ("cand", "gpu"): replays}], "gpu")
    assert audit["reasons"][-1].endswith("it replays answers it kept")


def test_a_benchmarks_first_timed_call_is_not_compared():
    # An H100 (2026-11-26): an honest kernel that syncs with the host in its call, on the call clock. Its first
    # timed call of the benchmark (a first use of a set, as a clock's first call must be) ran 1.4-1.9x its
    # neighbours, the base's 1.0-1.1x; its later first calls ran as the calls around them. Counted, the first
    # call made it a replay; it is left out.
    cold = {0, 12, 24, 36}
    base = [_rep(110.0 if i == 0 else 100.0, 400.0, cold=i in cold) for i in range(50)]
    host_sync = [_rep(190.0 if i == 0 else 100.0, 400.0, cold=i in cold) for i in range(50)]
    pairs = [{("base", "call"): base, ("cand", "call"): host_sync}] * 3
    audit = audits.audit(pairs, "call")
    assert audit["replay_ratio"] == {"base": 1.0, "cand": 1.0}
    assert audit["first_calls"] == {"base": 9, "cand": 9}
    assert audit["reasons"] == []
    # A kernel that replays answers is slow on every first call, and is still caught on the later ones.
    replays = [_rep(190.0 if i in cold else 100.0, 400.0, cold=i in cold) for i in range(50)]
    audit = audits.audit([{("base", "call"): base, ("cand", "call"): replays}] * 3, "call")
    assert audit["replay_ratio"] == {"base": 1.0, "cand": 1.9}
    assert audit["reasons"][-1] == ("calls on input sets it had seen before ran 1.90x faster than calls on new "
                                    "ones (the base: 1.00x): it replays answers it kept")


def test_a_base_whose_first_calls_ran_faster_does_not_lower_the_bar():
    # A loaded machine: the base's first calls on a set ran at half its later ones' time (0.5x), and an honest
    # candidate's first touch of new memory costs it 30 us of a 200 us call (1.15x). Against 1.2 times the base's
    # 0.5x that read as a replay; the base's ratio counts only above 1.
    cold = set(range(0, 120, 10))
    base = [_rep(100.0 if i in cold else 200.0, 400.0, cold=i in cold) for i in range(120)]
    honest = [_rep(230.0 if i in cold else 200.0, 400.0, cold=i in cold) for i in range(120)]
    audit = audits.audit([{("base", "gpu"): base, ("cand", "gpu"): honest}], "gpu")
    assert audit["replay_ratio"] == {"base": 0.5, "cand": 1.15}
    assert audit["reasons"] == []
    # A kernel that replays answers is still named beside the same base: 300 us for a first call, 200 us after.
    replays = [_rep(300.0 if i in cold else 200.0, 400.0, cold=i in cold) for i in range(120)]
    audit = audits.audit([{("base", "gpu"): base, ("cand", "gpu"): replays}], "gpu")
    assert audit["reasons"] == ["calls on input sets it had seen before ran 1.50x faster than calls on new ones "
                                "(the base: 0.50x): it replays answers it kept"]
