"""Job records in bulk: many jobs per Redis command, for publishing large sweeps.

A pipelined command per job costs the client far more (packing, parsing) than Redis
spends on it. Here one script call carries a batch of jobs: ``states`` and ``names`` read a
batch of records' states or names, ``publish`` runs lua/publish.lua once per job inside
lua/publish_many.lua, so every job is still created with its message in one atomic step.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import redis

from state import scripts
from state.jobrecord import job_key

STATES_BATCH = 5000  # job IDs per states script call
PUBLISH_BATCH = 500  # jobs per publish script call (a few MB of arguments; ~20 ms in Redis)
IN_FLIGHT = 2  # batches built ahead of Redis's replies: bounds the memory held


def _chunks(seq: Sequence, size: int):
    for start in range(0, len(seq), size):
        yield seq[start : start + size]


class Bulk:
    """Batched reads and publishes of job records on one Redis client (one that decodes replies)."""

    def __init__(self, client: redis.Redis):
        self.r = client
        self._publish_many = scripts.script(client, "publish_many")

    def states(self, job_ids: Iterable[str], batch: int = STATES_BATCH) -> dict[str, str | None]:
        """Each job's state string (None: no record), in a few script calls."""
        return self._each("states", job_ids, batch)

    def names(self, job_ids: Iterable[str], batch: int = STATES_BATCH) -> dict[str, str | None]:
        """Each job's name (None: no record), in a few script calls."""
        return self._each("names", job_ids, batch)

    def _each(self, script: str, job_ids: Iterable[str], batch: int) -> dict[str, str | None]:
        ids = list(job_ids)
        out: dict[str, str | None] = {}
        for chunk in _chunks(ids, batch):
            res = scripts.read_only(self.r, script, [job_key(jid) for jid in chunk])
            out.update((jid, s or None) for jid, s in zip(chunk, res, strict=True))
        return out

    def publish(
        self, jobs: Iterable[tuple[list[str], list[str]]], batch: int = PUBLISH_BATCH
    ) -> list[tuple[str, str]]:
        """Run publish.lua for each (KEYS, ARGV); returns each job's (action, prior state).

        ``jobs`` may be a generator: a sender thread waits on Redis with one batch while
        this thread builds the next, so Redis's share of the work (about half) overlaps.
        """
        pending: deque[Future] = deque()
        out: list[tuple[str, str]] = []
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="fleet-publish") as sender:
            for chunk in _batched(jobs, batch):
                pending.append(
                    sender.submit(self._publish_many, args=[json.dumps(chunk, ensure_ascii=False)])
                )
                while len(pending) > IN_FLIGHT:
                    out += _pairs(pending.popleft().result())
            while pending:
                out += _pairs(pending.popleft().result())
        return out


def _batched(items: Iterable, size: int):
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _pairs(res) -> list[tuple[str, str]]:
    return [(a, b) for a, b in res]
