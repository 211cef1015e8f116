"""Exact lines of a scorecard where nothing was timed (the quickstart's case) and of the verdicts around it:
the ranking, the verdict, the base, the devices, the compile knobs, the claims and the conventions."""

import pytest

from judge.ledger import Ledger
from judge.proposals import load_shark
from judge.records import Vote
from judge.report import fmt_kib, fmt_knob_changes, fmt_votes, render_leaderboard, render_round, round_view
from judge.stages.result import StageResult, not_run
from test_report import (
    BASE_1,
    COMPILE_ERROR,
    CORRECT,
    FASTER,
    GATE,
    PATCHED,
    ROOT,
    SLOWER,
    TARGET,
    compiled,
    evaluate,
    lines,
    proposal,
)

NAMES = ("expected_speedup", "feasibility", "risk", "pitch_quality")


def section(text: list[str], heading: str) -> list[str]:
    """The lines under a heading, up to the next heading of any level."""
    start = text.index(heading) + 1
    end = next((i for i in range(start, len(text)) if text[i].startswith("#")), len(text))
    return text[start:end]


@pytest.fixture
def untimed(tmp_path):
    """Round 1 compiled on a machine without the GPU: the base and stages-3 not run, tile-64 a compile error,
    warp a pitch; no evaluation holds a device record. stages-3 has a computed vote and a pending one."""
    ledger = Ledger(tmp_path / "ledger.db")
    oracle, _, _ = ledger.add_shark(load_shark(ROOT / "sharks" / "performance-oracle.toml"), "test")
    referee, _, _ = ledger.add_shark(load_shark(ROOT / "sharks" / "measured-referee.toml"), "test")
    revs = {}
    for p in [
        proposal("stages-3", "team-pipeline", 1, "pipeline", (1.5, 1.8), "NUM_AB_STAGES = 3"),
        proposal("tile-64", "team-tiles", 1, "tiling", (2, 3), "MMA_TILER_MNK = (64, 128, 256)",
                 old_line="MMA_TILER_MNK = (128, 128, 256)"),
        proposal("warp", "team-warps", 1, "scheduling", (1.25, 1.4)),
    ]:
        revs[p.id] = ledger.submit(p, "test").revision_id
    for pid, scores in (("stages-3", (8.5, 9.5, 8, 8)), ("tile-64", (9, 6, 6, 8.5)), ("warp", (6, 4, 4, 7))):
        ledger.cast_vote(Vote(shark="performance-oracle", proposal=pid, scores=dict(zip(NAMES, scores))), oracle,
                         revs[pid], 1, "test")
    ledger.cast_vote(Vote(shark="measured-referee", proposal="stages-3", scores={"claim_honesty": 7}), referee,
                     revs["stages-3"], 1, "test")
    r1 = ledger.create_round(TARGET, 1, BASE_1, f"kernels/{TARGET}/submission.py")
    run = ledger.start_run(r1["id"], ["judge", "run"])
    base = compiled(56, 38912, 5, "smem", 36504, 32880)
    evaluate(ledger, run, r1, None, "not-run", GATE, [base, not_run("correctness", GATE)], None)  # 1
    evaluate(ledger, run, r1, revs["stages-3"], "not-run", GATE,  # 2
             [PATCHED, compiled(62, 112640, 2, "smem", 38005, 33792, ab_stages=3), not_run("correctness", GATE),
              not_run("timing", GATE)], None)
    evaluate(ledger, run, r1, revs["tile-64"], "compile-error", COMPILE_ERROR.summary, [PATCHED, COMPILE_ERROR], None)  # 3
    ledger.finish_run(run, "finished")
    ledger.set_winner(r1["id"], None)
    return ledger


