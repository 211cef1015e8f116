"""Values every part of the ledger writes the same way: timestamps, digests, JSON columns."""

from __future__ import annotations

import datetime
import hashlib
import json
from typing import Any


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)
