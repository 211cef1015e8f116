"""judge/stages/compile/stage.py and judge/stages/compile/resources.py: parsers and occupancy on captured text with exact numbers, then
real CuTe DSL compiles (CPU only) of the fixture kernel and of the contest's targets through run_compile."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

from judge.stages.compile import stage as compile_stage
from judge.stages.compile import resources
from judge.stages.compile.stage import compile_many, run_compile
from judge.stages.compile.cache import distinct_configs
from judge.stages.compile.tracebacks import describe_error
from judge.errors import JudgeError
from judge.stages.compile.resources import ARCHS, occupancy, parse_cuobjdump, parse_launches, parse_ptx_entries, parse_ptxas
from judge.targets import load_target

HERE = Path(__file__).parent
FIXTURE = HERE / "fixtures" / "compile" / "scale"
VARIANTS = FIXTURE / "variants"
SAMPLES = HERE / "fixtures" / "compile" / "samples"
KERNELS = HERE.parent / "kernels"
KB = 1024

# ptxas from PyPI's nvidia-cuda-nvcc: a system CUDA's ptxas can be older than the DSL's PTX ISA (CUDA 13.0's
# on the GPU machine cannot read CuTe DSL 4.8.1's PTX), and these tests assert what ptxas reports.
needs_dsl = pytest.mark.skipif(
    "site-packages" not in (resources.find_tool("ptxas") or "") or importlib.util.find_spec("cutlass") is None,
    reason="needs nvidia-cutlass-dsl and nvidia-cuda-nvcc's ptxas (pip install 'judge[cute]')",
)

# `ptxas -v` (CUDA 13.5) on two PTX files, concatenated: a kernel with static shared memory, and the
# nvfp4 base kernel squeezed to 50 registers with `.maxnreg 50` so that it spills.
PTXAS_SAMPLE = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'stage_copy' for 'sm_90a'
ptxas info    : Function properties for stage_copy
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 14 registers, used 1 barriers, 4096 bytes smem
ptxas info    : Compile time = 2.179 ms
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'gemm_kernel' for 'sm_100a'
ptxas info    : Function properties for gemm_kernel
    144 bytes stack frame, 140 bytes spill stores, 140 bytes spill loads
ptxas info    : Used 50 registers, used 2 barriers, 144 bytes cumulative stack size
ptxas info    : Compile time = 58.819 ms
"""

CUOBJDUMP_SAMPLE = """
Resource usage:
 Common:
  GLOBAL:0
 Function gemm_kernel:
  REG:56 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:1960 TEXTURE:0 SURFACE:0 SAMPLER:0
"""

PTX_SAMPLE = """\
.version 8.8
.target sm_90a
.address_size 64

.extern .shared .align 1024 .b8 __dynamic_shmem__0[];

.visible .entry exact(
\t.param .u64 exact_param_0
)
.reqntid 128, 1, 1
{
\tret;
}

.visible .entry bounded(
\t.param .u64 bounded_param_0
)
.maxntid 32, 8, 1
{
\tret;
}

.visible .entry unknown(
\t.param .u64 unknown_param_0
)
{
\tret;
}
"""


# ---------------------------------------------------------------------------------------------------------
# Parsers


def test_parse_ptxas_exact_numbers():
    assert parse_ptxas(PTXAS_SAMPLE) == {
        "stage_copy": {"registers": 14, "spill_stores": 0, "spill_loads": 0, "stack_bytes": 0,
                       "smem_static": 4096, "barriers": 1},
        "gemm_kernel": {"registers": 50, "spill_stores": 140, "spill_loads": 140, "stack_bytes": 144,
                        "smem_static": 0, "barriers": 2},
    }


def test_parse_cuobjdump_exact_numbers():
    assert parse_cuobjdump(CUOBJDUMP_SAMPLE) == {
        "gemm_kernel": {"registers": 56, "stack_bytes": 0, "shared_bytes": 1024, "local_bytes": 0}
    }


def test_threads_per_cta_from_the_ptx():
    assert parse_ptx_entries(PTX_SAMPLE) == {
        "exact": {"threads": 128, "threads_from": ".reqntid 128, 1, 1"},
        "bounded": {"threads": 256, "threads_from": ".maxntid 32, 8, 1"},
        "unknown": {"threads": None, "threads_from": None},
    }


