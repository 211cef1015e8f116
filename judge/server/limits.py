"""What keeps the referee up: request bodies no larger than judge takes from a file, a rate per token, and a quota of
proposals per contestant and round (both set by the organizer: `judge serve --rate-limit --proposals-per-round`)."""

from __future__ import annotations

import math
import threading
import time
from collections import deque

from starlette.requests import Request

from ..errors import JudgeError
from ..inputs import FIELDS, SERVED, decode
from ..ledger import Ledger
from ..records import Proposal

# What a contestant past its quota of proposals is told to wait before asking again: the quota frees up only when the
# organizer runs the round, which the server cannot foresee.
QUOTA_RETRY_S = 600


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
    served = SERVED.set(True)
    try:
        limit.check(size, "request body")
    except JudgeError as error:
        raise TooLarge(error.message) from None
    finally:
        SERVED.reset(served)


def check_quota(ledger: Ledger, author: str, items: list[tuple[Proposal, str]], per_round: int) -> None:
    """At most `per_round` proposals of one contestant in one round of one target, those of this submission counted
    (a revision of one of them is free). Call it inside the write transaction, as the ids it counts are taken."""
    wanted: dict[tuple[str, int], set[str]] = {}
    for proposal, _ in items:
        wanted.setdefault((proposal.target, proposal.round), set()).add(proposal.id)
    for (target, round), ids in sorted(wanted.items()):
        held = ledger.proposals_in_round(author, target, round)
        if len(held | ids) > per_round:
            raise RateLimited(f"too many proposals: participant '{author}' would have {len(held | ids)} in round {round} "
                              f"of {target}, this contest's limit is {per_round} per contestant and round ('judge serve "
                              f"--proposals-per-round'); revise one of yours, or submit for round {round + 1} once round "
                              f"{round} has run; retry in {QUOTA_RETRY_S} s", QUOTA_RETRY_S)


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