def test_the_ranking_ranks_nothing_unmeasured_and_counts_pending_votes(untimed, tmp_path):
    text = lines(render_round(untimed, 1, tmp_path))
    assert section(text, "## Ranking")[1:6] == [
        "| rank | proposal | author | outcome | geomean [95% CI] | mean shark total | votes | evaluation |",
        "|---:|---|---|---|---|---:|---|---|",
        "| - | stages-3 r1 | team-pipeline | not-run | - | 8.575 | 1 computed, 1 pending | #2 |",
        "| - | warp r1 | team-warps | pitch | - | 5.25 | 1 computed | - |",
        "",
    ]
    assert "- Total computed by judge: pending: measured_speedup, correctness wait on a measurement" in text
    # the compile error is in the graveyard only
    assert [line.split(" | ")[1] for line in text if line.startswith("| ") and "tile-64 r1" in line] == ["tile-64 r1"]
    assert any(line.startswith("| 1 | tile-64 r1 | team-tiles | 2-3x | compile-error: ") for line in section(text, "## Graveyard"))


def test_the_verdict_says_nothing_was_timed(untimed, tmp_path):
    text = lines(render_round(untimed, 1, tmp_path))
    assert "**No winner yet**: nothing was timed in this round (needs sm_100, this machine has none)." in text
    assert ("Still pending: stages-3 r1. A run on a machine that can run it may still name a winner, whose patch "
            "would become the base of round 2.") in text
    assert not [line for line in text if "significantly faster" in line]
    sha = lines(render_leaderboard(untimed, tmp_path))
    assert [line for line in sha if line.startswith("| 1 |")][0].endswith("| none (nothing timed; 1 pending) | | | - | |")


def test_the_base_shows_what_it_passed_and_devices_come_from_device_rows(untimed, tmp_path):
    text = lines(render_round(untimed, 1, tmp_path))
    base = next(line for line in text if line.startswith("- Base: "))
    assert base.endswith(", base evaluation #1: compile passed, correctness not run (needs sm_100, this machine has none)")
    assert [line for line in text if line.startswith("- Device") or line.startswith("- Machine")] == [
        "- Device: no GPU stage ran for this round (needs sm_100, this machine has none); only patch and compile results below.",
    ]


def test_compile_resources_name_the_knobs_changed_in_kib(untimed, tmp_path):
    text = lines(render_round(untimed, 1, tmp_path))
    assert section(text, "## Base kernel (evaluation #1)")[4:15] == [
        "Compiled configurations, by the knobs each was built with:",
        "",
        "| benchmarks | ab_stages | epilogue_store | mma_tiler_mnk |",
        "|---|---|---|---|",
        "| 0 | 1 | simt | 128x128x256 |",
        "",
        "Compile resources:",
        "",
        "| benchmarks | registers | smem KiB | spill bytes | stack bytes | threads/CTA | CTAs/SM (limiter) | PTX KiB | cubin KiB |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|",
        "| 0 | 56 | 38.0 | 0 | 0 | 192 | 5 limited by smem | 35.6 | 32.1 |",
    ]
    assert ("| 0 | ab_stages 1 -> 3 | 62 (+6) | 110.0 (+72.0) | 0 (+0) | 0 (+0) | 192 (+0) | 2 (-3) limited by smem "
            "| 37.1 (+1.5) | 33.0 (+0.9) |") in text


def test_claims_and_conventions_hold_only_what_was_measured(untimed, tmp_path):
    text = lines(render_round(untimed, 1, tmp_path))
    assert section(text, "## Claims vs. measured") == [
        "", "Nothing has been measured for this target yet, so no claim can be compared with a measurement.", ""]
    conventions = section(text, "## Conventions")
    assert text[-len(conventions) - 1] == "## Conventions"  # once, at the end
    assert [line.split(" ")[1] for line in conventions if line] == [
        "\"evaluation", "compile", "shark", "speedup", "correctness"]  # no timing convention: nothing was timed
    assert ("- compile resources: value (change against the base's kernel that serves the same benchmarks); \"knobs "
            "changed\" lists the compile configuration's knobs that differ from that base configuration's; smem, PTX and "
            "cubin sizes in KiB (1024 bytes, 1 decimal), spills (store + load) and stack in bytes; CTAs/SM is CUDA's "
            "occupancy arithmetic over registers, shared memory, threads and barriers and names the resource that limits "
            "it; it does not model tensor memory (sm_100) or cluster scheduling, so on a B200 it is an upper bound.") in conventions


