"""Pure routing decisions: job -> queue, and capability + policy -> queues a host serves.

No broker import: every function here is a table-testable function of values.

Host constraints (``allowed_hosts``, ``denied_hosts``, and a host's ``allow_models`` /
``deny_models``) are carried by *constraint queues*: a job with a constraint goes to
``<tier>.<digest>`` instead of ``<tier>``, and publish records the constraint of that queue
in Redis. A worker consumes a constraint queue only when its hostname satisfies it, so an
excluded host never even receives the message. Tier queues keep their exact names.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from typing import Iterable

from manifest.schema import HostPolicy, JobSpec, Needs, TierSpec
from routing.capability import Capability

# Floors of the default tiers, documented in the README. RAM floors are modest on
# purpose: they keep a 4 GiB laptop off GPU work without excluding home machines, and sit
# under the nominal sizes because a "16 GB" machine reports about 15.5 GiB to the OS.
DEFAULT_TIERS: tuple[TierSpec, ...] = (
    TierSpec("cuda-large", Needs(require_cuda=True, min_vram_gib=24, min_ram_gib=14)),
    TierSpec("cuda", Needs(require_cuda=True, min_vram_gib=8, min_ram_gib=7)),
    TierSpec("cpu", Needs(require_cuda=False, min_ram_gib=2, min_cores=1)),
)


def demand(floor: Needs) -> tuple:
    """Sort key: a larger tuple is a more demanding floor."""
    return (floor.require_cuda, floor.min_vram_gib, floor.min_ram_gib, floor.min_cores)


def ordered(tiers: Iterable[TierSpec]) -> tuple[TierSpec, ...]:
    """Tiers, most demanding first (ties keep manifest order)."""
    return tuple(sorted(tiers, key=lambda t: demand(t.floor), reverse=True))


def guarantees(floor: Needs, needs: Needs) -> bool:
    """True when every host meeting ``floor`` is sure to meet ``needs``."""
    if needs.require_cuda and not floor.require_cuda:
        return False
    if needs.min_vram_gib > 0 and not (floor.require_cuda and floor.min_vram_gib >= needs.min_vram_gib):
        return False
    return floor.min_ram_gib >= needs.min_ram_gib and floor.min_cores >= needs.min_cores


def tier_for(needs: Needs, tiers: Iterable[TierSpec]) -> TierSpec | None:
    """The least demanding tier whose floor guarantees every need, or None."""
    for tier in reversed(ordered(tiers)):
        if guarantees(tier.floor, needs):
            return tier
    return None


@dataclass(frozen=True)
class Route:
    """Where a job is published: its queue, and for prefer_cuda its CPU fallback queue."""

    tier: str
    queue: str
    fallback_tier: str | None = None
    fallback_queue: str | None = None
    constraint: "Constraint | None" = None
    fallback_constraint: "Constraint | None" = None


@dataclass(frozen=True)
class Constraint:
    """Which hosts may run a job: ``allowed`` None means any host not denied."""

    allowed: frozenset[str] | None
    denied: frozenset[str]

    def admits(self, hostname: str) -> bool:
        if hostname in self.denied:
            return False
        return self.allowed is None or hostname in self.allowed

    def to_dict(self) -> dict:
        return {"allowed": None if self.allowed is None else sorted(self.allowed),
                "denied": sorted(self.denied)}

    @classmethod
    def from_dict(cls, d: dict) -> "Constraint":
        allowed = d.get("allowed")
        return cls(None if allowed is None else frozenset(allowed), frozenset(d.get("denied", ())))

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:10]


def constraint_for(job: JobSpec, hosts: dict[str, HostPolicy], tier: str | None = None) -> Constraint | None:
    """The job's host constraint, folding in host policies that refuse its model.

    A host whose policy does not serve ``tier`` never sees the tier's queues, so its
    model policy does not need a constraint queue there.
    """
    denied = set(job.denied_hosts)
    denied.update(name for name, pol in hosts.items() if not pol.allows_model(job.kind)
                  and (tier is None or pol.tiers is None or tier in pol.tiers))
    allowed = frozenset(job.allowed_hosts) if job.allowed_hosts else None
    if allowed is None and not denied:
        return None
    return Constraint(allowed, frozenset(denied))


def queue_name(tier: str, constraint: Constraint | None) -> str:
    return tier if constraint is None else f"{tier}.{constraint.digest()}"


def route(job: JobSpec, tiers: Iterable[TierSpec], hosts: dict[str, HostPolicy]) -> Route | None:
    """Where ``job`` goes; None when no tier guarantees its needs."""
    tiers = tuple(tiers)
    needs = job.needs
    if job.prefer_cuda and not needs.require_cuda:
        needs = replace(needs, min_vram_gib=0)   # VRAM matters on its GPU tier only
    base = tier_for(needs, tiers)
    if base is None:
        return None
    if job.prefer_cuda and not job.needs.require_cuda:
        cuda_needs = Needs(True, job.needs.min_vram_gib, job.needs.min_ram_gib, job.needs.min_cores)
        preferred = tier_for(cuda_needs, tiers)
        if preferred is not None and preferred.name != base.name:
            c = constraint_for(job, hosts, preferred.name)
            fc = constraint_for(job, hosts, base.name)
            return Route(preferred.name, queue_name(preferred.name, c),
                         base.name, queue_name(base.name, fc), c, fc)
    c = constraint_for(job, hosts, base.name)
    return Route(base.name, queue_name(base.name, c), constraint=c)


def qualifies(cap: Capability, floor: Needs) -> str | None:
    """None when ``cap`` meets ``floor``; otherwise the reason it does not."""
    if floor.require_cuda and not cap.cuda_devices:
        return "needs a CUDA device; this host has none"
    if floor.require_cuda and cap.max_vram_gib < floor.min_vram_gib:
        return f"needs {floor.min_vram_gib:g} GiB VRAM on one device; largest here is {cap.max_vram_gib:g} GiB"
    if cap.ram_total_gib < floor.min_ram_gib:
        return f"needs {floor.min_ram_gib:g} GiB RAM; this host has {cap.ram_total_gib:.1f} GiB"
    if cap.cpu_cores < floor.min_cores:
        return f"needs {floor.min_cores} cores; this host has {cap.cpu_cores}"
    return None


def host_tiers(cap: Capability, tiers: Iterable[TierSpec], policy: HostPolicy | None) -> dict[str, str | None]:
    """Every tier (most demanding first) -> None if the host serves it, else why not."""
    out: dict[str, str | None] = {}
    for tier in ordered(tiers):
        reason = qualifies(cap, tier.floor)
        if reason is None and policy is not None and policy.tiers is not None and tier.name not in policy.tiers:
            reason = f"[hosts.{policy.name}] tiers does not list it"
        out[tier.name] = reason
    return out


def host_queues(cap: Capability, tiers: Iterable[TierSpec], policy: HostPolicy | None,
                constraint_queues: dict[str, tuple[str, Constraint]] | None = None) -> list[str]:
    """Queues this host consumes, most demanding first.

    ``constraint_queues`` maps a constraint queue name to (tier, constraint); those the
    host's name satisfies come just before their tier's own queue.
    """
    served = [t for t, why in host_tiers(cap, tiers, policy).items() if why is None]
    out: list[str] = []
    for tier in served:
        extra = sorted(q for q, (t, c) in (constraint_queues or {}).items()
                       if t == tier and c.admits(cap.hostname))
        out.extend(extra)
        out.append(tier)
    return out
