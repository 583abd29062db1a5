"""Keep a running job's lease alive from a background thread, and notice cancel or loss."""

from __future__ import annotations

import logging
import threading

import redis

from core.constants import HEARTBEAT_EVERY_S
from core.ids import short_id
from state.jobrecord import JobState
from state.records import Records
from tasks.run import Stop, UnknownAnswer

log = logging.getLogger("fleet.lease")


class LeaseKeeper:
    """Heartbeats every ``every_s``; ``reason`` becomes why the run must stop, if it must."""

    def __init__(self, records: Records, job_id: str, token: str, every_s: float | None = None):
        # at least four renewals per TTL, so one stalled beat never looks like a lost worker
        every_s = every_s or min(HEARTBEAT_EVERY_S, records.lease_ttl_ms / 4000)
        self.records, self.job_id, self.token, self.every_s = records, job_id, token, every_s
        self.reason: Stop | None = None
        self.record: JobState | None = None  # the state the record answered, when it did
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

    def report(self, **fields) -> None:
        """Fields (e.g. progress) written to the record with the next heartbeat."""
        self._fields.update(fields)

    def _loop(self) -> None:
        while not self._done.wait(self.every_s):
            fields, self._fields = self._fields, {}
            try:
                answer = self.records.heartbeat(self.job_id, self.token, **fields)
            except redis.RedisError as e:  # a broker blip: the lease TTL covers it
                log.warning("heartbeat for %s failed (%s); retrying", short_id(self.job_id), e)
                continue
            except Exception:  # renewals would stop and the reaper would start a second run
                log.exception("heartbeat for %s crashed; stopping the run", short_id(self.job_id))
                self.reason = Stop.LOST
                return
            if answer != "ok":
                self.reason, self.record = self._heard(answer)

    def _heard(self, answer: str) -> tuple[Stop, JobState | None]:
        """Why the run stops, by the record's answer. An answer nobody knows is logged as the
        error it is (scripts and worker disagree); the run stops: it cannot know it owns the job."""
        try:
            return Stop.heard(answer)
        except UnknownAnswer as e:
            log.error("heartbeat for %s: %s; stopping the run", short_id(self.job_id), e)
            return Stop.LOST, None