def test_a_timed_round_without_a_faster_proposal_says_so(untimed, tmp_path):
    """Once something is timed, 'no winner' means none was faster, and the timing conventions apply."""
    r1 = untimed.round_row(TARGET, 1)
    stages3 = untimed.latest_revision("stages-3")["id"]
    run = untimed.start_run(r1["id"], ["judge", "run", "--again"])
    evaluate(untimed, run, r1, stages3, "slower", SLOWER.summary,  # 4
             [PATCHED, compiled(62, 112640, 2, "smem", 38005, 33792, ab_stages=3), CORRECT, SLOWER], None)
    untimed.finish_run(run, "finished")
    text = lines(render_round(untimed, 1, tmp_path))
    assert "**No winner**: no proposal was significantly faster than the base. Round 2 starts from this round's base unchanged." in text
    assert "| - | warp r1 | team-warps | pitch | - | 5.25 | 1 computed | - |" in text
    assert "- Device: none recorded (evaluations #1, #2, #3, #4)" in text  # a stage ran; no row holds a device
    assert "- % of SoL = speed of light / after, 1 decimal (100% is the hardware bound)." in text
    assert "| 1 | stages-3 r1 | 1.5-1.8x | 0.735x [0.720, 0.750] | below | slower | #4 |" in text
    assert ("No timed verdict to compare a claim with for: team-tiles (tile-64 r1: compile-error); team-warps "
            "(warp r1: pitch).") in text


def test_a_cleared_implausible_result_ranks_at_the_outcome_it_stands_at(untimed, tmp_path):
    r1 = untimed.round_row(TARGET, 1)
    stages3 = untimed.latest_revision("stages-3")["id"]
    run = untimed.start_run(r1["id"], ["judge", "run", "--again"])
    held = evaluate(untimed, run, r1, stages3, "implausible", "geomean past the bound; held",  # 4
                    [PATCHED, CORRECT, FASTER], None)
    untimed.finish_run(run, "finished")
    untimed.clear(held, "faster", "checked by hand", "referee")
    untimed.set_winner(r1["id"], stages3)
    view = round_view(untimed, 1)["targets"][0]
    assert [(r["rank"], r["proposal_id"], r["outcome"]) for r in view["ranking"]] == [
        (1, "stages-3", "faster (cleared implausible)"), (None, "warp", "pitch")]
    assert [g["proposal_id"] for g in view["graveyard"]] == ["tile-64"]
    text = lines(render_round(untimed, 1, tmp_path))
    assert ("| 1 | stages-3 r1 (winner) | team-pipeline | faster (cleared implausible) | 1.060x [1.040, 1.080] | 7.693 "
            "| 2 computed | #4 |") in text
    # the measured referee scores the cleared speedup: 5 + 5*log2(1.06) = 5.42 -> 0.5*5.42 + 0.2*10 + 0.3*7
    assert "| measured_speedup | 0.5 | 5.42 | 2.71 | measured |" in text
    assert "- Total computed by judge: 6.81" in text


def test_a_round_where_every_patch_failed_before_timing(tmp_path):
    ledger = Ledger(tmp_path / "ledger.db")
    revision = ledger.submit(proposal("tile-64", "team-tiles", 1, "tiling", (2, 3), "MMA_TILER_MNK = (64, 128, 256)",
                                      old_line="MMA_TILER_MNK = (128, 128, 256)"), "test").revision_id
    r1 = ledger.create_round(TARGET, 1, BASE_1, f"kernels/{TARGET}/submission.py")
    run = ledger.start_run(r1["id"], ["judge", "run"])
    evaluate(ledger, run, r1, None, "unchanged", "compiled and correct", [compiled(56, 38912, 5, "smem", 1, 1), CORRECT], None)
    evaluate(ledger, run, r1, revision, "compile-error", COMPILE_ERROR.summary, [PATCHED, COMPILE_ERROR], None)
    ledger.finish_run(run, "finished")
    text = lines(render_round(ledger, 1, tmp_path))
    assert ("**No winner**: nothing was timed in this round (no proposal reached the timing stage). "
            "Round 2 starts from this round's base unchanged.") in text
    assert "No proposal is ranked or pending: every one was eliminated (see the graveyard)." in text
    assert "- Device: none recorded (evaluations #1, #2)" in text


