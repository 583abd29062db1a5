"""BRPOPs whose reply may have been lost, reported to Redis once it answers again.

Redis pops a BRPOP's entry before it replies; if the reply never arrives (Redis restarted,
a connection reset mid-reply), the entry is in no list and not in kombu's ``unacked`` hash
(kombu adds it there only once received). The ``LostPolls`` hook notes the queues of such
a poll, and before the next poll hands them to Redis (``state.records.ask_reconcile``);
the reaper then pushes again what no list holds.

kombu makes new channels after a reconnect (and Celery a new connection), so the note
must outlive the channel that lost the reply: every channel's ``LostPolls`` shares one
``LostQueues``, which the transport makes once per process.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager

import redis

from core import constants as C
from state import queues
from state.records import ask_reconcile
from tasks.hooks import TransportHook

log = logging.getLogger("fleet.transport")
Acquire = Callable[[], AbstractContextManager[redis.Redis]]


class LostQueues:
    """Queues of lost polls (queue -> when its latest poll was lost), not yet in Redis."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, float] = {}

    def add(self, names: Iterable[str], at: float | None = None) -> None:
        at = time.time() if at is None else at
        self._note((q, at) for q in names)

    def report(self, acquire: Acquire) -> None:
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


class LostPolls(TransportHook):
    """Notes the queues of a poll whose reply may be lost; the next poll reports them."""

    def __init__(self, acquire: Acquire, lost: LostQueues):
        self.acquire, self.lost = acquire, lost

    def before_poll(self) -> None:
        self.lost.report(self.acquire)

    def poll_lost(self, keys: list[str]) -> None:
        # a wake-up list (admission) holds no message: nothing to reconcile there
        self.lost.add(queues.queue_of(k) for k in keys if not k.startswith(C.WAKE_KEY))
