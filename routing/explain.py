"""Why a job waits: for each host, "could run it" or the exact reason it cannot.

Pure (like `condor_q -better-analyze`, over values): the job, the queue it sits in, the
tiers, host policies and need/constraint queues as published, and what each live host
says about itself. `fleet why` and publish's feasibility check feed it from Redis.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace

from core.constants import QUEUE_REFRESH_EVERY_S
from manifest.schema import HostPolicy, Needs, TierSpec
from routing.capability import Capability
from routing.pool import Demand, Pool, fits, lacking
from routing.tiers import Constraint, qualifies

BUSY_NAMES_SHOWN = 3  # "busy with a, b, c and 2 more"


@dataclass(frozen=True)
class HostFacts:
    """A live host as its heartbeat describes it; ``capability`` with policy caps applied."""

    capability: Capability
    queues: tuple[str, ...] | None = None  # what it consumes now (None: not known, e.g. at publish)
    asked: tuple[str, ...] = ()  # its -Q

    @property
    def hostname(self) -> str:
        return self.capability.hostname


@dataclass(frozen=True)
class QueueFacts:
    """A queue: its tier, what a host must have to take from it, and its host constraint."""

    name: str
    tier: str
    needs: Needs
    constraint: Constraint | None = None
    known: bool = True  # False: the current config has no such queue (published under older tiers)

    def to_dict(self) -> dict:
        return {
            "queue": self.name,
            "tier": self.tier,
            "needs": asdict(self.needs),
            "known": self.known,
            "allowed_hosts": None
            if self.constraint is None or self.constraint.allowed is None
            else sorted(self.constraint.allowed),
            "denied_hosts": [] if self.constraint is None else sorted(self.constraint.denied),
        }


@dataclass(frozen=True)
class Verdict:
    hostname: str
    ok: bool
    reasons: tuple[str, ...]  # empty when ok
    gap: float = 0.0  # how far off: the sum of relative shortfalls (see ``gap``)

    def to_dict(self) -> dict:
        return {"host": self.hostname, "could_run": self.ok, "reasons": list(self.reasons)}


def queue_facts(
    queue: str,
    tiers: Iterable[TierSpec],
    constraint_queues: dict[str, tuple[str, Constraint]] | None,
) -> QueueFacts:
    """What ``queue`` asks of a host, from the published tiers and need/constraint queues."""
    floors = {t.name: t.floor for t in tiers}
    if queue in (constraint_queues or {}):
        tier, c = constraint_queues[queue]
        return QueueFacts(
            queue,
            tier,
            c.needs if c.needs is not None else floors.get(tier, Needs()),
            c,
            known=tier in floors,
        )
    tier = queue.split(".")[0]
    return QueueFacts(queue, tier, floors.get(tier, Needs()), None, known=queue in floors)


def shortfall(cap: Capability, needs: Needs) -> list[str]:
    """Each way ``cap`` falls short of ``needs``, tersely: 'VRAM 16 < 24 GiB'."""
    out = []
    if needs.require_cuda and not cap.cuda_devices:
        out.append("no CUDA device")
    elif needs.require_cuda and cap.max_vram_gib < needs.min_vram_gib:
        out.append(f"VRAM {cap.max_vram_gib:g} < {needs.min_vram_gib:g} GiB (largest device)")
    elif needs.require_cuda and fitting_gpus(cap, needs) < needs.gpu_count:
        each = f" (>= {needs.min_vram_gib:g} GiB each)" if needs.min_vram_gib else ""
        out.append(f"GPUs {fitting_gpus(cap, needs)} < {needs.gpu_count}{each}")
    if cap.ram_total_gib < needs.min_ram_gib:
        out.append(f"RAM {round(cap.ram_total_gib, 1):g} < {needs.min_ram_gib:g} GiB")
    if cap.cpu_cores < needs.min_cores:
        out.append(f"cores {cap.cpu_cores} < {needs.min_cores}")
    return out


def fitting_gpus(cap: Capability, needs: Needs) -> int:
    """The host's GPUs with at least the VRAM ``needs`` asks of each."""
    return sum(d.vram_total_gib >= needs.min_vram_gib for d in cap.cuda_devices)


def gap(cap: Capability, needs: Needs) -> float:
    """How far ``cap`` is from ``needs``: each resource's missing fraction, 1 for no CUDA."""

    def short(have: float, need: float) -> float:
        return max(0.0, need - have) / need if need > 0 else 0.0

    g = 0.0
    if needs.require_cuda and not cap.cuda_devices:
        g += 1.0
    elif needs.require_cuda:
        vram = short(cap.max_vram_gib, needs.min_vram_gib)
        # too few GPUs counts on top of too little VRAM, not twice for it
        count = fitting_gpus(cap, needs) if vram == 0 else len(cap.cuda_devices)
        g += vram + short(count, needs.gpu_count)
    return g + short(cap.ram_total_gib, needs.min_ram_gib) + short(cap.cpu_cores, needs.min_cores)


