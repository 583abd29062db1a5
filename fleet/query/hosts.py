"""The fleet's hosts, read from the heartbeats workers keep in Redis (tasks/heartbeat.py).

Plain data for `fleet hosts`, `fleet why` and publish's feasibility check: a host is live
while its heartbeat key lives; one that stopped cleanly or went silent is still listed
(``stopped`` / ``lost``) for ``HOST_FORGET_S`` with when it was last seen.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field

import redis

from core import constants as C
from fleet.query.pools import HostPool
from routing.capability import Capability
from state.jobrecord import JobState, fetch_many


@dataclass(frozen=True)
class RunningJob:
    job_id: str
    name: str
    queue: str
    started_at: float | None


@dataclass(frozen=True)
class HostView:
    hostname: str
    state: str  # up | stopped | lost
    seen_at: float
    nodename: str = ""
    capability: dict | None = None  # as the worker uses it (policy caps applied)
    detected: dict | None = None  # before any policy cap
    queues: tuple[str, ...] = ()  # in serving order
    asked: tuple[str, ...] = ()  # the worker's -Q, if any
    slots: int = 0
    running: tuple[RunningJob, ...] = ()
    started_at: float | None = None
    pid: int | None = None
    envs: tuple[dict, ...] = ()  # the jobs' environments it holds (tasks.workspace.cached_envs)
    pool: dict | None = None  # free and held GPUs, cores and RAM (None: an older worker)
    warnings: tuple[str, ...] = ()  # what the worker could not detect or will not serve, and why
    addr: str = ""  # the address it advertises (FLEET_ADVERTISE_ADDR; a gang's MASTER_ADDR)
    extra: dict = field(default_factory=dict)

    @property
    def live(self) -> bool:
        return self.state == "up"

    @property
    def busy(self) -> bool:
        return bool(self.running)

    def cap(self) -> Capability | None:
        return Capability.from_dict(self.capability) if self.capability else None

    def detected_cap(self) -> Capability | None:
        d = self.detected or self.capability
        return Capability.from_dict(d) if d else None

    def resources(self) -> HostPool | None:
        """Its pool, from a live heartbeat that has one (a stopped host holds nothing)."""
        return HostPool.from_dict(self.pool) if self.pool and self.live else None

    def to_dict(self, now: float | None = None) -> dict:
        d = asdict(self)
        d.pop("extra")
        d["running"] = [asdict(r) for r in self.running]
        d["queues"], d["asked"], d["envs"] = list(self.queues), list(self.asked), list(self.envs)
        d["warnings"] = list(self.warnings)
        d["busy"] = self.busy
        pool = self.resources()
        # to the host's owner
        d["yielded"] = {str(i): why for i, why in (pool.yielded() if pool else {}).items()}
        d["seen_ago_s"] = round((time.time() if now is None else now) - self.seen_at, 1)
        return d


def running_jobs(client: redis.Redis) -> dict[str, list[RunningJob]]:
    """Running jobs by the worker (hostname) their record names."""
    out: dict[str, list[RunningJob]] = {}
    for r in fetch_many(
        client,
        sorted(client.smembers(C.RUNNING_SET)),
        ("state", "worker", "name", "queue", "started_at"),
    ):
        if r.state is JobState.RUNNING and r.worker:
            out.setdefault(r.worker, []).append(RunningJob(r.job_id, r.name, r.queue, r.started_at))
    return out


def read_hosts(client: redis.Redis, *, include_gone: bool = True) -> list[HostView]:
    """Every host seen within HOST_FORGET_S, live ones first, then by name."""
    seen = [(h, float(t)) for h, t in client.zrange(C.HOSTS_INDEX, 0, -1, withscores=True)]
    bodies = client.mget([C.HOST_KEY + h for h, _ in seen]) if seen else []
    running = running_jobs(client)
    out = []
    for (hostname, seen_at), raw in zip(seen, bodies, strict=True):
        if raw is None:
            view = HostView(hostname, "lost", seen_at, running=tuple(running.get(hostname, ())))
        else:
            b = json.loads(raw)
            view = HostView(
                hostname,
                b.get("state", "up"),
                float(b.get("seen_at", seen_at)),
                b.get("nodename", ""),
                b.get("capability"),
                b.get("detected"),
                tuple(b.get("queues", ())),
                tuple(b.get("asked", ())),
                int(b.get("slots", 0)),
                tuple(running.get(hostname, ())),
                b.get("started_at"),
                b.get("pid"),
                envs=tuple(b.get("envs") or ()),
                pool=b.get("pool"),
                warnings=tuple(b.get("warnings") or ()),
                addr=b.get("addr") or "",
            )
        if include_gone or view.live:
            out.append(view)
    return sorted(out, key=lambda v: (not v.live, v.hostname))


def live_hosts(client: redis.Redis) -> list[HostView]:
    return read_hosts(client, include_gone=False)
