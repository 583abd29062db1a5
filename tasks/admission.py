"""This worker's resource pool, shared by its consumer and its running jobs.

The transport asks ``consumable`` before each BRPOP (only queues whose most demanding job
would start now), reserves what a delivered job needs with ``take`` before handing it to
Celery, and the job's execution ``claim``s that reservation. It is given back with
``release`` when the job's whole process group has exited (execution) or the delivery is
acked or rejected without running (the transport's QoS), whichever comes first. A release
wakes a BRPOP that waits on fewer queues than the freed resources allow (``wake_key``), so
a freed GPU is offered work at once. Admission itself is pure (``routing.pool``); this
module adds the lock and the bookkeeping by delivery tag.

A ``Hold`` keeps the room that preemption frees (``tasks.preemption``) for the urgent job
alone: while it lasts, only that job's queue is consumed, and only once the room is free,
and only that job may take it, so neither the job handed back (queued again at the head
of its list), another queue nor another owner's turn takes the GPU it was stopped for.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from core import constants as C
from manifest.schema import Needs, TierSpec
from routing.capability import Capability
from routing.pool import (
    GPU_RESERVE_CORES,
    GPU_RESERVE_RAM_GIB,
    Demand,
    GpuReserve,
    Grant,
    Pool,
    demand_of,
    release,
)
from routing.tiers import qualifies
from routing.yielding import admit_yielding
from state import queues

# queue name -> what the most demanding job on it needs (None: unknown, consume it anyway)
QueueDemand = Callable[[str], "Demand | None"]


@dataclass(frozen=True)
class Hold:
    """Room kept for one waiting job until it is delivered here or ``until`` passes."""

    job_id: str
    queue: str  # the queue it waits on: the only one consumed meanwhile
    demand: Demand
    until: float  # time.monotonic()
    lists: tuple[
        str, ...
    ] = ()  # the lists its message waits in: the only ones BRPOP asks (all: ())


class Gate:
    def __init__(
        self,
        pool: Pool,
        queue_demand: QueueDemand,
        on_release: Callable[[], None] = lambda: None,
        wake_key: str = "",
    ):
        self._pool = pool
        self.queue_demand = queue_demand  # set again once the host context exists
        self._grants: dict[str, Grant] = {}
        self._jobs: dict[str, str] = {}  # delivery tag -> job id
        self._unclaimed: dict[str, list[str]] = {}  # job id -> tags no execution claimed yet
        self._lock = threading.Lock()
        self._on_release = on_release
        self.wake_key = wake_key
        self._hold: Hold | None = None
        self._yielded: dict[int, str] = {}  # device -> why it is yielded to the host's owner
        # why no share_gpu job starts here (tasks.vramwatch.accounting_problem); None: they may
        self.no_sharing: str | None = None

    def yield_devices(self, reasons: Mapping[int, str]) -> None:
        """From now on withhold exactly ``reasons``' devices from new jobs (tasks.yieldwatch);
        {} gives every device back. A change wakes the BRPOP to ask for what fits now."""
        with self._lock:
            changed, self._yielded = dict(reasons) != self._yielded, dict(reasons)
        if changed:
            self._on_release()

    def yielded(self) -> dict[int, str]:
        """Device -> why it is yielded to the host's owner, for the devices that are."""
        with self._lock:
            return dict(self._yielded)

    @property
    def pool(self) -> Pool:
        with self._lock:
            return self._pool

    def keep_for_gpus(self, reserve: GpuReserve) -> None:
        """What each idle GPU keeps back from CPU-only jobs from now on."""
        with self._lock:
            self._pool = replace(self._pool, reserve=reserve)

    def held(self) -> dict[str, tuple[str, Grant]]:
        """Delivery tag -> (job id, grant) for everything reserved now."""
        with self._lock:
            return {tag: (self._jobs.get(tag, ""), g) for tag, g in self._grants.items()}

    def hold(self, hold: Hold) -> None:
        """Keep what the host frees for ``hold.job_id`` alone (one hold at a time)."""
        with self._lock:
            self._hold = hold
        self._on_release()  # BRPOP again, on the held queue alone

    def unhold(self, job_id: str) -> None:
        """Stop keeping room for ``job_id`` (it runs elsewhere, or waited too long)."""
        with self._lock:
            if self._hold is None or self._hold.job_id != job_id:
                return
            self._hold = None
        self._on_release()

    def holding(self) -> Hold | None:
        """The hold in force, if any (an expired one is dropped)."""
        with self._lock:
            return self._live_hold()

    def held_lists(self, keys: list[str]) -> list[str]:
        """Of the BRPOP ``keys``, those to ask: under a hold naming its lists, only those
        (a job of another owner or priority on the held queue cannot take the room), else all."""
        held = self.holding()
        if held is None or not held.lists:
            return keys
        # its lists, whether or not the fair-share order knows its owner yet,
        # once its queue is asked
        asked = {queues.queue_of(k) for k in keys}
        return [k for k in held.lists if queues.queue_of(k) in asked]

    def _live_hold(self) -> Hold | None:
        if self._hold is not None and time.monotonic() >= self._hold.until:
            self._hold = None
        return self._hold

    def consumable(self, queues: Iterable[str]) -> list[str]:
        """The queues (in their order) whose jobs would all start here now."""
        with self._lock:
            pool, held, yielded = self._pool, self._live_hold(), set(self._yielded)
        if held is not None:  # only the held job's queue, once the room for it is free
            return (
                [held.queue]
                if held.queue in queues and self._admit(pool, held.demand, yielded)
                else []
            )
        out = []
        for q in queues:
            need = self.queue_demand(q)
            if need is None or self._admit(pool, need, yielded) is not None:
                out.append(q)
        return out

    def _admit(self, pool: Pool, demand: Demand, yielded) -> tuple[Grant, Pool] | None:
        if demand.share_gpu and self.no_sharing is not None:
            return None
        return admit_yielding(pool, demand, yielded)

    def demand(self, needs: Needs, queue: str) -> Demand:
        """What a job with ``needs`` delivered from ``queue`` reserves (GPUs on a GPU queue)."""
        on_queue = self.queue_demand(queue)
        return demand_of(needs, on_gpu=on_queue is not None and on_queue.gpus > 0)

    def take(self, tag: str, demand: Demand, job_id: str = "") -> Grant | None:
        """Reserve ``demand`` for the delivery ``tag``; None when it cannot start now."""
        with self._lock:
            if tag in self._grants:
                return self._grants[tag]
            held = self._live_hold()
            if held is not None and held.job_id != job_id:
                return None  # the room is kept for the held job
            got = self._admit(self._pool, demand, self._yielded)
            if got is None:
                return None
            if held is not None:
                self._hold = None  # delivered: the room is its own now
            self._grants[tag], self._pool = got
            self._jobs[tag] = job_id
            self._unclaimed.setdefault(job_id, []).append(tag)
            return got[0]

    def claim(self, job_id: str) -> tuple[str, Grant] | None:
        """The reservation the transport made for a delivery of ``job_id``, for its execution."""
        with self._lock:
            tags = self._unclaimed.get(job_id) or []
            while tags:
                tag = tags.pop(0)
                if tag in self._grants:
                    return tag, self._grants[tag]
            return None

    def release(self, tag: str) -> None:
        """Give back what ``tag`` held (a no-op for a tag that holds nothing)."""
        with self._lock:
            grant = self._grants.pop(tag, None)
            if grant is None:
                return
            job_id = self._jobs.pop(tag, "")
            if tag in self._unclaimed.get(job_id, ()):
                self._unclaimed[job_id].remove(tag)
            if not self._unclaimed.get(job_id, True):
                del self._unclaimed[job_id]
            self._pool = release(self._pool, grant)
        self._on_release()


