"""Tests of the fp8_group_gemm_sm90 target: reference and generator on CPU, ahead-of-time compiles for
sm_90a on CPU (the base kernel and every example proposal), and correctness on a GPU."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import torch
import yaml

from harness import use_dsl_arch

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "kernels" / "fp8_group_gemm_sm90"
PROPOSALS = ROOT / "proposals" / "fp8_group_gemm_sm90"
TASK = yaml.safe_load((TARGET / "task.yml").read_text())

# What each example proposal's patch should do at the compile stage.
EXPECTED_COMPILE = {
    "stages-6": "compiles",
    "tile-m-64": "compiles",
    "cluster-2x1-multicast-b": "fails",  # the base kernel implements 1x1 clusters only
    "epilogue-paired-stores": "compiles",
}


def load(name: str, path: Path):
    """Import a file as a fresh module, with the target directory first on sys.path."""
    # The target's own task.py and utils.py must win over any module of the same name loaded before.
    saved = {key: sys.modules.pop(key) for key in ("task", "utils") if key in sys.modules}
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(f"{name}_{uuid.uuid4().hex[:8]}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(path.parent))
        for key in ("task", "utils"):
            sys.modules.pop(key, None)
        sys.modules.update(saved)


reference = load("reference", TARGET / "reference.py")


def test_reference_matches_hand_computed_case():
    # Group 0: rows [1, 2], [3, -1]; group 1: row [0.5, 4]. B_0 = [[1, 1], [2, 0]], B_1 = [[-1, 2], [1, 0.5]].
    a = torch.tensor([[1, 2], [3, -1], [0.5, 4]], dtype=torch.float32).to(torch.float8_e4m3fn)
    b = torch.tensor([[[1, 1], [2, 0]], [[-1, 2], [1, 0.5]]], dtype=torch.float32).to(torch.float8_e4m3fn)
    sa = torch.tensor([1.0, 0.5, 2.0])
    sb = torch.tensor([[1.0, 3.0], [0.25, 1.0]])
    offs = torch.tensor([2, 3], dtype=torch.int32)
    c = torch.full((3, 2), float("nan"), dtype=torch.bfloat16)
    out = reference.ref_kernel((a, b, sa, sb, offs, c))
    # Row 0: A@B^T = [3, 2] -> * 1.0 * [1, 3] = [3, 6]; row 1: [2, 6] * 0.5 * [1, 3] = [1, 9];
    # row 2 (group 1): [7.5, 2.5] * 2.0 * [0.25, 1] = [3.75, 5].
    assert out.tolist() == [[3.0, 6.0], [1.0, 9.0], [3.75, 5.0]]


def test_reference_skips_empty_groups():
    data = reference.generate_input(m=[0, 3, 0], n=16, k=32, seed=7)
    assert data[0].shape == (3, 32) and data[4].tolist() == [0, 3, 3]
    out = reference.ref_kernel(data)
    a, b, sa, sb = (t.float() for t in data[:4])
    assert torch.allclose(out, (a @ b[1].t()) * sa[:, None] * sb[1][None, :])


def test_generator_is_deterministic_and_never_zero():
    first = reference.generate_input(m=[5, 9], n=32, k=64, seed=123)
    again = reference.generate_input(m=[5, 9], n=32, k=64, seed=123)
    other = reference.generate_input(m=[5, 9], n=32, k=64, seed=124)
    for x, y in zip(first[:5], again[:5]):
        assert torch.equal(x.view(torch.uint8) if x.dtype == torch.float8_e4m3fn else x,
                           y.view(torch.uint8) if y.dtype == torch.float8_e4m3fn else y)
    assert not torch.equal(first[0].view(torch.uint8), other[0].view(torch.uint8))
    for t in first[:4]:
        assert t.float().abs().sum() > 0
    assert bool(first[5].isnan().all())


def test_check_rejects_nan_and_wrong_values_and_accepts_bf16_reference():
    data = reference.generate_input(m=[3, 70], n=64, k=128, seed=5)
    expected = reference.ref_kernel(data)
    assert reference.check_implementation(data, expected.to(torch.bfloat16))[0]
    poisoned = expected.to(torch.bfloat16)
    poisoned[10, 3] = float("nan")
    ok, message = reference.check_implementation(data, poisoned)
    assert not ok and "non-finite" in message
    assert not reference.check_implementation(data, data[5])[0]
    wrong = expected.to(torch.bfloat16)
    wrong[72, 63] += 1.0
    ok, message = reference.check_implementation(data, wrong)
    assert not ok and "(72, 63)" in message


@pytest.fixture
def sm90a(monkeypatch):
    use_dsl_arch(monkeypatch, "sm_90a")


def test_compile_kernel_on_cpu_for_sm90a(sm90a, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # --keep-ptx writes the PTX and cubin into the working directory
    kernel = load("submission", TARGET / "submission.py")
    compiled = kernel.compile_kernel(TASK["benchmarks"][0], "--keep-ptx --keep-cubin")
    ptx = compiled.__ptx__
    assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in ptx
    assert "cp.async.bulk.tensor" in ptx
    assert kernel.compile_signature(TASK["benchmarks"][0]) == kernel.compile_signature(TASK["tests"][0])


@pytest.mark.parametrize("proposal", sorted(EXPECTED_COMPILE))
def test_example_patch_compiles_as_expected(proposal, tmp_path, sm90a):
    work = tmp_path / "target"
    shutil.copytree(TARGET, work, ignore=shutil.ignore_patterns("__pycache__"))
    patch = PROPOSALS / proposal / "patch.diff"
    subprocess.run(["patch", "-p1", "--quiet", "-i", str(patch)], cwd=work, check=True)
    kernel = load("submission", work / "submission.py")
    if EXPECTED_COMPILE[proposal] == "compiles":
        assert kernel.compile_kernel(TASK["benchmarks"][0]) is not None
    else:
        with pytest.raises(ValueError, match="not implemented"):
            kernel.compile_kernel(TASK["benchmarks"][0])


@pytest.fixture(scope="module")
def kernel():
    return load("submission", TARGET / "submission.py")


@pytest.mark.gpu
@pytest.mark.parametrize("spec", TASK["tests"], ids=lambda s: f"m{'-'.join(map(str, s['m']))}_n{s['n']}_k{s['k']}")
def test_kernel_matches_reference_on_gpu(spec, kernel):
    data = reference.generate_input(**spec)
    out = kernel.custom_kernel(data)
    torch.cuda.synchronize()
    ok, message = reference.check_implementation(data, out)
    assert ok, message


@pytest.mark.gpu
def test_kernel_is_correct_on_fresh_data_and_second_call(kernel):
    for seed in (1, 2):
        data = reference.generate_input(m=[33, 0, 200, 128], n=384, k=640, seed=seed)
        kernel.custom_kernel(data)
        data[5].fill_(float("nan"))
        out = kernel.custom_kernel(data)
        torch.cuda.synchronize()
        ok, message = reference.check_implementation(data, out)
        assert ok, message
