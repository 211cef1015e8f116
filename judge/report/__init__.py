"""Markdown scorecards of a round and the leaderboard across rounds, read back from the ledger.

One job per module:
- formatting.py: how numbers and text are written (the templates' filters);
- evaluations.py, scorecard.py, leaderboard.py: the views, JSON-serialisable data built from ledger rows
  (every SQL query they need is a judge.ledger.Ledger method), each piece carrying the ids of its rows;
- conventions.py: the conventions a report states, only those that apply to what it shows;
- rendering.py: templates (judge/templates/) to Markdown files.
The templates only lay the views out, so the Markdown and `--json` always agree.
"""

from .formatting import (
    fmt_claim,
    fmt_code,
    fmt_delta,
    fmt_device,
    fmt_kib,
    fmt_knob_changes,
    fmt_pct,
    fmt_speedup,
    fmt_us,
    fmt_votes,
    fmt_x,
    signature_label,
)
from .leaderboard import leaderboard_view
from .rendering import render_leaderboard, render_round
from .scorecard import round_view

__all__ = [
    "fmt_claim",
    "fmt_code",
    "fmt_delta",
    "fmt_device",
    "fmt_kib",
    "fmt_knob_changes",
    "fmt_pct",
    "fmt_speedup",
    "fmt_us",
    "fmt_votes",
    "fmt_x",
    "leaderboard_view",
    "render_leaderboard",
    "render_round",
    "round_view",
    "signature_label",
]
