"""Reports: exact lines of a two-round scorecard and the leaderboard, built from a ledger with fabricated stages."""

import hashlib
import json
from pathlib import Path

import pytest

from judge.errors import JudgeError
from judge.ledger import Ledger
from judge.proposals import load_shark
from judge.records import Claim, Proposal, Vote
from judge.report import fmt_claim, fmt_delta, fmt_pct, fmt_us, leaderboard_view, render_leaderboard, render_round, round_view
from judge.stages.details import CompileDetail, CompiledConfig, TimedBenchmark, TimingDetail
from judge.stages.result import StageResult, not_run

ROOT = Path(__file__).resolve().parents[2]
TARGET = "nvfp4_group_gemm"
BASE_1 = "NUM_AB_STAGES = 1\nMMA_TILER_MNK = (128, 128, 256)\nEPILOGUE_STORE = 'simt'\n"
BASE_2 = "NUM_AB_STAGES = 1\nMMA_TILER_MNK = (128, 128, 256)\nEPILOGUE_STORE = 'tma'\n"
SIGNATURE = {"ab_stages": 1, "epilogue_store": "simt", "mma_tiler_mnk": [128, 128, 256]}  # round 1 base's knobs
H100 = {"name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "capability": "9.0", "arch": "sm_90", "memory_gb": 79.2,
        "l2_mb": 50.0, "sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "sm_clock_max_mhz": 1980, "temperature_c": 31,
        "driver": "570.124.06", "cuda": "12.8", "torch": "2.7.0+cu128", "cutedsl": "4.1.0"}
B200 = {**H100, "name": "NVIDIA B200", "sm_count": 148, "capability": "10.0", "arch": "sm_100", "memory_gb": 178.4,
        "l2_mb": 126.5, "sm_clock_mhz": 1965, "sm_clock_max_mhz": 1965, "mem_clock_mhz": 3996}
GATE = "needs sm_100, this machine has none"

# ../shared/seeds/001_*.txt: The Performance Oracle's score rows and the totals it stated.
SEED_ROWS = {
    "pipeline-stages-3": ((8.5, 9.5, 8, 8), 8.4, True),
    "tile-64-rows": ((9, 6, 6, 8.5), 7.6, False),
    "tma-store-epilogue": ((6.5, 7, 7, 7.5), 6.9, False),
    "warp-specialization": ((6, 4, 4, 7), 5.6, False),
}


def patch(old: str, new: str) -> str:
    return f"--- a/submission.py\n+++ b/submission.py\n@@ -1,3 +1,3 @@\n-{old}\n+{new}\n {BASE_1.splitlines()[1]}\n {BASE_1.splitlines()[2]}\n"


def compiled(registers: int, smem: int, ctas: int, limiter: str, ptx: int, cubin: int, **knobs) -> StageResult:
    kernel = {"name": "kernel_grouped_gemm", "registers": registers, "smem_total": smem, "spill_stores": 0,
              "spill_loads": 0, "stack_bytes": 0, "threads": 192,
              "occupancy": {"ctas_per_sm": ctas, "limited_by": limiter}}
    config = {"signature": {**SIGNATURE, **knobs}, "benchmarks": [0], "ok": True, "kernels": [kernel], "error": None,
              "ptx_bytes": ptx, "cubin_bytes": cubin, "seconds": 1.2}
    return StageResult("compile", "passed", f"1 configuration compiled: {registers} registers", 1.2,
                       CompileDetail(configs=[CompiledConfig.from_json(config)]))


BASE_COMPILE = compiled(128, 64512, 3, "registers", 800, 1600)
PATCHED = StageResult("patch", "passed", "applied to the round's base", 0.01)
CORRECT = StageResult("correctness", "passed", "10 tests passed (2 seeds each)", 3.5)
SOL = [18.833, 10.667, 2.406, 1.525]
LABELS = ["g=8 k=7168", "g=8 k=2048", "g=2 k=4096", "g=2 k=1536"]


def timing(pairs, cis, geomean, geomean_ci) -> StageResult:
    benchmarks = []
    for i, ((before, after), (low, high)) in enumerate(zip(pairs, cis)):
        benchmarks.append(TimedBenchmark(index=i, label=LABELS[i], base_median_us=before, cand_median_us=after,
                                         speedup=round(before / after, 5), ci_low=low, ci_high=high,
                                         significant=not low <= 1 <= high, reps=40, base_us=[before] * 3,
                                         cand_us=[after] * 3, speed_of_light_us=SOL[i]))
    summary = f"geomean {geomean:.3f}x [{geomean_ci[0]:.3f}, {geomean_ci[1]:.3f}] over {len(pairs)} benchmarks"
    return StageResult("timing", "passed", summary, 30.0,
                       TimingDetail(benchmarks=benchmarks, geomean=geomean, geomean_ci=geomean_ci))