def test_launch_config_from_the_lowered_host_code():
    # The host function of the fixture kernel as CuTe DSL 4.8.1 lowers it (LLVM dialect).
    launches = parse_launches((SAMPLES / "launch_host_sm90a.mlir").read_text())
    assert launches == [{
        "kernel": "kernel_cutlass_scale_kernel_tensorptrf32gmemalign16o1_tensorptrf32gmemalign16o1__0",
        "block": [128, 1, 1],
        "threads": 128,
        "dynamic_smem": 512,  # 128 fp32 staged per CTA
    }]


def test_launch_config_that_is_not_a_constant_is_unknown():
    text = (SAMPLES / "launch_host_sm90a.mlir").read_text()
    gep = re.search(r"(%\w+) = llvm\.getelementptr %\w+\[0, 2\]", text).group(1)
    store = re.search(rf"llvm\.store %\w+, {gep} : i64", text).group(0)
    # a run-time value (the function's n argument) where the constant shared-memory size was
    assert parse_launches(text.replace(store, f"llvm.store %arg2, {gep} : i64"))[0]["dynamic_smem"] is None


# ---------------------------------------------------------------------------------------------------------
# Occupancy, computed by hand


B200 = ARCHS["sm_100a"]
H100 = ARCHS["sm_90a"]


def test_occupancy_168_regs_128_threads_100_kb():
    # regs: 168 x 32 = 5376 per warp (21 units of 256); 16384 per sub-partition holds 3 warps -> 12 warps
    # -> 3 CTAs of 4 warps. smem: 100 KB + 1 KB reserved = 103424 B; 233472 // 103424 = 2 CTAs.
    result = occupancy(B200, registers=168, threads=128, smem_bytes=100 * KB)
    assert result["ctas_per_sm"] == 2
    assert result["limited_by"] == "smem"
    assert result["limits"] == {"ctas": 32, "threads": 16, "registers": 3, "smem": 2}
    assert result["regs_per_warp"] == 5376
    assert result["smem_per_cta"] == 103424
    assert result["warps_per_sm"] == 8
    assert result["occupancy"] == 0.125


def test_occupancy_register_bound():
    # 255 regs -> 8160 per warp, rounded to 8192; 2 warps per sub-partition -> 8 warps -> one 8-warp CTA.
    result = occupancy(B200, registers=255, threads=256, smem_bytes=0)
    assert (result["ctas_per_sm"], result["limited_by"]) == (1, "registers")
    assert result["regs_per_warp"] == 8192


def test_occupancy_warps_not_a_multiple_of_four():
    # 3-warp CTAs of 168 regs: 3 warps per sub-partition, 12 per SM, 12 // 3 = 4 CTAs.
    result = occupancy(H100, registers=168, threads=96, smem_bytes=0)
    assert result["limits"]["registers"] == 4


def test_occupancy_hardware_check_rounds_warps_to_sub_partitions():
    # 192 regs x 9 warps: 55296 registers allocated, but the launch check assumes 12 warps (73728 > 65536).
    result = occupancy(H100, registers=192, threads=288, smem_bytes=0)
    assert (result["ctas_per_sm"], result["limited_by"]) == (0, "registers")


def test_occupancy_sub_partitions_matter():
    # 96 regs: 3072 per warp; 16384 // 3072 = 5 warps per sub-partition = 20 per SM (not 65536 // 3072 = 21).
    result = occupancy(H100, registers=96, threads=32, smem_bytes=0)
    assert result["limits"]["registers"] == 20


def test_occupancy_thread_and_register_tie():
    result = occupancy(H100, registers=32, threads=1024, smem_bytes=0)
    assert (result["ctas_per_sm"], result["limited_by"]) == (2, "threads/registers")


def test_occupancy_cta_slots():
    result = occupancy(H100, registers=40, threads=32, smem_bytes=KB)
    assert (result["ctas_per_sm"], result["limited_by"]) == (32, "ctas")


