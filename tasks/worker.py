"""Worker start-up: detect the host, pick its queues, and run the reaper in the background.

Hooked to Celery's signals so the plain ``celery -A tasks worker`` does it all:
with no ``-Q`` it consumes exactly the queues this host qualifies for, most demanding
first; with ``-Q`` naming a queue it does not qualify for, it refuses to start.
"""

from __future__ import annotations

import logging
import threading
import time

import redis
from celery import signals
from celery.apps.worker import Worker as CeleryWorker
from celery.worker import state as worker_state

from core import constants as C
from core.errors import FleetError
from core.ids import short_id
from state.cluster import read_config
from state.queuewatch import Watcher
from state.search import advance, study
from tasks import (
    admission,
    heartbeat,
    host,
    isolation,
    preemption,
    strays,
    trained,
    upload,
    watchman,
    yieldwatch,
)
from tasks.host import HostContext

log = logging.getLogger("fleet.worker")
WATCHMAN_RESTART_S = 1.0  # a watchman that keeps dying at once is started again this often


@signals.celeryd_init.connect
def start_checks(sender=None, instance=None, conf=None, options=None, **kw):
    """Before the consumer starts: any failed check ends the worker with one line, having
    consumed nothing (Celery would log a handler's error and serve anyway)."""
    try:
        isolation.harden_worker()
        choose_queues(sender, instance, conf, options)
        yieldwatch.validate(host.context().settings.yielding)
    except FleetError as e:
        raise SystemExit(f"fleet: refusing to start: {e}") from None


def choose_queues(sender=None, instance=None, conf=None, options=None, **kw):
    """Subscribe to exactly the queues this host qualifies for."""
    app = instance.app
    ctx = host.install(host.build_context(app))
    ctx.nodename = sender or ""
    asked = [q for q in (options or {}).get("queues") or [] if q]
    if isinstance((options or {}).get("queues"), str):
        asked = [q.strip() for q in options["queues"].split(",") if q.strip()]
    if asked:
        reasons = ctx.config.tier_reasons(ctx.capability)
        bad = [q for q in asked if q not in ctx.queues]
        if bad:
            why = "; ".join(
                f"{q}: {reasons.get(q) or 'not a tier or constraint queue this host may serve'}"
                for q in bad
            )
            raise SystemExit(
                f"fleet: refusing to start: host {ctx.hostname} does not qualify for "
                f"{', '.join(bad)} ({why}). Drop -Q to consume exactly the queues it "
                f"qualifies for: {', '.join(ctx.queues) or 'none'}"
            )
        ctx.asked = tuple(asked)
        # Celery consumes exactly -Q from here on (its setup_queues runs after this signal);
        # the first refresh adds those tiers' constraint queues
        ctx.queues = [q for q in ctx.queues if q in asked]
    if not ctx.queues:
        raise SystemExit(
            f"fleet: refusing to start: host {ctx.hostname} qualifies for no tier "
            f"({ctx.config.tier_reasons(ctx.capability)})"
        )
    app.amqp.queues.select(ctx.queues)
    # as many jobs at once as the host's resources allow (each holds at least one core);
    # the gate (tasks.admission) decides what fits, --concurrency only caps it
    if not (options or {}).get("concurrency"):
        conf.worker_concurrency = max(1, ctx.capability.cpu_cores, len(ctx.capability.cuda_devices))
    host.keep_for_gpus(ctx)
    admission.install(ctx.gate)
    log.info("fleet: host %s consumes %s", ctx.hostname, ", ".join(ctx.queues))
    for warning in ctx.warnings:
        log.warning("fleet: host %s: %s", ctx.hostname, warning)
    upload.upload_kept(ctx)  # what a previous run of this worker trained is stored before new work
    trained.start(ctx)  # dead runs: finish what they trained, remove the rest (tasks.trained)
    # if this process dies, its runs go on at once, not in a lease; kept alive while it lives
    first = watchman.start(ctx.work_root)  # before any job is consumed
    threading.Thread(
        target=_keep_watchman, args=(ctx, first), name="fleet-watchman", daemon=True
    ).start()


@signals.worker_ready.connect
def start_background(sender=None, **kw):
    ctx = host.context()
    threading.Thread(target=_reaper_loop, args=(ctx,), name="fleet-reaper", daemon=True).start()
    threading.Thread(target=strays.loop, args=(ctx,), name="fleet-strays", daemon=True).start()
    # Optuna loads in about a second: before a trial's first metric line or end needs it
    threading.Thread(target=study.warm, name="fleet-optuna", daemon=True).start()
    threading.Thread(
        target=_refresh_loop, args=(ctx, sender), name="fleet-queues", daemon=True
    ).start()
    heartbeat.start(ctx, sender)  # fleet hosts / why / publish read the fleet from it
    threading.Thread(target=preemption.loop, args=(ctx,), name="fleet-preempt", daemon=True).start()
    yieldwatch.start(ctx)  # FLEET_YIELD=1: give GPUs back to the host's owner


