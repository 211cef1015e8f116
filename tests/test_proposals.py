"""Reading proposals, sharks and votes from files and JSON, with one-line errors naming the file."""

import json

import pytest

from judge.errors import JudgeError
from judge.proposals import load_proposal_dir, load_proposal_json, load_vote_file, load_votes

TOML = 'id = "wide-n"\ntitle = "Wider N tile"\nauthor = "contestant-2"\nround = 1\ntarget = "axpy"\ncategory = "tiling"\n[claim]\nlow = 1.1\nhigh = 1.3\n'


def write(tmp_path, toml=TOML, pitch="Because.", patch=None):
    d = tmp_path / "wide-n"
    d.mkdir()
    (d / "proposal.toml").write_text(toml)
    if pitch is not None:
        (d / "pitch.md").write_text(pitch)
    if patch is not None:
        (d / "patch.diff").write_bytes(patch)
    return d


def test_a_directory_becomes_a_proposal_with_its_pitch_and_patch(tmp_path):
    p = load_proposal_dir(write(tmp_path, patch=b"--- a/submission.py\n"))
    assert (p.id, p.category, p.claim.low, p.pitch, p.patch) == ("wide-n", "tiling", 1.1, "Because.", "--- a/submission.py\n")


def test_a_proposal_without_a_pitch_is_refused(tmp_path):
    d = write(tmp_path, pitch=None)
    with pytest.raises(JudgeError) as error:
        load_proposal_dir(d)
    assert str(error.value) == f"{d / 'pitch.md'}: not found (every proposal needs a pitch)"


def test_a_binary_patch_file_is_refused(tmp_path):
    d = write(tmp_path, patch=b"\x89PNG\r\n\x1a\n\xff\xfe")
    with pytest.raises(JudgeError) as error:
        load_proposal_dir(d)
    assert str(error.value) == f"{d / 'patch.diff'}: binary patches are not accepted"


def test_bad_toml_names_the_file(tmp_path):
    d = write(tmp_path, toml="id = \n")
    with pytest.raises(JudgeError) as error:
        load_proposal_dir(d)
    assert str(error.value).startswith(f"{d / 'proposal.toml'}: not valid TOML: ")


def test_a_field_error_names_the_toml_file(tmp_path):
    d = write(tmp_path, toml=TOML.replace("round = 1", "round = -2"))
    with pytest.raises(JudgeError) as error:
        load_proposal_dir(d)
    assert str(error.value) == f"{d / 'proposal.toml'}: field 'round': Input should be greater than or equal to 1"


def test_a_json_proposal_carries_pitch_and_patch_inline():
    data = {"id": "x", "title": "X", "author": "agent-7", "round": 2, "target": "axpy", "pitch": "p", "patch": "--- a/submission.py\n"}
    p = load_proposal_json(json.dumps(data))
    assert (p.round, p.pitch, p.has_patch) == (2, "p", True)


def test_broken_json_says_where():
    with pytest.raises(JudgeError) as error:
        load_proposal_json('{"id": "x",}')
    assert str(error.value) == "<stdin>: not valid JSON: Expecting property name enclosed in double quotes at line 1 column 12"


def test_a_list_of_votes_names_each_by_position():
    with pytest.raises(JudgeError) as error:
        load_votes([{"shark": "s", "proposal": "p", "scores": {"a": 1}}, {"shark": "s", "scores": {}}], "votes.json")
    assert str(error.value) == "votes.json[1]: field 'proposal': required field is missing"


def test_a_vote_file_may_hold_several_votes(tmp_path):
    f = tmp_path / "votes.toml"
    f.write_text('[[votes]]\nshark = "s"\nproposal = "a"\nscores = {x = 1}\n[[votes]]\nshark = "s"\nproposal = "b"\nscores = {x = 2}\n')
    assert [v.proposal for v in load_vote_file(f)] == ["a", "b"]


def test_both_forms_are_validated_alike(tmp_path):
    """The same proposal as a directory and as JSON: the same checks, each naming where the pitch or patch came from."""
    d = write(tmp_path, pitch=" \n", patch=b"--- a/submission.py\n")
    with pytest.raises(JudgeError) as error:
        load_proposal_dir(d)
    assert str(error.value) == f"{d / 'pitch.md'}: empty (every proposal needs a pitch)"
    data = {"id": "x", "title": "X", "author": "a", "round": 1, "target": "axpy", "pitch": " \n"}
    with pytest.raises(JudgeError) as error:
        load_proposal_json(json.dumps(data))
    assert str(error.value) == "<stdin>: field 'pitch': empty (every proposal needs a pitch)"
    with pytest.raises(JudgeError) as error:
        load_proposal_json(json.dumps({**data, "pitch": "p", "patch": "\n"}))
    assert str(error.value) == "<stdin>: field 'patch': empty (a proposal without a patch is a pitch: leave the patch out to submit one)"
    assert load_proposal_json(json.dumps({**data, "pitch": "p", "patch": None})).has_patch is False


def test_a_pitch_keeps_reading_crlf_as_lf(tmp_path):
    """As Python's text mode always did, so that resubmitting an unchanged proposal stays 'unchanged'."""
    assert load_proposal_dir(write(tmp_path, pitch="line one\r\nline two\r\n")).pitch == "line one\nline two\n"


def test_a_pitch_or_patch_that_is_a_directory_is_named(tmp_path):
    d = write(tmp_path)
    (d / "patch.diff").mkdir()
    with pytest.raises(JudgeError) as error:
        load_proposal_dir(d)
    assert str(error.value) == f"{d / 'patch.diff'}: a directory; judge reads only regular files"