def test_occupancy_barriers():
    result = occupancy(B200, registers=32, threads=64, smem_bytes=0, barriers=4)
    assert (result["limits"]["barriers"], result["ctas_per_sm"], result["limited_by"]) == (16, 16, "barriers")


def test_occupancy_shared_memory_edges():
    # 227 KB is the most a CTA may ask for: with the 1 KB reservation it fills the SM's 228 KB exactly.
    assert occupancy(B200, registers=32, threads=128, smem_bytes=227 * KB)["ctas_per_sm"] == 1
    over = occupancy(B200, registers=32, threads=128, smem_bytes=227 * KB + 1)
    assert (over["ctas_per_sm"], over["limited_by"]) == (0, "smem")
    # 128-byte allocation units: 1 byte costs 128, plus the reservation.
    assert occupancy(B200, registers=32, threads=128, smem_bytes=1)["smem_per_cta"] == 1152


def test_occupancy_impossible_register_count():
    result = occupancy(H100, registers=128, threads=1024, smem_bytes=0)  # 128 K registers for one CTA
    assert (result["ctas_per_sm"], result["limited_by"]) == (0, "registers")


def test_architecture_facts():
    assert (B200.gpu, B200.sms, H100.gpu, H100.sms) == ("B200", 148, "H100", 132)
    for facts in (B200, H100):
        assert facts.smem_per_sm == 228 * KB and facts.smem_per_block_optin == 227 * KB
        assert (facts.regs_per_sm, facts.threads_per_sm, facts.max_ctas_per_sm) == (65536, 2048, 32)


# ---------------------------------------------------------------------------------------------------------
# Errors


def test_error_line_from_a_dsl_traceback():
    error = describe_error((SAMPLES / "dsl_error.txt").read_text(), "submission.py")
    assert error["line"] == (
        "DSLUserCodeError: expects the M-mode to be 128, but got 64 "
        "(submission.py:179: `op = tcgen05.MmaMXF4NVF4Op(`)"
    )
    assert error["where"] == {"file": "submission.py", "line": 179, "text": "op = tcgen05.MmaMXF4NVF4Op("}


PLAIN_TRACEBACK = """\
Traceback (most recent call last):
  File "/judge/judge/stages/compile/stage.py", line 400, in _child_compile
    compiled = hook(dict(specs[served[0]]), options)
               ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/work/ws/submission.py", line 12, in compile_kernel
    return build(spec)
           ^^^^^^^^^^^
  File "/work/ws/submission.py", line 7, in build
    tile = TILES[spec["n"]]
           ~~~~~^^^^^^^^^^^
  File "/venv/site-packages/somewhere.py", line 3, in __getitem__
    raise KeyError(key)
KeyError: 3072
"""

CHAINED_TRACEBACK = """\
Traceback (most recent call last):
  File "/work/ws/submission.py", line 30, in compile_kernel
    return cute.compile(launch, *pointers)
  File "/venv/site-packages/cutlass/base_dsl/dsl.py", line 9, in compile
    raise ValueError("bad layout")
ValueError: bad layout

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/venv/site-packages/cutlass/base_dsl/dsl.py", line 12, in compile
    raise DSLRuntimeError("MLIR pass failed") from error
cutlass.base_dsl.common.DSLRuntimeError: 

  MLIR pass failed
  note: see the log
"""


def test_error_line_from_the_deepest_kernel_frame():
    error = describe_error(PLAIN_TRACEBACK, "submission.py")
    assert error["line"] == 'KeyError: 3072 (submission.py:7: `tile = TILES[spec["n"]]`)'


def test_error_line_through_a_chained_exception():
    error = describe_error(CHAINED_TRACEBACK, "submission.py")
    assert error["line"] == "DSLRuntimeError: MLIR pass failed (submission.py:30: `return cute.compile(launch, *pointers)`)"


# ---------------------------------------------------------------------------------------------------------
# Configurations


def test_equal_signatures_compile_once():
    signatures = [{"tile": (128, 128)}, {"tile": [128, 64]}, {"tile": [128, 128]}, {"stages": 1, "tile": [1, 2]},
                  {"tile": [1, 2], "stages": 1}]
    assert distinct_configs(signatures) == [
        ({"tile": [128, 128]}, [0, 2]),
        ({"tile": [128, 64]}, [1]),
        ({"stages": 1, "tile": [1, 2]}, [3, 4]),
    ]


