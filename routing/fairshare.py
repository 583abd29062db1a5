"""Fair share between the people who publish to one fleet (Slurm's classic fair-share).

Each owner's usage (GPU-hours and core-hours, weighted into one figure) decays with a
half-life, so last month's sweep counts for little; divided by the owner's share (weight,
default 1) it orders owners whose jobs wait for the same hosts: least used first. Pure: the
worker's transport and ``fleet why`` feed it numbers read from Redis.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from core.constants import FAIRSHARE_HALF_LIFE_S as HALF_LIFE_S  # FLEET_FAIRSHARE_HALF_LIFE_S

CORE_HOUR_WEIGHT = 1 / 16  # sixteen core-hours weigh as much as one GPU-hour
DEFAULT_SHARE = 1.0


@dataclass(frozen=True)
class Usage:
    """One owner's decayed usage as of ``at`` (seconds since the epoch)."""

    value: float = 0.0
    at: float = 0.0

    def decayed(self, now: float, half_life_s: float = HALF_LIFE_S) -> float:
        if now <= self.at or self.value == 0:
            return self.value
        return self.value * math.pow(0.5, (now - self.at) / half_life_s)

    def add(self, amount: float, now: float, half_life_s: float = HALF_LIFE_S) -> Usage:
        return Usage(self.decayed(now, half_life_s) + amount, max(now, self.at))


def charge(gpu_s: float, core_s: float) -> float:
    """A run's cost in GPU-hours (core-hours weighted by CORE_HOUR_WEIGHT)."""
    return (gpu_s + core_s * CORE_HOUR_WEIGHT) / 3600.0


def standing(usage: Usage, share: float, now: float, half_life_s: float = HALF_LIFE_S) -> float:
    """Lower goes first: decayed usage per unit of share."""
    return usage.decayed(now, half_life_s) / max(share, 1e-9)


def order(
    owners: Mapping[str, Usage],
    shares: Mapping[str, float],
    now: float,
    half_life_s: float = HALF_LIFE_S,
) -> list[str]:
    """Owners in fair-share order: least used per share first, ties by name."""
    return sorted(
        owners,
        key=lambda o: (standing(owners[o], shares.get(o, DEFAULT_SHARE), now, half_life_s), o),
    )


def explain(
    owner: str,
    owners: Mapping[str, Usage],
    shares: Mapping[str, float],
    now: float,
    half_life_s: float = HALF_LIFE_S,
) -> str | None:
    """Why ``owner``'s jobs wait for others' (None when they go first)."""
    ranked = order(owners, shares, now, half_life_s)
    if not ranked or ranked[0] == owner:
        return None
    first = ranked[0]
    days = half_life_s / 86400

    def used(o: str) -> str:  # a few minutes of GPU time is not "0.0"
        h = owners[o].decayed(now, half_life_s)
        return f"{h:.1f}" if h >= 0.1 or h == 0 else f"{h:.3f}"

    return (
        f"{owner} has used {used(owner)} GPU-h (half-life {days:g} d); {first} "
        f"{used(first)} GPU-h: {first}'s jobs go first"
    )
