"""`fleet share list`: each owner's share, decayed usage and standing, and their waiting jobs.

Read-only, as workers see it (state.fairshare, state.queues): the owner with the lowest
standing (decayed usage per share) has their jobs served first.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis

from state import fairshare, queues


@dataclass(frozen=True)
class ShareRow:
    standing: fairshare.Standing
    waiting: int  # messages in the owner's lists, every queue

    def to_dict(self) -> dict:
        return {**self.standing.to_dict(), "waiting": self.waiting}


@dataclass(frozen=True)
class SharesView:
    rows: list[ShareRow]  # serving order: least standing first
    half_life_s: float
    now: float

    def to_dict(self) -> dict:
        return {
            "half_life_s": self.half_life_s,
            "at": self.now,
            "owners": [r.to_dict() for r in self.rows],
        }


def waiting(client: redis.Redis) -> dict[str, int]:
    """Messages waiting per owner, over every queue's owner lists."""
    by_queue = queues.registered(client)
    pairs = [(q, o) for q, owners in by_queue.items() for o in owners]
    pipe = client.pipeline(transaction=False)
    for q, o in pairs:
        for p in queues.PRIORITY_STEPS:
            pipe.llen(queues.owner_key(q, o, p))
    flat = pipe.execute()
    n = len(queues.PRIORITY_STEPS)
    out: dict[str, int] = {}
    for i, (_, o) in enumerate(pairs):
        out[o] = out.get(o, 0) + sum(flat[i * n : (i + 1) * n])
    return out


def read_shares(client: redis.Redis, now: float | None = None) -> SharesView:
    now = time.time() if now is None else now
    half_life = fairshare.half_life_s()
    counts = waiting(client)
    standings = fairshare.standings(
        fairshare.read_usage(client), fairshare.read_shares(client), now, half_life, set(counts)
    )
    return SharesView([ShareRow(s, counts.get(s.owner, 0)) for s in standings], half_life, now)
