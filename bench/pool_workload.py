"""The multi-resource workload of bench/schedule.py (``--pools``): hosts as pools, a mixed
job mix, its manifest, and the figures measured from a real run.

Pure: no broker and no processes. schedule.py starts one worker per ``POOL_HOSTS`` entry
with ``capability(host)`` as its FLEET_CAPABILITY, publishes ``manifest_text(...)``, and
hands the job records to ``measure``, which compares fleet's makespan with
``bench.pool_oracle.greedy`` fed the times the jobs really took, and sums capable-idle
GPU-seconds and core-seconds (``bench.pool_oracle.capable_idle``).
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bench.pool_oracle import PoolHost, PoolJob, PoolRun, capable_idle, greedy, makespan
from manifest.schema import Needs
from routing.pool import Demand, demand_of

POOL_HOSTS = (
    PoolHost("gpu4", gpus=(80.0,) * 4, cores=32, ram_gib=256.0),
    PoolHost("gpu2", gpus=(48.0,) * 2, cores=16, ram_gib=128.0),
    PoolHost("gpu1", gpus=(24.0,), cores=8, ram_gib=64.0),
    PoolHost("cpu64", gpus=(), cores=64, ram_gib=256.0),
)


@dataclass(frozen=True)
class Kind:
    """One experiment of a workload: its needs, its share of the jobs, its sleep range (s)."""

    name: str
    needs: Needs
    weight: float
    seconds: tuple[float, float]


# gpus4 fits only gpu4; gpus2 (>= 40 GiB) only gpu4 and gpu2; gpu1 any GPU host; the sharing
# jobs pack several to a device; cpu16 fits cpu64 and (beside idle-GPU reserves) gpu4.
POOL_KINDS = (
    Kind(
        "gpus4",
        Needs(require_cuda=True, gpus=4, min_vram_gib=40, min_cores=8, min_ram_gib=32),
        0.6,
        (6, 12),
    ),
    Kind(
        "gpus2",
        Needs(require_cuda=True, gpus=2, min_vram_gib=40, min_cores=4, min_ram_gib=16),
        1.0,
        (4, 9),
    ),
    Kind(
        "gpu1", Needs(require_cuda=True, min_vram_gib=16, min_cores=2, min_ram_gib=8), 1.5, (2, 6)
    ),
    Kind(
        "share",
        Needs(require_cuda=True, share_gpu=True, min_vram_gib=8, min_cores=1, min_ram_gib=4),
        1.5,
        (2, 5),
    ),
    Kind("cpu16", Needs(min_cores=16, min_ram_gib=16), 1.0, (3, 8)),
    Kind("cpu4", Needs(min_cores=4, min_ram_gib=4), 1.5, (1, 4)),
)


@dataclass(frozen=True)
class PlannedJob:
    """One job of a seed's workload: its kind, its name, how long it sleeps, what it needs."""

    kind: str
    name: str
    duration_s: float
    needs: Needs

    @property
    def demand(self) -> Demand:
        return demand_of(self.needs, on_gpu=self.needs.require_cuda)


def capability(host: PoolHost) -> dict:
    """FLEET_CAPABILITY for a simulated host (``fleet.local.start_worker`` adds the hostname)."""
    devices = [{"name": f"sim-{v:g}GB", "vram_total_gib": v} for v in host.gpus]
    return {
        "cuda_devices": devices,
        "cpu_cores": host.cores,
        "ram_total_gib": host.ram_gib,
        "ram_available_gib": host.ram_gib,
    }


def workload(seed: int, n: int, kinds: Sequence[Kind] = POOL_KINDS) -> list[PlannedJob]:
    """``n`` jobs in publish order: one block per kind, blocks in a seeded random order."""
    rng = random.Random(seed)
    picked = rng.choices(kinds, weights=[k.weight for k in kinds], k=n)
    order = list(kinds)
    rng.shuffle(order)
    out = []
    for kind in order:
        for i in range(sum(k is kind for k in picked)):
            out.append(
                PlannedJob(
                    kind.name, f"{kind.name}-{i}", round(rng.uniform(*kind.seconds), 1), kind.needs
                )
            )
    return out


def _needs_lines(needs: Needs) -> str:
    pairs = (
        ("require_cuda", needs.require_cuda),
        ("gpus", needs.gpus),
        ("share_gpu", needs.share_gpu),
        ("min_vram_gib", needs.min_vram_gib),
        ("min_cores", needs.min_cores),
        ("min_ram_gib", needs.min_ram_gib),
    )
    return "".join(f"{k} = {json.dumps(v)}\n" for k, v in pairs if v)


def manifest_text(jobs: Sequence[PlannedJob], seed: int) -> str:
    """The workload as a user would write it: one ``[[jobs]]`` block per job, a seed each."""
    return "\n".join(
        f'[[jobs]]\nname = "{j.name}"\ncommand = ["sleep", "{j.duration_s}"]\n'
        f"seed = {seed * 1000 + i}\n{_needs_lines(j.needs)}"
        for i, j in enumerate(jobs)
    )


