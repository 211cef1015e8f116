"""judge/check.py: each kernel variant of the vecadd fixture gets its verdict.

On a CPU the fixture's inputs live on the CPU and the GPU gate is bypassed, so that the verdict logic is
tested everywhere; the `gpu` tests run the same table (and the side-stream kernel) on a real GPU.
"""

import os
from pathlib import Path

import pytest

from judge import check
from judge.check import run_correctness
from judge.targets import load_target

FIXTURE = Path(__file__).parent / "fixtures" / "gpumode" / "vecadd"
VARIANTS = FIXTURE / "variants"


def cuda_available() -> bool:
    torch = pytest.importorskip("torch")
    return torch.cuda.is_available()


def judge_variant(variant: str, tmp_path: Path, timeout_s: float = 120):
    target = load_target(FIXTURE)
    workspace = target.assemble(tmp_path / variant, (VARIANTS / f"{variant}.py").read_text())
    return run_correctness(target, workspace, timeout_s=timeout_s)


@pytest.fixture
def on_cpu(monkeypatch):
    if cuda_available():
        pytest.skip("the CPU variant of this test runs where there is no GPU")
    monkeypatch.setattr(check, "gate", lambda arch: None)


def test_not_run_without_a_gpu(tmp_path):
    if cuda_available():
        pytest.skip("this machine has a GPU")
    result = judge_variant("correct", tmp_path)
    assert result.status == "not-run"
    assert result.summary == "not run: needs a CUDA GPU, this machine has none"


def test_correct_passes(on_cpu, tmp_path):
    result = judge_variant("correct", tmp_path)
    assert result.status == "passed", result.summary + result.log_tail
    assert result.summary == "6 of 6 checks passed (3 tests x 2 seeds)"
    cases = result.detail["cases"]
    assert [(c["test"], c["call"], c["seed"]) for c in cases] == [
        (0, 1, 4242), (0, 2, 4243), (1, 1, 5236), (1, 2, 5237), (2, 1, 1001), (2, 2, 1002)
    ]
    assert all(c["poisoned"] == ["[2]"] for c in cases)  # the preallocated output, found by the reference
    assert all(c["check_implementation"] == {"passed": True, "message": ""} for c in cases)
    assert result.detail["tolerance"] == {"rtol": 1e-6, "atol": 1e-6}
    assert (tmp_path / "correct" / "correctness.log").exists()


def test_wrong_fails_with_mismatches(on_cpu, tmp_path):
    result = judge_variant("wrong", tmp_path)
    assert result.status == "failed"
    assert result.summary.startswith("6 of 6 checks failed; first: test 0 (size=127), first call (seed 4242): output: ")
    first = result.detail["cases"][0]["outputs"][0]
    assert first["mismatched"] > 100 and first["nonfinite"] == 0
    assert 1e-4 < first["max_abs_err"] < 1e-2  # 0.001 * |b|
    mismatch = first["first_mismatches"][0]
    assert set(mismatch) == {"index", "got", "expected"}
    assert abs(mismatch["got"] - mismatch["expected"]) > 1e-6


def test_partial_write_fails_on_poison(on_cpu, tmp_path):
    result = judge_variant("partial", tmp_path)
    assert result.status == "failed"
    first = result.detail["cases"][0]
    assert first["reason"].startswith("output has 64 NaN/Inf of 127 elements")
    assert first["outputs"][0]["first_mismatches"][0] == {"index": [63], "got": "nan", "expected": pytest.approx(
        first["outputs"][0]["first_mismatches"][0]["expected"])}


def test_cache_is_stale_on_the_second_call(on_cpu, tmp_path):
    result = judge_variant("cached", tmp_path)
    assert result.status == "failed"
    verdicts = [(c["call"], c["passed"]) for c in result.detail["cases"]]
    assert verdicts == [(1, True), (2, False)] * 3
    assert result.summary.startswith("3 of 6 checks failed; first: test 0 (size=127), second call (seed 4243)")


def test_exception_crashes(on_cpu, tmp_path):
    result = judge_variant("faults", tmp_path)
    assert result.status == "crashed"
    assert result.summary.startswith("crashed: IndexError: index 508 is out of bounds")
    assert "Traceback" in result.log_tail


def test_hang_times_out(on_cpu, tmp_path):
    result = judge_variant("hangs", tmp_path, timeout_s=8)
    assert result.status == "timed-out"
    assert result.summary == "timed out: killed after 8.0 s"
    assert result.seconds < 12