SLOWER = timing([(373.0, 488.0), (372.0, 462.0), (173.0, 249.0), (156.0, 228.0)],
                [(0.750, 0.780), (0.790, 0.820), (0.680, 0.710), (0.670, 0.700)], 0.73546, [0.72, 0.75])
FASTER = timing([(373.0, 350.0), (372.0, 352.5), (173.0, 163.0), (156.0, 147.0)],
                [(1.050, 1.080), (1.040, 1.070), (1.045, 1.075), (1.046, 1.076)], 1.06, [1.04, 1.08])
COMPILE_ERROR = StageResult("compile", "failed", "DSLUserCodeError: tile M=64 is not supported by MmaMXF4NVF4Op", 0.8,
                            CompileDetail(configs=[CompiledConfig.from_json(
                                {"signature": {**SIGNATURE, "mma_tiler_mnk": [64, 128, 256]}, "benchmarks": [0], "ok": False,
                                 "error": {"type": "DSLUserCodeError",
                                           "message": "tile M=64 is not supported by MmaMXF4NVF4Op",
                                           "line": "DSLUserCodeError: tile M=64 is not supported by MmaMXF4NVF4Op "
                                                   "(submission.py:40: `MMA_TILER_MNK = (64, 128, 256)`)"}})]))


def proposal(pid, author, round, category, claim, new_line=None, old_line="NUM_AB_STAGES = 1", **extra):
    return Proposal(id=pid, title=extra.pop("title", pid.replace("-", " ")), author=author, round=round, target=TARGET,
                    category=category, claim=Claim(low=claim[0], high=claim[1]) if claim else None, pitch="why",
                    patch=patch(old_line, new_line) if new_line else None, **extra)


def evaluate(ledger, run, round_row, revision_id, outcome, reason, stages, device):
    return ledger.record_evaluation(run_id=run, round_id=round_row["id"], revision_id=revision_id,
                                    subject="candidate" if revision_id else "base", kernel_sha256="0" * 64,
                                    outcome=outcome, reason=reason, stages=stages, device=device,
                                    started_at="2025-06-01T10:00:00+00:00")


