"""Red team, the untimed round: the cheats marked `round: untimed`, which judge decides before timing (a patch,
compile or correctness verdict), run for real in one round per target (tests/redteam.py has the machinery). No
verdict here depends on a clock, so this module runs beside other tests; each cheat is asserted to have been
decided without a timing stage, so that a cheat which reaches timing is moved to tests/test_redteam.py instead of
being judged where other tests load the machine."""

from __future__ import annotations

import time

import pytest

from judge.ledger import Ledger
from redteam import cases, check_verdict, ran, run_redteam_round, targets
from redteam import test_the_round_ran_without_judge_crashing  # noqa: F401  collected here, on this module's rounds


@pytest.fixture(scope="module")
def cpu_round(tmp_path_factory):
    return run_redteam_round("cpu", tmp_path_factory.mktemp("redteam-cpu-untimed"), timed=False)


@pytest.fixture(scope="module")
def vecadd_round(tmp_path_factory):
    return run_redteam_round("vecadd", tmp_path_factory.mktemp("redteam-vecadd-untimed"), timed=False)


@pytest.fixture(scope="module")
def fp8_round(tmp_path_factory):
    return run_redteam_round("fp8", tmp_path_factory.mktemp("redteam-fp8-untimed"), timed=False)


@pytest.mark.parametrize("key, cheat", cases(timed=False))
def test_cheat_decided_before_timing_gets_the_right_verdict(request, key, cheat):
    rr = request.getfixturevalue(f"{key}_round")
    ran(rr, cheat)
    outcome, reason, geomean = rr.verdict(cheat.proposal_id)
    stages = rr.stages[cheat.proposal_id]
    assert "timing" not in stages, (f"{cheat.name} is marked 'round: untimed' but reached the timing stage "
                                    f"({outcome}: {reason}): move it to the timed round")
    check_verdict(f"{cheat.name} ({cheat.cls})", outcome, reason, geomean, cheat.expect, cheat.reason,
                  honest=cheat.honest_timing, identical=cheat.honest_timing)


# ---- what the round's report shows of them --------------------------------------------------------------

# Cheats whose crash message, error line or output is written to rewrite or swamp the scorecard.
TEXT_CHEATS = ("text_in_error", "text_in_import_error", "huge_error_line", "huge_error_lines", "flood_output",
               "flood_output_lines")
REPORT_SECONDS = 60  # judge's renderer on a 2-core VM: 3.6 s for the round with a 16 MiB error stored whole
ROW_BYTES = 256 << 10  # what the ledger may hold of one evaluation's text: its reason, summaries, details, log tails


@pytest.mark.parametrize("key", targets())
def test_the_report_shows_what_candidates_wrote_contained(request, key, tmp_path):
    """judge's own renderer on the round's ledger: in seconds, no control character, raw tag or comment, link,
    bold judge did not write or split row; the forged text there only as text; the ledger small."""
    from judge.report import render_round
    from test_report_contain import problems

    rr = request.getfixturevalue(f"{key}_round")
    if not {"text_in_error", "huge_error_line", "flood_output"} <= set(rr.cheats_by_name):
        pytest.skip("the text cheats were not selected")
    ledger = Ledger(rr.ledger_path)
    try:
        started = time.monotonic()
        markdown = render_round(ledger, 1, tmp_path, target=rr.main_target).read_text()
        assert time.monotonic() - started < REPORT_SECONDS
        sizes = {row["id"]: row["n"] for row in ledger.query(
            "select e.id, length(e.reason) + sum(length(s.summary) + length(s.detail_json) + length(s.log_tail)) as n "
            "from evaluations e join stage_results s on s.evaluation_id = e.id group by e.id")}
    finally:
        ledger.close()
    assert problems(markdown) == []
    assert [line for line in markdown.splitlines() if "**faster**" in line and not line.startswith("- Status: **faster**")] == []
    assert "\\*\\*faster\\*\\* (evaluation #1)" in markdown and "&lt;img src=x onerror=alert(1)>" in markdown
    assert len(markdown) < 2 << 20
    for name in TEXT_CHEATS:
        cheat = rr.cheats_by_name.get(name)
        if cheat is not None:
            evaluation = rr.results[cheat.proposal_id]["id"]
            assert sizes[evaluation] < ROW_BYTES, f"{name}: {sizes[evaluation]} characters of text in the ledger"
