"""What a worker tells Flower beyond Celery's own task events: progress, and REVOKED.

Flower builds a task's page from events (Celery's ``events.state``), not from the result
backend, so the PROGRESS state ``tasks.execution`` stores is invisible there. A running job
sends a ``task-STARTED`` event every ``PROGRESS_EVENT_EVERY_S`` (``result``: elapsed time,
last metrics, last output line; ``started``: when the run began). ``events.state`` takes a
custom event's state from its upper-cased name, so this one says STARTED: it lifts a task
that shows PENDING (a reset that reached Flower after the run's own start) back to STARTED,
with its Terminate button, and it ranks below REVOKED, SUCCESS and FAILURE, so a finished
run's state stands. It is not Celery's ``task-started``, which Flower counts as a new start
(its prefetch gauges) and which would move the ``started`` time. A custom state such as
PROGRESS would rank above REVOKED, and a later ``task-revoked`` would be ignored.

A cancelled job (``fleet cancel``, Flower's Terminate, ``celery control revoke``) ends
REVOKED in both the result backend and Flower, sent by the worker that stopped or dropped it.
"""

from __future__ import annotations

import json
import logging
import time

from celery import states

from core.constants import PROGRESS_EVENT_EVERY_S
from core.ids import short_id
from state.events import RUN_FIELDS

log = logging.getLogger("fleet.events")
PROGRESS_EVENT = "task-STARTED"
QUEUED_AGAIN_EVENT = "task-pending"  # PENDING sorts last: merged, its own state field applies
LINE_CHARS = 160


def summary(snap: dict, worker: str) -> str:
    """One line for Flower's Result cell: elapsed time, last metrics, last output line."""
    parts = [f"running {snap.get('elapsed_s', 0):.0f}s on {worker}"]
    metrics = snap.get("metrics") or {}
    if metrics:
        parts.append("metrics " + json.dumps(metrics, sort_keys=True, default=str))
    tail = [line for line in snap.get("tail") or [] if line.strip()]
    if tail:
        parts.append("last: " + tail[-1][:LINE_CHARS])
    return "; ".join(parts)


class ProgressEvents:
    """Sends a running task's progress to Flower, at most every ``every_s``."""

    def __init__(
        self,
        task,
        worker: str,
        attempt: int = 1,
        every_s: float = PROGRESS_EVENT_EVERY_S,
        started: float | None = None,
        gpus: tuple[int, ...] = (),
        gang_hosts: tuple[str, ...] = (),
    ):
        self.task, self.worker, self.every_s = task, worker, every_s
        # A later attempt's progress also says STARTED and clears the earlier failure: that
        # attempt's task-failed can reach Flower after this one began (the retry is queued first).
        self.fields = {} if attempt <= 1 else restart_fields(0, attempt)
        self.fields["started"] = time.time() if started is None else started
        self.fields["gpus"] = list(gpus)  # Flower's GPUs column (fleet.flower_view)
        if gang_hosts:  # a gang's every member's host, by rank: Flower's Worker column
            self.fields["gang_hosts"] = list(gang_hosts)
        self._last = 0.0

    def tick(self, snap: dict) -> None:
        now = time.monotonic()
        if now - self._last < self.every_s:
            return
        self._last = now
        _send(
            self.task,
            PROGRESS_EVENT,
            **self.fields,
            result=summary(snap, self.worker),
            elapsed_s=snap.get("elapsed_s"),
            metrics=snap.get("metrics") or {},
        )


def restarted(task, attempt: int) -> None:
    """A later attempt (retry, lost worker) began: Flower drops the previous attempt's FAILURE
    and shows this run STARTED, with ``retries`` counting the attempts before it."""
    _send(task, PROGRESS_EVENT, **restart_fields(time.time(), attempt), result=None)


def restart_fields(now: float, attempt: int) -> dict:
    """Fields that make Flower show attempt ``attempt`` as a run that started at ``now``."""
    fields = {
        **dict.fromkeys(RUN_FIELDS),
        "state": states.STARTED,
        "started": now,
        "retries": attempt - 1,
    }
    fields.pop("result")  # each event that carries these sets the result itself
    return fields


def requeued(task, why: str) -> None:
    """The job went back to its queue (its worker is stopping): Flower shows it PENDING again."""
    _send(task, QUEUED_AGAIN_EVENT, **queued_again_fields(why))


def forming(task, why: str) -> None:
    """A gang's member holds a seat and waits for the others (tasks.gang): the job is still
    queued, not started, whatever Celery's own task-started of this delivery said."""
    _send(task, QUEUED_AGAIN_EVENT, **queued_again_fields(why, queued=False))


def queued_again_fields(why: str, queued: bool = True) -> dict:
    """Queued again, held by no worker: Flower would still show the one that handed it back
    (``queued``: the result says "queued again: WHY", else only WHY)."""
    return {
        **dict.fromkeys(RUN_FIELDS),
        "state": states.PENDING,
        "result": f"queued again: {why}" if queued else why,
        "worker": None,
    }


def preempting(app, hostname: str, job_id: str, text: str) -> None:
    """A queued job displaces running ones (tasks.preemption): its Flower row says whom.
    Its task ID is its job ID; PENDING still, the run's own events follow."""
    try:  # a connection of its own: preemption is rare, and runs outside any task
        with (
            app.connection_for_write() as conn,
            app.events.Dispatcher(conn, hostname=hostname) as d,
        ):
            d.send(QUEUED_AGAIN_EVENT, uuid=job_id, state=states.PENDING, result=text)
    except Exception as e:  # events are for watching; preemption goes on without them
        log.debug("preempting event for %s failed: %s", short_id(job_id), e)


def revoked(task, why: str) -> None:
    """The delivery ends REVOKED: result backend and Flower (a ``task-revoked`` event)."""
    try:
        task.backend.mark_as_revoked(task.request.id, reason=why, request=task.request)
    except Exception as e:  # the result backend is down: the job record is what counts
        log.debug("revoked state update failed: %s", e)
    _send(
        task,
        "task-revoked",
        terminated=True,
        signum=None,
        expired=False,
        state=states.REVOKED,
        result=f"revoked: {why}",
    )


PRUNED = "PRUNED"  # a trial its search stopped early: neither a success nor a failure


def pruned(task, result: dict) -> None:
    """A search's pruner stopped the trial: the delivery ends PRUNED (result backend and Flower,
    a ``task-pruned`` event), not SUCCESS, so Flower counts it as `fleet status` does. The
    store waits out a Redis restart (tasks.results): else its last PROGRESS would show."""
    try:
        task.backend.store_result(task.request.id, result, PRUNED, request=task.request)
    except Exception as e:  # an outage past its wait, or the worker stopping
        log.warning("%s: PRUNED not stored in the result backend (%s)", task.request.id, e)
    _send(task, "task-pruned", state=PRUNED, succeeded=time.time(), result=repr(result))


def _send(task, type_: str, **fields) -> None:
    try:
        task.send_event(type_, retry=False, **fields)
    except Exception as e:  # events are for watching; the job goes on without them
        log.debug("%s event failed: %s", type_, e)
