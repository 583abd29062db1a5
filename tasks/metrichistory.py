"""One run's metric lines on their way to the job's history in Redis (``state.history``).

``record`` is called by the runner's output reader for each metric line; it only builds the
point and buffers it, so a slow or absent Redis never holds up the job's output. ``flush``
sends what is buffered in one round trip: the run's tick calls it about once a second, and
the run once more when its process has exited, before the bundle is made.
"""

from __future__ import annotations

import logging
import time
from collections import deque

import redis

from core import constants as C
from core.ids import short_id
from state import history

log = logging.getLogger("fleet.metrichistory")


class MetricHistory:
    """The history writer of one run (``run``: its number in `fleet logs`)."""

    def __init__(
        self,
        client: redis.Redis,
        job_id: str,
        run: int,
        buffer_points: int = C.METRIC_HISTORY_MAX_POINTS,
    ):
        self.r, self.job_id, self.run = client, job_id, run
        self._buf: deque[dict] = deque(maxlen=buffer_points)  # appended by the reader thread
        self._pending: list[dict] = []  # taken, not yet sent
        self._lines = 0

    def record(self, report: dict) -> None:
        """One metric line the job printed (from the output reader's thread)."""
        self._lines += 1
        p = history.point(report, t=time.time(), run=self.run, ordinal=self._lines)
        if p is not None:
            self._buf.append(p)

    def send(self) -> None:
        """Send the buffered points; a RedisError keeps them for the next try."""
        while self._buf:
            self._pending.append(self._buf.popleft())
        del self._pending[: -C.METRIC_HISTORY_MAX_POINTS]  # more would be trimmed at once
        history.append(self.r, self.job_id, self._pending)
        self._pending.clear()

    def flush(self) -> bool:
        """``send``, and False (points kept) if Redis is away: the run's tick never fails for it."""
        try:
            self.send()
        except redis.RedisError as e:
            log.warning(
                "metric history of %s not sent yet (%d points kept): %s",
                short_id(self.job_id),
                len(self._pending),
                e,
            )
            return False
        return True


def complete(client: redis.Redis, job_id: str, run: int, reports: list[dict], at: float) -> int:
    """Send a finished run's metric lines (read back from its log) that its history lacks: those
    past the last step the history has from that run. ``at``: their time. How many were sent."""
    have = [p["step"] for p in history.read(client, job_id) if p.get("run") == run]
    missing = [
        p for p in history.points(reports, t=at, run=run) if not have or p["step"] > max(have)
    ]
    history.append(client, job_id, missing)
    return len(missing)
