"""Pure scheduling yardsticks for bench/schedule.py: an offline greedy oracle, the capacity
lower bound, and capable-idle time measured from what a fleet really did.

No broker, no processes: hosts and jobs are values, times are seconds. "Can run" is the
hardware question a worker asks itself (``routing.tiers.qualifies`` on the job's needs),
not the tier routing fleet uses: the gap between the two is what capable-idle measures.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from manifest.schema import Needs
from routing.capability import Capability, CudaDevice
from routing.tiers import qualifies

Interval = tuple[float, float]


@dataclass(frozen=True)
class Host:
    """One simulated host with one job slot."""

    name: str
    vram_gib: float = 0.0  # its one GPU's VRAM; 0: no GPU
    ram_gib: float = 8.0
    cores: int = 4

    def capability(self) -> Capability:
        gpus = (
            (CudaDevice(0, f"sim-{self.vram_gib:g}GB", self.vram_gib, self.vram_gib),)
            if self.vram_gib
            else ()
        )
        return Capability(self.name, self.cores, self.ram_gib, self.ram_gib, gpus)

    def rank(self) -> tuple:
        """Smaller is less capable: the oracle keeps big hosts free for jobs only they can run."""
        return (self.vram_gib, self.ram_gib, self.cores, self.name)

    def can_run(self, needs: Needs) -> bool:
        return qualifies(self.capability(), needs) is None


@dataclass(frozen=True)
class Job:
    name: str
    duration_s: float
    needs: Needs


@dataclass(frozen=True)
class Placement:
    job: str
    host: str
    start: float
    end: float


def capable_hosts(needs: Needs, hosts: Iterable[Host]) -> frozenset[str]:
    return frozenset(h.name for h in hosts if h.can_run(needs))


def greedy(jobs: Sequence[Job], hosts: Sequence[Host]) -> list[Placement]:
    """Longest job first, each onto the capable host free soonest; ties go to the least
    capable host, so big hosts stay free for jobs only they can run (offline: every job
    is known at time 0, and a host's slot is its only resource)."""
    free_at = {h.name: 0.0 for h in hosts}
    out = []
    for job in sorted(jobs, key=lambda j: (-j.duration_s, j.name)):
        fit = [h for h in hosts if h.can_run(job.needs)]
        if not fit:
            raise ValueError(f"no host can run {job.name}")
        host = min(fit, key=lambda h: (free_at[h.name], h.rank()))
        start = free_at[host.name]
        free_at[host.name] = start + job.duration_s
        out.append(Placement(job.name, host.name, start, start + job.duration_s))
    return out


def makespan(placements: Iterable[Placement]) -> float:
    return max((p.end for p in placements), default=0.0)


def lower_bound(jobs: Sequence[Job], hosts: Sequence[Host]) -> float:
    """No schedule is shorter: the longest job, and for every set of hosts that is some
    job's capable set, the work that can run only inside it spread evenly over it."""
    capable = {j.name: capable_hosts(j.needs, hosts) for j in jobs}
    bound = max((j.duration_s for j in jobs), default=0.0)
    for hosts_set in set(capable.values()):
        work = sum(j.duration_s for j in jobs if capable[j.name] <= hosts_set)
        bound = max(bound, work / len(hosts_set))
    return bound


@dataclass(frozen=True)
class Run:
    """What one job did in a real fleet: when it was queued, started and finished, where."""

    job: str
    host: str
    queued: float
    started: float
    finished: float
    capable: frozenset[str]  # hosts whose hardware could have run it


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint union of ``intervals`` (empty ones dropped)."""
    out: list[list[float]] = []
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def minus(intervals: Sequence[Interval], holes: Sequence[Interval]) -> list[Interval]:
    """``intervals`` with ``holes`` cut out (both merged first)."""
    out = []
    holes = merge(holes)
    for a, b in merge(intervals):
        for h0, h1 in holes:
            if h1 <= a or h0 >= b:
                continue
            if h0 > a:
                out.append((a, h0))
            a = max(a, h1)
            if a >= b:
                break
        if a < b:
            out.append((a, b))
    return out


def length(intervals: Iterable[Interval]) -> float:
    return sum(b - a for a, b in merge(intervals))


def capable_idle(runs: Sequence[Run], hosts: Iterable[str]) -> dict[str, float]:
    """Per host, the seconds it ran nothing while a job it could run was waiting.

    A job waits from being queued until it starts; a host is busy while it runs a job.
    """
    out = {}
    for host in hosts:
        waiting = [(r.queued, r.started) for r in runs if host in r.capable]
        busy = [(r.started, r.finished) for r in runs if r.host == host]
        out[host] = length(minus(waiting, busy))
    return out