@pytest.fixture
def ledger(tmp_path):
    """Round 1 on a B200: slower, compile error, faster (the winner), pitch only. Round 2 on an H100: not run."""
    ledger = Ledger(tmp_path / "ledger.db")
    oracle_id, _, _ = ledger.add_shark(load_shark(ROOT / "sharks" / "performance-oracle.toml"), "test")
    referee_id, _, _ = ledger.add_shark(load_shark(ROOT / "sharks" / "measured-referee.toml"), "test")
    revs = {}
    for p in [
        proposal("pipeline-stages-3", "team-pipeline", 1, "pipeline", (1.5, 1.8), "NUM_AB_STAGES = 3", title="Three-stage pipeline"),
        proposal("tile-64-rows", "team-tiles", 1, "tiling", (1.8, 2.5), "MMA_TILER_MNK = (64, 128, 256)",
                 old_line="MMA_TILER_MNK = (128, 128, 256)"),
        proposal("tma-store-epilogue", "team-epilogue", 1, "epilogue", (1.12, 1.15), "EPILOGUE_STORE = 'tma'",
                 old_line="EPILOGUE_STORE = 'simt'", title="TMA-store epilogue"),
        proposal("warp-specialization", "team-warps", 1, "scheduling", (1.25, 1.4)),
    ]:
        revs[p.id] = ledger.submit(p, "test").revision_id
    names = ("expected_speedup", "feasibility", "risk", "pitch_quality")
    for pid, (scores, stated, fund) in SEED_ROWS.items():
        vote = Vote(shark="performance-oracle", proposal=pid, scores=dict(zip(names, scores)), stated_total=stated, fund=fund)
        ledger.cast_vote(vote, oracle_id, revs[pid], 1, "test")
    ledger.cast_vote(Vote(shark="measured-referee", proposal="pipeline-stages-3", scores={"claim_honesty": 6}), referee_id,
                     revs["pipeline-stages-3"], 1, "test")

    r1 = ledger.create_round(TARGET, 1, BASE_1, f"kernels/{TARGET}/submission.py")
    run = ledger.start_run(r1["id"], ["judge", "run"])
    evaluate(ledger, run, r1, None, "unchanged", "base kernel", [BASE_COMPILE, CORRECT], B200)  # 1
    evaluate(ledger, run, r1, revs["pipeline-stages-3"], "slower", SLOWER.summary,  # 2
             [PATCHED, compiled(168, 101376, 2, "smem", 1000, 2000, ab_stages=3), CORRECT, SLOWER], B200)
    evaluate(ledger, run, r1, revs["tile-64-rows"], "compile-error", COMPILE_ERROR.summary, [PATCHED, COMPILE_ERROR], B200)  # 3
    evaluate(ledger, run, r1, revs["tma-store-epilogue"], "faster", FASTER.summary,  # 4
             [PATCHED, compiled(120, 97280, 2, "smem", 900, 1800, epilogue_store="tma"), CORRECT, FASTER], B200)
    ledger.finish_run(run, "finished")
    ledger.set_winner(r1["id"], revs["tma-store-epilogue"])

    tile2 = ledger.submit(proposal("tile-64-rows", "team-tiles", 2, "tiling", (1.1, 1.3), "MMA_TILER_MNK = (128, 64, 256)",
                                   old_line="MMA_TILER_MNK = (128, 128, 256)"), "test").revision_id
    wide = ledger.submit(proposal("wide-n-tile", "team-tiles", 2, "tiling", (1.05, 1.2), "MMA_TILER_MNK = (128, 256, 256)",
                                  old_line="MMA_TILER_MNK = (128, 128, 256)", parent="tile-64-rows"), "test").revision_id
    r2 = ledger.create_round(TARGET, 2, BASE_2, "round 1 base + winner tma-store-epilogue r1")
    run = ledger.start_run(r2["id"], ["judge", "run"])
    base2 = compiled(120, 97280, 2, "smem", 900, 1800, epilogue_store="tma")
    tile2_compile = compiled(136, 97280, 2, "smem", 950, 1900, epilogue_store="tma", mma_tiler_mnk=[128, 64, 256])
    evaluate(ledger, run, r2, None, "not-run", GATE, [base2, not_run("correctness", GATE)], H100)  # 5
    evaluate(ledger, run, r2, tile2, "not-run", GATE,  # 6
             [PATCHED, tile2_compile, not_run("correctness", GATE), not_run("timing", GATE)], H100)
    failed = StageResult("patch", "failed", "patch of wide-n-tile r1: hunk 1 does not apply at line 2", 0.01)
    evaluate(ledger, run, r2, wide, "patch-failed", failed.summary, [failed], H100)  # 7
    ledger.finish_run(run, "finished")
    ledger.set_winner(r2["id"], None)
    return ledger


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_a_round_run_again_elsewhere_says_why_nothing_ran_there(ledger, tmp_path):
    """Round 2 ran first where no B200 was (the gate), then on a machine whose base failed: the header and the verdict
    give the latest reason, not the first machine's."""
    r2 = ledger.round_row(TARGET, 2)
    run = ledger.start_run(r2["id"], ["judge", "run", "--again"])
    broken = StageResult("compile", "failed", "ModuleNotFoundError: No module named 'cutlass'", 0.5)
    evaluate(ledger, run, r2, None, "compile-error", broken.summary, [broken], H100)  # 8
    why = ("the round's base is compile-error (ModuleNotFoundError: No module named 'cutlass'): nothing to time a "
           "candidate against here")
    tile2 = ledger.latest_revision("tile-64-rows")["id"]
    evaluate(ledger, run, r2, tile2, "not-run", why,  # 9
             [PATCHED, compiled(136, 97280, 2, "smem", 950, 1900), not_run("correctness", why), not_run("timing", why)],
             H100)
    ledger.finish_run(run, "finished")
    text = lines(render_round(ledger, 2, tmp_path))
    assert f"- Device: no GPU stage ran for this round ({why}); only patch and compile results below." in text
    assert f"**No winner yet**: nothing was timed in this round ({why})." in text


def test_numbers_are_formatted_as_the_report_states():
    assert [fmt_us(x) for x in (1234.5, 488.0, 373.4, 18.833, 2.406, 0.04567, 0)] == ["1235", "488", "373", "18.8", "2.41", "0.0457", "0"]
    assert fmt_pct(-30.831) == "-30.8%" and fmt_pct(5.66) == "+5.7%"
    assert fmt_claim([1.5, 1.8]) == "1.5-1.8x" and fmt_claim([1.12, 1.12]) == "1.12x" and fmt_claim(None) == "no claim"
    assert fmt_delta({"value": 168, "base": 128}) == "168 (+40)" and fmt_delta({"value": 2, "base": 3}) == "2 (-1)"
    assert fmt_delta({"value": 168, "base": None}) == "168"


