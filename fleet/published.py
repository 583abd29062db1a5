"""Names already published, for a manifest whose ``after``, ``inputs`` or ``params_from``
name a job or search it does not define (``manifest.edges.Published``): the search of that
name (``fleet:searches``), else the job last published under it (the names index)."""

from __future__ import annotations

from collections.abc import Callable

import redis

from core import constants as C
from manifest.pipeline import Kind, Upstream
from state.redis_conn import decoding


class PublishedNames:
    """Looks names up on the broker, connecting on the first one asked: a manifest whose
    edges name only its own tables never needs the broker to load."""

    def __init__(self, client: Callable[[], redis.Redis]):
        self._connect = client
        self._client: redis.Redis | None = None

    def lookup(self, name: str) -> Upstream | None:
        if self._client is None:
            self._client = decoding(self._connect())
        sid = self._client.hget(C.SEARCHES_KEY, name)
        if sid:
            return Upstream(Kind.SEARCH, sid, name)
        jid = self._client.hget(C.NAMES_INDEX, name)
        return Upstream(Kind.JOB, jid, name) if jid else None
