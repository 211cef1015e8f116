"""What the CLI's commands do, as library calls: submit, add sharks, vote, look things up.

Each write checks everything first and then writes in one transaction, so a bad input writes nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .errors import JudgeError, NotFound
from .ledger import Ledger, Submitted, shark_from_row
from .proposals import PROPOSAL_FILE, load_proposal_dir, load_proposal_json, load_shark, load_vote_file, load_votes, parse_json
from .records import Proposal, Shark, Vote
from .round_actions import base, brief, clear_evaluation, run  # noqa: F401 (the round commands: round_actions.py)
from .schedule import check_submission, require_open, rounds_of
from .scoring import Measurement, Scorecard, check_vote, format_score, measurement, score_vote, standing, standing_reason


def proposal_dirs(paths: list[Path]) -> list[Path]:
    """Proposal directories named directly, or every proposal directory one level below a folder."""
    found = []
    for path in paths:
        if (path / PROPOSAL_FILE).is_file():
            found.append(path)
        elif path.is_dir():
            children = sorted(p for p in path.iterdir() if (p / PROPOSAL_FILE).is_file())
            if not children:
                raise JudgeError(f"{path}: no {PROPOSAL_FILE} here or in its subdirectories")
            found.extend(children)
        else:
            raise JudgeError(f"{path}: not found")
    return found


def submit(ledger: Ledger, items: list[tuple[Proposal, str]], kernels_dir: Path,
           errors: Optional[list[str]] = None) -> list[Submitted]:
    """Validate every proposal (target, round, patch paths, hunks against the round's base), then record all at
    once; every bad one is named (one line each, after the `errors` reading them found), and then nothing is
    written."""
    errors = list(errors or [])
    seen = set()
    for proposal, source in items:
        try:
            if proposal.id in seen:
                raise JudgeError(f"{source}: field 'id': '{proposal.id}' appears twice in this submission")
            seen.add(proposal.id)
            check_submission(ledger, proposal, kernels_dir, source)
            if proposal.parent and proposal.parent != proposal.id and ledger.latest_revision(proposal.parent) is None \
                    and proposal.parent not in seen:
                raise JudgeError(f"{source}: field 'parent': proposal '{proposal.parent}' is not in the ledger")
        except JudgeError as error:
            errors.append(error.message)
    if errors:
        raise JudgeError("\n".join(errors))
    with ledger.transaction():
        for proposal, source in items:  # again under the write lock: a round may have started meanwhile
            require_open(ledger, proposal, source)
        return [ledger.submit(proposal, source) for proposal, source in items]


def load_submissions(paths: list[str], stdin_text: Optional[str], errors: Optional[list[str]] = None,
                     author: Optional[str] = None) -> list[tuple[Proposal, str]]:
    """Every proposal the paths hold. With `errors`, a proposal that cannot be read is added there (so that a
    folder's every bad proposal is named) instead of stopping the reading. `author`: the author of a proposal
    directory that names none (through a server, the contestant the token belongs to)."""
    items: list[tuple[Proposal, str]] = []
    for raw in paths:
        if raw == "-":
            items.append((load_proposal_json(stdin_text or "", "<stdin>"), "<stdin>"))
            continue
        for directory in proposal_dirs([Path(raw)]):
            try:
                items.append((load_proposal_dir(directory, author), str(directory / PROPOSAL_FILE)))
            except JudgeError as error:
                if errors is None:
                    raise
                errors.append(error.message)
    return items


def load_sharks(paths: list[Path]) -> list[tuple[Shark, str]]:
    return [(load_shark(path), str(path)) for path in paths]


def add_sharks(ledger: Ledger, sharks: list[tuple[Shark, str]]) -> list[dict]:
    """Record sharks read by load_sharks (read first, so that a bad file leaves no ledger behind)."""
    out = []
    with ledger.transaction():
        for shark, source in sharks:
            shark_id, version, status = ledger.add_shark(shark, source)
            out.append({"shark": shark.name, "version": version, "id": shark_id, "status": status})
    return out


@dataclass
class CastVote:
    vote_id: int
    status: str
    shark: str
    proposal: str
    revision: int
    computed_total: str
    stated_total: Optional[str]
    flag: Optional[str]
    fund: bool


def measurement_for(ledger: Ledger, revision_id: int) -> Measurement:
    """What the judge measured for a revision, as its latest candidate evaluation stands (cleared or not)."""
    return measurement(ledger.latest_evaluation_of_revision(revision_id))


def load_vote_inputs(paths: list[str], stdin_text: Optional[str]) -> list[tuple[Vote, str]]:
    items: list[tuple[Vote, str]] = []
    for raw in paths:
        if raw == "-":
            votes = load_votes(parse_json(stdin_text or "", "<stdin>"), "<stdin>")
            items.extend((v, "<stdin>" if len(votes) == 1 else f"<stdin>[{i}]") for i, v in enumerate(votes))
            continue
        path = Path(raw)
        files = sorted(p for p in path.iterdir() if p.suffix in (".toml", ".json")) if path.is_dir() else [path]
        for file in files:
            votes = load_vote_file(file)
            items.extend((v, str(file) if len(votes) == 1 else f"{file}[{i}]") for i, v in enumerate(votes))
    return items


def cast_votes(ledger: Ledger, items: list[tuple[Vote, str]]) -> list[CastVote]:
    """Check each vote against its shark's rubric and its proposal, then record all and score them."""
    prepared = []
    for vote, source in items:
        try:
            shark_row, shark = ledger.shark(vote.shark)
        except JudgeError:
            raise JudgeError(f"{source}: field 'shark': '{vote.shark}' is not in the ledger (add it with 'judge shark add FILE')") from None
        check_vote(shark, vote, source)
        check_unbound(shark, vote, source)
        if vote.revision is None:
            revision = ledger.latest_revision(vote.proposal)
            if revision is None:
                raise JudgeError(f"{source}: field 'proposal': '{vote.proposal}' is not in the ledger")
        else:
            revision = ledger.revision_by_number(vote.proposal, vote.revision)
            if revision is None:
                raise JudgeError(f"{source}: field 'revision': '{vote.proposal}' has no revision {vote.revision}")
        prepared.append((vote, source, shark_row, shark, revision))
    cast = []
    with ledger.transaction():
        for vote, source, shark_row, shark, revision in prepared:
            vote_id, status = ledger.cast_vote(vote, shark_row["id"], revision["id"], revision["round"], source)
            card = score_vote(shark, vote, measurement_for(ledger, revision["id"]))
            cast.append(_cast(vote_id, status, vote, revision, card))
    return cast


def check_unbound(shark: Shark, vote: Vote, source: str) -> None:
    """A score for a criterion bound to a measurement would be stored and then ignored: say so instead."""
    for name in vote.scores:
        bound = shark.criterion(name).bound
        if bound:
            raise JudgeError(f"{source}: field 'scores.{name}': bound to the measured {bound}, which judge scores "
                             f"itself (leave it out)")


def _cast(vote_id: int, status: str, vote: Vote, revision: dict, card: Scorecard) -> CastVote:
    return CastVote(
        vote_id=vote_id,
        status=status,
        shark=vote.shark,
        proposal=vote.proposal,
        revision=revision["revision"],
        computed_total=format_score(card.total),
        stated_total=str(vote.stated_total) if vote.stated_total is not None else None,
        flag=card.flag,
        fund=vote.fund,
    )


def scorecards(ledger: Ledger, round: Optional[int] = None, proposal_id: Optional[str] = None) -> list[Scorecard]:
    """Every current vote re-scored from the ledger: totals are always computed, never copied."""
    cards = []
    for row in ledger.votes(round=round, proposal_id=proposal_id):
        _, shark = ledger.shark_by_id(row["shark_id"])
        vote = Vote.model_validate(
            {
                "shark": row["shark_name"],
                "proposal": row["proposal_id"],
                "scores": json.loads(row["scores_json"]),
                "fund": bool(row["fund"]),
                "notes": row["notes"] or "",
                "stated_total": row["stated_total"],
            }
        )
        cards.append(score_vote(shark, vote, measurement_for(ledger, row["revision_id"])))
    return cards


def list_proposals(ledger: Ledger, round: Optional[int] = None) -> list[dict]:
    """Each proposal's latest revision with its latest verdict, for `judge list`."""
    out = []
    for rev in ledger.current_revisions(round=round):
        e = ledger.latest_evaluation_of_revision(rev["id"])
        out.append(
            {
                "id": rev["proposal_id"],
                "revision": rev["revision"],
                "round": rev["round"],
                "target": rev["target"],
                "author": rev["author"],
                "category": rev["category"],
                "title": rev["title"],
                "claim": [rev["claim_low"], rev["claim_high"]] if rev["claim_low"] is not None else None,
                "has_patch": rev["patch"] is not None,
                "outcome": standing(e) if e else ("pitch" if rev["patch"] is None else "pending"),
                "cleared": bool(e and e["cleared_outcome"]),
                "reason": standing_reason(e) if e else None,
                "geomean_speedup": e["geomean_speedup"] if e else None,
                "evaluation_id": e["id"] if e else None,
            }
        )
    return out


def show_proposal(ledger: Ledger, proposal_id: str) -> dict:
    history = ledger.revision_history(proposal_id)
    if not history:
        raise NotFound(f"proposal '{proposal_id}' is not in the ledger (see 'judge list')")
    revisions = []
    for rev in history:
        evaluations = []
        for e in ledger.evaluations_of_revision(rev["id"]):
            clearance = ledger.clearance(e["id"])
            evaluations.append(
                {
                    "evaluation_id": e["id"],
                    "outcome": e["outcome"],
                    "reason": e["reason"],
                    "cleared": {k: clearance[k] for k in ("outcome", "reason", "note", "cleared_by", "cleared_at")}
                    if clearance else None,
                    "geomean_speedup": e["geomean_speedup"],
                    "geomean_ci": [e["geomean_ci_low"], e["geomean_ci_high"]] if e["geomean_ci_low"] is not None else None,
                    "stages": [s.to_dict() for s in ledger.stage_results(e["id"])],
                    "benchmarks": ledger.benchmark_results(e["id"]),
                    "finished_at": e["finished_at"],
                }
            )
        revisions.append(
            {
                "revision": rev["revision"],
                "round": rev["round"],
                "title": rev["title"],
                "author": rev["author"],
                "target": rev["target"],
                "category": rev["category"],
                "confidence": rev["confidence"],
                "parent": rev["parent"],
                "claim": json.loads(rev["claim_json"]) if rev["claim_json"] else None,
                "risks": json.loads(rev["risks_json"] or "[]"),
                "references": json.loads(rev["references_json"] or "[]"),
                "pitch": rev["pitch"],
                "has_patch": rev["patch"] is not None,
                "submitted_at": rev["submitted_at"],
                "evaluations": evaluations,
            }
        )
    votes = [
        {
            "shark": c.shark,
            "total": format_score(c.total),
            "stated_total": str(c.stated_total) if c.stated_total is not None else None,
            "flag": c.flag,
            "fund": c.fund,
        }
        for c in scorecards(ledger, proposal_id=proposal_id)
    ]
    return {"id": proposal_id, "revisions": revisions, "votes": votes}


def status(ledger: Ledger) -> dict:
    """Counts, the state of each round (outcomes as they stand, cleared ones counted at their clearance, and the
    results still held), and each target's open round, for `judge status`."""
    from .round_actions import held

    counts = ledger.counts()
    rounds = []
    for row in ledger.rounds():
        winner = ledger.revision(row["winner_revision_id"])["proposal_id"] if row["winner_revision_id"] else None
        rounds.append(
            {
                "target": row["target"],
                "round": row["round"],
                "base_origin": row["base_origin"],
                "base_sha256": row["base_sha256"],
                "outcomes": ledger.outcome_counts(row["id"]),
                "winner": winner,
                "held": held(ledger, row),
                "closed": ledger.round_row(row["target"], row["round"] + 1) is not None,
            }
        )
    names = sorted({r["target"] for r in ledger.rounds()} | {r["target"] for r in ledger.current_revisions()})
    targets = [{"target": name, "open_round": rounds_of(ledger, name).open} for name in names]
    runs = ledger.recent_runs(5)
    return {"ledger": str(ledger.path), "counts": counts, "rounds": rounds, "targets": targets, "recent_runs": runs}


def shark_list(ledger: Ledger) -> list[dict]:
    out = []
    for row in ledger.sharks():
        shark = shark_from_row(row)
        out.append(
            {
                "name": shark.name,
                "version": row["version"],
                "title": shark.title,
                "criteria": [
                    {"name": c.name, "weight": str(c.weight), "bound": c.bound} for c in shark.criteria
                ],
            }
        )
    return out


def calibrate(ledger: Ledger, target, work_dir: Path, *, aa: int, slowdowns: tuple[float, ...],
              budget_s: Optional[float], on_event) -> dict:
    """`judge calibrate`: A/A runs and calibrated slowdowns of the base the target's open round starts from
    (judge.calibrate), kept in the ledger."""
    from .calibrate import calibrate as run_calibration
    from .schedule import base_for

    source, origin = base_for(ledger, target, rounds_of(ledger, target.name).open)
    result = run_calibration(ledger, target, source, work_dir, aa=aa, slowdowns=slowdowns, budget_s=budget_s,
                             on_event=on_event)
    result["base_origin"] = origin
    return result