def test_a_slower_benchmark_row_has_a_negative_change(ledger, tmp_path):
    text = lines(render_round(ledger, 1, tmp_path / "reports"))
    assert "| 0 | g=8 k=7168 | 373 | 488 | -30.8% | 0.764x [0.750, 0.780] | yes | 18.8 | 3.9% | 40 |" in text
    assert "| 3 | g=2 k=1536 | 156 | 228 | -46.2% | 0.684x [0.670, 0.700] | yes | 1.53 | 0.7% | 40 |" in text
    assert "Geomean: 0.735x [0.720, 0.750], change -36.0%, significant: yes (evaluation #2)." in text
    assert "Geomean: 1.060x [1.040, 1.080], change +5.7%, significant: yes (evaluation #4)." in text


def test_the_header_names_base_device_and_date(ledger, tmp_path):
    text = lines(render_round(ledger, 1, tmp_path))
    assert text[0] == "# Round 1: nvfp4_group_gemm"
    sha = hashlib.sha256(BASE_1.encode()).hexdigest()[:12]
    assert f"- Base: kernels/nvfp4_group_gemm/submission.py (sha256 {sha}), base evaluation #1: passed (base kernel)" in text
    assert "- Changed since the last round: nothing; round 1's base is the target's own kernel file." in text
    assert ("- Device: NVIDIA B200, 148 SMs, sm_100 (capability 10.0), 178.4 GB memory, 126.5 MB L2, SM clock 1965 MHz (max 1965), "
            "memory clock 3996 MHz, 31 C, driver 570.124.06, CUDA 12.8, torch 2.7.0+cu128, CuTe DSL 4.1.0 "
            "(evaluations #1, #2, #3, #4)") in text
    assert any(line.startswith("- Dates: round created 20") for line in text)


def test_round_two_states_what_changed_and_that_no_gpu_stage_ran(ledger, tmp_path):
    text = lines(render_round(ledger, 2, tmp_path))
    assert ('- Changed since the last round: round 1\'s winner tma-store-epilogue revision 1 by team-epilogue ("TMA-store epilogue"), '
            "+1/-1 lines in 1 hunk, measured geomean 1.060x [1.040, 1.080] (evaluation #4)") in text
    assert "- Device: no GPU stage ran for this round (needs sm_100, this machine has none); only patch and compile results below." in text
    assert "- Status: **not-run** (evaluation #6): needs sm_100, this machine has none" in text
    assert "  - correctness (not-run): not run: needs sm_100, this machine has none" in text
    assert "- Meaning: a stage could not run here (e.g. needs sm_100, this machine has none); the proposal stays pending" in text


def test_resources_are_deltas_against_the_round_base(ledger, tmp_path):
    text = lines(render_round(ledger, 1, tmp_path))
    assert "Compile resources against base evaluation #1:" in text
    row = ("| 0 | ab_stages 1 -> 3 | 168 (+40) | 99.0 (+36.0) | 0 (+0) | 0 (+0) | 192 (+0) "
           "| 2 (-1) limited by smem (was registers) | 1.0 (+0.2) | 2.0 (+0.4) |")
    assert row in text
    assert ("- Compile error (knobs changed: mma_tiler_mnk 128x128x256 -> 64x128x256): `` DSLUserCodeError: tile M=64 is not "
            "supported by MmaMXF4NVF4Op (submission.py:40: `MMA_TILER_MNK = (64, 128, 256)`) ``") in text
    # round 2 compares with round 2's base (120 registers), not round 1's
    text2 = lines(render_round(ledger, 2, tmp_path))
    assert ("| 0 | mma_tiler_mnk 128x128x256 -> 128x64x256 | 136 (+16) | 95.0 (+0.0) | 0 (+0) | 0 (+0) | 192 (+0) "
            "| 2 (+0) limited by smem | 0.9 (+0.0) | 1.9 (+0.1) |") in text2


