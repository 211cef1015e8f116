"""What a kernel stage says while it works: `judge run`'s live line per candidate, its log lines and its --json
events (judge.cli.progress).

A stage is handed a `Progress`, a callable it calls with keyword fields: the correctness stage as each case
starts (`stage="correctness", case=i, cases=n, seconds=s`), the timing stage as each benchmark of each process
pair starts (`stage="timing", pair=k, max_pairs=m, benchmark=i, benchmarks=n, label=..., seconds=s`), the base's
check before its first case as the oracle sizes each ranked benchmark for the memory plan (`stage="sizing",
benchmark=i, benchmarks=n, label=..., seconds=s`: it runs the reference once on each); counts
from 1, seconds since the stage began. Never per call: a timed benchmark makes hundreds. The dispatch binds it
to the candidate and the round sends it on as a `progress` event (judge.dispatch, judge.rounds `on_event`).
"""

from __future__ import annotations

from typing import Callable

Progress = Callable[..., None]


def quiet(**_info) -> None:
    """The progress of a stage nobody watches."""
