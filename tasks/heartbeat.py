"""A worker's heartbeat in Redis: what it is, what it serves, what it runs, refreshed.

One key per host (``fleet:host:<hostname>``, TTL ``HOST_TTL_S``) holding JSON, and an
index of last-seen times (``fleet:hosts``), so `fleet hosts`, `fleet why` and publish's
feasibility check read the fleet with no broadcast. A clean stop writes ``stopped``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time

import redis
from celery.worker import state as worker_state

from core import constants as C
from tasks import workspace
from tasks.address import advertised_addr

log = logging.getLogger("fleet.heartbeat")


def consumed(ctx, consumer=None) -> list[str]:
    """The queues the worker really consumes, in serving order (what it asked for, if unknown)."""
    try:
        return [q.name for q in consumer.task_consumer.queues]
    except (AttributeError, RuntimeError):  # no consumer, not started yet, or changing under us
        return list(ctx.queues)


def payload(
    ctx, consumer=None, *, state: str = "up", started_at: float, now: float | None = None
) -> dict:
    """What this worker says about itself (plain data; see fleet/query/hosts.py)."""
    now = time.time() if now is None else now
    active = sorted({r.id for r in list(worker_state.active_requests)})
    return {
        "hostname": ctx.hostname,
        "nodename": ctx.nodename,
        "addr": advertised_addr(ctx),
        "pid": os.getpid(),
        "state": state,
        "capability": ctx.capability.to_dict(),
        "detected": (ctx.detected or ctx.capability).to_dict(),
        "queues": consumed(ctx, consumer),
        "asked": list(ctx.asked),
        "slots": _slots(ctx),
        "pool": pool_view(ctx),
        "active": active,
        "started_at": started_at,
        "seen_at": now,
        "envs": workspace.cached_envs(ctx.work_root),
        "warnings": list(ctx.warnings),
    }


def pool_view(ctx) -> dict:
    """The host's resources and who holds them (fleet hosts, fleet why)."""
    pool, held = ctx.gate.pool, ctx.gate.held()
    holders: dict[int, list[str]] = {}
    jobs = {}
    for job_id, grant in held.values():
        for i in grant.gpus:
            holders.setdefault(i, []).append(job_id)
        jobs[job_id] = {
            "gpus": list(grant.gpus),
            "cores": len(grant.cores),
            "ram_gib": grant.ram_gib,
            "shared_gib": grant.shared_gib,
        }
    names = {d.index: d.name for d in ctx.capability.cuda_devices}
    yielded = ctx.gate.yielded()  # to the host's owner (tasks.yieldwatch)
    gpus = [
        {
            "index": d.index,
            "name": names.get(d.index, ""),
            "vram_gib": d.vram_gib,
            "state": "whole" if d.whole else "shared" if d.shared_gib > 0 else "free",
            "shared_gib": d.shared_gib,
            "jobs": holders.get(d.index, []),
            "yielded": yielded.get(d.index, ""),
        }
        for d in pool.devices
    ]
    kept_cores, kept_ram = pool.held_back()
    return {
        "gpus": gpus,
        "cores": {
            "total": pool.total_cores,
            "free": len(pool.free_cores),
            "kept_for_gpus": kept_cores,
        },
        "ram_gib": {
            "total": pool.total_ram_gib,
            "free": round(pool.free_ram_gib, 3),
            "kept_for_gpus": kept_ram,
        },
        "jobs": jobs,
    }


def _slots(ctx) -> int:
    return int(getattr(ctx.app.conf, "worker_concurrency", 0) or max(1, ctx.capability.cpu_cores))


def beat(client: redis.Redis, body: dict, ttl_s: float = C.HOST_TTL_S) -> None:
    pipe = client.pipeline(transaction=False)
    pipe.set(C.HOST_KEY + body["hostname"], json.dumps(body), px=int(ttl_s * 1000))
    pipe.zadd(C.HOSTS_INDEX, {body["hostname"]: body["seen_at"]})
    pipe.zremrangebyscore(C.HOSTS_INDEX, "-inf", body["seen_at"] - C.HOST_FORGET_S)
    pipe.execute()


def holders(ctx) -> frozenset[str]:
    """The jobs holding part of this host's pool now."""
    return frozenset(job_id for job_id, _ in ctx.gate.held().values())


def run(
    ctx,
    consumer=None,
    every_s: float = C.HOST_HEARTBEAT_EVERY_S,
    pool_every_s: float = C.HOST_POOL_REWRITE_S,
) -> None:
    """Beat until the worker shuts down, then say it stopped (kept for HOST_FORGET_S).
    A change of queues is written at once: publish waits on it (fleet/pickup.py)."""
    started = time.time()
    while True:
        written, yielded, held = consumed(ctx, consumer), ctx.gate.yielded(), holders(ctx)
        try:
            beat(ctx.redis, payload(ctx, consumer, started_at=started))
        except redis.RedisError as e:
            log.debug("heartbeat not written (%s); will retry", e)
        wrote = time.monotonic()
        deadline = wrote + every_s
        # a GPU yielded to its owner, or taken back, is shown at once too (fleet hosts), and a
        # job taking or leaving part of the pool within pool_every_s (fleet hosts and why
        # showed GPUs busy or free for up to a whole beat)
        while (
            not ctx.shutdown.wait(0.1)
            and time.monotonic() < deadline
            and consumed(ctx, consumer) == written
            and ctx.gate.yielded() == yielded
            and (time.monotonic() - wrote < pool_every_s or holders(ctx) == held)
        ):
            pass
        if ctx.shutdown.is_set():
            break
    try:
        beat(
            ctx.redis,
            payload(ctx, consumer, state="stopped", started_at=started),
            ttl_s=C.HOST_FORGET_S,
        )
    except redis.RedisError:
        pass


def start(ctx, consumer=None) -> threading.Thread:
    t = threading.Thread(target=run, args=(ctx, consumer), name="fleet-heartbeat", daemon=True)
    t.start()
    return t
