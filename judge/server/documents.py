"""The scorecards, the leaderboard and the brief as the server hands them out: the Markdown files `judge report` and
`judge brief` write (rendered into a scratch folder and read back, so they are those files byte for byte), their
charts, their views, and the HTML pages made from the same views and templates."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Optional

from .. import actions
from ..report import charts
from ..errors import JudgeError, NotFound
from ..ledger import Ledger
from ..report import leaderboard_view, render_leaderboard, render_round, round_view
from ..report.html import read_charts, render_page
from ..wire import WireProfile


def _svgs(directory: Path) -> dict[str, str]:
    return {name: data.decode("utf-8") for name, data in read_charts(directory).items()}


def scorecard(ledger: Ledger, round: Optional[int], target: Optional[str]) -> dict:
    """A round's scorecard as `judge report --round N [--target T]` writes it: file name, Markdown, charts, view."""
    if round is None:
        round = ledger.latest_round_number()
        if round is None:
            raise JudgeError("no round has run yet (run one with 'judge run')")
    with tempfile.TemporaryDirectory(prefix="judge-scorecard-") as scratch:
        path = render_round(ledger, round, Path(scratch), target=target)
        return {"name": path.name, "markdown": path.read_text(), "charts": _svgs(Path(scratch)),
                "round": round_view(ledger, round, target=target)}


def leaderboard(ledger: Ledger) -> dict:
    """The leaderboard as `judge report --leaderboard` writes it."""
    with tempfile.TemporaryDirectory(prefix="judge-leaderboard-") as scratch:
        path = render_leaderboard(ledger, Path(scratch))
        return {"name": path.name, "markdown": path.read_text(), "charts": _svgs(Path(scratch)),
                "leaderboard": leaderboard_view(ledger)}


def brief(ledger: Ledger, kernels: Path, target: Optional[str], round: Optional[int]) -> dict:
    """A round's brief as `judge brief` writes it."""
    with tempfile.TemporaryDirectory(prefix="judge-brief-") as scratch:
        path, view = actions.brief(ledger, kernels, target, round, Path(scratch))
        if view.get("profile") is not None:  # the base's profile crosses as its declared model
            view["profile"] = WireProfile.model_validate(view["profile"]).model_dump()
        return {"name": path.name, "markdown": path.read_text(), "brief": view}


# pages --------------------------------------------------------------------------------------------------------


def nav(ledger: Ledger) -> list[tuple[str, str]]:
    """The frame's links: the contest, the leaderboard, each round that ran, each target's brief."""
    rows = ledger.rounds()
    links = [("index.html", "contest"), ("leaderboard.html", "leaderboard")]
    links += [(f"round-{n}.html", f"round {n}") for n in sorted({r["round"] for r in rows})]
    links += [(f"brief-{t}.html", f"brief: {t}") for t in _targets(ledger)]
    return links


def _targets(ledger: Ledger) -> list[str]:
    return sorted({r["target"] for r in ledger.rounds()} | {r["target"] for r in ledger.current_revisions()})


def round_page(ledger: Ledger, round: int) -> tuple[str, dict[str, bytes]]:
    """Round N's scorecard page (every target of it) and the charts it shows."""
    if not any(r["round"] == round for r in ledger.rounds()):
        raise NotFound(f"round {round} has not run (see the contest's page)")
    view = round_view(ledger, round)
    with tempfile.TemporaryDirectory(prefix="judge-page-") as scratch:
        drawn = charts.round_charts(view, Path(scratch))
        page = render_page("round.md.j2", view, drawn, f"judge: round {round}", nav(ledger))
        return page, read_charts(Path(scratch))


def leaderboard_page(ledger: Ledger) -> tuple[str, dict[str, bytes]]:
    view = leaderboard_view(ledger)
    with tempfile.TemporaryDirectory(prefix="judge-page-") as scratch:
        drawn = charts.leaderboard_charts(view, Path(scratch))
        page = render_page("leaderboard.md.j2", view, drawn, "judge: leaderboard", nav(ledger))
        return page, read_charts(Path(scratch))


def brief_page(ledger: Ledger, kernels: Path, target: str) -> str:
    """The brief of a target's next round."""
    if target not in _targets(ledger):
        raise NotFound(f"target '{target}' has no proposals or rounds in this contest")
    with tempfile.TemporaryDirectory(prefix="judge-page-") as scratch:
        _, view = actions.brief(ledger, kernels, target, None, Path(scratch))
    return render_page("brief.md.j2", view, {}, f"judge: brief for round {view['round']} of {target}", nav(ledger))


def proposal_page(ledger: Ledger, proposal_id: str) -> str:
    """One proposal's page, at a link that stays (/pages/proposal-ID.html): its revisions, evaluations, stages and
    votes, as `judge show` has them; a proposal its reader may not read is not found."""
    view = actions.show_proposal(ledger, proposal_id)
    return render_page("show.md.j2", view, {}, f"judge: proposal {proposal_id}", nav(ledger))


def index_page(ledger: Ledger) -> str:
    """The contest's front page: each round's winner, and links to every page."""
    rounds = []
    for row in ledger.rounds():
        winner = ledger.revision(row["winner_revision_id"]) if row["winner_revision_id"] else None
        rounds.append({"round": row["round"], "target": row["target"], "winner": winner["proposal_id"] if winner else None,
                       "author": winner["author"] if winner else None})
    view = {"targets": [{"target": t} for t in _targets(ledger)], "rounds": rounds}
    return render_page("index.md.j2", view, {}, "judge: the contest", nav(ledger))
