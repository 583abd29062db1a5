"""Fair-share accounting in Redis: each owner's decayed usage and their share (weight).

A run's end charges its owner (state/lua/owned.lua ``charge_run``, inside the script that
ends the run or right before it), atomically: concurrent workers never lose a charge, and
a run is charged once. Usage is kept as GPU-seconds and core-seconds decayed with a
half-life (FLEET_FAIRSHARE_HALF_LIFE_S, default 7 days; set it alike on workers and
operators); ``routing.fairshare`` turns them into standings and an order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import redis

from core import constants as C
from core.errors import ConfigError
from core.registry import FLEET_FAIRSHARE_HALF_LIFE_S
from routing import fairshare as F

MAX_SHARE = 1e6


def half_life_s(env: Mapping[str, str] | None = None) -> float:
    """FLEET_FAIRSHARE_HALF_LIFE_S, seconds (default 7 days)."""
    return FLEET_FAIRSHARE_HALF_LIFE_S.value(env)


@dataclass(frozen=True)
class OwnerUsage:
    """One owner's decayed usage, in seconds of GPU and of core, as of ``at``."""

    gpu_s: float = 0.0
    core_s: float = 0.0
    at: float = 0.0

    def usage(self) -> F.Usage:
        """As ``routing.fairshare`` weighs it: GPU-hours, core-hours weighted in."""
        return F.Usage(F.charge(self.gpu_s, self.core_s), self.at)

    def decayed(self, now: float, half_life: float) -> OwnerUsage:
        f = F.Usage(1.0, self.at).decayed(now, half_life)
        return OwnerUsage(self.gpu_s * f, self.core_s * f, max(now, self.at))


def parse_usage(raw: str) -> OwnerUsage:
    try:
        g, c, at = (float(x) for x in raw.split())
    except ValueError:
        return OwnerUsage()
    return OwnerUsage(g, c, at)


def read_usage(client: redis.Redis) -> dict[str, OwnerUsage]:
    return {_text(k): parse_usage(_text(v)) for k, v in client.hgetall(C.USAGE_KEY).items()}


def read_shares(client: redis.Redis) -> dict[str, float]:
    out = {}
    for k, v in client.hgetall(C.SHARES_KEY).items():
        try:
            out[_text(k)] = float(v)
        except ValueError:
            continue
    return out


def validate_share(weight: float) -> float:
    if not (0 < weight <= MAX_SHARE):
        raise ConfigError(
            f"share {weight:g}: give a positive weight up to {MAX_SHARE:g} "
            f"(1 is the default; 2 means twice the fair share of an owner with 1)"
        )
    return weight


def set_share(client: redis.Redis, owner: str, weight: float) -> None:
    """``owner``'s share; the default weight (1) is stored as no entry."""
    validate_share(weight)
    if weight == F.DEFAULT_SHARE:
        client.hdel(C.SHARES_KEY, owner)
    else:
        client.hset(C.SHARES_KEY, owner, repr(float(weight)))


@dataclass(frozen=True)
class Standing:
    """One owner as fair share sees them now."""

    owner: str
    share: float
    gpu_hours: float  # decayed
    core_hours: float  # decayed
    standing: float  # decayed weighted usage per share: lower goes first

    def to_dict(self) -> dict:
        return {
            "owner": self.owner,
            "share": self.share,
            "gpu_hours": round(self.gpu_hours, 3),
            "core_hours": round(self.core_hours, 3),
            "standing": round(self.standing, 4),
        }


def standings(
    usage: Mapping[str, OwnerUsage],
    shares: Mapping[str, float],
    now: float,
    half_life: float,
    owners: set[str] = frozenset(),
) -> list[Standing]:
    """Every owner with usage, a share or in ``owners``, least standing first. Pure."""
    names = set(usage) | set(shares) | set(owners)
    used = {o: usage.get(o, OwnerUsage()).usage() for o in names}
    out = []
    for o in F.order(used, shares, now, half_life):
        d = usage.get(o, OwnerUsage()).decayed(now, half_life)
        share = shares.get(o, F.DEFAULT_SHARE)
        out.append(
            Standing(
                o,
                share,
                d.gpu_s / 3600,
                d.core_s / 3600,
                F.standing(used[o], share, now, half_life),
            )
        )
    return out


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else v
