"""The Quick start's round, for real: the NVFP4 example proposals through every stage this machine has.

Compiles run for sm_100a on the CPU; where no B200 is present the GPU stages must say so, not pretend.
"""

import importlib.util
from pathlib import Path

import pytest

from judge import actions
from judge.ledger import Ledger
from judge.report import render_round
from judge.rounds import Settings, run_round

ROOT = Path(__file__).resolve().parents[1]
KB = 1024

pytestmark = pytest.mark.skipif(importlib.util.find_spec("cutlass") is None, reason="needs nvidia-cutlass-dsl")


def summary_round_id(ledger: Ledger) -> int:
    return ledger.round_row("nvfp4_group_gemm", 1)["id"]


def test_round_one_of_the_nvfp4_examples(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative work and cache directories, as `judge run` has them by default
    ledger = Ledger(tmp_path / "ledger.db")
    items = actions.load_submissions([str(ROOT / "proposals" / "nvfp4_group_gemm")], None)
    actions.submit(ledger, items, ROOT / "kernels")
    settings = Settings(kernels_dir=ROOT / "kernels", work_dir=Path("work"), cache_dir=Path(".judge-cache"))
    [summary] = run_round(ledger, 1, settings=settings)

    verdicts = {v.proposal_id: (v.outcome, v.reason) for v in summary.verdicts}
    assert summary.pitches == ["warp-specialization"]
    assert verdicts["tile-64-rows"] == (
        "compile-error",
        "DSLUserCodeError: expects the M-mode to be 128, but got 64 (submission.py:181: `op = tcgen05.MmaMXF4NVF4Op(`)",
    )
    others = {p: verdicts[p] for p in ("pipeline-stages-3", "tma-store-epilogue", "wide-n-tile")}
    assert others == {p: ("not-run", "needs sm_100, this machine has none") for p in others}
    assert summary.winner is None
    # Every compiled kernel went through the target's static rules, on this CPU-only machine.
    static = {}
    for evaluation in ledger.evaluations(summary_round_id(ledger)):
        stages = {s.stage: s for s in ledger.stage_results(evaluation["id"])}
        if "static" in stages:
            static[evaluation["revision_id"]] = (stages["static"].status, stages["static"].summary)
    assert sorted(static.values()) == [("passed", "4 rules on 1 config and 4 layout checks passed")] * 4
    # ... and the scorecard says which rules and checks ran, for the base and each proposal.
    report = render_round(ledger, 1, tmp_path / "reports").read_text().splitlines()
    rules = ("rules: tmem-load-waited passed, tmem-alloc-paired passed, expect-tx-bytes passed, "
             "ptxas-clean passed")
    checks = ("layout checks (layout_checks.py): scale-factor-layout passed, tensor-memory-columns passed, "
              "launch-plan-coverage passed, launch-arguments passed")
    assert report.count(f"  - {rules}") == 1 and report.count(f"    - {rules}") == 3  # base, then 3 proposals
    assert report.count(f"  - {checks}") == 1 and report.count(f"    - {checks}") == 3

    rows = ledger.query(
        "select e.subject, r.proposal_id, k.ok, k.registers, k.smem_bytes, k.threads_per_cta, k.ctas_per_sm "
        "from kernel_resources k join evaluations e on e.id = k.evaluation_id "
        "left join revisions r on r.id = e.revision_id order by e.id"
    )
    compiled = [r for r in rows if r["ok"]]  # the base first; the candidates as their compiles ended
    assert compiled[0]["proposal_id"] is None
    compiled = [compiled[0], *sorted(compiled[1:], key=lambda r: r["proposal_id"])]
    assert [r["proposal_id"] for r in compiled] == [None, "pipeline-stages-3", "tma-store-epilogue", "wide-n-tile"]
    for r in compiled:
        assert 1 <= r["registers"] <= 255, r
        assert 0 < r["smem_bytes"] <= 228 * KB, r
        assert r["threads_per_cta"] == 128 and r["ctas_per_sm"] >= 1, r
    base, stages3 = compiled[0], compiled[1]
    # the pitch said more stages cost shared memory: the compiled truth says how much
    assert stages3["smem_bytes"] > base["smem_bytes"] and stages3["ctas_per_sm"] < base["ctas_per_sm"]
