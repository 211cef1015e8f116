"""Reads proposals, sharks and votes from files or JSON into validated records.

A proposal is a directory `proposal.toml` + `pitch.md` (+ optional `patch.diff`), or one JSON
object with the same fields plus `pitch` and `patch`; sharks and votes are TOML or JSON files.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from .errors import JudgeError
from .records import Proposal, Shark, Vote, parse

PROPOSAL_FILE = "proposal.toml"
PITCH_FILE = "pitch.md"
PATCH_FILE = "patch.diff"


def read_structured(path: Path) -> Any:
    """A TOML or JSON file's content, with a one-line error naming the file."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise JudgeError(f"{path}: not found") from None
    except UnicodeDecodeError:
        raise JudgeError(f"{path}: not a text file") from None
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


def load_proposal_dir(path: Path) -> Proposal:
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
    pitch_path = path / PITCH_FILE
    if not pitch_path.is_file():
        raise JudgeError(f"{pitch_path}: not found (every proposal needs a pitch)")
    data["pitch"] = pitch_path.read_text()
    patch_path = path / PATCH_FILE
    if patch_path.is_file():
        try:
            data["patch"] = patch_path.read_text()
        except UnicodeDecodeError:
            raise JudgeError(f"{patch_path}: binary patches are not accepted") from None
    return parse(Proposal, data, str(meta_path))


def load_proposal_json(text: str, source: str = "<stdin>") -> Proposal:
    data = parse_json(text, source)
    if not isinstance(data, dict):
        raise JudgeError(f"{source}: expected one JSON object with the proposal's fields")
    return parse(Proposal, data, source)


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
