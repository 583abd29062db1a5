"""Hand one running job on this host back to its queue, by policy (preemption, a host
yielding to its owner), without losing its work and without counting the attempt.

``Runs`` knows the runs executing on this host: ``tasks.execution`` registers each one from
its grant to the release of that grant. A policy calls ``hand_back(job_id, stop, why,
**fields)``; the run's runner wakes at once (``wake_fd``), its ``on_tick`` finds the
request (``asked``) and returns its ``Stop``, so the runner stops the process group
(SIGTERM, then SIGKILL after ``KILL_GRACE_S``); the checkpoint is synced once more
(``tasks.checkpoint``); the job is recorded queued again with ``fields`` (e.g.
``preempted_by``) and this attempt uncounted; its end mark in `fleet logs` says
"handed back (<why>)". Only then is its grant released, so whatever takes its place
starts after the checkpoint sync. The event ``hand_back`` returns is set at that moment.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tasks.run import Run, Stop


@dataclass(frozen=True)
class HandBack:
    """A policy's request to hand one run back."""

    stop: Stop  # what the run's on_tick returns (Stop.PREEMPTED, ...)
    why: str  # its end mark and the record's last_error say this
    fields: dict[str, Any] = field(default_factory=dict)  # written to the record with the requeue
    asked_at: float = field(default_factory=time.time)
    # run once the process is gone, before the requeue: what the job goes back with (a PBT
    # exploit: the donor's checkpoint and new values); False: the run no longer owns the job
    prepare: Callable[[], bool] | None = None


class Runs:
    """The runs executing on this host, by job ID; thread safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, Run] = {}
        self._asked: dict[str, HandBack] = {}
        self._ended: dict[str, threading.Event] = {}
        self._wake: dict[
            str, tuple[int, int]
        ] = {}  # job ID -> pipe whose byte wakes its runner's tick

    @contextmanager
    def running(self, run: Run) -> Iterator[Run]:
        """Register ``run`` while it executes (its grant held)."""
        jid = run.job.job_id
        done, wake = threading.Event(), os.pipe()
        for fd in wake:
            os.set_blocking(fd, False)
        with self._lock:
            self._runs[jid], self._ended[jid], self._wake[jid] = run, done, wake
            self._asked.pop(jid, None)
        try:
            yield run
        finally:
            with self._lock:
                if self._runs.get(jid) is run:
                    del self._runs[jid]
                    self._asked.pop(jid, None)
                    self._ended.pop(jid, None)
                    self._wake.pop(jid, None)
            for fd in wake:
                os.close(fd)
            done.set()

    def active(self) -> list[Run]:
        """The runs executing now."""
        with self._lock:
            return list(self._runs.values())

    def hand_back(
        self,
        job_id: str,
        stop: Stop,
        why: str,
        prepare: Callable[[], bool] | None = None,
        **fields: Any,
    ) -> threading.Event | None:
        """Ask the run of ``job_id`` to stop and go back to its queue; an event set once its
        run is over (checkpoint synced, record written, grant released), or None when no
        run of that job executes here. The first request stands."""
        if not stop.by_policy:
            raise ValueError(
                f"hand_back: {stop!r} is not a policy stop; use one of "
                f"{sorted(s.name for s in Stop if s.by_policy)}"
            )
        with self._lock:
            if job_id not in self._runs:
                return None
            self._asked.setdefault(job_id, HandBack(stop, why, dict(fields), prepare=prepare))
            self._wake_locked(job_id)
            return self._ended[job_id]

    def wake(self, job_id: str) -> None:
        """Make the runner of ``job_id`` tick at once (a search pruned it: tasks.trial)."""
        with self._lock:
            if job_id in self._wake:
                self._wake_locked(job_id)

    def _wake_locked(self, job_id: str) -> None:
        try:  # its runner ticks at once, not up to a second later
            os.write(self._wake[job_id][1], b"!")
        except (BlockingIOError, OSError):
            pass  # already woken

    def wake_fd(self, job_id: str) -> int | None:
        """The pipe end the runner of ``job_id`` selects on (``tasks.runner.run``'s wake_fd)."""
        with self._lock:
            wake = self._wake.get(job_id)
            return wake[0] if wake else None

    def asked(self, job_id: str) -> HandBack | None:
        """The request to hand back ``job_id``'s run, if a policy made one."""
        with self._lock:
            return self._asked.get(job_id)
