"""What keeps the referee up: request bodies no larger than judge takes from a file, and a rate per token."""

from __future__ import annotations

import math
import threading
import time
from collections import deque

from starlette.requests import Request

from ..errors import JudgeError
from ..inputs import FIELDS, decode


class TooLarge(JudgeError):
    """A request body over the JSON limit: the server answers 413."""


class RateLimited(JudgeError):
    """Too many requests from one token: the server answers 429, with the seconds to wait."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


async def read_body(request: Request) -> str:
    """The request's body as UTF-8 text, refused past the limit of JSON on stdin (JUDGE_MAX_JSON_BYTES) before it is
    read whole: the limit a file or `judge submit -` has, with the same words."""
    limit = FIELDS.bytes()
    declared = request.headers.get("content-length", "")
    if declared.isdigit():
        _check(FIELDS, int(declared))
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            break
    _check(FIELDS, min(len(data), limit + 1))  # as `judge submit -` reads stdin: no further than one byte past
    return decode(bytes(data), "request body")


def _check(limit, size: int) -> None:
    try:
        limit.check(size, "request body")
    except JudgeError as error:
        raise TooLarge(error.message) from None


class RateLimiter:
    """At most `per_minute` requests from one token in any 60 seconds (a sliding window)."""

    def __init__(self, per_minute: int, clock=time.monotonic):
        self.per_minute = per_minute
        self.clock = clock
        self.lock = threading.Lock()
        self.seen: dict[str, deque] = {}

    def admit(self, key: str, name: str) -> None:
        now = self.clock()
        with self.lock:
            window = self.seen.setdefault(key, deque())
            while window and window[0] <= now - 60:
                window.popleft()
            if len(window) >= self.per_minute:
                wait = max(1, math.ceil(window[0] + 60 - now))
                raise RateLimited(f"too many requests: participant '{name}' sent {self.per_minute} in the last minute, "
                                  f"this server's limit per token ('judge serve --rate-limit'); retry in {wait} s", wait)
            window.append(now)
