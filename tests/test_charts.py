"""Charts beside the reports: the SVG bytes of a two-round ledger match the stored files, drawing twice gives the
same bytes, the Markdown links exactly what was drawn, and a report without matplotlib says so once.

The stored SVGs were drawn with the matplotlib version MATPLOTLIB names (other versions lay text out otherwise).
To redraw them after a deliberate change: JUDGE_WRITE_CHART_FIXTURES=1 pytest tests/test_charts.py, then look at them.
"""

import os
from pathlib import Path

import pytest
from test_report import (  # noqa: F401 (ledger: the fixture, round 1 timed on a B200, round 2 not run)
    B200,
    CORRECT,
    PATCHED,
    TARGET,
    compiled,
    evaluate,
    ledger,
    lines,
    timing,
)

from judge.report import charts
from judge.report import render_leaderboard, render_round

FIXTURES = Path(__file__).parent / "fixtures" / "charts"
MATPLOTLIB = "3.11.2"
TIMES_1 = f"round-1-{TARGET}-times.svg"
CLAIMS_1 = f"round-1-{TARGET}-claims.svg"
TIMES_2 = f"round-2-{TARGET}-times.svg"
CLAIMS_2 = f"round-2-{TARGET}-claims.svg"
BOARD = f"leaderboard-{TARGET}.svg"
# round 2's base is round 1's winner: its times are what round 1 measured the winner at
ROUND_2 = timing([(350.0, 311.0), (352.5, 318.0), (163.0, 143.0), (147.0, 132.0)],
                 [(1.110, 1.140), (1.095, 1.120), (1.125, 1.155), (1.100, 1.130)], 1.12496, [1.115, 1.135])


@pytest.fixture
def timed(ledger):  # noqa: F811 (the fixture imported above)
    """The report tests' ledger with round 2 run again on a B200: tile-64-rows r2 timed faster, the winner."""
    r2 = ledger.round_row(TARGET, 2)
    tile2 = ledger.latest_revision("tile-64-rows")["id"]
    run = ledger.start_run(r2["id"], ["judge", "run", "--round", "2"])
    tile2_compile = compiled(136, 97280, 2, "smem", 950, 1900, epilogue_store="tma", mma_tiler_mnk=[128, 64, 256])
    evaluate(ledger, run, r2, tile2, "faster", ROUND_2.summary, [PATCHED, tile2_compile, CORRECT, ROUND_2], B200)
    ledger.finish_run(run, "finished")
    ledger.set_winner(r2["id"], tile2)
    return ledger


def render_all(ledger, out: Path) -> dict[str, Path]:  # noqa: F811
    return {"round-1": render_round(ledger, 1, out), "round-2": render_round(ledger, 2, out),
            "leaderboard": render_leaderboard(ledger, out)}


def test_the_charts_match_the_stored_files(timed, tmp_path):
    pytest.importorskip("matplotlib")
    render_all(timed, tmp_path)
    drawn = sorted(p.name for p in tmp_path.glob("*.svg"))
    assert drawn == sorted([TIMES_1, CLAIMS_1, TIMES_2, CLAIMS_2, BOARD])
    if os.environ.get("JUDGE_WRITE_CHART_FIXTURES"):
        FIXTURES.mkdir(parents=True, exist_ok=True)
        for name in drawn:
            (FIXTURES / name).write_bytes((tmp_path / name).read_bytes())
    import matplotlib

    differ = [name for name in drawn if (tmp_path / name).read_bytes() != (FIXTURES / name).read_bytes()]
    assert differ == [], f"drawn with matplotlib {matplotlib.__version__}; the stored charts with {MATPLOTLIB}"


def test_drawing_twice_gives_the_same_bytes(timed, tmp_path):
    """Whatever the settings around it (a matplotlibrc, an rc_context), and leaving them as they were."""
    matplotlib = pytest.importorskip("matplotlib")
    render_all(timed, tmp_path / "a")
    with matplotlib.rc_context({"font.family": "serif", "font.size": 14, "svg.fonttype": "path", "lines.linewidth": 4}):
        before = dict(matplotlib.rcParams)
        render_all(timed, tmp_path / "b")
        assert dict(matplotlib.rcParams) == before
    for path in sorted((tmp_path / "a").iterdir()):
        assert path.read_bytes() == (tmp_path / "b" / path.name).read_bytes(), path.name
    svg = (tmp_path / "a" / TIMES_1).read_text()
    assert "<dc:date>" not in svg and "Matplotlib" not in svg  # no date, no creator