def reserve_for(
    cap: Capability,
    served: Iterable[TierSpec],
    cores: int | None = None,
    ram_gib: float | None = None,
) -> GpuReserve:
    """What each idle GPU keeps back from CPU-only jobs: the named default, raised to the
    floors of the GPU tiers this host ``served`` (so its GPU queues stay consumable), unless
    the host says otherwise (FLEET_GPU_RESERVE_CORES / FLEET_GPU_RESERVE_RAM_GIB). A host
    that serves no GPU tier (``-Q cpu``) keeps nothing back."""
    floors = [t.floor for t in served if t.floor.require_cuda and qualifies(cap, t.floor) is None]
    if not cap.cuda_devices or not floors:
        return GpuReserve(0, 0.0)
    return GpuReserve(
        cores if cores is not None else max([GPU_RESERVE_CORES] + [f.min_cores for f in floors]),
        ram_gib
        if ram_gib is not None
        else max([GPU_RESERVE_RAM_GIB] + [f.min_ram_gib for f in floors]),
    )


def pool_for(cap: Capability, reserve: GpuReserve) -> Pool:
    return Pool.of(
        [d.vram_total_gib for d in cap.cuda_devices],
        max(1, cap.cpu_cores),
        cap.ram_total_gib,
        reserve,
    )


def wake_key(hostname: str) -> str:
    return f"{C.WAKE_KEY}{hostname}:{os.getpid()}"


_gate: Gate | None = None


def install(gate: Gate | None) -> Gate | None:
    """Make ``gate`` the one the transport consults (None: consume as stock kombu does)."""
    global _gate
    _gate = gate
    return gate


def installed() -> Gate | None:
    return _gate