def test_sizes_votes_and_knobs_are_written_as_the_conventions_state():
    assert fmt_kib({"value": 112640, "base": 38912}) == "110.0 (+72.0)"
    assert fmt_kib({"value": 36504, "base": 38005}) == "35.6 (-1.5)"
    assert fmt_kib({"value": 38912, "base": None}) == "38.0" and fmt_kib(None) == "-"
    assert fmt_votes({"computed": 1, "pending": 1}) == "1 computed, 1 pending"
    assert fmt_votes({"computed": 0, "pending": 2}) == "2 pending" and fmt_votes({"computed": 0, "pending": 0}) == "none"
    changes = [{"knob": "mma_tiler_mnk", "base": [128, 128, 256], "value": [64, 128, 256]},
               {"knob": "swizzle", "base": None, "value": 8}]
    assert fmt_knob_changes(changes) == "mma_tiler_mnk 128x128x256 -> 64x128x256; swizzle none -> 8"
    assert fmt_knob_changes([]) == "none" and fmt_knob_changes(None) == "no base counterpart"


def test_a_stage_result_without_resources_renders_no_resource_table(untimed, tmp_path):
    """A crashed compile child leaves no configuration: no table, no compile-error line, the stage says why."""
    r1 = untimed.round_row(TARGET, 1)
    warp = untimed.submit(proposal("warp", "team-warps", 1, "scheduling", (1.25, 1.4), "NUM_AB_STAGES = 2"), "test").revision_id
    run = untimed.start_run(r1["id"], ["judge", "run"])
    evaluate(untimed, run, r1, warp, "crashed", "compile: child died",  # 4
             [PATCHED, StageResult("compile", "crashed", "child died", 0.5)], None)
    untimed.finish_run(run, "finished")
    text = lines(render_round(untimed, 1, tmp_path))
    warp_section = section(text, "### warp revision 2: warp")
    assert "  - compile (crashed, 0.5 s): child died" in warp_section
    assert not [line for line in warp_section if "Compile" in line]


def test_a_static_rule_this_machine_could_not_run_is_shown_as_such():
    from judge.report.evaluations import static_lines
    from judge.stages.details import RuleResult, StaticConfig, StaticDetail

    rules = [RuleResult("wgmma-waited", True, "ok"), RuleResult("ptxas-clean", True, "ptxas failed on kernel.ptx",
                                                                     ran=False),
             RuleResult("expect-tx-bytes", False, "expect_tx 16384, formula 32768", line=241)]
    detail = StaticDetail(rules=["expect-tx-bytes", "ptxas-clean", "wgmma-waited"],
                          configs=[StaticConfig(signature={"stages": 4}, rules=rules)], layout_checks=[],
                          layout_checks_file=None)
    assert static_lines(detail) == ["rules: wgmma-waited passed, ptxas-clean not run here, expect-tx-bytes FAILED"]