def test_votes_are_recomputed_and_wrong_totals_flagged(ledger, tmp_path):
    text = lines(render_round(ledger, 1, tmp_path))
    assert "| expected_speedup | 0.4 | 8.5 | 3.4 | shark |" in text
    assert "- Total computed by judge: 8.575" in text
    assert "- Total stated by the shark: 8.4" in text
    assert "- **FLAG: stated 8.4, computed 8.575** (differs by more than rounding)" in text
    assert "- **FLAG: stated 5.6, computed 5.25** (differs by more than rounding)" in text
    assert [line for line in text if "FLAG" in line and line.startswith("- **")] == [
        "- **FLAG: stated 8.4, computed 8.575** (differs by more than rounding)",
        "- **FLAG: stated 5.6, computed 5.25** (differs by more than rounding)",
    ]
    assert "- Total computed by judge: 7.575" in text  # 7.6 stated: within rounding, no flag
    # the measured referee's bound criteria come from evaluation #2: 0.735x scores 5 + 5*log2(0.73546) = 2.78
    assert "| measured_speedup | 0.5 | 2.78 | 1.39 | measured |" in text
    assert "| correctness | 0.2 | 10.0 | 2.0 | measured |" in text
    assert "- Total computed by judge: 5.19" in text
    assert any(line.startswith("- speedup score (a criterion bound to \"speedup\"): measured speedup s") for line in text)


def test_ranking_ranks_the_measured_and_leaves_the_eliminated_to_the_graveyard(ledger, tmp_path):
    text = lines(render_round(ledger, 1, tmp_path))
    start = text.index("| rank | proposal | author | outcome | geomean [95% CI] | mean shark total | votes | evaluation |")
    assert text[start + 2:start + 5] == [
        "| 1 | tma-store-epilogue r1 (winner) | team-epilogue | faster | 1.060x [1.040, 1.080] | 6.875 | 1 computed | #4 |",
        "| - | warp-specialization r1 | team-warps | pitch | - | 5.25 | 1 computed | - |",
        "",
    ]
    assert text[start + 5] == (
        "Ranked: proposals standing faster than the base, by geomean. Unranked, by name: pending proposals (a patch "
        "not timed yet), then pitches (no patch). Eliminated proposals are in the graveyard. Mean shark total: over "
        "the totals judge computed; a pending vote waits on a measurement.")
    assert ("**Winner: tma-store-epilogue revision 1** by team-epilogue, geomean 1.060x [1.040, 1.080] (evaluation #4). "
            "Its patch applied to this round's base became the base of round 2.") in text
    assert "- Status: pitch: no patch, nothing to evaluate until a revision brings one" in text
    text2 = lines(render_round(ledger, 2, tmp_path))
    start = text2.index("| rank | proposal | author | outcome | geomean [95% CI] | mean shark total | votes | evaluation |")
    assert text2[start + 2:start + 4] == ["| - | tile-64-rows r2 | team-tiles | not-run | - | - | none | #6 |", ""]
    assert "**No winner yet**: nothing was timed in this round (needs sm_100, this machine has none)." in text2
    assert ("Still pending: tile-64-rows r2. A run on a machine that can run it may still name a winner, whose patch would "
            "become the base of round 3.") in text2


def test_graveyard_keeps_every_elimination_so_far(ledger, tmp_path):
    text = lines(render_round(ledger, 2, tmp_path))
    start = text.index("| round | proposal | author | promise | reality | status | evaluation |")
    assert text[start + 2:start + 5] == [
        "| 1 | pipeline-stages-3 r1 | team-pipeline | 1.5-1.8x | 0.735x [0.720, 0.750], change -36.0% | eliminated (slower) | #2 |",
        "| 1 | tile-64-rows r1 | team-tiles | 1.8-2.5x | compile-error: DSLUserCodeError: tile M=64 is not supported by MmaMXF4NVF4Op "
        "| eliminated (compile-error) | #3 |",
        "| 2 | wide-n-tile r1 | team-tiles | 1.05-1.2x | patch-failed: patch of wide-n-tile r1: hunk 1 does not apply at line 2 "
        "| eliminated (patch-failed) | #7 |",
    ]
    assert text[start + 5] == ""  # tile-64-rows r2 is not-run, still pending: not buried


def test_claims_vs_measured_per_author(ledger, tmp_path):
    text = lines(render_round(ledger, 2, tmp_path))
    assert "### team-epilogue: 1 measured, 0 inside, 0 above, 1 below the claim" in text
    assert "| 1 | tma-store-epilogue r1 | 1.12-1.15x | 1.060x [1.040, 1.080] | below | faster | #4 |" in text
    assert ("No timed verdict to compare a claim with for: team-tiles (tile-64-rows r1: compile-error, tile-64-rows r2: "
            "not-run, wide-n-tile r1: patch-failed); team-warps (warp-specialization r1: pitch).") in text
    assert not [line for line in text if "not measured" in line]  # claims tables hold only what was measured


