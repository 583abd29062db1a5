"""A host as a pool of consumable resources, and admission: does this job start here now?

Pure values and functions, no locks, no I/O: a worker keeps one ``Pool`` behind a lock and
asks ``admit`` before it takes a job; the scheduling benchmark's oracle asks the same.

* GPUs are whole devices, each with its VRAM. A job asking ``gpus = N`` gets N devices that
  nothing else holds, each with at least its ``vram_gib``.
* A job with ``share_gpu`` asks for a VRAM budget on one device: sharing jobs fill a device
  while their budgets sum to no more than its VRAM; a device some job holds whole is never
  shared, and a shared device is never handed out whole.
* Cores are numbered (so a job can be pinned to its own) and RAM is GiB.
* GPU work keeps its room: a CPU-only job may not take the cores or RAM that the host's idle
  GPUs need to start GPU jobs (``GpuReserve`` per idle device).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from manifest.schema import Needs

# What an idle GPU keeps back from CPU-only jobs, so a GPU job can start on it at once.
GPU_RESERVE_CORES = 1  # what a GPU job takes when it says nothing (raised to GPU tier floors)
GPU_RESERVE_RAM_GIB = 8.0  # raised to the RAM floors of the GPU tiers a host serves
DEFAULT_JOB_CORES = 1  # a job that declares no cores still takes one
EPSILON_GIB = 1e-9


@dataclass(frozen=True)
class Demand:
    """What one job reserves on a host while its process group lives."""

    gpus: int = 0
    vram_gib: float = 0.0  # per GPU; with share_gpu, the budget on its one device
    share_gpu: bool = False
    cores: int = DEFAULT_JOB_CORES
    ram_gib: float = 0.0

    def __post_init__(self):
        if self.gpus < 0 or self.cores < 0 or self.ram_gib < 0 or self.vram_gib < 0:
            raise ValueError(f"demand: negative amounts are not allowed: {self}")
        if self.share_gpu and self.gpus != 1:
            raise ValueError(f"demand: share_gpu needs exactly one GPU, got gpus={self.gpus}")


@dataclass(frozen=True)
class GpuReserve:
    """Held back from CPU-only jobs for each idle GPU."""

    cores: int = GPU_RESERVE_CORES
    ram_gib: float = GPU_RESERVE_RAM_GIB


@dataclass(frozen=True)
class Device:
    """One GPU's state in the pool."""

    index: int
    vram_gib: float
    whole: bool = False  # held entirely by one job
    shared_gib: float = 0.0  # sum of the budgets of the sharing jobs on it

    @property
    def idle(self) -> bool:
        return not self.whole and self.shared_gib <= EPSILON_GIB

    def room(self) -> float:
        """VRAM a sharing job could still budget here (0 when held whole)."""
        return 0.0 if self.whole else self.vram_gib - self.shared_gib


@dataclass(frozen=True)
class Grant:
    """What an admitted job holds: give it back with ``release``."""

    gpus: tuple[int, ...] = ()
    shared_gib: float = 0.0  # > 0: a VRAM budget on gpus[0], shared with others
    cores: tuple[int, ...] = ()
    ram_gib: float = 0.0


@dataclass(frozen=True)
class Pool:
    """A host's resources and what is free of them."""

    devices: tuple[Device, ...] = ()
    free_cores: frozenset[int] = frozenset()
    total_cores: int = 0
    free_ram_gib: float = 0.0
    total_ram_gib: float = 0.0
    reserve: GpuReserve = GpuReserve()

    @classmethod
    def of(
        cls,
        vram_gib: Iterable[float],
        cores: int,
        ram_gib: float,
        reserve: GpuReserve = GpuReserve(),
    ) -> Pool:
        """An empty pool: GPUs (VRAM each, indexed in order), cores and RAM."""
        devices = tuple(Device(i, float(v)) for i, v in enumerate(vram_gib))
        return cls(devices, frozenset(range(cores)), cores, float(ram_gib), float(ram_gib), reserve)

    @property
    def idle_gpus(self) -> int:
        return sum(d.idle for d in self.devices)

    def held_back(self, taking: Iterable[int] = ()) -> tuple[int, float]:
        """Cores and RAM kept for the idle GPUs, other than those in ``taking``."""
        idle = sum(d.idle for d in self.devices if d.index not in set(taking))
        return idle * self.reserve.cores, idle * self.reserve.ram_gib


def _whole_devices(pool: Pool, demand: Demand) -> tuple[int, ...] | None:
    # smallest devices that fit first: the big ones stay free for jobs only they can run
    fit = sorted(
        (d for d in pool.devices if d.idle and d.vram_gib + EPSILON_GIB >= demand.vram_gib),
        key=lambda d: (d.vram_gib, d.index),
    )
    return tuple(d.index for d in fit[: demand.gpus]) if len(fit) >= demand.gpus else None


