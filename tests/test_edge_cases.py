"""Edge cases of input and of the ledger (issue 9): each is one line naming the file and the field, exit 2, and
nothing written; under --json the same error is one JSON object on stdout."""

import json
import os
import sqlite3
from pathlib import Path

import pytest
from harness import PATCH, ROOT, proposal_dir

import judge
from judge.ledger import migrations


def refused(result, message: str, root: Path, ledger_existed: bool = False) -> None:
    """Exit 2, exactly this one line, and no ledger written (none created where there was none)."""
    assert (result.exit_code, result.stderr, result.stdout) == (2, f"error: {message}\n", "")
    assert (root / "ledger.db").exists() == ledger_existed


def stdin_proposal(**fields) -> dict:
    return {"id": "gamma", "title": "G", "author": "agent", "round": 1, "target": "axpy", "pitch": "p", "patch": PATCH, **fields}


def dump(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return list(conn.iterdump())


# input files -------------------------------------------------------------------------------------------


def test_a_pitch_that_is_not_utf8_is_named(judge_env):
    judge_, root = judge_env
    proposal_dir(root, pitch=b"caf\xe9 au lait")
    refused(judge_("submit", "proposals"), "proposals/alpha/pitch.md: not UTF-8 text (byte 0xe9 at offset 3)", root)


def test_a_symlinked_pitch_does_not_pull_another_file_in(judge_env):
    judge_, root = judge_env
    secret = root / "secret.txt"
    secret.write_text("the machine's secret")
    d = proposal_dir(root)
    (d / "pitch.md").unlink()
    os.symlink(secret, d / "pitch.md")
    refused(judge_("submit", "proposals"),
            "proposals/alpha/pitch.md: a symbolic link; judge reads only regular files (copy the file here instead)", root)


def test_a_symlinked_patch_is_not_followed(judge_env):
    judge_, root = judge_env
    d = proposal_dir(root, patch=None)
    (root / "elsewhere.diff").write_text(PATCH)
    os.symlink(root / "elsewhere.diff", d / "patch.diff")
    refused(judge_("submit", "proposals"),
            "proposals/alpha/patch.diff: a symbolic link; judge reads only regular files (copy the file here instead)", root)


def test_a_fifo_pitch_is_refused_without_blocking(judge_env):
    judge_, root = judge_env
    d = proposal_dir(root)
    (d / "pitch.md").unlink()
    os.mkfifo(d / "pitch.md")
    refused(judge_("submit", "proposals"), "proposals/alpha/pitch.md: a FIFO; judge reads only regular files", root)


def test_a_device_as_a_shark_file_is_refused(judge_env):
    judge_, root = judge_env
    refused(judge_("shark", "add", "/dev/zero"), "/dev/zero: a character device; judge reads only regular files", root)


def test_a_symlinked_vote_file_in_a_folder_is_refused(judge_env):
    judge_, root = judge_env
    proposal_dir(root)
    judge_("submit", "proposals")
    judge_("shark", "add", str(ROOT / "sharks" / "performance-oracle.toml"))
    (root / "votes").mkdir()
    os.symlink(ROOT / "votes" / "nvfp4_group_gemm" / "round-1" / "oracle--pipeline-stages-3.toml", root / "votes" / "v.toml")
    before = dump(root / "ledger.db")
    refused(judge_("vote", "votes"), "votes/v.toml: a symbolic link; judge reads only regular files (copy the file here instead)",
            root, ledger_existed=True)
    assert dump(root / "ledger.db") == before


def test_a_crlf_patch_is_refused_in_both_forms(judge_env):
    judge_, root = judge_env
    proposal_dir(root, patch=PATCH.replace("\n", "\r\n").encode())
    reason = ("CRLF line endings (line 1); judge takes patches with LF line endings only, so that the kernel file's "
              "LF lines stay LF (convert it, e.g. with dos2unix)")
    refused(judge_("submit", "proposals"), f"proposals/alpha/patch.diff: {reason}", root)
    crlf = stdin_proposal(patch=PATCH.replace("\n", "\r\n", 2)[:-1] + "\r\n")
    refused(judge_("submit", "-", input=json.dumps(crlf)), f"<stdin>: field 'patch': CRLF line endings (line 1); {reason.split('; ', 1)[1]}", root)


def test_an_empty_patch_does_not_turn_a_proposal_into_a_pitch(judge_env):
    judge_, root = judge_env
    proposal_dir(root, patch=b"\n")
    why = "empty (a proposal without a patch is a pitch: leave the patch out to submit one)"
    refused(judge_("submit", "proposals"), f"proposals/alpha/patch.diff: {why}", root)
    refused(judge_("submit", "-", input=json.dumps(stdin_proposal(patch=""))), f"<stdin>: field 'patch': {why}", root)


def test_json_without_a_pitch_is_refused_like_a_directory_without_one(judge_env):
    judge_, root = judge_env
    data = stdin_proposal()
    del data["pitch"]
    refused(judge_("submit", "-", input=json.dumps(data)),
            "<stdin>: field 'pitch': required field is missing (every proposal needs a pitch)", root)
    refused(judge_("submit", "-", input=json.dumps(stdin_proposal(pitch="  \n"))),
            "<stdin>: field 'pitch': empty (every proposal needs a pitch)", root)
    proposal_dir(root, pitch=b"\n")
    refused(judge_("submit", "proposals"), "proposals/alpha/pitch.md: empty (every proposal needs a pitch)", root)


@pytest.mark.parametrize("claim, field", [("{\"low\": 1.1, \"high\": Infinity}", "claim.high"),
                                          ("{\"low\": NaN, \"high\": 1.2}", "claim.low"),
                                          ("{\"low\": 1, \"high\": 2, \"per_benchmark\": {\"0\": [1, Infinity]}}",
                                           "claim.per_benchmark.0.1")])
def test_a_claim_that_is_not_finite_is_refused(judge_env, claim, field):
    judge_, root = judge_env
    text = json.dumps(stdin_proposal()).replace('"round": 1', f'"round": 1, "claim": {claim}')
    refused(judge_("submit", "-", input=text), f"<stdin>: field '{field}': Input should be a finite number", root)


def test_an_infinite_claim_in_toml_is_refused(judge_env):
    judge_, root = judge_env
    d = proposal_dir(root)
    (d / "proposal.toml").write_text((d / "proposal.toml").read_text().replace("high = 1.2", "high = inf"))
    refused(judge_("submit", "proposals"), "proposals/alpha/proposal.toml: field 'claim.high': Input should be a finite number", root)


# size limits -------------------------------------------------------------------------------------------


def test_the_default_limits_refuse_a_5_mb_pitch_a_large_patch_and_large_json(judge_env):
    judge_, root = judge_env
    proposal_dir(root, pitch=b"x" * 5_000_000)
    refused(judge_("submit", "proposals"), "proposals/alpha/pitch.md: 5000000 bytes, over the limit of 1 MiB for a pitch "
            "(set JUDGE_MAX_PITCH_BYTES to change it)", root)
    proposal_dir(root, "beta", patch=PATCH.encode() + b"#" * (4 * 1024 * 1024))
    refused(judge_("submit", "proposals/beta"), f"proposals/beta/patch.diff: {len(PATCH) + 4 * 1024 * 1024} bytes, over the "
            "limit of 4 MiB for a patch (set JUDGE_MAX_PATCH_BYTES to change it)", root)
    big = json.dumps(stdin_proposal(notes="n" * (8 * 1024 * 1024)))
    refused(judge_("submit", "-", input=big), f"<stdin>: {8 * 1024 * 1024 + 1} bytes, over the limit of 8 MiB for JSON or "
            "TOML input (set JUDGE_MAX_JSON_BYTES to change it)", root)


def test_inline_pitch_and_patch_meet_the_same_limits_as_files(judge_env, monkeypatch):
    judge_, root = judge_env
    monkeypatch.setenv("JUDGE_MAX_PITCH_BYTES", "10")
    refused(judge_("submit", "-", input=json.dumps(stdin_proposal(pitch="é" * 6))),
            "<stdin>: field 'pitch': 12 bytes, over the limit of 10 bytes for a pitch (set JUDGE_MAX_PITCH_BYTES to change it)", root)
    monkeypatch.setenv("JUDGE_MAX_PATCH_BYTES", "100")
    refused(judge_("submit", "-", input=json.dumps(stdin_proposal(pitch="ok"))), f"<stdin>: field 'patch': {len(PATCH)} bytes, "
            "over the limit of 100 bytes for a patch (set JUDGE_MAX_PATCH_BYTES to change it)", root)


def test_a_limit_can_be_raised_and_a_bad_setting_is_named(judge_env, monkeypatch):
    judge_, root = judge_env
    proposal_dir(root, pitch=b"x" * (1024 * 1024 + 1))
    monkeypatch.setenv("JUDGE_MAX_PITCH_BYTES", "lots")
    refused(judge_("submit", "proposals"), "JUDGE_MAX_PITCH_BYTES: expected a positive number of bytes, got 'lots'", root)
    monkeypatch.setenv("JUDGE_MAX_PITCH_BYTES", str(2 * 1024 * 1024))
    assert judge_("submit", "proposals").output == "new       alpha revision 1\n"


# the ledger ----------------------------------------------------------------------------------------------


def test_a_ledger_that_is_not_sqlite_is_refused_and_left_alone(judge_env):
    judge_, root = judge_env
    (root / "notes.txt").write_text("these are my notes, not a database\n" * 50)
    for command in (["status"], ["init"], ["list", "--json"]):
        result = judge_("--ledger", "notes.txt", *command)
        message = "notes.txt: not a judge ledger (SQLite: file is not a database)"
        if "--json" in command:
            assert (result.exit_code, json.loads(result.stdout)) == (2, {"error": message, "exit": 2})
        else:
            assert (result.exit_code, result.stderr) == (2, f"error: {message}\n")
    assert (root / "notes.txt").read_text() == "these are my notes, not a database\n" * 50


def test_a_ledger_from_a_later_judge_is_refused_naming_its_migrations(judge_env):
    judge_, root = judge_env
    judge_("init")
    with sqlite3.connect(root / "ledger.db") as conn:
        conn.executemany("insert into _judge_migrations (name, applied_at) values (?, 't')", [("m900_future",), ("m901_more",)])
    before = dump(root / "ledger.db")
    names = [fn.__name__ for fn in migrations.MIGRATIONS]
    message = (f"ledger.db: written by a later judge: migrations m900_future, m901_more are unknown to judge "
               f"{judge.__version__} (it knows {names[0]} to {names[-1]}); open it with a judge that knows them")
    for command in ("status", "init"):
        assert (judge_(command).exit_code, judge_(command).stderr) == (2, f"error: {message}\n")
    proposal_dir(root)
    assert judge_("submit", "proposals").stderr == f"error: {message}\n"
    assert dump(root / "ledger.db") == before


def test_a_read_only_ledger_can_be_read_but_a_write_is_one_line(judge_env, monkeypatch):
    judge_, root = judge_env
    proposal_dir(root)
    judge_("submit", "proposals/alpha")
    proposal_dir(root, "beta")
    before = dump(root / "ledger.db")
    os.chmod(root / "ledger.db", 0o444)
    if os.geteuid() == 0:  # root may write any file: make judge see the permission the file has
        real = os.access
        monkeypatch.setattr(os, "access", lambda path, mode, **kw: (
            False if Path(path).name == "ledger.db" and mode & os.W_OK else real(path, mode, **kw)))
    assert [r["id"] for r in json.loads(judge_("list", "--json").stdout)] == ["alpha"]
    result = judge_("submit", "proposals/beta")
    assert (result.exit_code, result.stderr) == (2, "error: ledger.db: the ledger is read-only, nothing was written "
                                                    "(attempt to write a readonly database)\n")
    assert dump(root / "ledger.db") == before


def test_a_vote_on_a_criterion_bound_to_a_measurement_is_refused(judge_env):
    judge_, root = judge_env
    proposal_dir(root)
    judge_("submit", "proposals")
    judge_("shark", "add", str(ROOT / "sharks" / "measured-referee.toml"))
    vote = {"shark": "measured-referee", "proposal": "alpha", "scores": {"claim_honesty": 7, "measured_speedup": 9}}
    before = dump(root / "ledger.db")
    result = judge_("vote", "-", input=json.dumps(vote))
    assert (result.exit_code, result.stderr) == (
        2, "error: <stdin>: field 'scores.measured_speedup': bound to the measured speedup, which judge scores itself (leave it out)\n")
    assert dump(root / "ledger.db") == before
