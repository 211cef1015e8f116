"""Participants and roles (judge/participants.py): tokens kept as hashes, who may do what, and the local CLI."""

import json

import pytest
from click.testing import CliRunner

from judge import participants
from judge.cli.main import main
from judge.errors import JudgeError
from judge.ledger import Ledger
from judge.participants import Forbidden, Participant, Unauthenticated
from judge.records import Proposal, Vote


@pytest.fixture
def ledger(tmp_path):
    return Ledger(tmp_path / "ledger.db")


def test_a_token_is_returned_once_and_kept_only_as_its_sha256(ledger):
    added = participants.add_participant(ledger, "alice", "contestant")
    token = added["token"]
    assert token.startswith("judge_") and len(token) == 49
    [row] = ledger.query("select * from participants")
    assert row["token_sha256"] == participants.token_sha256(token) and token not in json.dumps(row)
    assert participants.authenticate(ledger, token) == Participant("alice", "contestant")
    assert participants.participant_list(ledger) == [{"name": "alice", "role": "contestant", "created_at": added["created_at"],
                                                      "revoked_at": None}]


def test_names_and_roles_are_checked(ledger):
    with pytest.raises(JudgeError) as bad_name:
        participants.add_participant(ledger, "Alice Smith", "contestant")
    assert bad_name.value.message == ("participant name 'Alice Smith': must be a slug: lowercase letters, digits and hyphens "
                                      "(it is the author of a contestant's proposals, the name of a shark)")
    with pytest.raises(JudgeError) as bad_role:
        participants.add_participant(ledger, "alice", "judge")
    assert bad_role.value.message == "role 'judge': must be one of contestant, shark, organizer"
    assert ledger.query("select count(*) as n from participants") == [{"n": 0}]


def test_a_revoked_token_is_refused_and_the_name_can_be_given_a_new_one(ledger):
    old = participants.add_participant(ledger, "alice", "contestant")["token"]
    revoked = participants.revoke_participant(ledger, "alice")
    with pytest.raises(Unauthenticated) as refused:
        participants.authenticate(ledger, old)
    assert refused.value.message == f"the token of participant 'alice' was revoked at {revoked['revoked_at']}: ask the organizer for a new one"
    new = participants.add_participant(ledger, "alice", "contestant")["token"]
    assert participants.authenticate(ledger, new) == Participant("alice", "contestant")
    with pytest.raises(JudgeError, match="^participant 'bob' is not in the ledger, or is revoked already"):
        participants.revoke_participant(ledger, "bob")
    for token, message in [(None, "no token: "), ("judge_nope", "unknown token: ")]:
        with pytest.raises(Unauthenticated, match=f"^{message}"):
            participants.authenticate(ledger, token)


def _proposal(pid: str, author: str) -> Proposal:
    return Proposal(id=pid, title="t", author=author, round=1, target="axpy", pitch="p")


def test_a_contestant_submits_as_itself_and_revises_only_its_own(ledger):
    ledger.submit(_proposal("bobs", "bob"), "test")
    alice = Participant("alice", "contestant")
    alice.check_proposals(ledger, [(_proposal("new", "alice"), "s")])
    with pytest.raises(Forbidden, match="^s: field 'author': 'bob' is not you"):
        alice.check_proposals(ledger, [(_proposal("new", "bob"), "s")])
    with pytest.raises(Forbidden, match="^s: field 'id': proposal 'bobs' is another participant's: participant"):
        alice.check_proposals(ledger, [(_proposal("bobs", "alice"), "s")])
    Participant("boss", "organizer").check_proposals(ledger, [(_proposal("bobs", "carol"), "s")])
    assert alice.fill_author({"id": "x"}) == {"id": "x", "author": "alice"}
    assert Participant("boss", "organizer").fill_author({"id": "x"}) == {"id": "x"}


def test_a_shark_votes_only_as_itself(ledger):
    vote = (Vote(shark="oracle", proposal="p", scores={"a": 1}), "v")
    Participant("oracle", "shark").check_votes([vote])
    Participant("boss", "organizer").check_votes([vote])
    with pytest.raises(Forbidden, match="^v: field 'shark': 'oracle' is not you: participant 'critic' votes only as shark 'critic'$"):
        Participant("critic", "shark").check_votes([vote])
    with pytest.raises(Forbidden, match="^only sharks and the organizer vote: participant 'alice' is a contestant$"):
        Participant("alice", "contestant").check_votes([vote])


def test_the_local_cli_adds_lists_and_revokes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("JUDGE_SERVER", raising=False)
    runner = CliRunner()
    added = runner.invoke(main, ["participant", "add", "alice", "--role", "contestant"])
    assert added.exit_code == 0 and added.stdout.strip().startswith("judge_")
    listed = runner.invoke(main, ["participant", "list"]).stdout
    assert listed.startswith("alice                contestant added ") and "revoked" not in listed
    again = runner.invoke(main, ["participant", "add", "alice", "--role", "shark", "--json"])
    assert (again.exit_code, json.loads(again.stdout)) == (2, {"error": "participant 'alice' exists already, as a contestant "
                                                                   "(revoke it first to give it a new token: 'judge participant revoke alice')", "exit": 2})
    revoked = runner.invoke(main, ["participant", "revoke", "alice"])
    assert revoked.stdout.startswith("participant 'alice' (contestant) revoked at ")
    missing = runner.invoke(main, ["participant", "revoke", "alice"])
    assert (missing.exit_code, missing.stderr) == (2, "error: participant 'alice' is not in the ledger, or is revoked already "
                                                      "(see 'judge participant list')\n")


ALICE, BOB = Participant("alice", "contestant"), Participant("bob", "contestant")
SHARK, BOSS = Participant("oracle", "shark"), Participant("boss", "organizer")
# (reader, judged, who reads judged proposals) -> what it may see of alice's proposal
ACCESS = [
    (ALICE, False, "everyone", "full"), (BOSS, False, "everyone", "full"), (SHARK, False, "everyone", "pitch"),
    (BOB, False, "everyone", "hidden"), (None, False, "everyone", "hidden"),
    (BOB, True, "everyone", "full"), (None, True, "everyone", "full"), (SHARK, True, "everyone", "full"),
    (BOB, True, "participants", "full"), (None, True, "participants", "hidden"),
]


@pytest.mark.parametrize("reader,judged,judged_visible_to,level", ACCESS)
def test_a_proposal_is_its_authors_and_the_organizers_until_judged(reader, judged, judged_visible_to, level):
    assert participants.access(reader, "alice", judged, judged_visible_to) == level