def test_the_markdown_links_each_chart_beside_what_it_shows(timed, tmp_path):
    pytest.importorskip("matplotlib")
    paths = render_all(timed, tmp_path)
    text = lines(paths["round-1"])
    link = (f"![Round 1, {TARGET}: median time per benchmark of the base and of each measured proposal, with the speed "
            f"of light]({TIMES_1})")
    start = text.index(link)
    assert text[start - 2].startswith("**Winner: tma-store-epilogue revision 1**")
    assert text[start + 2] == ("The base's time is the median of its medians timed beside each measured proposal; the "
                               "proposals' tables below hold every number.")
    claims = f"![{TARGET}: claimed speedup against measured geomean, per contestant]({CLAIMS_1})"
    assert text[text.index(claims) - 2] == '"landed" compares the measured geomean with the claimed range.'
    assert [line for line in text if line.startswith("![")] == [link, claims]
    assert f"]({TIMES_2})" in paths["round-2"].read_text() and f"]({CLAIMS_2})" in paths["round-2"].read_text()
    board = lines(paths["leaderboard"])
    image = f"![{TARGET}: the base's time per benchmark and its speedup over round 1's base, across rounds]({BOARD})"
    assert board[board.index(image) - 2].startswith("| 2 | round 1 base + winner tma-store-epilogue r1 |")
    assert not [line for line in text + board if "charts not drawn" in line]


def test_a_round_where_nothing_was_timed_has_no_times_chart(ledger, tmp_path):  # noqa: F811
    pytest.importorskip("matplotlib")
    text = lines(render_round(ledger, 2, tmp_path))  # round 2 not run: nothing timed
    assert not (tmp_path / TIMES_2).exists()
    assert [line for line in text if line.startswith("![")] == [  # round 1's claims still show
        f"![{TARGET}: claimed speedup against measured geomean, per contestant]({CLAIMS_2})"]
    board = lines(render_leaderboard(ledger, tmp_path))
    assert f"]({BOARD})" in " ".join(board)  # round 1 was timed


def test_without_matplotlib_the_reports_render_and_say_so_once(timed, tmp_path, monkeypatch):
    monkeypatch.setattr(charts, "available", lambda: False)
    paths = render_all(timed, tmp_path)
    assert list(tmp_path.glob("*.svg")) == []
    for path in paths.values():
        text = lines(path)
        assert [line for line in text if "charts not drawn" in line] == [
            "- charts not drawn: matplotlib is not installed" if path.name != "leaderboard.md"
            else "charts not drawn: matplotlib is not installed"]
        assert not [line for line in text if line.startswith("![")]


def test_nothing_due_nothing_said(tmp_path, monkeypatch):
    """A ledger where nothing was measured: no chart is due, so a missing matplotlib goes unmentioned."""
    from judge.ledger import Ledger

    monkeypatch.setattr(charts, "available", lambda: False)
    empty = Ledger(tmp_path / "ledger.db")
    assert "charts not drawn" not in render_leaderboard(empty, tmp_path).read_text()


def test_a_contestants_name_is_drawn_as_text(tmp_path):
    """An author that matplotlib would read as mathtext (and stop on), or hide from the legend with its leading
    underscore, is drawn as written; controls and ANSI escapes, which SVG cannot hold, are gone."""
    row = {"round": 1, "proposal_id": "p", "revision": 1, "claim": [1.1, 1.2], "geomean": 1.15, "geomean_ci": [1.1, 1.2]}
    authors = [{"author": name, "inside": 1, "above": 0, "below": 0, "rows": [row]}
               for name in ("$\\frac{1}{0$ \x1b[31mred\x07", "_hidden")]
    svg = charts.claims_chart(tmp_path / "claims.svg", "claims", authors).read_text()
    assert "$\\frac{1}{0$ red: 1 inside, 0 above, 0 below" in svg
    assert " _hidden: 1 inside, 0 above, 0 below" in svg
    assert "\x1b" not in svg and "\x07" not in svg
