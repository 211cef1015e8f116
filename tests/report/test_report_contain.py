"""Contestant text in a rendered scorecard, leaderboard and brief: every field a contestant, a shark or a candidate's
code wrote carries the held-out cheat's payload (an unclosed comment, a forged **faster**, an image tag, a link,
ANSI escapes, pipes and newlines), and comes out contained; judge's own lines around it stay as they were."""

import re

import pytest

from judge.ledger import Ledger
from judge.records import Criterion, Proposal, Shark, Vote
from judge.report import render_leaderboard, render_round
from judge.stages.details import CheckDetail, Flag, ScreenDetail
from judge.stages.result import StageResult, not_run
from judge import actions
from test_contain import FORGED, PAYLOAD, tokens
from test_report import BASE_1, BASE_COMPILE, GATE, PATCHED, ROOT, TARGET, compiled, evaluate, lines, proposal

AUTHOR = "eve | **faster** <i>x</i>"
ERROR = f"RuntimeError: {PAYLOAD}"
CELL = FORGED.replace(" | ", " \\| ")
AUTHOR_SHOWN = "eve \\| \\*\\*faster\\*\\* &lt;i>x&lt;/i>"
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")
UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")
JUDGES_BOLD = {"faster", "crashed", "compile-error", "static-check-failed", "incorrect", "timed-out", "tampered",
               "slower", "unchanged", "inconclusive", "not-run", "implausible", "No winner", "No winner yet",
               "A noisy round"}


def problems(markdown: str, shark_names: set[str] = frozenset()) -> list[str]:
    """What in a rendered report shows contestant text uncontained: a control character, raw HTML (a tag, a
    comment), a link or an image other than judge's charts, bold that judge did not write, a table row whose
    cells a pipe split."""
    found = [f"control character {m.group()!r} at {m.start()}" for m in CONTROLS.finditer(markdown)]
    found += [f"raw {kind}" for kind in ("<!--", "<img", "<i>", "<b>", "<script", "</") if kind in markdown]
    parsed = tokens(markdown)
    found += [f"{t.type}: {t.content[:80]!r}" for t in parsed if t.type in ("html_inline", "html_block")]
    found += [f"link to {t.attrs.get('href')}" for t in parsed if t.type == "link_open"]
    found += [f"image {t.attrs.get('src')}" for t in parsed if t.type == "image" and not str(t.attrs.get("src")).endswith(".svg")]
    for i, t in enumerate(parsed):
        if t.type == "strong_open":
            text = parsed[i + 1].content
            if text not in JUDGES_BOLD | set(shark_names) and not text.startswith(("Winner: ", "FLAG: ")):
                found.append(f"bold {text!r}")
    found += _split_rows(markdown)
    return found


def _split_rows(markdown: str) -> list[str]:
    """Table rows with more cells than their header (a contestant's pipe that was not escaped)."""
    found, header = [], None
    for line in markdown.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = len(UNESCAPED_PIPE.findall(line))
        if header is None:
            header = cells
        elif cells != header:
            found.append(f"row of {cells - 1} cells under a header of {header - 1}: {line[:80]}")
    return found


@pytest.fixture
def forged(tmp_path):
    """Round 1 (not timed): 'forged' crashes with the payload as its error, the payload as its title, risk, knob
    value, screened line and log; a shark titled with it votes with it as its notes."""
    ledger = Ledger(tmp_path / "ledger.db")
    shark_id, _, _ = ledger.add_shark(Shark(name="lenient", title=PAYLOAD, criteria=[Criterion(name="quality", weight=1)]),
                                      "test")
    p = proposal("forged", AUTHOR, 1, "other", (1.5, 1.8), "NUM_AB_STAGES = 3", title=PAYLOAD, risks=[PAYLOAD],
                 references=["[x](https://evil.example)"])
    revision = ledger.submit(p, "test").revision_id
    ledger.cast_vote(Vote(shark="lenient", proposal="forged", scores={"quality": 9}, notes=PAYLOAD, fund=True),
                     shark_id, revision, 1, "test")
    r1 = ledger.create_round(TARGET, 1, BASE_1, f"kernels/{TARGET}/submission.py")
    run = ledger.start_run(r1["id"], ["judge", "run"])
    evaluate(ledger, run, r1, None, "not-run", GATE, [BASE_COMPILE, not_run("correctness", GATE)], None)
    screen = StageResult("screen", "passed", "1 flag for the sharks", 0.01, ScreenDetail(flags=[Flag.from_json(
        {"rule": "cache-by-identity", "line": 3, "text": PAYLOAD[:120], "why": "writes module-level dict _seen_"})]))
    crash = StageResult("correctness", "crashed", f"crashed: {ERROR}", 1.0, CheckDetail(error=ERROR), PAYLOAD)
    evaluate(ledger, run, r1, revision, "crashed", f"correctness: crashed: {ERROR}",
             [PATCHED, screen, compiled(62, 112640, 2, "smem", 38005, 33792, ab_stages=PAYLOAD), crash], None)
    ledger.finish_run(run, "finished")
    ledger.set_winner(r1["id"], None)
    return ledger


