"""Pure routing decisions: job -> queue, and capability + policy -> queues a host serves.

No broker import: every function here is a table-testable function of values.

Host constraints (``allowed_hosts``, ``denied_hosts``, and a host's ``allow_models`` /
``deny_models``) are carried by *constraint queues*: a job with a constraint goes to
``<tier>.<digest>`` instead of ``<tier>``, and publish records the constraint of that queue
in Redis. A worker consumes a constraint queue only when its hostname satisfies it, so an
excluded host never even receives the message. Tier queues keep their exact names.

*Need queues* carry needs the tier's floor does not guarantee (VRAM, RAM, cores): a job
needing 10 GiB of VRAM goes to ``cuda.vram10``, which every host serving ``cuda`` with a
10 GiB device consumes, instead of waiting for a ``cuda-large`` host. They use the same
mechanism: the queue's constraint carries the job's effective needs, and a queue with both
needs and host constraints is named ``<tier>.<needs>.<digest>``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import lru_cache

# DEFAULT_TIERS, demand and ordered are model (manifest.schema); routing's callers get them here too
from manifest.schema import DEFAULT_TIERS, HostPolicy, JobSpec, Needs, TierSpec, demand, ordered  # noqa: F401
from routing.capability import Capability


def guarantees(floor: Needs, needs: Needs) -> bool:
    """True when every host meeting ``floor`` is sure to meet ``needs``."""
    if needs.require_cuda and not floor.require_cuda:
        return False
    if needs.min_vram_gib > 0 and not (
        floor.require_cuda and floor.min_vram_gib >= needs.min_vram_gib
    ):
        return False
    if needs.gpu_count > floor.gpu_count or (needs.share_gpu and not floor.share_gpu):
        return (
            False  # a sharing job waits in a queue of its own: its hosts need room, not a free GPU
        )
    return floor.min_ram_gib >= needs.min_ram_gib and floor.min_cores >= needs.min_cores


def _cuda(needs: Needs) -> bool:
    return needs.require_cuda or needs.min_vram_gib > 0


def at_least(floor: Needs, needs: Needs) -> Needs:
    """Needs raised to ``floor``: what a host must have to run the job in that tier."""
    cuda = floor.require_cuda or _cuda(needs)
    # a sharing job's VRAM is its budget on a device its tier's hosts have anyway: not raised
    vram = needs.min_vram_gib if needs.share_gpu else max(floor.min_vram_gib, needs.min_vram_gib)
    return Needs(
        cuda,
        float(vram) if cuda else 0.0,
        float(max(floor.min_ram_gib, needs.min_ram_gib)),
        int(max(floor.min_cores, needs.min_cores)),
        max(floor.gpus, needs.gpus) if cuda and max(floor.gpus, needs.gpus) > 1 else 0,
        needs.share_gpu and cuda,
    )


def _states_floor(floor: Needs, needs: Needs) -> bool:
    """The floor guarantees ``needs`` and is exactly what the job states: every need it
    gives (non-zero) equals the floor's; those it leaves out take the floor."""
    if not guarantees(floor, needs):
        return False
    stated = (
        (needs.min_vram_gib, floor.min_vram_gib),
        (needs.min_ram_gib, floor.min_ram_gib),
        (needs.min_cores, floor.min_cores),
        (needs.gpus, floor.gpus),
    )
    return all(n == f for n, f in stated if n)


def place(needs: Needs, tiers: Iterable[TierSpec]) -> tuple[TierSpec, Needs] | None:
    """The tier a job goes to, and its needs raised to that tier's floor; None if none fits.

    A job stays with tiers of its kind (CUDA or not; a CPU job goes to a GPU tier only when
    there is no other). A tier whose floor is exactly what the job states takes it on its
    plain queue (``min_vram_gib = 24`` -> ``cuda-large``). Otherwise the job goes to the tier
    under which its raised needs are least demanding, so the most hosts can run it
    (``min_vram_gib = 10`` -> ``cuda`` with 10 GiB, not ``cuda-large``); ties go to a floor
    that guarantees the needs, then to the more demanding tier.
    """
    return _place(needs, tuple(tiers))


@lru_cache(maxsize=4096)  # a sweep routes the same few needs many times
def _place(needs: Needs, tiers: tuple[TierSpec, ...]) -> tuple[TierSpec, Needs] | None:
    tiers = ordered(tiers)
    kind = [t for t in tiers if t.floor.require_cuda == _cuda(needs)]
    if not kind and _cuda(needs):
        return None
    kind = kind or list(tiers)
    for tier in reversed(kind):
        if _states_floor(tier.floor, needs):
            return tier, tier.floor
    best = None
    for tier in kind:
        eff = at_least(tier.floor, needs)
        key = (demand(eff), eff != tier.floor)
        if best is None or key < best[0]:
            best = (key, tier, eff)
    return best[1], best[2]


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
    constraint: Constraint | None = None
    fallback_constraint: Constraint | None = None


