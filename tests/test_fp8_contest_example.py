"""The shipped FP8 contest (docs/examples/fp8-contest/) agrees with the proposals it was run from and with what
judge renders from its ledger today: the example is a record a reader checks numbers against, so a patch edited
after the run, or a scorecard no longer reproducible from the ledger, must show."""

from pathlib import Path

import pytest

from harness import example_ledger

from judge import actions
from judge.ledger import Ledger
from judge.stages.patch import apply_patch
from judge.report import render_leaderboard, render_round
from judge.schedule import base_for
from judge.targets import load_target

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "fp8-contest"
TARGET = "fp8_group_gemm_sm90"
PROPOSALS = ROOT / "proposals" / TARGET
WINNERS = {1: "epilogue-paired-stores", 2: "epilogue-smem-rows", 3: "cluster-1x2-multicast-a-v2",
           4: "epilogue-scales-early"}


@pytest.fixture()
def ledger(tmp_path):
    return Ledger(example_ledger(EXAMPLE / "fp8-contest.db.xz", tmp_path), create=False)


def _folder(round_: int) -> Path:
    return PROPOSALS if round_ == 1 else PROPOSALS / f"round-{round_}"


def test_every_recorded_patch_is_the_shipped_one(ledger):
    shipped = [proposal for round_ in WINNERS
               for proposal, _ in actions.load_submissions([str(_folder(round_))], None)]
    assert len(shipped) == 15
    for proposal in shipped:
        row = ledger.revision_by_number(proposal.id, 1)
        assert row is not None, f"{proposal.id} is not in the example ledger"
        assert (row["patch"] or "") == (proposal.patch or ""), f"{proposal.id}: the shipped patch is not the one judged"


def test_each_base_is_the_last_base_with_its_winner_applied(ledger):
    target = load_target(ROOT / "kernels" / TARGET)
    source, origin = base_for(ledger, target, 1)
    assert origin == f"kernels/{TARGET}/submission.py"
    for round_, winner in WINNERS.items():
        patch = (_folder(round_) / winner / "patch.diff").read_text()
        expected = apply_patch(source, patch, target.kernel_file, f"{winner} r1")
        source, origin = base_for(ledger, target, round_ + 1)
        assert origin == f"round {round_} base + winner {winner} r1"
        assert source == expected


def test_the_round_four_scorecard_and_leaderboard_render_as_shipped(ledger, tmp_path):
    render_round(ledger, 4, tmp_path)
    render_leaderboard(ledger, tmp_path)
    for name in ("round-4.md", f"round-4-{TARGET}-times.svg", f"round-4-{TARGET}-claims.svg", "leaderboard.md",
                 f"leaderboard-{TARGET}.svg"):
        assert (tmp_path / name).read_bytes() == (EXAMPLE / name).read_bytes(), name
