"""New queues reach idle workers before the jobs in them do.

A publish that creates need or constraint queues bumps a counter (``fleet.pickup``); workers
look at it every ``QUEUE_WATCH_EVERY_S`` and refresh their queues at once instead of within
``QUEUE_REFRESH_EVERY_S``. Publish then waits (at most ``PICKUP_WAIT_S``) until every live
host that can serve a new queue lists it in its heartbeat, and only then pushes: otherwise
an idle 80 GiB host, still blind to ``cuda.vram40``, would take a ``cuda.vram10`` job
pushed after it, and the job only it can run would wait behind that.
"""

from __future__ import annotations

import threading
import time

import redis

from core import constants as C


class Watcher:
    """A worker's view of the counter: ``wait`` returns True when it is time to refresh."""

    def __init__(self, client: redis.Redis):
        self.client = client
        self.seen = self._version()
        self._next: float | None = None

    def soon(self, after_s: float = 1.0) -> None:
        """Make the next ``wait`` return after ``after_s`` at most."""
        self._next = time.monotonic() + after_s

    def _version(self) -> str | None:
        try:
            return self.client.get(C.QUEUES_VERSION_KEY)
        except redis.RedisError:
            return None

    def wait(self, stop: threading.Event, every_s: float = C.QUEUE_REFRESH_EVERY_S) -> bool:
        """Sleep until the counter moves or ``every_s`` passes; False once ``stop`` is set."""
        deadline = min(time.monotonic() + every_s, self._next or float("inf"))
        self._next = None
        while not stop.wait(C.QUEUE_WATCH_EVERY_S):
            v = self._version()
            if v != self.seen or time.monotonic() >= deadline:
                self.seen = v
                return True
        return False
