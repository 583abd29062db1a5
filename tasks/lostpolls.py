"""BRPOPs whose reply may have been lost, reported to Redis once it answers again.

Redis pops a BRPOP's entry before it replies; if the reply never arrives (Redis restarted,
a connection reset mid-reply), the entry is in no list and not in kombu's ``unacked`` hash
(kombu adds it there only once received). The channel notes the queues of such a poll here,
and the next poll of any channel in this process reports them (``state.records
.ask_reconcile``): kombu makes new channels after a reconnect, so the note outlives the
channel that lost the reply. The reaper then pushes again what no list holds.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager

import redis

from state.records import ask_reconcile

log = logging.getLogger("fleet.transport")


class LostPolls:
    """Queues of lost polls (queue -> when its latest poll was lost), not yet in Redis."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, float] = {}

    def add(self, queues: Iterable[str], at: float | None = None) -> None:
        at = time.time() if at is None else at
        self._note((q, at) for q in queues)

    def report(self, acquire: Callable[[], AbstractContextManager]) -> None:
        """Hand the noted queues to Redis; kept for the next poll if Redis does not answer."""
        if not self._pending:
            return
        with self._lock:
            lost, self._pending = self._pending, {}
        try:
            with acquire() as client:
                ask_reconcile(client, lost)
        except (redis.RedisError, OSError) as e:
            log.warning("a lost poll's queues are not reported yet (%s); next poll retries", e)
            self._note(lost.items())
            return
        log.warning(
            "a poll's reply may be lost; the reaper reconciles queue(s) %s", ", ".join(lost)
        )

    def _note(self, items: Iterable[tuple[str, float]]) -> None:
        with self._lock:
            for queue, at in items:
                self._pending[queue] = max(at, self._pending.get(queue, at))


LOST = LostPolls()  # one per worker process