def test_lineage_lists_revisions_and_parents(ledger, tmp_path):
    text = lines(render_round(ledger, 2, tmp_path))
    rows = [line for line in text if line.startswith("| tile-64-rows |") or line.startswith("| wide-n-tile |")]
    assert [row.split(" | ")[1:3] + row.split(" | ")[4:6] for row in rows] == [
        ["1", "1", "first revision", ""],
        ["2", "2", "claim 1.8-2.5x -> 1.1-1.3x; patch changed (now +1/-1 lines in 1 hunk)", ""],
        ["1", "2", "first revision", "tile-64-rows"],
    ]
    # round 1's report does not show revisions submitted for round 2
    assert not [line for line in lines(render_round(ledger, 1, tmp_path)) if line.startswith("| wide-n-tile |")]


def test_round_view_is_json_and_traces_to_rows(ledger):
    view = round_view(ledger, 1)
    assert json.loads(json.dumps(view)) == view
    [t] = view["targets"]
    pipeline = next(p for p in t["proposals"] if p["proposal_id"] == "pipeline-stages-3")
    assert pipeline["evaluation"]["id"] == 2
    assert [b["benchmark_result_id"] for b in pipeline["evaluation"]["benchmarks"]] == [
        r["id"] for r in ledger.benchmark_results(2)
    ]
    assert pipeline["evaluation"]["resources"][0]["registers"] == {"value": 168, "base": 128}
    assert [v["total"] for v in pipeline["votes"]] == ["5.19", "8.575"]


def test_a_round_that_has_not_run_is_a_one_line_error(ledger, tmp_path):
    with pytest.raises(JudgeError, match=r"^round 3 has not run \(rounds in the ledger: 1, 2\)$"):
        render_round(ledger, 3, tmp_path)
    with pytest.raises(JudgeError, match=r"^target 'other' has no rounds in the ledger \(targets with rounds: nvfp4_group_gemm\)$"):
        round_view(ledger, 1, target="other")


def test_several_targets_get_one_file_each(ledger, tmp_path):
    assert render_round(ledger, 1, tmp_path).name == "round-1.md"
    ledger.create_round("axpy", 1, "x = 1\n", "kernels/axpy/submission.py")
    assert render_round(ledger, 1, tmp_path, target=TARGET).name == "round-1-nvfp4_group_gemm.md"
    both = render_round(ledger, 1, tmp_path)
    assert both.name == "round-1.md"
    assert [line for line in lines(both) if line.startswith("# Round")] == ["# Round 1: axpy", "# Round 1: nvfp4_group_gemm"]


def test_leaderboard_compounds_winners(ledger, tmp_path):
    text = lines(render_leaderboard(ledger, tmp_path))
    sha1 = hashlib.sha256(BASE_1.encode()).hexdigest()[:12]
    sha2 = hashlib.sha256(BASE_2.encode()).hexdigest()[:12]
    assert (f"| 1 | kernels/nvfp4_group_gemm/submission.py | {sha1} | tma-store-epilogue r1 | team-epilogue "
            "| 1.060x [1.040, 1.080] | 1.060x | #4 |") in text
    assert f"| 2 | round 1 base + winner tma-store-epilogue r1 | {sha2} | none (nothing timed; 1 pending) | | | 1.060x | |" in text
    assert "| team-tiles | 2 | 0 | 2 | - |" in text
    assert "| team-pipeline | 1 | 0 | 1 | 0.735x (pipeline-stages-3 r1, round 1, evaluation #2) |" in text
    assert "| team-epilogue | 1 | 1 | 0 | 1.060x (tma-store-epilogue r1, round 1, evaluation #4) |" in text
    # the standings: each contestant's best over round 1's base, per device
    assert ("| 1 | NVIDIA B200 | team-epilogue | 1.060x | tma-store-epilogue r1, round 1 | 1.060x | 1.000x | #4 |"
            in text)
    assert "| 2 | NVIDIA B200 | team-pipeline | 0.735x | pipeline-stages-3 r1, round 1 | 0.735x | 1.000x | #2 |" in text
    view = leaderboard_view(ledger)
    assert json.loads(json.dumps(view)) == view
    assert [r["cumulative"] for r in view["targets"][0]["rounds"]] == [1.06, 1.06]
    # a round-2 proposal measured on another device stands on that device, over round 1's base through round 1's winner
    again = ledger.submit(proposal("pipeline-stages-3", "team-pipeline", 2, "pipeline", (1.05, 1.1), "NUM_AB_STAGES = 3"),
                          "test").revision_id
    r2 = ledger.round_row(TARGET, 2)
    run = ledger.start_run(r2["id"], ["judge", "run"])
    evaluate(ledger, run, r2, again, "faster", FASTER.summary, [PATCHED, CORRECT, FASTER], H100)  # 8
    [standing] = [s for s in leaderboard_view(ledger)["targets"][0]["standings"] if s["device"] == "NVIDIA H100 80GB HBM3"]
    assert (standing["author"], standing["place"], standing["round"], standing["evaluation_id"]) == (
        "team-pipeline", 1, 2, 8)
    assert standing["over_original"] == pytest.approx(1.06 * standing["geomean"])


