"""Multi-resource scheduling yardsticks: a greedy oracle over hosts as resource pools, and
capable-idle GPU-seconds and core-seconds measured from what a fleet really did.

Pure: hosts and jobs are values, times are seconds, admission is ``routing.pool.admit`` (the
same function a worker asks). The oracle knows every job at time 0 and every duration; at
each moment it starts, longest first, every waiting job that fits some host now, on the
least capable host it fits (so big hosts stay free for jobs only they can run), and moves
to the next finish. Work conserving like fleet's hosts, but with global knowledge.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from routing.pool import Demand, GpuReserve, Grant, Pool, admit, release


@dataclass(frozen=True)
class PoolHost:
    """A simulated host: its GPUs' VRAM, its cores and RAM."""

    name: str
    gpus: tuple[float, ...] = ()
    cores: int = 4
    ram_gib: float = 16.0

    def pool(self, reserve: GpuReserve = GpuReserve()) -> Pool:
        return Pool.of(self.gpus, self.cores, self.ram_gib, reserve)

    def rank(self) -> tuple:
        return (len(self.gpus), max(self.gpus, default=0.0), self.cores, self.ram_gib, self.name)

    def can_ever_run(self, demand: Demand) -> bool:
        return admit(self.pool(), demand) is not None


@dataclass(frozen=True)
class PoolJob:
    name: str
    duration_s: float
    demand: Demand


@dataclass(frozen=True)
class PoolPlacement:
    job: str
    host: str
    start: float
    end: float
    grant: Grant


def greedy(jobs: Sequence[PoolJob], hosts: Sequence[PoolHost]) -> list[PoolPlacement]:
    """The oracle's schedule (raises if some job fits no host even when it is empty)."""
    for j in jobs:
        if not any(h.can_ever_run(j.demand) for h in hosts):
            raise ValueError(f"no host can run {j.name}")
    pools = {h.name: h.pool() for h in hosts}
    ranked = sorted(hosts, key=PoolHost.rank)
    waiting = sorted(jobs, key=lambda j: (-j.duration_s, j.name))
    running: list[tuple[float, int, str, Grant]] = []  # (end, seq, host, grant)
    out: list[PoolPlacement] = []
    now, seq = 0.0, 0
    while waiting:
        still = []
        for job in waiting:
            placed = _place(job, ranked, pools)
            if placed is None:
                still.append(job)
                continue
            host, grant = placed
            out.append(PoolPlacement(job.name, host, now, now + job.duration_s, grant))
            heapq.heappush(running, (now + job.duration_s, seq, host, grant))
            seq += 1
        waiting = still
        if waiting:
            now, _, host, grant = heapq.heappop(running)
            pools[host] = release(pools[host], grant)
            while running and running[0][0] <= now:
                _, _, h, g = heapq.heappop(running)
                pools[h] = release(pools[h], g)
    return out


def _place(
    job: PoolJob, ranked: Sequence[PoolHost], pools: dict[str, Pool]
) -> tuple[str, Grant] | None:
    for h in ranked:
        got = admit(pools[h.name], job.demand)
        if got is not None:
            pools[h.name] = got[1]
            return h.name, got[0]
    return None


def makespan(placements: Iterable[PoolPlacement]) -> float:
    return max((p.end for p in placements), default=0.0)


@dataclass(frozen=True)
class PoolRun:
    """What one job did in a real fleet: queued, started and finished times, where, needing what."""

    job: str
    host: str
    queued: float
    started: float
    finished: float
    demand: Demand


def capable_idle(
    runs: Sequence[PoolRun], hosts: Sequence[PoolHost]
) -> dict[str, tuple[float, float]]:
    """Per host, (GPU-seconds, core-seconds) left idle while a waiting job fit there.

    The host's pool is replayed from the runs it really did (in start order); between any
    two consecutive events, if a waiting job (queued, not yet started) would have been
    admitted on the host as it was, its idle GPUs and free cores count for that interval.
    """
    times = sorted({t for r in runs for t in (r.queued, r.started, r.finished)})
    out = {}
    for host in hosts:
        gpu_s = core_s = 0.0
        mine = [r for r in runs if r.host == host.name]
        for a, b in zip(times, times[1:], strict=False):
            pool = _pool_at(host, mine, a)
            waiting = [r for r in runs if r.queued <= a and r.started > a]
            if any(admit(pool, r.demand) is not None for r in waiting):
                gpu_s += pool.idle_gpus * (b - a)
                core_s += len(pool.free_cores) * (b - a)
        out[host.name] = (gpu_s, core_s)
    return out


def _pool_at(host: PoolHost, runs: Sequence[PoolRun], t: float) -> Pool:
    pool = host.pool()
    for r in sorted(runs, key=lambda r: r.started):
        if r.started <= t < r.finished:
            got = admit(pool, r.demand)
            if got is not None:  # over-subscription in a real run would be a bug; not counted twice
                pool = got[1]
    return pool
