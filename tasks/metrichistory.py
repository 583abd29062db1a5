"""One run's metric lines on their way to the job's history in Redis (``state.history``).

``record`` is called by the runner's output reader with each metric line's point (its one
step rule, ``trainers.protocol.step_of``); it only buffers it, so a slow or absent Redis
never holds up the job's output. ``flush`` sends what is buffered in one round trip: the
run's tick calls it about once a second, and the run once more when its process has exited,
before the bundle is made.
"""

from __future__ import annotations

import logging
import time
from collections import deque

import redis

from core import constants as C
from core.ids import short_id
from state import history
from trainers import protocol

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

    def record(self, p: protocol.Point) -> None:
        """One metric line's point (from the output reader's thread)."""
        self._buf.append(history.point(p.step, p.values, t=p.t or time.time(), run=self.run))

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


def points(reports: list[dict], *, t: float, run: int) -> list[dict]:
    """The stored points of one run's metric lines, in the order printed, by the same rule as
    the runner's (``protocol.point_of``, the count being the line's number in the run)."""
    made = (protocol.point_of(r, i) for i, r in enumerate(reports, start=1))
    return [history.point(p.step, p.values, t=t, run=run) for p in made if p is not None]


def complete(client: redis.Redis, job_id: str, run: int, reports: list[dict], at: float) -> int:
    """Send a finished run's metric lines (read back from its log) that its history lacks: those
    past the last step the history has from that run. ``at``: their time. How many were sent."""
    have = [p["step"] for p in history.read(client, job_id) if p.get("run") == run]
    missing = [p for p in points(reports, t=at, run=run) if not have or p["step"] > max(have)]
    history.append(client, job_id, missing)
    return len(missing)
