"""Values every part of the ledger writes the same way: timestamps, digests, JSON columns."""

from __future__ import annotations

import datetime
import json
from typing import Any

from ..records import sha256  # noqa: F401 (the digest the ledger keeps of a kernel's or a proposal's text)


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)