@dataclass(frozen=True)
class Times:
    """A job record's facts that the figures need."""

    host: str
    queued: float
    started: float
    finished: float


@dataclass(frozen=True)
class PoolFigures:
    """One seed's result: fleet's makespan, the oracle's on the same run times, capable-idle."""

    seed: int
    fleet_s: float  # publish called -> last job finished
    publish_s: (
        float  # publish called -> first job queued (publish waits for hosts to consume new queues)
    )
    oracle_s: float
    oracle_nominal_s: float
    idle: Mapping[str, tuple[float, float]]  # host -> (GPU-seconds, core-seconds)
    runs: tuple[PoolRun, ...]

    @property
    def ratio(self) -> float:
        """oracle / makespan: 1.0 is as good as the oracle (the aim is >= 0.95)."""
        return self.oracle_s / self.fleet_s

    @property
    def idle_gpu_s(self) -> float:
        return sum(g for g, _ in self.idle.values())

    @property
    def idle_core_s(self) -> float:
        return sum(c for _, c in self.idle.values())


def measure(
    seed: int,
    jobs: Sequence[PlannedJob],
    times: Mapping[str, Times],
    published_at: float,
    hosts: Sequence[PoolHost] = POOL_HOSTS,
) -> PoolFigures:
    """Figures for one seed from each job's ``Times`` (by job name) and the publish time."""
    runs = tuple(
        PoolRun(
            j.name,
            times[j.name].host,
            times[j.name].queued,
            times[j.name].started,
            times[j.name].finished,
            j.demand,
        )
        for j in jobs
    )
    measured = [PoolJob(r.job, r.finished - r.started, r.demand) for r in runs]
    nominal = [PoolJob(j.name, j.duration_s, j.demand) for j in jobs]
    fleet_s = max(r.finished for r in runs) - published_at
    publish_s = min(r.queued for r in runs) - published_at
    return PoolFigures(
        seed,
        fleet_s,
        publish_s,
        makespan(greedy(measured, hosts)),
        makespan(greedy(nominal, hosts)),
        capable_idle(runs, hosts),
        runs,
    )


def report_lines(
    fig: PoolFigures, jobs: Sequence[PlannedJob], hosts: Sequence[PoolHost] = POOL_HOSTS
) -> list[str]:
    """One seed's figures as text: per host, then makespan against the oracle."""
    kinds: dict[str, int] = {}
    for j in jobs:
        kinds[j.kind] = kinds.get(j.kind, 0) + 1
    lines = [
        f"seed {fig.seed}: {len(jobs)} jobs, {sum(j.duration_s for j in jobs):.0f} s of sleep "
        f"({', '.join(f'{k} {v}' for k, v in kinds.items())}, in publish order)",
        f"  {'host':6s} {'jobs':>4s} {'busy s':>7s} {'idle GPU-s':>10s} {'idle core-s':>11s}  ran",
    ]
    kind_of = {j.name: j.kind for j in jobs}
    for h in hosts:
        mine = [r for r in fig.runs if r.host == h.name]
        ran: dict[str, int] = {}
        for r in mine:
            ran[kind_of[r.job]] = ran.get(kind_of[r.job], 0) + 1
        gpu_s, core_s = fig.idle.get(h.name, (0.0, 0.0))
        ran_text = ", ".join(f"{k} {v}" for k, v in sorted(ran.items())) or "-"
        lines.append(
            f"  {h.name:6s} {len(mine):4d} {sum(r.finished - r.started for r in mine):7.1f} "
            f"{gpu_s:10.1f} {core_s:11.1f}  {ran_text}"
        )
    lines.append(
        f"  makespan: fleet {fig.fleet_s:.1f} s (of which publish {fig.publish_s:.1f} s); "
        f"oracle {fig.oracle_s:.1f} s on measured run times "
        f"({fig.oracle_nominal_s:.1f} s on nominal sleeps); oracle/makespan = {fig.ratio:.2f}; "
        f"capable-idle {fig.idle_gpu_s:.1f} GPU-s, {fig.idle_core_s:.0f} core-s"
    )
    return lines


def summary_lines(figs: Sequence[PoolFigures]) -> list[str]:
    """The per-seed table: makespan, oracle, their ratio, capable-idle GPU-s and core-s."""
    lines = ["seed   makespan  publish  oracle  oracle/makespan  idle GPU-s  idle core-s"]
    lines += [
        f"{f.seed:<6d} {f.fleet_s:8.1f} {f.publish_s:8.1f} {f.oracle_s:7.1f} {f.ratio:16.2f} "
        f"{f.idle_gpu_s:11.1f} {f.idle_core_s:12.0f}"
        for f in figs
    ]
    return lines
