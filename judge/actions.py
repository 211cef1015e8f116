"""What the CLI's commands do, as library calls: submit, add sharks, vote, look things up.

Each write checks everything first and then writes in one transaction, so a bad input writes nothing.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from .errors import JudgeError
from .ledger import Ledger, Submitted, shark_from_row
from .proposals import PROPOSAL_FILE, load_proposal_dir, load_proposal_json, load_shark, load_vote_file, load_votes, parse_json
from .records import Outcome, Proposal, Shark, Vote
from .rounds import RoundSummary, Settings, check_submission
from .scoring import Measurement, Scorecard, check_vote, format_score, measurement, score_vote
from .targets import Target, find_target


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


def submit(ledger: Ledger, items: list[tuple[Proposal, str]], kernels_dir: Path) -> list[Submitted]:
    """Validate every proposal (target, patch paths, hunks against the round's base), then record all at once."""
    seen = set()
    for proposal, source in items:
        if proposal.id in seen:
            raise JudgeError(f"{source}: field 'id': '{proposal.id}' appears twice in this submission")
        seen.add(proposal.id)
        check_submission(ledger, proposal, kernels_dir, source)
        if proposal.parent and proposal.parent != proposal.id and ledger.latest_revision(proposal.parent) is None and proposal.parent not in seen:
            raise JudgeError(f"{source}: field 'parent': proposal '{proposal.parent}' is not in the ledger")
    with ledger.transaction():
        return [ledger.submit(proposal, source) for proposal, source in items]


def load_submissions(paths: list[str], stdin_text: Optional[str]) -> list[tuple[Proposal, str]]:
    items: list[tuple[Proposal, str]] = []
    for raw in paths:
        if raw == "-":
            items.append((load_proposal_json(stdin_text or "", "<stdin>"), "<stdin>"))
            continue
        for directory in proposal_dirs([Path(raw)]):
            items.append((load_proposal_dir(directory), str(directory / PROPOSAL_FILE)))
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
                "outcome": e["outcome"] if e else ("pitch" if rev["patch"] is None else "pending"),
                "reason": e["reason"] if e else None,
                "geomean_speedup": e["geomean_speedup"] if e else None,
                "evaluation_id": e["id"] if e else None,
            }
        )
    return out


def show_proposal(ledger: Ledger, proposal_id: str) -> dict:
    history = ledger.revision_history(proposal_id)
    if not history:
        raise JudgeError(f"proposal '{proposal_id}' is not in the ledger (see 'judge list')")
    revisions = []
    for rev in history:
        evaluations = []
        for e in ledger.evaluations_of_revision(rev["id"]):
            evaluations.append(
                {
                    "evaluation_id": e["id"],
                    "outcome": e["outcome"],
                    "reason": e["reason"],
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
    """Counts and the state of each round, for `judge status`."""
    counts = ledger.counts()
    rounds = []
    for row in ledger.rounds():
        winner = ledger.revision(row["winner_revision_id"])["proposal_id"] if row["winner_revision_id"] else None
        rounds.append(
            {
                "target": row["target"],
                "round": row["round"],
                "base_origin": row["base_origin"],
                "outcomes": ledger.outcome_counts(row["id"]),
                "winner": winner,
            }
        )
    runs = ledger.recent_runs(5)
    return {"ledger": str(ledger.path), "counts": counts, "rounds": rounds, "recent_runs": runs}


def run(ledger: Ledger, round: int, target: Optional[Target], settings: Settings, on_event, out_dir: Path) -> list[dict]:
    """`judge run`: refused while another judge process runs the same target and round (the ledger's runs are the
    lock; a dead one is marked interrupted and does not count), checked before the round's workspace is reset.
    Returns each target's summary with every verdict's evaluation id and the path of the round's report."""
    from .report import render_round
    from .rounds import run_round

    ledger.mark_interrupted_runs()
    names = [target.name] if target is not None else sorted({r["target"] for r in ledger.current_revisions(round=round)})
    for name in names:
        row = ledger.round_row(name, round)
        running = ledger.running_run(row["id"]) if row else None
        if running:
            raise JudgeError(ledger.running_message(running))
    summaries = run_round(ledger, round, target=target, settings=settings, on_event=on_event)
    report = render_round(ledger, round, out_dir, target=target.name if target is not None else None)
    return [_run_summary(ledger, summary, report) for summary in summaries]


def _run_summary(ledger: Ledger, summary: RoundSummary, report: Path) -> dict:
    round_id = ledger.round_row(summary.target, summary.round)["id"]
    data = asdict(summary)
    base = ledger.latest_evaluation(round_id, None, "base")
    data["base_evaluation_id"] = base["id"] if base else None
    data["report"] = str(report)
    return data


def latest_round(ledger: Ledger) -> int:
    round = ledger.latest_proposal_round()
    if round is None:
        raise JudgeError("the ledger has no proposals yet (submit some with 'judge submit')")
    return round


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


def clear_evaluation(ledger: Ledger, evaluation_id: int, note: str, cleared_by: str) -> dict:
    """A person's word that an implausible result is real: it then stands at what its timing said, and the
    round's winner is chosen again."""
    from .verdicts import MIN_EFFECT, timing_verdict

    evaluation = ledger.evaluation(evaluation_id)
    if evaluation is None:
        raise JudgeError(f"evaluation {evaluation_id} is not in the ledger (see 'judge show PROPOSAL')")
    if evaluation["outcome"] != Outcome.IMPLAUSIBLE.value:
        raise JudgeError(f"evaluation {evaluation_id} is {evaluation['outcome']}, not implausible: nothing to clear")
    if not note.strip():
        raise JudgeError("field 'note': say why the result is real (it is kept with the clearance)")
    timing = next(s for s in ledger.stage_results(evaluation_id) if s.stage == "timing")
    outcome, reason = timing_verdict(timing, MIN_EFFECT)
    clearance_id = ledger.clear(evaluation_id, outcome.value, note.strip(), cleared_by)
    winner = ledger.round_winner(evaluation["round_id"])
    ledger.set_winner(evaluation["round_id"], winner["revision_id"] if winner else None)
    return {"clearance_id": clearance_id, "evaluation_id": evaluation_id, "outcome": outcome.value,
            "reason": reason, "round_winner": winner["proposal_id"] if winner else None}


def brief(ledger: Ledger, kernels_dir: Path, target_name: Optional[str], round: Optional[int],
          out_dir: Path) -> tuple[Path, dict]:
    """The brief for a round (default: the one after the target's latest): its view, written as Markdown."""
    from .brief import brief_view, render_brief

    names = sorted({r["target"] for r in ledger.rounds()} | {r["target"] for r in ledger.current_revisions()})
    if target_name is None:
        if len(names) != 1:
            raise JudgeError(f"the ledger has {len(names)} targets ({', '.join(names) or 'none'}): name one with --target")
        target_name = names[0]
    target = find_target(target_name, kernels_dir)
    if round is None:
        ran = [r["round"] for r in ledger.rounds(target.name)]
        round = max(ran) + 1 if ran else 1
    view = brief_view(ledger, target, round)
    return render_brief(view, out_dir), view
