"""`fleet publish` for ``[jobs.search]``: record each new search and queue its first trials.

A search is recorded once (its id is its content's digest, ``manifest.search``): publishing
the same manifest again finds it and changes nothing; a changed search is a new one. The
first ``parallel`` trials are issued by ``state.advance``, as every later one is, so a
publisher that dies after the record leaves the rest to the sweep (``tasks.worker``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import redis

from fleet.message_template import MessageTemplates
from fleet.route_cache import RouteCache
from manifest.schema import JobSpec, Manifest
from manifest.search import SearchSpec
from state import advance
from state.search import SearchStore, Template, read_search


@dataclass(frozen=True)
class SearchRow:
    spec: SearchSpec
    queue: str
    action: str  # publish | skip
    why: str


def plan(client: redis.Redis | None, manifest: Manifest) -> list[SearchRow]:
    """What publishing would do for each search, and why (no client: offline, as if none
    was published before)."""
    route = RouteCache(manifest)
    rows = []
    for s in manifest.searches:
        r = route(s.base)
        assert r is not None, "the loader rejects jobs no tier guarantees"
        seen = read_search(client, s.search_id, trials=False) if client is not None else None
        c = s.config
        if seen is None:
            rows.append(
                SearchRow(
                    s,
                    r.queue,
                    "publish",
                    f"new search: {c['trials']} trials, {c['parallel']} at once",
                )
            )
        else:
            rows.append(
                SearchRow(s, r.queue, "skip", f"search exists ({seen.ended}/{c['trials']} ended)")
            )
    return rows


def publish(
    client: redis.Redis,
    factory: MessageTemplates,
    rows: list[SearchRow],
    owner: str,
    fields: Callable[[JobSpec, str, str], dict],
) -> None:
    """Record each new search with its trials' template, then issue its first trials."""
    store = SearchStore(client)
    for row in rows:
        base = row.spec.base
        who = base.owner or owner  # the job table's own owner key outranks the publisher's
        text, before, after = factory.template(row.queue, base.priority, who)
        tpl = Template(
            base.to_dict(),
            text,
            before,
            after,
            factory.list_key(row.queue, base.priority, who),
            fields(base, row.queue, who),
        )
        store.create(row.spec.search_id, base.name, row.spec.config, tpl)
        advance.advance(client, row.spec.search_id)
