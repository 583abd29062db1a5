"""Keep a running job's lease alive from a background thread, and notice cancel or loss.

The lease's TTL runs on Redis's clock; a worker cut off from Redis (a partition, a restart)
cannot tell whether it still holds the job. So it fences itself: while the job's process
runs (``fencing``), a run whose renewals go unanswered (failed, or waiting on a reply) and
whose lease has gone unrenewed for ``fence_after_s(ttl)`` (the TTL less a margin, on this
host's monotonic clock, counted from the moment its last successful renewal was sent) stops
as a lost run, before another host can take the job.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from core.constants import HEARTBEAT_EVERY_S, KILL_GRACE_S, LEASE_FENCE_MARGIN_S
from core.ids import short_id
from state.jobrecord import JobState
from state.records import Records
from tasks.run import Stop, UnknownAnswer

log = logging.getLogger("fleet.lease")
FENCE_WATCH_EVERY_S = 0.25  # how often a fencing lease looks at its clock


def fence_after_s(ttl_s: float, margin_s: float = LEASE_FENCE_MARGIN_S) -> float:
    """How long a run may go without renewing its lease of ``ttl_s`` before it stops: the TTL
    less ``margin_s``, the margin at most a quarter of the TTL. Pure."""
    return ttl_s - min(margin_s, ttl_s / 4)


class LeaseKeeper:
    """Heartbeats every ``every_s``; ``reason`` becomes why the run must stop, if it must."""

    def __init__(self, records: Records, job_id: str, token: str, every_s: float | None = None):
        ttl_s = records.lease_ttl_ms / 1000
        # at least four renewals per TTL, so one stalled beat never looks like a lost worker
        every_s = every_s or min(HEARTBEAT_EVERY_S, ttl_s / 4)
        self.records, self.job_id, self.token, self.every_s = records, job_id, token, every_s
        self.ttl_s, self.fence_after_s = ttl_s, fence_after_s(ttl_s)
        self.record: JobState | None = None  # the state the record answered, when it did
        self.cut_off_s: float | None = None  # unrenewed this long when it fenced the run
        self._reason: Stop | None = None
        # the claim set the lease a moment ago (a lost claim reply retried renews it too)
        self._renewed = time.monotonic()
        self._fencing = False
        self._pgid: int | None = None
        self._failing = False  # the last renewal failed: Redis did not answer
        self._in_flight: float | None = None  # when the renewal waiting for its answer was sent
        self._lock = threading.Lock()
        self._fields: dict = {}
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name=f"lease-{short_id(job_id)}", daemon=True
        )

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join(5)

    @property
    def reason(self) -> Stop | None:
        """Why the run must stop: what the record answered, or (while ``fencing``) Stop.LOST
        once its lease went unrenewed for ``fence_after_s``."""
        if self._reason is None and self._fencing:
            self._fence()
        return self._reason

    @property
    def answering(self) -> bool:
        """Whether Redis answers this run: its last renewal did, and none has been waiting
        long for an answer. A tick skips what would wait on an absent Redis meanwhile."""
        sent = self._in_flight
        return not self._failing and (sent is None or time.monotonic() - sent < 2 * self.every_s)

    @contextmanager
    def fencing(self) -> Iterator[LeaseKeeper]:
        """While the job's process runs: a lapsing lease stops it (a trained run's upload is
        fenced by the record and the store instead, and its output is kept)."""
        over = threading.Event()
        watch = threading.Thread(
            target=self._watch, args=(over,), name=f"fence-{short_id(self.job_id)}", daemon=True
        )
        self._fencing = True
        watch.start()
        try:
            yield self
        finally:
            self._fencing = False
            over.set()

    def guard(self, pgid: int) -> None:
        """The job's process group (its supervisor's pid), which the lease stops itself once it
        lapses: the run's own tick may be waiting on the unreachable Redis meanwhile."""
        self._pgid = pgid

    def _watch(self, over: threading.Event) -> None:
        while not over.wait(FENCE_WATCH_EVERY_S):
            if self.reason is not None and self.cut_off_s is not None:
                self._stop_group(over)
                return

    def _stop_group(self, over: threading.Event) -> None:
        """SIGTERM to the job's supervisor, which takes its group down (tasks.supervisor);
        SIGKILL to the group if it is still there KILL_GRACE_S later. The runner's tick, once
        it returns, finds the lease's Stop.LOST and does the same to what is left."""
        pgid = self._pgid
        if pgid is None:  # no tick yet: the tick's first look finds the stop
            return
        for sig, wait_s in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 0)):
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                return
            if over.wait(wait_s):  # the runner saw it exit
                return
        self._failing = False  # the last renewal failed: Redis did not answer
        self._in_flight: float | None = None  # when the renewal waiting for its answer was sent

    def report(self, **fields) -> None:
        """Fields (e.g. progress) written to the record with the next heartbeat."""
        self._fields.update(fields)

    def _fence(self) -> None:
        silent_s = time.monotonic() - self._renewed
        # a renewal merely late (this process busy) is not a lost Redis: it goes out and renews
        if silent_s < self.fence_after_s or self.answering:
            return
        with self._lock:
            if self._reason is not None:
                return
            self.cut_off_s, self._reason = silent_s, Stop.LOST
        log.warning(
            "lease of %s not renewed for %.1f s (TTL %g s): its run stops, as another host "
            "may take the job once the TTL lapses",
            short_id(self.job_id),
            silent_s,
            self.ttl_s,
        )

    def _loop(self) -> None:
        while not self._done.wait(self.every_s) and self.cut_off_s is None:
            fields, self._fields = self._fields, {}
            sent = time.monotonic()  # Redis sets the TTL after this: counting from here is safe
            self._in_flight = sent
            try:
                answer = self.records.heartbeat(self.job_id, self.token, **fields)
            except redis.RedisError as e:  # a broker blip: the lease TTL covers it
                self._failing = True
                log.warning("heartbeat for %s failed (%s); retrying", short_id(self.job_id), e)
                continue
            except Exception:  # renewals would stop and the reaper would start a second run
                log.exception("heartbeat for %s crashed; stopping the run", short_id(self.job_id))
                self._reason = Stop.LOST
                return
            finally:
                self._in_flight = None
            self._failing = False
            if answer == "ok":
                self._renewed = max(self._renewed, sent)
            else:
                self._reason, self.record = self._heard(answer)

    def _heard(self, answer: str) -> tuple[Stop, JobState | None]:
        """Why the run stops, by the record's answer. An answer nobody knows is logged as the
        error it is (scripts and worker disagree); the run stops: it cannot know it owns the job."""
        try:
            return Stop.heard(answer)
        except UnknownAnswer as e:
            log.error("heartbeat for %s: %s; stopping the run", short_id(self.job_id), e)
            return Stop.LOST, None
