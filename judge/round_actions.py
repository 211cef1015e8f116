"""What the CLI's round commands do, as library calls: run rounds, clear a held result, write a brief, give a base.

Each checks the target's round order (judge.schedule) before it writes anything, so a refused step writes nothing.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from .errors import JudgeError
from .ledger import Ledger, sha256
from .stages.patch import apply_patch
from .records import Outcome
from .rounds import RoundSummary, Settings
from .schedule import base_for, clear_command, default_round, require_clearable, require_known, require_runnable, rounds_of
from .targets import Target, find_target


@dataclass
class Plan:
    """One target's round that a `judge run` runs."""

    target: Target
    round: int


class Interrupted(Exception):
    """A run stopped by the user (Ctrl-C): `message` says what the ledger kept and the command that resumes."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def plan_run(ledger: Ledger, round: Optional[int], target: Optional[Target], kernels_dir: Path) -> list[Plan]:
    """Which target runs which round: an explicit target its own default round (judge.schedule) unless --round
    names one; without a target, every target with proposals (for `round`, when given). Every plan is checked
    against its target's round order before any runs, so a refusal writes nothing."""
    if target is not None:
        plans = [Plan(target, round if round is not None else default_round(ledger, target.name))]
    else:
        names = sorted({r["target"] for r in ledger.current_revisions(round=round)})
        if not names:
            if round is None:
                raise JudgeError("the ledger has no proposals yet (submit some with 'judge submit')")
            raise JudgeError(f"round {round} has no proposals (submit some with 'judge submit')")
        plans = [Plan(find_target(name, kernels_dir), round if round is not None else default_round(ledger, name))
                 for name in names]
    for plan in plans:
        require_runnable(ledger, plan.target.name, plan.round)
        row = ledger.round_row(plan.target.name, plan.round)
        running = ledger.running_run(row["id"]) if row else None
        if running:
            raise JudgeError(ledger.running_message(running))
    return plans


def run(ledger: Ledger, round: Optional[int], target: Optional[Target], settings: Settings, on_event,
        out_dir: Path) -> list[dict]:
    """`judge run`: each planned target's round, then its report. Refused while another judge process runs the same
    target and round (the ledger's runs are the lock; a dead one is marked interrupted and does not count).
    Returns each target's summary with every verdict's evaluation id, its held results and its report's path.
    Ctrl-C raises Interrupted, whose message says what was kept and how to resume."""
    from .report import render_round
    from .rounds import run_round

    ledger.mark_interrupted_runs()
    plans = plan_run(ledger, round, target, settings.kernels_dir)
    done = []
    for plan in plans:
        try:
            [summary] = run_round(ledger, plan.round, target=plan.target, settings=settings, on_event=on_event)
        except KeyboardInterrupt:
            raise Interrupted(interrupted_message(ledger, plan)) from None
        done.append(summary)
    together = len({p.round for p in plans}) == 1 and target is None  # one report for the round, as before
    out = []
    for summary in done:
        name = None if together else summary.target
        report = render_round(ledger, summary.round, out_dir, target=name)
        out.append(_run_summary(ledger, summary, report))
    return out


def _run_summary(ledger: Ledger, summary: RoundSummary, report: Path) -> dict:
    round_row = ledger.round_row(summary.target, summary.round)
    data = asdict(summary)
    base = ledger.latest_evaluation(round_row["id"], None, "base")
    data["base_evaluation_id"] = base["id"] if base else None
    data["held"] = held(ledger, round_row)
    data["report"] = str(report)
    return data


def held(ledger: Ledger, round_row: dict) -> list[dict]:
    """The round's results held as implausible that no person has cleared, with the command that clears each; in a
    closed round (the next one has started) none can be cleared any more, and `clear` is None."""
    closed = ledger.round_row(round_row["target"], round_row["round"] + 1) is not None
    return [{"proposal_id": e["proposal_id"], "revision": e["revision"], "evaluation_id": e["id"],
             "reason": e["reason"], "command": None if closed else clear_command(e["id"])}
            for e in ledger.held(round_row["id"])]



