"""judge/timing.py: the timing stage's loop, records and summary (on the CPU with a host timer), and on a GPU
the verdicts that matter: a kernel against itself is unchanged, a side-stream kernel is not timed as free."""

import os
import re
from pathlib import Path

import pytest

from judge import timing
from judge.targets import load_target
from judge.timing import run_timing

FIXTURE = Path(__file__).parent / "fixtures" / "gpumode" / "vecadd"
VARIANTS = FIXTURE / "variants"


def cuda_available() -> bool:
    torch = pytest.importorskip("torch")
    return torch.cuda.is_available()


def assemble(target, tmp_path, name, source):
    return target.assemble(tmp_path / name, source)


def variant(name, **knobs):
    source = (VARIANTS / f"{name}.py").read_text()
    for knob, value in knobs.items():
        source, count = re.subn(rf"^{knob} = .*$", f"{knob} = {value}", source, flags=re.M)
        assert count == 1, knob
    return source


@pytest.fixture
def small_target():
    target = load_target(FIXTURE)
    target.benchmarks = [{"size": 20000, "seed": 1}, {"size": 40000, "seed": 2}]
    return target


def test_not_run_without_a_gpu(tmp_path):
    if cuda_available():
        pytest.skip("this machine has a GPU")
    target = load_target(FIXTURE)
    result = run_timing(target, tmp_path, tmp_path)
    assert result.status == "not-run"
    assert result.summary == "not run: needs a CUDA GPU, this machine has none"


def test_records_on_cpu(monkeypatch, tmp_path, small_target):
    if cuda_available():
        pytest.skip("the CPU variant of this test runs where there is no GPU")
    monkeypatch.setattr(timing, "gate", lambda arch: None)
    base = assemble(small_target, tmp_path, "base", small_target.kernel_source())
    cand = assemble(small_target, tmp_path, "cand", variant("correct"))
    result = run_timing(small_target, cand, base, budget_s=2, timeout_s=60)
    assert result.status == "passed", result.summary + result.log_tail
    detail = result.detail
    assert re.fullmatch(r"geomean \d\.\d{3}x \[\d\.\d{3}, \d\.\d{3}\] over 2 benchmarks", result.summary)
    assert [b["label"] for b in detail["benchmarks"]] == ["size=20000", "size=40000"]
    for bench in detail["benchmarks"]:
        assert bench["reps"] == len(bench["base_us"]) == len(bench["cand_us"]) >= timing.MIN_REPS
        assert bench["ci_low"] <= bench["speedup"] <= bench["ci_high"]
        assert bench["speedup"] == pytest.approx(bench["base_median_us"] / bench["cand_median_us"], rel=1e-3)
        assert bench["significant"] == (bench["ci_low"] > 1 or bench["ci_high"] < 1)
        assert bench["stopped"] in ("precise", "budget", "max-reps")
        assert "speed_of_light_us" in bench
    assert detail["geomean_ci"][0] <= detail["geomean"] <= detail["geomean_ci"][1]
    assert detail["measuring_s"] <= 2 + 1
    assert detail["device"] is None  # no GPU: no facts invented


def test_candidate_crash_in_timing(monkeypatch, tmp_path, small_target):
    if cuda_available():
        pytest.skip("the CPU variant of this test runs where there is no GPU")
    monkeypatch.setattr(timing, "gate", lambda arch: None)
    base = assemble(small_target, tmp_path, "base", small_target.kernel_source())
    cand = assemble(small_target, tmp_path, "cand", variant("faults"))
    result = run_timing(small_target, cand, base, budget_s=1, timeout_s=60)
    assert result.status == "crashed"
    assert result.summary.startswith("crashed: IndexError")


def test_hang_in_timing(monkeypatch, tmp_path, small_target):
    if cuda_available():
        pytest.skip("the CPU variant of this test runs where there is no GPU")
    monkeypatch.setattr(timing, "gate", lambda arch: None)
    base = assemble(small_target, tmp_path, "base", small_target.kernel_source())
    cand = assemble(small_target, tmp_path, "cand", variant("hangs"))
    result = run_timing(small_target, cand, base, budget_s=1, timeout_s=6)
    assert result.status == "timed-out"
    assert result.summary == "timed-out: killed after 6.0 s"


def test_side_stream_detection():
    nulls = [20.0, 21.0, 19.0]
    assert not timing.side_stream_work([40.0] * 3, [21.0, 22.0, 20.0], nulls)  # tail like the null's
    assert timing.side_stream_work([40.0] * 3, [60.0, 61.0, 59.0], nulls)  # 40 us left running
    series = {"base_stream": [40.0, 41.0], "base_tail": [20.0, 20.0], "cand_stream": [15.0, 15.0],
              "cand_tail": [80.0, 82.0], "null_tail": [20.0, 20.0]}
    base_us, cand_us, method = timing._times(series)
    assert method == "device-wide"
    assert base_us == [40.0, 41.0] and cand_us == [75.0, 77.0]
    series["cand_tail"] = [20.0, 21.0]
    assert timing._times(series) == ([40.0, 41.0], [15.0, 15.0], "stream")


