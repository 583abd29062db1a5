"""The dead-letter list: queue entries no worker can use, set aside with the reason.

A poison entry (not JSON, not a fleet task, a body that does not decode) or a message for
a job with no record is pushed here instead of killing a worker or running unpublished
work. Newest first, trimmed to ``DEAD_LETTER_MAX``; ``fleet dead-letter`` lists it.
"""

from __future__ import annotations

import json
import time

import redis

from core import constants as C


def entry(
    raw: bytes | str,
    reason: str,
    queue: str,
    list_key: str = "",
    worker: str = "",
    now: float | None = None,
) -> dict:
    """The record kept for one set-aside entry (raw text cut to a bounded size)."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return {
        "at": time.time() if now is None else now,
        "reason": reason,
        "queue": queue,
        "list": list_key or queue,
        "worker": worker,
        "entry": text[: C.DEAD_LETTER_ENTRY_MAX_CHARS],
        "truncated": len(text) > C.DEAD_LETTER_ENTRY_MAX_CHARS,
    }


def set_aside(client: redis.Redis, record: dict) -> None:
    pipe = client.pipeline(transaction=False)
    pipe.lpush(C.DEAD_LETTER_KEY, json.dumps(record))
    pipe.ltrim(C.DEAD_LETTER_KEY, 0, C.DEAD_LETTER_MAX - 1)
    pipe.execute()


def entries(client: redis.Redis, limit: int = 100) -> list[dict]:
    """The newest ``limit`` set-aside entries (unreadable ones shown as such)."""
    out = []
    for raw in client.lrange(C.DEAD_LETTER_KEY, 0, limit - 1):
        try:
            out.append(json.loads(raw))
        except ValueError:
            out.append({"reason": "unreadable dead-letter record", "entry": repr(raw[:200])})
    return out
