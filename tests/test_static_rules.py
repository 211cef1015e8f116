"""judge/stages/static/rules.py and judge/stages/static/ptx.py on small PTX: each rule's pass line and its failure with the PTX line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from harness import judge_toml_error, replacing

from judge.stages.static import ptx
from judge.formulas import check_formula
from judge.stages.static.rules import RULES, Code, evaluate
from judge.targets import load_target

ROOT = Path(__file__).resolve().parents[1]


def code(body: str, tmp_path: Path, arch: str = "sm_100a") -> Code:
    text = f"""//
.version 8.8
.target {arch}
.address_size 64

.visible .entry kern(
\t.param .u64 kern_param_0
)
{{
\t.reg .b32 \t%r<600>;
\t.reg .b64 \t%rd<200>;
\t// the body starts on line 13
{body}
\tret;
}}
"""
    path = tmp_path / "kernel.ptx"
    path.write_text(text)
    return Code.read(path, arch)


LOAD = "\ttcgen05.ld.sync.aligned.32x32b.x2.b32 {%r10, %r11}, [%r5];\n"
PACK = "\tmov.b64 \t%rd7, {%r10, %r11};\n"
WAIT = "\ttcgen05.wait::ld.sync.aligned;\n"
UNPACK = "\tmov.b64 \t{%r12, %r13}, %rd7;\n"
USE = "\tcvt.rn.f16x2.f32 \t%r20, %r13, %r12;\n"


def test_ptx_reads_instructions_in_order_with_their_lines(tmp_path):
    parsed = code(LOAD + PACK + WAIT + UNPACK + USE, tmp_path)
    [kern] = parsed.functions
    assert (kern.name, kern.entry) == ("kern", True)
    assert [(i.line, i.opcode) for i in kern.instructions] == [
        (13, "tcgen05.ld.sync.aligned.32x32b.x2.b32"), (14, "mov.b64"), (15, "tcgen05.wait::ld.sync.aligned"),
        (16, "mov.b64"), (17, "cvt.rn.f16x2.f32"), (19, "ret")]
    load, pack = kern.instructions[:2]
    assert (load.writes, load.reads) == (["%r10", "%r11"], ["%r5"])
    assert (pack.writes, pack.reads) == (["%rd7"], ["%r10", "%r11"])


def test_inline_asm_blocks_and_split_instructions_are_read(tmp_path):
    body = ("\t{\n\t.reg .pred P1;\n\tLAB_WAIT:\n\tmbarrier.try_wait.parity.shared.b64 P1, [%r4], %r5, 100;\n"
            "\t@P1 bra.uni DONE;\n\tDONE:\n\t}\n\tmov.b32 %r6,\n\t36864;\n")
    [kern] = code(body, tmp_path).functions
    assert [(i.line, i.opcode) for i in kern.instructions] == [
        (16, "mbarrier.try_wait.parity.shared.b64"), (17, "bra.uni"), (20, "mov.b32"), (23, "ret")]
    assert kern.constant("%r6") == 36864


def test_tmem_load_waited_passes_when_packing_moves_precede_the_wait(tmp_path):
    result = RULES["tmem-load-waited"](code(LOAD + PACK + WAIT + UNPACK + USE, tmp_path), {}, {})
    assert result.passed
    assert result.message == "1 tcgen05.ld, each waited for (tcgen05.wait::ld) before its registers are read"


def test_tmem_load_read_before_its_wait_fails_at_the_reading_line(tmp_path):
    result = RULES["tmem-load-waited"](code(LOAD + PACK + UNPACK + USE + WAIT, tmp_path), {}, {})
    assert not result.passed
    assert result.line == 16
    assert result.message == ("PTX line 16: `cvt.rn.f16x2.f32` reads %r13, which the tcgen05.ld at line 13 fills, "
                              "before any tcgen05.wait::ld: it reads a register the load may not have written yet")


WGMMA = "\twgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%r1, %r2}, %rd1, %rd2, p, 1, 1;\n"
FENCE, COMMIT = "\twgmma.fence.sync.aligned;\n", "\twgmma.commit_group.sync.aligned;\n"
WAIT0 = "\twgmma.wait_group.sync.aligned 0;\n"
EPILOGUE = "\tadd.f32 \t%r3, %r1, %r2;\n"


@pytest.mark.parametrize("body,line,message", [
    (FENCE + WGMMA + COMMIT + WAIT0 + EPILOGUE, None,
     "1 wgmma.mma_async, each fenced, committed, and waited for before its accumulators are read"),
    (WGMMA + COMMIT + WAIT0 + EPILOGUE, 13,
     "PTX line 13: wgmma.mma_async without a wgmma.fence before the first one: the tensor core may read them "
     "before those writes land"),
    (FENCE + WGMMA + COMMIT + EPILOGUE + WAIT0, 16,
     "PTX line 16: `add.f32` reads accumulator %r1 of the wgmma.mma_async at line 14 before a wgmma.wait_group "
     "that covers it (committed with wgmma.commit_group): the tensor core may still be writing it"),
    (FENCE + WGMMA + WAIT0 + EPILOGUE, 16,  # never committed: the wait does not cover it
     "PTX line 16: `add.f32` reads accumulator %r1 of the wgmma.mma_async at line 14 before a wgmma.wait_group "
     "that covers it (committed with wgmma.commit_group): the tensor core may still be writing it"),
    (FENCE + WGMMA + COMMIT + WAIT0 + "\tmov.f32 \t%r1, 0f00000000;\n" + WGMMA, 18,
     "PTX line 18: wgmma.mma_async without a wgmma.fence after other instructions used its accumulators: the "
     "tensor core may read them before those writes land"),
])
def test_wgmma_waited(tmp_path, body, line, message):
    result = RULES["wgmma-waited"](code(body, tmp_path, "sm_90a"), {}, {})
    assert (result.passed, result.line, result.message) == (line is None, line, message)


TX = "\tmov.b32 \t%r176, 36864;\n\tmbarrier.arrive.expect_tx.shared.b64 %rd94, [%r222], %r176;\n"
TILE = {"mma_tiler_mnk": [128, 128, 256], "num_ab_stages": 1}
FORMULA = {"bytes": "(mma_tiler_mnk[0] + mma_tiler_mnk[1]) * mma_tiler_mnk[2] * 9 // 16"}


def test_expect_tx_bytes_equal_to_the_formula_pass(tmp_path):
    result = RULES["expect-tx-bytes"](code(TX, tmp_path), FORMULA, TILE)
    assert (result.passed, result.message) == (True, "1 expect_tx, each 36864 bytes as the target's formula gives")


def test_expect_tx_bytes_off_fail_with_both_numbers(tmp_path):
    result = RULES["expect-tx-bytes"](code(TX.replace("36864", "34816"), tmp_path), FORMULA, TILE)
    assert (result.passed, result.line) == (False, 14)
    assert result.message == ("PTX line 14: expect_tx of 34816 bytes per stage, where the copies of this config bring "
                              "36864 (the target's formula over mma_tiler_mnk=[128, 128, 256], num_ab_stages=1)")


def test_expect_tx_bytes_computed_at_run_time_fail(tmp_path):
    body = "\tadd.s32 \t%r176, %r1, %r2;\n\tmbarrier.arrive.expect_tx.shared.b64 %rd94, [%r222], %r176;\n"
    result = RULES["expect-tx-bytes"](code(body, tmp_path), FORMULA, TILE)
    assert result.message == ("PTX line 14: the expect_tx byte count %r176 is computed at run time; this target's "
                              "rule needs a compile-time constant to compare")


ALLOC = "\tmov.b32 \t%r169, 256;\n\ttcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 \t[%r17], %r169;\n"
RELINQUISH = "\ttcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;\n"
FREE = "\tmov.b32 \t%r515, 256;\n\ttcgen05.dealloc.cta_group::1.sync.aligned.b32 \t%r24, %r515;\n"


@pytest.mark.parametrize("body,message", [
    (ALLOC + RELINQUISH + FREE, "tensor memory allocated, relinquished and freed alike in 1 kernel"),
    (ALLOC + RELINQUISH, "PTX line 14: tensor memory allocated and never deallocated (tcgen05.dealloc)"),
    (ALLOC + FREE, "PTX line 14: tensor memory allocated and never relinquished (tcgen05.relinquish_alloc_permit)"),
    (ALLOC.replace("256", "96") + RELINQUISH + FREE.replace("256", "96"),
     "PTX line 14: `alloc` of 96 columns: tensor memory is allocated in constant powers of two from 32 to 512"),
    (ALLOC + RELINQUISH + FREE.replace("256", "128"), "PTX line 17: deallocates [128] columns, allocated [256]"),
])
def test_tmem_alloc_paired(tmp_path, body, message):
    result = RULES["tmem-alloc-paired"](code(body, tmp_path), {}, {})
    assert (result.passed, result.message) == (message.startswith("tensor memory allocated,"), message)


def test_formulas_take_arithmetic_over_knobs_only():
    assert evaluate("(m[0] + m[1]) * k // 2 % 7", {"m": [128, 64], "k": 256}) == (192 * 256 // 2) % 7
    assert check_formula("__import__('os').system('x')") == (
        "'__import__('os').system('x')': only + - * // %, integers and the config's knobs are allowed")
    assert check_formula("tile_m *") == "'tile_m *' is not a formula"
    with pytest.raises(ValueError, match=r"'tile_q \* 2': the config has no knob 'tile_q' \(it has k, m\)"):
        evaluate("tile_q * 2", {"m": [1], "k": 2})


@pytest.fixture
def nvfp4_copy(tmp_path):
    dest = tmp_path / "nvfp4_group_gemm"
    shutil.copytree(ROOT / "kernels" / "nvfp4_group_gemm", dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.mark.parametrize("old,new,message", [
    ('rules = ["tmem-load-waited"', 'rules = ["tmem-load-waitd"',
     "field 'static.rules': unknown rule 'tmem-load-waitd' (known: expect-tx-bytes, ptxas-clean, tmem-alloc-paired, "
     "tmem-load-waited, wgmma-waited)"),
    ("[static.expect-tx-bytes]\n", "[static.expect-tx-bytes]\nbyte = 3\n",
     "field 'static.expect-tx-bytes.byte': rule 'expect-tx-bytes' takes no such parameter"),
    ('bytes = "(mma_tiler_mnk[0]', 'bytez = "(mma_tiler_mnk[0]',
     "field 'static.expect-tx-bytes.bytez': rule 'expect-tx-bytes' takes no such parameter"),
    ('bytes = "(mma_tiler_mnk[0] + ', 'bytes = "open(1) + (mma_tiler_mnk[0] + ', "field 'static.expect-tx-bytes.bytes': "),
    ('layout_checks = "layout_checks.py"', 'layout_checks = "nowhere.py"',
     "field 'static.layout_checks': 'nowhere.py' is not a file in "),
])
def test_static_table_errors_name_the_field(nvfp4_copy, old, new, message):
    assert judge_toml_error(nvfp4_copy, replacing(old, new)).startswith(message)


def test_the_gpu_targets_declare_their_rules():
    nvfp4 = load_target(ROOT / "kernels" / "nvfp4_group_gemm").static
    fp8 = load_target(ROOT / "kernels" / "fp8_group_gemm_sm90").static
    assert list(nvfp4.rules) == ["tmem-load-waited", "tmem-alloc-paired", "expect-tx-bytes", "ptxas-clean"]
    assert list(fp8.rules) == ["wgmma-waited", "expect-tx-bytes", "ptxas-clean"]
    assert evaluate(nvfp4.rules["expect-tx-bytes"]["bytes"], {"mma_tiler_mnk": [128, 128, 256]}) == 36864
    assert evaluate(nvfp4.rules["expect-tx-bytes"]["bytes"], {"mma_tiler_mnk": [128, 256, 256]}) == 55296
    assert evaluate(fp8.rules["expect-tx-bytes"]["bytes"], {"tile_mnk": [128, 128, 128]}) == 32768


def test_a_kernel_cannot_write_outside_its_workspace_from_the_layout_checks_child(tmp_path):
    """The layout checks import contestant code: its child is confined like every runner's."""
    from judge.stages.details import CompileDetail
    from judge.stages.result import StageResult
    from judge.stages.static.stage import run_static

    target_dir = tmp_path / "vecadd_cpu"
    shutil.copytree(ROOT / "kernels" / "vecadd_cpu", target_dir, ignore=shutil.ignore_patterns("__pycache__"))
    (target_dir / "layout_checks.py").write_text(
        "def check_imports(kernel, reference, rng):\n    return 'the kernel imports'\n\nCHECKS = [check_imports]\n")
    toml = target_dir / "judge.toml"
    toml.write_text(toml.read_text() + '\n[static]\nlayout_checks = "layout_checks.py"\n')
    target = load_target(target_dir)
    outside = tmp_path / "ledger.db"
    hostile = f"open({str(outside)!r}, 'w').write('forged')\n" + target.kernel_source()
    workspace = target.assemble(tmp_path / "work" / "hostile", hostile)
    result = run_static(target, workspace, StageResult("compile", "passed", "imported", 0.1, CompileDetail(configs=[])))
    assert not outside.exists()
    assert result.status == "failed"
    assert result.summary.startswith("layout check (import): the kernel does not import: PermissionError: ")
    honest = run_static(target, target.assemble(tmp_path / "work" / "honest", target.kernel_source()),
                        StageResult("compile", "passed", "imported", 0.1, CompileDetail(configs=[])))
    assert (honest.status, honest.summary) == ("passed", "1 layout check passed")


