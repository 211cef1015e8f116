"""The GPU targets' layout checks (kernels/*/layout_checks.py) on the CPU: every check passes the bases and
the honest example proposals with its exact description, and small broken variants of the bases
(tests/kernels/nvfp4_mutants.py, FP8_MUTANTS below) fail the check meant to catch them with its exact
message. A tiny local runner stands in for judge's stage: import the target's files from a directory, call
each check with random.Random(SEED)."""

from __future__ import annotations

import importlib.util
import random
import shutil
from pathlib import Path

import pytest

from harness import use_dsl_arch
from nvfp4_mutants import EQUIVALENT, MUTANTS
from target_modules import load_from

pytestmark = pytest.mark.skipif(importlib.util.find_spec("cutlass") is None, reason="needs nvidia-cutlass-dsl")

ROOT = Path(__file__).resolve().parents[2]
NVFP4, FP8 = "nvfp4_group_gemm", "fp8_group_gemm_sm90"
ARCH = {NVFP4: "sm_100a", FP8: "sm_90a"}
SEED = 1


def run_checks(directory: Path, arch: str, monkeypatch) -> dict[str, tuple[str, str]]:
    """{check name: ("passed", description) or ("failed", message)}; any other exception propagates."""
    use_dsl_arch(monkeypatch, arch)
    kernel = load_from(directory, "submission")
    reference = load_from(directory, "reference")
    checks = load_from(directory, "layout_checks")
    results = {}
    for check in checks.CHECKS:
        try:
            results[check.__name__] = ("passed", check(kernel, reference, random.Random(SEED)))
        except AssertionError as error:
            results[check.__name__] = ("failed", str(error))
    return results


def copy_with(tmp_path: Path, target: str, source: str) -> Path:
    """The target directory (layout_checks.py included) with submission.py replaced by `source`."""
    copy = tmp_path / target
    shutil.copytree(ROOT / "kernels" / target, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "submission.py").write_text(source)
    return copy


def mutated(tmp_path: Path, target: str, old: str, new: str) -> Path:
    base = (ROOT / "kernels" / target / "submission.py").read_text()
    assert base.count(old) == 1, "the mutant's old text must occur exactly once in the base"
    return copy_with(tmp_path, target, base.replace(old, new))


# ---- the bases --------------------------------------------------------------------------------------------

BASE_DESCRIPTIONS = {
    NVFP4: {
        "check_scale_factor_layout":
            "scale-factor layout (GroupedBlockScaledGemm._scales) equals reference.to_blocked at every (row, K) "
            "of 27 shapes (M 1-700, K 64-7168)",
        "check_tensor_memory_columns":
            "tensor memory: accumulator 0-127, SFA 128-143, SFB 144-159 in 256 allocated columns (tile 128x128x256, "
            "1 accumulator stage(s)); 2 other tile/stage configurations also fit",
        "check_launch_plan_coverage":
            "launch plan covers every output element exactly once: 25 problems, 298 groups (empty, 1-row, N tails, "
            "up to 64 groups), 4 cluster shapes",
        "check_launch_arguments":
            "custom_kernel's launch replayed on the CPU for groups 1x128x256, 129x160x512, 0x96x256, 72x256x256: "
            "sizes, pointers and spans in bounds, 7 CTAs cover C exactly once, every A/B FP4 code (nibble order as "
            "CuTe unpacks it), SFA/SFB byte and C element the kernel's views address equals the reference's",
    },
    FP8: {
        "check_tile_scheduler_coverage":
            "tile scheduler (count_tiles, locate) covers every element of C exactly once, inside its group: "
            "28 problems, 373 groups (empty, 1-row, N tails, up to 64 groups)",
        "check_operand_layouts":
            "global views of A, B, C, sa, sb and offs from __call__ (M = [3, 0, 70], N = 24, K = 48) address "
            "exactly the reference's elements; grid and block as planned",
    },
}


@pytest.mark.parametrize("target", [NVFP4, FP8])
def test_every_check_passes_the_base(target, monkeypatch):
    results = run_checks(ROOT / "kernels" / target, ARCH[target], monkeypatch)
    assert results == {name: ("passed", text) for name, text in BASE_DESCRIPTIONS[target].items()}


def test_checks_are_deterministic_given_the_seed(monkeypatch):
    first = run_checks(ROOT / "kernels" / FP8, ARCH[FP8], monkeypatch)
    assert run_checks(ROOT / "kernels" / FP8, ARCH[FP8], monkeypatch) == first


# ---- NVFP4 mutants ----------------------------------------------------------------------------------------

