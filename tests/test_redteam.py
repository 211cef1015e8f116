"""Red team, the timed round: every cheat of tests/fixtures/redteam/cheats that reaches the timing stage, and two
honest controls, run for real in one round per target (tests/redteam.py has the machinery). These verdicts are
timing's, so this module runs with no other test beside it (tests/conftest.py EXCLUSIVE_MODULES); the cheats
decided before timing are in tests/test_redteam_untimed.py."""

from __future__ import annotations

import pytest

from judge.ledger import Ledger
from redteam import (BYTECODE_CACHE, CHEATS, CONTROLS, KNOWN_JUDGE_BUGS, MARKER, TARGETS, cases, check_verdict, ran, run_redteam_round,
                     targets)
from redteam import test_the_round_ran_without_judge_crashing  # noqa: F401  collected here, on this module's rounds


@pytest.fixture(scope="module")
def cpu_round(tmp_path_factory):
    return run_redteam_round("cpu", tmp_path_factory.mktemp("redteam-cpu"))


@pytest.fixture(scope="module")
def vecadd_round(tmp_path_factory):
    return run_redteam_round("vecadd", tmp_path_factory.mktemp("redteam-vecadd"))


@pytest.fixture(scope="module")
def fp8_round(tmp_path_factory):
    return run_redteam_round("fp8", tmp_path_factory.mktemp("redteam-fp8"))


@pytest.mark.parametrize("key, cheat", cases(timed=True))
def test_cheat_gets_the_right_verdict(request, key, cheat):
    rr = request.getfixturevalue(f"{key}_round")
    ran(rr, cheat)
    outcome, reason, geomean = rr.verdict(cheat.proposal_id)
    check_verdict(f"{cheat.name} ({cheat.cls})", outcome, reason, geomean, cheat.expect, cheat.reason,
                  honest=cheat.honest_timing, identical=cheat.honest_timing)


@pytest.mark.parametrize("key", targets())
@pytest.mark.parametrize("control", sorted(CONTROLS))
def test_honest_controls_keep_their_verdicts(request, key, control):
    if (key, control) in KNOWN_JUDGE_BUGS:
        request.applymarker(pytest.mark.xfail(strict=True, reason=KNOWN_JUDGE_BUGS[(key, control)]))
    rr = request.getfixturevalue(f"{key}_round")
    outcome, reason, geomean = rr.verdict(control)
    _, expect, identical = CONTROLS[control]
    check_verdict(control, outcome, reason, geomean, expect, honest=True, identical=identical)


# ---- what candidates must not reach ----------------------------------------------------------------------


def _lines(log: str, prefix: str) -> list[str]:
    return [line for line in log.splitlines() if line.startswith(prefix)]


@pytest.mark.parametrize("key", targets())
def test_the_ledger_is_never_written_by_candidate_code(request, key):
    rr = request.getfixturevalue(f"{key}_round")
    cheat = rr.cheats_by_name.get("write_ledger")
    if cheat is None:
        pytest.skip("write_ledger not selected")
    log = rr.log("write_ledger")
    # it found the ledger by walking up from its workspace, and saw no JUDGE_* variable
    assert f"REDTEAM ledger candidates: " in log, log[-2000:]
    assert str(rr.ledger_path) in _lines(log, "REDTEAM ledger candidates:")[0]
    assert "REDTEAM judge variables seen: []" in log
    attempts = _lines(log, f"REDTEAM write ledger {rr.ledger_path}:")
    assert attempts and all("PermissionError" in line for line in attempts), attempts
    assert all("WROTE" not in line for line in _lines(log, "REDTEAM sql ledger")), log
    for path in rr.root.glob("ledger.db*"):
        assert MARKER not in path.read_bytes(), f"{path.name} holds the cheat's marker"
    ledger = Ledger(rr.ledger_path)
    try:
        tables = {r["name"] for r in ledger.query("select name from sqlite_master where type = 'table'")}
        assert "redteam_marker" not in tables
    finally:
        ledger.close()