def test_default_signature_drops_the_seed():
    specs = [{"size": 8, "seed": 1}, {"size": 8, "seed": 2}, {"size": 9, "seed": 1}]
    configs = distinct_configs([compile_stage.default_signature(s) for s in specs])
    assert configs == [({"size": 8}, [0, 1]), ({"size": 9}, [2])]


# ---------------------------------------------------------------------------------------------------------
# Real compiles in a child (CPU only)


def workspace(tmp_path: Path, variant: str | None = None, name: str = "ws") -> tuple:
    target = load_target(FIXTURE)
    source = (VARIANTS / f"{variant}.py").read_text() if variant else target.kernel_source()
    return target, target.assemble(tmp_path / name, source)


@needs_dsl
@pytest.mark.skipif(resources.find_tool("cuobjdump") is None, reason="needs nvidia-cuda-cuobjdump")
def test_without_a_ptxas_that_reads_the_ptx_the_cubin_gives_stack_and_smem(tmp_path, monkeypatch):
    def too_old(ptx, arch, ptxas):
        raise RuntimeError("ptxas: Unsupported .version 9.1; current version is '9.0'")

    monkeypatch.setattr(resources, "run_ptxas", too_old)
    target, ws = workspace(tmp_path)
    result = run_compile(target, ws, cache_dir=tmp_path / "cache")
    assert result.status == "passed", result.summary
    (config,) = result.detail.configs
    (kernel,) = config.kernels
    assert kernel.ptxas is None and kernel.spill_stores is None
    assert (kernel.stack_bytes, kernel.smem_static, kernel.smem_total) == (0, 0, 512)
    assert 0 < kernel.occupancy.ctas_per_sm <= 32
    assert "ptxas: Unsupported .version 9.1; current version is '9.0'" in config.notes


@needs_dsl
def test_fixture_kernel_compiles_with_resources(tmp_path):
    target, ws = workspace(tmp_path)
    result = run_compile(target, ws, cache_dir=tmp_path / "cache")
    assert result.status == "passed", result.summary
    assert result.summary.startswith("compiled 1/1 config for sm_90a: ")
    (config,) = result.detail.configs
    assert config.signature == {"scale": 2.0, "threads": 128}
    assert config.benchmarks == [0, 1, 2]
    assert config.ok and not config.cached
    assert config.ptx_bytes > 0 and config.cubin_bytes > 0
    (kernel,) = config.kernels
    assert 1 <= kernel.registers <= 255
    assert kernel.spill_stores == 0 and kernel.stack_bytes == 0
    assert (kernel.smem_static, kernel.smem_dynamic, kernel.smem_total) == (0, 512, 512)
    assert (kernel.threads, kernel.threads_from) == (128, ".reqntid 128, 1, 1")
    assert 0 < kernel.occupancy.ctas_per_sm <= 32
    assert Path(config.files["kernel.ptx"]).read_text().startswith("//")
    assert result.detail.gpu["gpu"] == "H100"
    json.dumps(result.detail.to_json())  # lands in the ledger as JSON


