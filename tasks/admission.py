"""This worker's resource pool, shared by its consumer and its running jobs.

The transport asks ``consumable`` before each BRPOP (only queues whose most demanding job
would start now), reserves what a delivered job needs with ``take`` before handing it to
Celery, and gives it back with ``release`` when the delivery is acked or rejected, that is
after the job's whole process group has exited. A release wakes a BRPOP that waits on
fewer queues than the freed resources allow (``wake_key``), so a freed GPU is offered work
at once. Admission itself is pure (``routing.pool``); this module adds the lock and the
bookkeeping by delivery tag.
"""
from __future__ import annotations

import threading
from typing import Callable, Iterable

from routing.pool import Demand, Grant, Pool, admit, release

# queue name -> what the most demanding job on it needs (None: unknown, consume it anyway)
QueueDemand = Callable[[str], "Demand | None"]


class Gate:
    def __init__(self, pool: Pool, queue_demand: QueueDemand, on_release: Callable[[], None] = lambda: None):
        self._pool, self._demand = pool, queue_demand
        self._grants: dict[str, Grant] = {}
        self._lock = threading.Lock()
        self._on_release = on_release

    @property
    def pool(self) -> Pool:
        with self._lock:
            return self._pool

    def held(self) -> dict[str, Grant]:
        with self._lock:
            return dict(self._grants)

    def consumable(self, queues: Iterable[str]) -> list[str]:
        """The queues (in their order) whose jobs would all start here now."""
        with self._lock:
            pool = self._pool
        out = []
        for q in queues:
            need = self._demand(q)
            if need is None or admit(pool, need) is not None:
                out.append(q)
        return out

    def take(self, tag: str, demand: Demand) -> Grant | None:
        """Reserve ``demand`` for the delivery ``tag``; None when it cannot start now."""
        with self._lock:
            if tag in self._grants:
                return self._grants[tag]
            got = admit(self._pool, demand)
            if got is None:
                return None
            self._grants[tag], self._pool = got
            return got[0]

    def grant(self, tag: str) -> Grant | None:
        with self._lock:
            return self._grants.get(tag)

    def release(self, tag: str) -> None:
        """Give back what ``tag`` held (a no-op for a tag that holds nothing)."""
        with self._lock:
            grant = self._grants.pop(tag, None)
            if grant is None:
                return
            self._pool = release(self._pool, grant)
        self._on_release()
