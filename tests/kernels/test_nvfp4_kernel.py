"""The nvfp4_group_gemm kernel without a GPU: launch plans worked out by hand, ahead-of-time compiles for
sm_100a of the base and of every example patch, and, where a B200 is present, correctness."""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from harness import use_dsl_arch
from target_modules import load_from

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "kernels" / "nvfp4_group_gemm"
PROPOSALS = ROOT / "proposals" / "nvfp4_group_gemm"
TASK = yaml.safe_load((TARGET / "task.yml").read_text())
BENCHMARKS = TASK["benchmarks"]
SM100_M_ERROR = "expects the M-mode to be 128, but got 64"


@pytest.fixture(scope="module")
def kernel():
    # Imported on first use, not at collection: the DSL fixes its default arch when CuTe is first used,
    # and other targets' tests in the same process may want another one.
    return load_from(TARGET, "submission")


def sizes(spec):
    return list(zip(spec["m"], spec["n"], spec["k"], [1] * spec["g"]))


# ---- launch plans -------------------------------------------------------------------------------------

# Per benchmark: (M tiles, N tiles) per group at the base 128 x 128 tile, and the CTA count.
# Benchmark 0: M = 80, 176, 128, 72, 64, 248, 96, 160 -> 1, 2, 1, 1, 1, 2, 1, 2 row tiles; N = 4096 -> 32.
# Benchmark 1: M = 40, 76, 168, 72, 164, 148, 196, 160 -> 1, 1, 2, 1, 2, 2, 2, 2; N = 7168 -> 56.
# Benchmark 2: M = 192, 320 -> 2, 3; N = 3072 -> 24.  Benchmark 3: M = 128, 384 -> 1, 3; N = 4096 -> 32.
BASE_PLANS = [
    ([(1, 32), (2, 32), (1, 32), (1, 32), (1, 32), (2, 32), (1, 32), (2, 32)], 352),
    ([(1, 56), (1, 56), (2, 56), (1, 56), (2, 56), (2, 56), (2, 56), (2, 56)], 728),
    ([(2, 24), (3, 24)], 120),
    ([(1, 32), (3, 32)], 128),
]


@pytest.mark.parametrize("index", range(4))
def test_base_plan_of_each_benchmark(kernel, index):
    plan = kernel.plan_launch(sizes(BENCHMARKS[index]))
    tiles, ctas = BASE_PLANS[index]
    assert plan.tiles_per_group == tiles
    assert plan.num_ctas == ctas
    assert plan.grid == (ctas, 1, 1)
    assert plan.cluster == (1, 1, 1)
    assert plan.tensormap_workspace_shape == (ctas, 4, 16)
    spec = BENCHMARKS[index]
    assert plan.problem_sizes == sizes(spec)
    assert plan.strides == [(k, k, n) for n, k in zip(spec["n"], spec["k"])]


def test_ctas_walk_each_group_row_tiles_first(kernel):
    plan = kernel.plan_launch(sizes(BENCHMARKS[2]))
    work = plan.cta_work
    assert work[:3] == [(0, 0, 0), (0, 1, 0), (0, 0, 1)]
    assert work[47] == (0, 1, 23)
    assert work[48] == (1, 0, 0)
    assert work[-1] == (1, 2, 23)
    assert len(set(work)) == len(work)


@pytest.mark.parametrize("index, ctas", [(0, 176), (1, 364), (2, 60), (3, 64)])
def test_wide_tile_halves_the_ctas(kernel, index, ctas):
    plan = kernel.plan_launch(sizes(BENCHMARKS[index]), tile_mnk=(128, 256, 256))
    assert plan.num_ctas == ctas


def test_clusters_pad_each_group_to_whole_clusters(kernel):
    # Group 0: 1 x 2 tiles -> 2 x 2 with a 2 x 1 cluster; group 1: 2 x 3 tiles, already whole.
    plan = kernel.plan_launch([(40, 256, 256, 1), (200, 384, 256, 1)], cluster_mn=(2, 1))
    assert plan.tiles_per_group == [(2, 2), (2, 3)]
    assert plan.num_ctas == 10
    assert plan.cluster == (2, 1, 1)
    assert plan.cta_work[:4] == [(0, 0, 0), (0, 1, 0), (0, 0, 1), (0, 1, 1)]


def test_clusters_along_n_keep_a_cluster_contiguous(kernel):
    plan = kernel.plan_launch([(256, 384, 256, 1)], cluster_mn=(1, 2))
    assert plan.tiles_per_group == [(2, 4)]
    # Cluster (rows 0, columns 0-1) first, then (row 1, columns 0-1).
    assert plan.cta_work[:4] == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1)]