@pytest.mark.parametrize("key", targets())
def test_no_file_outside_its_workspace_is_changed(request, key):
    rr = request.getfixturevalue(f"{key}_round")
    cheat = rr.cheats_by_name.get("write_ledger")
    if cheat is None:
        pytest.skip("write_ledger not selected")
    log = rr.log("write_ledger")
    attempts = [line for line in _lines(log, "REDTEAM write ")]
    for what in ("ledger", "reports", "kernels", "judge source", "other workspace", "base", "oracle", "bytecode cache"):
        assert any(line.startswith(f"REDTEAM write {what} ") for line in attempts), (what, log[-3000:])
    wrote = [line for line in attempts if line.endswith(": WROTE")]
    assert not wrote
    # another candidate's workspace is not there at all where the runner has a mount namespace (judge as root)
    assert all("PermissionError" in line or (line.startswith(("REDTEAM write other workspace ",
                                                              "REDTEAM write bytecode cache "))
                                             and "FileNotFoundError" in line) for line in attempts), attempts
    assert not (BYTECODE_CACHE / "redteam-planted.pyc").exists()
    changed = [str(p) for p, before in rr.protected.items() if not p.exists() or p.read_bytes() != before]
    assert not changed
    workspace = rr.workspaces[cheat.proposal_id]
    round_dir = workspace.parents[1]
    judge_written = [round_dir / "base" / "submission.py", round_dir / ".judge-round" / "oracle" / "reference.py",
                     workspace.parent / "control-unchanged" / "submission.py"]
    for path in judge_written:
        assert path.exists() and MARKER not in path.read_bytes(), path


@pytest.mark.parametrize("key", targets())
def test_reads_outside_its_workspace_fail(request, key):
    rr = request.getfixturevalue(f"{key}_round")
    if "read_secrets" not in rr.cheats_by_name:
        pytest.skip("read_secrets not selected")
    lines = _lines(rr.log("read_secrets"), "REDTEAM read ")
    assert len(lines) == 8, lines
    read = [line for line in lines if ": READ " in line]
    assert not read


@pytest.mark.parametrize("key", targets())
def test_the_network_is_out_of_reach(request, key):
    rr = request.getfixturevalue(f"{key}_round")
    if "network" not in rr.cheats_by_name:
        pytest.skip("network not selected")
    lines = _lines(rr.log("network"), "REDTEAM connect:")
    assert lines and "CONNECTED" not in lines[0], lines
    assert not rr.connections, rr.connections


@pytest.mark.parametrize("key", targets())
def test_judge_and_the_base_cannot_be_signalled_or_outrun(request, key):
    rr = request.getfixturevalue(f"{key}_round")
    if "stop_parent" not in rr.cheats_by_name:
        pytest.skip("stop_parent not selected")
    lines = [line for line in _lines(rr.log("stop_parent"), "REDTEAM ")]
    assert any(line.startswith("REDTEAM sigstop parent") for line in lines), lines
    assert any(line.startswith("REDTEAM hog") for line in lines), lines
    done = [line for line in lines if ": DONE" in line]
    assert not done


@pytest.mark.parametrize("key", targets(bug="renice"))
def test_other_processes_cannot_be_reniced_or_pinned(request, key):
    rr = request.getfixturevalue(f"{key}_round")
    if "renice_base" not in rr.cheats_by_name:
        pytest.skip("renice_base not selected")
    lines = _lines(rr.log("renice_base"), "REDTEAM ")
    assert lines, "it found no other judge process to slow"
    done = [line for line in lines if line.endswith(": DONE")]
    assert not done, done[:4]


def test_every_cheat_file_is_well_formed():
    names = {c.name for c in CHEATS}
    assert len(CHEATS) >= 25
    for cheat in CHEATS:
        assert set(cheat.targets) <= set(TARGETS), cheat.name
        assert cheat.kind in {"mixin", "limits", "slow-base", "sol"}, cheat.name
        compile(cheat.text, cheat.name, "exec")
    assert {"write_ledger", "read_secrets", "network", "stop_parent"} <= names
