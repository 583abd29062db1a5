"""One way to retry an operation through an outage, interrupted by the worker's shutdown.

Used for the record writes that must not be lost to a Redis outage (on top of redis-py's
own short reconnect retry in ``state.redis_conn``) and for bundle uploads through a store
outage. A set ``stop`` event ends the waiting at once: the last error is raised.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import redis

log = logging.getLogger("fleet.retry")
T = TypeVar("T")


@dataclass(frozen=True)
class Backoff:
    """Waits between tries: ``waits_s[i]`` after the (i+1)th failure, the last one repeated."""

    waits_s: tuple[float, ...]
    tries: int | None = None     # all tries, the first included; None: until success or stop

    def __post_init__(self):
        if not self.waits_s or min(self.waits_s) < 0:
            raise ValueError(f"waits_s: expected non-negative seconds, got {self.waits_s!r}")
        if self.tries is not None and self.tries < 1:
            raise ValueError(f"tries: expected at least 1, got {self.tries}")

    @classmethod
    def doubling(cls, first_s: float, cap_s: float, tries: int | None = None) -> Backoff:
        waits = [first_s]
        while waits[-1] * 2 < cap_s:
            waits.append(waits[-1] * 2)
        return cls((*waits, cap_s), tries)

    def wait_s(self, failures: int) -> float:
        return self.waits_s[min(failures, len(self.waits_s)) - 1]


# about five minutes of Redis outage (0.2 s doubling to 5 s, 61 tries)
REDIS_BACKOFF = Backoff.doubling(0.2, 5.0, tries=61)
# a store outage never costs a re-train: the bundle waits on disk for as long as it takes
UPLOAD_BACKOFF = Backoff((1, 2, 5, 10, 30, 60))


def retry(fn: Callable[[], T], *, on: type[BaseException] | tuple[type[BaseException], ...],
          backoff: Backoff, stop: threading.Event, what: str) -> T:
    """``fn()``, tried again after each ``on`` error per ``backoff`` until ``stop`` is set."""
    failures = 0
    while True:
        try:
            return fn()
        except on as e:
            failures += 1
            if backoff.tries is not None and failures >= backoff.tries:
                raise
            wait = backoff.wait_s(failures)
            log.warning("%s failed (%s); retrying in %g s", what, e, wait)
            if stop.wait(wait):
                raise


def retry_redis(fn: Callable[[], T], *, what: str, stop: threading.Event,
                backoff: Backoff = REDIS_BACKOFF) -> T:
    """A record read or write that must not be lost to a Redis outage."""
    return retry(fn, on=redis.RedisError, backoff=backoff, stop=stop, what=f"{what} in Redis")
