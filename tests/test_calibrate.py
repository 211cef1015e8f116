"""`judge calibrate` (judge/calibrate.py and the CLI), with the kernel stages replaced by a model of a machine: a
real calibration takes minutes, and its arithmetic is what an organizer relies on. Each benchmark's base takes
100 us times (index + 1); an identical copy reads a few tenths of a percent of noise per process pair; a slowed
copy reads exactly the delay its mixin carries. What is checked is judge's own part: the delays it asks for, the
verdicts the pairs get against the floor its A/A runs set, what it prints and what it keeps in the ledger."""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import pytest

from judge import calibrate as calibration
from judge import dispatch
from judge.ledger import Ledger
from judge.stages.details import TimedBenchmark, TimingDetail
from judge.stages.result import StageResult
from judge.stats import decide, final
from judge.targets import load_target

ROOT = Path(__file__).resolve().parents[1]
NOISE = [[0.004, -0.002, 0.001], [-0.003, 0.002, 0.005]]  # each A/A run's per-pair log ratios
SLOWED_NOISE = [0.001, -0.001, 0.0]
DEVICE = "model machine"


def base_us(index: int) -> float:
    return 100.0 * (index + 1)


def input_bytes(index: int) -> int:
    return 1000 + index


def mixin_delays(workspace: Path):
    """The delays judge.calibrate's mixin in this workspace's kernel asks for, by input bytes; None without one."""
    found = re.search(r"^_JUDGE_CAL_DELAY_US = (\{.*\})", (workspace / "submission.py").read_text(), re.M)
    return ast.literal_eval(found.group(1)) if found else None


class ModelEvaluator:
    """What calibrate asks of an Evaluator besides the stages: a context, and each benchmark's input size."""

    def __init__(self, target, root, base_dir=None, **kwargs):
        self.base_dir = base_dir

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def plan(self, case):
        return {"input_bytes": input_bytes(case.index)}


class Model:
    """The stages a calibration runs, as a machine with known noise would answer them."""

    def __init__(self, target):
        self.target = target
        self.delays: list[dict[int, float]] = []  # what each slowed copy's mixin asked for, in order
        self.bases: list = []  # what the base each slowed copy was judged against asked for (None: no mixin)
        self.floors: list = []
        self.controls: list[bool] = []  # whether each run was timed by the controls' rule, in order
        self.aa_runs = 0

    def kernel_stages(self, evaluator, workspace: Path, budget_s=None, floor=None, progress=None, control=False):
        delays = mixin_delays(workspace)
        base = mixin_delays(evaluator.base_dir)
        if delays is not None:
            self.delays.append(delays)
            self.bases.append(base)
            # the base's empty spin pays the same launch as the slowed copy's: only the delay differs
            delays = {size: us - base[size] for size, us in delays.items()}
            noise = SLOWED_NOISE
        else:
            delays = {}
            noise = NOISE[self.aa_runs % len(NOISE)]
            self.aa_runs += 1
        self.floors.append(floor)
        self.controls.append(control)
        benchmarks = []
        for index in range(len(self.target.benchmarks)):
            slowed = base_us(index) + delays.get(input_bytes(index), 0.0)
            logs = [math.log(base_us(index) / slowed) + e for e in noise]
            interval = decide(logs, 0.0)
            benchmarks.append(TimedBenchmark(
                index=index, base_median_us=base_us(index), cand_median_us=slowed, speedup=interval.point,
                ci_low=interval.low, ci_high=interval.high, significant=interval.low > 1 or interval.high < 1,
                reps=50, label=self.target.benchmark_label(index), pair_log_ratios=logs))
        pairs = [sum(b.pair_log_ratios[p] for b in benchmarks) / len(benchmarks) for p in range(len(noise))]
        effect = floor.effect if floor is not None else 0.01
        decision = decide(pairs, effect)
        detail = TimingDetail(benchmarks=benchmarks, geomean=decision.point, geomean_ci=[decision.low, decision.high],
                              pairs=len(pairs), pair_geomeans=[math.exp(x) for x in pairs],
                              decision=final(decision, effect))
        return [StageResult("timing", "passed", f"geomean {decision.point:.3f}x", 1.0, detail)]


@pytest.fixture
def model(monkeypatch):
    target = load_target(ROOT / "tests" / "fixtures" / "axpy")
    machine = Model(target)
    monkeypatch.setattr(calibration, "Evaluator", ModelEvaluator)
    monkeypatch.setattr(calibration, "gate", lambda arch: None)
    monkeypatch.setattr(calibration, "probed", lambda: None)
    monkeypatch.setattr(calibration, "device_name", lambda facts: DEVICE)
    monkeypatch.setattr(calibration, "kernel_stages_check", lambda evaluator, base_dir: None)
    monkeypatch.setattr(dispatch, "kernel_stages", machine.kernel_stages)
    return target, machine