@signals.worker_shutting_down.connect
def stop_jobs(**kw):
    """SIGTERM: stop running jobs now and hand them back to their queues."""
    ctx = host.current()
    if ctx is not None:
        ctx.shutdown.set()


class FleetWorker(CeleryWorker):
    """Celery's worker, whose soft shutdown (the cold path: SIGQUIT, a second Ctrl+C) hands
    running jobs back at once and waits for that, instead of sleeping out the timeout while
    jobs run on. Celery sends worker_shutting_down only after this wait."""

    def wait_for_soft_shutdown(self):
        stop_jobs()
        deadline = time.monotonic() + self.app.conf.worker_soft_shutdown_timeout
        while worker_state.active_requests and time.monotonic() < deadline:
            time.sleep(0.1)


def _keep_watchman(ctx: HostContext, proc) -> None:
    """Start another watchman whenever this worker's exits while the worker lives (killed by
    hand, the OOM killer): without one, a worker killed later would leave its jobs to their
    leases."""
    while True:
        proc.wait()
        if ctx.shutdown.wait(WATCHMAN_RESTART_S):  # a stopping worker's watchman is done
            return
        log.warning(
            "fleet: the watchman (pid %d) exited with status %s while its worker lives; "
            "starting another",
            proc.pid,
            proc.returncode,
        )
        proc = watchman.start(ctx.work_root)


def _reaper_loop(ctx: HostContext) -> None:
    """One worker at a time (under a Redis lock) returns jobs whose lease expired."""
    ttl_s = ctx.records.lease_ttl_ms / 1000
    every = min(C.REAPER_EVERY_S, ttl_s / 4)
    while not ctx.shutdown.wait(every):
        try:
            me = ctx.nodename or ctx.hostname
            if not ctx.redis.set(C.REAPER_LOCK, me, nx=True, px=int(every * 1000)):
                continue
            # a poll whose reply was lost (a Redis restart above all) needs no lease to pass;
            # nor do messages that vanished unreported (a failover dropping acknowledged writes)
            for line in ctx.records.reconcile_lost() + ctx.records.sweep_orphans():
                log.warning("fleet reaper: %s", line)
            # a large release whose worker died between its slices (lua/release_rest.lua)
            for line in ctx.records.release_rest():
                log.warning("fleet reaper: %s", line)
            # Leases expire by the clock even while Redis is down; right after a restart give
            # running jobs one TTL to heartbeat again before calling them lost.
            if ctx.redis.info("server").get("uptime_in_seconds", ttl_s) >= ttl_s:
                for line in ctx.records.reap() + ctx.records.restore_unacked():
                    log.warning("fleet reaper: %s", line)
                # ends whose advance never ran (its worker died between), publishers gone early
                for sid, issued in advance.sweep(ctx.redis).items():
                    log.warning("fleet reaper: search %s issued trial(s) %s", short_id(sid), issued)
        except redis.ResponseError as e:
            log.error("fleet reaper: script error: %s", e)
        except redis.RedisError as e:
            log.warning("fleet reaper: Redis unavailable (%s); will retry", e)


def _refresh_loop(ctx: HostContext, consumer) -> None:
    """Follow tiers, host policies and constraint queues published after start: consume
    what this host now qualifies for (in tier order), stop consuming what it no longer does."""
    watch = Watcher(ctx.redis)  # a publish with new queues wakes this at once
    while watch.wait(ctx.shutdown):
        try:
            config = read_config(ctx.redis)
        except redis.RedisError:
            continue
        wanted = config.queues(ctx.detected, only=ctx.asked)
        if not wanted:
            log.warning(
                "fleet: the published config leaves host %s no queue; keeping %s",
                ctx.hostname,
                ", ".join(ctx.queues),
            )
            continue
        ctx.config, ctx.capability = config, config.effective(ctx.detected)
        # compared with what the consumer really consumes, not with what we last asked for:
        # a control message that went astray is made good on the next pass
        consumed = _consumed(consumer) or ctx.queues
        if wanted == consumed:
            ctx.queues = wanted
            continue
        # kombu serves queues in the order they were added: keep the common prefix, and
        # re-add everything after it in tier order (messages wait in Redis meanwhile)
        kept = 0
        while kept < min(len(wanted), len(consumed)) and wanted[kept] == consumed[kept]:
            kept += 1
        for q in consumed[kept:]:
            log.info("fleet: %s %s", "re-ordering" if q in wanted else "no longer consuming", q)
            ctx.app.control.cancel_consumer(q, destination=[ctx.nodename], reply=False)
        for q in wanted[kept:]:
            log.info("fleet: consuming %s", q)
            ctx.app.control.add_consumer(q, destination=[ctx.nodename], reply=False)
        ctx.queues = wanted
        host.keep_for_gpus(ctx)
        watch.soon()  # control messages may land out of order: check the result shortly


def _consumed(consumer) -> list[str] | None:
    """The queues the worker's task consumer is on, in serving order (None if unknown)."""
    try:
        return [q.name for q in consumer.task_consumer.queues]
    except (AttributeError, RuntimeError):  # not started yet, or changing under us
        return None