def interrupted_message(ledger: Ledger, plan: Plan) -> str:
    """What a run stopped by Ctrl-C leaves: the verdicts kept, the proposals still without one, how to resume."""
    name, round = plan.target.name, plan.round
    resume = f"'judge run --target {name} --round {round}' resumes with the proposals that have no verdict yet"
    row = ledger.round_row(name, round)
    if row is None:
        return f"interrupted before round {round} of {name} started: nothing was written; {resume}"
    mine = [r for r in ledger.runs_of_round(row["id"]) if r["pid"] == os.getpid()]
    kept = [e for e in ledger.evaluations(row["id"]) if mine and e["run_id"] == mine[-1]["id"]
            and e["subject"] == "candidate"]
    standing = {e["revision_id"] for e in ledger.latest_candidate_evaluations(row["id"])}
    waiting = [r["proposal_id"] for r in ledger.revisions_of_round(name, round)
               if r["patch"] is not None and r["id"] not in standing]
    ids = ", ".join(f"#{k['id']}" for k in kept)
    kept_words = f"kept {len(kept)} verdict{'s' if len(kept) != 1 else ''} of this run ({ids})" if kept else \
        "kept no verdict of this run"
    return (f"interrupted: round {round} of {name} {kept_words} in {ledger.path}; {len(waiting)} "
            f"proposal{' has' if len(waiting) == 1 else 's have'} no verdict yet"
            f"{' (' + ', '.join(waiting) + ')' if waiting else ''}; {resume}")


# clearing a held result -----------------------------------------------------------------------------------------


def clear_evaluation(ledger: Ledger, evaluation_id: int, note: str, cleared_by: str,
                     kernels_dir: Optional[Path] = None) -> dict:
    """A person's word that an implausible result is real: it then stands at what its timing said, and the round's
    winner is chosen again. Refused once the target's next round has started (judge.schedule), nothing written.
    With `kernels_dir`, also says what the next round's base becomes and which proposals for it no longer apply."""
    from .verdicts import timing_verdict

    evaluation = ledger.evaluation(evaluation_id)
    if evaluation is None:
        raise JudgeError(f"evaluation {evaluation_id} is not in the ledger (see 'judge show PROPOSAL')")
    if evaluation["outcome"] != Outcome.IMPLAUSIBLE.value:
        raise JudgeError(f"evaluation {evaluation_id} is {evaluation['outcome']}, not implausible: nothing to clear")
    if not note.strip():
        raise JudgeError("field 'note': say why the result is real (it is kept with the clearance)")
    require_clearable(ledger, evaluation)
    timing = next(s for s in ledger.stage_results(evaluation_id) if s.stage == "timing")
    outcome, reason = timing_verdict(timing)
    clearance_id = ledger.clear(evaluation_id, outcome.value, note.strip(), cleared_by, reason=reason,
                                check=lambda again: require_clearable(again, evaluation))
    winner = ledger.round_winner(evaluation["round_id"])
    ledger.set_winner(evaluation["round_id"], winner["revision_id"] if winner else None)
    round_row = ledger.db["rounds"].get(evaluation["round_id"])
    result = {"clearance_id": clearance_id, "evaluation_id": evaluation_id, "target": round_row["target"],
              "round": round_row["round"], "outcome": outcome.value, "reason": reason,
              "round_winner": winner["proposal_id"] if winner else None}
    if kernels_dir is not None:
        result["next_round"] = _next_base(ledger, find_target(round_row["target"], kernels_dir), round_row["round"] + 1)
    return result


def _next_base(ledger: Ledger, target: Target, round: int) -> dict:
    """The base a round will start from, and the proposals already submitted for it whose patch no longer applies."""
    source, origin = base_for(ledger, target, round)
    stale = []
    for revision in ledger.current_revisions(round=round, target=target.name):
        if revision["patch"] is None:
            continue
        try:
            apply_patch(source, revision["patch"], target.kernel_file)
        except JudgeError:
            stale.append(revision["proposal_id"])
    return {"round": round, "origin": origin, "sha256": sha256(source), "no_longer_apply": stale}


