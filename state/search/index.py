"""The index of searches: each search's name and the id of its one search (``store`` writes
it when a search is published). Apart from ``view``, which loads the search configuration and
its trials' schema: `fleet status` and `fleet why` read the index first and load a search's
view only when there is one to show."""

from __future__ import annotations

import redis

from core import constants as C
from state.redis_conn import decoding


def find_searches(client: redis.Redis, name: str) -> list[str]:
    """Ids of the searches called ``name`` (one at most; empty when none)."""
    sid = decoding(client).hget(C.SEARCHES_KEY, name)
    return [sid] if sid else []


def all_searches(client: redis.Redis) -> dict[str, str]:
    """Search name -> the id of its search."""
    return decoding(client).hgetall(C.SEARCHES_KEY)
