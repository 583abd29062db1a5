"""Population-based training, the model: a PBT search's settings (``PbtConfig``) and the one
decision a member takes at each boundary (``decide``), pure.

A PBT search is a search whose trials are its members. At every ``interval`` steps a member's
last metric value is recorded for that step (a *boundary*); the member is then judged against
the others' latest boundary values at or after that step, as Ray's scheduler is: asynchronous,
nobody waits. A member in the bottom ``quantile`` is *exploited*: it takes a top-quantile
member's checkpoint and that member's values, each perturbed by a factor or, with
``resample_probability``, drawn again from the space. The state and the fence are in
``state.search.pbt`` and ``lua/search_pbt.lua``; the names are Ray's where they mean the same.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

SCHEDULER = "pbt"  # the one scheduler name a manifest may give
DEFAULT_QUANTILE = 0.25  # Ray's quantile_fraction
DEFAULT_RESAMPLE_PROBABILITY = 0.25  # Ray's
DEFAULT_FACTORS = (0.8, 1.2)  # Ray's perturbation_factors, low first
MIN_POPULATION = 2  # a population of one has nobody to copy
MAX_POPULATION = 1_000
MIN_JUDGED = 2  # members at or past a boundary before anyone there is judged (Ray's rule)
# the keys of `scheduler = { ... }` and their kinds (manifest.fields kinds);
# perturbation_factors, a list of numbers, is checked on its own
SCHEDULER_FIELDS = {
    "name": "str",
    "interval": "int",
    "quantile": "num",
    "resample_probability": "num",
}
FACTORS_KEY = "perturbation_factors"


@dataclass(frozen=True)
class PbtConfig:
    """A PBT search's scheduler: how often members are judged, how many are exploited, and
    how their values change."""

    population: int
    interval: int
    quantile: float = DEFAULT_QUANTILE
    resample_probability: float = DEFAULT_RESAMPLE_PROBABILITY
    perturbation_factors: tuple[float, ...] = DEFAULT_FACTORS

    def is_boundary(self, step: int, last_step: int) -> bool:
        """Whether a member is judged at ``step``: every ``interval``, never at its end."""
        return 0 < step < last_step and step % self.interval == 0

    def boundary_at_or_below(self, step: int) -> int:
        """The greatest boundary at or below ``step`` (0 when none yet)."""
        return (step // self.interval) * self.interval

    def text(self) -> str:
        factors = ", ".join(f"{f:g}" for f in self.perturbation_factors)
        return (
            f"pbt(population={self.population}, interval={self.interval}, "
            f"quantile={self.quantile:g}, resample_probability={self.resample_probability:g}, "
            f"perturbation_factors=[{factors}])"
        )

    def to_dict(self) -> dict:
        return {
            "population": self.population,
            "interval": self.interval,
            "quantile": self.quantile,
            "resample_probability": self.resample_probability,
            "perturbation_factors": list(self.perturbation_factors),
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> PbtConfig:
        return cls(
            population=int(d["population"]),
            interval=int(d["interval"]),
            quantile=float(d.get("quantile", DEFAULT_QUANTILE)),
            resample_probability=float(d.get("resample_probability", DEFAULT_RESAMPLE_PROBABILITY)),
            perturbation_factors=tuple(
                float(f) for f in d.get("perturbation_factors", DEFAULT_FACTORS)
            ),
        )


class Kind(str, Enum):
    """What a member's boundary decided."""

    CONTINUE = "continue"  # judged, not in the bottom quantile (or no donor has a checkpoint)
    EXPLOIT = "exploit"  # take the donor's checkpoint and its values, perturbed
    ALONE = "alone"  # too few members at or past the boundary yet: goes on, not judged


@dataclass(frozen=True)
class Standing:
    """One member as a decision sees it: its latest boundary and the metric there, and the step
    of its last synced checkpoint (None: none synced yet)."""

    number: int
    step: int
    value: float
    checkpoint_step: int | None = None
    values: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    """A member's decision at a boundary: its kind, and for an exploit the donor, the new
    values and which keys were drawn again."""

    member: int
    step: int
    kind: Kind
    judged: int = 0  # members it was judged among, itself included
    donor: int | None = None
    donor_value: float | None = None
    donor_checkpoint_step: int | None = None
    old: Mapping[str, Any] = field(default_factory=dict)
    new: Mapping[str, Any] = field(default_factory=dict)
    resampled: tuple[str, ...] = ()
    at: float | None = None  # when it was taken (unix time; the caller sets it)

    def to_dict(self) -> dict:
        d: dict[str, Any] = {
            "member": self.member,
            "step": self.step,
            "kind": self.kind.value,
            "judged": self.judged,
            "at": self.at,
        }
        if self.kind is Kind.EXPLOIT:
            d |= {
                "donor": self.donor,
                "donor_value": self.donor_value,
                "donor_checkpoint_step": self.donor_checkpoint_step,
                "old": dict(self.old),
                "new": dict(self.new),
                "resampled": list(self.resampled),
            }
        return d

    @classmethod
    def from_dict(cls, d: Mapping) -> Decision:
        return cls(
            member=int(d["member"]),
            step=int(d["step"]),
            kind=Kind(d["kind"]),
            judged=int(d.get("judged", 0)),
            donor=d.get("donor"),
            donor_value=d.get("donor_value"),
            donor_checkpoint_step=d.get("donor_checkpoint_step"),
            old=dict(d.get("old") or {}),
            new=dict(d.get("new") or {}),
            resampled=tuple(d.get("resampled") or ()),
            at=d.get("at"),
        )


def should_pause(step: int, queued_steps: list[int]) -> bool:
    """Whether a member that goes on at boundary ``step`` yields its host: a member waiting in
    the queue is behind it (``queued_steps``: the latest boundary of each member queued, 0 for
    one never started). Members behind run first when the population exceeds the hosts."""
    return any(q < step for q in queued_steps)


def requeue_wire(base: int, step: int, interval: int, lowest: int) -> int:
    """The wire priority (0 is served first) a member goes back to its queue at, at ``step``:
    its job's own (``base``, a member never started waits there) plus one per boundary it has
    passed, at most ``lowest``: of the members waiting, those behind are taken first."""
    return min(base + step // interval, max(base, lowest))


def rng(seed: int, member: int, step: int) -> random.Random:
    """The draws of one member's decision at one boundary: the same on every replay."""
    draws = hashlib.sha256(f"pbt:{seed}:{member}:{step}".encode()).digest()
    return random.Random(int.from_bytes(draws[:8], "big"))