def test_a_ptxas_this_machine_cannot_use_is_no_finding(tmp_path, monkeypatch):
    """On the H100 machine the system ptxas (PTX ISA 9.0) cannot read CuTe DSL 4.8's PTX 9.4: the rule did not
    run there, which must not eliminate a candidate whose cubin the DSL's own assembler built."""
    from judge.stages.compile import resources

    old = tmp_path / "ptxas"
    old.write_text("#!/bin/sh\necho \"ptxas $3, line 9; fatal   : Unsupported .version 9.4; current version is '9.0'\" >&2\n"
                   "exit 255\n")
    old.chmod(0o755)
    monkeypatch.setattr(resources, "find_tool", lambda name: str(old) if name == "ptxas" else None)
    result = RULES["ptxas-clean"](code("", tmp_path, "sm_90a"), {}, {})
    assert (result.passed, result.ran) == (True, False)
    assert result.message.startswith("ptxas failed on kernel.ptx: ptxas ")
    assert result.message.endswith("fatal   : Unsupported .version 9.4; current version is '9.0'")
    broken = tmp_path / "ptxas-syntax"
    broken.write_text("#!/bin/sh\necho \"ptxas $3, line 14; error   : Unknown symbol '%r9999'\" >&2\nexit 255\n")
    broken.chmod(0o755)
    monkeypatch.setattr(resources, "find_tool", lambda name: str(broken) if name == "ptxas" else None)
    failed = RULES["ptxas-clean"](code("", tmp_path, "sm_90a"), {}, {})
    assert (failed.passed, failed.ran) == (False, None)  # any other assembler failure is the candidate's
    assert failed.message.endswith("error   : Unknown symbol '%r9999'")
    monkeypatch.setattr(resources, "find_tool", lambda name: None)
    missing = RULES["ptxas-clean"](code("", tmp_path, "sm_90a"), {}, {})
    assert (missing.passed, missing.ran, missing.message) == (True, False, "ptxas not found (pip install nvidia-cuda-nvcc)")
