"""Searches as plain data for `fleet status` (one line each) and `fleet why` (a trial's
search, and why it issues no more). A trial belongs to the search its record names."""

from __future__ import annotations

import redis

from state.jobrecord import fetch
from state.search.view import SearchView, all_searches, read_search


def summaries(client: redis.Redis) -> list[SearchView]:
    """Every search, by name, without its trials."""
    out = [
        read_search(client, sid, trials=False) for _, sid in sorted(all_searches(client).items())
    ]
    return [v for v in out if v is not None]


def of_job(client: redis.Redis, job_id: str) -> SearchView | None:
    """The search a trial belongs to (None for any other job)."""
    rec = fetch(client, job_id, ("search",))
    return read_search(client, rec.search, trials=False) if rec and rec.search else None