def test_the_noise_control_line_and_a_noisy_round(tmp_path):
    """The control's line names its pairs and the floor the round's verdicts cleared; identical code read far from 1,
    or a floor three times the target's minimum, puts a noisy-round line above it."""
    from judge.ledger.noise import CONTROL

    ledger = Ledger(tmp_path / "ledger.db")
    rev = ledger.submit(proposal("pipeline-stages-3", "team-pipeline", 1, "pipeline", (1.5, 1.8), "NUM_AB_STAGES = 3"),
                        "test").revision_id
    r1 = ledger.create_round(TARGET, 1, BASE_1, f"kernels/{TARGET}/submission.py")
    run = ledger.start_run(r1["id"], ["judge", "run"])
    evaluate(ledger, run, r1, None, "unchanged", "base kernel", [BASE_COMPILE, CORRECT], H100)  # 1

    def control(ci):
        same = timing([(373.0, 373.0)] * 4, [ci] * 4, 1.0, list(ci))
        same = StageResult("timing", "passed", same.summary, 30.0,
                           same.detail.updated(pairs=4, pair_geomeans=[0.99, 1.01, 1.0, 1.0], decision="unchanged"))
        ledger.record_evaluation(run_id=run, round_id=r1["id"], revision_id=None, subject=CONTROL,
                                 kernel_sha256="0" * 64, outcome="unchanged", reason=f"the base against itself: {same.summary}",
                                 stages=[BASE_COMPILE, CORRECT, same], device=H100, started_at="2025-06-01T10:00:00+00:00")

    control((0.995, 1.005))  # 2
    floor = {"effect": 0.04, "min_effect": 0.01, "source": "controls", "controls": 3, "device": "NVIDIA H100 80GB HBM3"}
    slower = StageResult("timing", "passed", SLOWER.summary, 30.0, SLOWER.detail.updated(floor=floor, decision="slower"))
    evaluate(ledger, run, r1, rev, "slower", SLOWER.summary, [PATCHED, BASE_COMPILE, CORRECT, slower], H100)  # 3
    text = lines(render_round(ledger, 1, tmp_path / "reports"))
    words = ("4.0%, set by 3 A/A controls on NVIDIA H100 80GB HBM3 (an identical copy of the base judged the same way); "
             "the target's minimum is 1.0%")
    assert ("- Noise control (evaluation #2): the base against an identical copy of itself, judged as a candidate is, "
            f"read 1.000x [0.995, 1.005] over 4 process pairs (unchanged); the noise floor of this round's verdicts: {words}"
            ) in text
    assert ("- **A noisy round**: verdicts needed a change of 4.0%, 4 times the target's minimum; a change smaller than "
            "that was not called faster or slower here.") in text
    control((0.93, 1.07))  # 4: the latest control is the one shown
    text = lines(render_round(ledger, 1, tmp_path / "reports"))
    assert ("- **A noisy round**: identical code read 0.930x to 1.070x; verdicts needed a change of 4.0%, 4 times the "
            "target's minimum; a change smaller than that was not called faster or slower here.") in text
    # the controls (#2, #4) are named by their own line and the device's only: never ranked, buried or charted
    assert [line.split(" (")[0] for line in text if "#2" in line or "#4" in line] == [
        "- Noise control", "- Device: NVIDIA H100 80GB HBM3, 132 SMs, sm_90"]


