"""One way to retry an operation through an outage, interrupted by the worker's shutdown.

Used for the record writes that must not be lost to a Redis outage (on top of redis-py's
own short reconnect retry in ``state.redis_conn``) and for bundle uploads through a store
outage. A set ``stop`` event ends the waiting at once: the last error is raised. Only what an
outage or a failover raises is waited out: a script's bug or a missing ACL right fails at once
(``RedisRefused``), naming the operation and the role, instead of stalling five minutes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import redis

from state.redis_conn import outage, refused

log = logging.getLogger("fleet.retry")
T = TypeVar("T")


class RedisRefused(redis.exceptions.ResponseError):
    """Raised when Redis answers a record read or write with an error no wait can cure (a
    script's bug, a missing ACL right, a refused password); the message names the operation
    and the role it ran as."""


@dataclass(frozen=True)
class Backoff:
    """Waits between tries: ``waits_s[i]`` after the (i+1)th failure, the last one repeated."""

    waits_s: tuple[float, ...]
    tries: int | None = None  # all tries, the first included; None: until success or stop

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


def retry(
    fn: Callable[[], T],
    *,
    on: type[BaseException] | tuple[type[BaseException], ...],
    backoff: Backoff,
    stop: threading.Event,
    what: str,
    when: Callable[[BaseException], bool] = lambda e: True,
) -> T:
    """``fn()``, tried again after each ``on`` error that ``when`` accepts, per ``backoff``,
    until ``stop`` is set."""
    failures = 0
    while True:
        try:
            return fn()
        except on as e:
            if not when(e):
                raise
            failures += 1
            if backoff.tries is not None and failures >= backoff.tries:
                raise
            wait = backoff.wait_s(failures)
            log.warning("%s failed (%s); retrying in %g s", what, e, wait)
            if stop.wait(wait):
                raise


def retry_redis(
    fn: Callable[[], T], *, what: str, stop: threading.Event, backoff: Backoff = REDIS_BACKOFF
) -> T:
    """A record read or write that must not be lost to a Redis outage."""
    try:
        return retry(
            fn,
            on=redis.RedisError,
            when=outage,
            backoff=backoff,
            stop=stop,
            what=f"{what} in Redis",
        )
    except redis.RedisError as e:
        if outage(e):
            raise
        raise RedisRefused(refused(what, e, _broker())) from e


def _broker():
    """The worker's broker settings (its user, hence its role), for a refusal's message."""
    from state.broker import from_conf
    from tasks import app
    from tasks.host import current

    ctx = current()
    return from_conf((ctx.app if ctx else app).conf)