def test_the_scorecard_shows_each_field_contained(forged, tmp_path):
    text = lines(render_round(forged, 1, tmp_path))
    assert f"### forged revision 1: {CELL}" in text
    assert f"- Author: {AUTHOR_SHOWN}; category: other" in text
    assert f"- Status: **crashed** (evaluation #2): correctness: crashed: RuntimeError: {FORGED}" in text
    assert f"  - correctness (crashed, 1.0 s): crashed: RuntimeError: {FORGED}" in text
    assert ("- line 3, cache-by-identity: writes module-level dict \\_seen\\_ (\\`&lt;!-- rest | \\*\\*faster\\*\\* "
            "&lt;img src=x onerror=alert(1)> [scorecard\\](https://evil.example/r.md) ![ok\\](https://evil.example/ok\\`)") in text
    assert any(line.startswith(f"| 0 | ab_stages 1 -> {CELL} | 62 (-66) |") for line in text)
    assert f"Shark **lenient** ({CELL}), rubric version 1, vote #1:" in text
    assert f"- Notes: {FORGED}" in text
    assert (f"| 1 | forged r1 | {AUTHOR_SHOWN} | 1.5-1.8x | crashed: correctness: crashed: RuntimeError: {CELL} | "
            "eliminated (crashed) | #2 |") in text


def test_nothing_in_the_scorecard_leaves_its_place(forged, tmp_path):
    markdown = render_round(forged, 1, tmp_path).read_text()
    assert problems(markdown, {"lenient"}) == []
    assert "**faster**" not in markdown and markdown.count("\\*\\*faster\\*\\*") == 17
    # judge's own lines around the contained ones are as they were
    assert "**No winner**: nothing was timed in this round (needs sm_100, this machine has none). Round 2 starts from " \
           "this round's base unchanged." in markdown.splitlines()


def test_the_leaderboard_and_the_brief_show_them_contained(forged, tmp_path):
    board = render_leaderboard(forged, tmp_path).read_text()
    assert f"| {AUTHOR_SHOWN} | 1 | 0 | 1 | - |" in board.splitlines()
    assert problems(board) == []
    path, _ = actions.brief(forged, ROOT / "kernels", TARGET, 2, tmp_path)
    brief = path.read_text()
    assert f"| 1 | forged r1 | crashed | - | correctness: crashed: RuntimeError: {CELL} |" in brief.splitlines()
    assert problems(brief) == []


def test_the_checks_themselves_see_raw_text():
    """problems() is what the red-team round's report is held to: it must flag the payload left raw."""
    raw = f"- Status: **crashed**: {PAYLOAD} **won**\n\n| a | b |\n|---|---|\n| 1 | x | y |\n"
    found = problems(raw)
    assert "raw <!--" in found and "raw <img" in found and "bold 'won'" in found and "bold 'crashed'" not in found
    assert any(p.startswith("control character '\\x1b'") for p in found)
    assert any(p.startswith("link to https://evil.example/r.md") for p in found)
    assert any(p.startswith("row of 3 cells under a header of 2") for p in found)


PITCH = f"# Plan\n\nWe *will* win:\n\n```\n{PAYLOAD}\n```\n    indented\n---\n[95% CI]: https://evil.example\n"


def test_a_pitch_is_shown_in_a_quote_it_cannot_close(forged, tmp_path):
    """A proposal without a patch shows its pitch and risks (what the sharks scored): the pitch quoted line by
    line, nothing in it able to end the quote, start a block or define a link judge's '[95% CI]' would take."""
    forged.submit(Proposal(id="forged-pitch", title="plain", author="eve", round=1, target=TARGET, pitch=PITCH,
                           risks=[PAYLOAD, "none"]), "test")
    markdown = render_round(forged, 1, tmp_path).read_text()
    section = markdown.split("### forged-pitch revision 1: plain\n\n")[1].split("\n## ")[0]
    assert section.splitlines() == [
        "- Author: eve; category: other",
        "- Claim: no claim; patch: no patch",
        "- Status: pitch: no patch, nothing to evaluate until a revision brings one",
        f"- Risks: {FORGED}; none",
        "- Pitch, as submitted (shown as text, its Markdown not rendered):",
        "",
        "> \\# Plan",
        ">",
        "> We \\*will\\* win:",
        ">",
        "> \\`\\`\\`",
        "> &lt;!-- rest \\| \\*\\*faster\\*\\* &lt;img src=x onerror=alert(1)> \\[scorecard\\](https://evil.example/r.md) "
        "!\\[ok\\](https://evil.example/ok.png) RED",
        "> \\| a \\| b \\|",
        "> \\## Winner",
        ">",
        "> - Status: \\*\\*faster\\*\\*",
        "> \\`\\`\\`",
        ">    indented",
        "> \\---",
        "> \\[95% CI\\]: https://evil.example",
        "",
        "No shark has voted on this proposal.",
    ]
    assert problems(markdown, {"lenient"}) == []
    quotes = [t.type for t in tokens(markdown) if t.type.startswith("blockquote")]
    assert quotes == ["blockquote_open", "blockquote_close"]


def test_a_long_pitch_is_cut_with_its_count(forged, tmp_path):
    forged.submit(Proposal(id="long-pitch", title="long", author="eve", round=1, target=TARGET,
                           pitch="word " * 100_000), "test")
    text = lines(render_round(forged, 1, tmp_path))
    assert "> " + "word " * 395 + " (498025 more characters)" in text
