"""Templates to Markdown files: the round scorecard and the leaderboard, written under a reports folder,
with their charts (judge/report/charts.py) beside them as SVG files the Markdown links."""

from __future__ import annotations

import re
from pathlib import Path

import jinja2

from . import charts
from ..ledger import Ledger
from .formatting import FILTERS
from .leaderboard import leaderboard_view
from .scorecard import round_view


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("judge", "templates"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters.update(FILTERS)
    return env


def render_round(ledger: Ledger, round: int, out_dir: Path, target: str | None = None) -> Path:
    """Write out_dir/round-<N>.md (round-<N>-<target>.md when the ledger has several targets) and its charts."""
    view = round_view(ledger, round, target)
    several = len({r["target"] for r in ledger.rounds()}) > 1
    name = f"round-{round}-{view['targets'][0]['target']}.md" if several and len(view["targets"]) == 1 else f"round-{round}.md"
    drawn = charts.round_charts(view, Path(out_dir))
    return _write(Path(out_dir) / name, _environment().get_template("round.md.j2").render(view=view, charts=drawn))


def render_leaderboard(ledger: Ledger, out_dir: Path) -> Path:
    """Write out_dir/leaderboard.md and its charts."""
    view = leaderboard_view(ledger)
    drawn = charts.leaderboard_charts(view, Path(out_dir))
    return _write(Path(out_dir) / "leaderboard.md",
                  _environment().get_template("leaderboard.md.j2").render(view=view, charts=drawn))


def write_template(template: str, path: Path, **context) -> Path:
    """Render one of judge's templates into `path` (the brief uses this too)."""
    return _write(path, _environment().get_template(template).render(**context))


def _write(path: Path, text: str) -> Path:
    """Write the Markdown with at most one blank line in a row (template blocks leave extra ones)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(re.sub(r"\n{3,}", "\n\n", text).rstrip("\n") + "\n")
    return path


def render_text(template: str, **context) -> str:
    """One of judge's templates rendered to text as the Markdown files hold it (the HTML pages render it too)."""
    return re.sub(r"\n{3,}", "\n\n", _environment().get_template(template).render(**context)).rstrip("\n") + "\n"
