"""A running job's output, sent to Redis for `fleet logs` in batches, kept bounded.

Each job has one stream (``fleet:log:<job_id>``): one entry per output line, plus a
``start`` and an ``end`` entry per run. Both carry the run's number (the job's runs so
far: a retry, a requeue and a hand-back each start a new one) and its worker; the end
also says how the run ended (``tasks.run.RunEnd``) with a few words more. Lines are
buffered and sent about once a second in one pipelined round trip; the stream is capped
(``XADD MAXLEN ~``) and expires ``JOB_LOG_TTL_S`` after its last write. Redis being away
never slows the job: lines wait in a bounded buffer (oldest dropped) and go next time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

import redis

from core import constants as C
from core.ids import short_id
from tasks.run import RunEnd

log = logging.getLogger("fleet.joblog")
END_DETAIL_CHARS = 200  # an end mark's detail is one short line; the record keeps the whole error


def log_key(job_id: str) -> str:
    return C.JOB_LOG_KEY + job_id


def clip(line: str, limit: int = C.JOB_LOG_MAX_LINE_CHARS) -> str:
    return line if len(line) <= limit else line[: limit - 1] + "…"


def end_fields(end: RunEnd, detail: str = "") -> dict[str, str]:
    """What an end mark adds to the run's number and worker: how it ended. Pure."""
    first = detail.strip().partition("\n")[0]
    return {"outcome": end.value, **({"detail": clip(first, END_DETAIL_CHARS)} if first else {})}


def note(client: redis.Redis, job_id: str, line: str, *, ttl_s: int = C.JOB_LOG_TTL_S) -> None:
    """One line in a job's log from outside its run (e.g. a queued job that preempts others)."""
    _send_one(client, job_id, {"l": clip(line)}, ttl_s)


def mark_end(
    client: redis.Redis,
    job_id: str,
    *,
    run: int,
    worker: str,
    how: RunEnd,
    detail: str = "",
    ttl_s: int = C.JOB_LOG_TTL_S,
) -> None:
    """The end mark of a run whose own JobLog died with its worker (``tasks.trained``)."""
    fields = {
        "ev": "end",
        "run": str(run),
        "worker": worker,
        "t": f"{time.time():.3f}",
        **end_fields(how, detail),
    }
    _send_one(client, job_id, fields, ttl_s)


def _send_one(client: redis.Redis, job_id: str, fields: dict[str, str], ttl_s: int) -> None:
    pipe = client.pipeline(transaction=False)
    pipe.xadd(log_key(job_id), fields, maxlen=C.JOB_LOG_MAX_LINES, approximate=True)
    pipe.expire(log_key(job_id), ttl_s)
    pipe.execute()


class JobLog:
    """Use as a context manager around one run, from its claim to its end; ``append`` is safe
    from any thread. Say how the run ended with ``end`` before leaving: a run left by an
    exception is marked lost."""

    def __init__(
        self,
        client: redis.Redis,
        job_id: str,
        *,
        run: int,
        worker: str,
        every_s: float = C.JOB_LOG_FLUSH_EVERY_S,
        max_lines: int = C.JOB_LOG_MAX_LINES,
        ttl_s: int = C.JOB_LOG_TTL_S,
        buffer_lines: int = C.JOB_LOG_BUFFER_LINES,
    ):
        self.r, self.key = client, log_key(job_id)
        self.run, self.worker = run, worker
        self.every_s, self.max_lines, self.ttl_s = every_s, max_lines, ttl_s
        self._buf: deque[dict] = deque(maxlen=buffer_lines)  # appended by the job's reader
        self._pending: list[dict] = []  # taken, not yet sent
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name=f"joblog-{short_id(job_id)}", daemon=True
        )
        self.dropped = 0
        self._end: dict[str, str] = {}

    def end(self, how: RunEnd, detail: str = "") -> None:
        """How the run ended, for its end mark."""
        self._end = end_fields(how, detail)

    def append(self, line: str) -> None:
        self._buf.append({"l": clip(line)})

    def _event(self, name: str, **fields: str) -> None:
        self._buf.append(
            {
                "ev": name,
                "run": str(self.run),
                "worker": self.worker,
                "t": f"{time.time():.3f}",
                **fields,
            }
        )

    def __enter__(self) -> JobLog:
        self._event("start")
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._stop.set()
        self._thread.join(10)
        if exc is not None and not self._end:
            self.end(RunEnd.LOST, f"{exc_type.__name__} on the worker: {exc}")
        self._event("end", **self._end)
        self.flush()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.flush()

    def flush(self) -> bool:
        """Send what is buffered in one round trip; False (lines kept) if Redis is away.

        Called by this log's own thread, and once more by ``__exit__`` after it stopped."""
        while self._buf:
            self._pending.append(self._buf.popleft())
        if not self._pending:
            return True
        # the stream keeps max_lines at most: older lines of one batch would be trimmed at once
        excess = len(self._pending) - min(self._buf.maxlen, self.max_lines)
        if excess > 0:
            del self._pending[:excess]
            self.dropped += excess
        pipe = self.r.pipeline(transaction=False)
        for fields in self._pending:
            pipe.xadd(self.key, fields, maxlen=self.max_lines, approximate=True)
        pipe.expire(self.key, self.ttl_s)
        try:
            pipe.execute()
        except redis.RedisError as e:
            log.debug(
                "job output not sent to Redis yet (%s); %d line(s) kept", e, len(self._pending)
            )
            return False
        self._pending.clear()
        return True
