"""The host context: what a running worker knows about itself, built once at start-up."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

import redis

from artifacts.stores import Store, open_store
from core import constants as C
from core.errors import ConfigError
from core.registry import FLEET_STORE_URL, FLEET_WORK_DIR
from core.secrets import masked
from core.settings import WorkerSettings
from routing.capability import Capability
from routing.detect import detect
from state.cluster import ClusterConfig, read_config
from state.records import Records
from tasks import admission, isolation, vramwatch
from tasks.admission import Gate
from tasks.handback import Runs

log = logging.getLogger("fleet.worker")


@dataclass
class HostContext:
    """Everything a running worker knows about itself; built once at start."""

    app: object
    settings: WorkerSettings  # the worker's environment, read once
    capability: Capability  # as detected, capped by the published host policy
    config: ClusterConfig
    queues: list[str]
    redis: redis.Redis
    records: Records
    gate: Gate  # its resource pool: what it may take, what jobs hold
    nodename: str = ""
    # before any policy cap (always set by build_context): a newly published policy applies to this
    detected: Capability | None = None
    asked: tuple[str, ...] = ()  # -Q, if given: the worker serves no other tier
    job_user: isolation.JobUser | None = None  # FLEET_JOB_USER: jobs run as this user
    shutdown: threading.Event = field(default_factory=threading.Event)
    runs: Runs = field(default_factory=Runs)  # the runs executing here, for policies to hand back
    # what the operator must know about this worker (worker log at start, fleet hosts)
    warnings: tuple[str, ...] = ()

    @property
    def hostname(self) -> str:
        return self.capability.hostname

    @property
    def work_root(self) -> Path:
        return self.settings.work_dir

    def open_store(self, url: str | None = None) -> Store:
        """The store bundles go to (``url``: another bucket, for a job's s3:// data)."""
        store = self.settings.store
        return open_store(store if url is None else replace(store, url=url))


_ctx: HostContext | None = None


def context() -> HostContext:
    """The worker's context; built lazily if a task runs outside the signal path."""
    global _ctx
    if _ctx is None:
        from tasks import app

        _ctx = build_context(app)
    return _ctx


def shutdown_event() -> threading.Event | None:
    """The running worker's shutdown event; None before its context is built."""
    return _ctx.shutdown if _ctx is not None else None


def install(ctx: HostContext) -> HostContext:
    """Make ``ctx`` the worker's context (the start-up signal builds it)."""
    global _ctx
    _ctx = ctx
    return ctx


def current() -> HostContext | None:
    """The worker's context if it was built, without building it."""
    return _ctx


def redis_client(app) -> redis.Redis:
    from state.redis_conn import client_for  # password, TLS, Sentinel: one place

    timeout_s = app.conf.get("fleet_redis_socket_timeout_s", C.REDIS_SOCKET_TIMEOUT_S)
    return client_for(
        app,
        socket_timeout=timeout_s,
        socket_connect_timeout=5,
        health_check_interval=30,
        retry_on_timeout=True,
        decode_responses=True,
    )


def build_context(app, settings: WorkerSettings | None = None) -> HostContext:
    settings = settings or WorkerSettings.from_env()
    detected = detect()
    _make_work_dir(settings.work_dir)
    job_user = _job_user(settings)
    client = redis_client(app)
    try:
        config = read_config(client)
    except (redis.AuthenticationError, redis.exceptions.NoPermissionError) as e:
        from state.redis_conn import explain, from_conf

        raise SystemExit(f"fleet: refusing to start: {explain(e, from_conf(app.conf))}") from None
    except redis.RedisError as e:
        log.warning("cannot read the published config from Redis (%s); using the default tiers", e)
        config = ClusterConfig()
    settings = _fleet_store(client, settings, app.conf.broker_url)
    cap = config.effective(detected)
    records = Records(client, lease_ttl_s=app.conf.fleet_lease_ttl_s)
    ctx = HostContext(
        app,
        settings,
        cap,
        config,
        config.queues(detected),
        client,
        records,
        _gate(cap, config, settings, client),
        detected=detected,
        job_user=job_user,
    )
    ctx.gate.queue_demand = lambda queue: queue_demand(ctx, queue)  # follows config refreshes
    _check_sharing(ctx)
    return ctx


def _check_sharing(ctx: HostContext) -> None:
    """Serve share_gpu jobs only where their VRAM budgets can be held (tasks.vramwatch)."""
    unwatched = ctx.settings.share_gpu_unwatched
    problem = vramwatch.accounting_problem(
        any(d.uuid for d in ctx.capability.cuda_devices), vramwatch.own_status(), unwatched
    )
    ctx.warnings = (ctx.detected or ctx.capability).warnings + ((problem,) if problem else ())
    ctx.gate.no_sharing = None if unwatched else problem


def _fleet_store(client: redis.Redis, settings: WorkerSettings, broker_url: str) -> WorkerSettings:
    """The fleet's store (``state.fleetstore``): used when this worker names none, recorded
    when none is; a worker that names another is refused at start."""
    from state import fleetstore

    given = settings.store.url if FLEET_STORE_URL.value() else None
    try:
        url = fleetstore.settle(
            client, given, settings.store.url, "worker", broker_url, record_it=True
        )
    except ConfigError as e:
        raise SystemExit(f"fleet: refusing to start: {e}") from None
    except redis.RedisError as e:
        log.warning(
            "cannot read the fleet's store from Redis (%s); using %s", e, masked(settings.store.url)
        )
        return settings
    return replace(settings, store=replace(settings.store, url=url))


def served_tiers(config: ClusterConfig, queues: list[str]) -> list:
    """The tiers whose queues (or constraint queues) are among ``queues``."""
    cq = config.constraint_queues or {}
    names = {q for q in queues} | {cq[q][0] for q in queues if q in cq}
    return [t for t in config.tiers if t.name in names]


def keep_for_gpus(ctx: HostContext) -> None:
    """Size the GPU reserve from the queues the host serves now (after -Q, after a refresh)."""
    s = ctx.settings
    ctx.gate.keep_for_gpus(
        admission.reserve_for(
            ctx.capability,
            served_tiers(ctx.config, ctx.queues),
            s.gpu_reserve_cores,
            s.gpu_reserve_ram_gib,
        )
    )


def queue_demand(ctx: HostContext, queue: str):
    """What the most demanding job on ``queue`` reserves here (None: not a job queue)."""
    from routing.pool import demand_of
    from routing.tiers import queue_needs

    needs = queue_needs(queue, ctx.config.tiers, ctx.config.constraint_queues)
    return None if needs is None else demand_of(needs, on_gpu=needs.require_cuda)


def _gate(
    cap: Capability, config: ClusterConfig, settings: WorkerSettings, client: redis.Redis
) -> Gate:
    reserve = admission.reserve_for(
        cap,
        served_tiers(config, config.queues(cap)),
        settings.gpu_reserve_cores,
        settings.gpu_reserve_ram_gib,
    )
    wake = admission.wake_key(cap.hostname)

    def on_release() -> None:
        try:  # wake the consumer's BRPOP: it may now take from queues it could not before
            client.pipeline(transaction=False).lpush(wake, 1).expire(wake, C.WAKE_TTL_S).execute()
        except redis.RedisError as e:
            log.debug("wake not sent (%s); the next BRPOP timeout picks the change up", e)

    return Gate(admission.pool_for(cap, reserve), lambda queue: None, on_release, wake)


def _make_work_dir(work_dir: Path) -> None:
    try:
        work_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(
            f"{FLEET_WORK_DIR.name}={str(work_dir)!r}: cannot create it ({e.strerror}); "
            "point it at a writable directory"
        ) from e


def _job_user(settings: WorkerSettings) -> isolation.JobUser | None:
    """FLEET_JOB_USER, refused here if it cannot work."""
    user = isolation.job_user(settings.job_user)
    if user is None:
        return None
    from tasks.runner import SUPERVISOR

    return isolation.probe_job_user(user, settings.work_dir, SUPERVISOR)
