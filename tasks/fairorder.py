"""A worker's fair-share order: which owner lists of each queue to ask for, least used first.

Recomputed at most every ``C.FAIRSHARE_REFRESH_S`` (and after a poll that found nothing, so
an idle worker sees a new owner's first job within one BRPOP timeout): one round trip that
prunes emptied owner lists (state.queues.live) and reads usage and shares. Between
refreshes every poll reuses the same key lists, so fair share costs a poll only the longer
BRPOP key list (bench/fairshare.py measures it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

import redis

from core import constants as C
from routing import fairshare as F
from state import fairshare, queues

log = logging.getLogger("fleet.fairshare")


class FairOrder:
    """Owner lists per queue, in fair-share order, refreshed from Redis now and then."""

    def __init__(
        self,
        acquire: Callable[[], AbstractContextManager[redis.Redis]],
        steps: Sequence[int],
        every_s: float = C.FAIRSHARE_REFRESH_S,
        half_life_s: float | None = None,
    ):
        self.acquire = acquire
        self.steps = tuple(steps)
        self.every_s = every_s
        self.half_life_s = fairshare.half_life_s() if half_life_s is None else half_life_s
        self._owners: dict[str, list[str]] = {}
        self._keys: dict[str, list[str]] = {}
        self._next = 0.0

    def expire(self) -> None:
        """Refresh before the next poll (it found nothing: a new owner's list may exist)."""
        self._next = 0.0

    def keys(self, queue: str) -> list[str]:
        """``queue``'s lists in serving order: kombu's plain ones, then owners least used first."""
        self._maybe_refresh()
        got = self._keys.get(queue)
        if got is None:
            got = self._keys[queue] = queues.keys_of(queue, self._owners.get(queue, ()), self.steps)
        return got

    def owners(self, queue: str) -> list[str]:
        self._maybe_refresh()
        return list(self._owners.get(queue, ()))

    def _maybe_refresh(self) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.every_s
        try:
            with self.acquire() as client:
                live = queues.live(client)
                usage = fairshare.read_usage(client) if live else {}
                shares = fairshare.read_shares(client) if live else {}
        except redis.RedisError as e:
            log.warning(
                "fair share: cannot read owner lists or usage (%s); keeping the last order", e
            )
            return
        self._owners = ranked(live, usage, shares, time.time(), self.half_life_s)
        self._keys = {}


def ranked(
    live: dict[str, list[str]],
    usage: dict[str, fairshare.OwnerUsage],
    shares: dict[str, float],
    now: float,
    half_life_s: float,
) -> dict[str, list[str]]:
    """Each queue's waiting owners in fair-share order (least standing first). Pure."""
    names = {o for owners in live.values() for o in owners}
    order = F.order(
        {o: usage.get(o, fairshare.OwnerUsage()).usage() for o in names}, shares, now, half_life_s
    )
    rank = {o: i for i, o in enumerate(order)}
    return {q: sorted(owners, key=rank.__getitem__) for q, owners in live.items()}
