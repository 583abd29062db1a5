"""Task events for Flower from the operator's side: publish, requeue and cancel.

``fleet publish`` and ``fleet requeue`` push messages with Lua, so Celery never sends its
``task-sent`` event and Flower would not see a job until a worker took it. These functions
send those events, batched (one Redis PUBLISH per ``EVENT_BATCH`` jobs), and clear what the
result backend still holds from a previous run.

How Flower (Celery's ``events.state``) merges events decides the fields sent here. It applies
events in the order they arrive, never by timestamp or clock: an event whose state "happened
before" the task's current one is merged without changing the state, unless it carries a
``state`` field of its own. A re-run's ``task-sent`` therefore carries ``state=PENDING`` and
clears the previous run's result and times, so Flower shows the new run instead of the old
SUCCESS. For the same reason it must reach Flower before any event of the new run:
``announce_reruns`` is sent, and flushed, before the re-run's message is pushed, so no worker
can have started it yet (a worker's progress lifts a task back to STARTED in any case,
``tasks.events``).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from celery import Celery, states

from core import constants as C
from core.ids import short_id
from state.jobrecord import fetch_many

log = logging.getLogger("fleet.events")

# Fields a previous run left on Flower's task; a re-run starts without them.
RUN_FIELDS = (
    "result",
    "succeeded",
    "failed",
    "revoked",
    "started",
    "received",
    "rejected",
    "retried",
    "runtime",
    "exception",
    "traceback",
    "gpus",
    "gang_hosts",
)


@dataclass(frozen=True)
class QueuedJob:
    """A job just put on its queue, as Flower should list it."""

    job_id: str
    name: str
    queue: str
    rerun: bool = False  # it ran (or was cancelled) before: Flower forgets that run
    owner: str = ""  # who published it: Flower shows it as the task's keyword arguments


def owner_repr(owner: str) -> str:
    """What Flower shows as a task's keyword arguments: who published it (the task itself
    takes none; Celery's ``kwargsrepr`` is only shown)."""
    return repr({"owner": owner}) if owner else "{}"


def client_hostname() -> str:
    """The event source Flower shows as the task's client."""
    return f"fleet@{socket.gethostname()}"


def sent_fields(job: QueuedJob) -> dict:
    """A ``task-sent`` event's fields, as Celery's own publisher would send them."""
    fields = {
        "uuid": job.job_id,
        "root_id": job.job_id,
        "parent_id": None,
        "name": job.name,
        "args": f"({job.name!r})",
        "kwargs": owner_repr(job.owner),
        "retries": 0,
        "eta": None,
        "expires": None,
        "queue": job.queue,
        "exchange": "",
        "routing_key": job.queue,
    }
    if job.rerun:  # and no worker: Flower would show the previous run's beside it
        fields.update(dict.fromkeys(RUN_FIELDS), state=states.PENDING, worker=None)
    return fields


def announce_queued(
    app: Celery,
    jobs: Iterable[QueuedJob],
    *,
    sent_at: float | None = None,
    batch: int = C.EVENT_BATCH,
) -> int:
    """Send ``task-sent`` for each job (dated ``sent_at``, when the messages were pushed, if
    given), a re-run's earlier result dropped first; best effort (queuing goes ahead whatever
    happens here)."""
    jobs = list(jobs)
    if not jobs or not app.conf.task_send_sent_event:
        return 0
    reruns = [j.job_id for j in jobs if j.rerun]
    try:
        forget_results(app, reruns)
    # AsyncResult shows the old run's result; Flower still hears of the new one
    except Exception as e:
        log.warning(
            "could not drop the earlier results of %d re-run(s) from the result backend: %s",
            len(reruns),
            e,
        )
    try:
        with app.connection_for_write() as conn:
            dispatcher = app.events.Dispatcher(
                conn,
                hostname=client_hostname(),
                buffer_group=["task"],
                buffer_limit=batch,
                buffer_while_offline=False,
            )
            with dispatcher:
                dated = {} if sent_at is None else {"timestamp": sent_at}
                for job in jobs:
                    dispatcher.send("task-sent", **sent_fields(job), **dated)
                dispatcher.flush()
    except Exception as e:  # Flower misses these jobs until a worker takes them; nothing else
        log.warning("could not send task-sent events for %d job(s) to Flower: %s", len(jobs), e)
        return 0
    return len(jobs)


def forget_results(app: Celery, job_ids: list[str]) -> None:
    """Drop the result backend's meta of earlier runs (AsyncResult says PENDING again)."""
    if not job_ids:
        return
    backend = app.backend
    client = getattr(backend, "client", None)
    if client is None or not hasattr(backend, "get_key_for_task"):
        for jid in job_ids:
            backend.forget(jid)
        return
    for start in range(0, len(job_ids), C.EVENT_BATCH):
        pipe = client.pipeline(transaction=False)
        for jid in job_ids[start : start + C.EVENT_BATCH]:
            pipe.delete(backend.get_key_for_task(jid))
        pipe.execute()


def announce_cancelled(app: Celery, job_ids: list[str]) -> None:
    """After ``Records.cancel``: each job ends REVOKED in the result backend, and Flower.

    Flower takes a task's state only from a worker's events (a ``task-revoked`` from
    this client would show it as a worker), so one live worker sends it for queued jobs
    (``tasks.control.announce_revoked``); a running job's worker sends it when it stops the run.
    """
    if not job_ids:
        return
    for jid in job_ids:
        try:
            app.backend.mark_as_revoked(jid, reason="cancelled by operator")
        except Exception as e:
            log.warning("could not mark %s revoked in the result backend: %s", short_id(jid), e)
    try:
        app.control.broadcast(C.ANNOUNCE_REVOKED, arguments={"job_id": list(job_ids)}, reply=False)
    except Exception as e:
        log.warning(
            "could not ask workers to show %d cancelled job(s) in Flower: %s", len(job_ids), e
        )


def announce_reruns(app: Celery, client, job_ids: list[str]) -> list[str]:
    """Before ``Records.requeue`` pushes them: Flower forgets the earlier run of each finished
    job and lists it queued again. Returns the IDs announced (jobs a requeue would run)."""
    recs = fetch_many(
        client, job_ids, ("state", "name", "pri_queue", "queue", "owner", "pri_key", "pri_msg")
    )
    jobs = [
        QueuedJob(r.job_id, r.name, r.pri_queue or r.queue, rerun=True, owner=r.owner)
        for r in recs
        if r.published and r.state.terminal
    ]
    announce_queued(app, jobs)
    return [j.job_id for j in jobs]
