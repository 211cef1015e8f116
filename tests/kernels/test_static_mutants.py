"""Broken variants of the GPU targets' bases, compiled for real on the CPU: each is eliminated by the static
stage with the rule and the PTX line, the bases and the honest example proposals pass, and in a round the
mutant's verdict is static-check-failed before any GPU stage."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from judge import actions
from judge.stages.compile.stage import run_compile
from judge.ledger import Ledger
from judge.stages.patch import apply_patch
from judge.rounds import Settings, run_round
from judge.stages.static.stage import run_static
from judge.targets import load_target
from nvfp4_mutants import MUTANTS

pytestmark = pytest.mark.skipif(importlib.util.find_spec("cutlass") is None, reason="needs nvidia-cutlass-dsl")

ROOT = Path(__file__).resolve().parents[2]
NVFP4, FP8 = "nvfp4_group_gemm", "fp8_group_gemm_sm90"
FENCE = "            cute.arch.fence_view_async_tmem_load()  # tcgen05.ld is asynchronous: wait before reading\n"

# (target, name, old text of submission.py, new text, the static stage's summary)
PTX_MUTANTS = [
    (NVFP4, "tmem-load-fence-removed", FENCE, "",
     "tmem-load-waited: PTX line 650: `cvt.rn.f16x2.f32` reads %r286, which the tcgen05.ld at line 632 fills, "
     "before any tcgen05.wait::ld: it reads a register the load may not have written yet"),
    (NVFP4, "expect-tx-without-sfb", "            + cute.size_in_bytes(SF_DTYPE, sfb_smem)\n        )", "        )",
     "expect-tx-bytes: PTX line 394: expect_tx of 34816 bytes per stage, where the copies of this config bring "
     "36864 (the target's formula over cluster_shape_mn=[1, 1], epilogue_store=simt, epilogue_tile_n=32, "
     "mma_tiler_mnk=[128, 128, 256], num_ab_stages=1, num_acc_stages=1)"),
    (FP8, "wgmma-wait-removed", "                    cute.nvgpu.warpgroup.wait_group(0)\n", "",
     "wgmma-waited: PTX line 590: `add.f32` reads accumulator %r443 of the wgmma.mma_async at line 576 before a "
     "wgmma.wait_group that covers it (committed with wgmma.commit_group): the tensor core may still be writing it"),
    (FP8, "wgmma-fence-removed", "                    cute.nvgpu.warpgroup.fence()\n", "",
     "wgmma-waited: PTX line 550: wgmma.mma_async without a wgmma.fence before the first one: the tensor core may "
     "read them before those writes land"),
    (FP8, "expect-tx-plus-1024", "        self.tma_bytes = cute.size_in_bytes(", "        self.tma_bytes = 1024 + cute.size_in_bytes(",
     "expect-tx-bytes: PTX line 223: expect_tx of 33792 bytes per stage, where the copies of this config bring "
     "32768 (the target's formula over cluster_mn=[1, 1], epilogue=direct, stages=4, tile_mnk=[128, 128, 128])"),
]
PASSED = {NVFP4: "4 rules on 1 config and 4 layout checks passed",
          FP8: "3 rules on 1 config and 2 layout checks passed"}
# The layout mutants (tests/kernels/nvfp4_mutants.py) through the stage, in its confined child: the check
# that catches each one first. Their messages are asserted in tests/kernels/test_layout_checks.py.
LAYOUT_CATCHES = {
    "scale-factor column offset shifted": "tensor-memory-columns",
    "scale quadrants swapped": "scale-factor-layout",
    "scale atoms ordered rows first": "scale-factor-layout",
    "a tile missed by the launch plan": "launch-plan-coverage",
    "nibbles swapped": "launch-arguments",
    "unswizzled scales passed": "launch-arguments",
    "FP4 row stride in bytes": "launch-arguments",
}


def static_stage(tmp_path: Path, name: str, source: str, target_name: str):
    target = load_target(ROOT / "kernels" / target_name)
    workspace = target.assemble(tmp_path / name, source)
    compiled = run_compile(target, workspace, cache_dir=tmp_path / "cache")
    assert compiled.passed, compiled.summary
    return run_static(target, workspace, compiled)


@pytest.mark.parametrize("target_name,name,old,new,summary", PTX_MUTANTS, ids=[m[1] for m in PTX_MUTANTS])
def test_each_mutant_is_eliminated_with_its_rule_and_line(tmp_path, target_name, name, old, new, summary):
    base = (ROOT / "kernels" / target_name / "submission.py").read_text()
    assert base.count(old) == (2 if old == FENCE else 1)
    result = static_stage(tmp_path, name, base.replace(old, new), target_name)
    assert (result.status, result.summary) == ("failed", summary)


@pytest.mark.parametrize("name,old,new", MUTANTS, ids=[m[0] for m in MUTANTS])
def test_each_layout_mutant_is_eliminated_by_its_check(tmp_path, name, old, new):
    base = (ROOT / "kernels" / NVFP4 / "submission.py").read_text()
    result = static_stage(tmp_path, name.replace(" ", "-"), base.replace(old, new), NVFP4)
    assert result.status == "failed"
    assert result.summary.startswith(f"layout check {LAYOUT_CATCHES[name]}: "), result.summary
    statuses = {c.name: c.status for c in result.detail.layout_checks}
    assert statuses[LAYOUT_CATCHES[name]] == "failed"


@pytest.mark.parametrize("target_name", [NVFP4, FP8])
def test_the_base_and_the_honest_examples_pass(tmp_path, target_name):
    target = load_target(ROOT / "kernels" / target_name)
    base = target.kernel_source()
    sources = {"base": base}
    for proposal in sorted((ROOT / "proposals" / target_name).iterdir()):
        patch = proposal / "patch.diff"
        if patch.is_file() and proposal.name not in ("tile-64-rows", "cluster-2x1-multicast-b"):  # compile errors
            sources[proposal.name] = apply_patch(base, patch.read_text(), "submission.py", proposal.name)
    results = {name: static_stage(tmp_path, name, source, target_name) for name, source in sources.items()}
    assert {name: (r.status, r.summary) for name, r in results.items()} == {
        name: ("passed", PASSED[target_name]) for name in sources}
    rules = results["base"].detail.configs[0].rules
    assert [r.rule for r in rules] == list(target.static.rules)


def test_in_a_round_a_mutant_is_static_check_failed_before_the_gpu(tmp_path):
    base = (ROOT / "kernels" / NVFP4 / "submission.py").read_text()
    proposal = tmp_path / "proposals" / "drop-the-tmem-fence"
    proposal.mkdir(parents=True)
    (proposal / "proposal.toml").write_text(
        'id = "drop-the-tmem-fence"\ntitle = "No fence after tensor-memory loads"\nauthor = "contestant-9"\n'
        'round = 1\ntarget = "nvfp4_group_gemm"\n\n[claim]\nlow = 1.01\nhigh = 1.05\n')
    (proposal / "pitch.md").write_text("# No fence\n\nThe fence after tcgen05.ld costs a few cycles per tile.\n")
    import difflib
    (proposal / "patch.diff").write_text("".join(difflib.unified_diff(
        base.splitlines(True), base.replace(FENCE, "").splitlines(True), "a/submission.py", "b/submission.py")))
    ledger = Ledger(tmp_path / "ledger.db")
    actions.submit(ledger, actions.load_submissions([str(proposal)], None), ROOT / "kernels")
    settings = Settings(kernels_dir=ROOT / "kernels", work_dir=tmp_path / "work", cache_dir=tmp_path / "cache")
    [summary] = run_round(ledger, 1, settings=settings)
    [verdict] = summary.verdicts
    assert (verdict.outcome, verdict.reason) == ("static-check-failed", PTX_MUTANTS[0][4])
    evaluation = ledger.latest_evaluation(ledger.round_row(NVFP4, 1)["id"], ledger.latest_revision(
        "drop-the-tmem-fence")["id"])
    assert [s.stage for s in ledger.stage_results(evaluation["id"])] == ["patch", "screen", "compile", "static"]
