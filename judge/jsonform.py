"""The one way a value becomes JSON, in the server's answers and in `--json` alike: JSON's own types as they are,
judge's types by their declared forms, anything else a TypeError where it is made (never `default=str`, which sent
the noise floor as a Python repr). Imports nothing heavy: `--json` through a server uses it on every command."""

from __future__ import annotations

import dataclasses
import enum
from pathlib import PurePath
from typing import Any


def jsonable(value: Any) -> Any:
    """`value` as JSON's types: dicts (keys as str), lists, str, int, float, bool, None; dataclasses, pydantic models,
    paths, enums and the noise floor by their declared forms. Anything else is a TypeError naming its type."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, dict):
        return {str(k) if not isinstance(k, str) else k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "model_dump") and hasattr(type(value), "model_fields"):  # a pydantic model
        return value.model_dump(mode="json")
    from .noise import Floor

    if isinstance(value, Floor):  # as judge.wire.WireFloor has it
        return value.view()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, (set, frozenset)):
        return [jsonable(v) for v in sorted(value)]
    raise TypeError(f"{type(value).__module__}.{type(value).__qualname__} has no declared JSON form (judge.wire)")
