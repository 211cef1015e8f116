"""judge/stages/timing/turns.py: which clock and which input set each round of a process pair's turns uses."""

import random

from judge.stages.timing import turns
from judge.stages.timing.turns import OTHER_CLOCK_EVERY, REPS_PER_PAIR, clock_of, first_uses, set_for


def test_the_clock_that_does_not_decide_gets_one_round_in_eight():
    clocks = [clock_of(r, ["gpu", "call"], "call", OTHER_CLOCK_EVERY) for r in range(16)]
    assert clocks == ["call"] * 7 + ["gpu"] + ["call"] * 7 + ["gpu"]
    assert [clock_of(r, ["host"], "host", 8) for r in range(3)] == ["host"] * 3


def test_first_uses_of_the_sets_are_split_between_the_clocks_and_spread_over_each():
    plan = first_uses(8, ["gpu", "call"], "gpu", OTHER_CLOCK_EVERY)
    assert plan["gpu"] == {0: 0, 12: 2, 24: 4, 36: 6}  # REPS_PER_PAIR 50 calls, four sets: one every 12
    # 6 calls on the call clock: its sets first, from its second call on; its first takes a set the GPU clock used
    assert plan["call"] == {1: 1, 2: 3, 3: 5, 4: 7}
    assert first_uses(8, ["gpu", "call"], "gpu", turns.SIDE_STREAM_OTHER_EVERY)["call"] == {1: 1, 7: 3, 13: 5, 19: 7}
    assert first_uses(4, ["host"], "host", 8) == {"host": {0: 0, 12: 1, 24: 2, 36: 3}}


def _run(sets: int, clocks: list[str], deciding: str, every: int, seed: int) -> list[tuple[str, int, bool]]:
    """The (clock, set, first use?) of each call of a pair as PairTurns draws them."""
    plan, used, rng = first_uses(sets, clocks, deciding, every), set(), random.Random(seed)
    counts = {c: 0 for c in clocks}
    calls = []
    for r in range(REPS_PER_PAIR + REPS_PER_PAIR // (every - 1) + 1):
        clock = clock_of(r, clocks, deciding, every)
        chosen = set_for(plan, used, rng, clock, counts[clock])
        calls.append((clock, chosen, chosen not in used))
        used.add(chosen)
        counts[clock] += 1
    return calls


def test_each_clock_holds_several_first_calls_and_nothing_is_first_used_twice():
    for seed in range(20):
        calls = _run(8, ["gpu", "call"], "gpu", OTHER_CLOCK_EVERY, seed)
        firsts = [(clock, s) for clock, s, first in calls if first]
        assert sorted(s for _, s in firsts) == list(range(8))
        assert sum(1 for clock, _ in firsts if clock == "call") == 4
        assert sum(1 for clock, _ in firsts if clock == "gpu") == 4
        # the call clock's first call (a benchmark's first on that clock, which the replay check leaves out) is
        # on a set the GPU clock has used, so none of its sets loses its first call there
        assert next(first for clock, _, first in calls if clock == "call") is False


def test_with_side_stream_work_the_call_clock_runs_every_other_round_and_keeps_its_first_calls():
    calls = _run(8, ["gpu", "call"], "gpu", turns.SIDE_STREAM_OTHER_EVERY, 3)
    on_call = [c for c in calls if c[0] == "call"]
    assert len(on_call) >= REPS_PER_PAIR // 2
    assert sum(1 for c in on_call if c[2]) == 4
