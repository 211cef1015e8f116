"""The bodies the API's writes take: what `judge submit -`, `judge vote -` and a shark file hold, one or several,
or the CLI's envelope that names each item's file, so that an error names the file on the agent's machine."""

from __future__ import annotations

from typing import Any

from ..errors import JudgeError
from ..records import Proposal, Shark, Vote

ENVELOPE = "submissions"
MAX_SOURCE = 300


def items_of(data: Any, kind: str, split: bool = True) -> list[tuple[Any, str]]:
    """(item, source) pairs of a body: {"submissions": [{"source": NAME, KIND: ITEM}, ...]}, or the item itself
    ("<request>"), or (with `split`) a list of items ("<request>[i]")."""
    if isinstance(data, dict) and set(data) == {ENVELOPE}:
        entries = data[ENVELOPE]
        if not isinstance(entries, list) or not entries:
            raise JudgeError(f"request body: field '{ENVELOPE}': expected a non-empty list")
        return [_entry(entry, kind, i) for i, entry in enumerate(entries)]
    if split and isinstance(data, list):
        if not data:
            raise JudgeError(f"request body: expected a {kind} or a non-empty list of them")
        return [(item, f"<request>[{i}]") for i, item in enumerate(data)]
    return [(data, "<request>")]


def _entry(entry: Any, kind: str, i: int) -> tuple[Any, str]:
    where = f"request body: field '{ENVELOPE}[{i}]"
    if not isinstance(entry, dict) or set(entry) != {"source", kind}:
        raise JudgeError(f"{where}': expected {{\"source\": NAME, \"{kind}\": {{...}}}}")
    source = entry["source"]
    if not isinstance(source, str) or not source.strip() or len(source) > MAX_SOURCE or not source.isprintable():
        raise JudgeError(f"{where}.source': expected the name of a file, on one line, at most {MAX_SOURCE} characters")
    return entry[kind], source


def _body(schema: dict, kind: str) -> dict:
    envelope = {"type": "object", "required": [ENVELOPE], "properties": {ENVELOPE: {"type": "array", "items": {
        "type": "object", "required": ["source", kind], "properties": {"source": {"type": "string"}, kind: schema}}}}}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": {
        "anyOf": [schema, {"type": "array", "items": schema}, envelope]}}}}}


def inlined(model) -> dict:
    """A model's JSON schema with its `$defs` written in place, so that it stands anywhere in the OpenAPI document."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def walk(node):
        if isinstance(node, dict):
            if "$ref" in node:
                return walk(defs[node["$ref"].rsplit("/", 1)[-1]])
            return {k: walk(v) for k, v in node.items()}
        return [walk(v) for v in node] if isinstance(node, list) else node

    try:
        return walk(schema)
    finally:
        del walk  # a recursive closure is a cycle; nothing here is large, but none is left (exchange._NO_CYCLE)


def proposal_schema() -> dict:
    return _body(inlined(Proposal), "proposal")


def vote_schema() -> dict:
    return _body(inlined(Vote), "vote")


def shark_schema() -> dict:
    return _body(inlined(Shark), "shark")