def test_output_slots_found_through_nested_data():
    torch = pytest.importorskip("torch")
    a, c = torch.ones(4), torch.empty(3)
    data = (a, {"meta": 3, "out": [c]}, "name")
    after = check.clone_data(data)

    def reference(d):
        d[1]["out"][0].fill_(2.0)
        return d[1]["out"][0]

    returned = reference(after)
    slots = check.output_slots(data, after, returned)
    assert slots == ["[1]['out'][0]"]
    kernel_data = check.clone_data(data)
    assert check.poison(kernel_data, slots) == ["[1]['out'][0]"]
    assert torch.isnan(kernel_data[1]["out"][0]).all() and not torch.isnan(kernel_data[0]).any()


def test_nvfp4_outputs_are_found_among_packed_fp4_inputs(monkeypatch):
    """The SM100 target's data holds float4 tensors, which torch.equal cannot compare: the check must
    still find exactly the C tensors as outputs (this is the B200 path up to the kernel call)."""
    torch = pytest.importorskip("torch")
    target_dir = Path(__file__).resolve().parents[1] / "kernels" / "nvfp4_group_gemm"
    monkeypatch.syspath_prepend(str(target_dir))
    for name in ("reference", "task", "utils"):
        monkeypatch.delitem(__import__("sys").modules, name, raising=False)
    import reference

    data = reference.generate_input(m=[128, 64], n=[128, 256], k=[256, 256], g=2, seed=1111)
    after = check.clone_data(data)
    returned = reference.ref_kernel(after)
    slots = check.output_slots(data, after, returned)
    assert slots == ["[0][0][2]", "[0][1][2]"]
    assert check.poison(check.clone_data(data), slots) == slots


def test_unchanged_nan_inputs_are_not_outputs():
    torch = pytest.importorskip("torch")
    x = torch.tensor([1.0, float("nan")])
    assert check.output_slots((x,), check.clone_data((x,)), None) == []


def test_compare_exact_numbers():
    torch = pytest.importorskip("torch")
    got = torch.tensor([[1.0, 2.0], [3.0, float("inf")]])
    want = torch.tensor([[1.0, 2.5], [3.0, 4.0]])
    comp = check.compare("", got, want, rtol=0.0, atol=0.1)
    assert comp["mismatched"] == 2 and comp["nonfinite"] == 1
    assert comp["max_abs_err"] == 0.5 and comp["max_rel_err"] == 0.2
    assert comp["first_mismatches"] == [
        {"index": [0, 1], "got": 2.0, "expected": 2.5},
        {"index": [1, 1], "got": "inf", "expected": 4.0},
    ]


GPU_VERDICTS = [
    ("correct", "passed"), ("wrong", "failed"), ("partial", "failed"), ("cached", "failed"),
    ("side_stream", "passed"), ("faults", "crashed"), ("hangs", "timed-out"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("variant,status", GPU_VERDICTS)
def test_verdicts_on_gpu(variant, status, tmp_path):
    result = judge_variant(variant, tmp_path, timeout_s=20 if variant == "hangs" else 180)
    print(f"{variant}: {result.status}: {result.summary} ({result.seconds:.1f} s)")
    assert result.status == status, result.summary + "\n" + result.log_tail
    if variant == "cached":
        assert [(c["call"], c["passed"]) for c in result.detail["cases"]] == [(1, True), (2, False)] * 3
    if variant == "faults":
        assert "CUDA" in result.summary or "device-side assert" in result.log_tail


GPUMODE = os.environ.get("JUDGE_GPUMODE_PROBLEMS")


@pytest.mark.gpu
@pytest.mark.skipif(not GPUMODE, reason="set JUDGE_GPUMODE_PROBLEMS to a GPU MODE problems/ directory")
def test_real_gpumode_vectoradd(tmp_path):
    target = load_target(Path(GPUMODE) / "pmpp_v2" / "vectoradd_py")
    good = run_correctness(target, target.assemble(tmp_path / "good", target.kernel_source()))
    print("vectoradd_py reference submission:", good.status, good.summary)
    assert good.status == "passed", good.summary + good.log_tail
    assert good.detail["tolerance"] is None and good.detail["check_implementation"]
    assert good.detail["cases"][0]["poisoned"] == ["[2]"]
    half = target.kernel_source().replace("output[...] = A + B", "output[: A.shape[0] // 2] = (A + B)[: A.shape[0] // 2]")
    assert half != target.kernel_source()
    bad = run_correctness(target, target.assemble(tmp_path / "half", half))
    print("vectoradd_py half-written:", bad.status, bad.summary)
    assert bad.status == "failed"