def _shared_device(pool: Pool, demand: Demand) -> int | None:
    # pack: a device already shared before an idle one, then the least room left over
    fit = [d for d in pool.devices if d.room() + EPSILON_GIB >= demand.vram_gib]
    if not fit:
        return None
    best = min(fit, key=lambda d: (d.idle, d.room() - demand.vram_gib, d.index))
    return best.index


def _gpus(pool: Pool, demand: Demand) -> tuple[int, ...] | None:
    if demand.gpus == 0:
        return ()
    if demand.share_gpu:
        index = _shared_device(pool, demand)
        return None if index is None else (index,)
    return _whole_devices(pool, demand)


def admit(pool: Pool, demand: Demand) -> tuple[Grant, Pool] | None:
    """The grant and the pool after it, or None when ``demand`` cannot start now."""
    gpus = _gpus(pool, demand)
    if gpus is None:
        return None
    kept_cores, kept_ram = pool.held_back(gpus) if demand.gpus == 0 else (0, 0.0)
    if len(pool.free_cores) - kept_cores < demand.cores:
        return None
    if pool.free_ram_gib - kept_ram + EPSILON_GIB < demand.ram_gib:
        return None
    cores = tuple(sorted(pool.free_cores)[: demand.cores])
    grant = Grant(gpus, demand.vram_gib if demand.share_gpu else 0.0, cores, demand.ram_gib)
    return grant, _take(pool, grant)


def demand_of(needs: Needs, on_gpu: bool) -> Demand:
    """What a job (or a queue's most demanding job) with ``needs`` reserves; ``on_gpu``: it
    runs in a CUDA tier (a prefer_cuda job takes GPUs only there)."""
    gpus = max(1, needs.gpus) if on_gpu else 0
    return Demand(
        gpus=gpus,
        vram_gib=float(needs.min_vram_gib) if gpus else 0.0,
        share_gpu=bool(needs.share_gpu and gpus == 1),
        cores=max(DEFAULT_JOB_CORES, int(needs.min_cores)),
        ram_gib=float(needs.min_ram_gib),
    )


def fits(pool: Pool, demand: Demand) -> bool:
    return admit(pool, demand) is not None


def _take(pool: Pool, grant: Grant) -> Pool:
    devices = tuple(_held(d, grant, +1) if d.index in grant.gpus else d for d in pool.devices)
    return replace(
        pool,
        devices=devices,
        free_cores=pool.free_cores - set(grant.cores),
        free_ram_gib=pool.free_ram_gib - grant.ram_gib,
    )


def release(pool: Pool, grant: Grant) -> Pool:
    """The pool with ``grant`` given back."""
    devices = tuple(_held(d, grant, -1) if d.index in grant.gpus else d for d in pool.devices)
    return replace(
        pool,
        devices=devices,
        free_cores=pool.free_cores | set(grant.cores),
        free_ram_gib=min(pool.total_ram_gib, pool.free_ram_gib + grant.ram_gib),
    )


def _held(device: Device, grant: Grant, sign: int) -> Device:
    if grant.shared_gib > 0:
        return replace(device, shared_gib=max(0.0, device.shared_gib + sign * grant.shared_gib))
    return replace(device, whole=sign > 0)


def lacking(pool: Pool, demand: Demand) -> str | None:
    """None when ``demand`` fits now; else what it lacks, in words (``fleet why``)."""
    if fits(pool, demand):
        return None
    if demand.gpus and _gpus(pool, demand) is None:
        if demand.share_gpu:
            best = max((d.room() for d in pool.devices), default=0.0)
            return (
                f"needs {demand.vram_gib:g} GiB of VRAM on one GPU to share; "
                f"most room left is {best:g} GiB"
            )
        free = sum(
            1 for d in pool.devices if d.idle and d.vram_gib + EPSILON_GIB >= demand.vram_gib
        )
        vram = f" with >= {demand.vram_gib:g} GiB" if demand.vram_gib > 0 else ""
        return f"needs {demand.gpus} free GPU{'s' if demand.gpus > 1 else ''}{vram}; {free} free"
    kept_cores, kept_ram = pool.held_back() if demand.gpus == 0 else (0, 0.0)
    if len(pool.free_cores) - kept_cores < demand.cores:
        free = len(pool.free_cores)
        if not kept_cores:
            return f"needs {demand.cores} free cores; {free} free"
        # the figure that decides first: "2 free (1 kept)" left the reader to subtract
        return (
            f"needs {demand.cores} free cores; {max(0, free - kept_cores)} free for CPU jobs "
            f"({free} free, {kept_cores} kept for idle GPUs)"
        )
    free_ram = pool.free_ram_gib
    if not kept_ram:
        return f"needs {demand.ram_gib:g} GiB free RAM; {free_ram:g} GiB free"
    return (
        f"needs {demand.ram_gib:g} GiB free RAM; "
        f"{max(0.0, free_ram - kept_ram):g} GiB free for CPU jobs "
        f"({free_ram:g} GiB free, {kept_ram:g} GiB kept for idle GPUs)"
    )
