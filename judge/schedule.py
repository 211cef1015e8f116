"""A target's rounds in order: which round takes proposals, which may run, which are closed, and each one's base.

Rounds belong to a target and run one after another. Round N+1's base is round N's base with round N's winner
applied, so once round N+1 has started, round N is closed: its verdicts, its winner and every base after it
stay as they are. Hence:
- proposals go to the open round, the one after the last that started (round 1 before any); a proposal for a
  round that has started is late, one for a round past the open one is early; both are refused;
- a round runs only when the round before it has finished a run, and never once the round after it started;
- `judge clear` refuses an evaluation of a closed round (it would change a base already in use).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from . import contain
from .errors import JudgeError
from .ledger import Ledger, sha256
from .stages.patch import apply_patch, check_paths, parse_patch
from .records import Outcome, Proposal
from .targets import Target, find_target


@dataclass
class TargetRounds:
    """What the ledger says about one target's rounds: their rows in order and which finished a run."""

    target: str
    rows: list[dict]
    finished: set[int]

    @property
    def numbers(self) -> list[int]:
        return [r["round"] for r in self.rows]

    @property
    def last(self) -> Optional[int]:
        return self.numbers[-1] if self.rows else None

    @property
    def open(self) -> int:
        """The round that takes proposals: the one after the last that started."""
        return (self.last or 0) + 1

    def row(self, round: int) -> Optional[dict]:
        return next((r for r in self.rows if r["round"] == round), None)

    def closed(self, round: int) -> bool:
        """A round is closed once the round after it has started."""
        return self.row(round + 1) is not None

    def listing(self) -> str:
        """'no round has started', 'round 1 has started', 'rounds 1 to 3 have started'."""
        if not self.rows:
            return "no round has started"
        if len(self.rows) == 1:
            return f"round {self.last} has started"
        return f"rounds 1 to {self.last} have started"


def rounds_of(ledger: Ledger, target: str) -> TargetRounds:
    rows = ledger.rounds(target)
    finished = {r["round"] for r in rows if any(run["status"] == "finished" for run in ledger.runs_of_round(r["id"]))}
    return TargetRounds(target, rows, finished)


def default_round(ledger: Ledger, target: str) -> int:
    """The round `judge run` runs for a target without --round: the last one that started while it has not finished
    a run (a resume), else the open round when proposals wait for it, else the last one (nothing new to do)."""
    rounds = rounds_of(ledger, target)
    if rounds.last is None:
        return 1
    if rounds.last not in rounds.finished:
        return rounds.last
    waiting = ledger.current_revisions(round=rounds.open, target=target)
    return rounds.open if waiting else rounds.last


def require_runnable(ledger: Ledger, target: str, round: int) -> None:
    """Refuse, before anything is written, a run of a round that is not the target's to run now."""
    rounds = rounds_of(ledger, target)
    if round < 1:
        raise JudgeError(f"round {round}: rounds are numbered from 1")
    if round > rounds.open:
        raise JudgeError(f"round {round} of {target} cannot run: {rounds.listing()}, so the next is round {rounds.open}")
    if round == rounds.open and round > 1 and round - 1 not in rounds.finished:
        raise JudgeError(f"round {round} of {target} cannot start: round {round - 1} has not finished a run; finish it "
                         f"first with 'judge run --target {target} --round {round - 1}'")
    if rounds.closed(round):
        began = rounds.row(round + 1)["created_at"]
        raise JudgeError(f"round {round} of {target} is closed: round {round + 1} began on {began} from its result, "
                         f"so its verdicts and winner stay as they are")


def require_known(ledger: Ledger, target: str, round: int) -> TargetRounds:
    """Refuse a round past the open one (it has no base yet) for the brief and `judge base`."""
    rounds = rounds_of(ledger, target)
    if round < 1:
        raise JudgeError(f"round {round}: rounds are numbered from 1")
    if round > rounds.open:
        raise JudgeError(f"round {round} of {target} has no base yet: {rounds.listing()}, so the next is round "
                         f"{rounds.open}")
    return rounds


def require_open(ledger: Ledger, proposal: Proposal, source: str) -> None:
    """Refuse a proposal for a round that has started (late) or that is past the open one (early); the same content
    sent again is not a new proposal, and passes."""
    rounds = rounds_of(ledger, proposal.target)
    if proposal.round == rounds.open or ledger.unchanged(proposal):
        return
    where = f"{source}: field 'round'"
    get_base = f"get its base with 'judge base --target {proposal.target}'"
    if proposal.round < rounds.open:
        began = rounds.row(proposal.round)["created_at"]
        raise JudgeError(f"{where}: late: round {proposal.round} of {proposal.target} started on {began}; proposals "
                         f"now go to round {rounds.open} ({get_base})")
    raise JudgeError(f"{where}: round {proposal.round} of {proposal.target} is not open: {rounds.listing()}, so "
                     f"proposals go to round {rounds.open} ({get_base})")


def require_clearable(ledger: Ledger, evaluation: dict) -> None:
    """Refuse to clear an evaluation of a closed round: its winner would change after a later base was built."""
    round_row = ledger.db["rounds"].get(evaluation["round_id"])
    rounds = rounds_of(ledger, round_row["target"])
    if rounds.closed(round_row["round"]):
        n, target = round_row["round"], round_row["target"]
        began = rounds.row(n + 1)["created_at"]
        raise JudgeError(f"evaluation {evaluation['id']} cannot be cleared: it is in round {n} of {target}, which "
                         f"closed when round {n + 1} began on {began}, and a clearance now would change a base already "
                         f"in use; nothing was written (a new revision for round {rounds.open} can win there)")


