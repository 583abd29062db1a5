"""The result backend a worker stores its task states with: Celery's Redis backend (or its
Sentinel one), except that a state a delivery's outcome rests on waits out a Redis outage.

Celery stores some states outside the task's body: STARTED before it (``track_started``),
SUCCESS, FAILURE and RETRY after it. Celery's backend tries each store once (``result_backend_
always_retry`` is off, and turning it on would also hold up the best-effort PROGRESS updates
a run sends on every tick). One failed try there, as Redis restarts, is "raised outside
body": before the body, the job never runs and its message stays in kombu's unacked hash
until the reaper restores it two lease TTLs later (minutes of an idle host); after it, a job
that succeeded is shown failed. So every state but PROGRESS that a task stores while it runs
(Celery's trace around the body, or the body itself) is stored here with the same wait as a
record write (``tasks.retry.retry_redis``): through an outage or a failover, never past the
worker's shutdown, and a refusal (a missing ACL right) is not waited on. A store made outside
a task (a control command in the worker's consumer, a client in a process that imported
``tasks``) is tried once, as Celery tries it: nothing there should stall on an outage.
"""

from __future__ import annotations

import threading
from functools import partial

from celery._state import get_current_task
from celery.app.backends import BACKEND_ALIASES
from celery.backends.redis import RedisBackend, SentinelBackend

from tasks.retry import retry_redis

BEST_EFFORT = frozenset({"PROGRESS"})  # sent on every tick; the next one carries the same
_NEVER = threading.Event()  # a task run outside a worker (nothing to stop): the backoff's end


def _stopping() -> threading.Event:
    from tasks import host

    return host.shutdown_event() or _NEVER


class _WaitsOutOutages:
    def store_result(self, task_id, result, state, traceback=None, request=None, **kwargs):
        store = partial(super().store_result, task_id, result, state, traceback, request, **kwargs)
        # Celery's trace pushes the task for this thread before STARTED, pops it after SUCCESS
        if state in BEST_EFFORT or get_current_task() is None:
            return store()
        return retry_redis(store, what=f"store task {task_id}'s {state}", stop=_stopping())


class FleetRedisBackend(_WaitsOutOutages, RedisBackend):
    pass


class FleetSentinelBackend(_WaitsOutOutages, SentinelBackend):
    pass


def register() -> None:
    """Store redis://, rediss:// and sentinel:// results with fleet's backends."""
    for scheme in ("redis", "rediss"):
        BACKEND_ALIASES[scheme] = f"{__name__}:FleetRedisBackend"
    BACKEND_ALIASES["sentinel"] = f"{__name__}:FleetSentinelBackend"