@needs_dsl
def test_second_compile_is_a_cache_hit_and_a_changed_source_a_miss(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    target, ws = workspace(tmp_path)
    first = run_compile(target, ws, cache_dir=cache)
    assert first.status == "passed" and not first.detail.configs[0].cached

    def no_child(*args, **kwargs):
        raise AssertionError("a cache hit must not start a child")

    monkeypatch.setattr(compile_stage, "run_isolated", no_child)
    again = run_compile(target, target.assemble(tmp_path / "ws2", target.kernel_source()), cache_dir=cache)
    assert again.status == "passed"
    assert again.detail.configs[0].cached is True
    assert again.detail.configs[0].kernels == first.detail.configs[0].kernels
    assert again.summary == first.summary + " (1 cached)"
    monkeypatch.undo()

    changed = target.kernel_source().replace("THREADS = 128", "THREADS = 256")
    other = run_compile(target, target.assemble(tmp_path / "ws3", changed), cache_dir=cache)
    assert other.status == "passed"
    (config,) = other.detail.configs
    assert not config.cached and config.key != first.detail.configs[0].key
    assert config.kernels[0].threads == 256 and config.kernels[0].smem_dynamic == 1024


@needs_dsl
def test_compile_hook_that_raises_fails_with_the_error_line(tmp_path):
    target, ws = workspace(tmp_path, "raises")
    result = run_compile(target, ws, cache_dir=tmp_path / "cache")
    assert result.status == "failed"
    assert result.summary == (
        'ValueError: THREADS=100 is not a whole number of warps '
        '(submission.py:9: `raise ValueError(f"THREADS={threads} is not a whole number of warps")`)'
    )
    # no compile_signature: each benchmark spec (less its seed) is its own config, and each fails alike
    assert [c.benchmarks for c in result.detail.configs] == [[0], [1], [2]]
    assert not any(c.ok for c in result.detail.configs)
    assert "ValueError" in (ws / "compile.log").read_text()


@needs_dsl
def test_compile_hook_that_hangs_times_out(tmp_path):
    target, ws = workspace(tmp_path, "hangs")
    result = run_compile(target, ws, cache_dir=tmp_path / "cache", timeout_s=3)
    assert result.status == "timed-out"
    assert result.summary == 'timed out after 3 s while compiling config 1 of 3 ({"size": 4096})'
    assert result.detail.compiling["signature"] == {"size": 4096}


@needs_dsl
def test_kernel_file_that_does_not_parse_fails(tmp_path):
    target, ws = workspace(tmp_path, "syntax")
    result = run_compile(target, ws, cache_dir=tmp_path / "cache")
    assert result.status == "failed"
    assert result.summary == "SyntaxError: expected ':' (submission.py:4: `def custom_kernel(data)`)"


def test_target_without_a_compile_hook_is_imported(tmp_path):
    target = load_target(HERE / "fixtures" / "axpy")
    ws = target.assemble(tmp_path / "ws", target.kernel_source())
    result = run_compile(target, ws, cache_dir=tmp_path / "cache")
    assert result.status == "passed"
    assert result.summary == "imported submission.py; no compile hook: the kernel compiles at its first call"


def test_compile_hook_needs_an_architecture(tmp_path):
    target, ws = workspace(tmp_path)
    target.arch = "any"
    with pytest.raises(JudgeError, match="field 'arch'"):
        run_compile(target, ws, cache_dir=tmp_path / "cache")


def test_workspace_without_the_kernel_file(tmp_path):
    target = load_target(FIXTURE)
    with pytest.raises(JudgeError, match="no kernel file 'submission.py'"):
        run_compile(target, tmp_path, cache_dir=tmp_path / "cache")


@needs_dsl
def test_compile_many_keeps_job_order_and_reports_progress(tmp_path):
    target, bad = workspace(tmp_path, "raises", name="bad")
    _, good = workspace(tmp_path, name="good")
    seen = []
    results = compile_many([(target, bad), (target, good)], cache_dir=tmp_path / "cache", workers=2,
                           progress=lambda done, total: seen.append((done, total)))
    assert [r.status for r in results] == ["failed", "passed"]
    assert seen == [(0, 2), (1, 2), (2, 2)]


# ---------------------------------------------------------------------------------------------------------
# The contest's CuTe DSL targets


@needs_dsl
@pytest.mark.parametrize("name", ["nvfp4_group_gemm", "fp8_group_gemm_sm90"])
def test_contest_target_base_compiles(tmp_path, name):
    path = KERNELS / name
    if not (path / "judge.toml").is_file():
        pytest.skip(f"kernels/{name} has no judge.toml yet")
    target = load_target(path)
    if not target.compile_entry:
        pytest.skip(f"kernels/{name} names no compile hook")
    result = run_compile(target, target.assemble(tmp_path / "ws", target.kernel_source()), cache_dir=tmp_path / "c")
    assert result.status == "passed", result.summary
    for config in result.detail.configs:
        for kernel in config.kernels:
            assert 1 <= kernel.registers <= 255
            assert kernel.smem_total is not None and kernel.smem_total <= 228 * KB
            assert kernel.occupancy.ctas_per_sm >= 1