def test_the_clock_table_says_where_the_timed_inputs_were(untimed, tmp_path):
    """Each timed benchmark names its deciding clock, every clock's medians, the audits, and where the timed
    inputs were: shared device memory and the processes per kernel, or separate copies and why."""
    from judge.stages.details import TimedBenchmark, TimingDetail

    r1 = untimed.round_row(TARGET, 1)
    stages3 = untimed.latest_revision("stages-3")["id"]
    run = untimed.start_run(r1["id"], ["judge", "run", "--again"])
    common = dict(base_median_us=100.0, cand_median_us=80.0, speedup=1.25, ci_low=1.24, ci_high=1.26,
                  significant=True, reps=200, clock="gpu", base_us=[100.0] * 3, cand_us=[80.0] * 3,
                  clocks={"call": {"base_median_us": 120.0, "cand_median_us": 100.0, "speedup": 1.2, "reps": 50},
                          "gpu": {"base_median_us": 100.0, "cand_median_us": 80.0, "speedup": 1.25, "reps": 200}},
                  audit={"wall_excess_us": {"call call": -2.0, "gpu call": 1.5}, "replay_ratio": {"base": 1.0, "cand": 1.01}})
    benchmarks = [TimedBenchmark(index=0, label="g=8 k=7168", placement="shared", processes=2, **common),
                  TimedBenchmark(index=1, label="g=8 k=2048", placement="separate (no shared slots: no GPU)",
                                 processes=1, **common)]
    timed = StageResult("timing", "passed", "geomean 1.250x [1.240, 1.260] over 2 benchmarks", 3.0,
                        TimingDetail(benchmarks=benchmarks, geomean=1.25, geomean_ci=[1.24, 1.26]))
    evaluate(untimed, run, r1, stages3, "faster", timed.summary, [PATCHED, CORRECT, timed], None)  # 4
    untimed.finish_run(run, "finished")
    text = lines(render_round(untimed, 1, tmp_path))
    assert "| # | deciding clock | medians per clock, before / after (us) | wall-clock excess (us) | replay, candidate / base | inputs |" in text
    assert "| 0 | gpu | call 120 / 100; gpu 100 / 80.0 | call call -2.0; gpu call +1.5 | 1.01 / 1.0 | shared; 2 processes each |" in text
    assert "| 1 | gpu | call 120 / 100; gpu 100 / 80.0 | call call -2.0; gpu call +1.5 | 1.01 / 1.0 | separate (no shared slots: no GPU); 1 process each |" in text


def test_a_held_result_is_named_with_its_command_until_its_round_closes(untimed, tmp_path):
    """Held as implausible and not cleared: unranked as 'implausible (held)', not in the graveyard, the verdict line
    names the command that clears it, the leaderboard counts it; once round 2 begins it is dead."""
    r1 = untimed.round_row(TARGET, 1)
    stages3 = untimed.latest_revision("stages-3")["id"]
    run = untimed.start_run(r1["id"], ["judge", "run", "--again"])
    evaluate(untimed, run, r1, stages3, "implausible", "geomean 20.000x is past the target's bound of 10x (timing "
             "said faster: geomean 20.000x [19.9, 20.1] over 4 benchmarks); held until a person clears it",  # 4
             [PATCHED, CORRECT, FASTER], None)
    untimed.finish_run(run, "finished")
    text = lines(render_round(untimed, 1, tmp_path))
    assert "| - | stages-3 r1 | team-pipeline | implausible (held) | 1.060x [1.040, 1.080] | 8.575 | 1 computed, 1 pending | #4 |" in text
    assert ("**No winner yet**: stages-3 r1 (evaluation #4) is held as implausible. A person who has checked the "
            "numbers clears a result with `judge clear 4 --note \"why it is real\"` before round 2 starts; it then "
            "stands at its timing's verdict and may win. Otherwise round 2 starts from this round's base unchanged.") in text
    assert ("- Held: a person who has checked the numbers clears it with `judge clear 4 --note \"...\"`, possible until "
            "round 2 starts; until then it cannot win.") in text
    assert not [line for line in section(text, "## Graveyard") if "stages-3" in line]
    board = lines(render_leaderboard(untimed, tmp_path))
    assert [line for line in board if line.startswith("| 1 |")][0].endswith(
        "| none (none faster; 1 held as implausible) | | | - | |")
    untimed.create_round(TARGET, 2, BASE_1, "round 1 base (round 1 had no winner)")
    text = lines(render_round(untimed, 1, tmp_path))
    assert ("**No winner**: stages-3 r1 (evaluation #4) is held as implausible, and nobody cleared it before round 2 "
            "began. Round 2 started from this round's base unchanged.") in text
    assert [line for line in section(text, "## Graveyard") if "stages-3" in line]