def test_slowdowns_are_fractions_of_the_base_s_own_time_judged_against_the_floor_of_its_a_a_runs(model, tmp_path):
    target, machine = model
    ledger = Ledger(tmp_path / "ledger.db")
    result = calibration.calibrate(ledger, target, target.kernel_source(), tmp_path / "work", aa=2,
                                   slowdowns=(0.005, 0.05))
    # each slowed copy waits that fraction of each benchmark's median base time, keyed by its input bytes
    assert machine.delays == [{1000: 0.5, 1001: 1.0}, {1000: 5.0, 1001: 10.0}]
    # ...and is judged against the base with an empty spin after each benchmark's call, not the bare base
    assert machine.bases == [{1000: 0.0, 1001: 0.0}] * 2
    # the A/A runs are judged against the target's minimum, the slowed copies against the floor they set
    assert machine.floors[:2] == [None, None]
    assert machine.floors[2:] == [calibration.Floor.from_json(result["floor"])] * 2
    assert machine.controls == [True, True, False, False]  # the A/A runs set the floor: timed as controls
    assert result["floor"] == {"effect": 0.01728, "min_effect": 0.01, "source": "controls", "controls": 2,
                               "device": DEVICE}
    assert result["aa_verdicts"] == ["unchanged", "inconclusive"]  # the second, at 3 pairs, spans past 1%
    assert [run["decision"] for run in result["slowdowns"]] == ["unchanged", "slower"]
    assert result["smallest_found"] == 0.05
    assert [b["smallest_found"] for b in result["per_benchmark"]] == [0.05, 0.05]
    assert result["bias"] == pytest.approx(0.0011667, abs=1e-7)
    # kept: the run in `calibrations`, and its A/A runs among the samples that set the target's floor in rounds
    [row] = ledger.calibrations(target.name)
    assert (row["id"], row["target"], row["device"]) == (result["id"], target.name, DEVICE)
    samples = ledger.control_samples(target.name, DEVICE)
    assert [[round(x, 6) for x in s] for s in samples] == [[0.004, -0.002, 0.001], [-0.003, 0.002, 0.005]]


def test_the_command_prints_the_floor_and_each_benchmark_s_smallest_slowdown_found(model, judge_env):
    judge, root = judge_env
    result = judge("calibrate", "--target", "axpy", "--aa", "2", "--slowdowns", "0.5,5")
    assert result.exit_code == 0, result.output
    lines = [line.rstrip() for line in result.stdout.splitlines()]
    assert lines[0].startswith("calibration #1 · axpy · base: ") and lines[0].endswith("axpy/submission.py")
    assert lines[1] == ("A/A verdicts: unchanged, inconclusive; bias +0.12%; noise floor of the geomean: 1.7%, set by 2 "
                        "A/A controls on model machine (an identical copy of the base judged the same way); the "
                        "target's minimum is 1.0%")
    assert lines[-1] == "slowdowns of the geomean: 0.5%: unchanged, 5.0%: slower"
    assert any("0: size=1048576" in line and "5.0%" in line for line in lines), result.output


def test_the_command_refuses_slowdowns_that_are_not_percentages(judge_env):
    judge, _ = judge_env
    result = judge("calibrate", "--target", "axpy", "--slowdowns", "2,x")
    assert result.exit_code != 0
    assert "--slowdowns: '2,x' is not a comma-separated list of percentages" in result.output
    result = judge("calibrate", "--target", "axpy", "--slowdowns", "0,5")
    assert "--slowdowns: '0,5': each slowdown is a percentage above 0 and below 100" in result.output


def test_the_mixin_delays_benchmark_sizes_only_and_an_empty_spin_adds_no_delay(tmp_path, monkeypatch):
    """The mixin itself, run on the CPU (its busy wait): a benchmark's size waits its delay after the call, an
    empty spin (0.0) and a size it does not know (a correctness case) do not wait, and the output is the base's."""
    import importlib
    import sys
    import time

    import torch

    target = load_target(ROOT / "kernels" / "vecadd_cpu")
    size = 1000
    small = (torch.ones(10), torch.ones(10), torch.empty(10))
    data = (torch.ones(size), torch.ones(size), torch.empty(size))
    known = sum(t.numel() * t.element_size() for t in data)
    monkeypatch.syspath_prepend(str(target.path))
    for name, delays in (("slowed", {known: 30_000.0}), ("spun", {known: 0.0})):
        kernel = tmp_path / name
        kernel.mkdir()
        source = calibration.slowed_source(target.kernel_source(), delays) if name == "slowed" else \
            calibration.spun_source(target.kernel_source(), {known: 123.0})
        (kernel / f"cal_{name}.py").write_text(source)
        monkeypatch.syspath_prepend(str(kernel))
        module = importlib.import_module(f"cal_{name}")
        started = time.perf_counter()
        out = module.custom_kernel(data)
        spent = time.perf_counter() - started
        assert torch.equal(out, torch.full((size,), 2.0))
        if name == "slowed":
            assert spent >= 0.03
        else:
            assert spent < 0.03
        started = time.perf_counter()
        module.custom_kernel(small)
        assert time.perf_counter() - started < 0.03
        sys.modules.pop(f"cal_{name}")


def test_a_base_that_fails_with_an_empty_spin_stops_the_calibration_with_one_line(model, tmp_path, monkeypatch):
    from judge.errors import JudgeError

    target, machine = model
    monkeypatch.setattr(calibration, "kernel_stages_check",
                        lambda evaluator, base_dir: "failed: 1 of 4 checks failed" if base_dir.name == "base-spun"
                        else None)
    ledger = Ledger(tmp_path / "ledger.db")
    with pytest.raises(JudgeError) as raised:
        calibration.calibrate(ledger, target, target.kernel_source(), tmp_path / "work", aa=2, slowdowns=(0.05,))
    assert str(raised.value) == ("axpy: cannot calibrate here: the base with an empty spin after each call fails its "
                                 "correctness stage: failed: 1 of 4 checks failed")
    assert machine.delays == [] and ledger.calibrations(target.name) == []  # nothing slowed, nothing kept