# mutant name -> {check: exact message} for every check it fails; the others pass.
NVFP4_CAUGHT = {
    "scale-factor column offset shifted": {
        "check_tensor_memory_columns":
            "tile 128x128x256, 1 accumulator stage(s): SFA columns 128-143 overlap SFB, which starts at column 136",
    },
    "scale quadrants swapped": {
        "check_scale_factor_layout":
            "127x256 operand: the kernel's scale layout puts the scale of (row 32, K 0) at byte 8, to_blocked at "
            "byte 4",
        "check_launch_arguments":
            "group 0: SFB[32, 1] reads byte 64 through the kernel's view, the reference's scale is byte 56",
    },
    "scale atoms ordered rows first": {
        "check_scale_factor_layout":
            "129x320 operand: the kernel's scale layout puts the scale of (row 0, K 64) at byte 1024, to_blocked at "
            "byte 512",
        "check_launch_arguments":
            "group 1: SFA[0, 5] reads byte 64 through the kernel's view, the reference's scale is byte 56",
    },
    "a tile missed by the launch plan": {
        "check_launch_plan_coverage":
            "plan_launch([(1, 32, 256, 1), (0, 128, 256, 1), (129, 160, 512, 1), (128, 96, 256, 1), "
            "(700, 1024, 768, 1), (255, 160, 256, 1)], defaults): group 0 of 6 (M=1, N=32): output element (0, 0) "
            "is covered 0 times by 128x128 tiles (55 CTAs launched)",
        "check_launch_arguments":
            "custom_kernel's cta_work: group 0 of 4 (M=1, N=128): output element (0, 0) is covered 0 times by "
            "128x128 tiles (4 CTAs launched)",
    },
    "nibbles swapped": {
        "check_launch_arguments":
            "group 0: A[0, 0] reads e2m1 code 0x8 (-0.0) through the kernel's view, the reference unpacks 1.5 "
            "(even K = low nibble)",
    },
    "unswizzled scales passed": {
        "check_launch_arguments":
            "group 0: the kernel's SFA view spans 2048 bytes from offset 0 of sfasfb_tensors[0][0]'s 16-byte buffer",
    },
    "FP4 row stride in bytes": {
        "check_launch_arguments":
            "group 0: B[1, 0] reads e2m1 code 0x0 (0.0) through the kernel's view, the reference unpacks -1.5 "
            "(even K = low nibble)",
    },
}


def test_every_mutant_has_an_expected_verdict():
    assert [name for name, _old, _new in MUTANTS] == list(NVFP4_CAUGHT)


@pytest.mark.parametrize("name,old,new", MUTANTS, ids=[m[0] for m in MUTANTS])
def test_nvfp4_mutant_is_caught(name, old, new, tmp_path, monkeypatch):
    results = run_checks(mutated(tmp_path, NVFP4, old, new), ARCH[NVFP4], monkeypatch)
    failed = {check: message for check, (status, message) in results.items() if status == "failed"}
    assert failed == NVFP4_CAUGHT[name]


