"""judge brief: the brief for the next round, after three compounding rounds on the CPU with the stage fakes:
exact lines of the base, its times against the speed of light, what was tried, what is open, the rules."""

from __future__ import annotations

import hashlib
import math
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from fakestages import FakeStages

from judge.cli.main import main
from judge.ledger import Ledger
from judge.records import Proposal
from judge.rounds import Settings, run_round
from judge.schedule import base_for
from judge.targets import load_target

FIXTURE = Path(__file__).parent / "fixtures" / "axpy"


def knob_patch(base: str, old: str, new: str, verdict: str) -> str:
    lines = base.splitlines()
    i = lines.index(old)
    return (f"--- a/submission.py\n+++ b/submission.py\n@@ -{i},3 +{i},4 @@\n {lines[i - 1]}\n-{old}\n+{new}\n"
            f"+# verdict: {verdict}\n {lines[i + 1]}\n")


@pytest.fixture
def three_rounds(tmp_path):
    """Round 1: b wins (1.25x), a is slower; round 2, on round 1's base + b: c wins (1.10x), d does not
    compile, e is a pitch; round 3, on round 2's base + c: nothing faster (f unchanged)."""
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    os.symlink(FIXTURE, kernels / "axpy")
    ledger = Ledger(tmp_path / "ledger.db")
    settings = Settings(kernels_dir=kernels, work_dir=tmp_path / "work", cache_dir=tmp_path / "cache",
                        stages=FakeStages())
    target = load_target(kernels / "axpy")

    def submit(pid, round, knob, verdict):
        base, _ = base_for(ledger, target, round)
        patch = knob_patch(base, knob[0], knob[1], verdict) if verdict else None
        ledger.submit(Proposal(id=pid, title=f"{pid} title", author=f"team-{pid}", round=round, target="axpy",
                               pitch="why", patch=patch), "test")

    submit("a", 1, ("SCALE = 2.0", "SCALE = 2.0  # a"), "speedup 0.8")
    submit("b", 1, ("CHUNKS = 1", "CHUNKS = 4"), "speedup 1.25")
    summaries = [run_round(ledger, 1, settings=settings)[0]]
    submit("c", 2, ("SCALE = 2.0", "SCALE = 2.0  # c"), "speedup 1.10")
    submit("d", 2, ("SCALE = 2.0", "SCALE = 2.0  # d"), "compile-error")
    submit("e", 2, None, None)
    summaries.append(run_round(ledger, 2, settings=settings)[0])
    # (the fakes read the first `# verdict:` line of the file: f's goes above the ones its base carries)
    submit("f", 3, ("SCALE = 2.0  # c", "SCALE = 2.0  # f"), "speedup 1.0")
    summaries.append(run_round(ledger, 3, settings=settings)[0])
    return ledger, kernels, tmp_path, summaries


def test_three_rounds_compound(three_rounds):
    ledger, kernels, _, summaries = three_rounds
    assert [s.winner for s in summaries] == ["b", "c", None]
    assert [s.base_origin for s in summaries][1:] == ["round 1 base + winner b r1", "round 2 base + winner c r1"]
    source, origin = base_for(ledger, load_target(kernels / "axpy"), 4)
    assert origin == "round 3 base (round 3 had no winner)"
    assert "CHUNKS = 4\n" in source and "SCALE = 2.0  # c\n" in source


