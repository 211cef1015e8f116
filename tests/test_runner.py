"""judge/runner.py through its worker, on the CPU target: one timed call is one command (arm, fire, report),
each clock takes the physical input copies in turn, and what it reports checks against the oracle."""

from pathlib import Path

from judge.evaluation import Case, Evaluator, with_seed
from judge.targets import load_target
from judge.tensors import projection_failure

ROOT = Path(__file__).resolve().parents[1]


def test_a_timed_call_is_one_command_and_each_clock_takes_every_copy_in_turn(tmp_path):
    target = load_target(ROOT / "kernels" / "vecadd_cpu")
    spec = target.benchmarks[0]
    with Evaluator(target, tmp_path / "round", warm=False) as evaluator:
        worker = evaluator.runner(target.assemble(tmp_path / "kernel", target.kernel_source()))
        try:
            worker.call("load", 60)
            seeds = evaluator.timing_seeds(0, 2)
            plan = evaluator.plan(Case("benchmark", 0, 1, "randn", with_seed(spec, seeds[1])))
            setup = worker.call("setup_benchmark", 60, spec=spec, distribution="randn", seeds=seeds,
                                slots=plan["slots"], projection_seed=evaluator.projection_seed(0), copies=3).value
            assert setup == {"sets": 2, "copies": 3, "placement": "separate"}  # a CPU target: copies of its own
            for index in (0, 1):
                worker.call("prepare_set", 60, set_index=index)
            expected = evaluator.expectations(0, 2)
            replies = [(clock, worker.call("timed", 60, set_index=n % 2, clock=clock, spin_cycles=0, null_cycles=0).value)
                       for n, clock in enumerate(["call", "host"] * 6)]
        finally:
            worker.close()
    assert [r["copy"] for c, r in replies if c == "call"] == [0, 1, 2, 0, 1, 2]
    assert [r["copy"] for c, r in replies if c == "host"] == [0, 1, 2, 0, 1, 2]
    assert [r["cold"] for _, r in replies[:3]] == [True, True, False]  # the runner's own record; judge keeps its own
    for n, (_, reply) in enumerate(replies):
        assert set(reply["phases_us"]) == {"arm", "fire", "report"}
        assert reply["us"] > 0 and reply["problem"] is None
        assert projection_failure(reply["projections"], expected[n % 2]) is None
    # the sets differ, so a projection checked against the other set's answer fails
    assert projection_failure(replies[0][1]["projections"], expected[1]) is not None


def test_the_spin_follows_the_typical_launch_not_the_slowest():
    from judge.runner import spin_for

    assert spin_for([20.0, 22.0, 25.0, 900.0]) == 40.0 + 3 * 25.0  # one host hiccup in the warm-up is left out
    assert spin_for([]) == 40.0
