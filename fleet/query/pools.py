"""A host's resource pool as its heartbeat tells it: free and total GPUs, cores and RAM, and
what each running job holds.

Pure: turns a heartbeat's ``pool`` field (tasks/heartbeat.py) into values `fleet hosts`
shows and into a ``routing.pool.Pool`` that `fleet why` asks ``lacking`` of. A heartbeat
from an older worker has no pool: callers fall back to its capability.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from core.ids import short_id
from routing.explain import Holding
from routing.pool import GPU_RESERVE_RAM_GIB, Device, GpuReserve, Pool


class GpuUse(str, Enum):
    FREE = "free"  # nothing on it
    WHOLE = "whole"  # one job holds all of it
    SHARED = "shared"  # sharing jobs hold VRAM budgets on it


@dataclass(frozen=True)
class GpuSlot:
    """One GPU of a host and who holds it."""

    index: int
    name: str
    vram_gib: float
    use: GpuUse = GpuUse.FREE
    shared_gib: float = 0.0
    jobs: tuple[str, ...] = ()  # job IDs
    yielded: str = ""  # why it is yielded to the host's owner ("" if not)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GpuSlot:
        return cls(
            int(d["index"]),
            str(d.get("name", "")),
            float(d.get("vram_gib", 0)),
            GpuUse(d.get("state", "free")),
            float(d.get("shared_gib", 0)),
            tuple(d.get("jobs", ())),
            str(d.get("yielded") or ""),
        )


@dataclass(frozen=True)
class JobHold:
    """What one running job holds on the host."""

    gpus: tuple[int, ...] = ()
    cores: int = 0
    ram_gib: float = 0.0
    shared_gib: float = 0.0

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobHold:
        return cls(
            tuple(int(i) for i in d.get("gpus", ())),
            int(d.get("cores", 0)),
            float(d.get("ram_gib", 0)),
            float(d.get("shared_gib", 0)),
        )


@dataclass(frozen=True)
class HostPool:
    """A host's resources now, as its last heartbeat said."""

    gpus: tuple[GpuSlot, ...] = ()
    cores_total: int = 0
    cores_free: int = 0
    cores_kept: int = 0  # free cores held back for idle GPUs (not for CPU jobs)
    ram_total_gib: float = 0.0
    ram_free_gib: float = 0.0
    # None: the heartbeat does not say (the default reserve applies)
    ram_kept_gib: float | None = None
    jobs: Mapping[str, JobHold] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> HostPool:
        cores, ram = d.get("cores") or {}, d.get("ram_gib") or {}
        kept_ram = ram.get("kept_for_gpus")
        return cls(
            tuple(GpuSlot.from_dict(g) for g in d.get("gpus") or ()),
            int(cores.get("total", 0)),
            int(cores.get("free", 0)),
            int(cores.get("kept_for_gpus", 0)),
            float(ram.get("total", 0)),
            float(ram.get("free", 0)),
            None if kept_ram is None else float(kept_ram),
            {jid: JobHold.from_dict(h) for jid, h in (d.get("jobs") or {}).items()},
        )

    @property
    def free_gpus(self) -> int:
        """GPUs nothing holds and the owner has not taken back."""
        return sum(g.use is GpuUse.FREE and not g.yielded for g in self.gpus)

    def yielded(self) -> dict[int, str]:
        """GPU index -> why it is yielded to the host's owner."""
        return {g.index: g.yielded for g in self.gpus if g.yielded}

    @property
    def shared_gpus(self) -> int:
        return sum(g.use is GpuUse.SHARED for g in self.gpus)

    def pool(self) -> Pool:
        """As ``routing.pool`` sees it; core numbers are made up (only how many are free counts)."""
        # a yielded GPU takes no job, as the worker's own gate withholds it (routing.yielding)
        devices = tuple(
            Device(g.index, g.vram_gib, g.use is GpuUse.WHOLE or bool(g.yielded), g.shared_gib)
            for g in self.gpus
        )
        return Pool(
            devices,
            frozenset(range(self.cores_free)),
            self.cores_total,
            self.ram_free_gib,
            self.ram_total_gib,
            self._reserve(sum(d.idle for d in devices)),
        )

    def _reserve(self, idle: int) -> GpuReserve:
        """Per idle GPU, from the totals the heartbeat says are kept back now. Where it does
        not say the RAM, the default applies, and none on a host that keeps no cores back
        (one started with -Q cpu keeps nothing)."""
        if not idle:
            return GpuReserve()
        if self.ram_kept_gib is not None:
            ram = self.ram_kept_gib / idle
        else:
            ram = GPU_RESERVE_RAM_GIB if self.cores_kept else 0.0
        return GpuReserve(self.cores_kept // idle, ram)

    def holdings(self, names: Mapping[str, str]) -> list[Holding]:
        """Each running job with what it holds, named from ``names`` (job ID -> name; an ID
        not there, a job the records no longer call running, goes by its ID's first 12)."""
        return [
            Holding(names.get(jid) or short_id(jid), h.gpus, h.cores, h.ram_gib)
            for jid, h in sorted(self.jobs.items(), key=lambda kv: names.get(kv[0]) or kv[0])
        ]