def test_a_round_run_by_the_runner_reports_through_the_cli(tmp_path, monkeypatch):
    """The runner's own rows (fake stages: no speed of light, a bare device) render, and `judge report` prints the path."""
    import os

    from click.testing import CliRunner
    from fakestages import FakeStages

    from judge.cli.main import main
    from judge.rounds import Settings, run_round

    fixture = ROOT / "tests" / "fixtures" / "axpy"
    base = (fixture / "submission.py").read_text().splitlines()
    i = base.index("SCALE = 2.0")
    knob = (f"--- a/submission.py\n+++ b/submission.py\n@@ -{i},3 +{i},4 @@\n {base[i - 1]}\n-SCALE = 2.0\n"
            f"+SCALE = 2.0  # tuned\n+# verdict: speedup 1.25\n {base[i + 1]}\n")
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    os.symlink(fixture, kernels / "axpy")
    ledger = Ledger(tmp_path / "ledger.db")
    ledger.submit(Proposal(id="a-fast", title="faster", author="team", round=1, target="axpy", patch=knob,
                           claim=Claim(low=1.1, high=1.2)), "test")
    run_round(ledger, 1, settings=Settings(kernels_dir=kernels, work_dir=tmp_path / "work", cache_dir=tmp_path / "cache",
                                           stages=FakeStages()))
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    result = runner.invoke(main, ["--ledger", "ledger.db", "report"], catch_exceptions=False)
    assert result.output == "reports/round-1.md\n"
    text = lines(tmp_path / "reports" / "round-1.md")
    assert "| 0 | size=1048576 | 100 | 80.0 | +20.0% | 1.250x [1.244, 1.256] | yes | - | - | 3 |" in text
    assert "| 1 | size=4194304 | 200 | 160 | +20.0% | 1.250x [1.244, 1.256] | yes | - | - | 3 |" in text
    assert "| 0, 1 | none | 128 (+32) | 1.0 (+0.0) | 0 (+0) | 0 (+0) | 128 (+0) | 4 (+0) limited by registers | 0.1 (+0.0) | 0.2 (+0.0) |" in text
    # the round's A/A control is evaluation #2: fake stages record no process pairs, so none are counted
    assert ("- Noise control (evaluation #2): the base against an identical copy of itself, judged as a candidate is, "
            "read 1.000x [0.995, 1.005] (unchanged)") in text
    assert "| 1 | a-fast r1 | 1.1-1.2x | 1.250x [1.244, 1.256] | above | faster | #3 |" in text
    assert "- Device: Fake GPU, 4 SMs (evaluations #1, #2, #3)" in text
    data = json.loads(runner.invoke(main, ["--ledger", "ledger.db", "report", "--json"], catch_exceptions=False).output)
    assert data["round"]["targets"][0]["winner"]["proposal_id"] == "a-fast"
    assert runner.invoke(main, ["--ledger", "ledger.db", "report", "--round", "4"]).exit_code == 2


def test_a_rerun_on_a_gpu_supersedes_the_not_run_evaluation(ledger, tmp_path):
    r2 = ledger.round_row(TARGET, 2)
    tile2 = ledger.latest_revision("tile-64-rows")["id"]
    run = ledger.start_run(r2["id"], ["judge", "run", "--round", "2"])
    tile2_compile = compiled(136, 97280, 2, "smem", 950, 1900, epilogue_store="tma", mma_tiler_mnk=[128, 64, 256])
    evaluate(ledger, run, r2, tile2, "faster", FASTER.summary, [PATCHED, tile2_compile, CORRECT, FASTER], B200)  # 8
    ledger.finish_run(run, "finished")
    ledger.set_winner(r2["id"], tile2)
    text = lines(render_round(ledger, 2, tmp_path))
    assert "- Status: **faster** (evaluation #8): geomean 1.060x [1.040, 1.080] over 4 benchmarks" in text
    assert "- Earlier evaluations of this revision in this round (superseded by #8): #6 not-run" in text
    assert [line.split(" (evaluations ")[1] for line in text if line.startswith("- Device: ")] == ["#5, #6, #7); no GPU stage ran there", "#8)"]
    assert "| 2 | tile-64-rows r2 | 1.1-1.3x | 1.060x [1.040, 1.080] | below | faster | #8 |" in text
    assert ("**Winner: tile-64-rows revision 2** by team-tiles, geomean 1.060x [1.040, 1.080] (evaluation #8). "
            "Its patch applied to this round's base becomes the base of round 3.") in text
    board = lines(render_leaderboard(ledger, tmp_path))
    assert any(line.startswith("| 2 | round 1 base + winner tma-store-epilogue r1 |") and "| 1.124x | #8 |" in line for line in board)