def refresh_reports(ledger: Ledger, kernels_dir: Path, target_name: str, round: int, out_dir: Path) -> list[Path]:
    """Render again what a clearance changed: the round's report (each file of it that exists in `out_dir`, else the
    target's own), the leaderboard, and the next round's brief where one was written."""
    from .report.brief import brief_view, render_brief
    from .report import render_leaderboard, render_round

    out_dir = Path(out_dir)
    paths = []
    if (out_dir / f"round-{round}.md").exists():
        paths.append(render_round(ledger, round, out_dir))
    if (out_dir / f"round-{round}-{target_name}.md").exists() or not paths:
        paths.append(render_round(ledger, round, out_dir, target=target_name))
    paths.append(render_leaderboard(ledger, out_dir))
    if (out_dir / f"brief-round-{round + 1}-{target_name}.md").exists():
        target = find_target(target_name, kernels_dir)
        paths.append(render_brief(brief_view(ledger, target, round + 1), out_dir))
    return list(dict.fromkeys(paths))


# the brief and the base ----------------------------------------------------------------------------------------


def pick_target(ledger: Ledger, kernels_dir: Path, target_name: Optional[str]) -> Target:
    """The named target, or the ledger's only one."""
    if target_name is None:
        names = sorted({r["target"] for r in ledger.rounds()} | {r["target"] for r in ledger.current_revisions()})
        where = "the ledger has"
        if not names:  # nothing submitted or run yet: the targets a proposal could name
            names = sorted(p.name for p in Path(kernels_dir).iterdir() if (p / "task.yml").is_file()) \
                if Path(kernels_dir).is_dir() else []
            where = f"no proposal or round names a target yet, and {kernels_dir} has"
        if len(names) != 1:
            pick = f": name one with --target, e.g. --target {names[0]}" if names else ""
            raise JudgeError(f"{where} {len(names)} targets ({', '.join(names) or 'none'}){pick}")
        target_name = names[0]
    return find_target(target_name, kernels_dir)


def brief(ledger: Ledger, kernels_dir: Path, target_name: Optional[str], round: Optional[int],
          out_dir: Path) -> tuple[Path, dict]:
    """The brief for a round (default: the target's open round): its view, written as Markdown."""
    from .report.brief import brief_view, render_brief

    target = pick_target(ledger, kernels_dir, target_name)
    round = rounds_of(ledger, target.name).open if round is None else round
    require_known(ledger, target.name, round)
    view = brief_view(ledger, target, round)
    return render_brief(view, out_dir), view


def base(ledger: Ledger, kernels_dir: Path, target_name: Optional[str], round: Optional[int]) -> dict:
    """`judge base`: a round's base kernel (default: the target's open round), the exact text the brief's sha256
    names, with where it came from."""
    target = pick_target(ledger, kernels_dir, target_name)
    round = rounds_of(ledger, target.name).open if round is None else round
    source, origin = base_for(ledger, target, round)
    return {"target": target.name, "round": round, "kernel_file": target.kernel_file, "origin": origin,
            "sha256": sha256(source), "lines": len(source.splitlines()), "source": source}



def profile(ledger: Ledger, kernels_dir: Path, target_name: Optional[str], proposal_id: Optional[str],
            work_dir: Path, *, use_ncu: bool = True, again: bool = False, progress=None) -> dict:
    """`judge profile`: where the time goes in the target's open-round base or, with `proposal_id`, in that
    proposal's latest revision (its patch on its round's base), on this machine (judge.profiles)."""
    from .profiles import profile_source

    extra: dict = {}
    if proposal_id is not None:
        revision = ledger.latest_revision(proposal_id)
        if revision is None:
            raise JudgeError(f"proposal {proposal_id} is not in the ledger")
        if not revision["patch"]:
            raise JudgeError(f"proposal {proposal_id} r{revision['revision']} is a pitch: it has no patch to profile")
        target = find_target(revision["target"], kernels_dir)
        base_source, _ = base_for(ledger, target, revision["round"])
        source = apply_patch(base_source, revision["patch"], target.kernel_file,
                             f"patch of {proposal_id} r{revision['revision']}")
        subject, extra = "candidate", {"proposal": proposal_id, "revision": revision["revision"],
                                       "round": revision["round"]}
    else:
        target = pick_target(ledger, kernels_dir, target_name)
        round = rounds_of(ledger, target.name).open
        source, origin = base_for(ledger, target, round)
        subject, extra = "base", {"round": round, "origin": origin}
    root = Path(work_dir) / target.name / "profiles" / (proposal_id or f"base-round-{extra['round']}")
    done = profile_source(ledger, target, source, subject, root, use_ncu=use_ncu, again=again,
                          revision_id=revision["id"] if proposal_id is not None else None,
                          **({"progress": progress} if progress is not None else {}))
    return {**done, **extra}