def clear_command(evaluation_id: int) -> str:
    """The command that clears a held result, as every view prints it."""
    return f"judge clear {evaluation_id} --note \"why it is real\""


# bases -----------------------------------------------------------------------------------------------------------


def base_for(ledger: Ledger, target: Target, round: int) -> tuple[str, str]:
    """The base kernel of a round and where it came from: frozen in the ledger once the round started; for the open
    round, the last round's base with its winner applied. A round past the open one has no base."""
    row = ledger.round_row(target.name, round)
    if row:
        return row["base_source"], row["base_origin"]
    require_known(ledger, target.name, round)
    if round == 1:
        return target.kernel_source(), _shown(target.kernel_path)
    previous = ledger.round_row(target.name, round - 1)
    winner = ledger.round_winner(previous["id"])
    if winner is None:
        return previous["base_source"], f"round {round - 1} base (round {round - 1} had no winner)"
    source = apply_patch(previous["base_source"], winner["patch"], target.kernel_file,
                         f"{winner['proposal_id']} r{winner['revision']}")
    return source, f"round {round - 1} base + winner {winner['proposal_id']} r{winner['revision']}"


def kernels_to_run(ledger: Ledger, round_id: int, stale, revisions: list[dict], control_needed: bool) -> bool:
    """Whether a run of the round has a base or a candidate without a standing verdict (`stale`, the run's rule), or
    a control to time (`control_needed`, judge.control.needs_control): only then does it start its oracle and
    spares early (one that finds every verdict standing starts none)."""
    return (stale(ledger.latest_evaluation(round_id, None, subject="base"))
            or control_needed
            or any(stale(ledger.latest_evaluation(round_id, r["id"])) for r in revisions if r["patch"]))


def base_words(target: str, round: int, origin: str, sha: str) -> str:
    """Which base a patch was tried against, and the command that prints it."""
    return (f"tried against round {round}'s base of {target} ({origin}; sha256 {sha[:12]}); get it with "
            f"'judge base --target {target} --round {round}'")


def check_submission(ledger: Ledger, proposal: Proposal, kernels_dir: Path, source: str) -> None:
    """Reject, before anything is written, a proposal whose target is unknown, whose round is not open or whose
    patch cannot apply to its round's base."""
    try:
        target = find_target(proposal.target, kernels_dir)
    except JudgeError as error:
        raise JudgeError(f"{source}: field 'target': {error}") from None
    require_open(ledger, proposal, source)
    if not proposal.has_patch:
        return
    where = str(Path(source).parent / "patch.diff") if source.endswith(".toml") else f"{source}: field 'patch'"
    # Paths first: a patch to the wrong file is wrong whatever the base, so its error names no base.
    check_paths(parse_patch(proposal.patch, where), target.kernel_file, where)
    base, origin = base_for(ledger, target, proposal.round)
    try:
        apply_patch(base, proposal.patch, target.kernel_file, where)
    except JudgeError as error:
        other = _applies_elsewhere(ledger, target, proposal)
        raise JudgeError(f"{error}; {base_words(target.name, proposal.round, origin, sha256(base))}{other}") from None


def _applies_elsewhere(ledger: Ledger, target: Target, proposal: Proposal) -> str:
    """Where a patch that fails on its round's base would apply: an earlier round's base, or the kernel file."""
    candidates = [(f"round {r['round']}'s base", r["base_source"]) for r in reversed(ledger.rounds(target.name))]
    candidates.append((f"the target's kernel file ({_shown(target.kernel_path)})", target.kernel_source()))
    for name, source in candidates:
        try:
            apply_patch(source, proposal.patch, target.kernel_file)
        except JudgeError:
            continue
        return f" (it applies to {name}: a patch for round {proposal.round} must be made against that round's base)"
    return ""


def _shown(path: Path) -> str:
    """A path as the user would type it: relative to the working directory when it is below it (through a link
    too: kernels/axpy, not where the link points)."""
    for absolute, cwd in ((path.absolute(), Path.cwd().absolute()), (path.resolve(), Path.cwd().resolve())):
        try:
            return str(absolute.relative_to(cwd))
        except ValueError:
            continue
    return str(path)


BASE_REASON_CAP = 240  # of the base's own reason, inside each candidate's


def base_failure(ledger: Ledger, round_id: int) -> Optional[str]:
    """Why the round's candidates cannot be checked or timed: its base's latest evaluation failed (an import that
    this machine lacks, a wrong answer), so there is nothing to time them against and charging them the base's
    failure would be a false verdict. None where the base passed or was not run here."""
    base = ledger.latest_evaluation(round_id, None, subject="base")
    if base is None or base["outcome"] in (Outcome.UNCHANGED.value, Outcome.NOT_RUN.value):
        return None
    return (f"the round's base is {base['outcome']} ({contain.cap(base['reason'], BASE_REASON_CAP)}): nothing to "
            "time a candidate against here (the base is frozen for the round: run it again with --again where the "
            "base passes)")