def test_tma_store_needs_a_fifth_tensor_map(kernel):
    plan = kernel.plan_launch(sizes(BENCHMARKS[3]), epilogue_store="tma")
    assert plan.tensormap_workspace_shape == (128, 5, 16)


def test_plan_refuses_what_the_kernel_cannot_do(kernel):
    with pytest.raises(ValueError, match="K = 320"):
        kernel.plan_launch([(128, 128, 320, 1)])
    with pytest.raises(ValueError, match="L = 2"):
        kernel.plan_launch([(128, 128, 256, 2)])


def test_tensor_memory_columns(kernel):
    assert kernel.tmem_columns() == (128, 16, 16, 256)
    assert kernel.tmem_columns((128, 256, 256)) == (256, 16, 32, 512)
    assert kernel.tmem_columns((128, 128, 256), 2) == (256, 16, 16, 512)
    with pytest.raises(ValueError, match="512"):
        kernel.tmem_columns((128, 256, 256), 2)


def test_compile_signature_does_not_depend_on_the_shapes(kernel):
    first = kernel.compile_signature(TASK["tests"][0])
    assert first == kernel.compile_signature(BENCHMARKS[1])
    assert first["mma_tiler_mnk"] == (128, 128, 256)
    assert first["num_ab_stages"] == 1


# ---- compiling for sm_100a on CPU ---------------------------------------------------------------------


@pytest.fixture
def sm100(monkeypatch, tmp_path):
    """Compile for sm_100a with PTX and cubin kept, in a scratch directory: cute.compile drops its files in the
    directory it was imported in unless told another (--dump-dir, which the compile calls here pass)."""
    use_dsl_arch(monkeypatch, "sm_100a")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def ptxas_resources(ptx: str, where: Path) -> tuple[int, int]:
    """(registers, spill bytes) that ptxas reports for the kernel, through the compile stage's own parser."""
    from judge.stages.compile import resources

    tool = resources.find_tool("ptxas")
    if tool is None:
        pytest.skip("ptxas not installed (pip install nvidia-cuda-nvcc)")
    source = where / "kernel.ptx"
    source.write_text(ptx)
    try:
        report = resources.run_ptxas(source, "sm_100a", tool)
    except RuntimeError as error:
        if "site-packages" not in tool:  # a system CUDA's ptxas may predate the DSL's PTX ISA
            pytest.skip(f"{tool} cannot read CuTe DSL's PTX ({error}); pip install nvidia-cuda-nvcc")
        raise
    (numbers,) = resources.parse_ptxas(report).values()
    return numbers["registers"], numbers["spill_stores"] + numbers["spill_loads"]


def test_base_compiles_with_ptx_and_cubin(kernel, sm100):
    compiled = kernel.compile_kernel(BENCHMARKS[0], options=f"--keep-ptx --keep-cubin --dump-dir {sm100}")
    ptx, cubin = compiled.__ptx__, compiled.__cubin__
    assert ".target sm_100a" in ptx
    assert "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.block16" in ptx
    assert "tcgen05.cp.cta_group::1.32x128b.warpx4" in ptx  # scale factors, shared -> tensor memory
    assert "cp.async.bulk.tensor" in ptx  # TMA loads
    assert "tensormap.replace" in ptx  # per-group tensor maps written on the device
    assert "st.global.v4" in ptx  # the SIMT epilogue's 16-byte stores
    assert cubin[:4] == b"\x7fELF"
    registers, spills = ptxas_resources(ptx, sm100)
    assert spills == 0
    assert registers <= 128


def apply_in_copy(proposal: str, where: Path) -> Path:
    """A copy of the target directory with the proposal's patch applied by `patch -p1`."""
    if shutil.which("patch") is None:
        pytest.skip("patch(1) not installed")
    copy = where / f"target-{proposal}"
    shutil.copytree(TARGET, copy, ignore=shutil.ignore_patterns("__pycache__"))
    diff = (PROPOSALS / proposal / "patch.diff").read_text()
    for flags in (["--dry-run"], []):
        subprocess.run(["patch", "-p1", "--batch", *flags], input=diff, text=True, cwd=copy, check=True,
                       capture_output=True)
    return copy


PATCHED = ["pipeline-stages-3", "tile-64-rows", "tma-store-epilogue", "wide-n-tile"]


@pytest.mark.parametrize("proposal", PATCHED)
def test_each_patch_applies_and_changes_one_knob(proposal, tmp_path):
    copy = apply_in_copy(proposal, tmp_path)
    before = (TARGET / "submission.py").read_text().splitlines()
    after = (copy / "submission.py").read_text().splitlines()
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert len(before) == len(after)
    assert len(changed) == 1


def test_the_pitch_only_proposal_has_no_patch():
    assert not (PROPOSALS / "warp-specialization" / "patch.diff").exists()
    assert (PROPOSALS / "warp-specialization" / "pitch.md").is_file()