@dataclass(frozen=True)
class Constraint:
    """Which hosts may run a job: ``allowed`` None means any host not denied."""

    allowed: frozenset[str] | None
    denied: frozenset[str]
    needs: Needs | None = None  # a need queue: what a host must have (tier floor included)

    def admits(self, hostname: str) -> bool:
        if hostname in self.denied:
            return False
        return self.allowed is None or hostname in self.allowed

    def admits_host(self, cap: Capability) -> bool:
        """The host's name is admitted and it meets the needs, if any."""
        return self.admits(cap.hostname) and (
            self.needs is None or qualifies(cap, self.needs) is None
        )

    @property
    def hosts_limited(self) -> bool:
        return self.allowed is not None or bool(self.denied)

    def to_dict(self) -> dict:
        d = {
            "allowed": None if self.allowed is None else sorted(self.allowed),
            "denied": sorted(self.denied),
        }
        if self.needs is not None:  # left out otherwise: host-only digests stay what they were
            d["needs"] = self.needs.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Constraint:
        allowed = d.get("allowed")
        needs = Needs(**d["needs"]) if d.get("needs") else None
        return cls(
            None if allowed is None else frozenset(allowed), frozenset(d.get("denied", ())), needs
        )

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:10]


def constraint_for(
    job: JobSpec, hosts: dict[str, HostPolicy], tier: str | None = None
) -> Constraint | None:
    """The job's host constraint, folding in host policies that refuse its model.

    A host whose policy does not serve ``tier`` never sees the tier's queues, so its
    model policy does not need a constraint queue there.
    """
    denied = set(job.denied_hosts)
    denied.update(
        name
        for name, pol in hosts.items()
        if not pol.allows_model(job.kind)
        and (tier is None or pol.tiers is None or tier in pol.tiers)
    )
    allowed = frozenset(job.allowed_hosts) if job.allowed_hosts else None
    if allowed is None and not denied:
        return None
    return Constraint(allowed, frozenset(denied))


def need_label(floor: Needs, needs: Needs) -> str:
    """The readable part of a need queue's name: what ``needs`` adds to ``floor``."""
    parts = []
    if needs.gpu_count > max(1, floor.gpu_count):
        parts.append(f"gpus{needs.gpu_count}")
    if needs.share_gpu and not floor.share_gpu:
        parts.append("share")
    if needs.min_vram_gib > floor.min_vram_gib or (needs.share_gpu and not floor.share_gpu):
        parts.append(f"vram{needs.min_vram_gib:g}")
    if needs.min_ram_gib > floor.min_ram_gib:
        parts.append(f"ram{needs.min_ram_gib:g}")
    if needs.min_cores > floor.min_cores:
        parts.append(f"cores{needs.min_cores}")
    return ".".join(parts)


def queue_name(tier: str, constraint: Constraint | None, floor: Needs | None = None) -> str:
    """``tier``, ``tier.<digest>`` (hosts), ``tier.vram10`` (needs) or ``tier.vram10.<digest>``."""
    if constraint is None:
        return tier
    label = need_label(floor or Needs(), constraint.needs) if constraint.needs is not None else ""
    if not label:
        return f"{tier}.{constraint.digest()}"
    return (
        f"{tier}.{label}.{constraint.digest()}" if constraint.hosts_limited else f"{tier}.{label}"
    )


def _target(
    job: JobSpec, needs: Needs, tiers: tuple[TierSpec, ...], hosts: dict[str, HostPolicy]
) -> tuple[str, str, Constraint | None] | None:
    """(tier, queue, constraint) for ``needs``: a need queue when the floor falls short."""
    placed = place(needs, tiers)
    if placed is None:
        return None
    tier, eff = placed
    c = constraint_for(job, hosts, tier.name)
    if eff != tier.floor:
        c = Constraint(c.allowed, c.denied, eff) if c else Constraint(None, frozenset(), eff)
    return tier.name, queue_name(tier.name, c, tier.floor), c