def test_the_brief_for_round_4_in_markdown(three_rounds):
    ledger, kernels, tmp_path, _ = three_rounds
    result = CliRunner().invoke(main, ["--ledger", str(tmp_path / "ledger.db"), "--kernels", str(kernels), "brief",
                                       "--out", str(tmp_path / "reports")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.output == f"{tmp_path / 'reports' / 'brief-round-4-axpy.md'}\n"
    lines = (tmp_path / "reports" / "brief-round-4-axpy.md").read_text().splitlines()
    assert lines[0] == "# Brief: round 4 of axpy"
    assert "- Where it comes from: round 3 base (round 3 had no winner)" in lines
    # round 3 had no winner: the base's own times, as round 3 measured them ("before")
    assert "| 0 | size=1048576 | 100 | 2.00 | 2.0% |" in lines
    assert "| 1 | size=4194304 | 200 | 8.00 | 4.0% |" in lines
    tried = lines[lines.index("## What was tried") + 3:lines.index("## Still open") - 1]
    assert tried == [
        "|---:|---|---|---:|---|",
        "| 1 | a r1 | slower | 0.800x | geomean 0.800x [0.796, 0.804] over 2 benchmarks |",
        "| 1 | b r1 (winner) | faster | 1.250x | geomean 1.250x [1.244, 1.256] over 2 benchmarks |",
        "| 2 | c r1 (winner) | faster | 1.100x | geomean 1.100x [1.095, 1.105] over 2 benchmarks |",
        "| 2 | d r1 | compile-error | - | DSLUserCodeError: unsupported tile (submission.py:7) |",
        "| 3 | f r1 | unchanged | 1.000x | geomean 1.000x [0.995, 1.005] over 2 benchmarks |",
    ]
    # e is a pitch of round 2, which closed when round 3 began: it can no longer run there
    assert "| e r1 | 2 | team-e | pitch (round 2 is closed: a new revision for round 4 is judged afresh) | e title |" in lines
    sha = hashlib.sha256(base_for(ledger, load_target(kernels / "axpy"), 4)[0].encode()).hexdigest()
    assert lines[lines.index("## The base") + 2:lines.index("## The base") + 5] == [
        f"- Kernel file: `submission.py` (16 lines), sha256 {sha[:12]}",
        "- Where it comes from: round 3 base (round 3 had no winner)",
        "- Get it: `judge base --target axpy --round 4 --out submission.py` writes this exact source (its sha256 is the "
        "one above); make your patch against it",
    ]
    rules = lines[lines.index("## The rules") + 6:]
    assert rules == [
        "- Rounds: a proposal for round 4 is taken until the round starts (a new revision replaces the last one); after "
        "that it is refused as late, and proposals go to round 5",
        "- Architecture any; the verdict's clock: gpu; faster needs a geomean of 1.010x or more and slower 0.990x or "
        "less, with its 95% interval clear of 1: the noise floor is 1.0%, the target's minimum effect (no A/A control "
        "has raised it) (from the target's controls so far; the round's own A/A control, run first, adds one more "
        "unless an earlier control or calibration timed this very base on the same device)",
        "- Correctness: every test twice and every benchmark shape once, on secret seeds, rtol 1e-05, atol 1e-06",
        "- Time limits: compile 300 s, correctness 300 s, timing 600 s",
        "- A geomean past 10.0x, or a time below the speed of light, is held as implausible until a person clears it "
        "(`judge clear`), which is possible only until the target's next round starts",
    ]


def test_the_brief_after_a_winner_shows_the_winners_times_and_json(three_rounds):
    ledger, kernels, tmp_path, _ = three_rounds
    result = CliRunner().invoke(main, ["--ledger", str(tmp_path / "ledger.db"), "--kernels", str(kernels), "brief",
                                       "--round", "3", "--json", "--out", str(tmp_path / "reports")],
                                catch_exceptions=False)
    brief = json.loads(result.stdout)["brief"]
    assert brief["base"]["origin"] == "round 2 base + winner c r1"
    # round 3's base is round 2's winner: its times are c's "after" times (100 / 1.1, 200 / 1.1)
    assert [round(b["median_us"], 3) for b in brief["benchmarks"]] == [90.909, 181.818]
    assert [o["proposal"] for o in brief["open"]] == ["e"]
    assert [t["proposal"] for t in brief["tried"]] == ["a", "b", "c", "d"]  # round 3's f is not history yet


def test_the_brief_needs_a_target_when_the_ledger_has_several(tmp_path):
    ledger = Ledger(tmp_path / "ledger.db")
    for target in ("axpy", "vecadd_cpu"):
        ledger.submit(Proposal(id=f"p-{target.replace('_', '-')}", title="t", author="x", round=1, target=target, pitch="why"), "test")
    result = CliRunner().invoke(main, ["--ledger", str(tmp_path / "ledger.db"), "brief"])
    assert (result.exit_code, result.output) == (
        2, "error: the ledger has 2 targets (axpy, vecadd_cpu): name one with --target, e.g. --target axpy\n")


def test_the_brief_lists_the_calls_a_patch_may_not_add(tmp_path):
    ledger = Ledger(tmp_path / "ledger.db")
    ledger.submit(Proposal(id="p", title="t", author="x", round=1, target="fp8_group_gemm_sm90", pitch="why"), "test")
    kernels = Path(__file__).resolve().parents[1] / "kernels"
    result = CliRunner().invoke(main, ["--ledger", str(tmp_path / "ledger.db"), "--kernels", str(kernels), "brief",
                                       "--json", "--out", str(tmp_path / "reports")], catch_exceptions=False)
    brief = json.loads(result.stdout)["brief"]
    peer = "the peer's op: the contest is to beat it, not to call it"
    own = "torch's own grouped GEMM: the contest is to write the kernel, not to call one"
    assert brief["rules"]["forbidden_calls"] == [{"call": "torch._scaled_grouped_mm", "why": peer},
                                                 {"call": "torch._grouped_mm", "why": own}]
    assert list(brief["rules"]["outcomes"])[:4] == ["patch-failed", "compile-error", "static-check-failed", "forbidden-call"]
    lines = Path(json.loads(result.stdout)["path"]).read_text().splitlines()
    start = lines.index("- Calls a patch may not add (the screen's verdict `forbidden-call`, however the call is spelled: "
                        "an alias, `from ... import`, `torch.ops.aten`, `getattr` with a constant name; a name computed "
                        "at run time is flagged for the sharks):")
    assert lines[start + 1:start + 3] == [f"  - `torch._scaled_grouped_mm`: {peer}", f"  - `torch._grouped_mm`: {own}"]


def test_a_target_without_forbidden_calls_has_no_such_line(three_rounds):
    ledger, kernels, tmp_path, _ = three_rounds
    result = CliRunner().invoke(main, ["--ledger", str(tmp_path / "ledger.db"), "--kernels", str(kernels), "brief",
                                       "--json", "--out", str(tmp_path / "reports")], catch_exceptions=False)
    assert json.loads(result.stdout)["brief"]["rules"]["forbidden_calls"] == []
    assert "Calls a patch may not add" not in Path(json.loads(result.stdout)["path"]).read_text()


def test_one_noise_floor_in_the_brief_its_json_and_the_scorecard(tmp_path):
    """A target's min_effect (vecadd_cpu's 0.35) is the floor everywhere a threshold is stated: the brief's rule, its
    JSON outcomes, the scorecard's Meaning lines and its conventions (judge/noise.py owns the words)."""
    import shutil

    kernels = tmp_path / "kernels"
    shutil.copytree(FIXTURE, kernels / "axpy")
    toml = kernels / "axpy" / "judge.toml"
    toml.write_text("min_effect = 0.35\n" + toml.read_text())
    ledger = Ledger(tmp_path / "ledger.db")
    target = load_target(kernels / "axpy")
    base, _ = base_for(ledger, target, 1)
    for pid, verdict in (("a", "speedup 1.25"), ("b", "speedup 1.5")):
        ledger.submit(Proposal(id=pid, title=pid, author="t", round=1, target="axpy", pitch="why",
                               patch=knob_patch(base, "SCALE = 2.0", f"SCALE = 2.0  # {pid}", verdict)), "test")
    settings = Settings(kernels_dir=kernels, work_dir=tmp_path / "work", cache_dir=tmp_path / "cache", stages=FakeStages())
    [summary] = run_round(ledger, 1, settings=settings)
    assert [(v.proposal_id, v.outcome) for v in summary.verdicts] == [("a", "unchanged"), ("b", "faster")]

    def judge(*args):
        result = CliRunner().invoke(main, ["--ledger", str(tmp_path / "ledger.db"), "--kernels", str(kernels), *args,
                                           "--out", str(tmp_path / "reports")], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.stdout

    brief = json.loads(judge("brief", "--json"))["brief"]
    words = "35.0%, the target's minimum effect (no A/A control has raised it)"
    assert brief["rules"]["floor"]["words"] == words
    assert brief["rules"]["outcomes"]["faster"] == ("correct, and faster than the base: the geomean's 95% interval "
                                                    "lies above 1 and the geomean is 1.350x or more (the noise floor, 35.0%)")
    assert brief["rules"]["outcomes"]["slower"].endswith("the geomean is 0.741x or less (the noise floor, 35.0%)")
    assert brief["rules"]["outcomes"]["unchanged"].endswith("or the geomean is between 0.741x and 1.350x (within the "
                                                            "noise floor, 35.0%)")
    assert brief["rules"]["outcomes"]["inconclusive"] == (
        "correct, and no verdict either way after the most process pairs judge runs: the geomean's 95% interval "
        "reaches past the noise floor (35.0%) on one side and across 1 on the other")
    markdown = (tmp_path / "reports" / "brief-round-2-axpy.md").read_text()
    assert ("faster needs a geomean of 1.350x or more and slower 0.741x or less, with its 95% interval clear of 1: "
            f"the noise floor is {words}") in markdown
    card = Path(json.loads(judge("report", "--round", "1", "--json"))["path"]).read_text().splitlines()
    assert [line for line in card if line.startswith("- Meaning: ")] == [
        f"- Meaning: {brief['rules']['outcomes']['unchanged']}", f"- Meaning: {brief['rules']['outcomes']['faster']}"]
    assert f"- noise floor of axpy: {words}: faster from 1.350x, slower from 0.741x." in card
    assert not [line for line in card + markdown.splitlines() if "1%" in line or "1.01x" in line or "1.0%" in line]


def test_the_briefs_threshold_is_the_floor_the_next_verdict_will_use(tmp_path):
    """Not the target's minimum where the target's A/A controls raised it: the served contest of 2026-11-27 read
    'faster needs 1.010x' while its round's control had set 23.2%. The same number (judge.noise.next_floor) as the
    one a round recomputes from those controls (judge.control.round_floor)."""
    from judge.noise import MIN_PAIRS, controls_floor, floor_from, next_floor

    kernels = tmp_path / "kernels"
    kernels.mkdir()
    os.symlink(FIXTURE, kernels / "axpy")
    ledger = Ledger(tmp_path / "ledger.db")
    assert next_floor(ledger, "axpy", 0.01).words() == "1.0%, the target's minimum effect (no A/A control has raised it)"
    logs = [[0.20, -0.15, 0.05], [0.02, 0.01, -0.01]]
    for device, pairs in (("Old CPU", [[0.001, 0.0, -0.001]]), ("Wild CPU", logs)):
        ledger.record_calibration("axpy", device, None, "sha", {"controls": [
            {"pair_geomeans": [math.exp(x) for x in p]} for p in pairs]}, ["judge", "calibrate"])
    expected = floor_from(logs, 0.01, MIN_PAIRS, "Wild CPU")
    assert next_floor(ledger, "axpy", 0.01) == controls_floor(ledger, "axpy", 0.01, "Wild CPU") == expected
    assert expected.source == "controls" and expected.effect > 0.2
    result = CliRunner().invoke(main, ["--ledger", str(tmp_path / "ledger.db"), "--kernels", str(kernels), "brief",
                                       "--target", "axpy", "--json", "--out", str(tmp_path / "reports")],
                           catch_exceptions=False)
    rules = json.loads(result.stdout)["brief"]["rules"]
    assert (rules["floor"]["words"], rules["floor"]["faster_at"]) == (expected.words(), expected.faster_at)
    assert rules["outcomes"]["faster"].endswith(f"{expected.faster_at:.3f}x or more (the noise floor, {expected.percent()})")
    text = Path(json.loads(result.stdout)["path"]).read_text()
    assert (f"faster needs a geomean of {expected.faster_at:.3f}x or more and slower {expected.slower_at:.3f}x or less, "
            f"with its 95% interval clear of 1: the noise floor is {expected.words()} (from the target's controls so far; "
            "the round's own A/A control, run first, adds one more unless an earlier control or calibration timed "
            "this very base on the same device)") in text
