"""Reads proposals, sharks and votes from files or JSON into validated records.

A proposal is a directory `proposal.toml` + `pitch.md` (+ optional `patch.diff`), or one JSON
object with the same fields plus `pitch` and `patch`; sharks and votes are TOML or JSON files.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any, Optional

from .errors import JudgeError
from .inputs import FIELDS, PATCH, PITCH, check_text_field, decode, read_bytes, read_text
from .records import Proposal, Shark, Vote, parse

PROPOSAL_FILE = "proposal.toml"
PITCH_FILE = "pitch.md"
PATCH_FILE = "patch.diff"


def read_structured(path: Path) -> Any:
    """A TOML or JSON file's content, with a one-line error naming the file."""
    text = read_text(path, FIELDS)
    if path.suffix == ".json":
        return parse_json(text, str(path))
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise JudgeError(f"{path}: not valid TOML: {error}") from None


def parse_json(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise JudgeError(f"{source}: not valid JSON: {error.msg} at line {error.lineno} column {error.colno}") from None


def load_proposal_dir(path: Path, author: Optional[str] = None) -> Proposal:
    """A proposal directory; `author`: the author where proposal.toml names none (a client's token's
    contestant; locally none, so it is required)."""
    path = Path(path)
    if not path.is_dir():
        raise JudgeError(f"{path}: not a proposal directory (expected {PROPOSAL_FILE}, {PITCH_FILE}, optional {PATCH_FILE})")
    meta_path = path / PROPOSAL_FILE
    data = read_structured(meta_path)
    if not isinstance(data, dict):
        raise JudgeError(f"{meta_path}: expected a table of fields")
    for field in ("pitch", "patch"):
        if field in data:
            raise JudgeError(f"{meta_path}: field '{field}': goes in its own file ({PITCH_FILE} / {PATCH_FILE})")
    pitch_path, patch_path = path / PITCH_FILE, path / PATCH_FILE
    if not os.path.lexists(pitch_path):
        raise JudgeError(f"{pitch_path}: not found (every proposal needs a pitch)")
    if author is not None and "author" not in data:
        data["author"] = author
    data["pitch"] = read_text(pitch_path, PITCH)
    if os.path.lexists(patch_path):
        raw = read_bytes(patch_path, PATCH)
        try:
            data["patch"] = decode(raw, str(patch_path))
        except JudgeError:
            raise JudgeError(f"{patch_path}: binary patches are not accepted") from None
    return proposal_from(data, str(meta_path), {"pitch": str(pitch_path), "patch": str(patch_path)})


def load_proposal_json(text: str, source: str = "<stdin>") -> Proposal:
    data = parse_json(text, source)
    if not isinstance(data, dict):
        raise JudgeError(f"{source}: expected one JSON object with the proposal's fields")
    if "pitch" not in data:
        raise JudgeError(f"{source}: field 'pitch': required field is missing (every proposal needs a pitch)")
    return proposal_from(data, source, {"pitch": f"{source}: field 'pitch'", "patch": f"{source}: field 'patch'"})


def proposal_from(data: dict, source: str, where: dict[str, str]) -> Proposal:
    """The one validation of both forms (directory and JSON): sizes, fields, a pitch with words in it, and a
    patch that is either absent or a non-empty diff with LF line endings. `where` names the pitch and the patch."""
    check_text_field(data.get("pitch"), PITCH, where["pitch"])
    check_text_field(data.get("patch"), PATCH, where["patch"])
    proposal = parse(Proposal, data, source)
    if not proposal.pitch.strip():
        raise JudgeError(f"{where['pitch']}: empty (every proposal needs a pitch)")
    if proposal.patch is not None:
        if not proposal.patch.strip():
            raise JudgeError(f"{where['patch']}: empty (a proposal without a patch is a pitch: leave the patch out to submit one)")
        crlf = proposal.patch.find("\r\n")
        if crlf >= 0:
            line = proposal.patch.count("\n", 0, crlf) + 1
            raise JudgeError(f"{where['patch']}: CRLF line endings (line {line}); judge takes patches with LF line endings "
                             "only, so that the kernel file's LF lines stay LF (convert it, e.g. with dos2unix)")
    return proposal


def load_shark(path: Path) -> Shark:
    data = read_structured(Path(path))
    if not isinstance(data, dict):
        raise JudgeError(f"{path}: expected a table of fields")
    return parse(Shark, data, str(path))


def load_votes(data: Any, source: str) -> list[Vote]:
    """One vote (a table), several (`votes = [...]` / a JSON list), each validated and named by position."""
    if isinstance(data, dict) and "votes" in data and set(data) == {"votes"}:
        data = data["votes"]
    if isinstance(data, dict):
        return [parse(Vote, data, source)]
    if isinstance(data, list) and data:
        return [parse(Vote, item, f"{source}[{i}]") for i, item in enumerate(data)]
    raise JudgeError(f"{source}: expected a vote (a table) or a non-empty list of votes")


def load_vote_file(path: Path) -> list[Vote]:
    return load_votes(read_structured(Path(path)), str(path))