def route(job: JobSpec, tiers: Iterable[TierSpec], hosts: dict[str, HostPolicy]) -> Route | None:
    """Where ``job`` goes; None when no tier is of its kind (a CUDA job with no CUDA tier)."""
    tiers = tuple(tiers)
    needs = job.needs
    if job.prefer_cuda and not needs.require_cuda:
        # GPU needs matter on its GPU tier only
        needs = replace(needs, min_vram_gib=0, gpus=0, share_gpu=False)
    base = _target(job, needs, tiers, hosts)
    if base is None:
        return None
    if job.prefer_cuda and not job.needs.require_cuda:
        cuda_needs = replace(job.needs, require_cuda=True)
        preferred = _target(job, cuda_needs, tiers, hosts)
        if preferred is not None and preferred[1] != base[1]:
            return Route(preferred[0], preferred[1], base[0], base[1], preferred[2], base[2])
    return Route(base[0], base[1], constraint=base[2])


def queue_needs(
    queue: str,
    tiers: Iterable[TierSpec],
    constraint_queues: dict[str, tuple[str, Constraint]] | None = None,
) -> Needs | None:
    """What a host must have to take from ``queue`` (None: not a known queue)."""
    cq = (constraint_queues or {}).get(queue)
    floors = {t.name: t.floor for t in tiers}
    if cq is not None:
        tier, c = cq
        return c.needs if c.needs is not None else floors.get(tier)
    return floors.get(queue)


def most_demanding_first(
    queues: Iterable[str],
    tiers: Iterable[TierSpec],
    constraint_queues: dict[str, tuple[str, Constraint]] | None = None,
) -> list[str]:
    """``queues`` sorted by what they demand of a host, most first (ties keep their order)."""
    tiers = tuple(tiers)

    def key(q: str) -> tuple:
        n = queue_needs(q, tiers, constraint_queues)
        return demand(n) if n is not None else (False, 0.0, 0.0, 0)

    return sorted(queues, key=key, reverse=True)


def qualifies(cap: Capability, floor: Needs) -> str | None:
    """None when ``cap`` meets ``floor``; otherwise the reason it does not."""
    if floor.require_cuda and not cap.cuda_devices:
        return "needs a CUDA device; this host has none"
    if floor.require_cuda and cap.max_vram_gib < floor.min_vram_gib:
        return (
            f"needs {floor.min_vram_gib:g} GiB VRAM on one device; "
            f"largest here is {cap.max_vram_gib:g} GiB"
        )
    fit = sum(d.vram_total_gib >= floor.min_vram_gib for d in cap.cuda_devices)
    if floor.gpu_count > 1 and fit < floor.gpu_count:
        return (
            f"needs {floor.gpu_count} GPUs with >= {floor.min_vram_gib:g} GiB; this host has {fit}"
        )
    if cap.ram_total_gib < floor.min_ram_gib:
        return f"needs {floor.min_ram_gib:g} GiB RAM; this host has {cap.ram_total_gib:.1f} GiB"
    if cap.cpu_cores < floor.min_cores:
        return f"needs {floor.min_cores} cores; this host has {cap.cpu_cores}"
    return None


def host_tiers(
    cap: Capability, tiers: Iterable[TierSpec], policy: HostPolicy | None
) -> dict[str, str | None]:
    """Every tier (most demanding first) -> None if the host serves it, else why not."""
    out: dict[str, str | None] = {}
    for tier in ordered(tiers):
        reason = qualifies(cap, tier.floor)
        if (
            reason is None
            and policy is not None
            and policy.tiers is not None
            and tier.name not in policy.tiers
        ):
            reason = f"[hosts.{policy.name}] tiers does not list it"
        out[tier.name] = reason
    return out


def host_queues(
    cap: Capability,
    tiers: Iterable[TierSpec],
    policy: HostPolicy | None,
    constraint_queues: dict[str, tuple[str, Constraint]] | None = None,
) -> list[str]:
    """Queues this host consumes, most demanding first.

    ``constraint_queues`` maps a constraint or need queue name to (tier, constraint); the
    host takes those it is admitted to and meets the needs of, in tiers it serves. They are
    served by what they demand (a need queue's needs, a tier's floor): a big host drains the
    work only it can run before work smaller hosts can take too, and a constraint queue
    comes just before its tier's own queue.
    """
    tiers = tuple(tiers)
    served = [t for t, why in host_tiers(cap, tiers, policy).items() if why is None]
    out: list[str] = []
    for tier in served:
        extra = sorted(
            q for q, (t, c) in (constraint_queues or {}).items() if t == tier and c.admits_host(cap)
        )
        out.extend(extra)
        out.append(tier)
    return most_demanding_first(out, tiers, constraint_queues)