def policy_reasons(
    hostname: str, q: QueueFacts, model: str | None, policy: HostPolicy | None
) -> list[str]:
    """Reasons from host policies and the job's host constraint."""
    out = []
    if policy is not None and policy.tiers is not None and q.tier not in policy.tiers:
        out.append(f"[hosts.{hostname}] tiers = {list(policy.tiers)} leaves out {q.tier}")
    c = q.constraint
    if c is None:
        return out
    if hostname in c.denied:
        if policy is not None and model is not None and model in policy.deny_models:
            out.append(f"denied model {model} ([hosts.{hostname}] deny_models)")
        elif policy is not None and model is not None and not policy.allows_model(model):
            out.append(f"model {model} not in [hosts.{hostname}] allow_models")
        else:
            out.append("in the job's denied_hosts")
    elif c.allowed is not None and hostname not in c.allowed:
        out.append("not in allowed_hosts")
    return out


def verdict(
    host: HostFacts, q: QueueFacts, model: str | None, policy: HostPolicy | None
) -> Verdict:
    """Could ``host`` take jobs from ``q``? A host already consuming it can, whatever the
    config now says; one that qualifies but does not consume it yet is told why. With
    ``host.queues`` unknown (at publish, before workers look), capability and policy decide."""
    if host.queues is not None and q.name in host.queues:
        return Verdict(host.hostname, True, ())
    reasons = shortfall(host.capability, q.needs) + policy_reasons(host.hostname, q, model, policy)
    if host.asked and q.tier not in host.asked:
        reasons.append(f"started with -Q {','.join(host.asked)}")
    if host.queues is not None and not reasons:
        reasons.append(
            f"has not picked this queue up yet (workers look every {QUEUE_REFRESH_EVERY_S:g} s)"
        )
    policy_count = len(reasons) - len(shortfall(host.capability, q.needs))
    return Verdict(
        host.hostname, not reasons, tuple(reasons), gap(host.capability, q.needs) + policy_count
    )


def explain(
    q: QueueFacts, model: str | None, hosts: Iterable[HostFacts], policies: dict[str, HostPolicy]
) -> list[Verdict]:
    """A verdict per host: those that could run it first, then by name."""
    out = [verdict(h, q, model, policies.get(h.hostname)) for h in hosts]
    return sorted(out, key=lambda v: (not v.ok, v.hostname))


def nearest(verdicts: Iterable[Verdict]) -> Verdict | None:
    """The host closest to running it: the smallest gap (then by name); None if no host."""
    return min(verdicts, key=lambda v: (v.gap, v.hostname), default=None)


def _most(caps: list[Capability], have, unit: str = "", word: str = "most") -> str:
    best = max(sorted(caps, key=lambda c: c.hostname), key=have)  # ties: the first by name
    return f"({word}: {have(best):g}{unit} on {best.hostname})"


def fleet_lacks(needs: Needs, caps: Iterable[Capability]) -> str | None:
    """What no live host has, when one need alone rules every host out ("no live host has 4
    GPUs with >= 24 GiB (most: 2 on big2)"); None when each need is met by some host (or no
    host is live: that is said elsewhere). Needs are tried one at a time, CUDA first."""
    caps = list(caps)
    if not caps:
        return None
    vram = needs.min_vram_gib if needs.require_cuda else 0.0
    each = f" with >= {vram:g} GiB" if vram else ""
    n = needs.gpu_count
    checks = (
        (Needs(require_cuda=needs.require_cuda), "a CUDA device", None),
        (
            Needs(needs.require_cuda, vram),
            f"a GPU{each}",
            _most(caps, lambda c: c.max_vram_gib, " GiB", "largest"),
        ),
        (
            Needs(needs.require_cuda, vram, gpus=n if n > 1 else 0),
            f"{n} GPUs{each}",
            _most(caps, lambda c: fitting_gpus(c, needs)),
        ),
        (
            Needs(min_ram_gib=needs.min_ram_gib),
            f"{needs.min_ram_gib:g} GiB RAM",
            _most(caps, lambda c: round(c.ram_total_gib, 1), " GiB"),
        ),
        (
            Needs(min_cores=needs.min_cores),
            f"{needs.min_cores} cores",
            _most(caps, lambda c: c.cpu_cores),
        ),
    )
    for one, what, most in checks:
        if all(qualifies(c, one) is not None for c in caps):
            return f"no live host has {what}" + (f" {most}" if most else "")
    return None


@dataclass(frozen=True)
class Holding:
    """A job a host runs (by name) and what it holds there."""

    name: str
    gpus: tuple[int, ...] = ()
    cores: int = 0
    ram_gib: float = 0.0


def waits_for(
    hostname: str, pool: Pool, demand: Demand, holding: Iterable[Holding] = ()
) -> str | None:
    """None when ``demand`` starts on this host now; else what it lacks there and which jobs
    hold that: "needs 2 free GPUs with >= 24 GiB: big4 has 1 free, busy with a, b"."""
    lack = lacking(pool, demand)
    if lack is None:
        return None
    head, _, tail = lack.partition("; ")
    short_of_gpus = demand.gpus and not fits(pool, replace(demand, cores=0, ram_gib=0.0))
    short_of_cores = not short_of_gpus and not fits(pool, replace(demand, ram_gib=0.0))
    holders = [
        h.name
        for h in holding
        if (h.gpus if short_of_gpus else h.cores if short_of_cores else h.ram_gib)
    ]
    where = f"{hostname} has {tail}" if tail[:1].isdigit() else f"on {hostname}, {tail}"
    return f"{head}: {where}" + (f", busy with {_names(holders)}" if holders else "")


def _names(names: list[str]) -> str:
    more = len(names) - BUSY_NAMES_SHOWN
    return ", ".join(names[:BUSY_NAMES_SHOWN]) + (f" and {more} more" if more > 0 else "")