def test_a_buffer_across_two_readable_mappings_is_readable():
    """custom_kernel's own buffers are read through the kernel's views where they lie in readable memory. One that
    straddled two mappings counted as unreadable: the nibble-swap mutant's repacked A (33,024 bytes) now and then
    failed as "points outside every input buffer and readable memory" in the whole suite (2026-11-29)."""
    import ctypes
    import mmap

    checks = load_from(ROOT / "kernels" / NVFP4, "layout_checks")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype, libc.mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                                              ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    page = mmap.PAGESIZE
    start = libc.mmap(None, 3 * page, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    try:
        assert libc.mprotect(start + page, page, mmap.PROT_READ) == 0  # two mappings, both readable
        assert libc.mprotect(start + 2 * page, page, 0) == 0  # then one that is not (PROT_NONE)
        assert checks._readable(start + page - 64, 128)
        assert not checks._readable(start + 2 * page - 64, 128)
    finally:
        libc.munmap(start, 3 * page)


@pytest.mark.parametrize("name,old,new", EQUIVALENT, ids=[m[0] for m in EQUIVALENT])
def test_nvfp4_equivalent_rewrite_passes(name, old, new, tmp_path, monkeypatch):
    results = run_checks(mutated(tmp_path, NVFP4, old, new), ARCH[NVFP4], monkeypatch)
    assert {status for status, _text in results.values()} == {"passed"}


# ---- FP8 mutants ------------------------------------------------------------------------------------------

FP8_MUTANTS = [
    ("tile count off by one",
     "            total += (end - start + self.tile_m - 1) // self.tile_m * n_tiles\n",
     "            total += (end - start) // self.tile_m * n_tiles\n"),
    ("last row of a group dropped",
     "                    rows = cutlass.min(end - row0, self.tile_m)\n",
     "                    rows = cutlass.min(end - row0 - 1, self.tile_m)\n"),
    ("sb transposed",
     "cute.make_layout((n, num_groups), stride=(1, n))",
     "cute.make_layout((n, num_groups), stride=(num_groups, 1))"),
    ("B groups spaced K x K", "stride=(k, 1, n * k)", "stride=(k, 1, k * k)"),
    ("C rows spaced K",
     "mC = cute.make_tensor(c_ptr, cute.make_layout((m_total, n), stride=(n, 1)))",
     "mC = cute.make_tensor(c_ptr, cute.make_layout((m_total, n), stride=(k, 1)))"),
]

FP8_CAUGHT = {
    "tile count off by one": {
        "check_tile_scheduler_coverage":
            "M = [1, 64, 0, 130], N = 128: C[1, 0] (group 1) is covered 0 times by the 1 tiles of 128x128",
    },
    "last row of a group dropped": {
        "check_tile_scheduler_coverage":
            "M = [1, 64, 0, 130], N = 128: tile 0 (group 0, from row 0) covers 0 rows; a tile covers 1 to 128",
    },
    "sb transposed": {
        "check_operand_layouts": "the kernel's mSB view reads 0x3F3746FC at [1, 0], where sb[0, 1] holds 0x3F09ED89",
    },
    "B groups spaced K x K": {
        "check_operand_layouts": "the kernel's B view reads 0x38 at [0, 0, 1], where b[1, 0, 0] holds 0x2B",
    },
    "C rows spaced K": {
        "check_operand_layouts": "the kernel's mC view reads 0x30 at [1, 0], where c[1, 0] holds 0x18",
    },
}


@pytest.mark.parametrize("name,old,new", FP8_MUTANTS, ids=[m[0] for m in FP8_MUTANTS])
def test_fp8_mutant_is_caught(name, old, new, tmp_path, monkeypatch):
    results = run_checks(mutated(tmp_path, FP8, old, new), ARCH[FP8], monkeypatch)
    failed = {check: message for check, (status, message) in results.items() if status == "failed"}
    assert failed == FP8_CAUGHT[name]


# ---- honest example proposals -----------------------------------------------------------------------------

HONEST = [(NVFP4, "pipeline-stages-3"), (NVFP4, "tma-store-epilogue"), (NVFP4, "wide-n-tile"),
          (FP8, "stages-6"), (FP8, "tile-m-64"), (FP8, "epilogue-paired-stores")]


@pytest.mark.parametrize("target,proposal", HONEST, ids=[p for _t, p in HONEST])
def test_honest_proposals_pass_every_check(target, proposal, tmp_path, monkeypatch):
    from judge.stages.patch import apply_patch

    base = (ROOT / "kernels" / target / "submission.py").read_text()
    diff = (ROOT / "proposals" / target / proposal / "patch.diff").read_text()
    results = run_checks(copy_with(tmp_path, target, apply_patch(base, diff, "submission.py")), ARCH[target],
                         monkeypatch)
    assert {check: status for check, (status, _text) in results.items()} == {
        check: "passed" for check in BASE_DESCRIPTIONS[target]}


# ---- the FP8 contest's later rounds: each proposal on its round's base (the winners applied in turn) ----------

CONTEST_WINNERS = ["epilogue-paired-stores", "round-2/epilogue-smem-rows"]  # rounds 1 and 2
LATER = [("round-2", "cluster-1x2-multicast-a"), ("round-2", "stages-6-paired"), ("round-2", "promote-every-2"),
         ("round-3", "cluster-1x2-multicast-a-v2"), ("round-3", "cluster-1x4-multicast-a"),
         ("round-3", "group-table-smem-patch"), ("round-3", "stages-5")]


def contest_base(round_folder: str) -> str:
    from judge.stages.patch import apply_patch

    source = (ROOT / "kernels" / FP8 / "submission.py").read_text()
    for winner in CONTEST_WINNERS[:int(round_folder.split("-")[1]) - 1]:
        source = apply_patch(source, (ROOT / "proposals" / FP8 / winner / "patch.diff").read_text(), "submission.py")
    return source


@pytest.mark.parametrize("folder,proposal", LATER, ids=[p for _f, p in LATER])
def test_later_fp8_contest_proposals_pass_every_check(folder, proposal, tmp_path, monkeypatch):
    """Round 2's 1x2 multicast kernel failed operand-layouts when it asserted 1-CTA clusters; every proposal of
    rounds 2 and 3, on its round's base, passes the checks now (round 3's cluster kernels won and placed second)."""
    from judge.stages.patch import apply_patch

    diff = (ROOT / "proposals" / FP8 / folder / proposal / "patch.diff").read_text()
    source = apply_patch(contest_base(folder), diff, "submission.py")
    results = run_checks(copy_with(tmp_path, FP8, source), ARCH[FP8], monkeypatch)
    assert {check: status for check, (status, _text) in results.items()} == {
        check: "passed" for check in BASE_DESCRIPTIONS[FP8]}