@pytest.mark.parametrize("proposal", ["pipeline-stages-3", "tma-store-epilogue", "wide-n-tile"])
def test_patched_kernel_compiles(proposal, sm100):
    patched = load_from(apply_in_copy(proposal, sm100), "submission")
    compiled = patched.compile_kernel(BENCHMARKS[2], options=f"--keep-ptx --keep-cubin --dump-dir {sm100}")
    assert compiled.__cubin__[:4] == b"\x7fELF"
    _, spills = ptxas_resources(compiled.__ptx__, sm100)
    assert spills == 0
    if proposal == "tma-store-epilogue":
        assert "cp.async.bulk.tensor.2d.global.shared::cta" in compiled.__ptx__  # the TMA store


def test_64_row_tile_is_a_compile_error(sm100):
    from cutlass.base_dsl.common import DSLUserCodeError

    patched = load_from(apply_in_copy("tile-64-rows", sm100), "submission")
    assert patched.MMA_TILER_MNK == (64, 128, 256)
    with pytest.raises(DSLUserCodeError) as error:
        patched.compile_kernel(BENCHMARKS[2])
    assert SM100_M_ERROR in str(error.value)


# ---- on a B200 ---------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("index", range(len(TASK["tests"])))
def test_kernel_matches_reference_on_sm100(kernel, index):
    import torch

    if torch.cuda.get_device_capability()[0] < 10:
        pytest.skip("needs an SM100 GPU")
    reference = load_from(TARGET, "reference")
    spec = TASK["tests"][index]
    data = reference.generate_input(**spec)
    output = kernel.custom_kernel(data)
    torch.cuda.synchronize()
    ok, message = reference.check_implementation(data, output)
    assert ok, message


# ---- the host path of a call ---------------------------------------------------------------------------


@pytest.fixture
def torch_cpu(monkeypatch):
    """torch whose torch.empty gives 128-byte aligned storage on the CPU too (CUDA's allocator always does):
    the descriptor workspace's pointer must be."""
    torch = pytest.importorskip("torch")
    empty = torch.empty

    def aligned_empty(shape, dtype, device=None):
        count = math.prod(shape)
        raw = empty(count + 16, dtype=dtype, device=device)
        skip = (-raw.data_ptr() % 128) // raw.element_size()
        return raw[skip:skip + count].view(shape)

    monkeypatch.setattr(torch, "empty", aligned_empty)
    return torch


def _inputs(sizes_mnk, torch):
    """CPU stand-ins of a call's tensors: only addresses, strides and sizes reach the host path."""
    abc = [(torch.zeros(m, k // 2, dtype=torch.uint8), torch.zeros(n, k // 2, dtype=torch.uint8),
            torch.zeros(m, n, dtype=torch.float16)) for m, n, k in sizes_mnk]
    sf = [(torch.zeros(8, dtype=torch.uint8), torch.zeros(8, dtype=torch.uint8)) for _ in sizes_mnk]
    return abc, sf, [(m, n, k, 1) for m, n, k in sizes_mnk]


def test_a_call_on_inputs_seen_before_builds_no_metadata(kernel, torch_cpu):
    torch = torch_cpu
    kernel._metadata.clear()
    abc, sf, problem = _inputs([(80, 256, 256), (176, 256, 256)], torch)
    pointers, ctas = kernel._launch_arguments(abc, sf, problem)
    again, ctas_again = kernel._launch_arguments(abc, sf, problem)
    assert (ctas, ctas_again, len(kernel._metadata)) == (1 * 2 + 2 * 2, 6, 1)
    assert again is pointers  # the same device arrays: no allocation, no copy
    metadata = next(iter(kernel._metadata.values()))[0]
    assert metadata[2].tolist() == [[a.data_ptr(), b.data_ptr(), c.data_ptr()] for a, b, c in abc]
    other, _, _ = _inputs([(80, 256, 256), (176, 256, 256)], torch)
    assert kernel._launch_arguments(other, sf, problem)[0] is not pointers  # other addresses: new arrays
    assert len(kernel._metadata) == 2


def test_the_metadata_cache_keeps_the_latest_entries_only(kernel, torch_cpu):
    torch = torch_cpu
    kernel._metadata.clear()
    keep = [_inputs([(128, 256, 256)], torch) for _ in range(kernel.METADATA_CACHE_ENTRIES + 3)]
    for abc, sf, problem in keep:
        kernel._launch_arguments(abc, sf, problem)
    assert len(kernel._metadata) == kernel.METADATA_CACHE_ENTRIES
    newest = kernel.metadata_key(*keep[-1])
    oldest = kernel.metadata_key(*keep[0])
    assert newest in kernel._metadata and oldest not in kernel._metadata
