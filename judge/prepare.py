"""A revision's patch applied to its round's base in a fresh workspace and screened: a candidate ready to compile,
or refused (a patch that does not apply, a forbidden call) with the stages that refused it."""

from __future__ import annotations

import time
from typing import NamedTuple, Optional

from .errors import JudgeError
from .ledger import now, sha256
from .schedule import base_words
from .stages.compile.pipeline import PreparedCandidate
from .stages.patch import apply_patch
from .stages.result import StageResult
from .stages.screen.stage import screen_stage
from .workspaces import fresh


class Refused(NamedTuple):
    """A candidate whose patch did not apply or whose screen found a forbidden call: recorded with the round's other
    verdicts (RoundRun.record's arguments), after its base."""

    revision: dict
    kernel_sha: Optional[str]
    stages: list[StageResult]
    started: str


def prepare(run, revision: dict, base_source: str) -> Refused | PreparedCandidate:
    """Patch the base into a fresh workspace; a patch that does not apply, or a forbidden call, is the verdict."""
    started, t0 = now(), time.monotonic()
    target = run.target
    try:
        source = apply_patch(base_source, revision["patch"], target.kernel_file,
                             f"patch of {revision['proposal_id']} r{revision['revision']}")
    except JudgeError as error:
        row = run.round_row
        words = base_words(target.name, row["round"], row["base_origin"], row["base_sha256"])
        stage = StageResult("patch", "failed", f"{error}; {words}", time.monotonic() - t0)
        return Refused(revision, None, [stage], started)
    patch_stage = StageResult("patch", "passed", f"applied to {run.round_row['base_origin']}", time.monotonic() - t0)
    screened = screen_stage(base_source, source, revision["patch"], target.forbidden, target.kernel_file)
    if not screened.passed:  # a forbidden call: the verdict, before anything is compiled
        return Refused(revision, sha256(source), [patch_stage, screened], started)
    # Under candidates/: a proposal id is any slug, and 'base', 'control' or 'peer' beside them would be judge's own
    # workspaces (a proposal 'base' replaced the kernel every candidate was timed against).
    workspace = fresh(run.root / "candidates" / revision["proposal_id"])
    target.assemble(workspace, source)
    return PreparedCandidate(revision, source, workspace, [patch_stage, screened], started)
