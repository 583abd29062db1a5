"""Publish order: the most demanding queues first.

An idle big host blocked on its queues takes whatever is pushed first; publishing a
``cuda`` job before the ``cuda-large`` job only it can run would spend it on the small one.
Pure: rows in, rows out, routed once per queue (a sweep has few queues and many jobs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from manifest.schema import HostPolicy, JobSpec, TierSpec
from routing.tiers import demand, route


class _Row(Protocol):
    job: JobSpec
    queue: str


R = TypeVar("R", bound=_Row)


def demanding_first(
    rows: Sequence[R], tiers: Sequence[TierSpec], hosts: dict[str, HostPolicy]
) -> list[R]:
    """``rows`` sorted by what their queue demands of a host, most first; stable otherwise."""
    floors = {t.name: t.floor for t in tiers}
    keys: dict[str, tuple] = {}
    for row in rows:
        if row.queue not in keys:
            r = route(row.job, tiers, hosts)
            c = r.constraint if r is not None and r.queue == row.queue else None
            needs = (
                c.needs
                if c is not None and c.needs is not None
                else floors.get(row.queue.split(".")[0])
            )
            keys[row.queue] = demand(needs) if needs is not None else (False, 0.0, 0.0, 0)
    return sorted(rows, key=lambda row: keys[row.queue], reverse=True)