def test_summary_from_fixed_samples():
    target = load_target(FIXTURE)
    raw = {
        "benchmarks": [
            {"base_us": [20.0, 21.0, 22.0], "cand_us": [10.0, 10.5, 11.0],
             "stopped": "precise", "measuring_s": 0.1, "method": "stream",
             "spin_us": 0.0, "host_call_us": 5.0, "launch_exposed": None,
             "null_tail_us": 20.0, "base_tail_excess_us": 0.1, "cand_tail_excess_us": -0.2, "raw": {}},
        ] * 4,
        "device": {"name": "x"},
        "device_after": {"sm_clock_mhz": 1980},
    }
    detail = timing.summarise(raw, target)
    assert detail["summary"] == "geomean 2.000x [2.000, 2.000] over 4 benchmarks"
    first = detail["benchmarks"][0]
    assert (first["base_median_us"], first["cand_median_us"], first["speedup"]) == (21.0, 10.5, 2.0)
    assert first["significant"] and first["speed_of_light_us"] == 15.024
    assert detail["geomean_ci"] == [2.0, 2.0]


# ---------------------------------------------------------------------------------------------------------
# On a GPU


@pytest.mark.gpu
def test_same_kernel_is_unchanged_on_gpu(tmp_path):
    target = load_target(FIXTURE)
    base = assemble(target, tmp_path, "base", target.kernel_source())
    cand = assemble(target, tmp_path, "cand", variant("correct"))
    result = run_timing(target, cand, base, budget_s=12)
    print("self:", result.summary)
    for b in result.detail["benchmarks"]:
        print(f"  {b['label']}: base {b['base_median_us']} us cand {b['cand_median_us']} us x{b['speedup']} "
              f"[{b['ci_low']}, {b['ci_high']}] reps {b['reps']} ({b['stopped']}, {b['method']}), "
              f"tail excess {b['base_tail_excess_us']}/{b['cand_tail_excess_us']} us over null {b['null_tail_us']} us, "
              f"spin {b['spin_us']} us, host call {b['host_call_us']} us, launch exposed {b['launch_exposed']}")
    print("device:", result.detail["device"], "after:", result.detail["device_after"])
    assert result.status == "passed"
    assert all(b["method"] == "stream" for b in result.detail["benchmarks"])
    low, high = result.detail["geomean_ci"]
    assert low <= 1.0 <= high or abs(result.detail["geomean"] - 1) < 0.005
    assert result.detail["device"]["sm_count"] > 0
    assert result.detail["device"]["sm_clock_mhz"] is not None


@pytest.mark.gpu
def test_side_stream_work_is_counted(tmp_path):
    target = load_target(FIXTURE)
    base = assemble(target, tmp_path, "base", target.kernel_source())
    cand = assemble(target, tmp_path, "cand", variant("side_stream", REPEAT=3))
    result = run_timing(target, cand, base, budget_s=8)
    print("side stream x3:", result.summary)
    for b in result.detail["benchmarks"]:
        print(f"  {b['label']}: x{b['speedup']} base {b['base_median_us']} us cand {b['cand_median_us']} us "
              f"({b['method']}), its tail {b['cand_tail_excess_us']} us over the null")
    assert result.status == "passed"
    assert all(b["method"] == "device-wide" for b in result.detail["benchmarks"])
    # three adds cost about three times one; events on the current stream alone would see little of them
    assert result.detail["geomean_ci"][1] < 0.7


@pytest.mark.gpu
def test_delay_is_significant(tmp_path):
    target = load_target(FIXTURE)
    base = assemble(target, tmp_path, "base", target.kernel_source())
    cand = assemble(target, tmp_path, "cand", variant("delayed", DELAY_CYCLES=20000))  # ~10 us at 1.98 GHz
    result = run_timing(target, cand, base, budget_s=8)
    print("delayed:", result.summary)
    assert result.detail["geomean_ci"][1] < 1.0


GPUMODE = os.environ.get("JUDGE_GPUMODE_PROBLEMS")


@pytest.mark.gpu
@pytest.mark.skipif(not GPUMODE, reason="set JUDGE_GPUMODE_PROBLEMS to a GPU MODE problems/ directory")
def test_real_gpumode_vectoradd_timing(tmp_path):
    target = load_target(Path(GPUMODE) / "pmpp_v2" / "vectoradd_py")
    target.benchmarks = target.benchmarks[1:4]  # 2048..8192: 8 us to 130 us on an H100
    base = assemble(target, tmp_path, "base", target.kernel_source())
    faster = target.kernel_source().replace("output[...] = A + B", "torch.add(A, B, out=output)")
    faster = "import torch\n" + faster
    cand = assemble(target, tmp_path, "cand", faster)
    result = run_timing(target, cand, base, budget_s=9)
    print("vectoradd_py torch.add(out=) vs output[...] = A + B:", result.summary)
    for b in result.detail["benchmarks"]:
        print(f"  {b['label']}: base {b['base_median_us']} us cand {b['cand_median_us']} us x{b['speedup']} "
              f"[{b['ci_low']}, {b['ci_high']}] reps {b['reps']}")
    assert result.status == "passed"
    assert result.detail["geomean"] > 1.0
