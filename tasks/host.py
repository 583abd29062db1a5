"""The host context: what a running worker knows about itself, built once at start-up."""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

import redis

from artifacts.stores import Store, open_store
from core.errors import ConfigError
from core.settings import WORK_DIR_ENV, WorkerSettings
from routing.capability import Capability
from routing.detect import detect
from state.cluster import ClusterConfig, read_config
from state.records import Records
from tasks import isolation
from tasks.gpus import GpuSlots

log = logging.getLogger("fleet.worker")


@dataclass
class HostContext:
    """Everything a running worker knows about itself; built once at start."""

    app: object
    settings: WorkerSettings        # the worker's environment, read once
    capability: Capability          # as detected, capped by the published host policy
    config: ClusterConfig
    queues: list[str]
    redis: redis.Redis
    records: Records
    gpus: GpuSlots
    nodename: str = ""
    # before any policy cap (always set by build_context): a newly published policy applies to this
    detected: Capability | None = None
    asked: tuple[str, ...] = ()          # -Q, if given: the worker serves no other tier
    job_user: isolation.JobUser | None = None   # FLEET_JOB_USER: jobs run as this user
    shutdown: threading.Event = field(default_factory=threading.Event)

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


def install(ctx: HostContext) -> HostContext:
    """Make ``ctx`` the worker's context (the start-up signal builds it)."""
    global _ctx
    _ctx = ctx
    return ctx


def current() -> HostContext | None:
    """The worker's context if it was built, without building it."""
    return _ctx


def redis_client(app) -> redis.Redis:
    from state.redis_conn import client_for   # password, TLS, Sentinel: one place
    return client_for(app, socket_timeout=10, socket_connect_timeout=5, health_check_interval=30,
                      retry_on_timeout=True, decode_responses=True)


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
    cap = config.effective(detected)
    records = Records(client, lease_ttl_s=app.conf.fleet_lease_ttl_s)
    return HostContext(app, settings, cap, config, config.queues(detected), client, records,
                       GpuSlots(cap.cuda_devices), detected=detected, job_user=job_user)


def _make_work_dir(work_dir: Path) -> None:
    try:
        work_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{WORK_DIR_ENV}={str(work_dir)!r}: cannot create it ({e.strerror}); "
                          "point it at a writable directory") from e


def _job_user(settings: WorkerSettings) -> isolation.JobUser | None:
    """FLEET_JOB_USER, refused here if it cannot work."""
    user = isolation.job_user(settings.job_user)
    if user is None:
        return None
    from tasks.runner import SUPERVISOR
    return isolation.probe_job_user(user, settings.work_dir, SUPERVISOR)
