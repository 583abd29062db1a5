"""Remote control for fleet workers: what Flower and ``celery inspect``/``control`` reach.

- ``celery inspect capability``: the host's GPUs with VRAM, RAM, cores and the queues it
  serves, in serving order. ``inspect conf`` (Flower's worker Config tab) carries the same
  under ``fleet_capability``.
- ``revoke`` and ``terminate`` (``celery control revoke|terminate``, Flower's Revoke and
  Terminate, ``app.control.revoke(id, terminate=True)``) of a fleet job is
  ``fleet cancel``: the record says cancelled, the running job's process group is stopped
  within a second, and the ID never goes on Celery's revoked list, so a later requeue runs.
  The thread pool cannot terminate a task; the job's own heartbeat does it.
- A message Celery still discards as revoked (a list filled by an older worker, or by
  ``revoke_by_stamped_headers``) ends its job cancelled, not queued for ever.
"""

from __future__ import annotations

import logging

import redis
from celery import signals
from celery.states import REVOKED
from celery.utils.functional import maybe_list
from celery.utils.serialization import strtobool
from celery.worker import state as worker_state
from celery.worker.control import Panel, control_command, inspect_command, ok
from kombu.utils.encoding import safe_repr

from core import constants as C
from core.ids import short_id
from state import jobrecord
from state.jobrecord import JobState
from tasks.host import HostContext, context

log = logging.getLogger("fleet.control")
_celery_revoke = Panel.data["revoke"]
_celery_conf = Panel.data["conf"]


def capability_info(ctx: HostContext) -> dict:
    """The host as fleet routes by it: plain JSON for inspect replies and Flower."""
    cap = ctx.capability
    return {
        "hostname": cap.hostname,
        "cpu_cores": cap.cpu_cores,
        "ram_total_gib": cap.ram_total_gib,
        "ram_available_gib": cap.ram_available_gib,
        "gpus": [
            {
                "index": d.index,
                "name": d.name,
                "vram_total_gib": d.vram_total_gib,
                "vram_free_gib": d.vram_free_gib,
            }
            for d in cap.cuda_devices
        ],
        "queues": list(ctx.queues),
        "busy_slots": len(worker_state.active_requests),
        "overridden": list(cap.overridden),
    }


@inspect_command(name=C.INSPECT_CAPABILITY)
def capability(state) -> dict:
    """GPUs with VRAM, RAM, cores, and the queues served in order."""
    return capability_info(context())


@inspect_command(
    alias="dump_conf", signature="[include_defaults=False]", args=[("with_defaults", strtobool)]
)
def conf(state, with_defaults=False, **kwargs):
    """List configuration, with this host's capability as ``fleet_capability``."""
    out = _celery_conf(state, with_defaults=with_defaults, **kwargs)
    try:
        out["fleet_capability"] = capability_info(context())
    except Exception as e:  # a config reply must not fail for this
        out["fleet_capability"] = safe_repr(e)
    return out


def fleet_jobs(client: redis.Redis, ids: list[str]) -> set[str]:
    """Which of these task IDs are fleet jobs (have a record)."""
    return {rec.job_id for rec in jobrecord.fetch_many(client, ids, ("job_id",))}


@control_command(variadic="task_id", signature="[id1 [id2 [... [idN]]]]")
def revoke(state, task_id, terminate=False, signal=None, **kwargs):
    """Revoke task by ID; a fleet job is cancelled as ``fleet cancel`` does."""
    ids = sorted(set(maybe_list(task_id) or []))
    ctx = context()
    jobs = fleet_jobs(ctx.redis, ids)
    for jid in jobs:
        res = ctx.records.cancel(jid)  # every worker gets the broadcast: one of them wins
        if res.done and res.was is JobState.QUEUED:
            log.info("revoke: cancelled queued job %s", short_id(jid))
            _announce(state, jid)
        elif res.done:
            log.info("revoke: cancelled running job %s; its heartbeat stops it", short_id(jid))
    for jid in jobs:  # (a LimitedSet: no difference_update)
        worker_state.revoked.discard(jid)
    others = [i for i in ids if i not in jobs]
    if others:
        return _celery_revoke(state, others, terminate=terminate, signal=signal, **kwargs)
    return ok(f"jobs {sorted(jobs)} cancelled (fleet cancel)")


@control_command(
    variadic="task_id", args=[("signal", str)], signature="<signal> [id1 [id2 [... [idN]]]]"
)
def terminate(state, signal, task_id, **kwargs):
    """Terminate task by ID (or list of ids); a fleet job is cancelled as ``fleet cancel`` does."""
    return revoke(state, task_id, terminate=True, signal=signal)


@control_command(name=C.ANNOUNCE_REVOKED, variadic="job_id", signature="[id1 [id2 [... [idN]]]]")
def announce_revoked(state, job_id, **kwargs):
    """Tell Flower these queued jobs were cancelled (sent by `fleet cancel`; one worker answers)."""
    for jid in sorted(set(maybe_list(job_id) or [])):
        _announce(state, jid)
    return ok("announced")


def _announce(state, jid: str) -> None:
    """One worker (the first to take the Redis marker) sends the job's ``task-revoked``."""
    ctx = context()
    try:
        # one marker per cancel: a cancelled job's end time tells its cancels apart
        rec = jobrecord.fetch(ctx.redis, jid, ("finished_at",))
        cancelled_at = repr(rec.finished_at) if rec and rec.finished_at else ""
        marker = C.FLOWER_REVOKED_KEY + jid + ":" + cancelled_at
        if not ctx.redis.set(marker, state.hostname, nx=True, ex=C.FLOWER_REVOKED_TTL_S):
            return
        state.app.backend.mark_as_revoked(jid, reason="cancelled by operator")
        with state.app.events.default_dispatcher(hostname=state.hostname) as d:
            d.send(
                "task-revoked",
                uuid=jid,
                terminated=False,
                signum=None,
                expired=False,
                state=REVOKED,
                result="revoked: cancelled while queued",
            )
    except Exception as e:  # Flower catches up when a worker drops the message
        log.warning("could not announce cancelled job %s to Flower: %s", short_id(jid), e)


@signals.task_revoked.connect
def revoked_by_celery(sender=None, request=None, terminated=False, expired=False, **kw):
    """Celery dropped a fleet job's message as revoked: cancel it, so it can be requeued,
    and forget the ID, so the requeued message runs."""
    jid = getattr(request, "id", None)
    if not jid:
        return
    try:
        ctx = context()
        if not fleet_jobs(ctx.redis, [jid]):
            return
        worker_state.revoked.discard(jid)
        if ctx.records.states([jid])[jid] is JobState.QUEUED:
            ctx.records.cancel(jid)
            log.warning(
                "job %s was on Celery's revoked list; cancelled it (`fleet requeue` runs it)",
                short_id(jid),
            )
    except redis.RedisError as e:
        log.warning("could not check revoked task %s against fleet records: %s", short_id(jid), e)
