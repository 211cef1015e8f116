"""The peer's evaluation in a round: the target's existing implementation (judge.toml [peer]) timed against the
round's base exactly as a candidate is, once per round, so reports can say where the base stands against it."""

from __future__ import annotations

from typing import Optional

from .stages.job import Job
from .workspaces import fresh
from .ledger import now, sha256
from .ledger.evaluations import PEER
from .noise import default_floor
from .records import Outcome
from .verdicts import decide

def evaluate_peer(run) -> Optional[object]:
    """Correctness and timing of the peer against this round's base; nothing where the target names no peer,
    where the base did not pass, or where this round already has a standing peer evaluation."""
    target = run.target
    if target.peer is None:
        return None
    base = run.ledger.latest_evaluation(run.round_row["id"], None, subject="base")
    if base is None or base["outcome"] != Outcome.UNCHANGED.value:  # the base passed every stage it ran
        return None
    if not run.stale(run.ledger.peer_evaluation(run.round_row["id"])):
        return None
    source = (target.path / target.peer.file).read_text()
    workspace = run.root / "peer"
    fresh(workspace)
    target.assemble(workspace, source)
    started = now()
    run.on_event("stage", proposal=f"(peer {target.peer.name})", stage="correctness and timing")
    for job, stages, place in run.dispatch.evaluate([Job(None, "(peer)", source, workspace)]):
        outcome, reason = decide(stages, default_floor(run.target))
        # The reports read the peer's name from its reason: the ledger has no other column for it.
        return run.record(None, sha256(source), stages, started, (outcome, f"{target.peer.name}: {reason}"),
                          place=place, subject=PEER)
    return None
