"""Searches as plain data for `fleet status` (one line each) and `fleet why` (a trial's
search, and why it issues no more). A trial belongs to the search its record names.

A fleet with no search never loads a search's view (the search configuration and the
manifest schema under it): the index and the job's record say first whether there is one."""

from __future__ import annotations

from typing import TYPE_CHECKING

import redis

from state.jobrecord import fetch
from state.search.index import all_searches

if TYPE_CHECKING:
    from state.search.view import SearchView


def summaries(client: redis.Redis) -> list[SearchView]:
    """Every search, by name, without its trials."""
    index = all_searches(client)
    if not index:
        return []
    from state.search.view import read_search

    out = [read_search(client, sid, trials=False) for _, sid in sorted(index.items())]
    return [v for v in out if v is not None]


def of_job(client: redis.Redis, job_id: str) -> SearchView | None:
    """The search a trial belongs to (None for any other job)."""
    rec = fetch(client, job_id, ("search",))
    if not (rec and rec.search):
        return None
    from state.search.view import read_search

    return read_search(client, rec.search, trials=False)
